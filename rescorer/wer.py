"""Word (and character) error rate: Levenshtein alignment, corpus scoring, oracle N-best WER.

Alignment model
---------------
Errors are counted with the unit-cost Levenshtein distance (substitution, deletion and insertion
each cost 1), as Kaldi's ``compute-wer`` and the WER figures of ESPnet/sclite report them. When
several alignments reach the minimum number of errors they can split those errors differently
between substitutions, deletions and insertions (``a b`` -> ``b c`` is either two substitutions
or one deletion, one match and one insertion). The split is made deterministic by a second,
lexicographic objective chosen with ``tie_break``:

``"correct"`` (default)
    among minimum-error alignments take the one with the most correct words, i.e. the fewest
    substitutions (so more deletion+insertion pairs). This is the split sclite produces with its
    default weights; on the LibriSpeech dev sets it reproduces the per-utterance
    ``#C #S #D #I`` of ESPnet's sclite ``result_wer.txt`` for every utterance, where the
    other rule does not.
``"substitution"``
    among minimum-error alignments take the one with the most substitutions (fewest
    deletion+insertion pairs), which is what a Kaldi-style DP that favours the diagonal on ties
    usually produces.

The total number of errors never depends on ``tie_break``; only the S/D/I split does. Both rules
are implemented exactly by a single integer cost (errors scaled by a large constant, plus the
secondary count), so the fast batched path and the full alignment always agree.

Where ties remain between alignments with identical counts (they differ only in *where* the
errors sit), :func:`align` backtraces from the end of both sequences preferring, in order,
the diagonal (match/substitution), a deletion, then an insertion.

Character error rate
--------------------
With ``unit="char"`` every word sequence is turned into characters with a ``<space>`` token
between consecutive words, as ESPnet scores CER (``"AB CD"`` -> ``A B <space> C D``); the
"reference words" of the resulting counts are then reference characters including the
``<space>`` tokens.
"""

from __future__ import annotations

import itertools
import logging
import math
import sys
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

from rescorer.core.errors import InputError, check_same_ids

if TYPE_CHECKING:  # numpy is imported where the batched paths need it: `wer` on a 1-best
    import numpy as np  # file does not load it (start-up time)

    from rescorer.nbest import NBest

logger = logging.getLogger(__name__)

SPACE_TOKEN = "<space>"
"""Word-boundary token inserted between words for character-level scoring (ESPnet convention)."""

NO_SPEAKER = "(none)"
"""Key under which :meth:`WerReport.by_speaker` groups utterances that have no speaker."""

TIE_BREAKS = ("correct", "substitution")
UNITS = ("word", "char")

# Pairs are scored in chunks of at most this many DP cells (chunk rows x padded row width).
_CHUNK_CELLS = 1 << 18


# --------------------------------------------------------------------------------------------
# Counts
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ErrorCounts:
    """Substitutions, deletions and insertions against ``ref_words`` reference words.

    ``wer`` is a fraction (``errors / ref_words``). With ``ref_words == 0`` it is defined as
    ``0.0`` when there are no errors and ``math.inf`` otherwise (insertions into an empty
    reference have no finite rate).
    """

    sub: int
    dele: int
    ins: int
    ref_words: int

    def __post_init__(self) -> None:
        for name in ("sub", "dele", "ins", "ref_words"):
            value = getattr(self, name)
            if int(value) != value or value < 0:
                raise ValueError(f"ErrorCounts.{name} must be a non-negative integer, got {value}")
            object.__setattr__(self, name, int(value))
        if self.sub + self.dele > self.ref_words:
            raise ValueError(
                f"ErrorCounts: sub + dele ({self.sub} + {self.dele}) exceed "
                f"ref_words ({self.ref_words})"
            )

    @property
    def errors(self) -> int:
        """Total errors ``sub + dele + ins``."""
        return self.sub + self.dele + self.ins

    @property
    def correct(self) -> int:
        """Correctly recognised reference words ``ref_words - sub - dele``."""
        return self.ref_words - self.sub - self.dele

    @property
    def hyp_words(self) -> int:
        """Length of the hypothesis ``correct + sub + ins``."""
        return self.correct + self.sub + self.ins

    @property
    def wer(self) -> float:
        """Error rate as a fraction (0.017 for 1.7 %); see the class docstring for 0 words."""
        return _rate(self.errors, self.ref_words)

    def __add__(self, other: ErrorCounts) -> ErrorCounts:
        if not isinstance(other, ErrorCounts):
            return NotImplemented
        return ErrorCounts(
            self.sub + other.sub,
            self.dele + other.dele,
            self.ins + other.ins,
            self.ref_words + other.ref_words,
        )

    def kaldi_line(self, label: str = "%WER") -> str:
        """Kaldi ``compute-wer`` form: ``%WER 1.70 [ 925 / 54402, 110 ins, 95 del, 720 sub ]``."""
        return (
            f"{label} {100.0 * self.wer:.2f} [ {self.errors} / {self.ref_words}, "
            f"{self.ins} ins, {self.dele} del, {self.sub} sub ]"
        )

    @staticmethod
    def zero() -> ErrorCounts:
        """No errors over no words (the identity of ``+``)."""
        return ErrorCounts(0, 0, 0, 0)


