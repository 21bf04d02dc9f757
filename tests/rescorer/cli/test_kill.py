"""``kill -9`` during the toolkit's writes, and special files as targets (issue 21).

Each write runs as a subprocess (``python -m rescorer ...``, or a loop of checkpoint saves)
killed with SIGKILL at seeded points: at a random time after the start, at a random time after
its temporary appeared (the write phase), or just after the swap. The target must then hold
exactly the previous set or exactly the new set (compared file by file with uninterrupted
reference runs), never a mix, and a checkpoint folder must load.

What a ``kill -9`` can leave (it runs no cleanup; see :mod:`rescorer.core.output`):

* beside the target, one hidden ``.<name>.<pid>.<8 chars>.rescorer-tmp``: the folder (or file)
  that was being written, or, when the kill came after the atomic exchange, the previous set
  that was being deleted. The target itself is untouched before the exchange and complete
  after it. Inside that folder there may be the half-written temporaries of its files.
* only where the system has no ``renameat2`` exchange (two renames instead), also a
  ``.<name>.<pid>.<8 chars>.rescorer-old`` holding the previous set; a kill between the two
  renames leaves the target missing until the next write of it (or a training resume) renames
  it back, and ``load_checkpoint`` reads it meanwhile. That window is tested by injecting the
  crash between the renames.

The next write of the same target (or of any other in the same folder, see
``test_reliability.py``) removes every such leftover whose process is gone (a live process's are
left alone); readers never look at these hidden names. The tests assert both.
"""

from __future__ import annotations

import json
import logging
import os
import random
import shutil
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner

from rescorer.cli.main import main
from rescorer.core.output import OLD_SUFFIX, TEMP_SUFFIX, temp_pattern
from rescorer.formats import read_nbest
from tests.paths import NBEST_FIXTURES, REPO

logger = logging.getLogger(__name__)

ENV = {**os.environ, "PYTHONPATH": str(REPO)}
SEEDS = range(6)
"""Kills per command; each seed picks where its kill lands."""

Snapshot = dict[str, bytes | None]


# -- helpers ------------------------------------------------------------------------------------


def snapshot(root: Path) -> Snapshot:
    """Every entry under ``root``: its relative path -> its bytes (None for a folder)."""
    out: Snapshot = {}
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        out[rel] = None if path.is_dir() else path.read_bytes()
    return out


def leftovers(parent: Path, name: str) -> dict[str, int]:
    """Temporaries of target ``name`` in ``parent``: entry name -> pid of the run that made it."""
    pattern = temp_pattern(name)
    found = {}
    for entry in os.listdir(parent):
        m = pattern.match(entry)
        if m:
            found[entry] = int(m.group(1))
    return found


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "rescorer", "-q", *args]


@dataclass(frozen=True)
class Kill:
    """Where one kill landed."""

    # The process was still running when the signal was sent (else it had finished).
    killed: bool
    # A temporary of the target existed when the signal was sent (the write phase had begun).
    during_write: bool
    # The process that was killed.
    pid: int
    # Its exit status (-9 when killed).
    returncode: int


