"""Posterior (minimum expected word error) decoding over an N-best list.

The top-score rule picks the hypothesis with the highest combined score ``t_i`` (see
:mod:`rescorer.combine`). The posterior rule turns the scores of a list into hypothesis
posteriors and picks the hypothesis with the fewest *expected* word errors against the others,
i.e. minimum Bayes risk over the list (Stolcke, Konig & Weintraub 1997, "Explicit word error
minimization in N-best list rescoring"; SRILM's ``nbest-lattice`` without ``-use-mesh``)::

    p_i = exp(S * t_i) / sum_j exp(S * t_j)          S: the posterior scale (> 0)
    E_i = sum_j p_j * d(h_i, h_j)                    d: word edit distance (rescorer.wer)
    chosen = argmin_i E_i

``d`` is the unit-cost Levenshtein distance of :func:`rescorer.wer.edit_distance_batch`, the
one WER is counted with (symmetric, so ``d(h_i, h_j) = d(h_j, h_i)``), after any noise words are
deleted (SRILM's ``-noise``/``-noise-vocab``). Hypotheses whose expected errors are within
:data:`TIE` of the least count as tied and the one with the higher combined score wins (then the
earlier one), so a large scale gives the top-score choice back and a scale near 0 gives the
list's medoid.

``S`` multiplies natural-log scores. SRILM's ``-posterior-scale`` divides its (log10) scores
instead, ``p ~ 10^(L / scale)``, which for the same probabilities is ``exp(t / scale)``: SRILM's
scale ``s`` is ``S = 1 / s`` here.

The distances do not depend on ``S``: :func:`pairwise_errors` computes them once, and
:func:`search_scale` tries a grid of scales on a dev set from them.

Long lists (pruning)
--------------------
A list of ``n`` hypotheses has ``n^2 / 2`` distances: 2 million for a 2,000-best list. Lists of
more than :attr:`Pruning.exact_max` hypotheses (256 by default; every list of the shared 30-best
sets is below it, so their choices are unchanged) are pruned, with hypotheses ranked by posterior
(the combined score's order, whatever ``S``):

- *references*: only the top ``m`` hypotheses enter the sum ``E_i``, the fewest whose remaining
  posterior mass ``q`` is at most :attr:`Pruning.tail_mass`, and never more than
  :attr:`Pruning.max_refs`. As ``0 <= d(h_i, h_j) <= max(|h_i|, |h_j|)``, the exact ``E_i``
  lies in ``[E^m_i, E^m_i + q * L_i]``, ``L_i`` the longest of ``h_i`` and the pruned ones;
- *candidates*: only the top ``k`` = :attr:`Pruning.max_candidates` hypotheses can be chosen;
  every other one gets a lower bound of ``E_i`` (from word counts: ``d >= max(||h_i| - |h_j||,
  1)`` for different texts; and from the triangle inequality through the candidates).

So ``k x m`` distances are computed (at most 64 x 2048 by default, not ``n^2 / 2``), with a
bit-parallel Levenshtein (Hyyrö 2003) over numpy arrays. :attr:`MBRChoice.excess_bound` is the
checkable bound: the chosen hypothesis has at most that many more expected errors than the
list's least (``U - min(E^m_chosen, least lower bound of the others)``, ``U`` the chosen one's
upper bound); 0 means the choice is exact (no mass pruned, no other hypothesis can do better).
:func:`search_scale` keeps one long list's distances while it tries every scale, then drops them.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from rescorer.combine import Weights, best_index, total_scores
from rescorer.core.constants import TOTAL_SCORE
from rescorer.nbest import NBest, NBestList
from rescorer.normalize import NO_NOISE, NoiseWords
from rescorer.wer import edit_distance_batch, hypothesis_errors

logger = logging.getLogger(__name__)

OBJECTIVES = ("top", "posterior")
"""How a list's hypothesis is chosen: the top combined score, or the least expected errors."""
TIE = 1e-9
"""Expected errors closer than this to the least are a tie (won by the higher combined score)."""
POSTERIOR_SCORE = "mbr_posterior"
"""Score column of each hypothesis' posterior in the lists ``rescore --objective posterior``
writes (a probability, not a log)."""
EXPECTED_ERRORS_SCORE = "mbr_expected_errors"
"""Score column of each hypothesis' expected word errors in those lists."""
# Utterances are handled in chunks of at most this many (hypothesis x hypothesis) cells.
_CHUNK_CELLS = 1 << 22
# Pairs per step of the bit-parallel distance (its arrays stay in cache).
_BP_CHUNK = 1 << 14


