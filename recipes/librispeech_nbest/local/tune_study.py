#!/usr/bin/env python
"""Which tuning generalises from dev_clean to dev_other? (issue 15, item 4b)

Tunes every system of the recipe on dev_clean with each search variant of ``rescorer tune``
(``--selection``, ``--bound``), applies the weights unchanged to dev_other and writes a markdown
table of the word errors: the variant to keep is the one whose dev_other errors never rise when a
system gains a feature, and are lowest overall.

    python recipes/librispeech_nbest/local/tune_study.py --scored EXP/scored_lstm \
        --nbest DATA/nbest/librispeech-espnet --out EXP/tune_study.md
"""

from __future__ import annotations

import argparse
import logging
import time
from pathlib import Path

from rescorer.combine import one_best
from rescorer.core.output import atomic_write
from rescorer.formats import read_nbest
from rescorer.refs import read_references
from rescorer.tune import TuneOptions, TuneResult, tune
from rescorer.wer import score_corpus

# name | features | tune a length weight (the recipe's SYSTEMS)
SYSTEMS = [  # parents (NESTED) before their children
    ("2", "decoder,ctc", False),
    ("3a", "decoder,ctc,4gram", False),
    ("3", "decoder,ctc,4gram,4gram_oov", False),
    ("3b", "decoder,ctc,4gram,4gram_oov", True),
    ("4a", "decoder,ctc,lm,4gram", True),
    ("4", "decoder,ctc,lm,4gram,4gram_oov", True),
    ("3L", "decoder,ctc,lstm,lstm_oov", False),
    ("3M", "decoder,ctc,4gram,4gram_oov,lstm,lstm_oov", False),
    ("4L", "decoder,ctc,lm,4gram,4gram_oov,lstm,lstm_oov", True),
    # a subword LSTM `sw` (no OOV count) in the word LSTM's place, and beside it
    ("3S", "decoder,ctc,sw", False),
    ("3MS", "decoder,ctc,4gram,4gram_oov,lstm,lstm_oov,sw", False),
    ("4S", "decoder,ctc,lm,4gram,4gram_oov,sw", True),
    ("4LS", "decoder,ctc,lm,4gram,4gram_oov,lstm,lstm_oov,sw", True),
]
# Adding a feature (or the length) to the first system gives the second.
NESTED = [("2", "3a"), ("3a", "3"), ("3", "3b"), ("3b", "4"), ("4a", "4"), ("2", "3L"),
          ("3", "3M"), ("3L", "3M"), ("4", "4L"), ("2", "3S"), ("3M", "3MS"), ("4", "4S"),
          ("4L", "4LS"), ("4S", "4LS")]  # fmt: skip
VARIANTS = {
    "dev": dict(selection="dev"),
    "dev, bound 2": dict(selection="dev", bound=2.0),
    "dev, bound 1": dict(selection="dev", bound=1.0),
    "holdout": dict(selection="holdout"),
    "holdout, bound 2": dict(selection="holdout", bound=2.0),
    # each system's first search starts from its best-tuned parent's weights (new features at
    # 0), so its tuning-set errors never exceed the parent's
    "nested": dict(selection="dev", nested=True),
    "nested, holdout": dict(selection="holdout", nested=True),
    # expected errors annealed to gamma 8 (or 32), from the anchor alone or the parent
    "risk": dict(method="risk"),
    "risk to 32": dict(method="risk", risk_gammas=(1.0, 2.0, 4.0, 8.0, 16.0, 32.0)),
    "risk, nested": dict(method="risk", nested=True),
    "risk, l2 0.01": dict(method="risk", risk_l2=0.01),
    "risk, l2 0.1": dict(method="risk", risk_l2=0.1),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--scored", type=Path, required=True, help="dev_clean.jsonl, dev_other.jsonl")
    ap.add_argument("--nbest", type=Path, required=True, help="the ESPnet lists (references)")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--restarts", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--systems", default=None, help="comma list of row names (default: all)")
    ap.add_argument("--variants", default=None, help="variant names separated by ; (default: all)")
    args = ap.parse_args()
    variants = {
        k: v for k, v in VARIANTS.items() if args.variants is None or k in args.variants.split(";")
    }
    logging.basicConfig(level=logging.WARNING)
    sets = {}
    for name in ("dev_clean", "dev_other"):
        nbest = read_nbest(args.scored / f"{name}.jsonl", "jsonl")
        refs = read_references(args.nbest / name / "references" / "ref_wer.trn", "trn")
        sets[name] = (nbest, refs)
    have = set(sets["dev_clean"][0].score_names())
    systems = [s for s in SYSTEMS if set(s[1].split(",")) <= have]
    if args.systems is not None:
        systems = [s for s in systems if s[0] in args.systems.split(",")]
    errors: dict[tuple[str, str], tuple[int, int]] = {}
    t0 = time.time()
    for variant, extra in variants.items():
        extra = dict(extra)
        nested = extra.pop("nested", False)
        tuned: dict[str, TuneResult] = {}
        for name, feats, length in systems:
            options = TuneOptions(
                restarts=args.restarts, seed=args.seed, tune_length=length, **extra
            )
            nbest, refs = sets["dev_clean"]
            parents = [tuned[a] for a, b in NESTED if b == name and a in tuned]
            start = min(parents, key=lambda r: r.errors).weights if nested and parents else None
            result = tune(nbest, refs, feats.split(","), options, initial=start)
            tuned[name] = result
            other, other_refs = sets["dev_other"]
            held = score_corpus(other_refs, one_best(other, result.weights)).total.errors
            errors[(variant, name)] = (result.errors, held)
            print(f"{variant:18s} {name:3s} dev_clean {result.errors} dev_other {held}")
    words = sum(len(r) for r in sets["dev_other"][1].values())
    names = [s[0] for s in systems]
    lines = [
        "| tuning | " + " | ".join(names) + " | rises on adding a feature | sum |",
        "|---|" + "---|" * (len(names) + 2),
    ]
    for variant in variants:
        held = {n: errors[(variant, n)][1] for n in names}
        rises = [f"{a}->{b}" for a, b in NESTED if a in held and b in held and held[b] > held[a]]
        cells = [f"{errors[(variant, n)][0]} / {held[n]}" for n in names]
        lines.append(
            f"| {variant} | " + " | ".join(cells) + f" | {', '.join(rises) or 'none'} | "
            f"{sum(held.values())} |"
        )
    text = "\n".join(
        [
            f"Errors on dev_clean (tuning set) / dev_other ({words:,} words), {args.restarts} "
            f"restarts, seed {args.seed}; {time.time() - t0:.0f} s.",
            "",
            *lines,
            "",
        ]
    )
    with atomic_write(args.out) as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    main()
