"""Log-linear combination, reranking and the weights file."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from rescorer.combine import Weights, feature_matrix, one_best, rerank, total_scores
from rescorer.core.errors import InputError
from rescorer.nbest import Hypothesis, NBest, NBestList


def small() -> NBest:
    return NBest(
        [
            NBestList(
                "u1",
                [
                    Hypothesis(("a", "b"), {"am": -1.0, "lm": -9.0}),
                    Hypothesis(("a", "b", "c"), {"am": -2.0, "lm": -5.0}),
                    Hypothesis((), {"am": -7.0, "lm": -1.0}),
                ],
            ),
            NBestList("u2", [Hypothesis(("x",), {"am": -1.0, "lm": -1.0})]),
            NBestList("u3", []),
        ]
    )


def test_totals_by_hand() -> None:
    w = Weights({"am": 1.0, "lm": 0.5}, length=2.0)
    t = total_scores(small(), w)
    np.testing.assert_allclose(t["u1"], [-1 - 4.5 + 4, -2 - 2.5 + 6, -7 - 0.5 + 0])
    np.testing.assert_allclose(t["u2"], [-1 - 0.5 + 2])
    assert t["u3"].shape == (0,)
    m = feature_matrix(small()["u1"], ["lm", "am"])
    np.testing.assert_array_equal(m[:, -1], [2, 3, 0])
    np.testing.assert_array_equal(m[0, :2], [-9, -1])


def test_rerank_sorts_stably_and_adds_total() -> None:
    w = Weights({"am": 1.0, "lm": 0.5}, length=2.0)  # u1 totals: -1.5, 1.5, -7.5
    out = rerank(small(), w)
    assert [h.words for h in out["u1"]] == [("a", "b", "c"), ("a", "b"), ()]
    assert out["u1"][0].scores["total"] == pytest.approx(1.5)
    assert one_best(small(), w) == {"u1": ("a", "b", "c"), "u2": ("x",), "u3": ()}
    assert one_best(small()) == {"u1": ("a", "b"), "u2": ("x",), "u3": ()}
    # A tie keeps the first-pass order.
    tie = Weights({"am": 0.0, "lm": 0.0})
    assert [h.words for h in rerank(small(), tie)["u1"]] == [("a", "b"), ("a", "b", "c"), ()]


def test_missing_feature_names_what_is_available() -> None:
    with pytest.raises(ValueError, match=r"\['ngram'\].*available: \['am', 'lm'\]"):
        total_scores(small(), Weights({"am": 1.0, "ngram": 1.0}))


def test_weights_round_trip_and_validation(tmp_path: Path) -> None:
    w = Weights({"am": 1.0, "lm": 0.25}, -0.5, meta={"dev_errors": 3})
    path = tmp_path / "w.json"
    w.save(path)
    back = Weights.load(path)
    assert back.features == {"am": 1.0, "lm": 0.25} and back.length == -0.5
    assert back.meta["dev_errors"] == 3
    with pytest.raises(ValueError, match="finite"):
        Weights({"am": float("nan")})
    with pytest.raises(ValueError, match="at least one"):
        Weights({})
    with pytest.raises(ValueError, match="word-count feature"):
        Weights({"length": 1.0})


@pytest.mark.parametrize(
    ("content", "match"),
    [
        ("not json", "w.json:1: invalid JSON"),
        ('{"features": {"am": 1}}', '"format": "rescorer-weights"'),
        ('{"format": "rescorer-weights", "version": 9, "features": {"am": 1}}', "version 9"),
        ('{"format": "rescorer-weights", "version": 1, "features": {"am": "x"}}', "got a string"),
        ('{"format": "rescorer-weights", "version": 1, "features": {}}', "at least one"),
        # a lone surrogate, refused here as every other reader refuses it
        (
            '{"format": "rescorer-weights", "version": 1, "features": {"\\ud800x": 1}}',
            "lone surrogate",
        ),
        ('{"format": "rescorer-weights", "version": 1, "features": {"total": 1}}', "reserved"),
    ],
)
def test_bad_weights_files(tmp_path: Path, content: str, match: str) -> None:
    path = tmp_path / "w.json"
    path.write_text(content)
    with pytest.raises(InputError, match=match) as info:
        Weights.load(path)
    assert str(path) in str(info.value)


def test_weights_file_is_json_with_format(tmp_path: Path) -> None:
    path = tmp_path / "w.json"
    Weights({"am": 1.0}).save(path)
    data = json.loads(path.read_text())
    assert data["format"] == "rescorer-weights" and data["version"] == 1