def _rate(num: float, den: float) -> float:
    if den == 0:
        return 0.0 if num == 0 else math.inf
    return num / den


def sum_counts(counts: Iterable[ErrorCounts]) -> ErrorCounts:
    """The sum of ``counts`` (zero counts for an empty iterable)."""
    total = ErrorCounts.zero()
    for c in counts:
        total = total + c
    return total


# --------------------------------------------------------------------------------------------
# Cost encoding shared by the batched DP and the full alignment
# --------------------------------------------------------------------------------------------


class _Costs(NamedTuple):
    """Integer costs encoding (errors, secondary count) lexicographically.

    ``scale`` exceeds every possible secondary count, so ``cost // scale`` is the number of
    errors and ``cost % scale`` the secondary count (substitutions for ``"correct"``,
    deletions + insertions for ``"substitution"``).
    """

    sub: int
    dele: int
    ins: int
    scale: int
    tie_break: str


def _costs(tie_break: str, max_ref: int, max_hyp: int) -> _Costs:
    scale = max_ref + max_hyp + 1
    if tie_break == "correct":
        return _Costs(scale + 1, scale, scale, scale, tie_break)
    if tie_break == "substitution":
        return _Costs(scale, scale + 1, scale + 1, scale, tie_break)
    raise ValueError(f"tie_break must be one of {TIE_BREAKS}, got {tie_break!r}")


def _decode(cost: Any, n: Any, m: Any, c: _Costs) -> tuple[Any, Any, Any]:
    """(sub, dele, ins) from optimal costs and the ref/hyp lengths: int64 arrays or ints."""
    errors = cost // c.scale
    secondary = cost % c.scale
    if c.tie_break == "correct":
        sub = secondary
        delins = errors - sub
    else:
        delins = secondary
        sub = errors - delins
    # dele - ins == n - m for every alignment.
    dele = (delins + (n - m)) // 2
    ins = delins - dele
    return sub, dele, ins


def _check_tie_break(tie_break: str) -> None:
    if tie_break not in TIE_BREAKS:
        raise ValueError(f"tie_break must be one of {TIE_BREAKS}, got {tie_break!r}")


# --------------------------------------------------------------------------------------------
# Batched edit distance (counts only)
# --------------------------------------------------------------------------------------------


class _Vocab(dict):
    """Token -> consecutive integer id; unseen tokens get the next id on lookup."""

    def __missing__(self, key: Hashable) -> int:
        value = self[key] = len(self)
        return value

    def encode(self, seq: Sequence[Hashable]) -> list[int]:
        return list(map(self.__getitem__, seq))


class _Packed(NamedTuple):
    """Many integer sequences stored back to back: ``flat[starts[k] : starts[k] + lens[k]]``."""

    flat: np.ndarray
    starts: np.ndarray
    lens: np.ndarray

    @staticmethod
    def of(seqs: Sequence[Sequence[Hashable]], vocab: _Vocab) -> _Packed:
        import numpy as np

        lens = np.fromiter(map(len, seqs), dtype=np.int64, count=len(seqs))
        flat = np.fromiter(
            map(vocab.__getitem__, itertools.chain.from_iterable(seqs)),
            dtype=np.int32,
            count=int(lens.sum()),
        )
        starts = np.zeros(len(seqs), dtype=np.int64)
        np.cumsum(lens[:-1], out=starts[1:])
        return _Packed(flat, starts, lens)

    def padded(self, rows: np.ndarray, fill: int) -> tuple[np.ndarray, np.ndarray]:
        """Right-padded int32 matrix of the sequences ``rows`` (at least one column)."""
        import numpy as np

        lens = self.lens[rows]
        width = max(int(lens.max()) if len(rows) else 0, 1)
        col = np.arange(width)
        mask = col[None, :] < lens[:, None]
        out = np.full((len(rows), width), fill, dtype=np.int32)
        if self.flat.size:
            pos = np.minimum(self.starts[rows][:, None] + col[None, :], self.flat.size - 1)
            np.copyto(out, self.flat[pos], where=mask)
        return out, lens


