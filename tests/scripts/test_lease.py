"""The GPU lease kit (scripts/lease): a run started, packed in parts, sent in calls of at most
8 files and unpacked here gives the same checkpoint, its weights rounded to float16."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from tests.paths import REPO
from tests.rescorer.cli.test_tokenizer_cli import write_text

KIT = REPO / "scripts" / "lease"


def sh(*args: object, cwd: Path, **env: str) -> subprocess.CompletedProcess:
    full = {**os.environ, "PY": sys.executable, "OMP_NUM_THREADS": "1", **env}
    return subprocess.run(
        [str(a) for a in args], cwd=cwd, env=full, capture_output=True, text=True, timeout=300
    )


def device_tree(tmp_path: Path, lines: int, dim: int) -> Path:
    """The device's copy of the tree: the kit and the package, .lease/carry with the data, and
    word.json, a small LSTM over it."""
    root = tmp_path / "device"
    (root / "scripts").mkdir(parents=True)
    shutil.copytree(KIT, root / "scripts" / "lease")
    for pkg in ("rescorer", "lm_models"):
        (root / pkg).symlink_to(REPO / pkg)
    carry = root / ".lease" / "carry"
    carry.mkdir(parents=True)
    text = write_text(tmp_path / "books.txt", lines)
    subprocess.run(["gzip", "-c", str(text)], stdout=(carry / "books.txt.gz").open("wb"))
    conf = {
        "data": {"corpus": "plain", "path": "books.txt", "split": [0.9, 0.1, 0.0],
                 "vocab_size": 100},
        "model": {"mode": "unadapted", "embed_dim": dim, "hidden_dim": dim},
        "train": {"epochs": 50, "batch_tokens": 400, "device": "cpu"},
    }  # fmt: skip
    (root / "word.json").write_text(json.dumps(conf))
    return root


def test_a_reversed_data_path_is_made_from_the_carried_text(tmp_path: Path) -> None:
    root = device_tree(tmp_path, 40, 8)
    conf = json.loads((root / "word.json").read_text())
    conf["data"]["path"] = "books_reversed.txt"
    conf["train"]["epochs"] = 1
    (root / "bwd.json").write_text(json.dumps(conf))
    start = sh("bash", "scripts/lease/device.sh", "start", 60, "b=bwd.json", cwd=root)
    assert start.returncode == 0, start.stderr
    data = root / ".lease" / "data"
    forward = (data / "books.txt").read_text().splitlines()
    backward = (data / "books_reversed.txt").read_text().splitlines()
    assert backward == [" ".join(line.split()[::-1]) for line in forward]
    assert backward != forward
    waited = sh("bash", "scripts/lease/device.sh", "wait", 240, cwd=root)
    assert "== b (ended)" in waited.stdout, waited.stdout + waited.stderr
    assert (root / ".lease" / "exp" / "b" / "best" / "model.safetensors").is_file()
    (root / "none.json").write_text(json.dumps({**conf, "data": {**conf["data"],
                                                "path": "novels_reversed.txt"}}))  # fmt: skip
    missing = sh("bash", "scripts/lease/device.sh", "start", 60, "n=none.json", cwd=root)
    assert missing.returncode == 2 and "novels.txt to reverse" in missing.stderr


def test_start_wait_pack_send_unpack_round_trip(tmp_path: Path) -> None:
    root = device_tree(tmp_path, 300, 48)
    start = sh("bash", "scripts/lease/device.sh", "start", 3, "w=word.json", cwd=root)
    assert start.returncode == 0, start.stderr
    waited = sh("bash", "scripts/lease/device.sh", "wait", 240, cwd=root)
    assert "== w (ended)" in waited.stdout, waited.stdout + waited.stderr
    run_cfg = json.loads((root / ".lease" / "run" / "w.json").read_text())
    assert run_cfg["train"]["max_seconds"] == 3  # the budget reached the run's config
    log = json.loads((root / ".lease" / "exp" / "w" / "last" / "trainer.json").read_text())["log"]
    assert 1 <= len(log) < 50  # the budget, not the epochs, ended it
    packed = sh(sys.executable, "scripts/lease/pack.py", ".lease/exp/w", "w", ".lease/packed",
                "--part-mib", 0.005, cwd=root)  # fmt: skip
    assert packed.returncode == 0, packed.stderr
    n_parts = len(list((root / ".lease/packed").glob("w.tar.part*")))
    assert n_parts > 8  # more than one call's worth
    outs = []
    for call in range(n_parts // 8 + 1):  # at most 8 files per call
        out = tmp_path / f"out{call}"
        out.mkdir()
        sent = sh("bash", "scripts/lease/device.sh", "send", cwd=root, OUT=str(out))
        assert sent.returncode == 0, sent.stderr
        assert len(list(out.iterdir())) <= 8
        outs.append(out)
    assert sum(len(list(o.iterdir())) for o in outs) == n_parts + 1  # and the sha256
    assert sent.stdout.strip().endswith("0 left to send")
    unpack = [sys.executable, str(KIT / "unpack.py")]
    dest = tmp_path / "here"
    first = sh(*unpack, outs[0], "--dest", dest, cwd=tmp_path)
    assert "w: no w.sha256 yet" in first.stdout or "w: waiting for" in first.stdout
    done = sh(*unpack, *outs, "--dest", dest, cwd=tmp_path)
    assert done.returncode == 0 and "w: unpacked into" in done.stdout, done.stdout + done.stderr
    best = root / ".lease" / "exp" / "w" / "best"
    original = load_file(str(best / "model.safetensors"))
    back = load_file(str(dest / "w" / "best" / "model.safetensors"))
    assert back.keys() == original.keys()
    for k, v in original.items():
        assert back[k].dtype == torch.float32
        assert torch.equal(back[k], v.half().float()), k
    for name in ("config.json", "vocab.txt", "training.json"):
        assert (dest / "w" / "best" / name).read_bytes() == (best / name).read_bytes()
    assert (dest / "w" / "last" / "trainer.json").is_file()
    # the unpacked checkpoint loads and scores like the original (fp16 rounding aside)
    ppl = [
        sh(
            sys.executable,
            "-m",
            "rescorer",
            "-q",
            "ppl",
            "--lm",
            f"torch:{b}",
            "--text",
            tmp_path / "books.txt",
            cwd=REPO,
        )  # fmt: skip
        for b in (best, dest / "w" / "best")
    ]
    assert all(p.returncode == 0 for p in ppl), [p.stderr for p in ppl]
    a, b = (float(p.stdout.split("ppl ")[1].split()[0]) for p in ppl)
    assert abs(a - b) / a < 1e-3
    # a damaged part is refused
    part = next(outs[0].glob("w.tar.part00"))
    part.write_bytes(b"x" + part.read_bytes()[1:])
    bad = sh(*unpack, *outs, "--dest", tmp_path / "bad", cwd=tmp_path)
    assert bad.returncode != 0 and "do not match" in bad.stderr


@pytest.mark.slow  # two trainings, ~20 s
def test_epochs_cap_and_a_resumed_start_appends_to_its_log(tmp_path: Path) -> None:
    root = device_tree(tmp_path, 100, 16)
    trainer = root / ".lease" / "exp" / "w" / "last" / "trainer.json"
    for epochs in (1, 2):  # the second start goes on from the first's last epoch
        start = sh("bash", "scripts/lease/device.sh", "start", 300, "w=word.json", cwd=root,
                   EPOCHS=str(epochs))  # fmt: skip
        assert start.returncode == 0, start.stderr
        sh("bash", "scripts/lease/device.sh", "wait", 240, cwd=root)
        run_cfg = json.loads((root / ".lease" / "run" / "w.json").read_text())
        assert run_cfg["train"]["epochs"] == epochs
        assert [e["epoch"] for e in json.loads(trainer.read_text())["log"]] == list(
            range(1, epochs + 1)
        )
    log = (root / ".lease" / "exp" / "w.log").read_text()
    assert log.count("best dev perplexity") == 2  # both starts' lines, the first kept


@pytest.mark.slow  # two trainings, ~20 s
def test_a_start_with_init_begins_from_that_checkpoint(tmp_path: Path) -> None:
    root = device_tree(tmp_path, 100, 16)
    first = sh("bash", "scripts/lease/device.sh", "start", 300, "w=word.json", cwd=root,
               EPOCHS="2")  # fmt: skip
    assert first.returncode == 0, first.stderr
    sh("bash", "scripts/lease/device.sh", "wait", 240, cwd=root)
    best = root / ".lease" / "exp" / "w" / "best"
    start = sh("bash", "scripts/lease/device.sh", "start", 300, f"v=word.json@{best}", cwd=root,
               EPOCHS="1")  # fmt: skip
    assert start.returncode == 0, start.stderr
    assert f"from {best}" in start.stdout
    sh("bash", "scripts/lease/device.sh", "wait", 240, cwd=root)
    trainer = json.loads((root / ".lease" / "exp" / "v" / "last" / "trainer.json").read_text())
    assert [e["epoch"] for e in trainer["log"]] == [1]  # a new run: its own epoch count
    w = json.loads((root / ".lease" / "exp" / "w" / "last" / "trainer.json").read_text())
    # one epoch on from w's 2: below w's first epoch, which a start from scratch would repeat
    assert trainer["log"][0]["dev_ppl"] < w["log"][0]["dev_ppl"]
