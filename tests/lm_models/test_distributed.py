"""Data-parallel training (rescorer.lm_models.distributed) through the shared epoch loop: two gloo
processes on the CPU, each on its own batches, take the steps one process takes on their batches
together; every family trains under it with the parameters equal in both processes, half the
steps of one process, and the dev perplexity one process computes."""

from __future__ import annotations

import hashlib
import json
import math
import os
import socket
import subprocess
import sys
from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

from rescorer.lm_models.distributed import (
    ONE_PROCESS,
    World,
    close_world,
    end_process,
    rank_seed,
    share,
    share_slices,
)
from rescorer.lm_models.training import DevResult, FitOptions, Step, fit
from tests.paths import REPO as REPO_ROOT

# A fixed regression problem: 64 rows, 8 batches of 8.
GEN = torch.Generator().manual_seed(0)
X = torch.randn(64, 5, generator=GEN)
Y = X @ torch.randn(5, 1, generator=GEN) + 0.1 * torch.randn(64, 1, generator=GEN)
BATCHES = [torch.arange(i, i + 8) for i in range(0, 64, 8)]
TIMEOUT = timedelta(seconds=60)  # a collective one process never joins fails instead of hanging


def _train(
    model: nn.Module, batches_of_epoch, evaluate=None, epochs: int = 3, skew: float = 0.0
) -> Any:
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)

    def step(idx: torch.Tensor) -> Step:
        if skew:  # a change of the weights outside the averaged gradients
            with torch.no_grad():
                model.bias += skew
        loss = ((model(X[idx]) - Y[idx]) ** 2).mean()
        return Step(loss, float(loss.detach()) * len(idx), len(idx))

    def whole_set() -> DevResult:
        with torch.no_grad():
            return DevResult(float(((model(X) - Y) ** 2).mean()))

    options = FitOptions(epochs, progress=False)
    return fit(model, optimizer, step, batches_of_epoch, evaluate or whole_set, options)


def _digest(model: nn.Module) -> str:
    h = hashlib.sha256()
    for name, tensor in model.state_dict().items():
        h.update(name.encode())
        h.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


def _toy_worker(rank: int, init: str, out: str) -> None:
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=2, timeout=TIMEOUT)
    torch.manual_seed(100 + rank)  # different initial weights: fit must broadcast rank 0's
    result: dict[str, Any] = {}
    # Each process its own half of the batches.
    model = nn.Linear(5, 1)
    _train(model, lambda epoch: BATCHES[4 * rank : 4 * rank + 4])
    result["joint"] = {"weight": model.weight.tolist(), "bias": model.bias.tolist()}
    # Rank 0 has 4 batches, rank 1 only 3: both take 3 steps, as a list or drawn lazily.
    for kind in ("list", "lazy"):
        model = nn.Linear(5, 1)
        mine = BATCHES[:4] if rank == 0 else BATCHES[4:7]
        draw = (lambda e, m=mine: m) if kind == "list" else (lambda e, m=mine: iter(m))
        fitted = _train(model, draw)
        result[kind] = {"steps": [e.steps for e in fitted.epochs], "digest": _digest(model)}
    # A dev value of this process's share only (not added up): refused in both processes.
    try:
        _train(nn.Linear(5, 1), lambda e: BATCHES[:2], lambda: DevResult(1.0 + rank))
    except ValueError as err:
        result["dev"] = str(err)
    # Weights changed in one process only: refused at the end of the epoch.
    try:
        _train(nn.Linear(5, 1), lambda e: BATCHES[:2], lambda: DevResult(1.0), skew=rank)
    except ValueError as err:
        result["weights"] = str(err)
    Path(out, f"rank{rank}.json").write_text(json.dumps(result))
    end_process(close_world())  # neither leaves while the other talks to it; no teardown


