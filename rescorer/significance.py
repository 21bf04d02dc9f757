"""Paired significance tests for comparing two recognisers on the same utterances.

Every test takes per-utterance error counts of system A and system B, in the same utterance
order, and looks at the differences ``d = errors_a - errors_b``: **positive differences and
positive statistics favour B** (B made fewer errors). All p-values are two-sided. Only the
standard library and numpy are used (``math.erfc`` for the normal tail, ``math.lgamma`` for
binomial coefficients); there is no scipy dependency.

Tests
-----
:func:`matched_pairs`
    NIST's matched-pair sentence-segment word error test (MAPSSWE) with *utterances* as the
    segments. sclite instead cuts the corpus into segments bounded by words both systems got
    right, which gives more, smaller and more nearly independent segments; using whole
    utterances is the common simplification and keeps the test independent of alignments.
:func:`sign_test`
    exact binomial test on the utterances where the error counts differ.
:func:`wilcoxon`
    Wilcoxon signed-rank test, zero differences dropped, average ranks for tied magnitudes,
    exact (conditional on the tie pattern) for small samples, otherwise the tie-corrected
    normal approximation without continuity correction.
:func:`bootstrap_wer_difference`
    Bisani & Ney (2004) bootstrap of the WER difference with a percentile confidence interval
    and the "probability of improvement".

:func:`compare` runs all of them on two :class:`~rescorer.wer.WerReport` objects.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from rescorer.core.errors import InputError, check_same_ids
from rescorer.wer import ErrorCounts, WerReport

logger = logging.getLogger(__name__)

ArrayLike = Sequence[float] | np.ndarray

EXACT_WILCOXON_MAX_N = 25
"""Largest number of non-zero differences for which :func:`wilcoxon` defaults to exact."""

_SQRT2 = math.sqrt(2.0)
# Bootstrap index matrices are drawn in blocks of at most this many entries.
_BOOTSTRAP_BLOCK = 1 << 22


@dataclass(frozen=True)
class TestResult:
    """Outcome of one paired test.

    ``statistic`` is the test's own statistic (see each test; positive or large values favour
    B), ``p_value`` is two-sided, ``n`` the number of units the test used (utterances, or
    utterances with a non-zero difference), ``method`` a short description.
    """

    __test__ = False  # not a pytest test class

    name: str
    statistic: float
    p_value: float
    n: int
    method: str = ""

    def significant(self, alpha: float = 0.05) -> bool:
        """Whether ``p_value < alpha``."""
        return self.p_value < alpha


@dataclass(frozen=True)
class BootstrapResult:
    """Bootstrap distribution summary of ``WER_B - WER_A`` (fractions, not percent).

    ``observed`` is the difference on the full set, ``ci_low``/``ci_high`` the percentile
    interval at ``confidence``, ``std_error`` the standard deviation of the resampled
    differences and ``prob_improvement`` the fraction of resamples in which B has strictly
    fewer errors than A (ties count as no improvement).
    """

    observed: float
    ci_low: float
    ci_high: float
    confidence: float
    prob_improvement: float
    std_error: float
    n_resamples: int
    n: int
    seed: int

    def contains_zero(self) -> bool:
        return self.ci_low <= 0.0 <= self.ci_high


def _pair(errors_a: ArrayLike, errors_b: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    a = np.asarray(errors_a, dtype=np.float64)
    b = np.asarray(errors_b, dtype=np.float64)
    if a.ndim != 1 or b.ndim != 1:
        raise ValueError("error counts must be one-dimensional")
    if a.shape != b.shape:
        raise ValueError(f"paired error counts differ in length: {a.size} vs {b.size}")
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        raise ValueError("error counts must be finite")
    return a, b


def _normal_two_sided(z: float) -> float:
    """Two-sided tail probability ``P(|Z| >= |z|)`` of the standard normal."""
    if math.isnan(z):
        return 1.0
    return math.erfc(abs(z) / _SQRT2)


def matched_pairs(errors_a: ArrayLike, errors_b: ArrayLike) -> TestResult:
    """MAPSSWE-style matched-pair test with utterances as segments.

    With ``d_i = errors_a[i] - errors_b[i]`` over ``n`` utterances, the statistic is
    ``z = mean(d) / (sd(d) / sqrt(n))`` (``sd`` with ``n - 1`` in the denominator) and the
    p-value is the two-sided standard-normal tail. If every difference is equal the variance is
    zero: ``z`` is 0 (p = 1) when they are all zero and +-inf (p = 0) otherwise. With fewer
    than two utterances the test cannot be run and gives ``z = 0``, ``p = 1``.
    """
    a, b = _pair(errors_a, errors_b)
    d = a - b
    n = int(d.size)
    name = "matched pairs"
    method = "MAPSSWE, utterance segments, normal"
    if n < 2:
        return TestResult(name, 0.0, 1.0, n, method)
    mean = float(d.mean())
    var = float(d.var(ddof=1))
    if var == 0.0:
        z = 0.0 if mean == 0.0 else math.copysign(math.inf, mean)
    else:
        z = mean / math.sqrt(var / n)
    return TestResult(name, z, _normal_two_sided(z), n, method)


def _log_binom_pmf(n: int, k: np.ndarray) -> np.ndarray:
    """log P(X = k) for X ~ Binomial(n, 1/2)."""
    lg = np.vectorize(math.lgamma, otypes=[np.float64])
    return math.lgamma(n + 1) - lg(k + 1) - lg(n - k + 1) - n * math.log(2.0)


def binomial_two_sided(k: int, n: int) -> float:
    """Exact two-sided p-value of ``k`` successes in ``n`` fair coin flips.

    ``min(1, 2 * P(X <= min(k, n - k)))``, summed in log space so it is accurate for large n.
    """
    if n == 0:
        return 1.0
    if not 0 <= k <= n:
        raise ValueError(f"k must be within 0..{n}, got {k}")
    tail = min(k, n - k)
    logs = _log_binom_pmf(n, np.arange(tail + 1))
    top = float(logs.max())
    log_p = top + math.log(float(np.exp(logs - top).sum())) + math.log(2.0)
    return min(1.0, math.exp(log_p))


def sign_test(errors_a: ArrayLike, errors_b: ArrayLike) -> TestResult:
    """Exact two-sided sign test on the utterances where A and B differ.

    ``statistic`` is the number of utterances where B made fewer errors, ``n`` the number of
    utterances with different error counts (ties are dropped). For example B better on 8 of 10
    gives ``p = 2 * (1 + 10 + 45) / 1024 = 0.109375``.
    """
    a, b = _pair(errors_a, errors_b)
    d = a - b
    better = int((d > 0).sum())
    worse = int((d < 0).sum())
    n = better + worse
    return TestResult("sign test", float(better), binomial_two_sided(better, n), n, "exact")


def _average_ranks(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Ranks 1..n of ``values`` with ties given their average rank, and the tie-group sizes."""
    _, inverse, counts = np.unique(values, return_inverse=True, return_counts=True)
    last = np.cumsum(counts)  # rank of the last member of each tie group
    avg = last - (counts - 1) / 2.0
    return avg[inverse.reshape(-1)], counts