def run_and_kill(cmd: list[str], target: Path, plan: str, delay: float) -> Kill:
    """Run ``cmd`` and SIGKILL it: ``plan`` "start" waits ``delay`` s after the start, "write"
    ``delay`` s after a temporary of ``target`` appears, "swap" kills as soon as ``target`` is
    another folder (the exchange is done; the previous set is being deleted)."""
    inode = target.stat().st_ino
    proc = subprocess.Popen(cmd, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def writing() -> bool:  # this run's temporary exists (not one an earlier kill left)
        return proc.pid in leftovers(target.parent, target.name).values()

    t0 = time.monotonic()
    wait_until: float | None = t0 + delay if plan == "start" else None
    while proc.poll() is None:
        now = time.monotonic()
        if plan == "write" and wait_until is None and writing():
            wait_until = now + delay
        if plan == "swap" and target.stat().st_ino != inode:
            wait_until = now
        if wait_until is not None and now >= wait_until:
            during = writing()
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            return Kill(proc.returncode == -signal.SIGKILL, during, proc.pid, proc.returncode)
        if now - t0 > 120:
            proc.kill()
            pytest.fail(f"{cmd} did not finish in 120 s")
        time.sleep(0.0005)
    stderr = proc.stderr.read().decode() if proc.stderr else ""
    assert proc.returncode == 0, stderr
    return Kill(False, False, proc.pid, proc.returncode)


def plans(seed: int, write_seconds: float, run_seconds: float) -> tuple[str, float]:
    """Seed 0 and 3: a time after the start; 1: just after the swap; 2: as soon as the write
    begins (that kill leaves a temporary for the next runs to clean); the others: a time in the
    write phase (most kills land there, where a mix could happen)."""
    rng = random.Random(seed)
    if seed in (0, 3):
        return "start", rng.uniform(0.0, run_seconds)
    if seed == 1:
        return "swap", 0.0
    if seed == 2:
        return "write", 0.0
    return "write", rng.uniform(0.0, write_seconds)


def timed_run(cmd: list[str], target: Path) -> tuple[float, float]:
    """Run ``cmd`` to the end: (seconds its temporary existed, seconds it ran)."""
    proc = subprocess.Popen(cmd, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    t0 = time.monotonic()
    seen = gone = None
    while proc.poll() is None:
        writing = proc.pid in leftovers(target.parent, target.name).values()
        if seen is None and writing:
            seen = time.monotonic()
        if seen is not None and gone is None and not writing:
            gone = time.monotonic()
        time.sleep(0.0005)
    end = time.monotonic()
    assert proc.returncode == 0, proc.stderr.read().decode() if proc.stderr else ""
    assert seen is not None, "the run's temporary was never seen"
    return (gone or end) - seen, end - t0


def kill_repeatedly(
    new_cmd: list[str],
    target: Path,
    old: Snapshot,
    new: Snapshot,
    restore: Callable[[], None],
    check: Callable[[], None] = lambda: None,
) -> list[Kill]:
    """Kill ``new_cmd`` at each seed's point, the target reset to ``old`` before each run;
    ``check()`` runs after each kill (a reader beside the leftovers)."""
    write_seconds, run_seconds = timed_run(new_cmd, target)
    assert snapshot(target) == new
    kills = []
    killed_pids = set()
    cleaned = 0  # runs that found leftovers of killed runs and removed them
    for seed in SEEDS:
        restore()
        assert snapshot(target) == old
        before = leftovers(target.parent, target.name)
        plan, delay = plans(seed, write_seconds, run_seconds)
        kill = run_and_kill(new_cmd, target, plan, delay)
        kills.append(kill)
        got = snapshot(target)
        assert got in (old, new), f"seed {seed} ({plan}, {delay:.3f} s): a mix of two sets"
        if not kill.killed:
            assert got == new
        check()
        left = leftovers(target.parent, target.name)
        if kill.during_write:  # the run got to its write: the earlier leftovers are gone
            assert set(left.values()) <= {kill.pid}, (seed, before, left)
            cleaned += bool(before)
        assert set(left.values()) <= killed_pids | {kill.pid}, left
        killed_pids.add(kill.pid)
    # The kills exercised the write: at least one landed while the temporary existed.
    assert any(k.killed and k.during_write for k in kills), kills
    # The next successful run removes what the killed ones left and writes the new set.
    restore()
    cleaned += bool(leftovers(target.parent, target.name))
    subprocess.run(new_cmd, env=ENV, check=True, capture_output=True)
    assert snapshot(target) == new
    assert leftovers(target.parent, target.name) == {}
    assert cleaned, f"no kill left anything to clean: {kills}"
    logger.info("%s: %s; %d run(s) cleaned up after killed ones", target.name, kills, cleaned)
    return kills


def sample_espnet(src: Path, dst: Path, first: int, count: int, ranks: int) -> Path:
    """Utterances ``first`` to ``first + count`` of a real ESPnet set, ``ranks`` hypotheses
    each, with their references."""
    lines = (src / "raw_hypotheses" / "1best_recog" / "text").read_text(encoding="utf-8")
    keep = {line.split()[0] for line in lines.splitlines()[first : first + count]}
    for k in range(1, ranks + 1):
        folder = dst / "raw_hypotheses" / f"{k}best_recog"
        folder.mkdir(parents=True)
        for name in ("text", "score", "scores"):
            text = (src / "raw_hypotheses" / f"{k}best_recog" / name).read_text(encoding="utf-8")
            kept = [line for line in text.splitlines() if line.split(maxsplit=1)[0] in keep]
            (folder / name).write_text("\n".join(kept) + "\n", encoding="utf-8")
    (dst / "references").mkdir()
    trn = (src / "references" / "ref_wer.trn").read_text(encoding="utf-8").splitlines()
    kept = [line for line in trn if line.rsplit("(", 1)[1].rstrip(")").split("-", 2)[2] in keep]
    (dst / "references" / "ref_wer.trn").write_text("\n".join(kept) + "\n", encoding="utf-8")
    return dst


def write_weights(path: Path, features: dict[str, float], length: float) -> Path:
    weights = {"format": "rescorer-weights", "version": 1, "features": features, "length": length}
    path.write_text(json.dumps(weights) + "\n", encoding="utf-8")
    return path


# -- rescore --out DIR and convert --to espnet ----------------------------------------------------


@pytest.mark.bad_input("interrupted")
@pytest.mark.slow
def test_kill_rescore_leaves_the_old_or_the_new_set(espnet_dir: Path, tmp_path: Path) -> None:
    nbest = sample_espnet(espnet_dir / "dev_clean", tmp_path / "set", 0, 400, 30)
    ref = nbest / "references" / "ref_wer.trn"
    wa = write_weights(tmp_path / "a.json", {"decoder": 0.2, "ctc": 1.0, "lm": 0.0}, 0.0)
    wb = write_weights(tmp_path / "b.json", {"decoder": 1.0, "ctc": 0.5, "lm": 0.3}, 0.5)
    # The old set was written with references (wer.txt), the new one without: a run that wrote
    # file by file in place would leave a wer.txt that no longer describes the output.
    seed_dir = tmp_path / "old"
    old_cmd = cli("rescore", "--nbest", str(nbest), "--ref", str(ref), "--weights", str(wa))
    subprocess.run([*old_cmd, "--out", str(seed_dir)], env=ENV, check=True, capture_output=True)
    (seed_dir / "notes.txt").write_text("mine, not the set's\n", encoding="utf-8")
    old = snapshot(seed_dir)
    assert sorted(old) == ["1best.trn", "1best.txt", "nbest.jsonl", "notes.txt", "wer.txt"]

    target = tmp_path / "work" / "out"
    target.parent.mkdir()

    def restore() -> None:
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(seed_dir, target)

    new_cmd = cli("rescore", "--nbest", str(nbest), "--weights", str(wb), "--out", str(target))
    restore()
    subprocess.run(new_cmd, env=ENV, check=True, capture_output=True)
    new = snapshot(target)
    assert sorted(new) == ["1best.trn", "1best.txt", "nbest.jsonl", "notes.txt"]  # notes kept
    for name in ("1best.trn", "1best.txt", "nbest.jsonl"):  # every file differs: a mix shows
        assert old[name] != new[name], name
    kill_repeatedly(new_cmd, target, old, new, restore)


@pytest.mark.bad_input("interrupted")
@pytest.mark.slow
def test_kill_convert_to_espnet_over_an_older_set(espnet_dir: Path, tmp_path: Path) -> None:
    older = sample_espnet(espnet_dir / "dev_clean", tmp_path / "older", 0, 200, 30)
    newer = sample_espnet(espnet_dir / "dev_clean", tmp_path / "newer", 200, 400, 20)
    # The folder already holds an older output set (30 ranks of other utterances), a file of
    # the user's inside raw_hypotheses/ and references beside it.
    seed_dir = tmp_path / "seed"
    subprocess.run(
        cli("convert", "--nbest", str(older), "--to", "espnet", "--out", str(seed_dir)),
        env=ENV,
        check=True,
        capture_output=True,
    )
    (seed_dir / "raw_hypotheses" / "notes.txt").write_text("kept\n", encoding="utf-8")
    shutil.copytree(older / "references", seed_dir / "references")
    old = snapshot(seed_dir)

    out = tmp_path / "work" / "out"
    out.parent.mkdir()
    target = out / "raw_hypotheses"  # the set that is swapped in

    def restore() -> None:  # the seed's entries back; what killed runs left stays
        for entry in out.iterdir() if out.exists() else ():
            if entry.name not in leftovers(out, target.name):
                (shutil.rmtree if entry.is_dir() else os.remove)(entry)
        shutil.copytree(seed_dir, out, dirs_exist_ok=True)

    new_cmd = cli("convert", "--nbest", str(newer), "--to", "espnet", "--out", str(out))
    restore()
    subprocess.run(new_cmd, env=ENV, check=True, capture_output=True)
    new_all = snapshot(out)
    ranks = {p.split("/")[1] for p in new_all if p.count("/") == 2 and "best_recog" in p}
    assert len(ranks) == 20 and "raw_hypotheses/30best_recog" not in new_all
    assert new_all["raw_hypotheses/notes.txt"] == b"kept\n"
    assert new_all["references/ref_wer.trn"] == old["references/ref_wer.trn"]
    assert old["raw_hypotheses/1best_recog/text"] != new_all["raw_hypotheses/1best_recog/text"]
    old_set = snapshot(seed_dir / "raw_hypotheses")
    new_set = snapshot(target)
    lists = (read_nbest(seed_dir), read_nbest(out))

    def check() -> None:  # the folder reads as one of the two sets, leftovers or not
        assert read_nbest(out) in lists

    kill_repeatedly(new_cmd, target, old_set, new_set, restore, check)
    assert snapshot(out) == new_all  # and nothing else of the folder changed


# -- checkpoints ----------------------------------------------------------------------------------

CKPT_BASE = [f"w{i}" for i in range(2000)]


def ckpt_model(seed: int):  # type: ignore[no-untyped-def]
    """A model of a few MB (each save takes measurable time) and its optimizer after a step."""
    import torch

    from rescorer.lm_models.lstm.model import ContextLSTM, LSTMConfig

    torch.manual_seed(seed)
    model = ContextLSTM(LSTMConfig(vocab_size=len(CKPT_BASE) + 4, embed_dim=64, hidden_dim=128))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    loss = sum((p**2).sum() for p in model.parameters())
    loss.backward()  # type: ignore[union-attr]
    optimizer.step()
    return model, optimizer


def ckpt_vocab(i: int) -> list[str]:
    return ["<unk>", "<s>", "</s>", *CKPT_BASE, f"step{i}"]


def save_loop(root: str, start: int) -> None:
    """What the trainer does after each epoch (best/, then last/), forever, alternating two
    models; save ``i`` (from ``start + 1`` on) writes ``step{i}`` into the vocabulary and ``i``
    into the metadata."""
    from rescorer.lm_models.checkpoint import save_checkpoint
    from rescorer.lm_models.lstm.train import _save_last

    folder = Path(root)
    pair = [ckpt_model(0), ckpt_model(1)]
    print("ready", flush=True)
    i = start
    while True:
        i += 1
        model, optimizer = pair[i % 2]
        save_checkpoint(folder / "best", model, ckpt_vocab(i), {"i": i})
        _save_last(folder / "last", model, optimizer, ckpt_vocab(i), {"i": i}, {"i": i}, {})


def check_checkpoint(folder: Path, pair: list) -> int:  # type: ignore[type-arg]
    """The checkpoint at ``folder`` loads and is one save's whole set; returns that save's i."""
    import torch

    from rescorer.lm_models.checkpoint import load_checkpoint, load_optimizer_state

    model, vocab, meta = load_checkpoint(folder)
    assert meta is not None
    i = meta["i"]
    assert vocab == ckpt_vocab(i)
    ref_model, ref_optimizer = pair[i % 2]
    want = ref_model.state_dict()
    assert list(model.state_dict()) == list(want)
    for name, tensor in model.state_dict().items():
        torch.testing.assert_close(tensor, want[name], atol=0, rtol=0, msg=name)
    if folder.name == "last":
        assert json.loads((folder / "trainer.json").read_text()) == {"i": i}
        _, optimizer = ckpt_model(0)
        load_optimizer_state(optimizer, folder, torch.device("cpu"))
        got = [s["exp_avg"] for s in optimizer.state_dict()["state"].values()]
        want = [s["exp_avg"] for s in ref_optimizer.state_dict()["state"].values()]
        for a, b in zip(got, want, strict=True):
            torch.testing.assert_close(a, b, atol=0, rtol=0)
    return i


@pytest.mark.bad_input("interrupted")
@pytest.mark.slow
def test_kill_during_checkpoint_saves(tmp_path: Path) -> None:
    from rescorer.lm_models.checkpoint import save_checkpoint
    from rescorer.lm_models.lstm.train import _save_last

    pair = [ckpt_model(0), ckpt_model(1)]
    model, optimizer = pair[0]  # the checkpoints of an earlier epoch: save 0
    save_checkpoint(tmp_path / "best", model, ckpt_vocab(0), {"i": 0})
    _save_last(tmp_path / "last", model, optimizer, ckpt_vocab(0), {"i": 0}, {"i": 0}, {})
    outcomes = []
    for seed in SEEDS:
        start = 1000 * (seed + 1)  # this run's saves are start + 1, start + 2, ...
        script = (
            "from tests.rescorer.cli.test_kill import save_loop; "
            f"save_loop({str(tmp_path)!r}, {start})"
        )
        proc = subprocess.Popen(
            [sys.executable, "-c", script], env=ENV, stdout=subprocess.PIPE, text=True
        )
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        time.sleep(random.Random(seed).uniform(0.05, 1.0))
        proc.send_signal(signal.SIGKILL)
        assert proc.wait() == -signal.SIGKILL
        best = check_checkpoint(tmp_path / "best", pair)
        last = check_checkpoint(tmp_path / "last", pair)
        # best/ is saved first, then last/: last/ is best/'s save or the one before it
        assert last in (best - 1, best) or (best <= start + 1 and last < start), (best, last)
        left = {**leftovers(tmp_path, "best"), **leftovers(tmp_path, "last")}
        assert set(left.values()) <= {proc.pid}, left  # the run's saves cleaned earlier ones
        outcomes.append((best, last, sorted(left)))
    logger.info("checkpoint kills (best, last, leftovers): %s", outcomes)
    assert any(left for _, _, left in outcomes), f"no kill landed in a write: {outcomes}"
    # the next save (of each folder) removes what the killed run left
    model, optimizer = pair[1]
    save_checkpoint(tmp_path / "best", model, ckpt_vocab(1), {"i": 1})
    _save_last(tmp_path / "last", model, optimizer, ckpt_vocab(1), {"i": 1}, {"i": 1}, {})
    assert sorted(os.listdir(tmp_path)) == ["best", "last"]
    assert check_checkpoint(tmp_path / "best", pair) == check_checkpoint(tmp_path / "last", pair)


CRASH_BETWEEN_RENAMES = """
import os, sys
from pathlib import Path
from rescorer.core import output

output._exchange = lambda a, b: False  # a system without renameat2: two renames
rename = os.rename

def crash_before_second(src, dst):
    if Path(src).name.endswith(output.TEMP_SUFFIX) and Path(dst).name == sys.argv[1]:
        os._exit(137)  # as kill -9 would: no cleanup
    rename(src, dst)

os.rename = crash_before_second
"""


def crash_between_renames(name: str, body: str) -> None:
    """Run ``body`` in a process that dies between the two renames that swap in ``name``."""
    code = CRASH_BETWEEN_RENAMES + body
    proc = subprocess.run([sys.executable, "-c", code, name], env=ENV, capture_output=True)
    assert proc.returncode == 137, proc.stderr.decode()


@pytest.mark.bad_input("interrupted")
def test_checkpoint_lost_between_two_renames_loads_and_is_put_back(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from rescorer.lm_models.checkpoint import load_checkpoint, save_checkpoint

    small = ["<unk>", "<s>", "</s>", "a", "b"]
    body = f"""
import torch
from rescorer.lm_models.checkpoint import save_checkpoint
from rescorer.lm_models.lstm.model import ContextLSTM, LSTMConfig
torch.manual_seed(1)
save_checkpoint({str(tmp_path / "ckpt")!r}, ContextLSTM(LSTMConfig(vocab_size=5)), {small!r},
                {{"i": 2}})
"""
    import torch

    from rescorer.lm_models.lstm.model import ContextLSTM, LSTMConfig

    torch.manual_seed(0)
    save_checkpoint(tmp_path / "ckpt", ContextLSTM(LSTMConfig(vocab_size=5)), small, {"i": 1})
    crash_between_renames("ckpt", body)
    assert not (tmp_path / "ckpt").exists()  # the window: no checkpoint under its name
    left = leftovers(tmp_path, "ckpt")
    assert sorted(n.rsplit(".", 1)[1] for n in left) == sorted(
        s.lstrip(".") for s in (OLD_SUFFIX, TEMP_SUFFIX)
    )
    with caplog.at_level("WARNING", logger="rescorer.lm_models.checkpoint"):
        _, _, meta = load_checkpoint(tmp_path / "ckpt")
    assert meta == {"i": 1}  # the previous checkpoint, read where the first rename put it
    assert "killed while replacing it" in caplog.text
    # the next save puts the previous set back first, then replaces it; nothing is left
    torch.manual_seed(3)
    save_checkpoint(tmp_path / "ckpt", ContextLSTM(LSTMConfig(vocab_size=5)), small, {"i": 3})
    assert sorted(os.listdir(tmp_path)) == ["ckpt"]
    assert load_checkpoint(tmp_path / "ckpt")[2] == {"i": 3}


@pytest.mark.bad_input("interrupted")
@pytest.mark.slow
def test_training_resumes_after_a_crash_between_the_renames_of_last(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from rescorer.lm_models.checkpoint import load_checkpoint
    from rescorer.lm_models.lstm.train import train
    from tests.lm_models.lstm.test_train import config, write_corpus

    corpus = write_corpus(tmp_path / "c.jsonl")
    straight = train(config(corpus, epochs=3), tmp_path, tmp_path / "a", progress=False)
    out = tmp_path / "b"
    train(config(corpus, epochs=2), tmp_path, out, progress=False)
    # Epoch 3 dies between moving last/ aside and moving the new last/ in.
    body = f"""
from pathlib import Path
from rescorer.lm_models.lstm.train import train
from tests.lm_models.lstm.test_train import config
train(config(Path({str(corpus)!r}), epochs=3), Path({str(tmp_path)!r}), Path({str(out)!r}),
      progress=False)
"""
    crash_between_renames("last", body)
    assert not (out / "last").exists()
    assert {n.rsplit(".", 1)[1] for n in leftovers(out, "last")} == {"rescorer-old", "rescorer-tmp"}
    with caplog.at_level("INFO", logger="rescorer.lm_models.lstm.train"):
        resumed = train(config(corpus, epochs=3), tmp_path, out, progress=False)
    # epoch 2's last/ was put back and training went on from it (not from scratch)
    assert "resuming from" in caplog.text and "after epoch 2" in caplog.text
    assert [e.epoch for e in resumed.epochs] == [1, 2, 3]
    assert [e.dev_ppl for e in resumed.epochs] == pytest.approx(
        [e.dev_ppl for e in straight.epochs]
    )
    assert json.loads((out / "last" / "trainer.json").read_text())["epoch"] == 3
    load_checkpoint(out / "last")
    assert leftovers(out, "last") == {} and leftovers(out, "best") == {}


# -- special files as targets ---------------------------------------------------------------------


@pytest.fixture()
def small_weights(tmp_path: Path) -> Path:
    return write_weights(tmp_path / "w.json", {"decoder": 1.0, "ctc": 0.5, "lm": 0.3}, 0.5)


def _targets(tmp_path: Path) -> dict[str, Path]:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    links = tmp_path / "links"
    links.mkdir()
    (links / "to-null").symlink_to("/dev/null")
    (links / "to-fifo").symlink_to(fifo)
    return {
        "fifo": fifo,
        "dev-null": Path("/dev/null"),
        "link-to-dev-null": links / "to-null",
        "link-to-fifo": links / "to-fifo",
    }


COMMANDS = {
    "rescore": ["rescore", "--nbest", "{nbest}", "--weights", "{weights}", "--out", "{out}"],
    "convert-espnet": ["convert", "--nbest", "{nbest}", "--to", "espnet", "--out", "{out}"],
    "convert-jsonl": ["convert", "--nbest", "{nbest}", "--to", "jsonl", "--out", "{out}"],
}


@pytest.mark.bad_input("silent")
@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize("kind", ["fifo", "dev-null", "link-to-dev-null", "link-to-fifo"])
def test_special_file_targets_are_refused_and_untouched(
    command: str, kind: str, tmp_path: Path, small_weights: Path
) -> None:
    target = _targets(tmp_path)[kind]
    fifo = tmp_path / "fifo"
    # A reader on the FIFO, so that a wrong implementation's write would not block but be seen.
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    before = os.lstat(target)
    link = os.readlink(target) if target.is_symlink() else None
    paths = {"nbest": NBEST_FIXTURES / "espnet_small", "weights": small_weights, "out": target}
    try:
        result = CliRunner().invoke(main, [a.format(**paths) for a in COMMANDS[command]])
        try:
            written = os.read(reader, 1 << 16)
        except BlockingIOError:
            written = b""
    finally:
        os.close(reader)
    assert result.exit_code == 2, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and str(target) in errors[0], result.output
    assert "Usage:" not in result.output
    assert written == b""
    after = os.lstat(target)
    assert stat.S_IFMT(after.st_mode) == stat.S_IFMT(before.st_mode)
    assert (after.st_ino, after.st_dev) == (before.st_ino, before.st_dev)
    assert (os.readlink(target) if target.is_symlink() else None) == link
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
    if target.parent != Path("/dev"):
        assert leftovers(target.parent, target.name) == {}
        assert leftovers(target.parent, Path(os.path.realpath(target)).name) == {}


@pytest.mark.bad_input("silent")
def test_links_to_a_file_or_folder_are_written_through(tmp_path: Path, small_weights: Path) -> None:
    real_file = tmp_path / "real.jsonl"
    real_file.write_text("old\n", encoding="utf-8")
    real_dir = tmp_path / "real_dir"
    real_dir.mkdir()
    (real_dir / "notes.txt").write_text("kept\n", encoding="utf-8")
    file_link, dir_link = tmp_path / "file-link", tmp_path / "dir-link"
    file_link.symlink_to(real_file)
    dir_link.symlink_to(real_dir)
    nbest = str(NBEST_FIXTURES / "espnet_small")
    runner = CliRunner()
    result = runner.invoke(
        main, ["convert", "--nbest", nbest, "--to", "jsonl", "--out", str(file_link)]
    )
    assert result.exit_code == 0, result.output
    args = ["rescore", "--nbest", nbest, "--weights", str(small_weights), "--out", str(dir_link)]
    result = runner.invoke(main, args)
    assert result.exit_code == 0, result.output
    # the links stay links; the files they point to hold the output
    assert file_link.is_symlink() and os.readlink(file_link) == str(real_file)
    assert dir_link.is_symlink() and os.readlink(dir_link) == str(real_dir)
    assert real_file.read_text(encoding="utf-8").startswith('{"utt"')
    assert sorted(p.name for p in real_dir.iterdir()) == [
        "1best.trn",
        "1best.txt",
        "nbest.jsonl",
        "notes.txt",
    ]
    assert sorted(os.listdir(tmp_path)) == sorted(
        ["real.jsonl", "real_dir", "file-link", "dir-link", "w.json"]
    )
