"""Data-parallel training (lm_models.distributed) through the shared epoch loop: two gloo
processes on the CPU take the same steps as one process on their batches together."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

from lm_models.distributed import World, fingerprint, shard
from lm_models.training import DevResult, FitOptions, Step, fit
from tests.paths import REPO as REPO_ROOT

# A fixed regression problem: 64 rows, 8 batches of 8.
GEN = torch.Generator().manual_seed(0)
X = torch.randn(64, 5, generator=GEN)
Y = X @ torch.randn(5, 1, generator=GEN) + 0.1 * torch.randn(64, 1, generator=GEN)
BATCHES = [torch.arange(i, i + 8) for i in range(0, 64, 8)]


def _train(model: nn.Module, batches_of_epoch, epochs: int = 3) -> None:
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)

    def step(idx: torch.Tensor) -> Step:
        loss = ((model(X[idx]) - Y[idx]) ** 2).mean()
        return Step(loss, float(loss.detach()) * len(idx), len(idx))

    def evaluate() -> DevResult:
        with torch.no_grad():
            return DevResult(float(((model(X) - Y) ** 2).mean()))

    fit(model, optimizer, step, batches_of_epoch, evaluate, FitOptions(epochs, progress=False))


def _worker(rank: int, init: str, out: str, same_batches: bool) -> None:
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=2)
    torch.manual_seed(100 + rank)  # different initial weights: fit must broadcast rank 0's
    model = nn.Linear(5, 1)
    try:
        batches = BATCHES if same_batches else BATCHES[rank:]
        _train(model, lambda epoch: list(batches))
        result = {"weight": model.weight.tolist(), "bias": model.bias.tolist()}
    except ValueError as err:
        result = {"error": str(err)}
    Path(out, f"rank{rank}.json").write_text(json.dumps(result))
    dist.barrier()  # neither process leaves while the other still talks to it
    dist.destroy_process_group()


def _spawn(tmp_path: Path, same_batches: bool) -> list[dict]:
    mp.spawn(
        _worker,
        args=(f"file://{tmp_path / 'init'}", str(tmp_path), same_batches),
        nprocs=2,
        join=True,
    )
    return [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]


def test_two_processes_equal_one_process_on_their_batches_together(tmp_path: Path) -> None:
    got = _spawn(tmp_path, same_batches=True)
    assert got[0] == got[1]  # one model in both processes
    # Rank 0 takes batches 0-3 and rank 1 batches 4-7 (contiguous shares); step k averages the
    # gradients of batches k and 4 + k: one step on both together (mean losses, equal sizes).
    torch.manual_seed(100)  # rank 0's initial weights
    model = nn.Linear(5, 1)
    joint = [torch.cat([BATCHES[k], BATCHES[4 + k]]) for k in range(4)]
    _train(model, lambda epoch: joint)
    torch.testing.assert_close(torch.tensor(got[0]["weight"]), model.weight.detach())
    torch.testing.assert_close(torch.tensor(got[0]["bias"]), model.bias.detach())


def test_processes_that_draw_different_batches_are_refused(tmp_path: Path) -> None:
    got = _spawn(tmp_path, same_batches=False)
    for r in got:
        assert "epoch 1: the processes drew different batches" in r["error"]


def test_shard_is_equal_contiguous_shares() -> None:
    items = list(range(11))
    shares = [shard(items, World(r, 3)) for r in range(3)]
    assert shares == [[0, 1, 2], [3, 4, 5], [6, 7, 8]]  # 9, 10 left out: equal step counts
    assert shard(items, World()) == items
    with pytest.raises(ValueError, match="rank < size"):
        World(2, 2)


def test_fingerprint_tells_lists_apart() -> None:
    a = [torch.tensor([1, 2]), torch.tensor([3])]
    assert fingerprint(a) == fingerprint([torch.tensor([1, 2]), torch.tensor([3])])
    assert fingerprint(a) != fingerprint([torch.tensor([1]), torch.tensor([2, 3])])
    assert fingerprint([[1, 2], [3]]) != fingerprint([[1], [2, 3]])


# -- every trainer under torchrun ---------------------------------------------------------------


def _torchrun(module: str, config: Path, out: Path, tmp_path: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO_ROOT)}
    with socket.socket() as s:  # a free port (torchrun's --master_port 0 is not one for gloo)
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
         "--master_addr", "127.0.0.1", "--master_port", str(port), "-m", module, str(config),
         "--out", str(out), "--quiet", "--data-dir", str(tmp_path)],
        capture_output=True, text=True, env=env, timeout=600, cwd=REPO_ROOT,
    )  # fmt: skip


def _lines(n: int, seed: int) -> str:
    g = torch.Generator().manual_seed(seed)
    nouns, verbs = ["cat", "dog", "bird", "fish"], ["sat", "ran", "ate"]
    out = []
    for _ in range(n):
        i, j, k = (int(torch.randint(0, m, (1,), generator=g)) for m in (4, 3, 4))
        out.append(f"the {nouns[i]} {verbs[j]} on the {nouns[k]}")
    return "\n".join(out) + "\n"


@pytest.mark.slow
def test_fnlm_trains_under_torchrun(tmp_path: Path) -> None:
    (tmp_path / "train.txt").write_text(_lines(200, 0))
    (tmp_path / "dev.txt").write_text(_lines(40, 1))
    config = {
        "data": {"corpus": "plain", "train": "train.txt", "dev": "dev.txt", "factors": ["word"],
                 "output_min_count": 1},
        "model": {"order": 3, "embed_dim": 8, "hidden_dim": 16, "num_classes": 4},
        "train": {"epochs": 3, "batch_size": 32, "lr": 0.01},
    }  # fmt: skip
    (tmp_path / "c.json").write_text(json.dumps(config))
    proc = _torchrun("lm_models.fnlm.train", tmp_path / "c.json", tmp_path / "m", tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    meta = json.loads((tmp_path / "m" / "training.json").read_text())
    assert meta["processes"] == 2
    # 200 sentences of 6 words + </s> = 1,400 tokens in 44 batches (as one process draws
    # them): 22 per process, every token seen once an epoch.
    assert [e["tokens"] for e in meta["epochs"]] == [1400] * 3
    assert [e["steps"] for e in meta["epochs"]] == [22] * 3
    assert meta["best_dev_ppl"] < 6  # "the X V on the X": ~ 4 * 3 * 4 choices over 7 tokens


@pytest.mark.slow
def test_lbl_trains_under_torchrun(tmp_path: Path) -> None:
    from tests.lm_models.lbl.test_lbl import write_jsonl  # two genres, different habits

    corpus = write_jsonl(tmp_path / "docs.jsonl", 20, 0)
    config = {
        "data": {"corpus": "jsonl", "path": str(corpus), "attributes": ["genre"],
                 "max_vocab": None, "split": [0.6, 0.2, 0.2]},
        "model": {"order": 3, "embed_dim": 6, "factors": 6, "attr_dims": {"genre": 3}},
        "train": {"epochs": 2, "batch_size": 16, "lr": 0.1, "attribute_dropout": 0.3},
    }  # fmt: skip
    (tmp_path / "c.json").write_text(json.dumps(config))
    proc = _torchrun("lm_models.lbl.train", tmp_path / "c.json", tmp_path / "m", tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    meta = json.loads((tmp_path / "m" / "training.json").read_text())
    assert meta["processes"] == 2 and len(meta["epochs"]) == 2
    assert all(e["steps"] > 0 for e in meta["epochs"])
