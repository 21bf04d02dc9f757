"""Text normalisation for scoring: steps, the english and librispeech presets, specs, N-best."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rescorer.nbest import Hypothesis, NBest, NBestList
from rescorer.normalize import (
    get_normalizer,
    librispeech_normalise,
    parse_spec,
    remove_bracketed,
    strip_punctuation,
)


def norm(spec: str, text: str) -> str:
    return get_normalizer(spec).text(text)


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


def test_none_is_the_identity() -> None:
    n = get_normalizer("none")
    assert n.is_identity and n.name == "none"
    words = ("Hello,", "World", "-")
    assert n.words(words) == words


@pytest.mark.parametrize(
    ("spec", "text", "expected"),
    [
        ("lower", "Hello, World!", "hello, world!"),
        ("upper", "don't stop", "DON'T STOP"),
        ("hyphen", "well-known --  A\u2014B", "well known A B"),
        ("punct", "Hello, World! U.S. well-known", "Hello World US wellknown"),
        # apostrophes: kept inside a word (curly ones written '), dropped at its edges
        ("punct", "'tis don\u2019t o'clock students' ' rock'n'roll",
         "tis don't o'clock students rock'n'roll"),
        ("punct", "$5 50% a+b <unk> [noise] -- .", "5 50 ab unk noise"),
        # steps run in a fixed order whatever the order given: hyphens split before punct
        ("punct,hyphen", "well-known, Co-Op.", "well known Co Op"),
        ("upper,punct,hyphen", "well-known, co-op.", "WELL KNOWN CO OP"),
    ],
)  # fmt: skip
def test_steps(spec: str, text: str, expected: str) -> None:
    assert norm(spec, text) == expected


def test_canonical_names_and_bad_specs() -> None:
    assert get_normalizer("punct,lower,hyphen").name == "hyphen,punct,lower"
    assert get_normalizer(" lower , punct").name == "punct,lower"
    assert parse_spec("english") == ("english",)
    for spec, fragment in [
        ("lowercase", "unknown text normaliser 'lowercase'"),
        ("", "an empty spec"),
        ("lower,lower", "names a step twice"),
        ("english,lower", "stand alone"),
        ("none,punct", "stand alone"),
        ("lower,upper", "lower or upper, not both"),
    ]:
        with pytest.raises(ValueError, match="expected none|twice|alone|not both") as info:
            get_normalizer(spec)
        assert fragment in str(info.value)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Hello, World!", "hello world"),
        ("[LAUGHTER] well (inaudible (really)) I'm here", "well i am here"),
        ("I won't, can't; they're we've he'll she'd y'all let's",
         "i will not can not they are we have he will she would you all let us"),
        ("We're gonna DON'T isn't couldn't ain't", "we are going to do not is not could not ain't"),
        ("John's dog's bone", "john's dog's bone"),  # 's stays
        ("Mr. Smith and Dr. Jones met St. John, Jr.",
         "mister smith and doctor jones met saint john junior"),
        ("Uh, um, hmm... mhm the twenty-one", "the twenty one"),
        ("Café Élan Æsir naïve straße", "cafe elan aesir naive strasse"),
        ("3.5 1,000 $20. 50% AT&T", "3.5 1000 20 50 percent at and t"),
        ("\u201cQuoted\u201d \u2014 dash-ed", "quoted dash ed"),
    ],
)  # fmt: skip
def test_english(text: str, expected: str) -> None:
    assert norm("english", text) == expected


def test_english_and_librispeech_are_idempotent_on_examples() -> None:
    text = "[noise] Mr. O'Brien's well-known café won't, uh, cost 3.5% -- 'tis 1,000 (sic)"
    for spec in ("english", "librispeech", "hyphen,punct,lower"):
        once = norm(spec, text)
        assert norm(spec, once) == once, spec


def test_remove_bracketed_nested() -> None:
    assert remove_bracketed("a [b [c] d] e (f (g)) h").split() == ["a", "e", "h"]
    assert remove_bracketed("a [b c").split() == ["a", "[b", "c"]  # unbalanced: left alone


def test_strip_punctuation_numbers() -> None:
    assert strip_punctuation("3.5.", keep_in_numbers=".") == "3.5"
    assert strip_punctuation("3.5.") == "35"
    assert strip_punctuation("a.b", keep_in_numbers=".") == "ab"


@settings(max_examples=200, deadline=None, database=None)
@given(st.text(max_size=40))
def test_librispeech_word_by_word_equals_the_line_function(text: str) -> None:
    assert norm("librispeech", text).split() == librispeech_normalise(text)


def test_librispeech_preset_on_book_text(data_dir: Path) -> None:
    """The cached word-by-word preset gives what the recipe's line function gives, on a novel."""
    book = data_dir / "corpora" / "gutenberg" / "Dickens_Bleak_1853.txt"
    lines = book.read_text(encoding="utf-8-sig").splitlines()[:3000]
    preset = get_normalizer("librispeech")
    changed = 0
    for line in lines:
        expected = librispeech_normalise(line)
        assert list(preset.words(line.split())) == expected, line
        changed += expected != line.split()
    assert changed > 2000  # mixed case and punctuation: the test is not vacuous


