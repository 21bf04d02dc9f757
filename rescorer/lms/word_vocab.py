"""Words into a neural model's token ids: case mapping, ``<unk>`` for unknown words, OOV flags.

Shared by every model adapter whose units are the words of a fixed vocabulary (``torch:`` and
``onnx:`` models): :class:`WordVocab` holds the vocabulary (token ``i`` has id ``i``) and the case
mapping (``auto`` decides it from the first words it sees, see :func:`rescorer.text.choose_case`).
A word not in the vocabulary after the mapping gets the unknown id and is flagged by
:meth:`WordVocab.oov_flags`. Pure Python: no torch, no numpy beyond the flag arrays.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from rescorer.core.constants import BOS, EOS
from rescorer.text import CASE_MODES, case_function, choose_case

UNK_ID = 0  # id of <unk> in the toolkit's vocabularies (lm_models.vocab: <unk>=0, <s>=1, </s>=2)


class WordVocab:
    """A model's vocabulary seen from the word side.

    ``tokens[i]`` is the token of id ``i``; ``case`` is ``auto``, ``none``, ``lower`` or ``upper``
    (``auto``: decided from the first non-empty batch of words given to any method).
    """

    def __init__(self, tokens: Sequence[str], case: str = "auto", unk_id: int = UNK_ID) -> None:
        if case not in CASE_MODES:
            raise ValueError(f"case must be one of {CASE_MODES}, got {case!r}")
        self.tokens: tuple[str, ...] = tuple(tokens)
        if not 0 <= unk_id < len(self.tokens):
            raise ValueError(f"unk_id must be in [0, {len(self.tokens)}), got {unk_id}")
        self.unk_id = unk_id
        self.index: dict[str, int] = {tok: i for i, tok in enumerate(self.tokens)}
        self._case = case
        self._map: Callable[[str], str] | None = None if case == "auto" else case_function(case)

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def case(self) -> str:
        """The case mapping in use (``auto`` until the first words decided it)."""
        return self._case

    def mapping(self, sentences: Sequence[Sequence[str]]) -> Callable[[str], str]:
        """The word mapping, deciding ``auto`` from ``sentences`` on the first non-empty call."""
        if self._map is None:
            if not any(sentences):  # nothing to decide from: leave words alone for now
                return case_function("none")
            mode = choose_case((w for s in sentences for w in s), self.index.__contains__)
            self._case = mode
            self._map = case_function(mode)
        return self._map

    def to_units(self, words: Sequence[str]) -> list[str]:
        """The model's tokens for ``words`` (case-mapped; no ``</s>``)."""
        fn = self.mapping([words])
        return [fn(w) for w in words]

    def ids(self, sentences: Sequence[Sequence[str]]) -> list[list[int]]:
        """Token ids of each sentence's words (unknown words: the unknown id; no <s>, </s>)."""
        fn = self.mapping(sentences)
        get, unk = self.index.get, self.unk_id
        return [[get(fn(w), unk) for w in words] for words in sentences]

    def oov_flags(self, sentences: Sequence[Sequence[str]]) -> list[np.ndarray]:
        """Per sentence, a bool per word: True where the word is not in the vocabulary."""
        fn = self.mapping(sentences)
        index = self.index
        return [np.array([fn(w) not in index for w in words], dtype=bool) for words in sentences]

    def token_ids(self, tokens: Sequence[str]) -> list[int]:
        """Ids of streaming tokens: words (case-mapped) or the literal ``<s>`` / ``</s>``."""
        fn = self.mapping([[t for t in tokens if t not in (BOS, EOS)]])
        get, unk = self.index.get, self.unk_id
        return [get(t if t in (BOS, EOS) else fn(t), unk) for t in tokens]