@dataclass(frozen=True)
class Pruning:
    """How long lists are pruned (see the module docstring).

    Lists of at most ``exact_max`` hypotheses score every pair, as before pruning existed.
    Longer ones take their references from the top of the posterior ranking until the mass
    left is at most ``tail_mass`` (at most ``max_refs`` of them), and choose among the top
    ``max_candidates``.
    """

    exact_max: int = 256
    tail_mass: float = 1e-9
    max_refs: int = 2048
    max_candidates: int = 64

    def __post_init__(self) -> None:
        for name in ("exact_max", "max_refs", "max_candidates"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"Pruning.{name} must be >= 1, got {getattr(self, name)}")
        if not (0.0 <= self.tail_mass < 1.0):
            raise ValueError(f"Pruning.tail_mass must be in [0, 1), got {self.tail_mass}")

    def prunes(self, n: int) -> bool:
        """Whether a list of ``n`` hypotheses is pruned."""
        return n > self.exact_max

    def plan(self, ranked_posteriors: np.ndarray) -> tuple[int, int, float]:
        """``(k, m, q)`` for posteriors sorted in decreasing order: candidates, references and
        the posterior mass of the hypotheses beyond the references."""
        ps = np.asarray(ranked_posteriors, dtype=np.float64)
        n = len(ps)
        # tail[r] = mass of ranks r..n-1, summed from the small end (no cancellation)
        tail = np.append(np.cumsum(ps[::-1])[::-1], 0.0)
        m = int(np.argmax(tail <= self.tail_mass))  # tail[n] = 0: always found
        m = max(1, min(m, self.max_refs, n))
        return min(self.max_candidates, n), m, float(tail[m])


DEFAULT_PRUNING = Pruning()
NO_PRUNING = Pruning(exact_max=2**62)
"""Every pair of every list (the exact rule, whatever the length)."""


@dataclass(frozen=True)
class MBRChoice:
    """The posterior decision of one list."""

    # The hypothesis with the fewest expected errors (-1 for an empty list).
    index: int
    # The hypothesis with the highest combined score (-1 for an empty list).
    top_index: int
    # p_i of every hypothesis (they sum to 1).
    posteriors: tuple[float, ...]
    # E_i of every hypothesis, in words. In a pruned list: E_i against the references for the
    # candidates, a lower bound of E_i for the other hypotheses.
    expected_errors: tuple[float, ...]
    # At most this many more expected errors than the list's least (0: an exact choice).
    excess_bound: float = 0.0
    # The hypotheses that could be chosen, best first (None: all of them, no pruning).
    candidates: tuple[int, ...] | None = None


@dataclass(frozen=True)
class ScaleSearch:
    """The posterior scale chosen on a dev set by :func:`search_scale`."""

    # The scale with the fewest dev errors (the largest of those tied: closest to top score).
    scale: float
    # Dev word errors of the posterior choice at that scale, and of the top-score choice.
    errors: int
    top_errors: int
    # Reference words of the dev set.
    ref_words: int
    # (scale, dev errors) of every scale tried, in increasing scale.
    grid: tuple[tuple[float, int], ...]

    @property
    def wer(self) -> float:
        return self.errors / self.ref_words if self.ref_words else 0.0

    @property
    def top_wer(self) -> float:
        return self.top_errors / self.ref_words if self.ref_words else 0.0


