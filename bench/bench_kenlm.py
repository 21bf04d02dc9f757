"""KenLM scoring of N-best lists through the toolkit vs plain kenlm loops, and tuning time.

Measures, in one run on the same sentences:
  - toolkit sentence totals: ``sentence_scores`` -> ``KenLM.sentence_logprobs`` (what rescoring
    uses), against a plain ``kenlm.Model.score(sentence)`` loop;
  - toolkit per-token scores: ``KenLM.token_logprobs`` (prefix states shared between
    hypotheses), against a plain ``kenlm.Model.full_scores(sentence)`` loop;
  - ``rescorer tune``'s search on dev_clean (decoder, ctc, lm, 4-gram, length).
Prints a Markdown report and writes it to bench/results/kenlm.md. The four scoring loops take
turns in each of ``--repeat`` rounds (A B C D A B C D ...); times are medians (and minima).
``--smoke``: the first 20 lists, a tiny 3-gram when the recipe's 4-gram is missing.

    .venv/bin/python bench/bench_kenlm.py [--lm recipes/librispeech_nbest/exp/lm/4gram.bin]
        [--repeat 3] [--utterances N] [--smoke]
"""

from __future__ import annotations

import argparse
import math
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import kenlm
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchlib  # noqa: E402, I001  (first of the project's: the load average at the start)

from rescorer.features import add_lm_scores
from rescorer.formats import read_nbest
from rescorer.lms.contract import sentence_scores
from rescorer.lms.kenlm import KenLM
from rescorer.refs import read_references
from rescorer.tune import TuneOptions, tune