def _exact_signed_rank_p(ranks: np.ndarray, w_plus: float) -> float:
    """Two-sided exact p of ``W+`` over all 2**n sign assignments of the given ranks.

    Average ranks are multiples of 1/2, so the distribution is built over doubled ranks.
    """
    doubled = np.rint(2.0 * ranks).astype(np.int64)
    total = int(doubled.sum())
    dist = np.zeros(total + 1, dtype=np.float64)
    dist[0] = 1.0
    top = 0
    for r in doubled:
        dist[r : top + r + 1] += dist[: top + 1].copy()
        top += int(r)
    dist /= dist.sum()
    w2 = int(round(2.0 * w_plus))
    lower = float(dist[: w2 + 1].sum())
    upper = float(dist[w2:].sum())
    return min(1.0, 2.0 * min(lower, upper))


def wilcoxon(errors_a: ArrayLike, errors_b: ArrayLike, exact: bool | None = None) -> TestResult:
    """Wilcoxon signed-rank test of ``d = errors_a - errors_b``.

    Zero differences are dropped (``n`` counts the rest); magnitudes ``|d|`` are ranked 1..n
    with average ranks for ties; ``statistic`` is ``W+``, the rank sum of the utterances where
    B is better. ``exact=None`` uses the exact distribution (conditional on the tie pattern,
    by enumerating the 2**n sign flips with a DP) when ``n <=`` :data:`EXACT_WILCOXON_MAX_N`
    and the normal approximation otherwise: ``z = (W+ - n(n+1)/4) / sqrt(var)`` with
    ``var = n(n+1)(2n+1)/24 - sum(t**3 - t)/48`` over tie groups of size ``t``, no continuity
    correction.
    """
    a, b = _pair(errors_a, errors_b)
    d = a - b
    d = d[d != 0]
    n = int(d.size)
    name = "wilcoxon"
    if n == 0:
        return TestResult(name, 0.0, 1.0, 0, "no non-zero differences")
    ranks, ties = _average_ranks(np.abs(d))
    w_plus = float(ranks[d > 0].sum())
    if exact is None:
        exact = n <= EXACT_WILCOXON_MAX_N
    if exact:
        return TestResult(name, w_plus, _exact_signed_rank_p(ranks, w_plus), n, "exact")
    mean = n * (n + 1) / 4.0
    var = n * (n + 1) * (2 * n + 1) / 24.0 - float((ties**3 - ties).sum()) / 48.0
    if var <= 0.0:
        # Only possible when n == 1 is forced to the normal approximation; no information.
        return TestResult(name, w_plus, 1.0, n, "normal, tie-corrected")
    z = (w_plus - mean) / math.sqrt(var)
    return TestResult(name, w_plus, _normal_two_sided(z), n, "normal, tie-corrected")


