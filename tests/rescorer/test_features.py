"""The lists' order as a feature (``rank``, rescorer/features.py); the LM features are tested
with their models (tests/rescorer/lms/) and through the CLI."""

from __future__ import annotations

import math

import pytest

from rescorer.core.constants import RANK_FEATURE
from rescorer.features import add_rank_feature, rank_values
from rescorer.nbest import Hypothesis, NBest, NBestList


def test_rank_values() -> None:
    assert rank_values(0) == []
    assert rank_values(4) == pytest.approx([0.0, -math.log(2), -math.log(3), -math.log(4)])
    values = rank_values(30)
    assert all(a > b for a, b in zip(values, values[1:], strict=False))  # strictly by position
    assert values[-1] == pytest.approx(-3.401, abs=1e-3)  # -log(30)


def test_add_rank_feature_follows_the_order_as_read() -> None:
    nbest = NBest(
        [
            NBestList("u1", (Hypothesis(("a",)), Hypothesis(("b",)), Hypothesis(("c",)))),
            NBestList("u2", ()),
            NBestList("u3", (Hypothesis(("d",), {"lm": -1.0}),)),
        ],
        {"u1": ("a",), "u2": (), "u3": ("d",)},
    )
    ranked = add_rank_feature(nbest)
    assert [h.scores[RANK_FEATURE] for h in ranked["u1"]] == rank_values(3)
    assert ranked["u3"][0].scores == {"lm": -1.0, RANK_FEATURE: 0.0}
    assert len(ranked["u2"]) == 0 and ranked.references == nbest.references
    with pytest.raises(ValueError, match="already hold a score named 'rank'"):
        add_rank_feature(ranked)


def test_nbest_head() -> None:
    nbest = NBest([NBestList("u", tuple(Hypothesis((w,)) for w in "abc"))])
    assert [h.words for h in nbest.head(2)["u"]] == [("a",), ("b",)]
    assert nbest.head(5)["u"] is nbest["u"]
    with pytest.raises(ValueError, match="at least 1"):
        nbest.head(0)
