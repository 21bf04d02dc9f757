"""Factor extraction, factor vocabularies, and the unknown-factor strategies of section 6."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch

from rescorer.core.errors import InputError
from rescorer.lm_models.conllu import read_conllu
from rescorer.lm_models.fnlm.factors import (
    UNKNOWN,
    FactorEncoder,
    FactorSettings,
    FactorVocab,
    PlainWord,
    lowercase,
    needs_annotation,
    stem,
    unknown_vector,
    word_shape,
    words_of_conllu,
    words_of_tagged,
)
from tests.lm_models.test_conllu import GOOD


def test_shape() -> None:
    assert word_shape("Kennedy") == "title"
    assert word_shape("NATO") == "upper"
    assert word_shape("A") == "title"
    assert word_shape("iPhone") == "mixed"
    assert word_shape("e-mail") == "lower+hyphen"
    assert word_shape("1990") == "none+digit"
    assert word_shape("F-16") == "title+digit+hyphen"
    assert word_shape("U.S.") == "upper+punct"
    assert word_shape(",") == "none+punct"


def test_stemmers() -> None:
    assert stem("walking", "en") == "walk"
    assert stem("studies", "en") == "study"
    assert stem("sing", "en") == "sing"  # too short to strip
    assert stem("evlerinden", "tr") == "ev"  # ev-ler-in-den
    assert stem("kitaplar", "tr") == "kitap"
    assert stem("abcdefgh") == "abcde"  # other languages: 5-character prefix
    assert lowercase("İSTANBUL", "tr") == "istanbul"
    assert lowercase("ISPARTA", "tr") == "ısparta"


def test_plain_factors_of_plain_words() -> None:
    s = FactorSettings(("word", "lower", "stem", "suffix1", "suffix3", "shape"), language="en")
    assert s.extract(PlainWord("Walking")) == ("walking", "walking", "walk", "g", "ing", "title")
    assert s.extract(PlainWord("a")) == ("a", "a", "a", "a", "a", "lower")
    cased = FactorSettings(("word", "lower"), lower=False)
    assert cased.extract(PlainWord("Big")) == ("Big", "big")


def test_annotation_factors_unknown_for_plain_words() -> None:
    s = FactorSettings(("word", "lemma", "upos", "feats", "feat:Case"))
    assert s.extract(PlainWord("evde")) == ("evde", None, None, None, None)
    word = PlainWord("Evde", lemma="Ev", upos="NOUN", feats="Case=Loc|Number=Sing")
    assert s.extract(word) == ("evde", "ev", "NOUN", "Case=Loc|Number=Sing", "Loc")
    # A word without the feature, and "_" (unspecified): known values "_".
    assert s.extract(PlainWord("ve", lemma="_", upos="CCONJ", feats="_"))[1:] == (
        "_",
        "CCONJ",
        "_",
        "_",
    )
    assert needs_annotation("lemma") and needs_annotation("feat:Case")
    assert not needs_annotation("suffix2")
    with pytest.raises(ValueError, match="unknown factor 'pos'"):
        FactorSettings(("word", "pos"))
    with pytest.raises(ValueError, match="unknown factor None"):  # null in a JSON config
        FactorSettings(("word", None))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="distinct"):
        FactorSettings(("word", "word"))


def test_conllu_units(tmp_path: Path) -> None:
    path = tmp_path / "x.conllu"
    path.write_text(GOOD, encoding="utf-8")
    s1 = read_conllu(path)[0]
    words = words_of_conllu(s1, "word")
    assert [w.form for w in words] == ["Open", "the", "page", "'s", "menu", "."]
    tokens = words_of_conllu(s1, "token")
    assert [w.form for w in tokens] == ["Open", "the", "page's", "menu", "."]
    mwt = tokens[2]
    assert (mwt.lemma, mwt.upos, mwt.xpos, mwt.feats) == (
        "page+'s",
        "NOUN+PART",
        "SG+GEN",
        "Number=Sing+_",
    )
    settings = FactorSettings(("word", "upos", "feat:Number"))
    assert settings.extract(mwt) == ("page's", "NOUN+PART", "Sing")
    with pytest.raises(ValueError, match="unit"):
        words_of_conllu(s1, "syllable")


def test_tagged_words() -> None:
    (w,) = words_of_tagged([("Fulton", "np-tl")])
    assert FactorSettings(("word", "xpos")).extract(w) == ("fulton", "np-tl")


def test_factor_vocab_order_and_round_trip(tmp_path: Path) -> None:
    vocab = FactorVocab.build("lemma", Counter({"b": 2, "a": 2, "c": 5, "d": 1}), start_count=3)
    assert vocab.values == ("<s>", "c", "a", "b", "d")  # count desc, ties by value
    assert vocab.counts == (3, 5, 2, 2, 1)
    assert vocab.id("a") == 2 and vocab.id("zzz") == UNKNOWN and vocab.id(None) == UNKNOWN
    frequent = FactorVocab.build("lemma", Counter({"b": 2, "a": 2, "c": 5, "d": 1}), min_count=2)
    assert frequent.values == ("<s>", "c", "a", "b") and frequent.id("d") == UNKNOWN
    vocab.save(tmp_path / "f.txt")
    assert FactorVocab.load(tmp_path / "f.txt", "lemma") == vocab
    (tmp_path / "bad.txt").write_text("<s>\t1\nx\tmany\n", encoding="utf-8")
    with pytest.raises(InputError, match="bad.txt:2: count is not an integer"):
        FactorVocab.load(tmp_path / "bad.txt", "lemma")


def test_encoder_marks_unknown_values() -> None:
    settings = FactorSettings(("word", "suffix2"))
    train = [[PlainWord("evde"), PlainWord("okulda")], [PlainWord("evde")]]
    enc = FactorEncoder.fit(settings, train)
    assert enc.vocabs[0].values == ("<s>", "evde", "okulda")
    assert enc.vocabs[1].counts[0] == 2  # <s>: one per sentence
    ids = enc.encode([PlainWord("Evde"), PlainWord("kitapta"), PlainWord("masada")])
    # "kitapta": unknown word, and its suffix "ta" was not seen either; "masada": unknown word
    # with the known suffix "da" (used as is, section 6).
    assert ids.tolist() == [[1, 1], [UNKNOWN, UNKNOWN], [UNKNOWN, enc.vocabs[1].id("da")]]


# A table of 10 known values in descending frequency: row i is (i, 10 * i).
TABLE = torch.tensor([[float(i), 10.0 * i] for i in range(10)])


def test_unknown_strategies_on_a_constructed_table() -> None:
    assert unknown_vector(TABLE, "null").tolist() == [0.0, 0.0]
    # ALL: mean of 0..9 = 4.5
    assert unknown_vector(TABLE, "all").tolist() == [4.5, 45.0]
    # TAIL: the least frequent 10 % = ceil(1.0) = 1 row, the last one
    assert unknown_vector(TABLE, "tail").tolist() == [9.0, 90.0]
    # with 30 %: the last 3 rows, mean of 7, 8, 9 = 8
    assert unknown_vector(TABLE, "tail", tail_fraction=0.3).tolist() == [8.0, 80.0]
    # 25 % of 10 rows -> ceil(2.5) = 3 rows as well
    assert unknown_vector(TABLE, "tail", tail_fraction=0.25).tolist() == [8.0, 80.0]
    # LEAST: the single least frequent value
    assert unknown_vector(TABLE, "least").tolist() == [9.0, 90.0]
    with pytest.raises(ValueError, match="strategy must be one of"):
        unknown_vector(TABLE, "random")


def test_tail_of_a_larger_table() -> None:
    table = torch.arange(25, dtype=torch.float32)[:, None]
    # 10 % of 25 -> 3 rows: 22, 23, 24 -> 23
    assert unknown_vector(table, "tail").item() == pytest.approx(23.0)
    assert np.isclose(unknown_vector(table, "all").item(), 12.0)
