"""Write the keyboard recipe's results table (--out; run.sh: exp/RESULTS.md) from its outputs.

Reads the evaluation reports and per-sentence results of `rescorer keyboard-eval`
(exp/eval/NAME.{json,jsonl}), the training data counts, the models' sizes and the stage times,
and runs the paired tests of :func:`rescorer.keyboard.compare_systems`. Run by stage 6 of run.sh;
`run.sh --publish` merges the table into the committed RESULTS.md (recipes/common/publish.py).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
from pathlib import Path
from typing import Any

from rescorer.core.machine import describe_machine
from rescorer.core.output import atomic_write
from rescorer.keyboard import compare_systems, read_sentence_results, read_sentences

SYSTEMS = [
    ("3gram", "KenLM 3-gram"),
    ("4gram", "KenLM 4-gram"),
    ("lstm", "word LSTM (unadapted)"),
    ("lstm_onnx", "word LSTM, ONNX step model (same weights)"),
    ("4gram_lstm_linear", "4-gram + LSTM, linear"),
    ("4gram_lstm_loglinear", "4-gram + LSTM, log-linear"),
]
# (A, B): is B better than A? At every k.
COMPARISONS = [
    ("3gram", "4gram"),
    ("4gram", "lstm"),
    ("4gram", "4gram_lstm_linear"),
    ("lstm", "4gram_lstm_linear"),
    ("4gram_lstm_linear", "4gram_lstm_loglinear"),
    ("lstm", "lstm_onnx"),
]
KS = (1, 3, 5)


def wall_time(exp: Path) -> str:
    times = exp / "times.tsv"
    if not times.exists():
        return "unknown"
    rows = [line.split("\t") for line in times.read_text().splitlines() if line.strip()]
    total = sum(int(t) for _, t in rows)
    parts = ", ".join(f"{name} {t} s" for name, t in rows)
    return f"{total} s in all ({parts})"


def lstm_line(exp: Path) -> str:
    if not (exp / "lstm" / "best" / "training.json").exists():
        return "- Word LSTM: not trained."
    from rescorer.lm_models.lstm.summary import TrainingSummary

    run = TrainingSummary.of(exp / "lstm")
    m = run.config["model"]
    return (
        f"- Word LSTM: {m['mode']}, embedding {m['embed_dim']}, hidden {m['hidden_dim']}, "
        f"{m['num_layers']} layer(s), vocabulary {run.vocab_size:,} (specials included), "
        f"{run.parameters / 1e6:.2f} M parameters; trained with {run.output}, "
        f"{run.training_words()}; dev perplexity "
        f"{run.dev_ppl:.1f} (epoch {run.best_epoch}, 2% of the training lines)."
    )


def fmt_ms(lat: dict[str, Any]) -> str:
    return f"{lat['mean']:.2f} / {lat['p95']:.2f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--exp", type=Path, required=True)
    ap.add_argument("--test", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--command", required=True)
    ap.add_argument("--settings", default="")
    args = ap.parse_args()

    reports = {}
    per_sentence = {}
    for name, _ in SYSTEMS:
        path = args.exp / "eval" / f"{name}.json"
        if path.exists():
            reports[name] = json.loads(path.read_text(encoding="utf-8"))
            per_sentence[name] = read_sentence_results(args.exp / "eval" / f"{name}.jsonl")
    if not reports:
        raise SystemExit(f"no evaluation reports under {args.exp / 'eval'}")
    first = next(iter(reports.values()))

    sources = [
        line.split("\t")
        for line in (args.exp / "data" / "sources.tsv").read_text().splitlines()[1:]
    ]
    n_lines = sum(int(s[1]) for s in sources)
    n_words = sum(int(s[2]) for s in sources)
    src_text = ", ".join(f"{s[0]} {int(s[1]):,} lines / {int(s[2]):,} words" for s in sources)
    test_sentences = read_sentences(args.test)
    mix = args.exp / "mix" / "weights.json"
    mix_info = json.loads(mix.read_text()) if mix.exists() else None
    sizes = {
        o: (args.exp / "lm" / f"{o}gram.bin").stat().st_size / 2**20
        for o in (3, 4)
        if (args.exp / "lm" / f"{o}gram.bin").exists()
    }

    lines = [
        "# Keyboard prediction on Enron Mobile: results",
        "",
        f"- Command: `{args.command}` (settings: {args.settings})",
        f"- Date: {dt.datetime.now(dt.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}",
        f"- Device: {describe_machine()}; everything on the CPU (KenLM, and the LSTM with "
        "`--device cpu`), on a machine shared with other jobs, so latencies are upper bounds.",
        f"- Wall time of the stages run: {wall_time(args.exp)}",
        f"- Test: `{args.test.name}` of the Enron Mobile set (lower case, no punctuation), "
        f"{first['sentences']:,} of its {len(test_sentences):,} sentences, {first['words']:,} "
        f"words, {first['baseline']:,} keystrokes without prediction; "
        f"{100 * first['oov'] / first['words']:.2f}% of the words are outside the prediction "
        "vocabulary (they can never be suggested).",
        f"- Training text: {n_lines:,} lines, {n_words:,} words, normalised like the test set "
        f"(`local/prepare.py`): {src_text}; every 50th line held out as dev text.",
        f"- Prediction vocabulary: the {first['vocabulary']:,} most frequent training words "
        "(seen at least twice), the same for every system (`--vocab`).",
        "- KenLM: modified Kneser-Ney, no pruning, probing binaries: "
        + ", ".join(f"{o}-gram {mb:.0f} MiB" for o, mb in sizes.items())
        + ".",
        lstm_line(args.exp),
    ]
    if mix_info is not None:
        w = mix_info["weights"]
        ppl = mix_info["perplexity"]
        lines.append(
            f"- Interpolation weights (4-gram, LSTM) = ({w[0]:.3f}, {w[1]:.3f}), by EM on "
            f"{mix_info['tokens']:,} held-out dev tokens (in-vocabulary words); dev perplexity "
            f"over those tokens: 4-gram {ppl['ngram']:.1f}, LSTM {ppl['lstm']:.1f}, linear "
            f"mixture {ppl['linear_mixture']:.1f}. The log-linear row uses the same weights "
            "(not tuned for it), renormalised over the vocabulary."
        )
    lines += [
        "- Keystrokes (`keyboard-eval --final-space`): every word, the last of a sentence "
        "included, costs its letters and one space without prediction; with k "
        "suggestions shown before each letter, tapping the intended word costs one keystroke "
        "and enters the word and its space (`rescorer/keyboard.py`). KS = 1 - used / baseline. "
        "Top-k accuracy and MRR are measured before the first letter of each word.",
        "- Latency: time from a keystroke to its suggestion list (model step for the previous "
        "word, next-word distribution, ranking the prefix's candidates), mean / 95th "
        "percentile over all lists; at word starts, only the lists shown before a word's first "
        "letter (where the model steps happen). CPU: the process's CPU time (what a free core "
        "takes); wall: elapsed time on this machine, which other jobs shared during the run, so "
        "wall figures include their contention. The ONNX row runs the LSTM exported by "
        "`rescorer export --kind step` in ONNX Runtime (CPU, one network step per typed word).",
        "",
        "| system | KS k=1 | KS k=3 | KS k=5 | top-1 acc | top-3 acc | MRR | "
        "CPU ms per keystroke (mean / p95) | CPU ms at word starts (mean / p95) | "
        "wall ms per keystroke (mean / p95) | eval wall s |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, label in SYSTEMS:
        r = reports.get(name)
        if r is None:
            continue
        ks = " | ".join(f"{100 * r['ks'][str(k)]:.2f}%" for k in KS)
        acc = " | ".join(f"{100 * r['accuracy'][str(k)]:.2f}%" for k in (1, 3))
        lines.append(
            f"| {label} | {ks} | {acc} | {r['mrr']:.4f} | {fmt_ms(r['latency_cpu_ms'])} | "
            f"{fmt_ms(r['word_start_latency_cpu_ms'])} | {fmt_ms(r['latency_ms'])} | "
            f"{r['seconds']:.0f} |"
        )
    lines += [
        "",
        "**No context row.** The Enron Mobile sentences carry no context at test time: the "
        "copy in the shared data has only `id<TAB>sentence` (the per-sentence categories of the "
        "original data set, personal / business / Enron, are in its `metadata.txt`, which is "
        "not included), and the sentences are independent, so there is no previous sentence "
        "either. The training sources (chat, telephone conversation, Brown genres) would give "
        "a context field, but its value for an email is unknown, so a context-adapted row "
        "would be a guess and is left out rather than faked.",
        "",
        "## Significance (sentences as the paired unit)",
        "",
        "Keystrokes used per sentence, B against A: matched pairs, sign and Wilcoxon tests, "
        "bootstrap 95% interval of the KS difference (1000 resamples, seed 0).",
        "",
        "| A | B | k | KS A | KS B | B - A (points) | B better / worse (sentences) | "
        "matched pairs p | sign p | bootstrap 95% CI (points) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    labels = dict(SYSTEMS)
    for a, b in COMPARISONS:
        if a not in per_sentence or b not in per_sentence:
            continue
        for k in KS:
            c = compare_systems(per_sentence[a], per_sentence[b], k, names=(a, b))
            bs = c.bootstrap
            lines.append(
                f"| {labels[a]} | {labels[b]} | {k} | {100 * c.ks_a:.2f} | {100 * c.ks_b:.2f} | "
                f"{100 * c.difference:+.2f} | {c.b_better} / {c.b_worse} | "
                f"{c.matched_pairs.p_value:.3g} | {c.sign.p_value:.3g} | "
                f"[{-100 * bs.ci_high:+.2f}, {-100 * bs.ci_low:+.2f}] |"
            )
    lines.append("")
    with atomic_write(args.out) as f:
        f.write("\n".join(lines))
    start = next(i for i, line in enumerate(lines) if line.startswith("| system"))
    print("\n".join(lines[start : start + len(reports) + 2]))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