def check_scale(scale: float) -> float:
    """``scale`` as a float; ValueError unless it is finite and > 0."""
    scale = float(scale)
    if not (math.isfinite(scale) and scale > 0):
        raise ValueError(f"posterior scale must be a finite number > 0, got {scale}")
    return scale


def posteriors(totals: Sequence[float] | np.ndarray, scale: float) -> np.ndarray:
    """``softmax(scale * totals)``: the hypothesis posteriors of one list (float64)."""
    scale = check_scale(scale)
    t = np.asarray(totals, dtype=np.float64)
    if t.size == 0:
        return t.copy()
    if not np.all(np.isfinite(t)):
        raise ValueError(f"posteriors need finite combined scores, got {t.tolist()}")
    x = np.exp(scale * (t - t.max()))
    return x / x.sum()


def pairwise_errors(
    nbest: NBest, noise: NoiseWords = NO_NOISE, tie_break: str = "correct"
) -> dict[str, np.ndarray]:
    """Word edit distance between every two hypotheses of each list: utt id -> ``(n, n)`` int64.

    Noise words are deleted first. All pairs of the set are scored in one batched pass (each
    unordered pair once; the matrix is symmetric with a zero diagonal).
    """
    words = {u: [noise.strip(h.words) for h in nb] for u, nb in nbest.items()}
    pairs: list[tuple[tuple[str, ...], tuple[str, ...]]] = []
    for hyps in words.values():
        for j in range(len(hyps)):
            for i in range(j):
                pairs.append((hyps[j], hyps[i]))
    counts = edit_distance_batch(pairs, tie_break) if pairs else np.zeros((0, 4), np.int64)
    errors = counts[:, :3].sum(axis=1)
    out: dict[str, np.ndarray] = {}
    pos = 0
    for utt, hyps in words.items():
        n = len(hyps)
        mat = np.zeros((n, n), dtype=np.int64)
        k = n * (n - 1) // 2
        rows, cols = np.tril_indices(n, -1)  # (j, i) with i < j, in the order pairs were made
        mat[rows, cols] = errors[pos : pos + k]
        mat[cols, rows] = errors[pos : pos + k]
        out[utt] = mat
        pos += k
    return out


