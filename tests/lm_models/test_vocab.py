"""Vocabulary: fixed special ids, deterministic ordering, encoding, file round trip and errors."""

from __future__ import annotations

import pickle
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rescorer.core.errors import InputError
from rescorer.lm_models.vocab import (
    BOS,
    BOS_ID,
    EOS,
    EOS_ID,
    SPECIAL_TOKENS,
    UNK,
    UNK_ID,
    Vocabulary,
    build_vocabulary,
    counted_vocabulary,
)

SETTINGS = settings(
    max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow], database=None
)


def test_special_ids() -> None:
    assert (UNK, BOS, EOS) == ("<unk>", "<s>", "</s>") == SPECIAL_TOKENS
    assert (UNK_ID, BOS_ID, EOS_ID) == (0, 1, 2)
    v = Vocabulary.from_counts({})
    assert v.tokens == ["<unk>", "<s>", "</s>"]
    assert (v.unk_id, v.bos_id, v.eos_id) == (0, 1, 2)
    assert len(v) == 3


def test_order_by_count_then_token() -> None:
    v = Vocabulary.from_counts({"b": 2, "a": 2, "c": 5, "d": 1, "B": 2})
    assert v.tokens == ["<unk>", "<s>", "</s>", "c", "B", "a", "b", "d"]
    assert v.unigram_counts == (0, 0, 0, 5, 2, 2, 2, 1)
    # the same counts in another insertion order give the same vocabulary
    assert Vocabulary.from_counts({"d": 1, "B": 2, "c": 5, "a": 2, "b": 2}) == v


def test_min_count_and_max_size() -> None:
    counts = {"x": 10, "y": 3, "z": 3, "w": 1}
    v = Vocabulary.from_counts(counts, min_count=3)
    assert v.tokens[3:] == ["x", "y", "z"]
    assert v.unigram_counts is not None
    assert v.unigram_counts[UNK_ID] == 1  # w was left out
    v = Vocabulary.from_counts(counts, max_size=5)  # the 3 specials + 2 words
    assert v.tokens[3:] == ["x", "y"]
    assert v.unigram_counts == (4, 0, 0, 10, 3)
    assert Vocabulary.from_counts(counts, max_size=3).tokens == list(SPECIAL_TOKENS)
    with pytest.raises(ValueError, match="max_size"):
        Vocabulary.from_counts(counts, max_size=2)
    with pytest.raises(ValueError, match="min_count"):
        Vocabulary.from_counts(counts, min_count=0)


def test_special_counts_are_not_ranked() -> None:
    v = Vocabulary.from_counts({"<unk>": 7, "</s>": 4, "<s>": 1, "a": 2, "b": 1}, max_size=4)
    assert v.tokens == ["<unk>", "<s>", "</s>", "a"]
    assert v.unigram_counts == (8, 1, 4, 2)


def test_from_counts_rejects_bad_tokens() -> None:
    with pytest.raises(ValueError, match="whitespace"):
        Vocabulary.from_counts({"a b": 1})
    with pytest.raises(ValueError, match="empty"):
        Vocabulary.from_counts({"": 1})
    with pytest.raises(ValueError, match="negative"):
        Vocabulary.from_counts({"a": -1})


def test_build_vocabulary_counts_sentence_ends() -> None:
    sentences = [["the", "cat"], ["the", "dog", "the"], []]
    v = build_vocabulary(sentences)
    assert v.tokens == ["<unk>", "<s>", "</s>", "the", "cat", "dog"]
    assert v.unigram_counts == (0, 0, 3, 3, 1, 1)
    v = build_vocabulary(iter(sentences), max_size=4, min_count=1)
    assert v.tokens[3:] == ["the"]
    assert v.unigram_counts == (2, 0, 3, 3)
    with pytest.raises(TypeError, match="not strings"):
        build_vocabulary(["the cat"])
    # The same from the words' counts and the number of sentences (parts counted apart).
    words = {"the": 3, "cat": 1, "dog": 1}
    assert counted_vocabulary(words, 3) == build_vocabulary(sentences)
    assert counted_vocabulary(words, 3, 4).unigram_counts == (2, 0, 3, 3)
    with pytest.raises(ValueError, match="expected a number of sentences >= 0, got -1"):
        counted_vocabulary(words, -1)


def test_encode_decode_and_oov() -> None:
    v = build_vocabulary([["a", "b", "b"]])
    assert v.tokens == ["<unk>", "<s>", "</s>", "b", "a"]
    assert v.encode(["a", "zz", "b"]) == [4, 0, 3]
    assert v.encode_sentence(["a", "zz"]) == ([1, 4, 0], [4, 0, 2])
    assert v.encode_sentence([]) == ([1], [2])
    assert v.decode([1, 4, 0, 3, 2]) == ["<s>", "a", "<unk>", "b", "</s>"]
    assert v.oov_mask(["a", "zz", "<unk>", "B"]) == [False, True, False, True]
    assert "a" in v and "zz" not in v and "<s>" in v
    assert v.token_id("b") == 3 and v.token_id("nope") == UNK_ID
    assert v.token(4) == "a"
    with pytest.raises(IndexError):
        v.decode([5])
    with pytest.raises(IndexError):
        v.decode([-1])
    with pytest.raises(IndexError):
        v.token(99)
    assert list(v) == v.tokens