def test_nbest_hypotheses_and_references() -> None:
    nb = NBest(
        [
            NBestList(
                "u1",
                (
                    Hypothesis(("Hello,", "World"), {"am": -1.0}, ("▁Hello", ",", "▁World")),
                    Hypothesis(("hello",), {"am": -2.0}, ("▁hello",)),
                ),
            )
        ],
        references={"u1": ("HELLO", "world!")},
    )
    out = get_normalizer("punct,lower").nbest(nb)
    first, second = out["u1"]
    assert first.words == ("hello", "world") and dict(first.scores) == {"am": -1.0}
    assert first.tokens is None  # the words changed: the pieces no longer spell them
    assert second.tokens == ("▁hello",)  # unchanged words keep their pieces
    assert out.references == {"u1": ("hello", "world")}
    assert get_normalizer("none").nbest(nb) is nb
    assert get_normalizer("lower").mapping({"a": ("X", "Y")}) == {"a": ("x", "y")}


# -- noise words ------------------------------------------------------------------------------


def test_noise_words_strip_both_sides_and_keep_scores(tmp_path: Path) -> None:
    from rescorer.normalize import NO_NOISE, read_noise_words

    path = tmp_path / "noise.txt"
    path.write_text("\n<noise>\n  [laugh]  \n<noise>\n", encoding="utf-8")
    noise = read_noise_words(path)
    assert noise.words == frozenset({"<noise>", "[laugh]"})
    assert noise.label() == f" (noise words: {path})" and NO_NOISE.label() == ""
    assert noise.strip(("a", "<noise>", "b", "[laugh]")) == ("a", "b")
    assert noise.strip(("<NOISE>",)) == ("<NOISE>",)  # matched exactly
    assert noise.mapping({"u": ("[laugh]",)}) == {"u": ()}
    nbest = NBest(
        [
            NBestList(
                "u",
                (
                    Hypothesis(("a", "<noise>"), {"am": -1.0}, ("▁a", "<noise>")),
                    Hypothesis(("a",), {"am": -2.0}, ("▁a",)),
                ),
            )
        ],
        {"u": ("<noise>", "a")},
    )
    out = noise.nbest(nbest)
    assert [h.words for h in out["u"]] == [("a",), ("a",)]
    assert [dict(h.scores) for h in out["u"]] == [{"am": -1.0}, {"am": -2.0}]
    assert [h.tokens for h in out["u"]] == [None, ("▁a",)]  # tokens kept where words are
    assert out.references == {"u": ("a",)}
    assert NO_NOISE.nbest(nbest) is nbest


def test_noise_words_file_with_two_words_on_a_line(tmp_path: Path) -> None:
    from rescorer.core.errors import InputError
    from rescorer.normalize import read_noise_words

    path = tmp_path / "noise.txt"
    path.write_text("<noise>\n\n[laugh] [cough]\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"noise.txt:3: expected one noise word per line, got 2"):
        read_noise_words(path)
    (tmp_path / "empty.txt").write_text("\n", encoding="utf-8")
    assert read_noise_words(tmp_path / "empty.txt").is_empty
