"""Tests for rescorer.significance against hand-computed values."""

from __future__ import annotations

import math
import time
from fractions import Fraction

import numpy as np
import pytest

from rescorer.core.data import default_data_dir
from rescorer.core.errors import InputError
from rescorer.significance import (
    Comparison,
    TestResult,
    binomial_two_sided,
    bootstrap_wer_difference,
    compare,
    matched_pairs,
    paired_errors,
    sign_test,
    wilcoxon,
)
from rescorer.wer import score_corpus

# ------------------------------------------------------------------------------------------
# Sign test
# ------------------------------------------------------------------------------------------


def test_sign_test_8_of_10():
    # B better on 8 utterances, worse on 2, tied on 3 (ties are dropped: n = 10).
    # P(X <= 2) for X ~ Bin(10, 1/2) = (1 + 10 + 45) / 1024 = 0.0546875; two-sided = 0.109375.
    a = [2, 1, 3, 1, 1, 2, 1, 1, 0, 0, 0, 0, 5]
    b = [1, 0, 1, 0, 0, 0, 0, 0, 1, 1, 0, 0, 5]
    r = sign_test(a, b)
    assert isinstance(r, TestResult)
    assert r.n == 10
    assert r.statistic == 8
    assert r.p_value == pytest.approx(0.109375, abs=1e-12)
    # Swapping the systems gives the same two-sided p and the other count.
    r2 = sign_test(b, a)
    assert r2.statistic == 2 and r2.p_value == pytest.approx(0.109375, abs=1e-12)


def test_sign_test_small_cases():
    # 10 of 10: 2 * 1 / 1024.
    assert sign_test([1] * 10, [0] * 10).p_value == pytest.approx(2 / 1024, abs=1e-15)
    # 5 of 10: 2 * P(X <= 5) = 2 * 638 / 1024 > 1, clamped to 1.
    assert sign_test([1] * 5 + [0] * 5, [0] * 5 + [1] * 5).p_value == 1.0
    # Only ties: nothing to test.
    r = sign_test([1, 2], [1, 2])
    assert (r.n, r.p_value) == (0, 1.0)


@pytest.mark.parametrize(("k", "n"), [(950, 2000), (3, 40), (0, 300), (400, 1000)])
def test_binomial_large_n_matches_exact_fractions(k, n):
    tail = min(k, n - k)
    exact = min(Fraction(1), 2 * Fraction(sum(math.comb(n, i) for i in range(tail + 1)), 2**n))
    assert binomial_two_sided(k, n) == pytest.approx(float(exact), rel=1e-9, abs=1e-300)


# ------------------------------------------------------------------------------------------
# Wilcoxon signed-rank
# ------------------------------------------------------------------------------------------

# d = a - b = [2, 1, 1, -1, 3, 0]; the zero is dropped (n = 5).
# |d| = [2, 1, 1, 1, 3]: the three 1s share ranks 1, 2, 3 -> average 2; 2 -> rank 4; 3 -> 5.
# W+ (ranks of positive d) = 4 + 2 + 2 + 5 = 13; W- = 2.
WIL_A = [3, 1, 2, 0, 3, 4]
WIL_B = [1, 0, 1, 1, 0, 4]


def test_wilcoxon_normal_approximation_by_hand():
    # mean = n(n+1)/4 = 7.5
    # var  = n(n+1)(2n+1)/24 - sum(t^3 - t)/48 = 13.75 - (27 - 3)/48 = 13.25
    # z = (13 - 7.5) / sqrt(13.25) = 1.51097; p = erfc(z / sqrt 2) = 0.130797
    r = wilcoxon(WIL_A, WIL_B, exact=False)
    assert r.n == 5
    assert r.statistic == 13.0
    assert r.p_value == pytest.approx(0.13079706, abs=1e-7)


def test_wilcoxon_exact_by_hand():
    # Under H0 each of the 2^5 = 32 sign patterns of ranks {4, 2, 2, 2, 5} is equally likely.
    # W+ >= 13 means the negative ranks sum to <= 2: {}, {2a}, {2b}, {2c} -> 4 patterns.
    # P(W+ >= 13) = 4/32 = 0.125; two-sided p = 0.25.
    r = wilcoxon(WIL_A, WIL_B, exact=True)
    assert r.statistic == 13.0
    assert r.p_value == pytest.approx(0.25, abs=1e-12)
    # The default for n = 5 is exact.
    assert wilcoxon(WIL_A, WIL_B).p_value == pytest.approx(0.25, abs=1e-12)


