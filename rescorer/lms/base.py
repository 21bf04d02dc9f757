"""What the word-level model adapters share, written once.

:class:`WordLM` is the base of the adapters whose units are words (``torch:``, ``onnx:``,
``fnlm:``, ``cue:``, ``lbl:``): the case mapping into the model's vocabulary and the OOV flags
(through a :class:`~rescorer.lms.word_vocab.CaseMapping` the adapter sets as ``self.words``),
sentence log-probabilities as sums of the token ones (:class:`TokenSumLM`, which mixtures and
caches share), the argument check of streaming
``advance``, and a ``__repr__`` from the adapter's :meth:`WordLM.describe`. The checks every
constructor makes (a checkpoint folder that exists, positive batch sizes) and the loader of
:data:`rescorer.lms.LOADERS` (:func:`loader`) are here too, with one wording of their errors.

Imports neither torch nor any adapter, so ``onnx:`` models stay free of torch.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from rescorer.lms.contract import Context, LMSpec
from rescorer.lms.word_vocab import CaseMapping


def checkpoint_folder(path: str | Path, what: str) -> Path:
    """``path`` as a Path, or a ValueError when no such folder exists (``what``: e.g. "CUE")."""
    path = Path(path)
    if not path.is_dir():
        raise ValueError(f"{what} checkpoint folder not found: {path}")
    return path


def positive(name: str, value: int) -> int:
    """``value`` when >= 1, else a ValueError naming the option."""
    if value < 1:
        raise ValueError(f"{name} must be >= 1, got {value}")
    return value


def token_sums(token_logprobs: Sequence[np.ndarray]) -> np.ndarray:
    """Sentence log-probabilities as the sums of their token log-probabilities."""
    return np.array([lp.sum() for lp in token_logprobs], dtype=np.float64)


def check_advance(states: Sequence[Any], tokens: Sequence[str]) -> bool:
    """Check ``advance``'s arguments pair up; True when there is nothing to score."""
    if len(states) != len(tokens):
        raise ValueError(f"got {len(states)} states but {len(tokens)} tokens")
    return not tokens


class TokenSumLM:
    """Sentence log-probabilities as the sums of :meth:`token_logprobs` (models that have no
    shortcut through whole sentences: word adapters, mixtures and caches, which combine per
    token)."""

    def token_logprobs(
        self,
        sentences: Sequence[Sequence[str]],
        contexts: Sequence[Context | None] | None = None,
    ) -> list[np.ndarray]:
        raise NotImplementedError

    def sentence_logprobs(
        self,
        sentences: Sequence[Sequence[str]],
        contexts: Sequence[Context | None] | None = None,
    ) -> np.ndarray:
        """Natural-log probability of each sentence: the sum of its token log-probabilities."""
        return token_sums(self.token_logprobs(sentences, contexts))


class WordLM(TokenSumLM):
    """Base of the word-level adapters (see the module docstring).

    A subclass sets ``name``, ``path`` and ``words`` (its case mapping) and implements
    ``token_logprobs``, ``start``, ``advance`` and :meth:`describe`.
    """

    units = "word"
    name: str
    path: Path
    words: CaseMapping

    @property
    def case(self) -> str:
        """The case mapping in use (``auto`` until the first words decided it)."""
        return self.words.case

    def to_units(self, words: Sequence[str]) -> list[str]:
        """The model's tokens for ``words`` (case-mapped; no ``</s>``)."""
        return self.words.to_units(words)

    def oov_flags(self, sentences: Sequence[Sequence[str]]) -> list[np.ndarray]:
        """Per sentence, a bool per word: True where the model scores it as unknown."""
        return self.words.oov_flags(sentences)

    def describe(self) -> dict[str, Any]:
        """The fields ``repr`` shows after the path (the model's shape, options, case)."""
        return {"case": self.case}

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in self.describe().items())
        return f"{type(self).__name__}({str(self.path)!r}, {fields})"


def loader(
    cls: Callable[..., Any], *option_names: str
) -> Callable[[LMSpec, Mapping[str, Any]], Any]:
    """The loader of a kind: ``cls(spec.path, name=spec.name, case=..., **named options)``.

    ``case`` defaults to ``auto``; the other options in ``option_names`` are passed when given.
    """

    def load(spec: LMSpec, options: Mapping[str, Any]) -> Any:
        given = {k: options[k] for k in option_names if k in options}
        return cls(spec.path, name=spec.name, case=options.get("case", "auto"), **given)

    load.__doc__ = (
        f"The loader of {getattr(cls, '__name__', cls)} for :data:`rescorer.lms.LOADERS` "
        f"(options: case{''.join(', ' + n for n in option_names)})."
    )
    return load
