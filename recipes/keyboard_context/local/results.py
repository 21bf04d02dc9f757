"""RESULTS.md of the keyboard-with-context recipe, from the corpora's exp/ folders.

One section per corpus: the systems' keyboard-eval totals (KS at k = 1, 3, 5, top-1/top-3
accuracy, MRR, CPU latency per keystroke), the paired tests by sentence (compare.json, stage 6),
the KS gain by context value, and the acceptance checks of the issue, measured; then the
commands, settings, machine and wall times (times.tsv). Writes the plot of the KS gain by
context value (``ks_gain_by_value.png``) beside OUT when matplotlib is installed (the
``plots`` extra); without it the numbers table is all.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
from pathlib import Path

from rescorer.core.machine import cpu_name

TITLES = {
    "agnews": "AG News, news topic as context",
    "dbpedia": "DBpedia, ontology class as context",
    "brown": "Brown, genre as context",
    "agnews_prev": "AG News, the previous sentences (title first) as context",
    "brown_prev": "Brown, the previous sentences as context",
}
LABELS = {
    "unadapted": "Unadapted",
    "softmax_bias": "SoftmaxBias",
    "concat": "ConcatCell",
    "factor": "FactorCell",
}
ALPHA = 0.05


def model_label(name: str) -> str:
    """A mode's name, or a mode with its cache of the previous sentences (``<mode>_cache``)."""
    if name.endswith("_cache"):
        return f"{LABELS[name[:-6]]} + cache"
    return LABELS[name]


def system_label(name: str) -> str:
    if name == "4gram":
        return "KenLM 4-gram"
    if name.startswith("4gram_"):
        return f"4-gram + {model_label(name[6:])} (linear, with context)"
    if name.endswith("_nocontext"):
        return f"LSTM {LABELS[name[:-10]]}, context withheld (control)"
    if name == "unadapted":
        return "LSTM Unadapted"
    if name == "unadapted_cache":
        return "LSTM Unadapted + cache of the previous sentences"
    if name.endswith("_cache"):
        return f"LSTM {LABELS[name[:-6]]}, with context, + cache of the previous sentences"
    return f"LSTM {LABELS[name]}, with context"


def order(names: list[str]) -> list[str]:
    ranks = [
        "4gram",
        "unadapted",
        "unadapted_cache",
        "softmax_bias",
        "softmax_bias_nocontext",
        "concat",
        "concat_nocontext",
        "factor",
        "factor_nocontext",
        "factor_cache",
    ]
    return sorted(names, key=lambda n: ranks.index(n) if n in ranks else len(ranks))


def pct(x: float) -> str:
    return f"{100 * x:.2f}%"


def pval(p: float) -> str:
    return f"{p:.2g}" if p >= 1e-4 else f"{p:.1e}"


def dev_ppl(exp: Path, name: str) -> str:
    f = exp / name / "last" / "trainer.json"
    if not f.exists():
        return "—"
    return f"{json.loads(f.read_text())['best_dev_ppl']:.1f}"


def find(comps: list[dict], a: str, b: str, k: int = 3) -> dict | None:
    return next((c for c in comps if c["a"] == a and c["b"] == b and c["k"] == k), None)


def check_line(comps: list[dict], a: str, b: str, goal: float, text: str) -> str:
    c = find(comps, a, b)
    if c is None:
        return f"- {text}: not measured (a system is missing)"
    ok = c["difference"] >= goal and c["p_matched_pairs"] < ALPHA and c["difference"] > 0
    return (
        f"- {text}: {100 * c['difference']:+.2f} points at k=3 (p = "
        f"{pval(c['p_matched_pairs'])}, goal {100 * goal:+.1f}, p < {ALPHA}): "
        f"**{'met' if ok else 'missed'}**"
    )


