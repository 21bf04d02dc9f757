"""Word classes for a class-factored output layer P(w|h) = P(c(w)|h) P(w|c(w),h).

Two ways to assign every output unit one class:

- :func:`frequency_classes`: frequency binning (Mikolov et al. 2011, "Extensions of recurrent
  neural network language model"): units in descending count, cut into classes of about equal
  shares of ``count ** power`` (``power=0.5`` gives the rare words smaller classes than plain
  counts would).
- :func:`brown_classes`: classes that maximise the likelihood of a class bigram model, Brown et
  al. (1992)'s criterion, found by the exchange algorithm (Kneser & Ney 1993; Martin, Liermann &
  Ney 1998): starting from frequency binning, each word in turn moves to the class that most
  increases the likelihood, until no word moves or the iterations run out. (Brown et al. build
  the classes by agglomerative merging instead; both optimise the same objective, the exchange
  algorithm in O(iterations * words * classes) time, which suits a pure-numpy implementation.)

The class bigram log-likelihood, up to terms that do not depend on the classes, is
``F = sum_{c,d} N(c,d) log N(c,d) - sum_c N(c,.) log N(c,.) - sum_d N(.,d) log N(.,d)``
where ``N(c,d)`` counts bigrams whose first word is in class c and second in class d.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence

import numpy as np

logger = logging.getLogger(__name__)


def _renumber(classes: np.ndarray) -> list[int]:
    """Class ids 0..C-1 in order of first appearance by unit id (no gaps)."""
    mapping: dict[int, int] = {}
    return [mapping.setdefault(int(c), len(mapping)) for c in classes]


def frequency_classes(counts: Sequence[int], num_classes: int, power: float = 0.5) -> list[int]:
    """Class of each unit by frequency binning into at most ``num_classes`` classes.

    Units are taken in descending count (ties by id); a new class starts once the running share
    of ``count ** power`` passes the next multiple of ``1 / num_classes``. A unit frequent
    enough fills a class alone; units of count 0 go to the last class. Returns a class id per
    unit, numbered by first appearance in id order.
    """
    if num_classes < 1:
        raise ValueError(f"num_classes must be >= 1, got {num_classes}")
    c = np.asarray(counts, dtype=np.float64)
    if c.ndim != 1 or len(c) == 0 or (c < 0).any():
        raise ValueError("counts must be a non-empty list of non-negative numbers")
    mass = c**power
    mass[c == 0] = 0.0
    total = mass.sum()
    order = sorted(range(len(c)), key=lambda i: (-c[i], i))
    classes = np.zeros(len(c), dtype=np.int64)
    cls, running = 0, 0.0
    for i in order:
        classes[i] = cls
        running += mass[i]
        if total > 0 and cls < num_classes - 1 and running / total >= (cls + 1) / num_classes:
            cls += 1
    return _renumber(classes)


def shortlist_classes(counts: Sequence[int], shortlist: int, num_clusters: int) -> list[int]:
    """A class per frequent unit, and a few clusters of the rest (the adaptive softmax layout).

    The ``shortlist`` most frequent units (count > 0; ties by id) are each a class of their own:
    P(w|h) = P(class w|h), one softmax over them and the clusters, as in the adaptive softmax
    head (Grave et al. 2017). The other units are cut, in descending count, into
    ``num_clusters`` clusters of about equal count mass (:func:`frequency_classes` with power
    1), so rarer clusters are larger and rarer. Units of count 0 go to the last cluster. Class
    ids are numbered by first appearance in id order.
    """
    if shortlist < 0 or num_clusters < 1:
        raise ValueError(
            f"expected shortlist >= 0 and num_clusters >= 1, got {shortlist} and {num_clusters}"
        )
    c = np.asarray(counts, dtype=np.float64)
    if c.ndim != 1 or len(c) == 0 or (c < 0).any():
        raise ValueError("counts must be a non-empty list of non-negative numbers")
    order = sorted(range(len(c)), key=lambda i: (-c[i], i))
    head = [i for i in order if c[i] > 0][:shortlist]
    if len(head) >= len(c):
        head = head[: len(c) - 1]  # keep one unit for a cluster
    classes = np.zeros(len(c), dtype=np.int64)
    classes[head] = np.arange(len(head))
    tail = np.array(sorted(set(range(len(c))) - set(head)), dtype=np.int64)
    tail_classes = frequency_classes(c[tail].tolist(), num_clusters, power=1.0)
    classes[tail] = len(head) + np.asarray(tail_classes, dtype=np.int64)
    return _renumber(classes)


def _xlogx(x: np.ndarray) -> np.ndarray:
    out = np.zeros_like(x, dtype=np.float64)
    pos = x > 0
    out[pos] = x[pos] * np.log(x[pos])
    return out


Bigrams = tuple[np.ndarray, np.ndarray, np.ndarray]
"""Distinct bigrams ``(left, right, count)``, sorted by ``(left, right)``."""


def bigram_counts(sequences: Iterable[Sequence[int]], vocab_size: int) -> Bigrams:
    """Distinct bigrams ``(left, right, count)`` of the id sequences (ids < vocab_size)."""
    lefts: list[np.ndarray] = []
    rights: list[np.ndarray] = []
    for seq in sequences:
        a = np.asarray(seq, dtype=np.int64)
        if len(a) > 1:
            lefts.append(a[:-1])
            rights.append(a[1:])
    if not lefts:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, empty
    left = np.concatenate(lefts)
    right = np.concatenate(rights)
    if left.max(initial=0) >= vocab_size or right.max(initial=0) >= vocab_size:
        raise ValueError(f"ids must be below vocab_size={vocab_size}")
    keys, counts = np.unique(left * vocab_size + right, return_counts=True)
    return keys // vocab_size, keys % vocab_size, counts.astype(np.int64)


def merged_bigrams(tables: Sequence[Bigrams], vocab_size: int) -> Bigrams:
    """The bigram counts of several parts together (ids < vocab_size), as :func:`bigram_counts`
    of all their sequences gives them."""
    left = np.concatenate([t[0] for t in tables]).astype(np.int64)
    right = np.concatenate([t[1] for t in tables]).astype(np.int64)
    counts = np.concatenate([t[2] for t in tables]).astype(np.int64)
    keys, inverse = np.unique(left * vocab_size + right, return_inverse=True)
    total = np.zeros(len(keys), dtype=np.int64)
    np.add.at(total, inverse.reshape(-1), counts)
    return keys // vocab_size, keys % vocab_size, total


def class_bigram_objective(
    classes: Sequence[int], bigrams: tuple[np.ndarray, np.ndarray, np.ndarray]
) -> float:
    """F of the module docstring for a class assignment (higher is better)."""
    cls = np.asarray(classes, dtype=np.int64)
    left, right, count = bigrams
    n = int(cls.max()) + 1
    m = np.zeros((n, n))
    np.add.at(m, (cls[left], cls[right]), count)
    return float(_xlogx(m).sum() - _xlogx(m.sum(1)).sum() - _xlogx(m.sum(0)).sum())


def brown_classes(
    sequences: Iterable[Sequence[int]],
    counts: Sequence[int],
    num_classes: int,
    iterations: int = 5,
    fixed: Iterable[int] = (),
    *,
    bigrams: Bigrams | None = None,
) -> list[int]:
    """Exchange-algorithm clustering of the units ``0..len(counts)-1`` (see the module docstring).

    ``sequences`` are training sentences as unit ids (with their boundary units), ``counts``
    the unit counts (used for the initial frequency binning and the visiting order, most
    frequent first). Units in ``fixed`` keep their initial class. Returns a class id per unit.
    ``bigrams``: the sentences' :func:`bigram_counts` made beforehand (e.g. added up over a
    corpus's shards, :func:`merged_bigrams`); ``sequences`` are then unused.
    """
    v = len(counts)
    init = np.asarray(frequency_classes(counts, num_classes), dtype=np.int64)
    c = int(init.max()) + 1
    left, right, cnt = bigram_counts(sequences, v) if bigrams is None else bigrams
    cls = init.copy()
    if c < 2 or len(cnt) == 0:
        return _renumber(cls)
    # Row-wise (successors) and column-wise (predecessors) adjacency, without self-loops.
    self_loop = np.zeros(v)
    loops = left == right
    np.add.at(self_loop, left[loops], cnt[loops])
    l_nl, r_nl, c_nl = left[~loops], right[~loops], cnt[~loops].astype(np.float64)
    by_left = np.argsort(l_nl, kind="stable")
    succ_ptr = np.searchsorted(l_nl[by_left], np.arange(v + 1))
    succ, succ_cnt = r_nl[by_left], c_nl[by_left]
    by_right = np.argsort(r_nl, kind="stable")
    pred_ptr = np.searchsorted(r_nl[by_right], np.arange(v + 1))
    pred, pred_cnt = l_nl[by_right], c_nl[by_right]
    out_total = np.zeros(v)  # times each unit is a left element
    in_total = np.zeros(v)
    np.add.at(out_total, left, cnt)
    np.add.at(in_total, right, cnt)

    m = np.zeros((c, c))
    np.add.at(m, (cls[left], cls[right]), cnt)
    n_left, n_right = m.sum(1), m.sum(0)
    keep = set(int(u) for u in fixed)
    order = [u for u in sorted(range(v), key=lambda i: (-counts[i], i)) if u not in keep]
    before = class_bigram_objective(cls, (left, right, cnt))
    for it in range(iterations):
        moved = 0
        for w in order:
            if out_total[w] == 0 and in_total[w] == 0:
                continue
            a = cls[w]
            s = self_loop[w]
            lo, hi = succ_ptr[w], succ_ptr[w + 1]
            r_w = np.bincount(cls[succ[lo:hi]], weights=succ_cnt[lo:hi], minlength=c)
            lo, hi = pred_ptr[w], pred_ptr[w + 1]
            l_w = np.bincount(cls[pred[lo:hi]], weights=pred_cnt[lo:hi], minlength=c)
            # Take w out of its class a.
            m[a, :] -= r_w
            m[:, a] -= l_w
            m[a, a] -= s
            n_left[a] -= out_total[w]
            n_right[a] -= in_total[w]
            # Gain of putting w into each class b (vectorised over b).
            rows = np.flatnonzero(r_w)
            cols = np.flatnonzero(l_w)
            gain = (_xlogx(m[:, rows] + r_w[rows]) - _xlogx(m[:, rows])).sum(1)
            gain += (_xlogx(m[cols, :] + l_w[cols, None]) - _xlogx(m[cols, :])).sum(0)
            diag = np.diagonal(m).copy()
            # The (b, b) cell gets r_w[b] + l_w[b] + s at once, not in two separate steps.
            gain += (
                _xlogx(diag + r_w + l_w + s)
                - _xlogx(diag + r_w)
                - _xlogx(diag + l_w)
                + _xlogx(diag)
            )
            gain -= _xlogx(n_left + out_total[w]) - _xlogx(n_left)
            gain -= _xlogx(n_right + in_total[w]) - _xlogx(n_right)
            b = int(np.argmax(gain))
            if gain[b] <= gain[a] + 1e-9:
                b = a
            m[b, :] += r_w
            m[:, b] += l_w
            m[b, b] += s
            n_left[b] += out_total[w]
            n_right[b] += in_total[w]
            if b != a:
                cls[w] = b
                moved += 1
        after = class_bigram_objective(cls, (left, right, cnt))
        logger.info(
            "exchange iteration %d: %d units moved, objective %.1f -> %.1f",
            it + 1,
            moved,
            before,
            after,
        )
        before = after
        if moved == 0:
            break
    return _renumber(cls)
