"""Posterior (minimum expected word error) decoding: hand-counted lists."""

from __future__ import annotations

import math

import numpy as np
import pytest

from rescorer.combine import Weights
from rescorer.mbr import (
    EXPECTED_ERRORS_SCORE,
    NO_PRUNING,
    POSTERIOR_SCORE,
    Pruning,
    choose,
    decode,
    default_scales,
    pairwise_errors,
    posteriors,
    rerank_posterior,
    search_scale,
)
from rescorer.nbest import Hypothesis, NBest, NBestList
from rescorer.normalize import NoiseWords

# One list whose posteriors at scale 1 are 0.4, 0.35 and 0.25 (the scores are their logs).
#   h1 "a b c"   h2 "a x c"   h3 "a x c d"
#   d(h1, h2) = 1 (b/x), d(h1, h3) = 2 (b/x, d inserted), d(h2, h3) = 1 (d inserted)
#   E1 = 0.35 * 1 + 0.25 * 2 = 0.85
#   E2 = 0.40 * 1 + 0.25 * 1 = 0.65   <- the least: h2, although h1 has the top score
#   E3 = 0.40 * 2 + 0.35 * 1 = 1.15
HYPS = ("a b c", "a x c", "a x c d")
PROBS = (0.4, 0.35, 0.25)


def make_set(hyps: tuple[str, ...] = HYPS, probs: tuple[float, ...] = PROBS) -> NBest:
    return NBest(
        [
            NBestList(
                "u1",
                tuple(
                    Hypothesis(tuple(h.split()), {"am": math.log(p)})
                    for h, p in zip(hyps, probs, strict=True)
                ),
            )
        ]
    )


AM = Weights({"am": 1.0})


def test_pairwise_errors_by_hand() -> None:
    d = pairwise_errors(make_set())["u1"]
    assert d.tolist() == [[0, 1, 2], [1, 0, 1], [2, 1, 0]]


def test_expected_errors_by_hand_pick_the_second_hypothesis() -> None:
    choice = decode(make_set(), AM, scale=1.0)["u1"]
    assert choice.posteriors == pytest.approx(PROBS)
    assert choice.expected_errors == pytest.approx((0.85, 0.65, 1.15))
    assert (choice.index, choice.top_index) == (1, 0)


def test_large_scale_gives_the_top_score_and_small_the_medoid() -> None:
    assert decode(make_set(), AM, scale=100.0)["u1"].index == 0
    # at scale 1e-9 the posteriors are flat: E = (3, 2, 3) / 3, h2 is the medoid
    choice = decode(make_set(), AM, scale=1e-9)["u1"]
    assert choice.expected_errors == pytest.approx((1.0, 2 / 3, 1.0))
    assert choice.index == 1


def test_scale_half_by_hand() -> None:
    # p ~ sqrt(0.4), sqrt(0.35), sqrt(0.25) = 0.63246, 0.59161, 0.5 (sum 1.72407)
    p = np.sqrt(PROBS) / np.sqrt(PROBS).sum()
    choice = decode(make_set(), AM, scale=0.5)["u1"]
    assert choice.posteriors == pytest.approx(tuple(p))
    assert choice.expected_errors == pytest.approx((p[1] + 2 * p[2], p[0] + p[2], 2 * p[0] + p[1]))
    assert choice.index == 1


def test_noise_words_and_ties_go_to_the_higher_score() -> None:
    # h3 "a x c <noise>" is h2 once the noise word goes: d(h2, h3) = 0, d(h1, h3) = 1, so
    # E1 = 0.35 + 0.25 = 0.6, E2 = E3 = 0.4: a tie, won by h2 (score log 0.35 > log 0.25).
    nbest = make_set(("a b c", "a x c", "a x c <noise>"))
    noise = NoiseWords(frozenset({"<noise>"}))
    assert pairwise_errors(nbest, noise)["u1"].tolist() == [[0, 1, 1], [1, 0, 0], [1, 0, 0]]
    choice = decode(nbest, AM, 1.0, noise)["u1"]
    assert choice.expected_errors == pytest.approx((0.6, 0.4, 0.4))
    assert choice.index == 1
    # the same tie with h3 first in score order goes to h3
    swapped = make_set(("a b c", "a x c <noise>", "a x c"))
    assert decode(swapped, AM, 1.0, noise)["u1"].index == 1


def test_rerank_posterior_orders_by_expected_errors() -> None:
    out = rerank_posterior(make_set(), AM, 1.0)["u1"]
    assert [h.text for h in out] == ["a x c", "a b c", "a x c d"]
    assert [h.scores[EXPECTED_ERRORS_SCORE] for h in out] == pytest.approx([0.65, 0.85, 1.15])
    assert [h.scores[POSTERIOR_SCORE] for h in out] == pytest.approx([0.35, 0.4, 0.25])
    assert [h.scores["total"] for h in out] == pytest.approx(
        [math.log(p) for p in (0.35, 0.4, 0.25)]
    )


