"""Training data per process: in memory vs streamed from shards, 1 vs 2 processes (torchrun).

A synthetic JSONL corpus (``--docs`` documents of 5 sentences, 5-12 words each from a Zipfian
vocabulary of 5,000 words, a ``topic`` field) is written and cut into ``--shards`` shards
(``rescorer corpus shard``). For each way of reading it, a fresh process (or two under
torchrun) prepares the LSTM family's data (:func:`rescorer.lm_models.lstm.data.prepare_data`:
counts, vocabulary, examples) and draws one epoch of batches (no training), then reports its peak
resident memory (``ru_maxrss``) and the training sentences it held at once (all of its share in
memory; the largest shard when streamed).

Then the same config trains a small FactorCell LSTM for one epoch on ``--train-docs`` documents
(4,000) in one process and in two (torchrun, gloo, ``--threads`` threads each, default 1), the
two taking turns over ``--rounds`` rounds (1 2 1 2 ...): the dev perplexity of the two-process
run (each process scoring half of the dev batches, the sums added) against the one-process
evaluation of its checkpoint, and the wall and CPU times (medians): on a machine with fewer idle
cores than processes, two processes are slower, not faster; the load average is recorded.

    .venv/bin/python bench/bench_train_data.py [--docs 40000] [--shards 16] [--rounds 3]
        [--smoke]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
import benchlib  # noqa: E402  (first: the load average at the start)

PY = sys.executable
THREADS = int(os.environ.get("OMP_NUM_THREADS", "1"))  # a child: the parent's --threads


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_corpus(path: Path, docs: int, seed: int) -> None:
    rng = random.Random(seed)
    words = [f"w{i}" for i in range(5000)]
    weights = [1 / (i + 1) for i in range(5000)]
    with open(path, "w", encoding="utf-8") as f:
        for i in range(docs):
            topic = ("sport", "money", "news", "arts")[i % 4]
            text = [" ".join(rng.choices(words, weights, k=rng.randint(5, 12))) for _ in range(5)]
            f.write(json.dumps({"id": f"d{i}", "text": text, "fields": {"topic": topic}}) + "\n")


def config(train: dict[str, str], dev: str, epochs: int = 1) -> dict:
    return {
        "data": {"corpus": "jsonl", **train, "dev": dev, "context_fields": ["topic"],
                 "vocab_size": 5003, "max_len": None},
        "model": {"mode": "factor", "embed_dim": 32, "hidden_dim": 64, "context_dim": 4,
                  "rank": 2, "context_embed_dim": 4, "num_classes": 32, "dropout": 0.0},
        "train": {"epochs": epochs, "batch_tokens": 2048, "lr": 0.003, "device": "cpu"},
    }  # fmt: skip


# -- one process's measurement (run as a child) --------------------------------------------------


def measure(config_path: Path, out: Path) -> None:
    import torch

    from rescorer.lm_models.batching import bucket_parts
    from rescorer.lm_models.distributed import init_world
    from rescorer.lm_models.lstm.train import TrainConfig, prepare_data

    torch.set_num_threads(THREADS)
    world = init_world("cpu")
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    cfg = TrainConfig.load(config_path)
    t0 = time.perf_counter()
    data = prepare_data(cfg, config_path.parent, world=world)
    prepared = time.perf_counter() - t0
    most, sentences, batches = 0, 0, 0
    for part_id, part in data.train_parts(seed=1):  # one part in memory, or one shard
        most = max(most, len(part))
        for examples in bucket_parts([(part_id, part)], 2048, seed=1):
            batches += 1
            sentences += len(examples)
        del part
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    out.with_name(f"{out.name}.{world.rank}.json").write_text(json.dumps({
        "peak_mb": peak / 1024, "base_mb": base / 1024, "held_sentences": most,
        "sentences": sentences, "batches": batches, "seconds": prepared,
    }))  # fmt: skip


def run_measure(config_path: Path, procs: int, tmp: Path, name: str, threads: int) -> list[dict]:
    out = tmp / name
    env = benchlib.child_env(threads)
    me = [str(Path(__file__).resolve()), "--measure", str(config_path), "--out", str(out)]
    if procs == 1:
        cmd = [PY, *me]
    else:
        cmd = [PY, "-m", "torch.distributed.run", "--nproc_per_node", str(procs),
               "--master_addr", "127.0.0.1", "--master_port", str(free_port()), *me]  # fmt: skip
    subprocess.run(cmd, check=True, env=env, cwd=REPO, capture_output=True)
    return [json.loads(out.with_name(f"{name}.{r}.json").read_text()) for r in range(procs)]


def train_run(config_path: Path, procs: int, out: Path, threads: int) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the processes) of one training run."""
    env = benchlib.child_env(threads)
    args = ["-m", "rescorer.lm_models.lstm.train", str(config_path), "--out", str(out), "--quiet",
            "--no-resume", "--data-dir", str(config_path.parent)]  # fmt: skip
    if procs == 1:
        cmd = [PY, *args]
    else:
        cmd = [PY, "-m", "torch.distributed.run", "--nproc_per_node", str(procs),
               "--master_addr", "127.0.0.1", "--master_port", str(free_port()), *args]  # fmt: skip
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, env=env, cwd=REPO, capture_output=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=40000)
    parser.add_argument("--shards", type=int, default=16)
    parser.add_argument("--measure", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--train-docs", type=int, default=4000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=REPO / "bench/results/train_data.md")
    benchlib.add_common(parser)
    args = parser.parse_args()
    if args.measure is not None:
        measure(args.measure, args.out)
        return
    benchlib.smoke(args, docs=200, shards=2, train_docs=200, rounds=1)
    threads = benchlib.pin_threads(args.threads)
    from rescorer.lm_models.corpus_shards import write_shards

    rows = []
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        write_corpus(tmp / "train.jsonl", args.docs, 0)
        write_corpus(tmp / "dev.jsonl", 400, 1)
        size = (tmp / "train.jsonl").stat().st_size / 2**20
        t0 = time.perf_counter()
        index = write_shards(tmp / "train.jsonl", tmp / "shards", args.shards)
        shard_s = time.perf_counter() - t0
        ways = {
            "in memory": {"path": "train.jsonl"},
            f"{args.shards} shards, streamed": {"train_shards": "shards"},
        }
        for way, train in ways.items():
            path = tmp / f"{way.split()[0]}.json"
            path.write_text(json.dumps(config(train, "dev.jsonl")))
            for procs in (1, 2):
                got = run_measure(path, procs, tmp, f"{way.split()[0]}{procs}", threads)
                for rank, g in enumerate(got):
                    rows.append((way, procs, rank, g))
        # dev perplexity: 2 processes against one process's evaluation of their checkpoint
        write_corpus(tmp / "small.jsonl", args.train_docs, 2)
        small = tmp / "small.json"
        small.write_text(json.dumps(config({"path": "small.jsonl"}, "dev.jsonl")))
        timing: dict[int, list[tuple[float, float]]] = {1: [], 2: []}
        for _ in range(args.rounds):  # interleaved: 1 2 1 2 ...
            for procs in (1, 2):
                timing[procs].append(train_run(small, procs, tmp / f"m{procs}", threads))
        (one_s, one_cpu), (two_s, two_cpu) = (
            tuple(statistics.median(t[k] for t in timing[p]) for k in (0, 1)) for p in (1, 2)
        )
        two_meta = json.loads((tmp / "m2" / "best" / "training.json").read_text())
        one_meta = json.loads((tmp / "m1" / "best" / "training.json").read_text())
        import torch

        from rescorer.lm_models.checkpoint import load_checkpoint
        from rescorer.lm_models.lstm.train import TrainConfig, evaluate, prepare_data

        model, _, _ = load_checkpoint(tmp / "m2" / "best")
        data = prepare_data(TrainConfig.load(small), tmp)
        total, tokens = evaluate(model, data.dev, torch.device("cpu"), 2048, data.vocab.eos_id)
        alone = math.exp(-total / tokens)

    lines = [
        *benchlib.header(
            "Training data per process: in memory vs streamed shards, 1 vs 2 processes",
            threads=f"{threads} per process",
            ratios="held sentences, peak MiB of one way against another, the perplexities' "
            "relative difference",
            absolute="MiB, seconds (the 2-process wall time depends on idle cores: see the load)",
        ),
        f"- Corpus: {args.docs} JSONL documents, {index.lines * 5} sentences, {index.words} "
        f"words ({size:.1f} MiB); `rescorer corpus shard` into {args.shards} shards in "
        f"{shard_s:.1f} s.",
        "- Each process: prepare the LSTM family's data (counts, vocabulary, examples) and draw "
        "one epoch of batches (no training); peak resident memory (ru_maxrss; of which the "
        "process had reached after importing torch and the toolkit) and the training sentences "
        "it holds at once.",
        "",
        "| training data | processes | process | peak MiB | of which imports | held "
        "sentences | sentences drawn | batches | prepare s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for way, procs, rank, g in rows:
        lines.append(
            f"| {way} | {procs} | {rank} | {g['peak_mb']:.0f} | {g['base_mb']:.0f} | "
            f"{g['held_sentences']} | {g['sentences']} | {g['batches']} | {g['seconds']:.1f} |"
        )
    rel = abs(two_meta["dev_ppl"] - alone) / alone
    lines += [
        "",
        f"One epoch of a FactorCell LSTM (e 32, d 64, 32 classes) on {args.train_docs:,} "
        f"documents, {threads} thread(s) per process, medians of {args.rounds} interleaved "
        f"rounds; load average (1 min) at the end {os.getloadavg()[0]:.2f}:",
        "",
        "| run | wall s | CPU s (all processes) | steps per process | dev perplexity |",
        "|---|---|---|---|---|",
        f"| 1 process | {one_s:.1f} | {one_cpu:.1f} | {one_meta['log'][0]['steps']} | "
        f"{one_meta['dev_ppl']:.6f} |",
        f"| 2 processes (torchrun, gloo) | {two_s:.1f} | {two_cpu:.1f} | "
        f"{two_meta['log'][0]['steps']} | {two_meta['dev_ppl']:.6f} |",
        f"| its checkpoint, evaluated in 1 process | | | | {alone:.6f} "
        f"(relative difference {rel:.1e}) |",
        "",
        f"- 2 processes vs 1: {one_s / two_s:.2f}x the speed (wall), {two_cpu / one_cpu:.2f}x "
        "the CPU time.",
    ]
    benchlib.write(args.out, lines)


if __name__ == "__main__":
    main()