def _batch_costs(
    ref: np.ndarray,
    ref_len: np.ndarray,
    hyp: np.ndarray,
    hyp_len: np.ndarray,
    c: _Costs,
) -> np.ndarray:
    """Optimal alignment cost of every (ref[b], hyp[b]) pair; all arrays share the batch axis.

    Row-by-row DP over reference positions, vectorised over the batch and the hypothesis axis.
    The insertion recurrence ``row[j] = min(t[j], row[j-1] + ins)`` along a row is solved in one
    pass as ``row[j] = j*ins + cummin_k<=j (t[k] - k*ins)``.
    """
    import numpy as np

    batch = ref.shape[0]
    n_max = int(ref_len.max()) if batch else 0
    m_max = int(hyp_len.max()) if batch else 0
    # int32 is enough unless costs can reach 2**31 (very long character sequences).
    bound = (n_max + m_max + 1) * (c.scale + 1)
    dtype = np.int32 if bound < 2**30 else np.int64
    hyp = hyp[:, :m_max]
    jc = np.arange(m_max + 1, dtype=dtype) * c.ins
    row = np.broadcast_to(jc, (batch, m_max + 1)).copy()
    result = row[np.arange(batch), hyp_len].copy()  # pairs with an empty reference
    sub_cost = dtype(c.sub)
    t = np.empty_like(row)
    for i in range(n_max):
        diag = row[:, :-1] + np.where(ref[:, i : i + 1] == hyp, dtype(0), sub_cost)
        np.minimum(diag, row[:, 1:] + dtype(c.dele), out=t[:, 1:])
        t[:, 0] = row[:, 0] + c.dele
        t -= jc
        np.minimum.accumulate(t, axis=1, out=row)
        row += jc
        done = np.flatnonzero(ref_len == i + 1)
        if done.size:
            result[done] = row[done, hyp_len[done]]
    return result.astype(np.int64)


def edit_distance_batch(
    pairs: Iterable[tuple[Sequence[Hashable], Sequence[Hashable]]],
    tie_break: str = "correct",
) -> np.ndarray:
    """Counts of many ``(ref, hyp)`` pairs at once, as an ``(N, 4)`` int64 array.

    Columns are ``sub, dele, ins, ref_words``; row ``k`` belongs to the ``k``-th pair and equals
    ``edit_distance(*pairs[k])``. Pairs are sorted by length and scored in vectorised chunks
    (about a second for 160k pairs of ~20 words). A reference object shared by several pairs
    (one reference, many N-best hypotheses) is encoded once.
    """
    import numpy as np

    _check_tie_break(tie_break)
    unique_refs: list[Sequence[Hashable]] = []
    ref_index: list[int] = []
    hyps: list[Sequence[Hashable]] = []
    seen: dict[int, int] = {}  # id(ref) -> index; unique_refs keeps the objects alive
    for ref, hyp in pairs:
        k = seen.get(id(ref))
        if k is None:
            k = seen[id(ref)] = len(unique_refs)
            unique_refs.append(ref)
        ref_index.append(k)
        hyps.append(hyp)
    vocab = _Vocab()
    return _packed_counts(
        _Packed.of(unique_refs, vocab),
        np.asarray(ref_index, dtype=np.int64),
        _Packed.of(hyps, vocab),
        tie_break,
    )


