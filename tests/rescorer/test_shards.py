"""Sharded scoring: the split by id hash, `score --shard` + `merge`, `--ray` and torchrun.

Every way of scoring in parts must write the file one `rescorer score` process writes: byte for
byte with KenLM, to float rounding with a batched neural model.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner, Result

from rescorer.cli.main import main
from rescorer.formats.json_formats import read_jsonl
from rescorer.nbest import Hypothesis, NBest, NBestList
from rescorer.shards import Shard, merge_parts, read_part, shard_index, take_shard
from tests.conftest import write_espnet_set
from tests.paths import REPO

WORDS = ["a", "b", "c", "zz"]  # "c" and "zz" are not in the tiny bigram: OOV features vary


def run(args: list[object]) -> Result:
    return CliRunner().invoke(main, ["-q", *map(str, args)], catch_exceptions=False)


def random_set(root: Path, n: int = 40, seed: int = 0) -> Path:
    rng = random.Random(seed)
    utts = []
    for i in range(n):
        hyps = []
        for _ in range(rng.randint(1, 4)):
            words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(0, 6)))
            hyps.append((words, -rng.random() * 10, -rng.random() * 10, -rng.random() * 10))
        utts.append((f"spk{i % 3}-ch-{i:04d}", hyps))
    write_espnet_set(root, utts)
    (root / "ref.txt").write_text("".join(f"{utt} a b {i % 2 * 'c'}\n" for i, (utt, _) in
                                          enumerate(utts)))  # fmt: skip
    return root


# -- the split --------------------------------------------------------------------------------


def test_shards_are_a_partition_of_the_ids_and_stable() -> None:
    ids = [f"utt-{i}" for i in range(2000)]
    for count in (1, 2, 3, 7):
        seen = [shard_index(u, count) for u in ids]
        assert set(seen) == set(range(1, count + 1))  # every shard gets some of 2,000 ids
        for u, k in zip(ids, seen, strict=True):  # each id in exactly its one shard
            assert [Shard(j, count).holds(u) for j in range(1, count + 1)].count(True) == 1
            assert Shard(k, count).holds(u)
    # Pinned: the same shard on every run, machine and Python (hash() is salted per process).
    assert [shard_index(u, 4) for u in ["1272-128104-0000", "1272-128104-0001", "a", "é"]] == [
        3, 3, 4, 4
    ]  # fmt: skip
    # ... whatever else is in the set, in whatever order: a shard depends on the id alone.
    lists = [NBestList(u, (Hypothesis(("w",)),)) for u in ids[:300]]
    forward, _ = take_shard(NBest(lists), Shard(2, 3))
    backward, _ = take_shard(NBest(lists[::-1][:200]), Shard(2, 3))
    assert set(backward) == set(forward) & set(ids[100:300])


def test_take_shard_keeps_order_positions_and_references() -> None:
    lists = [NBestList(f"u{i}", (Hypothesis(("w",)),)) for i in range(50)]
    nbest = NBest(lists, {f"u{i}": ("r", str(i)) for i in range(50)})
    part, positions = take_shard(nbest, Shard(1, 2))
    assert list(part) == [f"u{p}" for p in positions] and list(positions) == sorted(positions)
    assert part.references == {u: nbest.references[u] for u in part}  # type: ignore[index]


@pytest.mark.parametrize("text", ["0/2", "3/2", "2", "a/b", "1/0", "-1/2", ""])
def test_bad_shard_specs_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="expected a shard K/N"):
        Shard.parse(text)


# -- score --shard and merge ------------------------------------------------------------------


@pytest.fixture()
def scored(tmp_path: Path, tiny_arpa: Path) -> dict[str, Path]:
    """One set scored by one process, and its 3 shards scored separately."""
    nbest = random_set(tmp_path / "set")
    lm = f"bigram=kenlm:{tiny_arpa}"
    ref = ["--ref", nbest / "ref.txt"]
    whole = tmp_path / "whole.jsonl"
    assert run(["score", "--nbest", nbest, "--lm", lm, *ref, "--out", whole]).exit_code == 0
    out = {"nbest": nbest, "whole": whole, "lm": Path(lm), "ref": ref[1]}
    for k in (1, 2, 3):
        part = tmp_path / f"part{k}.jsonl"
        args = ["score", "--nbest", nbest, "--lm", lm, *ref, "--shard", f"{k}/3", "--out", part]
        result = run(args)
        assert result.exit_code == 0, result.output
        assert f"shard {k}/3" in result.output
        out[f"part{k}"] = part
    return out


def test_merged_shards_are_the_single_process_file(scored: dict[str, Path], tmp_path: Path) -> None:
    merged = tmp_path / "merged.jsonl"
    parts = [scored["part3"], scored["part1"], scored["part2"]]  # any order
    result = run(["merge", *parts, "--out", merged])
    assert result.exit_code == 0, result.output
    assert merged.read_bytes() == scored["whole"].read_bytes()
    sizes = [len(read_jsonl(scored[f"part{k}"])) for k in (1, 2, 3)]
    assert sum(sizes) == 40 and all(0 < s < 40 for s in sizes)
    whole = read_jsonl(scored["whole"])
    assert whole.references is not None and len(whole.references) == 40  # refs carried


def _merge_error(parts: list[Path], tmp_path: Path) -> str:
    result = run(["merge", *parts, "--out", tmp_path / "m.jsonl"])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and len(result.output.strip().splitlines()) == 1
    assert not (tmp_path / "m.jsonl").exists()
    return result.output


def test_merge_refuses_a_missing_shard(scored: dict[str, Path], tmp_path: Path) -> None:
    out = _merge_error([scored["part1"], scored["part3"]], tmp_path)
    assert "shard 2/3 missing" in out


def test_merge_refuses_a_shard_given_twice(scored: dict[str, Path], tmp_path: Path) -> None:
    copy = tmp_path / "copy.jsonl"
    shutil.copy(scored["part2"], copy)
    shutil.copy(f"{scored['part2']}.shard.json", f"{copy}.shard.json")
    out = _merge_error([scored["part1"], scored["part2"], copy, scored["part3"]], tmp_path)
    assert "are both shard 2/3" in out and "copy.jsonl" in out


def test_merge_refuses_parts_of_other_cuts_or_sources(
    scored: dict[str, Path], tmp_path: Path, tiny_arpa: Path
) -> None:
    # a part of a 2-way cut of the same set among the 3-way parts
    half = tmp_path / "half.jsonl"
    lm = f"bigram=kenlm:{tiny_arpa}"
    assert run(["score", "--nbest", scored["nbest"], "--lm", lm, "--shard", "1/2",
                "--out", half]).exit_code == 0  # fmt: skip
    out = _merge_error([scored["part1"], scored["part2"], half], tmp_path)
    assert "half.jsonl is shard 1/2" in out and "one number of shards" in out
    # shard 3/3 of another set (other ids): a different source
    other = random_set(tmp_path / "other", n=41, seed=1)
    alien = tmp_path / "alien.jsonl"
    assert run(["score", "--nbest", other, "--lm", lm, "--shard", "3/3",
                "--out", alien]).exit_code == 0  # fmt: skip
    out = _merge_error([scored["part1"], scored["part2"], alien], tmp_path)
    assert "different sources" in out


def test_merge_refuses_a_rewritten_part_or_no_manifest(
    scored: dict[str, Path], tmp_path: Path
) -> None:
    part = scored["part2"]
    lines = part.read_text().splitlines(keepends=True)
    part.write_text("".join(lines[:-1]))  # cut short after its manifest was written
    out = _merge_error([scored["part1"], part, scored["part3"]], tmp_path)
    assert "part2.jsonl" in out and "not the ones part2.jsonl.shard.json describes" in out
    out = _merge_error([scored["whole"]], tmp_path)
    assert "whole.jsonl" in out and "no shard manifest" in out


def test_merge_refuses_overlaps_and_gaps_the_manifests_describe(
    scored: dict[str, Path], tmp_path: Path
) -> None:
    parts = [read_part(scored[f"part{k}"]) for k in (1, 2, 3)]
    # positions edited so that two parts claim one list of the source, and one list none
    from dataclasses import replace

    m = parts[1].manifest
    stolen = parts[0].manifest.positions[0]
    bad = replace(parts[1], manifest=replace(m, positions=(stolen, *m.positions[1:])))
    with pytest.raises(ValueError, match=r"both hold list \d+ of the source"):
        merge_parts([parts[0], bad, parts[2]])
    gap = replace(parts[1], manifest=replace(m, positions=(*m.positions[:-1], 39 + 1000)))
    with pytest.raises(ValueError, match="past the source's 40 lists"):
        merge_parts([parts[0], gap, parts[2]])


def test_shard_and_ray_options_are_checked(scored: dict[str, Path], tmp_path: Path) -> None:
    args = ["score", "--nbest", scored["nbest"], "--lm", scored["lm"], "--out", tmp_path / "x"]
    result = run([*args, "--shard", "4/3"])
    assert result.exit_code == 2 and "1 <= K <= N" in result.output
    result = run([*args, "--shard", "1/3", "--ray"])
    assert result.exit_code == 2 and "do not go together" in result.output
    result = run([*args, "--shards", "2"])
    assert result.exit_code == 2 and "--shards goes with --ray" in result.output


# -- Ray and torchrun -------------------------------------------------------------------------


def _torch_checkpoint(tmp_path: Path) -> Path:
    import torch

    from rescorer.lm_models.checkpoint import save_checkpoint
    from rescorer.lm_models.lstm.model import ContextLSTM, LSTMConfig

    vocab = ["<unk>", "<s>", "</s>", "a", "b", "c", "cat", "dog", "sat", "ran", "on", "mat"]
    torch.manual_seed(3)
    model = ContextLSTM(LSTMConfig(vocab_size=len(vocab), embed_dim=6, hidden_dim=8))
    return save_checkpoint(tmp_path / "lstm", model.eval(), vocab)


def _same_scores(a: Path, b: Path, atol: float) -> None:
    x, y = read_jsonl(a), read_jsonl(b)
    assert list(x) == list(y) and x.score_names() == y.score_names()
    assert x.references == y.references
    for utt in x:
        for hx, hy in zip(x[utt], y[utt], strict=True):
            assert hx.words == hy.words
            names = list(hx.scores)
            np.testing.assert_allclose(
                [hx.scores[n] for n in names], [hy.scores[n] for n in names], atol=atol, rtol=0
            )


@pytest.mark.slow
def test_ray_scoring_writes_the_single_process_file(
    scored: dict[str, Path], tmp_path: Path
) -> None:
    ray = pytest.importorskip("ray")
    lstm = _torch_checkpoint(tmp_path)
    specs = ["--lm", scored["lm"], "--lm", f"lstm=torch:{lstm}"]
    whole = tmp_path / "whole_lstm.jsonl"
    base = ["score", "--nbest", scored["nbest"], *specs, "--device", "cpu"]
    assert run([*base, "--out", whole]).exit_code == 0
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:  # the command joins the running instance (as it would join a cluster)
        out = tmp_path / "ray.jsonl"
        result = run([*base, "--ray", "--shards", "3", "--out", out])
        assert result.exit_code == 0, result.output
    finally:
        ray.shutdown()
    _same_scores(out, whole, atol=1e-5)
    # KenLM alone: byte-identical, through a local instance the command starts itself
    out2 = tmp_path / "ray_kenlm.jsonl"
    result = run(["score", "--nbest", scored["nbest"], "--lm", scored["lm"], "--ref",
                  scored["ref"], "--ray", "--shards", "2", "--out", out2])  # fmt: skip
    assert result.exit_code == 0, result.output
    assert out2.read_bytes() == scored["whole"].read_bytes()


@pytest.mark.slow
def test_torchrun_scoring_writes_the_single_process_file(
    scored: dict[str, Path], tmp_path: Path
) -> None:
    lstm = _torch_checkpoint(tmp_path)
    specs = ["--lm", str(scored["lm"]), "--lm", f"lstm=torch:{lstm}", "--device", "cpu"]
    whole = tmp_path / "whole_lstm.jsonl"
    base = ["score", "--nbest", str(scored["nbest"]), *specs]
    assert run([*base, "--out", whole]).exit_code == 0
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = tmp_path / "torchrun.jsonl"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
         "--master_addr", "127.0.0.1", "--master_port", str(port),
         "-m", "rescorer", "-q", *base, "--out", str(out)],
        capture_output=True, text=True, env=env, timeout=300, cwd=REPO,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("wrote 40 lists") == 1  # rank 0 alone writes
    _same_scores(out, whole, atol=1e-5)
    assert json.loads(out.read_text().splitlines()[0])["utt"] == "spk0-ch-0000"
