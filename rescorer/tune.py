"""Tuning log-linear weights by direct minimisation of corpus word errors on a dev set.

The objective is the exact number of word errors of the hypotheses the weights select, summed
over the corpus. Along any search direction ``d`` from weights ``w`` each hypothesis score is a
line ``a + t*b`` in the step ``t``; the selected hypothesis of an utterance follows the upper
envelope of its lines, so the corpus error count is a step function of ``t`` whose breakpoints
can be enumerated exactly (Och 2003, "Minimum error rate training"; SRILM's nbest-optimize does
the same kind of search). We move to the middle of the best interval, cycle over coordinate and
random directions until a sweep brings no gain (Powell-style), and repeat from random starts.

Features are searched in a standardised space (each divided by its mean within-list standard
deviation) so one step size and one restart range fit features of any scale; the anchor feature
is held at weight 1 because the selection is invariant to scaling all weights together. Values
of a log-zero size (|x| >= 1e10, e.g. SRILM's -1e30 for an impossible event) are left out of
that scale, so a few of them do not shrink the rest of their column to nothing.

``method="risk"`` replaces that search by a smooth one: the expected errors
sum_u sum_h p_u(h) e_u(h) with p_u = softmax(gamma * score) over each list, minimised by L-BFGS
while gamma is annealed upward (Smith & Eisner 2006, "Minimum risk annealing for training
log-linear models"), with a small L2 pull toward the start. It uses every hypothesis's margin,
not only the winners', and generalised better from dev_clean to dev_other in
``docs/experiments/librispeech_tuning.md``.

The errors :func:`tune` reports are those of the weights it returns, counted as rescoring counts
them (each list's ``feature_matrix @ weights``, first maximum wins): the search works in the
standardised space, where a near-tie may fall the other way, so every start's end point is
checked in original units and the best by that count is kept.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from rescorer.combine import Weights, check_features, feature_matrix
from rescorer.core.constants import RANK_FEATURE
from rescorer.nbest import NBest
from rescorer.normalize import NO_NOISE, NoiseWords
from rescorer.wer import hypothesis_errors

logger = logging.getLogger(__name__)

SELECTIONS = ("dev", "holdout")
METHODS = ("mert", "risk")
# torch threads of the risk search when the user chose none (``rescorer --threads``): its
# operations are small, so more threads mostly wait for each other. On dev_clean (2,703 lists,
# 3 features + length, a shared 2-core machine at load 7-8) the search took 0.72 s at 1 thread
# and 8.25 s at 2 (CPU 0.27 s and 3.27 s); mert 3.76 s (median of 3, interleaved).
RISK_THREADS = 1


@dataclass(frozen=True)
class TuneOptions:
    """Search settings for :func:`tune`."""

    # Random restarts after the first search (which starts from `initial` or anchor-only).
    restarts: int = 10
    # Random directions tried in each sweep, besides the coordinate axes.
    random_directions: int = 2
    # Upper bound on sweeps per start (a start ends earlier when a sweep gains nothing).
    max_sweeps: int = 25
    # Seed of the random restarts and directions.
    seed: int = 0
    # Feature held at weight 1 (scale invariance); None: the first feature.
    anchor: str | None = None
    # Tune the word-count weight (False keeps it at the initial value, 0 by default).
    tune_length: bool = True
    # Half-width of the range of random start weights, in standardised units.
    restart_range: float = 1.0
    # Largest |weight| of a tuned feature, in standardised units with the anchor at 1 (None:
    # unbounded). The selection is scale-invariant, so this bounds how far any feature may
    # outweigh the anchor: the search stays in the box and cannot fit the tuning set by
    # letting the anchor fade (weights of 10x the anchor were seen to lose on held-out data).
    bound: float | None = None
    # Which start's end point is kept: "dev", the fewest errors on the whole tuning set; or
    # "holdout", the search runs on all but every `holdout_every`-th utterance and the end
    # point with the fewest errors on those held-out utterances is kept (ties: the rest).
    selection: str = "dev"
    holdout_every: int = 4
    # "mert": the exact error-count search above. "risk": minimise the expected errors under
    # p(h) = softmax(gamma * score(h)) (smoothed MERT, Smith & Eisner 2006, "Minimum risk
    # annealing"), annealing gamma through `risk_gammas` from the initial weights (no restarts:
    # the path is deterministic); the reported errors are still the exact count.
    method: str = "mert"
    # Inverse temperatures of the annealing, in standardised units (1: one unit of score
    # spread is one nat); the last one sets how close to the hard choice the optimum is.
    risk_gammas: tuple[float, ...] = (1.0, 2.0, 4.0, 8.0)
    # L2 pull of the tuned weights toward the initial ones (standardised units, per utterance).
    risk_l2: float = 1e-3

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}, got {self.method!r}")
        if not self.risk_gammas or any(not g > 0 for g in self.risk_gammas):
            raise ValueError(f"risk_gammas must be positive, got {self.risk_gammas!r}")
        if self.risk_l2 < 0:
            raise ValueError(f"risk_l2 must be >= 0, got {self.risk_l2}")
        if self.restarts < 0 or self.random_directions < 0 or self.max_sweeps < 1:
            raise ValueError(
                "restarts and random_directions must be >= 0 and max_sweeps >= 1, got "
                f"{self.restarts}, {self.random_directions}, {self.max_sweeps}"
            )
        if self.restart_range <= 0:
            raise ValueError(f"restart_range must be > 0, got {self.restart_range}")
        if self.bound is not None and not self.bound > 0:
            raise ValueError(f"bound must be > 0 or None, got {self.bound}")
        if self.selection not in SELECTIONS:
            raise ValueError(f"selection must be one of {SELECTIONS}, got {self.selection!r}")
        if self.holdout_every < 2:
            raise ValueError(f"holdout_every must be >= 2, got {self.holdout_every}")


@dataclass(frozen=True)
class TraceStep:
    """One accepted line-search move."""

    start: int
    sweep: int
    direction: str
    errors_before: int
    errors_after: int
    step: float


@dataclass(frozen=True)
class TuneResult:
    """Outcome of :func:`tune`."""

    weights: Weights
    # Corpus word errors of the tuned weights on the dev set, and of the lists' own order (each
    # list's first hypothesis; the search itself starts from the initial weights or the anchor).
    errors: int
    initial_errors: int
    ref_words: int
    # Errors of the best start found by each start (first = from the initial weights).
    start_errors: tuple[int, ...]
    trace: tuple[TraceStep, ...] = field(repr=False)
    seconds: float = 0.0

    @property
    def wer(self) -> float:
        return self.errors / self.ref_words if self.ref_words else 0.0


class _Problem:
    """Dev-set features and error counts, padded to ``(utterances, max_hyps)``."""

    def __init__(self, feats: list[np.ndarray], errs: list[np.ndarray]):
        n_utt = len(feats)
        dim = feats[0].shape[1]
        width = max(f.shape[0] for f in feats)
        self.F = np.zeros((n_utt, width, dim))
        self.E = np.zeros((n_utt, width), dtype=np.int64)
        self.valid = np.zeros((n_utt, width), dtype=bool)
        for u, (f, e) in enumerate(zip(feats, errs, strict=True)):
            self.F[u, : len(f)] = f
            self.E[u, : len(e)] = e
            self.valid[u, : len(f)] = True

    def errors(self, w: np.ndarray) -> int:
        scores = np.where(self.valid, self.F @ w, -np.inf)  # (U, H)
        pick = np.argmax(scores, axis=1)  # first maximum: earliest hypothesis wins ties
        return int(self.E[np.arange(len(pick)), pick].sum())

    def line_search(
        self, w: np.ndarray, d: np.ndarray, t_range: tuple[float, float] = (-np.inf, np.inf)
    ) -> tuple[float, int]:
        """The step ``t`` in ``t_range`` minimising errors of ``w + t*d``, and those errors."""
        A = self.F @ w  # (U, H) intercepts
        B = self.F @ d  # (U, H) slopes
        start, t, olds, news = _envelopes(A, B, self.valid)
        base = int(self.E[np.arange(len(start)), start].sum())  # errors at t -> -inf
        if not len(t):
            return 0.0, base
        delta = self.E[news] - self.E[olds]  # error change at each change of a list's winner
        t_min, t_max = t_range
        order = np.argsort(t, kind="stable")
        t, delta = t[order], delta[order]
        # Interval i is (bounds[i-1], bounds[i]); errors there are base + cumsum up to i-1.
        uniq, first = np.unique(t, return_index=True)
        summed = np.add.reduceat(delta, first)
        errors = base + np.concatenate([[0], np.cumsum(summed)])  # len(uniq) + 1 intervals
        lo = np.maximum(np.concatenate([[-np.inf], uniq]), t_min)
        hi = np.minimum(np.concatenate([uniq, [np.inf]]), t_max)
        inside = lo < hi  # intervals that meet the allowed range (0 is always inside it)
        if not inside.any():  # no interval compares (overflowed scores): stay
            return 0.0, self.errors(w)
        lo, hi, errors = lo[inside], hi[inside], errors[inside]
        best = errors.min()
        cands = np.flatnonzero(errors == best)
        # Prefer the interval holding t = 0 (no move), else the one nearest to it.
        dist = np.where((lo < 0) & (hi > 0), 0.0, np.minimum(np.abs(lo), np.abs(hi)))
        i = cands[np.argmin(dist[cands])]
        if lo[i] < 0 < hi[i]:
            return 0.0, int(best)
        if np.isinf(lo[i]):
            step = hi[i] - max(1.0, abs(hi[i])) * 0.5
        elif np.isinf(hi[i]):
            step = lo[i] + max(1.0, abs(lo[i])) * 0.5
        else:
            step = 0.5 * (lo[i] + hi[i])
        return float(step), int(best)


def _envelopes(
    A: np.ndarray, B: np.ndarray, valid: np.ndarray
) -> tuple[np.ndarray, np.ndarray, tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """Every list's upper envelope at once (the walk of :func:`_upper_envelope`, vectorised).

    ``A``, ``B`` (U, H): each hypothesis's score ``A + t*B``; ``valid`` marks real hypotheses.
    Returns the winner of each list at t -> -inf (U,), and for every change of winner its time
    and the (list, hypothesis) index pairs of the old and new winner. One pass over the lists
    per envelope segment (at most H), instead of a Python loop over the lists.
    """
    n_utt = A.shape[0]
    rows = np.arange(n_utt)
    # At t -> -inf the smallest slope wins; then the largest intercept; then the lowest index.
    Bv = np.where(valid, B, np.inf)
    cand = valid & (Bv == Bv.min(axis=1, keepdims=True))
    Av = np.where(cand, A, -np.inf)
    cand &= Av == Av.max(axis=1, keepdims=True)
    cur = np.argmax(cand, axis=1)
    first = cur.copy()
    t_cur = np.full(n_utt, -np.inf)
    live = rows
    times, us, olds, news = [], [], [], []
    while len(live):
        a_cur, b_cur = A[live, cur[live]][:, None], B[live, cur[live]][:, None]
        a, b = A[live], B[live]
        steeper = valid[live] & (b > b_cur)
        has = steeper.any(axis=1)
        live, steeper, a, b, a_cur, b_cur = (
            live[has],
            steeper[has],
            a[has],
            b[has],
            a_cur[has],
            b_cur[has],
        )
        if not len(live):
            break
        with np.errstate(divide="ignore", invalid="ignore"):
            cross = np.where(steeper, (a_cur - a) / (b - b_cur), np.inf)
        cross = np.where(steeper, np.maximum(cross, t_cur[live][:, None]), np.inf)
        t_next = cross.min(axis=1)
        # Right after the crossing the steepest line leads; equal lines: lowest index.
        at = steeper & (cross == t_next[:, None])
        b_at = np.where(at, b, -np.inf)
        at &= b_at == b_at.max(axis=1, keepdims=True)
        a_at = np.where(at, a, -np.inf)
        at &= a_at == a_at.max(axis=1, keepdims=True)
        # A list whose lines cannot be crossed (overflowed values: nan) ends here; each step
        # otherwise moves to a strictly steeper line, so the walk ends after at most H steps.
        ended = ~at.any(axis=1)
        if ended.any():
            live, at, t_next = live[~ended], at[~ended], t_next[~ended]
            if not len(live):
                break
        new = np.argmax(at, axis=1)
        times.append(t_next)
        us.append(live)
        olds.append(cur[live])
        news.append(new)
        cur[live] = new
        t_cur[live] = t_next
    if not times:
        empty = np.zeros(0, dtype=np.int64)
        return first, np.zeros(0), (empty, empty), (empty, empty)
    u = np.concatenate(us)
    return first, np.concatenate(times), (u, np.concatenate(olds)), (u, np.concatenate(news))


def _upper_envelope(a: np.ndarray, b: np.ndarray) -> list[tuple[float, int]]:
    """Segments ``(t_start, index)`` of ``argmax_i a[i] + t*b[i]`` as t goes from -inf to inf.

    One list's walk, the specification :func:`_envelopes` runs for all lists at once (the tests
    and ``bench/bench_tune.py`` hold the two equal).

    Among lines equal over an interval the lowest index wins, as in reranking.
    """
    # At t -> -inf the smallest slope wins; then the largest intercept; then the lowest index.
    cur = int(np.lexsort((np.arange(len(a)), -a, b))[0])
    segs: list[tuple[float, int]] = [(-np.inf, cur)]
    t_cur = -np.inf
    while True:
        steeper = np.flatnonzero(b > b[cur])
        if len(steeper) == 0:
            return segs
        cross = (a[cur] - a[steeper]) / (b[steeper] - b[cur])
        cross = np.maximum(cross, t_cur)
        t_next = cross.min()
        at = steeper[cross == t_next]
        # Right after the crossing the steepest line leads; equal lines: lowest index.
        top = at[b[at] == b[at].max()]
        top = top[a[top] == a[top].max()]
        cur = int(top.min())
        segs.append((float(t_next), cur))
        t_cur = t_next


LOG_ZERO_LIKE = 1e10
"""Scores at least this large in magnitude stand for log zero (or a broken value): they are
left out of the standardising scale."""
MAX_MAGNITUDE = 1e100
"""Largest score, and largest ratio of two initial weights, that tuning takes: beyond it sums of
products overflow (a score of 1e308 made the search run forever). Log zero is a large negative
number well inside it (-1e30)."""


def _check_finite(
    feats: Sequence[np.ndarray], features: Sequence[str], utts: Sequence[str]
) -> None:
    """Refuse NaN, infinite and overflowing scores (beyond +-:data:`MAX_MAGNITUDE`), naming the
    feature, utterance and hypothesis."""
    for utt, f in zip(utts, feats, strict=True):
        with np.errstate(invalid="ignore"):
            bad = ~(np.abs(f[:, :-1]) <= MAX_MAGNITUDE)  # NaN too
        if bad.any():
            hyp, col = (int(x) for x in np.argwhere(bad)[0])
            what = "not a finite score" if not np.isfinite(f[hyp, col]) else "too large a score"
            raise ValueError(
                f"feature {features[col]!r} of utterance {utt!r}, hypothesis {hyp + 1}: "
                f"{f[hyp, col]:g} is {what} (expected at most {MAX_MAGNITUDE:g} in magnitude; "
                "write log zero as a large negative number such as -1e30)"
            )


def _column_scale(feats: Sequence[np.ndarray]) -> np.ndarray:
    """Mean within-list standard deviation of each column over its ordinary values.

    Values with ``|x| >= LOG_ZERO_LIKE`` are left out (each list's std is over the rest, lists
    with fewer than two such values do not count); a column without spread gets 1.
    """
    dim = feats[0].shape[1]
    total, count = np.zeros(dim), np.zeros(dim)
    for f in feats:
        ordinary = np.abs(f) < LOG_ZERO_LIKE
        n = ordinary.sum(axis=0)
        x = np.where(ordinary, f, 0.0)
        mean = x.sum(axis=0) / np.maximum(n, 1)
        var = (np.where(ordinary, f - mean, 0.0) ** 2).sum(axis=0) / np.maximum(n, 1)
        use = n >= 2
        total[use] += np.sqrt(var[use])
        count[use] += 1
    scale = np.where(count > 0, total / np.maximum(count, 1), 0.0)
    scale[scale <= 1e-12] = 1.0
    return scale


def _rescored_errors(feats: Sequence[np.ndarray], errs: Sequence[np.ndarray], w: np.ndarray) -> int:
    """Errors of weights ``w`` selected as rescoring selects (per list ``F @ w``, first max)."""
    return int(sum(int(e[int(np.argmax(f @ w))]) for f, e in zip(feats, errs, strict=True)))


def _list_references(problem: _Problem, log_zero: np.ndarray) -> np.ndarray:
    """Per list and column, the value :func:`_risk_search` measures that column from: the
    largest of the list's ordinary values (``|x| < log_zero``, per column), or its largest value
    when it has none. ``(U, dim)``."""
    valid = problem.valid[:, :, None]  # (U, H, 1)
    ordinary = valid & (np.abs(problem.F) < log_zero)  # (U, H, dim)
    top_ordinary = np.where(ordinary, problem.F, -np.inf).max(axis=1)  # (U, dim)
    top = np.where(valid, problem.F, -np.inf).max(axis=1)  # every list has a hypothesis
    return np.where(np.isfinite(top_ordinary), top_ordinary, top)


def _risk_search(
    problem: _Problem,
    w0: np.ndarray,
    free: list[int],
    options: TuneOptions,
    box: float | None,
    log_zero: np.ndarray,
) -> np.ndarray:
    """Anneal the expected errors sum_u sum_h p_u(h) e_u(h), p_u = softmax(gamma F_u w).

    Only ``free`` coordinates move (the anchor stays 1); L-BFGS at each gamma starts from the
    previous optimum. The softmax of a list does not change when a column is shifted by a
    constant within the list, so each column of each list is first measured from its largest
    ordinary value (:func:`_list_references`; ``log_zero`` is the log-zero size per column in
    the problem's units): a feature with a large offset keeps its differences, and values of a
    log-zero size, clipped to +-1e6 only then so the gradient stays finite, keep p at 0. Padded
    slots take no probability. Returns the weights in the problem's (standardised) units.

    torch runs on the threads the user chose (``rescorer --threads``), else on
    :data:`RISK_THREADS` (:func:`rescorer.core.runtime.torch_threads`).
    """
    from rescorer.core import runtime

    with runtime.torch_threads(RISK_THREADS):
        return _anneal(problem, w0, free, options, box, log_zero)


def _anneal(
    problem: _Problem,
    w0: np.ndarray,
    free: list[int],
    options: TuneOptions,
    box: float | None,
    log_zero: np.ndarray,
) -> np.ndarray:
    """:func:`_risk_search`'s work, on the threads torch has."""
    import torch  # the toolkit's own dependency; used here only as a small autograd engine

    shifted = problem.F - _list_references(problem, log_zero)[:, None, :]
    shifted = np.where(problem.valid[:, :, None], shifted, 0.0)  # padding: masked below
    F = torch.from_numpy(np.clip(shifted, -1e6, 1e6))  # (U, H, dim) float64
    E = torch.from_numpy(problem.E.astype(np.float64))  # (U, H)
    valid = torch.from_numpy(problem.valid)
    base = torch.from_numpy(w0.astype(np.float64))
    idx = torch.tensor(free, dtype=torch.long)
    x0 = base[idx].clone()
    x = x0.clone().requires_grad_(True)
    n_utt = F.shape[0]

    def weights() -> torch.Tensor:
        return base.index_put((idx,), x)

    for gamma in options.risk_gammas:
        opt = torch.optim.LBFGS(
            [x], lr=1.0, max_iter=200, tolerance_grad=1e-9, line_search_fn="strong_wolfe"
        )

        def closure(gamma: float = gamma, opt: torch.optim.LBFGS = opt) -> torch.Tensor:
            opt.zero_grad()
            scores = (F @ weights()).masked_fill(~valid, -torch.inf)  # (U, H)
            p = torch.softmax(gamma * scores, dim=1)
            risk = (p * E).sum() / n_utt
            loss = risk + options.risk_l2 * ((x - x0) ** 2).sum()
            loss.backward()
            return loss

        opt.step(closure)
        if box is not None:
            with torch.no_grad():
                x.clamp_(-box, box)
        if logger.isEnabledFor(logging.INFO):  # the end point, counted only for the log
            w = weights().detach()
            with torch.no_grad():
                p = torch.softmax(gamma * (F @ w).masked_fill(~valid, -torch.inf), dim=1)
            logger.info(
                "risk gamma %g: expected errors %.1f, errors %d",
                gamma,
                float((p * E).sum()),
                problem.errors(w.numpy()),
            )
    return weights().detach().numpy().copy()


@dataclass
class TuningSet:
    """What tuning keeps of a dev set: per list with hypotheses, its ``(hyps, features + 1)``
    feature matrix (the word count last) and each hypothesis's word errors; about
    ``8 * (features + 2)`` bytes per hypothesis, whatever the hypotheses' text.

    Built a chunk of lists at a time (:meth:`add`), so a set larger than memory can be tuned.
    """

    # The tuned features, in column order (the word count is the extra last column).
    features: tuple[str, ...]
    # Utterance ids of the lists with hypotheses, their matrices and error counts.
    utts: list[str] = field(default_factory=list)
    feats: list[np.ndarray] = field(default_factory=list)
    errs: list[np.ndarray] = field(default_factory=list)
    # Reference words of every utterance, and the errors of lists without hypotheses (their
    # reference words, deleted whatever the weights).
    ref_words: int = 0
    fixed_errors: int = 0

    def add(
        self, nbest: NBest, refs: Mapping[str, Sequence[str]], noise: NoiseWords = NO_NOISE
    ) -> None:
        """Append the lists of ``nbest`` (``refs`` holds their references, maybe more).

        ``noise`` words are deleted from references and hypotheses before errors are counted
        (SRILM's ``-noise-vocab``); the features, the word count included, stay those of
        ``nbest``.
        """
        check_features(nbest, self.features)
        chunk_refs = noise.mapping({u: refs[u] for u in nbest})
        errs_by_utt = hypothesis_errors(noise.nbest(nbest), chunk_refs)
        for u, nb in nbest.items():
            self.ref_words += len(chunk_refs[u])
            if len(nb) == 0:
                self.fixed_errors += len(chunk_refs[u])
                continue
            self.utts.append(u)
            self.feats.append(feature_matrix(nb, self.features))
            self.errs.append(np.asarray(errs_by_utt[u], dtype=np.int64))

    @property
    def hypotheses(self) -> int:
        return sum(len(e) for e in self.errs)

    @property
    def nbytes(self) -> int:
        """Bytes of the arrays (not counting the Python objects around them)."""
        return sum(f.nbytes + e.nbytes for f, e in zip(self.feats, self.errs, strict=True))


def tune(
    nbest: NBest,
    refs: Mapping[str, Sequence[str]],
    features: Sequence[str],
    options: TuneOptions = TuneOptions(),
    initial: Weights | None = None,
    noise: NoiseWords = NO_NOISE,
) -> TuneResult:
    """Weights over ``features`` (+ length) minimising corpus word errors against ``refs``.

    ``noise`` words are deleted from references and hypotheses before errors are counted
    (SRILM's ``-noise-vocab``); the features, the word count included, stay those of ``nbest``.
    """
    data = TuningSet(_check_feature_list(features))
    data.add(nbest, refs, noise)
    return tune_set(data, options, initial)


def _check_feature_list(features: Sequence[str]) -> tuple[str, ...]:
    features = tuple(features)
    if not features:
        raise ValueError("need at least one feature to tune")
    if len(set(features)) != len(features):
        raise ValueError(f"features listed twice: {list(features)}")
    return features


def tune_set(
    data: TuningSet, options: TuneOptions = TuneOptions(), initial: Weights | None = None
) -> TuneResult:
    """Weights over ``data.features`` (+ length) minimising its corpus word errors."""
    t0 = time.perf_counter()
    features = list(_check_feature_list(data.features))
    anchor = options.anchor or features[0]
    if anchor not in features:
        raise ValueError(f"anchor {anchor!r} is not one of the features {features}")
    utts, feats, errs = data.utts, data.feats, data.errs
    ref_words, fixed_errors = data.ref_words, data.fixed_errors
    logger.info(
        "tuning on %d lists, %d hypotheses: %d bytes of features and errors per hypothesis",
        len(utts), data.hypotheses, data.nbytes // max(data.hypotheses, 1),
    )  # fmt: skip

    _check_finite(feats, features, utts)
    dim = len(features) + 1
    scale = _column_scale(feats)
    if options.selection == "holdout":  # every k-th utterance judges the starts' end points
        held_out = set(range(options.holdout_every - 1, len(utts), options.holdout_every))
        if not held_out or len(held_out) == len(utts):
            raise ValueError(
                f"selection 'holdout' needs at least {options.holdout_every} utterances with "
                f"hypotheses, got {len(utts)}"
            )
    else:
        held_out = set()
    searched_on = [i for i in range(len(utts)) if i not in held_out]
    problem = _Problem([feats[i] / scale for i in searched_on], [errs[i] for i in searched_on])
    k_anchor = features.index(anchor)
    free = [k for k in range(dim) if k != k_anchor and (k < dim - 1 or options.tune_length)]

    def to_std(w: np.ndarray) -> np.ndarray:  # original weights -> standardised, anchor 1
        return (w / w[k_anchor]) * (scale / scale[k_anchor])  # ratios first: no overflow

    if initial is not None:
        check = [n for n in initial.names if n not in features]
        if check:
            raise ValueError(f"initial weights name features not being tuned: {check}")
        w0 = np.array([initial.features.get(n, 0.0) for n in features] + [initial.length])
        if w0[k_anchor] <= 0:
            raise ValueError(f"initial weight of the anchor {anchor!r} must be > 0")
        with np.errstate(over="ignore"):
            ratios = w0 / w0[k_anchor]
        far = [
            (n, abs(r))
            for n, r in zip([*features, "length"], ratios, strict=True)
            if not abs(r) <= MAX_MAGNITUDE
        ]
        if far:
            raise ValueError(
                f"initial weights: {far[0][0]!r} weighs {far[0][1]:g} times the anchor "
                f"{anchor!r}; expected ratios to the anchor of at most {MAX_MAGNITUDE:g}"
            )
        w0 = to_std(w0)
    else:
        w0 = np.zeros(dim)
        w0[k_anchor] = 1.0
    # "initial" is the lists' own order (each one's first hypothesis), whatever the search
    # starts from: the system the tuned weights have to beat
    initial_errors = sum(int(e[0]) for e in errs) + fixed_errors
    bound = options.bound
    if bound is not None:
        w0[free] = np.clip(w0[free], -bound, bound)

    def feasible(w: np.ndarray, d: np.ndarray) -> tuple[float, float]:
        """The steps t that keep w + t*d inside the box (all steps when unbounded)."""
        if bound is None:
            return -np.inf, np.inf
        moving = [k for k in free if d[k] != 0.0]
        ends = [((-bound - w[k]) / d[k], (bound - w[k]) / d[k]) for k in moving]
        return max(min(e) for e in ends), min(max(e) for e in ends)

    rng = np.random.default_rng(options.seed)
    names = [*features, "length"]
    trace: list[TraceStep] = []
    best_w, best_err = w0.copy(), problem.errors(w0)
    start_errors: list[int] = []
    ends: list[np.ndarray] = []
    for start in range(options.restarts + 1 if options.method == "mert" else 0):
        if start == 0:
            w = w0.copy()
        else:
            w = w0.copy()
            half = options.restart_range if bound is None else min(options.restart_range, bound)
            w[free] = rng.uniform(-half, half, len(free))
        err = problem.errors(w)
        for sweep in range(options.max_sweeps):
            improved = False
            dirs: list[tuple[str, np.ndarray]] = []
            for k in free:
                d = np.zeros(dim)
                d[k] = 1.0
                dirs.append((names[k], d))
            for r in range(options.random_directions if len(free) > 1 else 0):
                d = np.zeros(dim)
                d[free] = rng.normal(size=len(free))
                dirs.append((f"random{r}", d / np.linalg.norm(d)))
            for dname, d in dirs:
                step, new_err = problem.line_search(w, d, feasible(w, d))
                if new_err < err:
                    trace.append(TraceStep(start, sweep, dname, err, new_err, step))
                    logger.info(
                        "start %d sweep %d %-10s errors %d -> %d (step %+.4g)",
                        start,
                        sweep,
                        dname,
                        err + fixed_errors,
                        new_err + fixed_errors,
                        step,
                    )
                    w = w + step * d
                    err = new_err
                    improved = True
            if not improved:
                break
        start_errors.append(err + fixed_errors)
        logger.info("start %d ends at %d errors", start, err + fixed_errors)
        ends.append(w.copy())
        if err < best_err:
            best_w, best_err = w.copy(), err

    if options.method == "risk":
        w = _risk_search(problem, w0, free, options, bound, LOG_ZERO_LIKE / scale)
        best_w, best_err = w.copy(), problem.errors(w)
        start_errors.append(best_err + fixed_errors)
        ends.append(w)

    def to_orig(w: np.ndarray) -> np.ndarray:  # standardised -> original units, anchor 1
        v = w / scale
        return v / v[k_anchor]

    # What the search found, counted in original units as rescoring will count it; near-ties
    # can fall the other way there, so every start's end point (and the start) competes.
    if options.selection == "holdout":
        held = sorted(held_out)
        held_feats, held_errs = [feats[i] for i in held], [errs[i] for i in held]
        search_feats, search_errs = [feats[i] for i in searched_on], [errs[i] for i in searched_on]
        judged = [
            (
                _rescored_errors(held_feats, held_errs, to_orig(w)),
                _rescored_errors(search_feats, search_errs, to_orig(w)),
                i,
            )
            for i, w in enumerate(ends)
        ]
        chosen = min(judged)
        logger.info(
            "held-out errors of the %d end points: %s; keeping start %d",
            len(ends),
            [j[0] for j in judged],
            chosen[2],
        )
        best_w = ends[chosen[2]]
        best_err = searched = _rescored_errors(feats, errs, to_orig(best_w))
    else:
        searched = best_err
        counted = [(_rescored_errors(feats, errs, to_orig(w)), i) for i, w in enumerate(ends)]
        best_err = _rescored_errors(feats, errs, to_orig(best_w))
        fallback = min(counted, default=(best_err, -1))
        if fallback[0] < best_err:
            best_w, best_err = ends[fallback[1]], fallback[0]
    if best_err != searched:
        logger.warning(
            "the search counted %d errors, its weights give %d in original units (a near-tie); "
            "reporting %d, the count of the weights written",
            searched + fixed_errors,
            _rescored_errors(feats, errs, to_orig(best_w)) + fixed_errors,
            best_err + fixed_errors,
        )
    if best_err + fixed_errors > initial_errors:
        hint = (
            f"the feature {RANK_FEATURE!r} alone (weight 1, the others 0) gives that order"
            if RANK_FEATURE in features
            else f"the features {features} lack what the first pass knew: add its scores, or "
            f"the list order as the feature {RANK_FEATURE!r} (tune --rank)"
        )
        logger.warning(
            "the tuned weights make %d errors on the tuning set, more than the %d of the lists' "
            "own order (their first hypotheses); %s",
            best_err + fixed_errors,
            initial_errors,
            hint,
        )
    w_orig = to_orig(best_w)
    weights = Weights(
        {n: float(v) for n, v in zip(features, w_orig[:-1], strict=True)},
        float(w_orig[-1]),
        meta={
            "dev_errors": best_err + fixed_errors,
            "dev_ref_words": ref_words,
            "dev_wer_percent": round(100 * (best_err + fixed_errors) / max(ref_words, 1), 4),
            "initial_errors": initial_errors,
            "anchor": anchor,
            "restarts": options.restarts,
            "seed": options.seed,
            "bound": options.bound,
            "selection": options.selection,
            "method": options.method,
            "trace": [
                [
                    t.start,
                    t.sweep,
                    t.direction,
                    t.errors_before + fixed_errors,
                    t.errors_after + fixed_errors,
                ]
                for t in trace
            ],
        },
    )
    return TuneResult(
        weights=weights,
        errors=best_err + fixed_errors,
        initial_errors=initial_errors,
        ref_words=ref_words,
        start_errors=tuple(start_errors),
        trace=tuple(trace),
        seconds=time.perf_counter() - t0,
    )
