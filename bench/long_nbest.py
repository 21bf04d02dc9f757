"""Long N-best lists (e.g. 2,000 hypotheses) grown from the shared ESPnet 30-best lists.

A deep N-best list is mostly the 1-best with a few local alternatives chosen at once, its score
the 1-best's plus the cost of each alternative. This generator makes such lists from
LibriSpeech dev_other: every 30-best hypothesis is aligned to its list's 1-best (``difflib``
opcodes), each such difference is one *edit* with the score differences it carried (decoder,
ctc, lm), and synthetic edits are added (a word substituted by another from the set's
vocabulary, deleted, or a word inserted), each costing about what a real one-word difference
costs. Random sets of non-overlapping edits applied to the 1-best give new hypotheses with
additive scores; the distinct texts with the highest ``score`` (= 0.6 decoder + 0.4 ctc +
0.6 lm, ESPnet's weighting of these lists) are kept, up to ``--size`` per list, the original 30
among them. References are embedded (JSONL, one list per line, sorted by score).

    .venv/bin/python bench/long_nbest.py --lists 65 --size 2000 --out long.jsonl
"""

from __future__ import annotations

import argparse
import difflib
import json
from pathlib import Path

import numpy as np

from rescorer.core.data import default_data_dir

REPO = Path(__file__).resolve().parents[1]
DATA = default_data_dir()  # $RESCORER_DATA, else ../shared/data
DEV_OTHER = DATA / "nbest" / "librispeech-espnet" / "dev_other"
FEATURES = ("decoder", "ctc", "lm")
ESPNET_WEIGHTS = (0.6, 0.4, 0.6)  # score = 0.6 decoder + 0.4 ctc + 0.6 lm


def _edits(words: tuple[str, ...], hyps, vocab: list[str], rng: np.random.Generator):
    """(regions, deltas) of every edit: regions are (i1, i2, replacement) in 1-best positions."""
    top = hyps[0]
    edits = []
    for h in hyps[1:]:
        ops = difflib.SequenceMatcher(a=words, b=h.words, autojunk=False).get_opcodes()
        regions = tuple(
            (i1, i2, tuple(h.words[j1:j2])) for t, i1, i2, j1, j2 in ops if t != "equal"
        )
        if regions:
            deltas = np.array([h.scores[f] - top.scores[f] for f in FEATURES])
            edits.append((regions, deltas))
    n = len(words)
    for _ in range(3 * max(n, 1)):  # synthetic one-word edits, costs like the real ones
        pos = int(rng.integers(0, n + 1))
        kind = rng.choice(3, p=(0.6, 0.2, 0.2)) if n else 2
        word = (vocab[int(rng.integers(len(vocab)))],)
        if kind == 0 and pos < n:
            region = (pos, pos + 1, word)
        elif kind == 1 and pos < n:
            region = (pos, pos + 1, ())
        else:
            region = (pos, pos, word)
        deltas = -np.array([rng.uniform(4, 16), rng.uniform(4, 20), rng.uniform(0, 12)])
        edits.append(((region,), deltas))
    return edits


def _conflict(a, b) -> bool:
    return any(r[0] <= s[1] and s[0] <= r[1] for r in a for s in b)


def _apply(words: tuple[str, ...], regions) -> tuple[str, ...]:
    out: list[str] = []
    pos = 0
    for i1, i2, rep in sorted(regions, key=lambda r: (r[0], r[1])):
        out.extend(words[pos:i1])
        out.extend(rep)
        pos = max(pos, i2)
    out.extend(words[pos:])
    return tuple(out)


def grow(nb, size: int, vocab: list[str], rng: np.random.Generator) -> list[dict]:
    """One list of up to ``size`` distinct hypotheses (dicts with text and scores), best first."""
    hyps = nb.hyps
    top = hyps[0]
    words = tuple(top.words)
    base = np.array([top.scores[f] for f in FEATURES])
    found: dict[tuple[str, ...], np.ndarray] = {}
    for h in hyps:  # the real hypotheses keep their own scores
        s = np.array([h.scores[f] for f in FEATURES])
        if tuple(h.words) not in found:
            found[tuple(h.words)] = s
    edits = _edits(words, hyps, vocab, rng)
    # A competing branch: the 2nd-best's difference is in a share ``rho`` of the new hypotheses,
    # so on some lists most of the mass disagrees with the 1-best there (where MBR differs).
    rho = rng.uniform(0.0, 0.7)
    tries = 0
    while len(found) < 4 * size and tries < 40 * size:
        tries += 1
        m = 1 + int(rng.poisson(2.0))
        chosen: list = []
        delta = np.zeros(len(FEATURES))
        if edits and rng.random() < rho:
            chosen.append(edits[0][0])
            delta = delta + edits[0][1]
        for k in rng.choice(len(edits), size=min(m, len(edits)), replace=False):
            regions, d = edits[int(k)]
            if not any(_conflict(regions, c) for c in chosen):
                chosen.append(regions)
                delta = delta + d
        text = _apply(words, [r for c in chosen for r in c])
        scores = base + delta
        if text not in found or _total(scores) > _total(found[text]):
            found[text] = scores
    ranked = sorted(found.items(), key=lambda kv: -_total(kv[1]))[:size]
    return [
        {
            "text": " ".join(t),
            "scores": {
                **{f: round(float(v), 4) for f, v in zip(FEATURES, s, strict=True)},
                "score": round(_total(s), 4),
            },
        }
        for t, s in ranked
    ]


def _total(s: np.ndarray) -> float:
    return float(np.dot(ESPNET_WEIGHTS, s))


def write_long_lists(out: Path, lists: int, size: int, seed: int = 0) -> tuple[int, int]:
    """Write ``lists`` grown lists of up to ``size`` hypotheses; (lists, hypotheses) written.

    The utterances are drawn at random (``seed``) among dev_other's with 15 to 40 reference words.
    """
    from rescorer.formats import read_nbest
    from rescorer.refs import read_references

    nbest = read_nbest(DEV_OTHER, "espnet")
    refs = read_references(DEV_OTHER / "references" / "ref_wer.trn")
    vocab = sorted({w for u in nbest for h in nbest[u] for w in h.words})
    rng = np.random.default_rng(seed)
    pool = [u for u in nbest if 15 <= len(refs[u]) <= 40 and len(nbest[u]) > 1]
    utts = [pool[int(k)] for k in sorted(rng.choice(len(pool), size=lists, replace=False))]
    written = 0
    tmp = out.with_name(out.name + ".tmp")
    with tmp.open("w", encoding="utf-8") as f:
        for utt in utts:
            hyps = grow(nbest[utt], size, vocab, rng)
            written += len(hyps)
            obj = {"utt": utt, "hyps": hyps, "ref": " ".join(refs[utt])}
            f.write(json.dumps(obj, ensure_ascii=False) + "\n")
    tmp.replace(out)
    return len(utts), written


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lists", type=int, default=65)
    ap.add_argument("--size", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args()
    lists, hyps = write_long_lists(a.out, a.lists, a.size, a.seed)
    per = hyps / max(lists, 1)
    print(f"wrote {a.out}: {lists} lists, {hyps:,} hypotheses ({per:.0f} per list)")


if __name__ == "__main__":
    main()