def bootstrap_wer_difference(
    errors_a: ArrayLike,
    errors_b: ArrayLike,
    ref_lengths: ArrayLike,
    n_resamples: int = 1000,
    seed: int = 0,
    confidence: float = 0.95,
) -> BootstrapResult:
    """Bootstrap of ``WER_B - WER_A`` (Bisani & Ney, 2004).

    Each resample draws ``n`` utterances with replacement (``numpy.random.default_rng(seed)``)
    and computes ``(sum errors_b - sum errors_a) / sum ref_lengths`` over the drawn utterances;
    both systems share the draw and the denominator. A resample whose reference length sums to
    zero counts as difference 0 when the error sums are equal and +-inf otherwise. The
    interval is the ``(1 - confidence) / 2`` and ``(1 + confidence) / 2`` percentiles
    (``numpy.quantile``, linear interpolation).
    """
    a, b = _pair(errors_a, errors_b)
    lengths = np.asarray(ref_lengths, dtype=np.float64)
    if lengths.shape != a.shape:
        raise ValueError(f"ref_lengths has {lengths.size} entries, error counts have {a.size}")
    if (lengths < 0).any():
        raise ValueError("ref_lengths must be non-negative")
    if n_resamples < 1:
        raise ValueError(f"n_resamples must be at least 1, got {n_resamples}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    n = int(a.size)
    if n == 0:
        raise ValueError("bootstrap needs at least one utterance")

    diff = b - a
    rng = np.random.default_rng(seed)
    rows = max(1, _BOOTSTRAP_BLOCK // n)
    err_sums = np.empty(n_resamples, dtype=np.float64)
    len_sums = np.empty(n_resamples, dtype=np.float64)
    for start in range(0, n_resamples, rows):
        stop = min(n_resamples, start + rows)
        idx = rng.integers(0, n, size=(stop - start, n))
        err_sums[start:stop] = diff[idx].sum(axis=1)
        len_sums[start:stop] = lengths[idx].sum(axis=1)
    diffs = _safe_ratio(err_sums, len_sums)
    observed = float(_safe_ratio(np.array([diff.sum()]), np.array([lengths.sum()]))[0])
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(diffs, [tail, 1.0 - tail])
    finite = diffs[np.isfinite(diffs)]
    return BootstrapResult(
        observed=observed,
        ci_low=float(low),
        ci_high=float(high),
        confidence=confidence,
        prob_improvement=float((err_sums < 0).mean()),
        std_error=float(finite.std()) if finite.size else math.nan,
        n_resamples=n_resamples,
        n=n,
        seed=seed,
    )


def _safe_ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    out = np.zeros_like(num)
    nz = den != 0
    np.divide(num, den, out=out, where=nz)
    zero_den = ~nz & (num != 0)
    out[zero_den] = np.copysign(np.inf, num[zero_den])
    return out


# --------------------------------------------------------------------------------------------
# Comparing two reports
# --------------------------------------------------------------------------------------------


def paired_errors(
    report_a: WerReport, report_b: WerReport
) -> tuple[tuple[str, ...], np.ndarray, np.ndarray, np.ndarray]:
    """``(utt_ids, errors_a, errors_b, ref_lengths)`` aligned on ``report_a``'s order.

    The utterance ids must match (:class:`InputError` naming missing/extra ids of B) and each
    utterance must have the same reference length in both reports (else the systems were
    scored against different references).
    """
    ids_a = report_a.utt_ids
    check_same_ids(set(ids_a), set(report_b.utt_ids), what="system B utterance")
    by_id = {u.utt_id: u.counts for u in report_b.utterances}
    b_counts = [by_id[u] for u in ids_a]
    a_counts = [u.counts for u in report_a.utterances]
    differ = [
        u
        for u, ca, cb in zip(ids_a, a_counts, b_counts, strict=True)
        if ca.ref_words != cb.ref_words
    ]
    if differ:
        shown = ", ".join(differ[:5]) + (f" (+{len(differ) - 5} more)" if len(differ) > 5 else "")
        raise InputError(
            f"reference lengths differ between the systems for {len(differ)} utterance(s): "
            f"{shown}; were they scored against the same references?"
        )
    errors_a = np.fromiter((c.errors for c in a_counts), dtype=np.int64, count=len(ids_a))
    errors_b = np.fromiter((c.errors for c in b_counts), dtype=np.int64, count=len(ids_a))
    lengths = np.fromiter((c.ref_words for c in a_counts), dtype=np.int64, count=len(ids_a))
    return ids_a, errors_a, errors_b, lengths


@dataclass(frozen=True)
class Comparison:
    """All paired tests of system B against system A on the same utterances."""

    name_a: str
    name_b: str
    total_a: ErrorCounts
    total_b: ErrorCounts
    n: int
    b_better: int
    b_worse: int
    matched_pairs: TestResult
    sign: TestResult
    wilcoxon: TestResult
    bootstrap: BootstrapResult
    alpha: float = 0.05

    @property
    def difference(self) -> float:
        """``WER_B - WER_A`` as a fraction (negative when B is better)."""
        return self.total_b.wer - self.total_a.wer

    @property
    def relative_difference(self) -> float:
        """``(WER_B - WER_A) / WER_A`` (nan when A has no errors)."""
        wa = self.total_a.wer
        return self.difference / wa if wa else math.nan

    @property
    def verdict(self) -> str:
        """One word from the matched-pairs test at ``alpha``: better, worse or inconclusive.

        ``better`` means B is significantly better than A.
        """
        mp = self.matched_pairs
        if not mp.significant(self.alpha) or mp.statistic == 0:
            return "inconclusive"
        return "better" if mp.statistic > 0 else "worse"

    def summary(self) -> str:
        """A few lines: both WERs, the difference, every test and the verdict."""
        a, b = self.name_a, self.name_b
        bs = self.bootstrap
        rel = self.relative_difference
        rel_s = "" if math.isnan(rel) else f", {100.0 * rel:+.1f} % relative"
        width = max(len(a), len(b))
        return "\n".join(
            [
                f"{a:<{width}}: {self.total_a.kaldi_line()}",
                f"{b:<{width}}: {self.total_b.kaldi_line()}",
                f"difference {b} - {a}: {100.0 * self.difference:+.2f} % absolute{rel_s} "
                f"over {self.n} utterances ({b} better on {self.b_better}, "
                f"worse on {self.b_worse})",
                _test_line(self.matched_pairs, "z"),
                _test_line(self.sign, f"{b} better on", f" of {self.sign.n}", " "),
                _test_line(self.wilcoxon, "W+"),
                f"bootstrap ({bs.n_resamples} resamples, seed {bs.seed}): "
                f"{100.0 * bs.confidence:g}% CI of WER {b} - {a} "
                f"[{100.0 * bs.ci_low:+.2f}, {100.0 * bs.ci_high:+.2f}] %, "
                f"P({b} better) = {bs.prob_improvement:.3f}",
                f"verdict (matched pairs, alpha = {self.alpha:g}): {self.verdict}",
            ]
        )


def _test_line(t: TestResult, stat_name: str, suffix: str = "", sep: str = " = ") -> str:
    if not math.isfinite(t.statistic) or float(t.statistic).is_integer():
        stat = f"{t.statistic:g}"
    else:
        stat = f"{t.statistic:.3f}"
    return f"{t.name} ({t.method}): {stat_name}{sep}{stat}{suffix}, p = {t.p_value:.4g} (n = {t.n})"


def compare(
    report_a: WerReport,
    report_b: WerReport,
    n_resamples: int = 1000,
    seed: int = 0,
    confidence: float = 0.95,
    alpha: float = 0.05,
    names: tuple[str, str] = ("A", "B"),
) -> Comparison:
    """Run every paired test of ``report_b`` against ``report_a``.

    Utterance ids must match (see :func:`paired_errors`). The verdict uses the matched-pairs
    test at ``alpha``; the other tests and the bootstrap interval are reported alongside.
    """
    _, ea, eb, lengths = paired_errors(report_a, report_b)
    if ea.size == 0:
        raise InputError("no utterances to compare")
    d = ea - eb
    return Comparison(
        name_a=names[0],
        name_b=names[1],
        total_a=report_a.total,
        total_b=report_b.total,
        n=int(ea.size),
        b_better=int((d > 0).sum()),
        b_worse=int((d < 0).sum()),
        matched_pairs=matched_pairs(ea, eb),
        sign=sign_test(ea, eb),
        wilcoxon=wilcoxon(ea, eb),
        bootstrap=bootstrap_wer_difference(ea, eb, lengths, n_resamples, seed, confidence),
        alpha=alpha,
    )
