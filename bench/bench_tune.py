"""Tuning speed: the exact line search with every list's envelope at once vs one list at a time.

On the LibriSpeech recipe's scored dev_clean lists (2,703 x 30) with row 4's features (decoder,
ctc, lm, 4gram, 4gram_oov, length), measured in one run:

  1. one line search along random directions: the vectorised walk (``_envelopes``, what
     ``rescorer tune`` runs) against the per-list Python walk it replaced (``_upper_envelope``
     over each list), timed interleaved (A B A B ...), median and min, with equal results checked;
  2. a whole ``rescorer tune --method mert`` (10 restarts) and ``--method risk``: seconds and
     dev_clean errors;
  3. the same as whole ``rescorer tune`` processes, interleaved, CPU and wall seconds: mert and
     risk as a user runs them (no ``--threads``, no thread variables: the CLI's default, 1
     thread for risk), risk with ``--threads 1`` and with ``--threads 2``.

The scored lists are the recipe's (``run.sh`` up to its scoring stage); a ``--smoke`` run scores
dev_clean's lists (from ``$RESCORER_DATA``) with a tiny 3-gram itself when they are missing.
Threads pinned to ``--threads`` (default 1; ``--method risk`` runs on torch) in 1 and 2; 3
names its own.

    .venv/bin/python bench/bench_tune.py [--scored EXP/scored/dev_clean.jsonl] [--smoke]
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchlib  # noqa: E402, I001  (first of the project's: the load average at the start)

from rescorer.combine import feature_matrix
from rescorer.core.data import REPO_ROOT
from rescorer.formats import read_nbest
from rescorer.refs import read_references
from rescorer.tune import TuneOptions, _column_scale, _Problem, _upper_envelope, tune
from rescorer.wer import hypothesis_errors

EXP = benchlib.RECIPE_EXP
FEATURES = ["decoder", "ctc", "lm", "4gram", "4gram_oov"]


def per_list_line_search(
    feats: list[np.ndarray], errs: list[np.ndarray], w: np.ndarray, d: np.ndarray
) -> tuple[float, int]:
    """The line search as it was: a Python loop over the lists, then the same interval scan."""
    base, times, deltas = 0, [], []
    for f, err in zip(feats, errs, strict=True):
        segs = _upper_envelope(f @ w, f @ d)
        base += int(err[segs[0][1]])
        if len(segs) > 1:
            idx = np.array([s[1] for s in segs])
            times.append(np.array([s[0] for s in segs[1:]]))
            deltas.append(err[idx[1:]] - err[idx[:-1]])
    t, delta = np.concatenate(times), np.concatenate(deltas)
    order = np.argsort(t, kind="stable")
    uniq, first = np.unique(t[order], return_index=True)
    errors = base + np.concatenate([[0], np.cumsum(np.add.reduceat(delta[order], first))])
    i = int(np.argmin(errors))
    return (float(uniq[i - 1]) if i else -np.inf), int(errors[i])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument(
        "--scored",
        type=Path,
        default=None,
        help="default: the recipe's exp/scored/dev_clean.jsonl; a smoke run scores tiny lists",
    )
    ap.add_argument("--refs", type=Path, default=None)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--process-rounds", type=int, default=3, help="rounds of whole processes")
    ap.add_argument("--out", type=Path, default=REPO_ROOT / "bench" / "results" / "tune.md")
    benchlib.add_common(ap)
    args = ap.parse_args()
    benchlib.smoke(args, rounds=2, process_rounds=1)
    threads = benchlib.pin_threads(args.threads)
    refs_path = args.refs or (benchlib.nbest_dir("dev_clean") / "references" / "ref_wer.trn")
    scratch = tempfile.TemporaryDirectory()
    if args.scored is None and not args.smoke:
        args.scored = EXP / "scored" / "dev_clean.jsonl"
    if args.scored is None:  # a smoke run: the recipe's lists are of the full data
        work = Path(scratch.name)
        lm = benchlib.tiny_kenlm(work)
        args.scored = work / "dev_clean.jsonl"
        subprocess.run(
            [str(benchlib.RESCORER), "-q", "score", "--nbest",
             str(benchlib.subset_espnet(benchlib.nbest_dir("dev_clean"), 30, work / "nbest")),
             "--lm", f"4gram=kenlm:{lm}", "--out", str(args.scored)],
            check=True, env=benchlib.child_env(threads),
        )  # fmt: skip
    nbest = read_nbest(args.scored, "jsonl")
    refs = read_references(refs_path)
    errs_by_utt = hypothesis_errors(nbest, refs)
    utts = [u for u in nbest if len(nbest[u])]
    feats = [feature_matrix(nbest[u], FEATURES) for u in utts]
    scale = _column_scale(feats)
    feats = [f / scale for f in feats]
    errs = [np.asarray(errs_by_utt[u], dtype=np.int64) for u in utts]
    problem = _Problem(feats, errs)
    rng = np.random.default_rng(0)
    dim = len(FEATURES) + 1
    w = np.zeros(dim)
    w[0] = 1.0
    directions = [rng.normal(size=dim) for _ in range(args.rounds)]
    for d in directions:
        d[0] = 0.0
    fast_s, slow_s, same = [], [], True
    for d in directions:  # interleaved: A B A B
        t0 = time.perf_counter()
        _, e_fast = problem.line_search(w, d)
        fast_s.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        _, e_slow = per_list_line_search(feats, errs, w, d)
        slow_s.append(time.perf_counter() - t0)
        same &= e_fast == e_slow
    runs = {}
    for method in ("mert", "risk"):
        t0 = time.perf_counter()
        options = TuneOptions(method=method, **({"restarts": 1} if args.smoke else {}))
        result = tune(nbest, refs, [*FEATURES], options)
        runs[method] = (time.perf_counter() - t0, result.errors, len(result.start_errors))
    procs = process_runs(args, refs_path, threads)  # reads args.scored: a smoke run's is in scratch
    scratch.cleanup()
    med_fast, med_slow = statistics.median(fast_s), statistics.median(slow_s)
    lines = [
        *benchlib.header(
            "Tuning speed: exact line search, all lists at once vs one list at a time",
            threads=threads,
            ratios="x per-list",
            absolute="ms, seconds",
        ),
        f"- Lists: {len(utts):,} dev_clean utterances, up to {problem.F.shape[1]} hypotheses; "
        f"features {', '.join(FEATURES)} and length (row 4 of the LibriSpeech recipe).",
        "",
        "| line search | median ms | min ms | x per-list |",
        "|---|---|---|---|",
        f"| every list's envelope at once (`_envelopes`) | {1e3 * med_fast:.1f} | "
        f"{1e3 * min(fast_s):.1f} | {med_slow / med_fast:.1f} |",
        f"| one list at a time (`_upper_envelope` loop, before) | {1e3 * med_slow:.1f} | "
        f"{1e3 * min(slow_s):.1f} | 1.0 |",
        "",
        f"{args.rounds} random directions from the anchor-only weights, timed interleaved; the "
        f"minimum error counts of the two agree on every direction: {same}.",
        "",
        "| `rescorer tune` | starts | seconds | dev_clean errors |",
        "|---|---|---|---|",
        *(f"| --method {m} | {n} | {s:.1f} | {e} |" for m, (s, e, n) in runs.items()),
        "",
        f"Whole processes, {args.process_rounds} rounds interleaved, medians (the default rows: "
        "no `--threads` and no thread variables in the environment, as a user runs it):",
        "",
        "| process | CPU s | wall s | dev_clean errors |",
        "|---|---|---|---|",
        *(
            f"| `rescorer tune {name}` | {statistics.median(c):.2f} | "
            f"{statistics.median(w):.2f} | {e} |"
            for name, (c, w, e) in procs.items()
        ),
        "",
    ]
    benchlib.write(args.out, lines)


PROCESSES = {  # name -> options before the command (--threads is the group's)
    "--method mert": [],
    "--method risk": [],
    "--method risk --threads 1": ["--threads", "1"],
    "--method risk --threads 2": ["--threads", "2"],
}


def process_runs(
    args: argparse.Namespace, refs_path: Path, threads: int
) -> dict[str, tuple[list[float], list[float], int]]:
    """CPU seconds, wall seconds and dev_clean errors of whole ``rescorer tune`` processes."""
    env = benchlib.child_env(threads)
    for var in benchlib.THREAD_VARS:  # as a user runs it: the CLI's own thread choice
        env.pop(var, None)
    out: dict[str, tuple[list[float], list[float], int]] = {n: ([], [], -1) for n in PROCESSES}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.process_rounds):
            for name, extra in PROCESSES.items():
                weights = Path(tmp) / "weights.json"
                cmd = [
                    str(benchlib.RESCORER), "-q", *extra, "tune", "--nbest", str(args.scored),
                    "--ref", str(refs_path), "--features", ",".join(FEATURES),
                    "--method", name.split()[1], "--out", str(weights),
                    *(["--restarts", "1"] if args.smoke else []),
                ]  # fmt: skip
                before = resource.getrusage(resource.RUSAGE_CHILDREN)
                t0 = time.perf_counter()
                subprocess.run(cmd, check=True, env=env, capture_output=True)
                wall = time.perf_counter() - t0
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
                meta = json.loads(weights.read_text(encoding="utf-8"))["meta"]
                c, w, _ = out[name]
                c.append(cpu)
                w.append(wall)
                out[name] = (c, w, int(meta["dev_errors"]))
    return out


if __name__ == "__main__":
    main()
