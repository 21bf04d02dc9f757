"""Words into a neural model's token ids: case mapping, ``<unk>`` for unknown words, OOV flags.

:class:`CaseMapping` is the case mapping of every word-level adapter over its own membership test;
:class:`WordVocab` adds ids for the adapters whose units are the words of a fixed vocabulary
(``torch:``, ``onnx:``, ``lbl:``): it holds the vocabulary (token ``i`` has id ``i``) and the case
mapping (``auto`` decides it from the first words it sees, see :func:`rescorer.text.choose_case`).
A word not in the vocabulary after the mapping gets the unknown id and is flagged by
:meth:`WordVocab.oov_flags`. :class:`SubwordVocab` is the same for a subword model (``torch:``
checkpoints with a tokenizer): a word is its pieces' ids, and no word is unknown. Pure Python:
no torch, no numpy beyond the flag arrays.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from rescorer.core.constants import BOS, EOS
from rescorer.text import CASE_MODES, case_function, choose_case

if TYPE_CHECKING:
    from rescorer.lm_models.tokenizer import SubwordTokenizer

# id of <unk> in the toolkit's vocabularies (rescorer.lm_models.vocab: <unk>=0, <s>=1, </s>=2)
UNK_ID = 0


class CaseMapping:
    """Words into a model's case, for any membership test ``known(token) -> bool``.

    ``case`` is ``auto``, ``none``, ``lower`` or ``upper`` (``auto``: decided from the first
    non-empty batch of words given to any method, by which mapping finds more known words).
    """

    def __init__(self, case: str, known: Callable[[str], bool]) -> None:
        if case not in CASE_MODES:
            raise ValueError(f"case must be one of {CASE_MODES}, got {case!r}")
        self.known = known
        self._case = case
        self._map: Callable[[str], str] | None = None if case == "auto" else case_function(case)

    @property
    def case(self) -> str:
        """The case mapping in use (``auto`` until the first words decided it)."""
        return self._case

    def mapping(self, sentences: Sequence[Sequence[str]]) -> Callable[[str], str]:
        """The word mapping, deciding ``auto`` from ``sentences`` on the first non-empty call."""
        if self._map is None:
            if not any(sentences):  # nothing to decide from: leave words alone for now
                return case_function("none")
            mode = choose_case((w for s in sentences for w in s), self.known)
            self._case = mode
            self._map = case_function(mode)
        return self._map

    def current(self) -> Callable[[str], str]:
        """The mapping decided so far (words left alone while ``auto`` is undecided)."""
        return self._map or case_function("none")

    def to_units(self, words: Sequence[str]) -> list[str]:
        """The model's tokens for ``words`` (case-mapped; no ``</s>``)."""
        fn = self.mapping([words])
        return [fn(w) for w in words]

    def oov_flags(self, sentences: Sequence[Sequence[str]]) -> list[np.ndarray]:
        """Per sentence, a bool per word: True where the mapped word is not known."""
        fn = self.mapping(sentences)
        known = self.known
        return [np.array([not known(fn(w)) for w in words], dtype=bool) for words in sentences]


class WordVocab(CaseMapping):
    """A model's vocabulary seen from the word side: case mapping, ids, OOV flags.

    ``tokens[i]`` is the token of id ``i``; ``case`` as for :class:`CaseMapping`.
    """

    def __init__(self, tokens: Sequence[str], case: str = "auto", unk_id: int = UNK_ID) -> None:
        self.tokens: tuple[str, ...] = tuple(tokens)
        self.index: dict[str, int] = {tok: i for i, tok in enumerate(self.tokens)}
        super().__init__(case, self.index.__contains__)
        if not 0 <= unk_id < len(self.tokens):
            raise ValueError(f"unk_id must be in [0, {len(self.tokens)}), got {unk_id}")
        self.unk_id = unk_id

    def __len__(self) -> int:
        return len(self.tokens)

    def ids(self, sentences: Sequence[Sequence[str]]) -> list[list[int]]:
        """Token ids of each sentence's words (unknown words: the unknown id; no <s>, </s>)."""
        fn = self.mapping(sentences)
        get, unk = self.index.get, self.unk_id
        return [[get(fn(w), unk) for w in words] for words in sentences]

    def token_ids(self, tokens: Sequence[str]) -> list[int]:
        """Ids of streaming tokens: words (case-mapped) or the literal ``<s>`` / ``</s>``."""
        fn = self.mapping([[t for t in tokens if t not in (BOS, EOS)]])
        get, unk = self.index.get, self.unk_id
        return [get(t if t in (BOS, EOS) else fn(t), unk) for t in tokens]

    def word_ids(self, sentences: Sequence[Sequence[str]]) -> list[list[tuple[int, ...]]]:
        """As :meth:`SubwordVocab.word_ids`: each word's one id, as a 1-tuple."""
        return [[(i,) for i in ids] for ids in self.ids(sentences)]

    def token_id_lists(self, tokens: Sequence[str]) -> list[tuple[int, ...]]:
        """As :meth:`SubwordVocab.token_id_lists`: each token's one id, as a 1-tuple."""
        return [(i,) for i in self.token_ids(tokens)]


class SubwordVocab(CaseMapping):
    """A subword model's units seen from the word side: each word cut into piece ids.

    ``tokenizer`` is the checkpoint's :class:`rescorer.lm_models.tokenizer.SubwordTokenizer` (piece
    ``i`` has id ``i``). Every word has pieces, so no word is out of vocabulary; ``case="auto"``
    picks the mapping under which more words are spelled by the tokenizer's own pieces (no bytes).
    """

    def __init__(self, tokenizer: SubwordTokenizer, case: str = "auto") -> None:
        self.tokenizer = tokenizer
        self.tokens: tuple[str, ...] = tuple(tokenizer.pieces)
        super().__init__(case, tokenizer.is_spelled)

    def __len__(self) -> int:
        return len(self.tokens)

    def word_ids(self, sentences: Sequence[Sequence[str]]) -> list[list[tuple[int, ...]]]:
        """Per sentence, the piece ids of each word (case-mapped; no <s>, </s>)."""
        fn = self.mapping(sentences)
        cut = self.tokenizer.word_ids
        return [[cut(fn(w)) for w in words] for words in sentences]

    def token_id_lists(self, tokens: Sequence[str]) -> list[tuple[int, ...]]:
        """Piece ids of streaming tokens: a word's pieces, or the literal ``<s>`` / ``</s>``."""
        fn = self.mapping([[t for t in tokens if t not in (BOS, EOS)]])
        specials = {BOS: (1,), EOS: (2,)}
        return [specials.get(t) or self.tokenizer.word_ids(fn(t)) for t in tokens]

    def oov_flags(self, sentences: Sequence[Sequence[str]]) -> list[np.ndarray]:
        """Per sentence, a bool per word: True only for a word cut into ``<unk>`` (a tokenizer
        without byte pieces meeting an unknown character); bytes spell any other."""
        return [
            np.array([UNK_ID in ids for ids in words], dtype=bool)
            for words in self.word_ids(sentences)
        ]
