"""Posterior (MBR) decoding on 2,000-best lists: pruned vs top score vs exact (issue 48 item 4).

The set: 65 lists of 2,000 hypotheses grown from LibriSpeech dev_other's ESPnet 30-best lists by
``bench/long_nbest.py`` (references embedded). Measured in one run:

1. ``rescorer rescore`` with ESPnet's ``score`` (weight 1) and ``--objective top`` vs
   ``--objective posterior --posterior-scale S`` (S = 0.343882, the scale the rescoring guide's
   ``tune --objective posterior`` picks on dev_clean), and ``rescorer tune --features
   decoder,ctc,lm`` with ``--objective top`` vs ``posterior`` (29 scales): each its own process
   (threads pinned to 1), peak RSS and CPU time (user + sys) from GNU time, the commands
   interleaved (A B A B ...) for ``--rounds`` rounds, medians reported with the ratios;
2. the exact rule (every pair, the full ``n x n`` matrix; distances by the same bit-parallel
   code, checked against ``rescorer.wer`` in the tests) at the same scale: choices and word
   errors compared with the pruned ones of ``rescore``; and today's path (``pairwise_errors``
   and ``choose``, before pruning) on the first ``--before-lists`` lists, timed, its choices
   compared too.

    .venv/bin/python bench/bench_posterior.py [--rounds 3] [--out bench/results/posterior.md]
        [--threads 1] [--smoke]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
import benchlib  # noqa: E402  (first: the load average at the start)
from long_nbest import write_long_lists  # noqa: E402

from rescorer.combine import Weights, total_scores  # noqa: E402

RESCORER = Path(sys.executable).parent / "rescorer"
SCALE = 0.343882
PINNED = dict.fromkeys(benchlib.THREAD_VARS, "1")  # --threads sets them


def measured(args: list[str]) -> tuple[float, float, float, str]:
    """(CPU seconds, wall seconds, peak RSS MB, stdout) of ``rescorer -q ARGS``."""
    wall, cpu, peak, stdout = benchlib.run_timed(args, {**os.environ, **PINNED})
    return cpu, wall, peak, stdout


def chosen(out_dir: Path) -> dict[str, str]:
    """The first hypothesis of every list of ``rescore``'s nbest.jsonl."""
    picks = {}
    with (out_dir / "nbest.jsonl").open(encoding="utf-8") as f:
        for line in f:
            obj = json.loads(line)
            picks[obj["utt"]] = obj["hyps"][0]["text"]
    return picks