@pytest.fixture(scope="module")
def toy(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    """What two gloo processes did with the toy problem (one spawn for the tests below)."""
    tmp = tmp_path_factory.mktemp("toy")
    mp.spawn(_toy_worker, args=(f"file://{tmp / 'init'}", str(tmp)), nprocs=2, join=True)
    return [json.loads((tmp / f"rank{r}.json").read_text()) for r in range(2)]


@pytest.mark.slow
def test_two_processes_equal_one_process_on_their_batches_together(toy: list[dict]) -> None:
    assert toy[0]["joint"] == toy[1]["joint"]  # one model in both processes
    # Rank 0 takes batches 0-3 and rank 1 batches 4-7; step k averages the gradients of
    # batches k and 4 + k: one step on both together (mean losses, equal sizes).
    torch.manual_seed(100)  # rank 0's initial weights
    model = nn.Linear(5, 1)
    joint = [torch.cat([BATCHES[k], BATCHES[4 + k]]) for k in range(4)]
    _train(model, lambda epoch: joint)
    torch.testing.assert_close(torch.tensor(toy[0]["joint"]["weight"]), model.weight.detach())
    torch.testing.assert_close(torch.tensor(toy[0]["joint"]["bias"]), model.bias.detach())


@pytest.mark.slow
def test_unequal_shares_take_equal_steps_and_disagreements_are_refused(toy: list[dict]) -> None:
    for kind in ("list", "lazy"):
        assert toy[0][kind]["steps"] == toy[1][kind]["steps"] == [3, 3, 3]
        assert toy[0][kind]["digest"] == toy[1][kind]["digest"]
    for r in toy:
        assert "epoch 1: the processes' dev values differ ([1.0, 2.0])" in r["dev"]
        assert "epoch 1: the processes' weights differ" in r["weights"]


def test_shares_partition_the_items_and_the_scoring_blocks() -> None:
    items = list(range(11))
    shares = [share(items, World(r, 3)) for r in range(3)]
    assert shares == [[0, 3, 6, 9], [1, 4, 7, 10], [2, 5, 8]]  # disjoint, every item
    assert share(items, ONE_PROCESS) == items
    rows = [[i for s in share_slices(10, 3, World(r, 2)) for i in range(10)[s]] for r in range(2)]
    assert rows == [[0, 1, 2, 6, 7, 8], [3, 4, 5, 9]]  # blocks 0, 2 and 1, 3 of size 3
    assert share_slices(10, 3, ONE_PROCESS) == [slice(0, 3), slice(3, 6), slice(6, 9), slice(9, 10)]
    assert rank_seed(7, World(0, 2)) == 7 and rank_seed(7, World(1, 2)) != 7
    with pytest.raises(ValueError, match="rank < size"):
        World(2, 2)
    with pytest.raises(ValueError, match="block >= 1"):
        share_slices(3, 0, ONE_PROCESS)


# -- every family with two processes ------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:  # a free port (torchrun's --master_port 0 is not one for gloo)
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _lines(n: int, seed: int) -> str:
    g = torch.Generator().manual_seed(seed)
    nouns, verbs = ["cat", "dog", "bird", "fish"], ["sat", "ran", "ate"]
    out = []
    for _ in range(n):
        i, j, k = (int(torch.randint(0, m, (1,), generator=g)) for m in (4, 3, 4))
        out.append(f"the {nouns[i]} {verbs[j]} on the {nouns[k]}")
    return "\n".join(out) + "\n"


def _fnlm_config(tmp_path: Path) -> Any:
    from rescorer.lm_models.fnlm.train import FNLMTrainConfig

    (tmp_path / "train.txt").write_text(_lines(200, 0))
    (tmp_path / "dev.txt").write_text(_lines(40, 1))
    return FNLMTrainConfig.from_json({
        "data": {"corpus": "plain", "train": "train.txt", "dev": "dev.txt", "factors": ["word"],
                 "output_min_count": 1},
        "model": {"order": 3, "embed_dim": 8, "hidden_dim": 16, "num_classes": 4},
        "train": {"epochs": 3, "batch_size": 32, "lr": 0.01},
    })  # fmt: skip


def _lbl_config(tmp_path: Path) -> Any:
    from rescorer.lm_models.lbl.train import LBLTrainConfig
    from tests.lm_models.lbl.test_lbl import write_jsonl  # two genres, different habits

    corpus = write_jsonl(tmp_path / "docs.jsonl", 20, 0)
    return LBLTrainConfig.from_json({
        "data": {"corpus": "jsonl", "path": str(corpus), "attributes": ["genre"],
                 "max_vocab": None, "split": [0.6, 0.2, 0.2]},
        "model": {"order": 3, "embed_dim": 6, "factors": 6, "attr_dims": {"genre": 3}},
        "train": {"epochs": 2, "batch_size": 16, "lr": 0.1, "attribute_dropout": 0.3},
    })  # fmt: skip


def _lstm_config(tmp_path: Path) -> Any:
    from tests.lm_models.lstm.test_train import config, write_corpus

    return config(write_corpus(tmp_path / "c.jsonl"), epochs=3, model={"dropout": 0.1})


def _run_family(family: str, cfg: Any, data_dir: Path, out: Path) -> dict[str, Any]:
    """Train ``family`` in this process (alone or in a process group): the digest of the
    model's parameters when fit returns, each epoch's steps, tokens and dev value."""
    import importlib

    module = importlib.import_module(f"rescorer.lm_models.{family}.train")
    original = module.fit
    seen: dict[str, Any] = {}

    def spy(model: nn.Module, *args: Any, **kwargs: Any) -> Any:
        fitted = original(model, *args, **kwargs)
        seen["digest"] = _digest(model)
        seen["epochs"] = [(e.steps, e.tokens, e.dev_ppl) for e in fitted.epochs]
        seen["best"] = fitted.best_dev_ppl
        return fitted

    module.fit = spy
    try:
        if family == "lstm":
            result = module.train(cfg, data_dir, out, resume=False, progress=False)
            seen["best"] = result.best_dev_ppl
        else:
            getattr(module, f"train_{family}")(cfg, data_dir, out, progress=False)
    finally:
        module.fit = original
    return seen


def _family_worker(rank: int, port: int, family: str, tmp: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                      WORLD_SIZE="2", LOCAL_RANK=str(rank))  # fmt: skip
    torch.set_num_threads(1)
    cfg = CONFIGS[family](Path(tmp))
    seen = _run_family(family, cfg, Path(tmp), Path(tmp, "two"))
    Path(tmp, f"rank{rank}.json").write_text(json.dumps(seen))
    end_process(close_world())  # neither leaves while the other talks to it; no teardown


CONFIGS: dict[str, Callable[[Path], Any]] = {
    "fnlm": _fnlm_config,
    "lbl": _lbl_config,
    "lstm": _lstm_config,
}


def _one_and_two(family: str, tmp_path: Path) -> tuple[dict, list[dict]]:
    cfg = CONFIGS[family](tmp_path)
    one = json.loads(json.dumps(_run_family(family, cfg, tmp_path, tmp_path / "one")))
    mp.spawn(_family_worker, args=(_free_port(), family, str(tmp_path)), nprocs=2, join=True)
    two = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    assert two[0]["digest"] == two[1]["digest"]  # the same parameters in both processes
    assert two[0]["epochs"] == two[1]["epochs"]
    for (s1, t1, _), (s2, t2, _) in zip(one["epochs"], two[0]["epochs"], strict=True):
        # each process half the data: half the steps (its batches), about all the tokens
        assert abs(2 * s2 - s1) <= 2 and s2 < s1, (s1, s2)
        assert 0.85 * t1 <= t2 <= t1, (t1, t2)
    return one, two


def _same(a: float, b: float) -> None:
    assert a == pytest.approx(b, rel=1e-6)


@pytest.mark.slow
def test_fnlm_in_two_processes(tmp_path: Path) -> None:
    from rescorer.lm_models.fnlm.model import load_fnlm
    from rescorer.lm_models.fnlm.train import read_train_dev

    one, two = _one_and_two("fnlm", tmp_path)
    # 200 sentences of 6 words + </s> = 1,400 rows: 44 batches of 32 in one process, 22 of
    # 32 (and one of 28) rows in each of two: every token seen once an epoch.
    assert [e[:2] for e in one["epochs"]] == [[44, 1400]] * 3
    assert [e[:2] for e in two[0]["epochs"]] == [[22, 1400]] * 3
    # The dev value reduced over the processes is the one process's value of the checkpoint.
    lm = load_fnlm(tmp_path / "two")
    _, dev = read_train_dev(_fnlm_config(tmp_path).data, tmp_path)
    enc = lm.encode(dev)
    lp = lm.score_encoded(enc)[~enc.oov]
    _same(two[0]["best"], math.exp(-lp.mean()))
    assert two[0]["best"] < 6  # "the X V on the X": ~ 4 * 3 * 4 choices over 7 tokens


@pytest.mark.slow
def test_lbl_in_two_processes(tmp_path: Path) -> None:
    from rescorer.lm_models.lbl.model import load_lbl
    from rescorer.lm_models.lbl.train import (
        encode_documents,
        perplexity,
        read_documents,
        score_rows,
        split_corpus,
    )

    one, two = _one_and_two("lbl", tmp_path)
    model, vocab = load_lbl(tmp_path / "two")
    dc = _lbl_config(tmp_path).data
    _, dev_docs, _ = split_corpus(dc, read_documents(dc, tmp_path))
    _same(
        two[0]["best"],
        perplexity(score_rows(model, encode_documents(model.config, vocab, dev_docs))),
    )


@pytest.mark.slow
def test_lstm_in_two_processes(tmp_path: Path) -> None:
    from rescorer.lm_models.checkpoint import load_checkpoint
    from rescorer.lm_models.lstm.train import evaluate, prepare_data

    one, two = _one_and_two("lstm", tmp_path)
    model, _, meta = load_checkpoint(tmp_path / "two" / "best")
    assert meta is not None and meta["world_size"] == 2
    data = prepare_data(_lstm_config(tmp_path), tmp_path)
    total, tokens = evaluate(model, data.dev, torch.device("cpu"), 120, data.vocab.eos_id)
    _same(two[0]["best"], math.exp(-total / tokens))
    assert two[0]["best"] < 13  # learned: uniform guessing over the 14 types is 14


# -- CUE: every stage ---------------------------------------------------------------------------


def _cue_stages() -> dict[str, Any]:
    """The sentence LM, joint and proxy stages on the tiny CUE corpus; per stage the steps, the
    digest of the parameters, the best dev value and the same value computed in one process."""
    from rescorer.lm_models.cue.model import SentenceLM
    from rescorer.lm_models.cue.train import (
        CUETrainOptions,
        cue_perplexity,
        make_data,
        sentence_lm_perplexity,
        train_cue,
        train_sentence_lm,
    )
    from rescorer.lm_models.text_encoders import HashEmbedder, VectorCache
    from tests.lm_models.cue.test_cue import CTX_DIM, FIELDS, tiny_corpus, tiny_lm

    lm = tiny_lm()
    sents, records = tiny_corpus(120)
    cache = VectorCache(HashEmbedder(CTX_DIM))
    train = make_data(lm.vocab, sents[:80], records[:80], FIELDS, cache)
    dev = make_data(lm.vocab, sents[80:], records[80:], FIELDS, cache)
    opts = CUETrainOptions(epochs=2, max_tokens=60, lr=1e-2)
    got: dict[str, Any] = {}
    se = SentenceLM(lm.config.sentence)
    result = train_sentence_lm(se, train, dev, opts)
    got["sentence"] = (result, _digest(se), sentence_lm_perplexity(se, dev))
    lm.model.sentence.load_state_dict(se.state_dict())
    result = train_cue(lm.model, train, dev, "joint", opts)
    got["joint"] = (result, _digest(lm.model), cue_perplexity(lm.model, dev))
    result = train_cue(lm.model, train, dev, "proxy", replace(opts, sigma=0.5, epochs=1))
    alone = cue_perplexity(lm.model, dev, "proxy", 0.5, opts.seed)
    got["proxy"] = (result, _digest(lm.model), alone)
    return {
        stage: {
            "steps": [e.steps for e in r.epochs],
            "digest": digest,
            "best": r.best_dev,
            "alone": alone,
        }
        for stage, (r, digest, alone) in got.items()
    }


def _cue_worker(rank: int, port: int, tmp: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                      WORLD_SIZE="2", LOCAL_RANK=str(rank))  # fmt: skip
    torch.set_num_threads(1)
    got = _cue_stages()
    Path(tmp, f"rank{rank}.json").write_text(json.dumps(got))
    end_process(close_world())


@pytest.mark.slow
def test_cue_in_two_processes(tmp_path: Path) -> None:
    torch.set_num_threads(1)
    one = _cue_stages()
    mp.spawn(_cue_worker, args=(_free_port(), str(tmp_path)), nprocs=2, join=True)
    two = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    for stage in ("sentence", "joint", "proxy"):
        assert two[0][stage] == two[1][stage], stage  # same weights, steps and values
        for s1, s2 in zip(one[stage]["steps"], two[0][stage]["steps"], strict=True):
            assert abs(2 * s2 - s1) <= 2 and s2 < s1, (stage, s1, s2)
        # the kept epoch's dev value, computed in shares, is the one-process value
        _same(two[0][stage]["best"], two[0][stage]["alone"])


# -- the entry point under torchrun -------------------------------------------------------------


def _torchrun(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO_ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
         "--master_addr", "127.0.0.1", "--master_port", str(_free_port()), *args],
        capture_output=True, text=True, env=env, timeout=600, cwd=REPO_ROOT,
    )  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("shards", [False, True], ids=["file", "shards"])