def test_immutable_and_picklable() -> None:
    v = build_vocabulary([["a"]])
    with pytest.raises(AttributeError):
        v._tokens = ()  # type: ignore[misc]
    with pytest.raises(AttributeError):
        v.foo = 1  # type: ignore[attr-defined]
    toks = v.tokens
    toks.append("zzz")
    assert "zzz" not in v and len(v) == 4
    assert pickle.loads(pickle.dumps(v)) == v
    assert hash(v) == hash(Vocabulary(v.tokens))
    assert v != Vocabulary(v.tokens)  # counts differ (None)
    assert "size=4" in repr(v)


@pytest.mark.parametrize(
    ("tokens", "counts", "match"),
    [
        (["<s>", "<unk>", "</s>"], None, "first three"),
        (["<unk>", "<s>"], None, "first three"),
        (["<unk>", "<s>", "</s>", "a", "a"], None, "duplicate"),
        (["<unk>", "<s>", "</s>", "a b"], None, "whitespace"),
        (["<unk>", "<s>", "</s>", ""], None, "empty"),
        (["<unk>", "<s>", "</s>"], [1, 2], "3 tokens"),
        (["<unk>", "<s>", "</s>"], [1, 2, -3], "non-negative"),
    ],
)
def test_constructor_rejects(tokens: list[str], counts: list[int] | None, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        Vocabulary(tokens, counts)


def test_save_load_round_trip(tmp_path: Path) -> None:
    v = build_vocabulary([["the", "cat", "sat"], ["the", "café", "isn't"]])
    path = tmp_path / "sub" / "vocab.txt"
    v.save(path)
    text = path.read_text(encoding="utf-8")
    assert text == "<unk>\n<s>\n</s>\nthe\ncafé\ncat\nisn't\nsat\n"
    loaded = Vocabulary.load(path)
    assert loaded.tokens == v.tokens
    assert loaded.unigram_counts is None
    v.save(path, with_counts=True)
    assert path.read_text(encoding="utf-8").splitlines()[:4] == [
        "<unk>\t0",
        "<s>\t0",
        "</s>\t2",
        "the\t2",
    ]
    assert Vocabulary.load(path) == v
    assert sorted(p.name for p in path.parent.iterdir()) == ["vocab.txt"]  # no temp files left
    with pytest.raises(ValueError, match="no unigram counts"):
        loaded.save(tmp_path / "x.txt", with_counts=True)


@pytest.mark.parametrize(
    ("text", "line", "match"),
    [
        ("<unk>\n<s>\n</s>\na\nb\na\n", 6, "duplicate token 'a' \\(first on line 4\\)"),
        ("<unk>\n<s>\n</s>\na\n\nb\n", 5, "empty line"),
        ("<unk>\n<s>\n</s>\n  \n", 4, "empty line"),
        ("<s>\n<unk>\n</s>\n", 1, "expected special token '<unk>' at id 0"),
        ("<unk>\n<s>\na\n", 3, "expected special token '</s>' at id 2"),
        ("<unk>\n<s>\n", 3, "missing </s>"),
        ("", 1, "missing <unk>, <s>, </s>"),
        ("<unk>\n<s>\n</s>\n<s>\n", 4, "duplicate token '<s>'"),
        ("<unk>\n<s>\n</s>\na b\n", 4, "whitespace"),
        ("<unk>\t0\n<s>\t0\n</s>\n", 3, "some lines have counts"),
        ("<unk>\t0\n<s>\t0\n</s>\tx\n", 3, "not an integer"),
        ("<unk>\t0\n<s>\t0\n</s>\t-1\n", 3, "negative"),
        ("<unk>\t0\t1\n", 1, "expected 'token'"),
    ],
)
def test_load_errors_name_file_and_line(tmp_path: Path, text: str, line: int, match: str) -> None:
    path = tmp_path / "vocab.txt"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(InputError, match=match) as info:
        Vocabulary.load(path)
    assert info.value.path == str(path)
    assert info.value.line == line
    assert str(info.value).startswith(f"{path}:{line}: ")


def test_load_missing_file(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="not found"):
        Vocabulary.load(tmp_path / "absent.txt")


TOKEN = st.text(
    st.characters(blacklist_categories=("Cs", "Zs", "Zl", "Zp", "Cc")), min_size=1, max_size=6
).filter(lambda t: not any(c.isspace() for c in t))


@SETTINGS
@given(
    counts=st.dictionaries(TOKEN, st.integers(0, 20), max_size=30),
    max_size=st.none() | st.integers(3, 40),
    min_count=st.integers(1, 5),
)
def test_property_round_trip_and_order(
    counts: dict[str, int], max_size: int | None, min_count: int
) -> None:
    v = Vocabulary.from_counts(counts, max_size=max_size, min_count=min_count)
    words = v.tokens[3:]
    assert v.tokens[:3] == list(SPECIAL_TOKENS)
    keys = [(-counts[w], w) for w in words]
    assert keys == sorted(keys)
    assert all(counts[w] >= min_count for w in words)
    assert max_size is None or len(v) <= max_size
    assert v.decode(v.encode(words)) == words
    assert v.unigram_counts is not None
    assert sum(v.unigram_counts) == sum(counts.values())
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "v.txt"
        v.save(path, with_counts=True)
        assert Vocabulary.load(path) == v
        v.save(path)
        assert Vocabulary.load(path).tokens == v.tokens
