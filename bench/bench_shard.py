"""Scoring dev_other in one process vs in 2 shards (Ray, torchrun, `--shard` + `merge`).

Each row is the wall time of the command line a user runs (``python -m rescorer score ...``,
reading the N-best set and writing the JSONL included), the rows taking turns in each of
``--rounds`` rounds, median (min); the output of
every sharded run is compared with the single-process file (bytes, and the largest score
difference). Models:

1. the recipe's KenLM 4-gram (``recipes/librispeech_nbest/exp/lm/4gram.bin``) on all of
   dev_other (2,864 lists, 85,920 hypotheses);
2. a word LSTM of the recipe's shape (``conf/lstm.json``: V=20k, e=128, d=256; random weights,
   as in ``bench_scoring.py``: the time does not depend on them) on the first ``--utterances``
   lists of dev_other.

The single process runs on ``--threads`` threads (default 2, the cores of the machine the
committed figures come from) and on 1; the sharded runs: ``--ray --shards 2`` (a local Ray
instance started by the command, 2 actors with 1 CPU each), ``torchrun --nproc_per_node 2``
(1 thread each), and ``--shard 1/2`` and ``--shard 2/2`` run at the same time then ``merge``.
The lists come from ``$RESCORER_DATA``; the 4-gram is the recipe's (``--lm``; a ``--smoke`` run
builds a tiny one when it is missing).

    .venv/bin/python bench/bench_shard.py [--utterances 1000] [--rounds 2] [--lm PATH] [--smoke]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
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
from bench_scoring import random_recipe_lstm  # noqa: E402

PY = sys.executable
NBEST = benchlib.data_dir().joinpath(*benchlib.NBEST)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def timed(commands: list[list[str]], env: dict[str, str]) -> float:
    """Wall time of running ``commands`` at the same time (each must succeed)."""
    t0 = time.perf_counter()
    procs = [subprocess.Popen(c, env=env, cwd=REPO, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for c in commands]  # fmt: skip
    for c, p in zip(commands, procs, strict=True):
        out, err = p.communicate()
        if p.returncode != 0:
            raise SystemExit(f"failed ({p.returncode}): {' '.join(c)}\n{err[-2000:]}")
    return time.perf_counter() - t0


def compare(a: Path, b: Path) -> str:
    if a.read_bytes() == b.read_bytes():
        return "byte-identical"
    from rescorer.formats.json_formats import read_jsonl

    x, y = read_jsonl(a), read_jsonl(b)
    if list(x) != list(y):
        return "DIFFERENT ids or order"
    worst = 0.0
    for utt in x:
        for hx, hy in zip(x[utt], y[utt], strict=True):
            if hx.words != hy.words or set(hx.scores) != set(hy.scores):
                return "DIFFERENT hypotheses or features"
            worst = max([worst, *(abs(hx.scores[n] - hy.scores[n]) for n in hx.scores)])
    return f"same lists, largest score difference {worst:.1e}"


def subset_jsonl(n: int, into: Path) -> Path:
    from rescorer.formats import read_nbest, write_nbest

    nbest = read_nbest(NBEST / "dev_other", "espnet")
    path = into / f"dev_other_first{n}.jsonl"
    write_nbest(nbest.subset(list(nbest)[:n]), path, "jsonl")
    return path


def bench_model(
    label: str,
    nbest: Path,
    spec: str,
    rounds: int,
    threads: int,
    tmp: Path,
    rows: list[str],
    notes: list[str],
) -> None:
    base = [PY, "-m", "rescorer", "-q"]
    score = ["score", "--nbest", str(nbest), "--lm", spec, "--device", "cpu"]
    env = benchlib.child_env(1)  # 1 thread each, but the first row
    one = tmp / "one.jsonl"
    runs: dict[str, tuple[list[list[str]], dict[str, str], Path, list[str] | None]] = {
        f"1 process ({threads} threads)": (
            [[*base, "--threads", str(threads), *score, "--out", str(one)]],
            benchlib.child_env(threads), one, None,
        ),
        "1 process, 1 thread": (
            [[*base, "--threads", "1", *score, "--out", str(tmp / "one1.jsonl")]],
            env, tmp / "one1.jsonl", None,
        ),
        "Ray, 2 shards (local instance, 2 actors x 1 CPU)": (
            [[*base, *score, "--ray", "--shards", "2", "--out", str(tmp / "ray.jsonl")]],
            env, tmp / "ray.jsonl", None,
        ),
        "torchrun, 2 processes x 1 thread": (
            [[PY, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr",
              "127.0.0.1", "--master_port", "PORT", "-m", "rescorer", "-q", "--threads", "1",
              *score, "--out", str(tmp / "torchrun.jsonl")]],
            env, tmp / "torchrun.jsonl", None,
        ),
        "--shard 1/2 and 2/2 at once (1 thread each), then merge": (
            [[*base, "--threads", "1", *score, "--shard", f"{k}/2", "--out",
              str(tmp / f"part{k}.jsonl")] for k in (1, 2)],
            env, tmp / "merged.jsonl",
            [*base, "merge", str(tmp / "part1.jsonl"), str(tmp / "part2.jsonl"), "--out",
             str(tmp / "merged.jsonl")],
        ),
    }  # fmt: skip
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(rounds):  # interleaved, so that machine load hits every row alike
        for name, (commands, run_env, _, after) in runs.items():
            commands = [[str(free_port()) if a == "PORT" else a for a in c] for c in commands]
            seconds = timed(commands, run_env)
            if after is not None:
                seconds += timed([after], run_env)
            times[name].append(seconds)
    med = {name: statistics.median(t) for name, t in times.items()}
    ref = med[f"1 process ({threads} threads)"]
    for name, (_, _, out, _) in runs.items():
        same = "(reference)" if out == one else compare(out, one)
        rows.append(
            f"| {label} | {name} | {med[name]:.1f} ({min(times[name]):.1f}) | "
            f"{ref / med[name]:.2f}x | {same} |"
        )
    notes.append(f"{label}: {spec.split('=')[0]} on {nbest.name}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--utterances", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--lm", type=Path, default=None, help="default: the recipe's 4-gram")
    parser.add_argument("--out", type=Path, default=REPO / "bench/results/shard.md")
    benchlib.add_common(parser, threads=2)
    args = parser.parse_args()
    benchlib.smoke(args, utterances=3, rounds=1)
    rows: list[str] = []
    notes: list[str] = []
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        kenlm = benchlib.recipe_lm(args.lm, args.smoke, tmp)
        bench_model(f"KenLM {kenlm.name}, all dev_other", NBEST / "dev_other",
                    f"4gram=kenlm:{kenlm}", args.rounds, args.threads, tmp, rows,
                    notes)  # fmt: skip
        lstm = random_recipe_lstm(NBEST / "dev_other", args.utterances, tmp)
        subset = subset_jsonl(args.utterances, tmp)
        bench_model(f"word LSTM, first {args.utterances} dev_other lists", subset,
                    f"lstm=torch:{lstm}", args.rounds, args.threads, tmp, rows,
                    notes)  # fmt: skip
    import ray

    t0 = time.perf_counter()  # what a local instance costs before any scoring
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    ray.shutdown()
    ray_start = time.perf_counter() - t0
    text = "\n".join(
        [
            *benchlib.header(
                "Sharded scoring: 1 process vs 2 shards",
                threads=f"{args.threads} for the first row, 1 per process for the others",
                ratios="speed-up",
                absolute="seconds",
            ),
            f"- Python {platform.python_version()}; Ray {ray.__version__}",
            f"- Wall time of the whole command (read, score, write), median (min) of "
            f"{args.rounds} interleaved rounds; speed-up relative to one process on "
            f"{args.threads} threads.",
            "- Output: each sharded run's JSONL against the single-process one.",
            f"- Load average (1 min) at the end: {os.getloadavg()[0]:.2f} (other work "
            "on the cores slows the parallel rows most).",
            f"- Starting and stopping a local Ray instance alone: {ray_start:.1f} s (part of every "
            "Ray row; a running cluster is joined instead).",
            "",
            "| model and set | run | seconds | speed-up | output vs 1 process |",
            "|---|---|---|---|---|",
            *rows,
            "",
        ]
    )
    benchlib.write(args.out, text.splitlines())
    print(json.dumps({"written": str(args.out)}))


if __name__ == "__main__":
    main()