def section(exp: Path, corpus: str) -> tuple[list[str], dict | None]:
    lines = [f"## {TITLES.get(corpus, corpus)}", ""]
    stats = json.loads((exp / "data" / "stats.json").read_text())
    cmp_file = exp / "compare.json"
    cmp = json.loads(cmp_file.read_text()) if cmp_file.exists() else None
    n_tr, n_dev, n_te = stats["documents"]
    reports = {p.stem: json.loads(p.read_text()) for p in (exp / "eval").glob("*.json")}
    if not reports:
        return lines + ["No system typed yet.", ""], None
    typed = next(iter(reports.values()))
    lines += [
        f"Documents train/dev/test {n_tr:,}/{n_dev:,}/{n_te:,} (80/10/10 by document, "
        f"stratified by {stats['label_field']}, seed 0); {stats['train_words']:,} training "
        f"words; prediction vocabulary {stats['vocab']:,} words (the most frequent training "
        f"words, every system). Typed: {typed['sentences']:,} of the "
        f"{stats['test_sentences']:,} test sentences ({typed['words']:,} words, "
        f"{100 * typed['oov'] / typed['words']:.2f}% outside the vocabulary). Context "
        f"field: `{stats['field']}`.",
        "",
        "| system | KS k=1 | KS k=3 | KS k=5 | top-1 acc | top-3 acc | MRR "
        "| CPU ms per keystroke (mean) | dev ppl |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name in order(list(reports)):
        r = reports[name]
        ppl = dev_ppl(exp, name) if name in LABELS else "—"
        lines.append(
            f"| {system_label(name)} | {pct(r['ks']['1'])} | {pct(r['ks']['3'])} | "
            f"{pct(r['ks']['5'])} | {pct(r['accuracy']['1'])} | {pct(r['accuracy']['3'])} | "
            f"{r['mrr']:.4f} | {r['latency_cpu_ms']['mean']:.2f} | {ppl} |"
        )
    lines.append("")
    if cmp is None:
        return lines, None
    comps = cmp["comparisons"]
    lines += [
        "Paired by sentence (`rescorer keyboard-compare A B`, k=3; p of the matched-pairs "
        "test, Wilcoxon beside it; the 95% bootstrap interval of KS B - A):",
        "",
        "| B against A | KS A | KS B | B - A (points) | p matched pairs | p Wilcoxon "
        "| 95% CI (points) | B better / worse (sentences) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for c in comps:
        if c["k"] != 3:
            continue
        lo, hi = c["ci95"]
        lines.append(
            f"| {system_label(c['b'])} against {system_label(c['a'])} | {pct(c['ks_a'])} | "
            f"{pct(c['ks_b'])} | {100 * c['difference']:+.2f} | {pval(c['p_matched_pairs'])} | "
            f"{pval(c['p_wilcoxon'])} | [{100 * lo:+.2f}, {100 * hi:+.2f}] | "
            f"{c['b_better']} / {c['b_worse']} |"
        )
    lines.append("")
    adapted = [m for m in ("softmax_bias", "concat", "factor") if m in reports]
    top = max(adapted, key=lambda m: reports[m]["ks"]["3"]) if adapted else None
    by_value = cmp["ks_by_value"]
    if top:
        lines += [
            f"KS at k=3 by {cmp['label_field']} (the best context model by test KS, "
            f"{LABELS[top]}, against the Unadapted LSTM and against itself with the context "
            "withheld):",
            "",
            f"| {cmp['label_field']} | sentences | Unadapted | {LABELS[top]} | "
            f"{LABELS[top]}, withheld | gain over Unadapted | gain over withheld |",
            "|---|---|---|---|---|---|---|",
        ]
        for v in sorted(by_value):
            row = by_value[v]
            if not all(s in row for s in ("unadapted", top, f"{top}_nocontext")):
                continue
            u, t, w = row["unadapted"]["ks3"], row[top]["ks3"], row[f"{top}_nocontext"]["ks3"]
            lines.append(
                f"| {v} | {row[top]['sentences']} | {pct(u)} | {pct(t)} | {pct(w)} | "
                f"{100 * (t - u):+.2f} | {100 * (t - w):+.2f} |"
            )
        lines.append("")
        lines += position_section(cmp, [top, "unadapted_cache"])
        # the goals: +1.0 point for a label, +0.5 for the previous sentences
        goal = 0.005 if stats["field"] == "previous" else 0.01
        checks = [
            "Acceptance checks (issue 49), as measured here "
            f"(best context model by test KS: {LABELS[top]}; by dev perplexity: "
            f"{model_label(cmp['best_mode']) if cmp['best_mode'] else '—'}, the one "
            "interpolated):",
            "",
            check_line(comps, "unadapted", top, goal, f"{LABELS[top]} over the Unadapted LSTM"),
            check_line(
                comps,
                f"{top}_nocontext",
                top,
                goal if stats["field"] == "previous" else 0.0,
                f"{LABELS[top]} over its context-withheld control",
            ),
        ]
        fc, cc = reports.get("factor"), reports.get("concat")
        if fc and cc:
            d = fc["ks"]["3"] - cc["ks"]["3"]
            c = find(comps, "concat", "factor")
            p = f", p = {pval(c['p_matched_pairs'])}" if c else ""
            ok = d >= 0 or (c is not None and c["p_matched_pairs"] >= ALPHA)
            checks.append(
                f"- FactorCell against ConcatCell: {100 * d:+.2f} points at k=3{p}: "
                f"**{'met' if ok else 'missed'}** (>= or within noise)"
            )
        if stats["field"] == "previous":
            checks.append(
                check_line(
                    comps,
                    "unadapted",
                    "unadapted_cache",
                    goal,
                    "The Unadapted LSTM with a cache of the previous sentences over the same LSTM "
                    "without them",
                )
            )
            if top:
                checks.append(
                    check_line(
                        comps,
                        "unadapted",
                        f"{top}_cache",
                        goal,
                        f"{LABELS[top]} with context and cache over the Unadapted LSTM",
                    )
                )
        best = cmp["best_mode"]
        if best and f"4gram_{best}" in reports:
            ca, cb = find(comps, "4gram", f"4gram_{best}"), find(comps, best, f"4gram_{best}")
            if ca and cb:
                ok = (
                    min(ca["difference"], cb["difference"]) > 0
                    and max(ca["p_matched_pairs"], cb["p_matched_pairs"]) < ALPHA
                )
                checks.append(
                    f"- 4-gram + {model_label(best)} against both alone: "
                    f"{100 * ca['difference']:+.2f} over the 4-gram (p = "
                    f"{pval(ca['p_matched_pairs'])}), {100 * cb['difference']:+.2f} over "
                    f"{model_label(best)} (p = {pval(cb['p_matched_pairs'])}): "
                    f"**{'met' if ok else 'missed'}**"
                )
        lines += checks + [""]
    lines += cache_section(exp)
    lines += onnx_section(exp)
    return lines, (cmp, top)


def position_section(cmp: dict, systems: list[str]) -> list[str]:
    """KS at k=3 by word position, the Unadapted LSTM against each of ``systems`` typed
    (compare.py's ``ks_by_position``): where in a sentence the context saves."""
    lines = []
    for row in cmp.get("ks_by_position", []):
        if row["b"] not in systems:
            continue
        b = system_label(row["b"])
        total = sum(band["baseline"] for band in row["bands"])
        lines += [
            f"KS at k={row['k']} by word position, {b} against the Unadapted LSTM "
            "(`keyboard-compare --by-position`; the last column is the band's share of the "
            "whole difference, and the shares sum to it):",
            "",
            f"| words at position | words | share of the keystrokes | Unadapted | {b} | B - A "
            "(points) | share of the difference (points) |",
            "|---|---|---|---|---|---|---|",
        ]
        for band in row["bands"]:
            lines.append(
                f"| {band['positions']} | {band['words']:,} | "
                f"{100 * band['baseline'] / total:.1f}% | {pct(band['ks_a'])} | "
                f"{pct(band['ks_b'])} | {100 * (band['ks_b'] - band['ks_a']):+.2f} | "
                f"{100 * band['contribution']:+.2f} |"
            )
        lines.append("")
    return lines


def cache_section(exp: Path) -> list[str]:
    """The dev perplexities behind a `previous` corpus's caches (mix_weights.py --cache)."""
    path = exp / "mix" / "weights.json"
    caches = json.loads(path.read_text()).get("caches") if path.exists() else None
    if not caches:
        return []
    n = json.loads(path.read_text())["sentences"]
    rows = [
        f"| {LABELS[mode]} | {c['ppl_without']:.1f} | {c['ppl']:.1f} | "
        f"{100 * (c['ppl'] / c['ppl_without'] - 1):+.1f}% | {c['lambda']:g} | {c['min_chars']} |"
        for mode, c in caches.items()
    ]
    plain = {mode: c["ppl_without"] for mode, c in caches.items()}
    text_gain = ""
    if "unadapted" in plain and len(plain) > 1:
        other = next(m for m in plain if m != "unadapted")
        text_gain = (
            f" The previous sentences as the {LABELS[other]}'s context (the frozen text "
            f"encoder) change these words' perplexity by "
            f"{100 * (plain[other] / plain['unadapted'] - 1):+.1f}% against the Unadapted "
            "LSTM; as a cache, by the last column."
        )
    return [
        "The caches (`cache:` files in `exp/<corpus>/cache/`, `rescorer.lms.cache`: "
        "p = (1 - lambda) p_LSTM + lambda c(w)/n over the words of the previous sentences), "
        f"lambda and the shortest cached word chosen by the dev perplexity of the words a "
        f"keyboard can suggest (the first {n:,} dev sentences with a previous sentence, "
        f"`local/mix_weights.py`).{text_gain}",
        "",
        "| LSTM | dev ppl | with the cache | change | lambda | min_chars |",
        "|---|---|---|---|---|---|",
        *rows,
        "",
    ]


def onnx_section(exp: Path) -> list[str]:
    """The best context model exported per context value against torch (onnx_check.py)."""
    path = exp / "onnx" / "summary.json"
    if not path.exists():
        return []
    summary = json.loads(path.read_text(encoding="utf-8"))
    rows = summary["values"]
    if not rows:
        return []
    label, field = LABELS[summary["mode"]], rows[0]["field"]

    def mean(key: str, weight: str = "keystrokes") -> float:
        return sum(r[key] * r[weight] for r in rows) / sum(r[weight] for r in rows)

    total = {
        "value": "all",
        "sentences": sum(r["sentences"] for r in rows),
        "identical": sum(r["identical"] for r in rows),
        "same_reciprocal_rank": sum(r["same_reciprocal_rank"] for r in rows),
        "max_reciprocal_rank_difference": max(r["max_reciprocal_rank_difference"] for r in rows),
        **{k: mean(k) for k in ("onnx_ms", "torch_ms")},
        # word-start means weighted by keystrokes: close to, not exactly, the pooled mean
        **{k: mean(k) for k in ("onnx_word_start_ms", "torch_word_start_ms")},
    }
    table = [
        f"| {r['value']} | {r['sentences']} | {r['identical']} | {r['same_reciprocal_rank']} "
        f"(max difference {r['max_reciprocal_rank_difference']:.1e}) | {r['onnx_ms']:.2f} / "
        f"{r['torch_ms']:.2f} | {r['onnx_word_start_ms']:.2f} / {r['torch_word_start_ms']:.2f} |"
        for r in [*rows, total]
    ]
    ok = total["identical"] == total["sentences"]
    return [
        f"{label} exported once per {field} with the context folded into the weights (`rescorer "
        f"export --kind step --context {field}=VALUE`) and typed with `--lm onnx:`, against the "
        f"torch model given the {field} (`local/onnx_check.py`; the same sentences, CPU "
        "milliseconds per keystroke, mean):",
        "",
        f"| {field} | sentences | identical keystrokes and hits | same reciprocal rank | "
        "ms per keystroke, ONNX / torch | at word starts, ONNX / torch |",
        "|---|---|---|---|---|---|",
        *table,
        "",
        f"- ONNX step with the {field} folded in types as torch on every test sentence: "
        f"{total['identical']} of {total['sentences']}: **{'met' if ok else 'missed'}** "
        "(a reciprocal rank that differs: the typed word's rank far down the list, where "
        "near-tied words may swap between float32 runtimes)",
        "",
    ]


def plot(gains: dict[str, tuple[dict, str]], out: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    panels = [(c, g) for c, g in gains.items() if g[1]]
    if not panels:
        return False
    cols = min(3, len(panels))
    rows_n = -(-len(panels) // cols)
    fig, axes = plt.subplots(rows_n, cols, figsize=(5 * cols, 4 * rows_n), squeeze=False)
    for ax in axes.flat[len(panels) :]:
        ax.set_visible(False)
    for ax, (corpus, (cmp, top)) in zip(axes.flat[: len(panels)], panels, strict=True):
        vals = sorted(
            v
            for v, row in cmp["ks_by_value"].items()
            if all(s in row for s in ("unadapted", top, f"{top}_nocontext"))
        )
        rows = [cmp["ks_by_value"][v] for v in vals]
        xs = range(len(vals))
        g_u = [100 * (r[top]["ks3"] - r["unadapted"]["ks3"]) for r in rows]
        g_w = [100 * (r[top]["ks3"] - r[f"{top}_nocontext"]["ks3"]) for r in rows]
        cache = all("unadapted_cache" in r for r in rows)  # a previous-sentence corpus
        width = 0.27 if cache else 0.4
        left = -width if cache else -width / 2  # the first bar's offset from the tick
        ax.bar([x + left for x in xs], g_u, width, label=f"{LABELS[top]} over Unadapted")
        ax.bar([x + left + width for x in xs], g_w, width, label="over its context withheld")
        if cache:
            g_c = [100 * (r["unadapted_cache"]["ks3"] - r["unadapted"]["ks3"]) for r in rows]
            ax.bar([x + width for x in xs], g_c, width, label="Unadapted + cache over Unadapted")
        ax.axhline(0, color="black", linewidth=0.6)
        ax.set_xticks(list(xs))
        ax.set_xticklabels(vals, rotation=60, ha="right", fontsize=7)
        ax.set_ylabel("KS gain at k=3 (points)")
        ax.set_title(f"{corpus}: {LABELS[top]}", fontsize=9)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return True


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--exp", type=Path, required=True)
    ap.add_argument("--corpora", nargs="+", required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--command", required=True)
    ap.add_argument("--settings", default="")
    args = ap.parse_args()
    lines = [
        "# Keyboard prediction with a context",
        "",
        "Keystroke savings (KS) when typing held-out sentences letter by letter with k "
        "suggestions, for LSTMs of one size that read a context (Jaech & Ostendorf 2018: "
        "SoftmaxBias, ConcatCell, FactorCell) against the same LSTM without one (Unadapted), "
        "the same context model with the context withheld (its expected context, the mean "
        "over the training values), a KenLM 4-gram, for the previous sentences as context each "
        "LSTM with a unigram cache of them too, and the best context model (by dev "
        "perplexity) interpolated with the 4-gram. No space is counted after a sentence's last "
        "word. Made by `recipes/keyboard_context/run.sh` (README.md there: the stages).",
        "",
    ]
    gains = {}
    for corpus in args.corpora:
        exp = args.exp / corpus
        if not (exp / "data" / "stats.json").exists():
            continue
        sec, g = section(exp, corpus)
        lines += sec
        if g:
            gains[corpus] = g
    args.out.parent.mkdir(parents=True, exist_ok=True)
    png = args.out.parent / "ks_gain_by_value.png"
    if gains and plot(gains, png):
        lines += [
            "## KS gain by context value",
            "",
            "![KS gain at k=3 by context value](ks_gain_by_value.png)",
            "",
        ]
    times = args.exp / "times.tsv"
    lines += [
        "## Run",
        "",
        f"- Command: `{args.command}`",
        f"- Settings: `{args.settings}`",
        f"- Date: {dt.date.today().isoformat()}",
        f"- Machine: {cpu_name()}",
    ]
    if times.exists():
        steps = dict(ln.split("\t") for ln in times.read_text().splitlines() if "\t" in ln)
        lines.append("- Wall time (s): " + ", ".join(f"{n} {s}" for n, s in steps.items()))
    args.out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
