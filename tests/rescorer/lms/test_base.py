"""The adapters' shared base: case mapping, OOV flags, checks, sums, repr and the loader."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rescorer.lms.base import WordLM, check_advance, checkpoint_folder, loader, positive
from rescorer.lms.contract import Context, LanguageModel, LMSpec
from rescorer.lms.word_vocab import CaseMapping, WordVocab

KNOWN = {"THE", "CAT", "SAT"}


class Toy(WordLM):
    """Every known word has log-prob -1, every other -5, </s> -2."""

    def __init__(self, path: str | Path, name: str | None = None, case: str = "auto", **kw: Any):
        self.words = CaseMapping(case, KNOWN.__contains__)
        self.path = checkpoint_folder(path, "Toy")
        self.name = name or self.path.name
        self.options = kw

    def token_logprobs(
        self, sentences: Sequence[Sequence[str]], contexts: Sequence[Context | None] | None = None
    ) -> list[np.ndarray]:
        fn = self.words.mapping(sentences)
        return [np.array([-1.0 if fn(w) in KNOWN else -5.0 for w in s] + [-2.0]) for s in sentences]

    def start(self, context: Context | None = None) -> tuple[str, ...]:
        return ()

    def advance(self, states: Sequence[Any], tokens: Sequence[str]) -> tuple[np.ndarray, list]:
        if check_advance(states, tokens):
            return np.zeros(0), []
        return np.full(len(tokens), -1.0), [(*s, t) for s, t in zip(states, tokens, strict=True)]

    def describe(self) -> dict[str, Any]:
        return {"known": len(KNOWN), "case": self.case}


def test_auto_case_follows_the_vocabulary_and_oov_flags(tmp_path: Path) -> None:
    lm = Toy(tmp_path)
    assert isinstance(lm, LanguageModel) and lm.units == "word" and lm.case == "auto"
    flags = lm.oov_flags([["the", "dog", "sat"], []])
    assert lm.case == "upper"  # upper case finds the words
    assert [f.tolist() for f in flags] == [[False, True, False], []]
    assert lm.to_units(["cat", "Dog"]) == ["CAT", "DOG"]


def test_an_empty_first_batch_leaves_auto_undecided(tmp_path: Path) -> None:
    lm = Toy(tmp_path)
    assert [f.tolist() for f in lm.oov_flags([[]])] == [[]]
    assert lm.case == "auto"
    lm.oov_flags([["cat"]])
    assert lm.case == "upper"


def test_sentence_logprobs_are_the_token_sums(tmp_path: Path) -> None:
    lm = Toy(tmp_path, case="upper")
    sentences = [["the", "cat"], ["a", "dog", "sat"], []]
    sums = [lp.sum() for lp in lm.token_logprobs(sentences)]
    np.testing.assert_array_equal(lm.sentence_logprobs(sentences), sums)
    assert list(sums) == [-4.0, -13.0, -2.0]


def test_checks_name_what_is_wrong(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="case must be one of"):
        Toy(tmp_path, case="title")
    with pytest.raises(ValueError, match="Toy checkpoint folder not found: .*nowhere"):
        Toy(tmp_path / "nowhere")
    with pytest.raises(ValueError, match="batch_size must be >= 1, got 0"):
        positive("batch_size", 0)
    assert positive("batch_size", 3) == 3
    lm = Toy(tmp_path)
    with pytest.raises(ValueError, match="got 2 states but 1 tokens"):
        lm.advance([(), ()], ["cat"])
    assert lm.advance([], [])[1] == []


def test_repr_and_loader(tmp_path: Path) -> None:
    lm = Toy(tmp_path, case="lower")
    assert repr(lm) == f"Toy({str(tmp_path)!r}, known=3, case='lower')"
    load = loader(Toy, "device")
    spec = LMSpec("mine", "toy", tmp_path)
    got = load(spec, {"case": "upper", "device": "cpu", "unrelated": 1})
    assert got.name == "mine" and got.case == "upper" and got.options == {"device": "cpu"}
    assert load(spec, {}).case == "auto" and load(spec, {}).options == {}
    assert "options: case, device" in (load.__doc__ or "")


def test_word_vocab_is_a_case_mapping_with_ids() -> None:
    vocab = WordVocab(["<unk>", "<s>", "</s>", "the", "cat"], case="auto")
    assert isinstance(vocab, CaseMapping)
    assert vocab.ids([["THE", "Cat", "dog"]]) == [[3, 4, 0]]
    assert vocab.case == "lower"
    assert vocab.token_ids(["</s>", "CAT"]) == [2, 4]