def exact_choices(nbest, weights: Weights, scale: float) -> tuple[dict[str, int], float]:
    """Every pair of every list (the full matrix), the exact rule; (choices, seconds)."""
    from rescorer.mbr import ListDistances, _ranked, choose

    totals = total_scores(nbest, weights)
    picks = {}
    t0 = time.process_time()
    for u, nb in nbest.items():
        n = len(nb)
        dist = ListDistances([h.words for h in nb], np.arange(n))
        i, j = np.triu_indices(n, 1)
        d = np.zeros((n, n), dtype=np.int64)
        d[i, j] = dist.distances(i, j)
        d += d.T
        picks[u] = choose(totals[u], d, scale).index
        assert _ranked(totals[u])[0] == int(np.argmax(totals[u]))
    return picks, time.process_time() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lists", type=int, default=65)
    ap.add_argument("--size", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--before-lists", type=int, default=2)
    ap.add_argument("--work", type=Path, default=None)
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "posterior.md")
    benchlib.add_common(ap)
    a = ap.parse_args()
    benchlib.smoke(a, lists=2, size=60, rounds=1, before_lists=1)
    threads = benchlib.pin_threads(a.threads)
    PINNED.update(dict.fromkeys(benchlib.THREAD_VARS, str(threads)))
    from rescorer.formats import read_nbest
    from rescorer.wer import hypothesis_errors

    work = a.work or Path(tempfile.mkdtemp(prefix="bench_posterior."))
    work.mkdir(parents=True, exist_ok=True)
    data = work / f"long{a.lists}x{a.size}.jsonl"
    if not data.exists():
        write_long_lists(data, a.lists, a.size)
    w_score = work / "score.json"
    Weights({"score": 1.0}).save(w_score)
    w_top, w_post = work / "tuned_top.json", work / "tuned_post.json"
    feats = ["--features", "decoder,ctc,lm", "--restarts", "2"]
    commands = {
        "rescore --objective top": ["rescore", "--nbest", str(data), "--weights", str(w_score),
                                    "--out", str(work / "top")],
        "rescore --objective posterior": ["rescore", "--nbest", str(data), "--weights",
                                          str(w_score), "--objective", "posterior",
                                          "--posterior-scale", str(SCALE),
                                          "--out", str(work / "post")],
        "tune --objective top": ["tune", "--nbest", str(data), *feats, "--out", str(w_top)],
        "tune --objective posterior": ["tune", "--nbest", str(data), *feats, "--objective",
                                       "posterior", "--out", str(w_post)],
    }  # fmt: skip
    runs: dict[str, list[tuple[float, float, float]]] = {k: [] for k in commands}
    outputs: dict[str, str] = {}
    for r in range(a.rounds):  # interleaved: each command once per round
        for name, args in commands.items():
            cpu, wall, rss, stdout = measured(args)
            runs[name].append((cpu, wall, rss))
            outputs[name] = stdout
            print(f"round {r + 1} {name:<30s} cpu {cpu:6.1f} s wall {wall:6.1f} s "
                  f"{rss:6.0f} MB", flush=True)  # fmt: skip

    # choices: pruned (rescore's output) vs the exact rule at the same scale
    nbest = read_nbest(data, "jsonl")
    refs = {u: nbest.references[u] for u in nbest}
    errors = hypothesis_errors(nbest, refs)
    weights = Weights({"score": 1.0})
    exact, exact_cpu = exact_choices(nbest, weights, SCALE)
    picked = chosen(work / "post")
    top_picked = chosen(work / "top")
    text_index = {u: {" ".join(h.words): k for k, h in enumerate(nb)} for u, nb in nbest.items()}
    pruned = {u: text_index[u][picked[u]] for u in nbest}
    same = sum(pruned[u] == exact[u] for u in nbest)
    err_pruned = sum(int(errors[u][pruned[u]]) for u in nbest)
    err_exact = sum(int(errors[u][exact[u]]) for u in nbest)
    err_top = sum(int(errors[u][text_index[u][top_picked[u]]]) for u in nbest)
    ref_words = sum(len(refs[u]) for u in nbest)

    # today's path (before pruning) on a few lists: timed, choices compared
    from rescorer.mbr import choose, pairwise_errors

    few = nbest.subset(list(nbest)[: a.before_lists])
    t0 = time.process_time()
    before = pairwise_errors(few)
    totals = total_scores(few, weights)
    before_picks = {u: choose(totals[u], before[u], SCALE).index for u in few}
    before_cpu = (time.process_time() - t0) / max(len(few), 1)
    before_same = sum(before_picks[u] == exact[u] for u in few)

    def med(name: str, k: int) -> float:
        return statistics.median(x[k] for x in runs[name])

    base_r, base_t = med("rescore --objective top", 0), med("tune --objective top", 0)
    rel = data.relative_to(REPO) if data.is_relative_to(REPO) else data
    posterior_line = next(
        (x for x in outputs["tune --objective posterior"].splitlines() if "posterior" in x), ""
    )
    lines = [
        *benchlib.header(
            "Posterior (MBR) decoding on 2,000-best lists: pruned vs top score vs exact",
            threads=threads,
            ratios="CPU x top-score rescore, CPU x same command; the choices and word errors "
            "do not depend on the machine",
            absolute="CPU s, wall s, peak RSS MB",
        ),
        f"- Set: {len(nbest)} lists x {a.size:,} hypotheses ({rel.name}, made by "
        "`bench/long_nbest.py` from dev_other's ESPnet 30-best lists, references embedded); "
        f"{ref_words:,} reference words",
        "- Pruning: the defaults of `rescorer.mbr.Pruning` (lists over 256 hypotheses; "
        "references to a pruned mass of 1e-9, at most 2,048; 64 candidates)",
        f"- Each command its own process, threads pinned to {threads} ({', '.join(PINNED)}), "
        f"{a.rounds} interleaved rounds, medians; CPU = user + sys of GNU time",
        "",
        "| command | CPU s | wall s | peak RSS MB | CPU x top-score rescore | CPU x same command, "
        "top |",
        "|---|---|---|---|---|---|",
    ]
    for name in commands:
        base = base_r if name.startswith("rescore") else base_t
        lines.append(
            f"| `{name}` | {med(name, 0):.1f} | {med(name, 1):.1f} | {med(name, 2):.0f} | "
            f"{med(name, 0) / base_r:.2f} | {med(name, 0) / base:.2f} |"
        )
    lines += [
        "",
        f"`tune --objective posterior` printed: `{posterior_line.strip()}`",
        "",
        f"Choices at scale {SCALE} (weights: `score` 1), the {len(nbest)} lists:",
        "",
        "| rule | CPU s | lists choosing as exact | word errors |",
        "|---|---|---|---|",
        f"| top score | - | - | {err_top} |",
        f"| pruned (`rescore --objective posterior`) | see above | {same} / {len(nbest)} | "
        f"{err_pruned} |",
        f"| exact, every pair (n x n by bit-parallel distances) | {exact_cpu:.1f} | "
        f"{len(nbest)} / {len(nbest)} | {err_exact} |",
        f"| before pruning (`pairwise_errors` + `choose`), first {len(few)} lists | "
        f"{before_cpu:.1f} per list (x {len(nbest)} = {before_cpu * len(nbest):.0f}) | "
        f"{before_same} / {len(few)} | - |",
        "",
    ]
    if a.work is None:
        shutil.rmtree(work)
    benchlib.write(a.out, lines)


if __name__ == "__main__":
    main()