def test_search_scale_counts_dev_errors_by_hand() -> None:
    # reference "a x c": h2 is right (0 errors), h1 has 1 error. Scales 0.5 and 1 choose h2
    # (0 errors), 100 chooses h1 (1 error, as the top score does); the largest tied scale wins.
    search = search_scale(make_set(), {"u1": ("a", "x", "c")}, AM, scales=(100.0, 0.5, 1.0))
    assert search.grid == ((0.5, 0), (1.0, 0), (100.0, 1))
    assert (search.scale, search.errors, search.top_errors, search.ref_words) == (1.0, 0, 1, 3)
    # counted with the noise word deleted: the reference "a x c <noise>" is the same one
    noisy = search_scale(
        make_set(),
        {"u1": ("a", "x", "c", "<noise>")},
        AM,
        scales=(1.0,),
        noise=NoiseWords(frozenset({"<noise>"})),
    )
    assert (noisy.errors, noisy.top_errors, noisy.ref_words) == (0, 1, 3)


def test_batched_choice_equals_one_list_at_a_time() -> None:
    rng = np.random.default_rng(0)
    words = ["a", "b", "c", "d"]
    lists = []
    for u in range(40):
        n = int(rng.integers(1, 7))
        hyps = tuple(
            Hypothesis(
                tuple(rng.choice(words, size=int(rng.integers(0, 5)))),
                {"am": float(rng.normal())},
            )
            for _ in range(n)
        )
        lists.append(NBestList(f"u{u}", hyps))
    nbest = NBest(lists)
    refs = {u: ("a", "b") for u in nbest}
    from rescorer.wer import hypothesis_errors

    errors = hypothesis_errors(nbest, refs)
    for scale in (0.3, 1.0, 4.0):
        one_by_one = sum(int(errors[u][c.index]) for u, c in decode(nbest, AM, scale).items())
        assert search_scale(nbest, refs, AM, scales=(scale,)).errors == one_by_one


def test_default_scales_follow_the_spread() -> None:
    scales = default_scales(
        {"u": np.array([0.0, 2.0]), "v": np.array([0.0, 4.0]), "w": np.zeros(3)}
    )
    # spreads (std) 1 and 2 (w has none): median 1.5, so 2^(k/2) / 1.5 for k = -8..20
    assert len(scales) == 29
    assert scales[8] == pytest.approx(1 / 1.5) and scales[0] == pytest.approx(1 / 24)
    assert default_scales({"u": np.zeros(2)}) == (1.0,)


def test_bad_values() -> None:
    with pytest.raises(ValueError, match="posterior scale must be a finite number > 0, got 0"):
        posteriors([0.0, 1.0], 0.0)
    with pytest.raises(ValueError, match=r"expected a \(2, 2\) distance matrix"):
        choose([0.0, 1.0], np.zeros((3, 3)), 1.0)
    bad = NBest(
        [NBestList("u1", (Hypothesis(("a",), {"am": 0.0}), Hypothesis(("b",), {"am": -math.inf})))]
    )
    with pytest.raises(ValueError, match="'u1': hypothesis 2 has combined score -inf"):
        decode(bad, AM, 1.0)
    assert choose([], np.zeros((0, 0)), 1.0).index == -1


def test_weights_keep_the_posterior_scale(tmp_path) -> None:  # type: ignore[no-untyped-def]
    w = Weights({"am": 1.0}, 0.5, {"x": 1}, 2.5)
    w.save(tmp_path / "w.json")
    assert Weights.load(tmp_path / "w.json") == w
    Weights({"am": 1.0}).save(tmp_path / "v.json")
    assert "posterior_scale" not in (tmp_path / "v.json").read_text()
    with pytest.raises(ValueError, match="posterior_scale must be a finite number > 0"):
        Weights({"am": 1.0}, posterior_scale=-1.0)


# -- long lists: pruning (issue 48) ------------------------------------------------------------


def random_set(seed: int, lists: int, n: int, words: str = "abcdef", spread: float = 1.0) -> NBest:
    """Lists of ``n`` hypotheses: a shared sentence with a few random edits each."""
    rng = np.random.default_rng(seed)
    vocab = list(words)
    out = []
    for u in range(lists):
        base = list(rng.choice(vocab, size=int(rng.integers(3, 12))))
        hyps = []
        for _ in range(n):
            h = list(base)
            for _ in range(int(rng.integers(0, 4))):
                pos = int(rng.integers(0, len(h) + 1))
                kind = int(rng.integers(3))
                if kind == 0 and pos < len(h):
                    h[pos] = str(rng.choice(vocab))
                elif kind == 1 and pos < len(h):
                    del h[pos]
                else:
                    h.insert(pos, str(rng.choice(vocab)))
            hyps.append(Hypothesis(tuple(h), {"am": float(spread * rng.normal())}))
        out.append(NBestList(f"u{u}", tuple(hyps)))
    return NBest(out)


