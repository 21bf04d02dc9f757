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


@dataclass(frozen=True)
class MBRChoice:
    """The posterior decision of one list."""

    # The hypothesis with the fewest expected errors (-1 for an empty list).
    index: int
    # The hypothesis with the highest combined score (-1 for an empty list).
    top_index: int
    # p_i of every hypothesis (they sum to 1).
    posteriors: tuple[float, ...]
    # E_i of every hypothesis, in words.
    expected_errors: tuple[float, ...]


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
) -> dict[str, MBRChoice]:
    """The posterior decision of every list, the combined scores given by ``weights``.

    ``distances`` (from :func:`pairwise_errors` with the same ``noise``) saves computing them
    again.
    """
    scale = check_scale(scale)
    totals = total_scores(nbest, weights)
    _finite_totals(totals)
    if distances is None:
        distances = pairwise_errors(nbest, noise)
    return {utt: choose(totals[utt], distances[utt], scale) for utt in nbest}


def rerank_posterior(
    nbest: NBest,
    weights: Weights,
    scale: float,
    noise: NoiseWords = NO_NOISE,
    distances: Mapping[str, np.ndarray] | None = None,
) -> NBest:
    """Each list sorted by expected errors (ties: combined score, then list order), with the
    combined score ``total``, the posterior and the expected errors added as scores."""
    choices = decode(nbest, weights, scale, noise, distances)
    totals = total_scores(nbest, weights)
    lists = []
    for utt, nb in nbest.items():
        c, t = choices[utt], totals[utt]
        e = np.asarray(c.expected_errors)
        first = c.index
        rest = sorted((i for i in range(len(nb)) if i != first), key=lambda i: (e[i], -t[i], i))
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
) -> ScaleSearch:
    """The posterior scale with the fewest word errors on a dev set, tried on a grid.

    ``scales`` (default :func:`default_scales`) are tried in increasing order; the fewest dev
    errors win, the largest scale among ties. Errors are counted against ``refs`` with the
    noise words deleted from both sides (as tuning counts them); the errors of the top-score
    choice with the same weights are reported beside them.
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
    distances = pairwise_errors(nbest.subset(utts), noise)
    top_errors = fixed + sum(int(errors[u][best_index(totals[u])]) for u in utts)
    counted = []
    for scale in grid:
        picks = _choose_many([totals[u] for u in utts], [distances[u] for u in utts], scale)
        count = fixed + sum(int(errors[u][k]) for u, k in zip(utts, picks, strict=True))
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