def test_wilcoxon_no_ties():
    # d = [1, 2, 3, 4, 5]: W+ = 15 = the maximum; exact p = 2 * 1/32 = 0.0625.
    a, b = [1, 2, 3, 4, 5], [0, 0, 0, 0, 0]
    assert wilcoxon(a, b).p_value == pytest.approx(0.0625, abs=1e-12)
    # Normal: z = (15 - 7.5) / sqrt(5*6*11/24 = 13.75) = 2.02260; p = 0.0431144.
    assert wilcoxon(a, b, exact=False).p_value == pytest.approx(0.04311445, abs=1e-7)
    # Direction does not change the two-sided p; W+ becomes 0.
    r = wilcoxon(b, a)
    assert r.statistic == 0.0 and r.p_value == pytest.approx(0.0625, abs=1e-12)


def test_wilcoxon_all_zero():
    r = wilcoxon([1, 2, 3], [1, 2, 3])
    assert (r.n, r.statistic, r.p_value) == (0, 0.0, 1.0)


def test_wilcoxon_exact_and_normal_agree_for_moderate_n():
    rng = np.random.default_rng(3)
    a = rng.integers(0, 5, 24)
    b = rng.integers(0, 5, 24)
    pe = wilcoxon(a, b, exact=True).p_value
    pn = wilcoxon(a, b, exact=False).p_value
    assert abs(pe - pn) < 0.03


# ------------------------------------------------------------------------------------------
# Matched pairs (MAPSSWE with utterance segments)
# ------------------------------------------------------------------------------------------


def test_matched_pairs_by_hand():
    # d = a - b = [2, 0, 1, 3]; mean 1.5; deviations .5, -1.5, -.5, 1.5
    # sample variance = (0.25 + 2.25 + 0.25 + 2.25) / 3 = 5/3
    # z = 1.5 / sqrt((5/3) / 4) = 2.32379; p = erfc(z / sqrt 2) = 0.0201368
    r = matched_pairs([3, 2, 1, 4], [1, 2, 0, 1])
    assert r.n == 4
    assert r.statistic == pytest.approx(2.32379001, abs=1e-7)
    assert r.p_value == pytest.approx(0.02013675, abs=1e-7)
    swapped = matched_pairs([1, 2, 0, 1], [3, 2, 1, 4])
    assert swapped.statistic == pytest.approx(-2.32379001, abs=1e-7)
    assert swapped.p_value == pytest.approx(r.p_value)


def test_matched_pairs_degenerate():
    assert matched_pairs([1, 2, 3], [1, 2, 3]).p_value == 1.0
    r = matched_pairs([2, 3, 4], [1, 2, 3])  # constant difference 1: zero variance
    assert r.statistic == math.inf and r.p_value == 0.0
    assert matched_pairs([1], [0]).p_value == 1.0
    with pytest.raises(ValueError):
        matched_pairs([1, 2], [1])


# ------------------------------------------------------------------------------------------
# Bootstrap
# ------------------------------------------------------------------------------------------


def test_bootstrap_identical_systems():
    e = [0, 1, 2, 0, 3]
    r = bootstrap_wer_difference(e, e, [5, 6, 7, 8, 9], n_resamples=200)
    assert (r.ci_low, r.ci_high) == (0.0, 0.0)
    assert r.contains_zero()
    assert r.observed == 0.0
    assert r.prob_improvement == 0.0


def test_bootstrap_b_better_everywhere():
    a = [2, 1, 3, 1, 2, 4]
    b = [1, 0, 2, 0, 1, 2]
    lengths = [10, 8, 12, 5, 9, 20]
    r = bootstrap_wer_difference(a, b, lengths, n_resamples=500, seed=7)
    assert r.prob_improvement == 1.0
    assert r.ci_high < 0.0
    assert r.observed == pytest.approx((6 - 13) / 64)  # sums: b 6, a 13, words 64
    assert r.ci_low <= r.observed <= r.ci_high


def test_bootstrap_matches_direct_computation_and_is_deterministic():
    rng = np.random.default_rng(11)
    a = rng.integers(0, 4, 50)
    b = rng.integers(0, 4, 50)
    lengths = rng.integers(1, 30, 50)
    r = bootstrap_wer_difference(a, b, lengths, n_resamples=300, seed=5, confidence=0.9)
    # Direct: the same draws, one resample at a time.
    idx = np.random.default_rng(5).integers(0, 50, size=(300, 50))
    diffs = np.array([(b[i].sum() - a[i].sum()) / lengths[i].sum() for i in idx])
    lo, hi = np.quantile(diffs, [0.05, 0.95])
    assert r.ci_low == pytest.approx(lo) and r.ci_high == pytest.approx(hi)
    assert r.prob_improvement == pytest.approx(float((diffs < 0).mean()))
    assert bootstrap_wer_difference(a, b, lengths, n_resamples=300, seed=5, confidence=0.9) == r


def test_bootstrap_speed():
    rng = np.random.default_rng(0)
    a = rng.integers(0, 5, 3000)
    b = rng.integers(0, 5, 3000)
    lengths = rng.integers(5, 40, 3000)
    start = time.perf_counter()
    bootstrap_wer_difference(a, b, lengths, n_resamples=1000)
    elapsed = time.perf_counter() - start
    assert elapsed < 1.0, f"1000 resamples of 3000 utterances took {elapsed:.2f} s"


