"""Neural N-best scoring and LSTM training speed, before and after a change, interleaved.

Each measurement is a fresh process running one source tree: ``before`` is a revision of this
repository exported with ``git archive`` (default: the commit before the output-layer work of
issue 20), ``after`` is the working tree. Runs alternate A B A B ... and the table gives the
minimum and median over rounds, so that a change in machine load hits both sides alike. The
``after`` runs apply the CLI's process settings (:mod:`rescorer.core.runtime`: threads, the
allocator); ``before`` runs get what the CLI did then (torch's defaults).

Measured, on the first ``--utterances`` dev_other 30-best lists:

1. scoring with the recipe's word LSTM (``recipes/librispeech_nbest/conf/lstm.json``: V=20k,
   e=128, d=256, full softmax; random weights over the hypotheses' words, filled up to V --
   timing does not depend on the weights or the words), 1 thread, and the GFLOP/s it achieves
   against the single-thread limit: a plain (2048 x e) @ (e x V) matmul into a reused output,
   measured in the same rounds. The scores of both trees are compared sentence by sentence.
2. the same with any ``--checkpoint`` (e.g. the GPU-trained class-factored LSTM).
3. 1 vs 2 threads for the working tree (scoring).
4. training steps of the recipe's LSTM at its settings (2,048-token batches, Adam), 1 thread.

The ``before`` tree may be older than the checkpoint format's latest fields and than the
package layout (at ``c7005a9`` ``lm_models`` was a top-level package): the worker imports
either layout, and the ``before`` runs read a copy of each checkpoint whose config keeps only the
fields that tree knows, after checking that every dropped field holds its default (so both trees
build the same network). ``--before HEAD`` measures uncommitted changes.

    .venv/bin/python bench/bench_scoring.py [--before REV] [--utterances 300] [--rounds 3]
        [--checkpoint DIR ...] [--smoke]
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
BEFORE_DEFAULT = "c7005a9"  # main before issue 20's scoring work (2026-11-24)


# -- worker side: runs with PYTHONPATH set to one source tree -------------------------------------
def _module(name: str):  # noqa: ANN202 - a module of either layout
    """``rescorer.<name>`` (today's layout), else the top-level ``<name>`` where the tree has it
    (older trees). Decided by the tree's files, not by trying: ``rescorer.lm_models`` of the
    installed working tree can be found from an old tree too."""
    tree = Path.cwd()  # run() starts each worker in its tree
    package = name.split(".")[0]
    if (tree / package).is_dir() and not (tree / "rescorer" / package).is_dir():
        return importlib.import_module(name)
    return importlib.import_module(f"rescorer.{name}")


# Fields added to LSTMConfig after the default ``before`` revision, and their defaults: a
# checkpoint whose values are these builds the same network in a tree that lacks the fields.
NEW_FIELD_DEFAULTS = {"context_activation": "relu", "history": ""}


def _readable_copy(ckpt: str, into: Path) -> str:
    """``ckpt`` as this tree reads it: a copy whose config drops the fields this tree's config
    class lacks (each must hold its default), or ``ckpt`` itself when nothing is dropped."""
    header = json.loads((Path(ckpt) / "config.json").read_text())
    config_cls = _module("lm_models.lstm.model").LSTMConfig
    known = {f.name for f in dataclasses.fields(config_cls)}
    dropped = {k: v for k, v in header["config"].items() if k not in known}
    if not dropped:
        return ckpt
    differ = {k: v for k, v in dropped.items() if NEW_FIELD_DEFAULTS.get(k, object()) != v}
    if differ:
        raise SystemExit(f"the before tree cannot build this model: it lacks the fields {differ}")
    header["config"] = {k: v for k, v in header["config"].items() if k in known}
    into.mkdir(parents=True, exist_ok=True)
    copy = Path(tempfile.mkdtemp(dir=into)) / "readable"
    shutil.copytree(ckpt, copy)
    (copy / "config.json").write_text(json.dumps(header), encoding="utf-8")
    return str(copy)


def _settings(after: bool, threads: int) -> None:
    import torch

    if after:
        from rescorer.core import runtime

        runtime.configure(runtime.RuntimeOptions(threads=threads, keep_freed_memory=True))
        runtime.apply_to_torch()
    else:
        torch.set_num_threads(threads)


def _worker_score(job: dict) -> dict:
    from rescorer.formats import read_nbest
    from rescorer.lms.torch import TorchLM

    _settings(job["after"], job["threads"])
    nbest = read_nbest(job["nbest"], "espnet")
    sentences = [h.words for u in list(nbest)[: job["utterances"]] for h in nbest[u]]
    checkpoint = _readable_copy(job["checkpoint"], Path(job["scores"]).parent / "tmp")
    lm = TorchLM(checkpoint, device="cpu")
    lm.token_logprobs(sentences[:30])  # case decision, warm-up
    lm.reset_stats()
    start = time.perf_counter()
    values = lm.sentence_logprobs(sentences)
    seconds = time.perf_counter() - start
    np.save(job["scores"], values)
    return {"seconds": seconds, "steps": lm.stats.computed_steps, "sentences": len(sentences)}


def _worker_limit(job: dict) -> dict:
    import torch

    _settings(job["after"], job["threads"])
    e, v = job["e"], job["v"]
    a, b = torch.randn(2048, e), torch.randn(v, e).t()
    out = torch.empty(2048, v)
    best = float("inf")
    for _ in range(20):
        start = time.perf_counter()
        torch.mm(a, b, out=out)
        best = min(best, time.perf_counter() - start)
    return {"gflops": 2 * 2048 * e * v / best / 1e9}


def _worker_train(job: dict) -> dict:
    import torch

    ContextLSTM = _module("lm_models.lstm.model").ContextLSTM
    LSTMConfig = _module("lm_models.lstm.model").LSTMConfig
    LossModule = _module("lm_models.lstm.train").LossModule

    _settings(job["after"], job["threads"])
    torch.manual_seed(0)
    cfg = LSTMConfig(vocab_size=job["v"], embed_dim=job["e"], hidden_dim=job["d"], dropout=0.1)
    model = ContextLSTM(cfg).train()
    loss_of = LossModule(model)
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    rows, cols = 64, 32  # 2,048 tokens, conf/lstm.json's batch_tokens
    gen = torch.Generator().manual_seed(1)
    inputs = torch.randint(3, job["v"], (rows, cols), generator=gen)
    targets = torch.randint(2, job["v"], (rows, cols), generator=gen)
    mask = torch.ones(rows, cols)

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        loss_of(inputs, targets, mask, None).backward()
        opt.step()

    for _ in range(2):
        step()
    times = []
    for _ in range(job["steps"]):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return {"seconds": statistics.median(times), "tokens": rows * cols}


WORKERS = {"score": _worker_score, "limit": _worker_limit, "train": _worker_train}


# -- parent side ----------------------------------------------------------------------------------
def export_tree(rev: str, into: Path) -> Path:
    """The files of revision ``rev`` under ``into`` (git archive, no worktree bookkeeping)."""
    archive = into / "tree.tar"
    with open(archive, "wb") as f:
        subprocess.run(["git", "-C", str(REPO), "archive", rev], stdout=f, check=True)
    root = into / "tree"
    with tarfile.open(archive) as tar:
        tar.extractall(root, filter="data")
    return root


def run(tree: Path, job: dict) -> dict:
    threads = str(job["threads"])  # OpenMP and BLAS pinned as torch is (_settings)
    env = dict(os.environ, PYTHONPATH=str(tree), PYTHONHASHSEED="0", OMP_NUM_THREADS=threads,
               MKL_NUM_THREADS=threads, OPENBLAS_NUM_THREADS=threads)  # fmt: skip
    env.pop("RESCORER_THREADS", None)
    out = subprocess.run(
        [sys.executable, __file__, "--worker", json.dumps(job)],
        env=env,
        cwd=tree,
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode != 0:
        raise SystemExit(f"worker failed ({job['kind']}, {tree}):\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def random_recipe_lstm(nbest_dir: Path, utterances: int, into: Path) -> Path:
    """conf/lstm.json's shape with random weights over the hypotheses' most frequent words."""
    import torch

    from rescorer.formats import read_nbest
    from rescorer.lm_models.checkpoint import save_checkpoint
    from rescorer.lm_models.lstm.model import ContextLSTM, LSTMConfig
    from rescorer.lm_models.vocab import SPECIAL_TOKENS

    conf = json.loads((REPO / "recipes/librispeech_nbest/conf/lstm.json").read_text())
    model_conf, vocab_size = conf["model"], conf["data"]["vocab_size"]
    nbest = read_nbest(nbest_dir, "espnet")
    counts = Counter(w.lower() for u in nbest for h in nbest[u] for w in h.words)
    words = [w for w, _ in counts.most_common(vocab_size - len(SPECIAL_TOKENS))]
    words += [f"<filler{i}>" for i in range(vocab_size - len(SPECIAL_TOKENS) - len(words))]
    tokens = [*SPECIAL_TOKENS, *words]  # V = the config's: the cost depends on V alone
    torch.manual_seed(0)
    cfg = LSTMConfig(
        vocab_size=len(tokens),
        embed_dim=model_conf["embed_dim"],
        hidden_dim=model_conf["hidden_dim"],
        num_layers=model_conf["num_layers"],
    )
    return save_checkpoint(into / "recipe_lstm", ContextLSTM(cfg).eval(), tokens)


def flops_per_step(config: dict) -> float | None:
    """FLOP per computed prefix-tree node of a full-softmax LSTM; None for a class output."""
    if config.get("word_classes"):
        return None
    e, d, v, layers = (config[k] for k in ("embed_dim", "hidden_dim", "vocab_size", "num_layers"))
    gates = 2 * 3 * d * (e + d) + (layers - 1) * 2 * 3 * d * (2 * d)
    return gates + (2 * e * d if e != d else 0) + 2 * v * e


def stats(values: list[float]) -> tuple[float, float]:
    return min(values), statistics.median(values)


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--worker":
        job = json.loads(sys.argv[2])
        print(json.dumps(WORKERS[job["kind"]](job)))
        return
    sys.path.insert(0, str(REPO / "bench"))
    import benchlib

    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--before", default=BEFORE_DEFAULT, help="git revision of the 'before' tree")
    ap.add_argument("--utterances", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--train-steps", type=int, default=8)
    ap.add_argument("--checkpoint", type=Path, action="append", default=[])
    ap.add_argument("--data-dir", type=Path, default=benchlib.data_dir())
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "scoring.md")
    benchlib.add_common(ap, threads=None)  # the rows pin 1 and 2 threads themselves
    args = ap.parse_args()
    benchlib.smoke(args, utterances=3, rounds=1, train_steps=1)
    nbest_dir = args.data_dir / "nbest" / "librispeech-espnet" / "dev_other"
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        trees = {"before": export_tree(args.before, tmp), "after": REPO}
        recipe = random_recipe_lstm(nbest_dir, args.utterances, tmp)
        models = [("recipe word LSTM (conf/lstm.json shape, random weights)", recipe)]
        models += [(str(c), c.resolve()) for c in args.checkpoint]
        lines = [
            *benchlib.header(
                "Neural N-best scoring and LSTM training: before and after (issue 20)",
                threads="each row's own, 1 or 2 as it says",
                ratios="after vs before, 2 threads vs 1, % of the matmul limit",
                absolute="seconds, us per step, hypotheses/s, GFLOP/s, ms per step, tokens/s",
            ),
            f"- before: `{args.before}` (git archive); after: the working tree at "
            f"`{_head()}`. Fresh process per run, runs interleaved, {args.rounds} rounds; "
            f"min / median.",
            f"- Data: the first {args.utterances} dev_other 30-best lists (ESPnet).",
            "",
        ]
        limit_cfg: dict | None = None
        for label, ckpt in models:
            config = json.loads((ckpt / "config.json").read_text())["config"]
            e, v = config["embed_dim"], config["vocab_size"]
            flops = flops_per_step(config)
            seconds: dict[str, list[float]] = {"before": [], "after": [], "after, 2 threads": []}
            limit: list[float] = []
            steps = sentences = 0
            for r in range(args.rounds):
                for name, tree, threads in (
                    ("before", trees["before"], 1),
                    ("after", trees["after"], 1),
                    ("after, 2 threads", trees["after"], 2),
                ):
                    job = {
                        "kind": "score",
                        "after": tree == REPO,
                        "threads": threads,
                        "nbest": str(nbest_dir),
                        "utterances": args.utterances,
                        "checkpoint": str(ckpt),
                        "scores": str(tmp / f"{name.replace(', ', '_')}_{r}.npy"),
                    }
                    result = run(tree, job)
                    seconds[name].append(result["seconds"])
                    steps, sentences = result["steps"], result["sentences"]
                if flops is not None:
                    job = {"kind": "limit", "after": True, "threads": 1, "e": e, "v": v}
                    limit.append(run(REPO, job)["gflops"])
            before = np.load(tmp / "before_0.npy")
            after = np.load(tmp / "after_0.npy")
            diff = float(np.abs(before - after).max())
            lines += [
                f"## Scoring: {label}",
                "",
                f"V={v}, e={e}, d={config['hidden_dim']}, layers={config['num_layers']}, "
                f"{'class-factored' if flops is None else 'full softmax'} output; {sentences:,} "
                f"hypotheses, {steps:,} LSTM steps computed (prefix tree).",
                "",
                "| tree | threads | seconds (min / median) | us per step | hypotheses/s |"
                + (" GFLOP/s | % of limit |" if flops is not None else ""),
                "|---|---|---|---|---|" + ("---|---|" if flops is not None else ""),
            ]
            limit_best = max(limit) if limit else None
            for name, values in seconds.items():
                lo, med = stats(values)
                row = (
                    f"| {name.split(',')[0]} | {2 if '2 threads' in name else 1} | "
                    f"{lo:.2f} / {med:.2f} | {1e6 * med / steps:.0f} | {sentences / med:,.0f} |"
                )
                if flops is not None and limit_best is not None:
                    gflops = steps * flops / med / 1e9
                    threads = 2 if "2 threads" in name else 1
                    row += f" {gflops:.1f} | {100 * gflops / limit_best / threads:.0f} |"
                lines.append(row)
            med = {name: statistics.median(values) for name, values in seconds.items()}
            speedup = med["before"] / med["after"]
            lines += [
                "",
                f"- after vs before, 1 thread: **{speedup:.2f}x** (medians); 2 threads vs 1: "
                f"{med['after'] / med['after, 2 threads']:.2f}x.",
                f"- Same scores: max |before - after| = {diff:.2e} nats per sentence.",
            ]
            if limit_best is not None:
                lines.append(
                    f"- Single-thread limit: a plain (2048 x {e}) @ ({e} x {v}) matmul into a "
                    f"reused output, {limit_best:.1f} GFLOP/s (best of the rounds; median "
                    f"{statistics.median(limit):.1f}). FLOP per step: {flops / 1e6:.2f} M "
                    f"(gates, projection, output layer). 2-thread rows: % of twice the limit."
                )
                limit_cfg = config
            lines.append("")
        # training steps, the recipe's settings
        assert limit_cfg is not None
        train: dict[str, list[float]] = {"before": [], "after": []}
        tokens = 0
        for _ in range(args.rounds):
            for name in ("before", "after"):
                job = {
                    "kind": "train",
                    "after": name == "after",
                    "threads": 1,
                    "v": limit_cfg["vocab_size"],
                    "e": limit_cfg["embed_dim"],
                    "d": limit_cfg["hidden_dim"],
                    "steps": args.train_steps,
                }
                result = run(trees[name], job)
                train[name].append(result["seconds"])
                tokens = result["tokens"]
        lines += [
            "## Training: the recipe's word LSTM, 2,048-token batches, Adam, 1 thread",
            "",
            "| tree | ms per step (min / median of per-run medians) | tokens/s |",
            "|---|---|---|",
        ]
        for name, values in train.items():
            lo, med = stats(values)
            lines.append(f"| {name} | {1e3 * lo:.0f} / {1e3 * med:.0f} | {tokens / med:,.0f} |")
        ratio = statistics.median(train["before"]) / statistics.median(train["after"])
        lines += ["", f"- after vs before: **{ratio:.2f}x** tokens/s.", ""]
    lines += [f"- Load average (1 min) at the end: {os.getloadavg()[0]:.2f}.", ""]
    benchlib.write(args.out, lines)


def _head() -> str:
    out = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    )
    return out.stdout.strip()


if __name__ == "__main__":
    main()