class ListDistances:
    """Word edit distances among one list's hypotheses, computed when first asked for.

    Hypotheses are addressed by *rank* (``order[r]`` is the hypothesis of rank ``r``, the
    combined score's order); the distances between the top ``k`` and the top ``m`` are kept as
    one block, grown as needed, so a list costs ``k x m`` int32 at most. ``pairs`` counts the
    distances computed.
    """

    def __init__(self, words: Sequence[Sequence[str]], order: np.ndarray) -> None:
        self.order = np.asarray(order, dtype=np.int64)
        ranked = [words[i] for i in self.order]
        vocab: dict[str, int] = {}
        self.lens = np.fromiter(map(len, ranked), dtype=np.int64, count=len(ranked))
        width = max(1, int(self.lens.max()) if len(ranked) else 1)
        tokens = np.full((len(ranked), width), -1, dtype=np.int64)
        for r, hyp in enumerate(ranked):
            tokens[r, : len(hyp)] = [vocab.setdefault(w, len(vocab)) for w in hyp]
        tokens[tokens < 0] = len(vocab)  # padding: matches nothing
        self.tokens = tokens
        self.words = ranked
        # peq[r, w]: bit p set where word p of hypothesis r is w (its first 64 words)
        self.peq = np.zeros((len(ranked), len(vocab) + 1), dtype=np.uint64)
        rows, pos = np.nonzero(np.arange(width)[None, :] < np.minimum(self.lens, 64)[:, None])
        np.bitwise_or.at(
            self.peq, (rows, tokens[rows, pos]), np.left_shift(np.uint64(1), pos.astype(np.uint64))
        )
        self.block = np.zeros((0, 0), dtype=np.int32)
        self.pairs = 0

    def top(self, k: int, m: int) -> np.ndarray:
        """``(k, m)`` distances between the hypotheses of ranks below ``k`` and below ``m``."""
        k0, m0 = self.block.shape
        if k > k0 or m > m0:
            kk, mm = max(k, k0), max(m, m0)
            block = np.zeros((kk, mm), dtype=np.int32)
            block[:k0, :m0] = self.block
            rows = [np.repeat(np.arange(k0), mm - m0), np.repeat(np.arange(k0, kk), mm)]
            cols = [np.tile(np.arange(m0, mm), k0), np.tile(np.arange(mm), kk - k0)]
            a, b = np.concatenate(rows), np.concatenate(cols)
            block[a, b] = self.distances(a, b)
            self.block = block
        return self.block[:k, :m]

    def distances(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Edit distances of the rank pairs ``(a[x], b[x])`` (int64)."""
        out = np.zeros(len(a), dtype=np.int64)
        self.pairs += len(a)
        # the shorter of each pair is the bit-vector pattern; both over 64 words: the DP
        swap = self.lens[a] > self.lens[b]
        a, b = np.where(swap, b, a), np.where(swap, a, b)
        long = self.lens[a] > 64
        if long.any():
            idx = np.flatnonzero(long)
            pairs = [(self.words[i], self.words[j]) for i, j in zip(a[idx], b[idx], strict=True)]
            out[idx] = edit_distance_batch(pairs)[:, :3].sum(axis=1)
        short = np.flatnonzero(~long)
        # pairs of similar text length together: fewer idle steps per chunk
        short = short[np.argsort(self.lens[b[short]], kind="stable")]
        for start in range(0, len(short), _BP_CHUNK):
            idx = short[start : start + _BP_CHUNK]
            out[idx] = self._bit_parallel(a[idx], b[idx])
        return out

    def _bit_parallel(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Levenshtein distances with ``len(a) <= 64``: Hyyrö's bit-vector recurrence
        (global distance), one step per word of ``b``, vectorised over the pairs."""
        one = np.uint64(1)
        m, n = self.lens[a], self.lens[b]
        dist = m.copy()
        last = np.where(m > 0, np.left_shift(one, np.maximum(m - 1, 0).astype(np.uint64)), 0)
        last = last.astype(np.uint64)
        vp = np.full(len(a), ~np.uint64(0))
        vn = np.zeros(len(a), dtype=np.uint64)
        peq = self.peq.ravel()
        base = a * self.peq.shape[1]
        text = self.tokens[b].T.copy()
        for t in range(int(n.max()) if len(n) else 0):
            x = peq[base + text[t]]
            d0 = (((x & vp) + vp) ^ vp) | x | vn
            hp = vn | ~(d0 | vp)
            hn = d0 & vp
            live = t < n
            dist += ((hp & last) != 0) & live
            dist -= ((hn & last) != 0) & live
            hp = (hp << one) | one
            hn = hn << one
            vp = hn | ~(d0 | hp)
            vn = hp & d0
        return np.where(m == 0, n, dist)


def _pruned_choice(
    totals: np.ndarray, dist: ListDistances, scale: float, pruning: Pruning
) -> MBRChoice:
    """The posterior decision of one long list, pruned as :class:`Pruning` says."""
    t = np.asarray(totals, dtype=np.float64)
    p = posteriors(t, scale)
    order = dist.order
    ps = p[order]
    k, m, q = pruning.plan(ps)
    d = dist.top(k, m).astype(np.float64)
    ref_p = ps[:m]
    scored = d @ ref_p  # E against the references, of the candidates
    # Lower bounds of every hypothesis from its length and text:
    # d(h_i, h_j) >= max(| |h_i| - |h_j| |, 1) for different texts, 0 for the same text.
    lens = dist.lens
    ul, inv = np.unique(lens, return_inverse=True)
    mass = np.bincount(inv, weights=ps, minlength=len(ul))
    gap = np.maximum(np.abs(ul[:, None] - ul[None, :]), 1).astype(np.float64)
    groups: dict[tuple[str, ...], int] = {}
    gid = np.fromiter(
        (groups.setdefault(tuple(w), len(groups)) for w in dist.words), dtype=np.int64, count=len(t)
    )
    same = np.bincount(gid, weights=ps)[gid]
    lower = np.maximum((gap @ mass)[inv] - same, 0.0)
    # Through each candidate c (triangle inequality), for ranks below m:
    # E_i >= sum_{j < m} p_j |d(c, i) - d(c, j)|
    top_d = int(d.max()) if d.size else 0
    values = np.arange(top_d + 1)
    cells = np.repeat(np.arange(k), m) * (top_d + 1) + d.astype(np.int64).ravel()
    hist = np.bincount(cells, weights=np.tile(ref_p, k), minlength=k * (top_d + 1))
    hist = hist.reshape(k, top_d + 1)
    through = hist @ np.abs(values[:, None] - values[None, :])  # (k, x): bound at d(c, i) = x
    if m > 0:
        tri = through[np.arange(k)[:, None], d.astype(np.int64)].max(axis=0)  # ranks < m
        lower[:m] = np.maximum(lower[:m], tri)
    lower[:k] = np.maximum(lower[:k], scored)
    best = _tie_to_top(scored, t[order[:k]])
    # upper bound of the chosen one: the pruned mass at its greatest distance
    longest_pruned = int(lens[m:].max()) if m < len(t) else 0
    upper = scored[best] + q * max(int(lens[best]), longest_pruned)
    others = np.delete(lower, best)
    least = min(scored[best], float(others.min())) if others.size else scored[best]
    excess = max(0.0, upper - least)
    if excess <= TIE:
        excess = 0.0
    expected = np.empty(len(t))
    expected[order] = lower
    expected[order[:k]] = scored
    cand = tuple(order[np.lexsort((np.arange(k), -t[order[:k]], scored))].tolist())
    return MBRChoice(
        int(order[best]),
        best_index(t),
        tuple(p.tolist()),
        tuple(expected.tolist()),
        excess,
        cand,
    )


def _ranked(totals: np.ndarray) -> np.ndarray:
    """Hypotheses by decreasing combined score (the list's order among ties)."""
    return np.argsort(-np.asarray(totals, dtype=np.float64), kind="stable")


def choose(totals: Sequence[float] | np.ndarray, distances: np.ndarray, scale: float) -> MBRChoice:
    """The posterior decision of one list from its combined scores and pairwise distances."""
    t = np.asarray(totals, dtype=np.float64)
    d = np.asarray(distances, dtype=np.float64)
    if d.shape != (len(t), len(t)):
        raise ValueError(
            f"expected a ({len(t)}, {len(t)}) distance matrix for {len(t)} hypotheses, "
            f"got shape {d.shape}"
        )
    if len(t) == 0:
        return MBRChoice(-1, -1, (), ())
    p = posteriors(t, scale)
    expected = d @ p
    index = _tie_to_top(expected, t)
    return MBRChoice(index, best_index(t), tuple(p.tolist()), tuple(expected.tolist()))


def _tie_to_top(expected: np.ndarray, totals: np.ndarray) -> int:
    """The least expected errors; among those within :data:`TIE` of it the highest total, then
    the earliest hypothesis."""
    tied = expected <= expected.min() + TIE
    return int(np.argmax(np.where(tied, totals, -np.inf)))


def _finite_totals(totals: Mapping[str, np.ndarray]) -> None:
    for utt, t in totals.items():
        bad = np.flatnonzero(~np.isfinite(t))
        if bad.size:
            raise ValueError(
                f"utterance {utt!r}: hypothesis {int(bad[0]) + 1} has combined score "
                f"{t[bad[0]]}; posterior decoding needs finite scores"
            )


def decode(
    nbest: NBest,
    weights: Weights,
    scale: float,
    noise: NoiseWords = NO_NOISE,
    distances: Mapping[str, np.ndarray] | None = None,
    pruning: Pruning = DEFAULT_PRUNING,
) -> dict[str, MBRChoice]:
    """The posterior decision of every list, the combined scores given by ``weights``.

    ``distances`` (from :func:`pairwise_errors` with the same ``noise``) saves computing them
    again; a list it holds is decided exactly whatever its length. The other lists of more than
    ``pruning.exact_max`` hypotheses are pruned (:class:`Pruning`).
    """
    scale = check_scale(scale)
    totals = total_scores(nbest, weights)
    _finite_totals(totals)
    given = distances if distances is not None else {}
    long = [u for u in nbest if u not in given and pruning.prunes(len(nbest[u]))]
    short = [u for u in nbest if u not in given and u not in set(long)]
    exact = dict(given)
    if short:
        exact.update(pairwise_errors(nbest.subset(short), noise))
    out: dict[str, MBRChoice] = {}
    long_set = set(long)
    for utt in nbest:
        if utt in long_set:
            dist = _list_distances(nbest[utt], totals[utt], noise)
            out[utt] = _pruned_choice(totals[utt], dist, scale, pruning)
        else:
            out[utt] = choose(totals[utt], exact[utt], scale)
    return out


def _list_distances(nb: NBestList, totals: np.ndarray, noise: NoiseWords) -> ListDistances:
    return ListDistances([noise.strip(h.words) for h in nb], _ranked(totals))


def rerank_posterior(
    nbest: NBest,
    weights: Weights,
    scale: float,
    noise: NoiseWords = NO_NOISE,
    distances: Mapping[str, np.ndarray] | None = None,
    pruning: Pruning = DEFAULT_PRUNING,
) -> NBest:
    """Each list sorted by expected errors (ties: combined score, then list order), with the
    combined score ``total``, the posterior and the expected errors added as scores.

    A pruned list has its candidates first, by expected errors against the references, then the
    other hypotheses by combined score, holding a lower bound of their expected errors."""
    choices = decode(nbest, weights, scale, noise, distances, pruning)
    totals = total_scores(nbest, weights)
    lists = []
    for utt, nb in nbest.items():
        c, t = choices[utt], totals[utt]
        e = np.asarray(c.expected_errors)
        first = c.index
        if c.candidates is None:
            rest = sorted((i for i in range(len(nb)) if i != first), key=lambda i: (e[i], -t[i], i))
        else:
            ranked = set(c.candidates)
            rest = [i for i in c.candidates if i != first] + [
                int(i) for i in _ranked(t) if int(i) not in ranked
            ]
        order = ([first] if first >= 0 else []) + rest
        lists.append(
            NBestList(
                utt,
                tuple(
                    nb.hyps[i].with_scores(
                        {
                            TOTAL_SCORE: float(t[i]),
                            POSTERIOR_SCORE: c.posteriors[i],
                            EXPECTED_ERRORS_SCORE: c.expected_errors[i],
                        }
                    )
                    for i in order
                ),
            )
        )
    return NBest(lists, nbest.references)


def default_scales(totals: Mapping[str, np.ndarray]) -> tuple[float, ...]:
    """Scales to search: ``2^(k/2) / spread`` for k = -8 .. 20, where ``spread`` is the median
    over lists of the standard deviation of their combined scores (29 scales, from flat
    posteriors to nearly the top-score choice). ``(1.0,)`` when no list has a spread."""
    spreads = [float(np.std(t)) for t in totals.values() if len(t) > 1 and np.ptp(t) > 0]
    if not spreads:
        return (1.0,)
    base = 1.0 / float(np.median(spreads))
    return tuple(base * 2.0 ** (k / 2) for k in range(-8, 21))


def search_scale(
    nbest: NBest,
    refs: Mapping[str, Sequence[str]],
    weights: Weights,
    scales: Sequence[float] | None = None,
    noise: NoiseWords = NO_NOISE,
    pruning: Pruning = DEFAULT_PRUNING,
) -> ScaleSearch:
    """The posterior scale with the fewest word errors on a dev set, tried on a grid.

    ``scales`` (default :func:`default_scales`) are tried in increasing order; the fewest dev
    errors win, the largest scale among ties. Errors are counted against ``refs`` with the
    noise words deleted from both sides (as tuning counts them); the errors of the top-score
    choice with the same weights are reported beside them.

    Lists of more than ``pruning.exact_max`` hypotheses are pruned (:class:`Pruning`); one such
    list's distances are computed once for all the scales, then dropped.
    """
    totals = total_scores(nbest, weights)
    _finite_totals(totals)
    grid = sorted({check_scale(s) for s in (scales or default_scales(totals))})
    if not grid:
        raise ValueError("need at least one posterior scale to try")
    scored_refs = noise.mapping(refs)
    errors = hypothesis_errors(noise.nbest(nbest), scored_refs)
    ref_words = int(sum(len(scored_refs[u]) for u in nbest))
    # Utterances without hypotheses add their reference words as deletions whatever is chosen.
    fixed = sum(len(scored_refs[u]) for u in nbest if len(nbest[u]) == 0)
    utts = [u for u in nbest if len(nbest[u]) > 0]
    top_errors = fixed + sum(int(errors[u][best_index(totals[u])]) for u in utts)
    # long lists: one at a time, every scale (their distances are kept only meanwhile)
    long = [u for u in utts if pruning.prunes(len(nbest[u]))]
    long_errors = np.zeros(len(grid), dtype=np.int64)
    for u in long:
        dist = _list_distances(nbest[u], totals[u], noise)
        for g, scale in enumerate(grid):
            long_errors[g] += int(errors[u][_pruned_choice(totals[u], dist, scale, pruning).index])
    utts = [u for u in utts if not pruning.prunes(len(nbest[u]))]
    distances = pairwise_errors(nbest.subset(utts), noise)
    counted = []
    for g, scale in enumerate(grid):
        picks = _choose_many([totals[u] for u in utts], [distances[u] for u in utts], scale)
        count = fixed + int(long_errors[g])
        count += sum(int(errors[u][k]) for u, k in zip(utts, picks, strict=True))
        counted.append((scale, count))
        logger.info("posterior scale %.6g: %d errors (top score: %d)", scale, count, top_errors)
    least = min(c for _, c in counted)
    scale = max(s for s, c in counted if c == least)
    return ScaleSearch(scale, least, top_errors, ref_words, tuple(counted))


def _choose_many(
    totals: Sequence[np.ndarray], distances: Sequence[np.ndarray], scale: float
) -> list[int]:
    """:func:`choose`'s index for many lists, in padded chunks (same rule, vectorised)."""
    picks: list[int] = []
    width = max((len(t) for t in totals), default=0)
    step = max(1, _CHUNK_CELLS // max(1, width * width))
    for start in range(0, len(totals), step):
        chunk_t = totals[start : start + step]
        chunk_d = distances[start : start + step]
        u = len(chunk_t)
        T = np.full((u, width), -np.inf)
        D = np.zeros((u, width, width))
        for k, (t, d) in enumerate(zip(chunk_t, chunk_d, strict=True)):
            T[k, : len(t)] = t
            D[k, : len(t), : len(t)] = d
        valid = np.isfinite(T)
        x = np.exp(scale * (T - T.max(axis=1, keepdims=True)))  # 0 where padded
        p = x / x.sum(axis=1, keepdims=True)
        expected = np.where(valid, np.einsum("uij,uj->ui", D, p), np.inf)
        tied = expected <= expected.min(axis=1, keepdims=True) + TIE
        picks.extend(np.argmax(np.where(tied, T, -np.inf), axis=1).tolist())
    return picks