def test_bootstrap_validates():
    with pytest.raises(ValueError):
        bootstrap_wer_difference([1], [1], [1, 2])
    with pytest.raises(ValueError):
        bootstrap_wer_difference([1], [1], [1], confidence=1.0)
    with pytest.raises(ValueError):
        bootstrap_wer_difference([], [], [])


# ------------------------------------------------------------------------------------------
# compare()
# ------------------------------------------------------------------------------------------


def _corpus(n: int, fixed: int):
    """n utterances of 5 words; system A gets one word wrong everywhere, B fixes ``fixed``."""
    refs = {f"u{i:03d}": ["w1", "w2", "w3", "w4", "w5"] for i in range(n)}
    hyp_a = {u: ["x", "w2", "w3", "w4", "w5"] for u in refs}
    hyp_b = {u: (list(r) if i < fixed else hyp_a[u]) for i, (u, r) in enumerate(refs.items())}
    return refs, hyp_a, hyp_b


def test_compare_b_better():
    refs, ha, hb = _corpus(40, 20)
    ra, rb = score_corpus(refs, ha), score_corpus(refs, hb)
    c = compare(ra, rb, n_resamples=300)
    assert isinstance(c, Comparison)
    assert c.difference == pytest.approx(-20 / 200)
    assert (c.b_better, c.b_worse, c.n) == (20, 0, 40)
    assert c.sign.p_value == pytest.approx(2 / 2**20)
    assert c.bootstrap.prob_improvement == 1.0
    assert c.verdict == "better"
    text = c.summary()
    assert "%WER 20.00 [ 40 / 200" in text and "%WER 10.00 [ 20 / 200" in text
    assert "sign test" in text and "wilcoxon" in text and "matched pairs" in text
    assert "CI" in text
    assert text.splitlines()[-1].endswith("better")
    # Reversed roles: A better, i.e. B worse.
    assert compare(rb, ra, n_resamples=100).verdict == "worse"


def test_compare_no_difference():
    refs, ha, _ = _corpus(10, 0)
    r = score_corpus(refs, ha)
    c = compare(r, r, n_resamples=50)
    assert c.verdict == "inconclusive"
    assert c.matched_pairs.p_value == 1.0 and c.sign.p_value == 1.0
    assert (c.bootstrap.ci_low, c.bootstrap.ci_high) == (0.0, 0.0)


def test_compare_id_mismatch_and_reference_mismatch():
    refs, ha, hb = _corpus(5, 2)
    ra = score_corpus(refs, ha)
    drop = {u: h for u, h in hb.items() if u != "u003"}
    rb = score_corpus({u: refs[u] for u in drop}, drop)
    with pytest.raises(InputError, match="u003"):
        compare(ra, rb)
    other_refs = dict(refs, u001=["w1", "w2"])
    with pytest.raises(InputError, match="u001"):
        compare(ra, score_corpus(other_refs, hb))


def test_paired_errors_reorders_b():
    refs, ha, hb = _corpus(4, 2)
    ra = score_corpus(refs, ha)
    rev = dict(reversed(list(refs.items())))
    rb = score_corpus(rev, hb)
    ids, ea, eb, lengths = paired_errors(ra, rb)
    assert ids == ra.utt_ids
    assert ea.tolist() == [1, 1, 1, 1]
    assert eb.tolist() == [0, 0, 1, 1]
    assert lengths.tolist() == [5, 5, 5, 5]


# ------------------------------------------------------------------------------------------
# Real data: 1-best vs oracle on dev_clean
# ------------------------------------------------------------------------------------------

DATA = default_data_dir() / "nbest" / "librispeech-espnet"


def test_real_first_vs_second_hypothesis():
    d = DATA / "dev_clean"
    if not (d / "references" / "ref_wer.trn").is_file():
        pytest.skip(f"LibriSpeech ESPnet N-best data not found at {d} (set RESCORER_DATA)")
    refs = {}
    for line in (d / "references" / "ref_wer.trn").read_text(encoding="utf-8").splitlines():
        cut = line.rindex("(")
        refs["-".join(line[cut + 1 : line.rindex(")")].split("-")[-3:])] = line[:cut].split()

    def hyps(k):
        path = d / "raw_hypotheses" / f"{k}best_recog" / "text"
        return {p[0]: p[1:] for p in (ln.split() for ln in path.read_text().splitlines())}

    r1, r2 = score_corpus(refs, hyps(1)), score_corpus(refs, hyps(2))
    assert r1.total.errors == 925
    c = compare(r2, r1, names=("2nd", "1st"))
    assert c.difference < 0
    assert c.verdict == "better"
    assert c.matched_pairs.p_value < 1e-6 and c.sign.p_value < 1e-6
    assert c.bootstrap.ci_high < 0