def interleaved(
    fns: dict[str, Callable[[], object]], rounds: int
) -> tuple[dict[str, list[float]], dict[str, object]]:
    """Each function's seconds per round (the functions taking turns) and its last result."""
    times: dict[str, list[float]] = {name: [] for name in fns}
    out: dict[str, object] = {}
    for _ in range(rounds):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            out[name] = fn()
            times[name].append(time.perf_counter() - t0)
    return times, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--lm", type=Path, default=None, help="default: the recipe's 4-gram")
    ap.add_argument("--data-dir", type=Path, default=benchlib.data_dir())
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--restarts", type=int, default=10)
    ap.add_argument("--utterances", type=int, default=None, help="the first N lists of each set")
    ap.add_argument("--out", type=Path, default=benchlib.RESULTS / "kenlm.md")
    benchlib.add_common(ap)
    args = ap.parse_args()
    benchlib.smoke(args, repeat=1, restarts=1, utterances=20)
    threads = benchlib.pin_threads(args.threads)
    scratch = tempfile.TemporaryDirectory()
    args.lm = benchlib.recipe_lm(args.lm, args.smoke, Path(scratch.name))
    nb_dir = args.data_dir / "nbest" / "librispeech-espnet"
    if args.utterances is not None:
        for name in ("dev_clean", "dev_other"):
            benchlib.subset_espnet(nb_dir / name, args.utterances, Path(scratch.name) / name)
        nb_dir = Path(scratch.name)
    other = read_nbest(nb_dir / "dev_other", "espnet")
    sentences = [h.words for nb in other.values() for h in nb]
    n_tokens = sum(len(s) + 1 for s in sentences)

    lm = KenLM(args.lm)  # case decided on first use
    lm.token_logprobs(sentences[:100])
    model = kenlm.Model(str(args.lm))
    texts = [" ".join(lm.to_units(s)) for s in sentences]

    times, results = interleaved(
        {
            "tool": lambda: sentence_scores(lm, sentences),
            "score": lambda: [model.score(t, bos=True, eos=True) for t in texts],
            "tok": lambda: lm.token_logprobs(sentences),
            "full": lambda: [[s[0] for s in model.full_scores(t)] for t in texts],
        },
        args.repeat,
    )
    t_tool, t_score, t_tok, t_full = (
        statistics.median(times[k]) for k in ("tool", "score", "tok", "full")
    )
    tool, plain, tok, full = (results[k] for k in ("tool", "score", "tok", "full"))
    diff_total = float(np.max(np.abs(np.asarray(tool) - np.asarray(plain) * math.log(10))))
    diff_tok = max(
        float(np.max(np.abs(a - np.asarray(b) * math.log(10))))
        for a, b in zip(tok, full, strict=True)
    )
    # How many n-gram look-ups the shared prefixes save (sentences in sorted order).
    looked_up, prev = 0, ()
    for words in sorted(tuple(s) for s in sentences):
        shared = 0
        while shared < min(len(prev), len(words)) and prev[shared] == words[shared]:
            shared += 1
        looked_up += len(words) - shared + 1
        prev = words

    clean = read_nbest(nb_dir / "dev_clean", "espnet")
    refs = read_references(nb_dir / "dev_clean" / "references" / "ref_wer.trn")
    t0 = time.perf_counter()
    clean, _ = add_lm_scores(clean, lm, "4gram", progress=False, oov_feature=False)
    t_feat = time.perf_counter() - t0
    result = tune(
        clean, refs, ["decoder", "ctc", "lm", "4gram"], TuneOptions(restarts=args.restarts)
    )
    searches = len(result.start_errors)

    lm_mib = args.lm.stat().st_size / 2**20
    scratch.cleanup()
    lines = [
        *benchlib.header(
            "KenLM N-best scoring and tuning benchmark",
            threads=threads,
            ratios="time relative to the toolkit's totals, toolkit / plain",
            absolute="seconds, hypotheses/s, the tuning seconds",
        ),
        f"- Python {platform.python_version()}",
        f"- Model: `{args.lm.name}` ({lm_mib:.0f} MiB, order {lm.order})",
        f"- Sentences: dev_other 30-best, {len(sentences):,} hypotheses, {n_tokens:,} tokens "
        "with `</s>`",
        f"- Median of {args.repeat} interleaved rounds; same sentences, same model, same process.",
        "",
        "| method | seconds | hypotheses/s | time relative to the toolkit's totals |",
        "|---|---|---|---|",
    ]
    rows = [
        ("toolkit `sentence_scores` (totals; `KenLM.sentence_logprobs`)", t_tool),
        ("plain `kenlm.Model.score` loop (totals)", t_score),
        ("toolkit `KenLM.token_logprobs` (per token, shared prefixes)", t_tok),
        ("plain `kenlm.Model.full_scores` loop (per token)", t_full),
    ]
    for name, t in rows:
        lines.append(f"| {name} | {t:.3f} | {len(sentences) / t:,.0f} | {t / t_tool:.2f}x |")
    lines += [
        "",
        f"- Sentence totals, toolkit / plain `Model.score`: {t_tool / t_score:.2f} "
        f"(largest difference x ln 10: {diff_total:.1e}, both from KenLM's single-precision "
        "sum).",
        f"- Per-token scores, toolkit / plain `full_scores`: {t_tok / t_full:.2f} (largest "
        f"difference: {diff_tok:.1e}). Shared prefixes cut the n-gram look-ups to "
        f"{looked_up:,} of {n_tokens:,} ({100 * looked_up / n_tokens:.0f}%), but each look-up "
        "is a Python call, while `full_scores` loops in C++.",
        "",
        "## Tuning on dev_clean",
        "",
        f"- Scoring dev_clean ({clean.num_hyps():,} hypotheses) with the 4-gram: {t_feat:.2f} s",
        f"- `tune` over decoder, ctc, lm, 4gram, length with {searches} starts "
        f"({args.restarts} random restarts): {result.seconds:.1f} s, "
        f"{result.seconds / searches:.2f} s per start, "
        f"{len(result.trace)} accepted moves; errors {result.initial_errors} -> {result.errors}",
        "",
    ]
    benchlib.write(args.out, lines)


if __name__ == "__main__":
    main()
