"""The LanguageModel contract: what the rescorer needs from any model, and how models are named.

Every model the rescorer uses (n-gram, torch, onnx, ...) satisfies :class:`LanguageModel`, so
scoring never branches on the model type. All log-probabilities are natural logs.

A model is named on the command line by a spec ``KIND:PATH`` (``kenlm:4gram.bin``), optionally
prefixed by a feature name (``ngram=kenlm:4gram.bin``): :class:`LMSpec`. The kinds and their
loaders are in :data:`rescorer.lms.LOADERS`; this module imports no adapter.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from rescorer.core.constants import RESERVED_FEATURES

if TYPE_CHECKING:  # the contract is imported by every command's options: numpy stays lazy
    import numpy as np

logger = logging.getLogger(__name__)

Context = Mapping[str, Any]
"""A context record of named fields, e.g. ``{"genre": "news", "speaker": "1272"}``."""


@runtime_checkable
class LanguageModel(Protocol):
    """What the rescorer needs from a language model.

    ``token_logprobs`` returns, for each sentence (a sequence of *words*), the natural-log
    probability of each of the model's tokens, ending with the end-of-sentence token. Word models
    return ``len(words) + 1`` values; subword or character models return one value per unit.
    """

    name: str
    units: str  # "word" | "subword" | "char"

    def token_logprobs(
        self,
        sentences: Sequence[Sequence[str]],
        contexts: Sequence[Context | None] | None = None,
    ) -> list[np.ndarray]: ...

    def sentence_logprobs(
        self,
        sentences: Sequence[Sequence[str]],
        contexts: Sequence[Context | None] | None = None,
    ) -> np.ndarray:
        """Natural-log probability of each whole sentence, end-of-sentence included.

        Equal to the sums of :meth:`token_logprobs` up to the model's arithmetic precision; a
        model may compute it faster than the per-token values (rescoring needs only these).
        """
        ...

    def oov_flags(self, sentences: Sequence[Sequence[str]]) -> list[np.ndarray]:
        """Per sentence, a bool per word: True where the model scores it as unknown."""
        ...

    def start(self, context: Context | None = None) -> Any:
        """The state at the start of a sentence."""
        ...

    def advance(self, states: Sequence[Any], tokens: Sequence[str]) -> tuple[np.ndarray, list]:
        """Score ``tokens[i]`` after ``states[i]``: natural-log probs and the next states."""
        ...


@dataclass(frozen=True)
class LMSpec:
    """A parsed model spec ``[NAME=]KIND:PATH``."""

    # Feature name under which the model's scores appear (defaults to the file stem).
    name: str
    # Model kind, a key of LOADERS.
    kind: str
    # Path to the model file or folder.
    path: Path

    @classmethod
    def parse(cls, spec: str, kinds: Collection[str] | None = None) -> LMSpec:
        """Parse ``[NAME=]KIND:PATH``; with ``kinds``, a kind outside them is an error."""
        name = None
        body = spec
        if "=" in spec.split(":", 1)[0]:
            name, body = spec.split("=", 1)
        if ":" not in body:
            raise ValueError(
                "model spec must be KIND:PATH"
                + (f" (kinds: {', '.join(sorted(kinds))})" if kinds is not None else "")
                + f", got {spec!r}"
            )
        kind, path_str = body.split(":", 1)
        if kinds is not None and kind not in kinds:
            raise ValueError(
                f"unknown model kind {kind!r} in {spec!r}; expected one of {sorted(kinds)}"
            )
        if not path_str:
            raise ValueError(f"model spec {spec!r} has an empty path")
        path = Path(path_str)
        if not name:
            name = path.name.split(".")[0] or kind
        if name in RESERVED_FEATURES:
            raise ValueError(
                f"model spec {spec!r}: the feature name {name!r} is reserved "
                f"({', '.join(RESERVED_FEATURES)}: the combined score and the word count); "
                "name the model with NAME=KIND:PATH"
            )
        return cls(name=name, kind=kind, path=path)


def count_oov(lm: LanguageModel, sentences: Sequence[Sequence[str]]) -> tuple[int, int]:
    """``(oov_words, words)`` of ``sentences`` under ``lm`` (end-of-sentence not counted)."""
    flags = lm.oov_flags(sentences)
    return int(sum(f.sum() for f in flags)), int(sum(len(f) for f in flags))


def sentence_scores(
    lm: LanguageModel,
    sentences: Sequence[Sequence[str]],
    contexts: Sequence[Context | None] | None = None,
    batch_size: int = 4096,
    progress: Callable[[int], None] | None = None,
) -> np.ndarray:
    """Natural-log sentence probabilities (``</s>`` included), in batches of ``batch_size``.

    ``progress(n)`` is called after each batch with the number of sentences done in it.
    """
    import numpy as np

    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    out = np.empty(len(sentences), dtype=np.float64)
    for start in range(0, len(sentences), batch_size):
        batch = sentences[start : start + batch_size]
        ctx = None if contexts is None else contexts[start : start + batch_size]
        out[start : start + len(batch)] = lm.sentence_logprobs(batch, ctx)
        if progress is not None:
            progress(len(batch))
    return out
