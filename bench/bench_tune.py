"""Tuning speed: the exact line search with every list's envelope at once vs one list at a time.

On the LibriSpeech recipe's scored dev_clean lists (2,703 x 30) with row 4's features (decoder,
ctc, lm, 4gram, 4gram_oov, length), measured in one run:

  1. one line search along random directions: the vectorised walk (``_envelopes``, what
     ``rescorer tune`` runs) against the per-list Python walk it replaced (``_upper_envelope``
     over each list), timed interleaved (A B A B ...), median and min, with equal results checked;
  2. a whole ``rescorer tune --method mert`` (10 restarts) and ``--method risk``: seconds and
     dev_clean errors.

The scored lists are the recipe's (``run.sh`` up to its scoring stage); a ``--smoke`` run scores
dev_clean's lists (from ``$RESCORER_DATA``) with a tiny 3-gram itself when they are missing.
Threads pinned to ``--threads`` (default 1; ``--method risk`` runs on torch).

    .venv/bin/python bench/bench_tune.py [--scored EXP/scored/dev_clean.jsonl] [--smoke]
"""

from __future__ import annotations

import argparse
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

EXP = REPO_ROOT / "recipes" / "librispeech_nbest" / "exp"
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
    ap.add_argument("--scored", type=Path, default=EXP / "scored" / "dev_clean.jsonl")
    ap.add_argument("--refs", type=Path, default=None)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--out", type=Path, default=REPO_ROOT / "bench" / "results" / "tune.md")
    benchlib.add_common(ap)
    args = ap.parse_args()
    benchlib.smoke(args, rounds=2)
    threads = benchlib.pin_threads(args.threads)
    refs_path = args.refs or (benchlib.nbest_dir("dev_clean") / "references" / "ref_wer.trn")
    scratch = tempfile.TemporaryDirectory()
    if args.smoke and not args.scored.exists():
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
    scratch.cleanup()
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
    ]
    benchlib.write(args.out, lines)


if __name__ == "__main__":
    main()
