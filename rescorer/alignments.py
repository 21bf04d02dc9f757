"""Per-utterance alignments and confusion tables (sclite ``.pra``-like), for ``wer --align``.

Each utterance is aligned by :func:`rescorer.wer.align` with the tie-break rule of the WER
counts, so its ``#C #S #D #I`` are the counts :func:`rescorer.wer.score_corpus` reports for it
(``align(r, h).counts == edit_distance(r, h)``). The text form::

    id: 1272-128104-0001
    Scores: (#C #S #D #I) 9 1 0 0
    REF:  NOR IS MISTER QUILTER'S MANNER LESS INTERESTING THAN HIS MATTER
    HYP:  NOR IS MISTER QUILTER'S MANNER LESS INTERESTING THAN HIS MADDER
    Eval:                                                          S

then the substitutions counted by (reference word, hypothesis word) pair, the deleted reference
words and the inserted hypothesis words, most frequent first (ties in string order).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from rescorer.core.errors import check_same_ids
from rescorer.wer import TIE_BREAKS, UNITS, Alignment, ErrorCounts, align, char_units, sum_counts


@dataclass(frozen=True)
class UttAlignment:
    """The alignment of one utterance."""

    # Utterance id.
    utt_id: str
    # Its minimum-error alignment (ops and counts).
    alignment: Alignment


@dataclass(frozen=True)
class AlignmentReport:
    """Alignments of a corpus, in reference order, and the tables derived from them."""

    # One alignment per utterance.
    utterances: tuple[UttAlignment, ...]
    # "word" or "char" (the units that were aligned).
    unit: str = "word"

    @property
    def total(self) -> ErrorCounts:
        """The summed counts (equal to the WER report's total)."""
        return sum_counts(u.alignment.counts for u in self.utterances)

    def _ops(self, code: str) -> Iterable[tuple[str, str | None, str | None]]:
        for u in self.utterances:
            for op in u.alignment.ops:
                if op[0] == code:
                    yield op

    def confusion_pairs(self) -> list[tuple[tuple[str, str], int]]:
        """``((ref_word, hyp_word), count)`` of every substitution, most frequent first."""
        counts = Counter((str(r), str(h)) for _, r, h in self._ops("S"))
        return sorted(counts.items(), key=lambda item: (-item[1], item[0]))

    def deletions(self) -> list[tuple[str, int]]:
        """``(ref_word, count)`` of every deleted reference word, most frequent first."""
        return _ranked(str(r) for _, r, _ in self._ops("D"))

    def insertions(self) -> list[tuple[str, int]]:
        """``(hyp_word, count)`` of every inserted hypothesis word, most frequent first."""
        return _ranked(str(h) for _, _, h in self._ops("I"))

    def render(self, header: Sequence[str] = ()) -> str:
        """The text form (see the module docstring); ``header`` lines go first, as comments."""
        out = [f"# {line}" for line in header]
        for u in self.utterances:
            c = u.alignment.counts
            out += ["", f"id: {u.utt_id}"]
            out.append(f"Scores: (#C #S #D #I) {c.correct} {c.sub} {c.dele} {c.ins}")
            out.append(u.alignment.pretty())
        pairs = self.confusion_pairs()
        total = self.total
        out += ["", f"CONFUSION PAIRS (REF ==> HYP): {total.sub} substitutions, {len(pairs)} pairs"]
        out += [f"{k:5d}: {n:6d}  ->  {r} ==> {h}" for k, ((r, h), n) in enumerate(pairs, 1)]
        for title, rows, n in (
            ("DELETIONS (REF)", self.deletions(), total.dele),
            ("INSERTIONS (HYP)", self.insertions(), total.ins),
        ):
            out += ["", f"{title}: {n} in all, {len(rows)} distinct"]
            out += [f"{k:5d}: {count:6d}  ->  {word}" for k, (word, count) in enumerate(rows, 1)]
        return "\n".join(out) + "\n"


def _ranked(items: Iterable[str]) -> list[tuple[str, int]]:
    return sorted(Counter(items).items(), key=lambda item: (-item[1], item[0]))


def align_corpus(
    refs: Mapping[str, Sequence[str]],
    hyps: Mapping[str, Sequence[str]],
    unit: str = "word",
    tie_break: str = "correct",
) -> AlignmentReport:
    """Align every hypothesis to its reference (ids must match; reference order).

    ``unit="char"`` aligns the characters of the words with ``<space>`` between words, as the
    CER counts do. ValueError for an unknown ``unit`` or ``tie_break``.
    """
    if unit not in UNITS:
        raise ValueError(f"unit must be one of {UNITS}, got {unit!r}")
    if tie_break not in TIE_BREAKS:
        raise ValueError(f"tie_break must be one of {TIE_BREAKS}, got {tie_break!r}")
    check_same_ids(set(refs), set(hyps), what="hypothesis")

    def units(words: Sequence[str]) -> Sequence[str]:
        return char_units(words) if unit == "char" else words

    return AlignmentReport(
        tuple(UttAlignment(u, align(units(refs[u]), units(hyps[u]), tie_break)) for u in refs),
        unit,
    )
