"""Text normalisation: LibriSpeech style and case mapping."""

from __future__ import annotations

import pytest

from rescorer.text import case_function, choose_case, librispeech_normalise


def test_librispeech_normalise() -> None:
    line = "\u201cDon\u2019t,\u201d said Mr. \u00c9lan\u2014the well-known 'Smith's' dog."
    assert librispeech_normalise(line) == [
        "DON'T",
        "SAID",
        "MISTER",
        "ELAN",
        "THE",
        "WELL",
        "KNOWN",
        "SMITH'S",
        "DOG",
    ]
    assert librispeech_normalise("Mrs. Dr Jones, 1853!") == ["MISSUS", "DOCTOR", "JONES"]
    assert librispeech_normalise("  ' -- ") == []


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