def test_bit_parallel_distances_equal_the_wer_ones() -> None:
    from rescorer.mbr import ListDistances
    from rescorer.wer import edit_distance_batch

    rng = np.random.default_rng(3)
    # lengths 0..90: both sides over 64 words take the DP, one side over 64 the bit vectors
    seqs = [tuple(rng.choice(list("abcd"), size=int(rng.integers(0, 90)))) for _ in range(60)]
    dist = ListDistances(seqs, np.arange(len(seqs)))
    a, b = np.repeat(np.arange(60), 60), np.tile(np.arange(60), 60)
    want = edit_distance_batch([(seqs[i], seqs[j]) for i, j in zip(a, b, strict=True)])
    want = want[:, :3].sum(axis=1)
    assert dist.distances(a, b).tolist() == want.tolist()


def test_a_2000_list_computes_far_fewer_than_n_squared_pairs() -> None:
    from rescorer.mbr import DEFAULT_PRUNING, ListDistances, _pruned_choice, _ranked

    nbest = random_set(0, 1, 2000, spread=0.01)  # nearly flat posteriors: every reference kept
    t = np.array([h.scores["am"] for h in nbest["u0"]])
    dist = ListDistances([h.words for h in nbest["u0"]], _ranked(t))
    for scale in (0.01, 1.0, 100.0):
        _pruned_choice(t, dist, scale, DEFAULT_PRUNING)
    k, m, _ = DEFAULT_PRUNING.plan(np.sort(posteriors(t, 0.01))[::-1])
    assert (k, m) == (64, 2000)
    assert dist.pairs == 64 * 2000 < 2000 * 2000 / 30  # the block is computed once, kept
    assert dist.block.shape == (64, 2000)
    # peaked posteriors need a handful of references
    assert DEFAULT_PRUNING.plan(np.sort(posteriors(t, 1e4))[::-1])[1] < 20


def test_pruned_choices_equal_the_exact_ones_when_the_pruned_mass_is_tiny() -> None:
    nbest = random_set(1, 30, 60, spread=3.0)
    pruning = Pruning(exact_max=8, max_refs=40, max_candidates=10)
    exact = pairwise_errors(nbest)
    from rescorer.combine import total_scores

    totals = total_scores(nbest, AM)
    for scale in (2.0, 5.0, 20.0):
        pruned = decode(nbest, AM, scale, pruning=pruning)
        for u, c in pruned.items():
            assert c.candidates is not None and len(c.candidates) == 10
            want = choose(totals[u], exact[u], scale)
            e = np.asarray(want.expected_errors)
            # the bound holds, and a zero bound is an exact choice
            assert e[c.index] - e.min() <= c.excess_bound + 1e-9
            if c.excess_bound == 0:
                assert c.index == want.index
            k, m, q = pruning.plan(np.sort(posteriors(totals[u], scale))[::-1])
            if q < 1e-6 and m < 40:
                assert c.index == want.index
    # and the exact path when nothing is pruned
    assert {u: c.index for u, c in decode(nbest, AM, 1.0, pruning=NO_PRUNING).items()} == {
        u: c.index for u, c in decode(nbest, AM, 1.0, distances=exact).items()
    }


def test_pruned_bound_holds_on_heavily_pruned_lists() -> None:
    nbest = random_set(2, 20, 50, spread=0.5)
    pruning = Pruning(exact_max=4, max_refs=6, max_candidates=3)
    exact = pairwise_errors(nbest)
    from rescorer.combine import total_scores

    totals = total_scores(nbest, AM)
    for scale in (0.1, 1.0, 10.0):
        for u, c in decode(nbest, AM, scale, pruning=pruning).items():
            e = np.asarray(choose(totals[u], exact[u], scale).expected_errors)
            assert e[c.index] - e.min() <= c.excess_bound + 1e-9
            # candidates hold E against the references, the others lower bounds of E
            got = np.asarray(c.expected_errors)
            assert np.all(got <= e + 1e-9)


def test_search_scale_and_rerank_on_pruned_lists_follow_decode() -> None:
    nbest = random_set(4, 12, 40, spread=2.0)
    pruning = Pruning(exact_max=10, max_refs=30, max_candidates=8)
    refs = {u: nbest[u].hyps[0].words for u in nbest}
    from rescorer.wer import hypothesis_errors

    errors = hypothesis_errors(nbest, refs)
    scales = (0.3, 1.0, 4.0)
    search = search_scale(nbest, refs, AM, scales=scales, pruning=pruning)
    for scale, count in search.grid:
        picks = decode(nbest, AM, scale, pruning=pruning)
        assert count == sum(int(errors[u][c.index]) for u, c in picks.items())
    out = rerank_posterior(nbest, AM, 1.0, pruning=pruning)
    picks = decode(nbest, AM, 1.0, pruning=pruning)
    for u in nbest:
        assert out[u].hyps[0].words == nbest[u].hyps[picks[u].index].words
        assert sorted(h.words for h in out[u]) == sorted(h.words for h in nbest[u])


def test_default_pruning_leaves_30_best_lists_exact() -> None:
    nbest = random_set(5, 5, 30)
    for c in decode(nbest, AM, 1.0).values():
        assert c.candidates is None and c.excess_bound == 0.0
    with pytest.raises(ValueError, match="max_refs must be >= 1"):
        Pruning(max_refs=0)