def _packed_counts(
    refs: _Packed, ref_index: np.ndarray, hyps: _Packed, tie_break: str
) -> np.ndarray:
    """Counts of the pairs ``(refs[ref_index[k]], hyps[k])`` as an ``(N, 4)`` array."""
    import numpy as np

    n_pairs = len(ref_index)
    out = np.zeros((n_pairs, 4), dtype=np.int64)
    if n_pairs == 0:
        return out
    ref_len = refs.lens[ref_index]
    hyp_len = hyps.lens
    order = np.lexsort((hyp_len, ref_len))
    start = 0
    while start < n_pairs:
        # The longest chunk from ``start`` whose padded DP row block (pairs x widest row) stays
        # within the cell budget; it cannot hold more pairs than the first pair's width allows.
        look = order[start : start + _CHUNK_CELLS // int(hyp_len[order[start]] + 1)]
        cells = (np.maximum.accumulate(hyp_len[look]) + 1) * np.arange(1, len(look) + 1)
        stop = start + max(1, int(np.searchsorted(cells, _CHUNK_CELLS, side="right")))
        idx = order[start:stop]
        r_ids, r_len = refs.padded(ref_index[idx], -1)
        h_ids, h_len = hyps.padded(idx, -2)
        c = _costs(tie_break, int(r_len.max()), int(h_len.max()))
        cost = _batch_costs(r_ids, r_len, h_ids, h_len, c)
        sub, dele, ins = _decode(cost, r_len, h_len, c)
        out[idx, 0] = sub
        out[idx, 1] = dele
        out[idx, 2] = ins
        out[idx, 3] = r_len
        start = stop
    return out


def edit_distance(
    ref: Sequence[Hashable], hyp: Sequence[Hashable], tie_break: str = "correct"
) -> ErrorCounts:
    """Error counts of ``hyp`` against ``ref`` without the backtrace.

    For many pairs use :func:`edit_distance_batch`, which is far faster per pair.
    """
    import numpy as np

    _check_tie_break(tie_break)
    vocab = _Vocab()
    r = np.asarray(vocab.encode(ref), dtype=np.int64)
    h = np.asarray(vocab.encode(hyp), dtype=np.int64)
    c = _costs(tie_break, len(r), len(h))
    cost = _cost_matrix(r, h, c)[-1, -1:]
    sub, dele, ins = _decode(cost, np.array([len(r)]), np.array([len(h)]), c)
    return ErrorCounts(int(sub[0]), int(dele[0]), int(ins[0]), len(r))


def _trimmed(ref: Sequence[Hashable], hyp: Sequence[Hashable]) -> tuple[int, int]:
    """Lengths of the common prefix and of the common suffix (not overlapping it).

    An optimal alignment matches them word for word: with a match costing 0 and every other
    operation a positive cost, aligning the first words when they are equal never costs more
    (the standard exchange argument), so the cost -- errors and secondary count alike -- is the
    cost of the middle parts.
    """
    n, m = len(ref), len(hyp)
    p = 0
    while p < n and p < m and ref[p] == hyp[p]:
        p += 1
    q = 0
    while q < n - p and q < m - p and ref[n - 1 - q] == hyp[m - 1 - q]:
        q += 1
    return p, q


def _small_cost(ref: Sequence[Hashable], hyp: Sequence[Hashable], c: _Costs) -> int:
    """Optimal alignment cost by a plain Python DP (small pairs: no numpy call overhead)."""
    if not ref or not hyp:
        return len(ref) * c.dele + len(hyp) * c.ins
    sub, dele, ins = c.sub, c.dele, c.ins
    prev = list(range(0, (len(hyp) + 1) * ins, ins))
    for word in ref:
        left = prev[0] + dele
        row = [left]
        for j, other in enumerate(hyp):
            best = prev[j] if word == other else prev[j] + sub
            up = prev[j + 1] + dele
            if up < best:
                best = up
            left += ins
            if left > best:
                left = best
            row.append(left)
        prev = row
    return prev[-1]


# Pairs whose middle parts (after the common prefix and suffix) span at most this many DP cells
# are counted in Python; larger ones go to the batched numpy DP -- unless numpy is not loaded yet
# and all of them together span at most PYTHON_CELL_BUDGET cells (~0.2 us each in Python, about
# what importing numpy costs).
SMALL_PAIR_CELLS = 400
PYTHON_CELL_BUDGET = 300_000


def edit_distance_counts(
    pairs: Sequence[tuple[Sequence[Hashable], Sequence[Hashable]]],
    tie_break: str = "correct",
) -> list[tuple[int, int, int, int]]:
    """``(sub, dele, ins, ref_words)`` of each pair, as :func:`edit_distance_batch` gives them.

    The common prefix and suffix of a pair are matched without a DP (see :func:`_trimmed`);
    what is left is usually a few words, counted by a small Python DP. Only pairs with a large
    middle part go to :func:`edit_distance_batch`, so scoring a 1-best file imports no numpy
    (a 2,864-utterance dev set: 18 ms instead of 110 ms).
    """
    _check_tie_break(tie_break)
    middles = []
    for ref, hyp in pairs:
        p, q = _trimmed(ref, hyp)
        middles.append((ref[p : len(ref) - q], hyp[p : len(hyp) - q]))
    cells = [len(r) * len(h) for r, h in middles]
    large = [k for k, n in enumerate(cells) if n > SMALL_PAIR_CELLS]
    if "numpy" not in sys.modules and sum(cells[k] for k in large) <= PYTHON_CELL_BUDGET:
        large = []
    skip = set(large)
    out: list[tuple[int, int, int, int]] = []
    for k, (mid_ref, mid_hyp) in enumerate(middles):
        if k in skip:
            out.append((0, 0, 0, 0))  # filled in below
            continue
        c = _costs(tie_break, len(mid_ref), len(mid_hyp))
        cost = _small_cost(mid_ref, mid_hyp, c)
        sub, dele, ins = _decode(cost, len(mid_ref), len(mid_hyp), c)
        out.append((int(sub), int(dele), int(ins), len(pairs[k][0])))
    if large:
        rows = edit_distance_batch([pairs[k] for k in large], tie_break)
        for k, row in zip(large, rows, strict=True):
            out[k] = (int(row[0]), int(row[1]), int(row[2]), int(row[3]))
    return out


def _counts_of_row(row: np.ndarray | Sequence[int]) -> ErrorCounts:
    return ErrorCounts(int(row[0]), int(row[1]), int(row[2]), int(row[3]))


# --------------------------------------------------------------------------------------------
# Full alignment
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Alignment:
    """A minimum-error alignment.

    ``ops`` are ``(code, ref_word, hyp_word)`` with codes ``"C"`` (correct), ``"S"``
    (substitution), ``"D"`` (deletion: ``hyp_word`` is ``None``) and ``"I"`` (insertion:
    ``ref_word`` is ``None``), in sequence order.
    """

    ops: tuple[tuple[str, str | None, str | None], ...]
    counts: ErrorCounts

    def pretty(self, gap: str = "***") -> str:
        """Three sclite-like lines ``REF:``, ``HYP:`` and ``Eval:`` with aligned columns."""
        ref_cols, hyp_cols, eval_cols = [], [], []
        for code, r, h in self.ops:
            rs = gap if r is None else str(r)
            hs = gap if h is None else str(h)
            w = max(len(rs), len(hs))
            ref_cols.append(rs.ljust(w))
            hyp_cols.append(hs.ljust(w))
            eval_cols.append(("" if code == "C" else code).ljust(w))
        return "\n".join(
            (
                ("REF:  " + " ".join(ref_cols)).rstrip(),
                ("HYP:  " + " ".join(hyp_cols)).rstrip(),
                ("Eval: " + " ".join(eval_cols)).rstrip(),
            )
        )


def _cost_matrix(r: np.ndarray, h: np.ndarray, c: _Costs) -> np.ndarray:
    """Full ``(n+1, m+1)`` DP matrix of optimal prefix costs (int64)."""
    import numpy as np

    n, m = len(r), len(h)
    jc = np.arange(m + 1, dtype=np.int64) * c.ins
    mat = np.empty((n + 1, m + 1), dtype=np.int64)
    mat[0] = jc
    t = np.empty(m + 1, dtype=np.int64)
    for i in range(1, n + 1):
        prev = mat[i - 1]
        diag = prev[:-1] + np.where(h == r[i - 1], 0, c.sub)
        np.minimum(diag, prev[1:] + c.dele, out=t[1:])
        t[0] = prev[0] + c.dele
        t -= jc
        np.minimum.accumulate(t, out=mat[i])
        mat[i] += jc
    return mat


def align(
    ref: Sequence[Hashable], hyp: Sequence[Hashable], tie_break: str = "correct"
) -> Alignment:
    """Minimum-error (unit-cost Levenshtein) alignment of ``hyp`` to ``ref``.

    The S/D/I split follows ``tie_break`` (see the module docstring); among alignments with the
    same counts the backtrace from the end prefers match/substitution, then deletion, then
    insertion. ``align(r, h).counts == edit_distance(r, h)`` always holds.
    """
    import numpy as np

    _check_tie_break(tie_break)
    ref = list(ref)
    hyp = list(hyp)
    vocab = _Vocab()
    r = np.asarray(vocab.encode(ref), dtype=np.int64)
    h = np.asarray(vocab.encode(hyp), dtype=np.int64)
    c = _costs(tie_break, len(ref), len(hyp))
    mat = _cost_matrix(r, h, c)
    ops: list[tuple[str, str | None, str | None]] = []
    i, j = len(ref), len(hyp)
    while i > 0 or j > 0:
        cur = mat[i, j]
        if i > 0 and j > 0:
            same = r[i - 1] == h[j - 1]
            if cur == mat[i - 1, j - 1] + (0 if same else c.sub):
                ops.append(("C" if same else "S", ref[i - 1], hyp[j - 1]))
                i -= 1
                j -= 1
                continue
        if i > 0 and cur == mat[i - 1, j] + c.dele:
            ops.append(("D", ref[i - 1], None))
            i -= 1
            continue
        # Only an insertion is left; the DP guarantees it is consistent.
        ops.append(("I", None, hyp[j - 1]))
        j -= 1
    ops.reverse()
    sub = sum(1 for op in ops if op[0] == "S")
    dele = sum(1 for op in ops if op[0] == "D")
    ins = sum(1 for op in ops if op[0] == "I")
    return Alignment(tuple(ops), ErrorCounts(sub, dele, ins, len(ref)))


# --------------------------------------------------------------------------------------------
# Units
# --------------------------------------------------------------------------------------------


def char_units(words: Sequence[str]) -> tuple[str, ...]:
    """Characters of ``words`` with :data:`SPACE_TOKEN` between words (ESPnet's CER units)."""
    out: list[str] = []
    for k, w in enumerate(words):
        if k:
            out.append(SPACE_TOKEN)
        out.extend(w)
    return tuple(out)


def _units(words: Sequence[str], unit: str, what: str, utt_id: str) -> Sequence[str]:
    if isinstance(words, str):
        raise TypeError(
            f"{what} {utt_id!r}: expected a sequence of words, got a string (split it first)"
        )
    if unit == "word":
        return words
    if unit == "char":
        return char_units(words)
    raise ValueError(f"unit must be one of {UNITS}, got {unit!r}")


# --------------------------------------------------------------------------------------------
# Corpus reports
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class UttResult:
    """Counts of one utterance."""

    utt_id: str
    speaker: str | None
    counts: ErrorCounts


class _Row(NamedTuple):
    name: str
    sentences: int
    sentence_errors: int
    counts: ErrorCounts


@dataclass(frozen=True)
class WerReport:
    """Corpus-level scoring result.

    ``total`` is the sum of the utterance counts; ``sentence_errors`` the number of utterances
    with at least one error. ``unit`` is ``"word"`` or ``"char"`` (labels only).
    """

    total: ErrorCounts
    utterances: tuple[UttResult, ...]
    sentence_errors: int
    unit: str = "word"

    @classmethod
    def from_utterances(cls, utterances: Iterable[UttResult], unit: str = "word") -> WerReport:
        """Build a report (total and sentence errors) from per-utterance results."""
        utts = tuple(utterances)
        total = sum_counts(u.counts for u in utts)
        return cls(total, utts, sum(1 for u in utts if u.counts.errors), unit)

    @property
    def num_utterances(self) -> int:
        return len(self.utterances)

    @property
    def wer(self) -> float:
        """Corpus error rate as a fraction (``total.wer``)."""
        return self.total.wer

    @property
    def ser(self) -> float:
        """Sentence error rate: fraction of utterances with at least one error (0 if none)."""
        return _rate(self.sentence_errors, len(self.utterances)) if self.utterances else 0.0

    @property
    def utt_ids(self) -> tuple[str, ...]:
        return tuple(u.utt_id for u in self.utterances)

    def errors_array(self) -> np.ndarray:
        """Per-utterance error counts (int64) in utterance order."""
        import numpy as np

        return np.fromiter(
            (u.counts.errors for u in self.utterances), dtype=np.int64, count=len(self.utterances)
        )

    def ref_lengths_array(self) -> np.ndarray:
        """Per-utterance reference lengths (int64) in utterance order."""
        import numpy as np

        return np.fromiter(
            (u.counts.ref_words for u in self.utterances),
            dtype=np.int64,
            count=len(self.utterances),
        )

    def by_speaker(self) -> dict[str, ErrorCounts]:
        """Summed counts per speaker, speakers sorted as strings; see :data:`NO_SPEAKER`."""
        return {row.name: row.counts for row in self._speaker_rows()}

    def _speaker_rows(self) -> list[_Row]:
        groups: dict[str, list[UttResult]] = {}
        for u in self.utterances:
            groups.setdefault(NO_SPEAKER if u.speaker is None else u.speaker, []).append(u)
        return [
            _Row(
                spk,
                len(us),
                sum(1 for u in us if u.counts.errors),
                sum_counts(u.counts for u in us),
            )
            for spk, us in sorted(groups.items())
        ]

    def _label(self) -> str:
        return "%CER" if self.unit == "char" else "%WER"

    def kaldi_line(self) -> str:
        """Kaldi ``compute-wer`` line of the total (``%CER`` for character reports)."""
        return self.total.kaldi_line(self._label())

    def ser_line(self) -> str:
        """Kaldi's sentence-error line: ``%SER 22.90 [ 619 / 2703 ]``."""
        n = len(self.utterances)
        return f"%SER {100.0 * self.ser:.2f} [ {self.sentence_errors} / {n} ]"

    def summary(self) -> str:
        """sclite-style table of percentages per speaker with a ``Sum/Avg`` row.

        Columns: speaker, sentences, reference words, then Corr/Sub/Del/Ins/Err as percentages
        of the reference words and S.Err as a percentage of the sentences (one decimal).
        """
        rows = self._speaker_rows()
        total = _Row("Sum/Avg", len(self.utterances), self.sentence_errors, self.total)
        name_w = max([4, *(len(r.name) for r in rows), len(total.name)])
        wrd = "# Chr" if self.unit == "char" else "# Wrd"
        header = (
            f"| {'SPKR':<{name_w}} | # Snt  {wrd:>6} | "
            f"{'Corr':>6} {'Sub':>6} {'Del':>6} {'Ins':>6} {'Err':>6} {'S.Err':>6} |"
        )
        rule = "|" + "-" * (name_w + 2) + "+" + "-" * 15 + "+" + "-" * (len(header) - name_w - 20)
        rule += "|"

        def line(row: _Row) -> str:
            c = row.counts
            pct = [
                _pct(c.correct, c.ref_words),
                _pct(c.sub, c.ref_words),
                _pct(c.dele, c.ref_words),
                _pct(c.ins, c.ref_words),
                _pct(c.errors, c.ref_words),
                _pct(row.sentence_errors, row.sentences),
            ]
            return (
                f"| {row.name:<{name_w}} | {row.sentences:5d} {c.ref_words:7d} | "
                + " ".join(f"{p:>6}" for p in pct)
                + " |"
            )

        out = [header, rule]
        for row in rows:
            out.append(line(row))
        out.append(rule.replace("-", "="))
        out.append(line(total))
        out.append(self.kaldi_line())
        out.append(self.ser_line())
        return "\n".join(out)

    def utterance_table(self) -> str:
        """One line per utterance: id, speaker, words, C/S/D/I, errors and WER in percent."""
        id_w = max([6, *(len(u.utt_id) for u in self.utterances)])
        spk_w = max([7, *(len(u.speaker or "-") for u in self.utterances)])
        lines = [
            f"{'utt_id':<{id_w}} {'speaker':<{spk_w}} {'#Wrd':>6} {'Corr':>6} {'Sub':>5} "
            f"{'Del':>5} {'Ins':>5} {'Err':>5} {'WER%':>7}"
        ]
        for u in self.utterances:
            c = u.counts
            lines.append(
                f"{u.utt_id:<{id_w}} {(u.speaker or '-'):<{spk_w}} {c.ref_words:6d} "
                f"{c.correct:6d} {c.sub:5d} {c.dele:5d} {c.ins:5d} {c.errors:5d} "
                f"{_pct(c.errors, c.ref_words, 2):>7}"
            )
        return "\n".join(lines)


def _pct(num: int, den: int, digits: int = 1) -> str:
    return f"{100.0 * _rate(num, den):.{digits}f}"


def _speaker_of(speakers: Mapping[str, str] | None, ids: Sequence[str]) -> list[str | None]:
    if speakers is None:
        return [None] * len(ids)
    missing = [u for u in ids if u not in speakers]
    if missing:
        shown = ", ".join(sorted(missing)[:5])
        more = f" (+{len(missing) - 5} more)" if len(missing) > 5 else ""
        raise InputError(f"no speaker for {len(missing)} utterance(s): {shown}{more}")
    return [speakers[u] for u in ids]


def score_corpus(
    refs: Mapping[str, Sequence[str]],
    hyps: Mapping[str, Sequence[str]],
    speakers: Mapping[str, str] | None = None,
    unit: str = "word",
    tie_break: str = "correct",
) -> WerReport:
    """Score ``hyps`` against ``refs`` (both utterance id -> words).

    The id sets must be equal (:class:`InputError` naming missing/extra hypothesis ids
    otherwise). Utterances are reported in the order of ``refs``. ``speakers`` (utt id ->
    speaker, e.g. from ``utt2spk``) must cover every utterance when given. ``unit="char"``
    scores characters (CER), see the module docstring.
    """
    if unit not in UNITS:
        raise ValueError(f"unit must be one of {UNITS}, got {unit!r}")
    check_same_ids(set(refs), set(hyps), what="hypothesis")
    ids = list(refs)
    spk = _speaker_of(speakers, ids)
    pairs = [
        (_units(refs[u], unit, "reference", u), _units(hyps[u], unit, "hypothesis", u)) for u in ids
    ]
    counts = edit_distance_counts(pairs, tie_break)
    utts = tuple(
        UttResult(u, s, _counts_of_row(row)) for u, s, row in zip(ids, spk, counts, strict=True)
    )
    return WerReport.from_utterances(utts, unit)


# --------------------------------------------------------------------------------------------
# N-best
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class OracleResult:
    """Oracle (lowest-error) choice per utterance and the report of those choices."""

    report: WerReport
    best_index: dict[str, int]


def _nbest_counts(
    nbest: NBest, refs: Mapping[str, Sequence[str]], unit: str, tie_break: str
) -> tuple[list[str], dict[str, np.ndarray]]:
    """Per-utterance ``(n_hyps, 4)`` count arrays (sub, dele, ins, ref_words) in ``refs`` order."""
    import numpy as np

    if unit not in UNITS:
        raise ValueError(f"unit must be one of {UNITS}, got {unit!r}")
    _check_tie_break(tie_break)
    check_same_ids(set(refs), set(nbest), what="N-best")
    ids = list(refs)
    ref_seqs = [_units(refs[u], unit, "reference", u) for u in ids]
    hyp_seqs = [_units(h.words, unit, "hypothesis", u) for u in ids for h in nbest[u]]
    sizes = [len(nbest[u]) for u in ids]
    vocab = _Vocab()
    counts = _packed_counts(
        _Packed.of(ref_seqs, vocab),
        np.repeat(np.arange(len(ids), dtype=np.int64), sizes),
        _Packed.of(hyp_seqs, vocab),
        tie_break,
    )
    out: dict[str, np.ndarray] = {}
    start = 0
    for u, k in zip(ids, sizes, strict=True):
        out[u] = counts[start : start + k]
        start += k
    return ids, out


def hypothesis_errors(
    nbest: NBest,
    refs: Mapping[str, Sequence[str]],
    unit: str = "word",
    tie_break: str = "correct",
) -> dict[str, np.ndarray]:
    """Error count of every hypothesis: utt id -> int64 array (one entry per hypothesis).

    Ids of ``nbest`` and ``refs`` must match. All pairs are scored in one batched pass.
    """
    _, counts = _nbest_counts(nbest, refs, unit, tie_break)
    return {u: c[:, :3].sum(axis=1) for u, c in counts.items()}


def ref_lengths(refs: Mapping[str, Sequence[str]], unit: str = "word") -> dict[str, int]:
    """Reference length per utterance in scoring units (words, or characters for ``"char"``)."""
    return {u: len(_units(words, unit, "reference", u)) for u, words in refs.items()}


def oracle(
    nbest: NBest,
    refs: Mapping[str, Sequence[str]],
    speakers: Mapping[str, str] | None = None,
    unit: str = "word",
    tie_break: str = "correct",
) -> OracleResult:
    """Lowest-error hypothesis of every utterance (the first one on ties) and its report.

    Ids must match; every N-best list must hold at least one hypothesis.
    """
    import numpy as np

    ids, counts = _nbest_counts(nbest, refs, unit, tie_break)
    spk = _speaker_of(speakers, ids)
    empty = [u for u in ids if len(counts[u]) == 0]
    if empty:
        raise InputError(f"{len(empty)} N-best list(s) without hypotheses: {', '.join(empty[:5])}")
    best: dict[str, int] = {}
    utts = []
    for u, s in zip(ids, spk, strict=True):
        c = counts[u]
        k = int(np.argmin(c[:, :3].sum(axis=1)))  # argmin returns the first minimum
        best[u] = k
        utts.append(UttResult(u, s, _counts_of_row(c[k])))
    return OracleResult(WerReport.from_utterances(utts, unit), best)