def test_fnlm_trains_under_torchrun(tmp_path: Path, shards: bool) -> None:
    """The module entry point under torchrun, from the corpus file or (--train-shards) from two
    shards, one per process: the same steps either way (each process a half of the rows)."""
    from rescorer.lm_models.corpus_shards import write_shards

    _fnlm_config(tmp_path)  # writes the corpus
    config = {
        "data": {"corpus": "plain", "train": "train.txt", "dev": "dev.txt", "factors": ["word"],
                 "output_min_count": 1},
        "model": {"order": 3, "embed_dim": 8, "hidden_dim": 16, "num_classes": 4},
        "train": {"epochs": 2, "batch_size": 32, "lr": 0.01},
    }  # fmt: skip
    (tmp_path / "c.json").write_text(json.dumps(config))
    args = ["-m", "rescorer.lm_models.fnlm.train", str(tmp_path / "c.json")]
    args += ["--out", str(tmp_path / "m")]
    if shards:
        write_shards(tmp_path / "train.txt", tmp_path / "shards", 2)
        args += ["--train-shards", str(tmp_path / "shards")]
    proc = _torchrun([*args, "--quiet", "--data-dir", str(tmp_path)], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    meta = json.loads((tmp_path / "m" / "training.json").read_text())
    assert meta["processes"] == 2
    assert [e["steps"] for e in meta["epochs"]] == [22, 22]


@pytest.mark.slow
def test_lstm_streams_its_own_shards_under_torchrun(tmp_path: Path) -> None:
    """Two processes, two shards: each process reads one shard and forms the batches one
    process forms from it, so the steps are the smaller shard's, the tokens about all."""
    from rescorer.lm_models.checkpoint import load_checkpoint
    from rescorer.lm_models.corpus_shards import write_shards
    from rescorer.lm_models.lstm.train import TrainConfig, evaluate, prepare_data, train
    from tests.lm_models.lstm.test_train import write_corpus

    write_shards(write_corpus(tmp_path / "train.jsonl", 40, 0), tmp_path / "shards", 2)
    write_corpus(tmp_path / "dev.jsonl", 12, 1)
    config = {
        "data": {"corpus": "jsonl", "train_shards": "shards", "dev": "dev.jsonl",
                 "context_fields": ["topic"], "vocab_size": 100},
        "model": {"mode": "factor", "embed_dim": 16, "hidden_dim": 24, "context_dim": 4,
                  "rank": 2, "context_embed_dim": 4},
        "train": {"epochs": 2, "batch_tokens": 120, "lr": 0.02, "device": "cpu"},
    }  # fmt: skip
    (tmp_path / "c.json").write_text(json.dumps(config))
    cfg = TrainConfig.load(tmp_path / "c.json")
    one = train(cfg, tmp_path, tmp_path / "one", progress=False)
    args = ["-m", "rescorer.lm_models.lstm.train", str(tmp_path / "c.json")]
    args += ["--out", str(tmp_path / "m")]
    proc = _torchrun([*args, "--quiet", "--data-dir", str(tmp_path)], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    model, _, meta = load_checkpoint(tmp_path / "m" / "last")
    assert meta is not None and meta["world_size"] == 2
    for e1, e2 in zip(one.epochs, meta["log"], strict=True):
        assert abs(2 * e2["steps"] - e1.steps) <= 2 and e2["steps"] < e1.steps
        assert 0.85 * e1.tokens <= e2["tokens"] <= e1.tokens
    data = prepare_data(cfg, tmp_path)
    total, tokens = evaluate(model, data.dev, torch.device("cpu"), 120, data.vocab.eos_id)
    _same(meta["dev_ppl"], math.exp(-total / tokens))


@pytest.mark.slow
def test_lbl_reads_its_own_shard_under_torchrun(tmp_path: Path) -> None:
    """The LBL module entry point under torchrun with --train-shards: 2 shards, each process
    reads one (12 documents), and the whole corpus is seen once an epoch: the rows counted over
    the processes are the rows one process reads from the file."""
    from rescorer.lm_models.corpus_shards import shard_name, write_shards
    from rescorer.lm_models.lbl.train import read_corpus
    from tests.lm_models.test_streamed_training import lbl_config

    cfg = lbl_config(tmp_path, epochs=2)  # writes docs.jsonl (24 documents) and dev.jsonl
    (tmp_path / "c.json").write_text(json.dumps(cfg.to_json()))
    write_shards(tmp_path / "docs.jsonl", tmp_path / "shards", 2)
    one = _run_family("lbl", cfg, tmp_path, tmp_path / "one")
    args = ["-m", "rescorer.lm_models.lbl.train", str(tmp_path / "c.json")]
    args += ["--out", str(tmp_path / "m")]
    args += ["--train-shards", str(tmp_path / "shards"), "--quiet", "--data-dir", str(tmp_path)]
    proc = _torchrun(args, tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    meta = json.loads((tmp_path / "m" / "training.json").read_text())
    assert meta["processes"] == 2
    assert meta["split"]["train_shards"] == str(tmp_path / "shards")
    # rows (tokens and </s>) of each shard; the processes step together, as many full batches
    # as the smaller shard holds, and count their rows together
    rows = [
        sum(
            len(s) + 1
            for d in read_corpus(cfg.data, tmp_path / "shards" / name)
            for s in d.sentences
        )
        for name in (shard_name(0, "jsonl"), shard_name(1, "jsonl"))
    ]
    assert sum(rows) == one["epochs"][0][1]  # the shards hold the file's rows
    steps = min(r // 16 for r in rows)  # batch_size 16, one batch per process per step
    for epoch in meta["epochs"]:
        assert (epoch["steps"], epoch["tokens"]) == (steps, 2 * 16 * steps)


@pytest.mark.slow
def test_the_train_command_reports_once_under_torchrun(tmp_path: Path) -> None:
    """`torchrun ... -m rescorer train`: the first process prints the result line, not each."""
    from tests.lm_models.lstm.test_train import write_corpus

    write_corpus(tmp_path / "train.jsonl", 40, 0)
    write_corpus(tmp_path / "dev.jsonl", 12, 1)
    config = {
        "data": {"corpus": "jsonl", "path": "train.jsonl", "dev": "dev.jsonl",
                 "vocab_size": 100},
        "model": {"mode": "unadapted", "embed_dim": 16, "hidden_dim": 24},
        "train": {"epochs": 1, "batch_tokens": 120, "lr": 0.02, "device": "cpu"},
    }  # fmt: skip
    (tmp_path / "c.json").write_text(json.dumps(config))
    args = ["-m", "rescorer", "-q", "train", str(tmp_path / "c.json"), "--out"]
    proc = _torchrun([*args, str(tmp_path / "m"), "--data-dir", str(tmp_path)], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("best dev perplexity") == 1, proc.stdout
