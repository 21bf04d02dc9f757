"""Paired tests by sentence and the KS gain by context value, for one corpus.

Reads the per-sentence results of stage 5 (``eval/<system>.jsonl``) and writes
``compare.json``: for every pair below, at each k, the KS of both, the difference and the
matched-pairs, sign and Wilcoxon tests and the bootstrap interval of
:func:`rescorer.keyboard.compare_systems` (what ``rescorer keyboard-compare`` prints, which
stage 6 also runs into ``compare/``); per value of the label field (topic, class, genre),
the KS of every system over the sentences of that value; and for the Unadapted LSTM against each
context model (with its context, or its cache), the KS at k=3 by word position in the sentence
(:func:`rescorer.keyboard.keystrokes_by_position`, ``keyboard-compare --by-position``): where
in a sentence the context saves.

Pairs (A -> B, positive differences favour B): the Unadapted LSTM -> each context model with its
context; each context model without its context (the control) -> with it; for a ``previous``
corpus each LSTM -> the same LSTM with a cache of the previous sentences, and the Unadapted LSTM
-> each context model with its cache; the 4-gram and the best context system -> their
interpolation; the 4-gram -> the Unadapted LSTM. Pairs whose systems were not typed are left out.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from rescorer.keyboard import compare_systems, keystrokes_by_position, read_sentence_results

KS = (1, 3, 5)


def pairs(modes: list[str], best: str | None) -> list[tuple[str, str]]:
    out = [("4gram", "unadapted")]
    for m in modes:
        if m != "unadapted":
            out += [("unadapted", m), (f"{m}_nocontext", m)]
    if "concat" in modes and "factor" in modes:
        out.append(("concat", "factor"))
    for m in modes:  # the caches of a `previous` corpus
        out.append((m, f"{m}_cache"))
        if m != "unadapted":
            out.append(("unadapted", f"{m}_cache"))
    if best:
        out += [("4gram", f"4gram_{best}"), (best, f"4gram_{best}")]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--exp", type=Path, required=True, help="the corpus's exp folder")
    ap.add_argument("--modes", required=True)
    ap.add_argument("--pairs", action="store_true", help="print the pairs (A B per line), exit")
    args = ap.parse_args()
    modes = args.modes.split()
    best_file = args.exp / "mix" / "best_mode.txt"
    best = best_file.read_text().strip() if best_file.exists() else None
    todo = pairs(modes, best)
    if args.pairs:
        print("\n".join(f"{a} {b}" for a, b in todo))
        return
    ev = args.exp / "eval"
    results = {p.stem: read_sentence_results(p) for p in sorted(ev.glob("*.jsonl"))}
    stats = json.loads((args.exp / "data" / "stats.json").read_text())
    label_field = stats["label_field"]
    labels = {}
    for line in (args.exp / "data" / "test.labels.jsonl").read_text().splitlines():
        row = json.loads(line)
        labels[row["utt"]] = row[label_field]

    comparisons = []
    for a, b in todo:
        if a not in results or b not in results:
            continue
        for k in KS:
            c = compare_systems(results[a], results[b], k, names=(a, b))
            comparisons.append(
                {
                    "a": a,
                    "b": b,
                    "k": k,
                    "n": c.n,
                    "ks_a": c.ks_a,
                    "ks_b": c.ks_b,
                    "difference": c.difference,
                    "b_better": c.b_better,
                    "b_worse": c.b_worse,
                    "p_matched_pairs": c.matched_pairs.p_value,
                    "p_sign": c.sign.p_value,
                    "p_wilcoxon": c.wilcoxon.p_value,
                    "ci95": [-c.bootstrap.ci_high, -c.bootstrap.ci_low],
                    "verdict": c.verdict,
                }
            )

    by_position = []
    for a, b in todo:
        if a != "unadapted" or a not in results or b not in results:
            continue
        if any(r.word_keystrokes is None for r in results[a] + results[b]):
            continue  # typed before the per-word counts were recorded
        bands = keystrokes_by_position(results[a], results[b], 3)
        by_position.append(
            {
                "a": a,
                "b": b,
                "k": 3,
                "bands": [
                    {
                        "positions": g.label,
                        "words": g.words,
                        "baseline": g.baseline,
                        "ks_a": g.ks_a,
                        "ks_b": g.ks_b,
                        "contribution": g.contribution,
                    }
                    for g in bands
                ],
            }
        )

    by_value: dict[str, dict[str, dict[str, float]]] = {}
    for system, rows in results.items():
        for k in KS:
            acc: dict[str, list[int]] = {}
            for r in rows:
                v = labels.get(r.id, "?")
                acc.setdefault(v, [0, 0, 0])
                acc[v][0] += r.keystrokes[k]
                acc[v][1] += r.baseline
                acc[v][2] += 1
            for v, (used, base, n) in acc.items():
                cell = by_value.setdefault(v, {}).setdefault(system, {})
                cell[f"ks{k}"] = 1 - used / base
                cell["sentences"] = n
    out = {
        "corpus": stats["corpus"],
        "field": stats["field"],
        "label_field": label_field,
        "best_mode": best,
        "comparisons": comparisons,
        "ks_by_value": by_value,
        "ks_by_position": by_position,
    }
    (args.exp / "compare.json").write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
    for c in comparisons:
        if c["k"] == 3:
            print(
                f"k=3 {c['a']:>22} -> {c['b']:<22} {100 * c['difference']:+6.2f} points, "
                f"p = {c['p_matched_pairs']:.3g} ({c['verdict']})"
            )


if __name__ == "__main__":
    main()
