"""Case mapping of words into a model's vocabulary."""

from __future__ import annotations

import pytest

from rescorer.text import case_function, choose_case


def test_choose_case() -> None:
    vocab = {"the", "cat", "sat"}
    assert choose_case(["THE", "CAT", "DOG"], vocab.__contains__) == "lower"
    assert choose_case(["the", "cat"], vocab.__contains__) == "none"
    assert choose_case(["The", "Cat"], {"THE", "CAT"}.__contains__) == "upper"
    assert choose_case([], vocab.__contains__) == "none"


def test_case_function() -> None:
    assert case_function("lower")("AbC") == "abc"
    with pytest.raises(ValueError, match="case mode must be one of"):
        case_function("auto")
