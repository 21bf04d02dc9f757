"""A model trained on sentences read backwards, scoring hypotheses so (``reverse:FILE.json``).

A right-to-left LM gives a sentence the probability

    log P(w_1 .. w_n) = sum_i log p(w_i | w_{i+1} .. w_n)  +  log p(<s> | w_1 .. w_n)

the same joint probability as a left-to-right model factored the other way, but learnt with
other errors: each word is predicted from what follows it. Beside a forward LM in the rescoring
sum it adds the right context that a forward model never sees when it scores a word (Arisoy et
al., "Bidirectional recurrent neural network language models for automatic speech recognition",
ICASSP 2015; Xiong et al., "The Microsoft 2017 conversational speech recognition system", where
forward and backward LSTM LMs are both features of the N-best rescoring).

Any word model trained on text whose lines have their words in reverse order becomes a backward
model: the recipe writes that text with ``awk`` and trains it with ``rescorer train`` as usual.
This wrapper reverses each hypothesis's words before the base model scores it, so every feature
and the rescoring sum are unchanged; the base's end-of-sentence token then stands for the start
of the forward sentence. A word model's ``token_logprobs`` are turned back to the order of the
words given, each word's value being its probability given the words after it, and the last value
that end token's (so they pair with ``oov_flags``, also in the words' order, as ``rescorer ppl``
pairs them); a subword model's stay in its own (backward) order. A backward
model cannot score a sentence word by word as it is typed or decoded: ``start``/``advance``
(next-word prediction, streaming) are refused.

```json
{"format": "rescorer-reverse", "version": 1, "base": "bwd=torch:exp/backward/best"}
```

A relative base path is relative to the JSON file's folder; loader options (case, device) and
contexts go to the base.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rescorer.core.errors import InputError
from rescorer.core.json_input import read_format_json
from rescorer.core.output import write_format_json
from rescorer.lms import base_spec, load_inner, parse_spec
from rescorer.lms.contract import Context, LanguageModel, LMSpec

logger = logging.getLogger(__name__)

FORMAT = "rescorer-reverse"
VERSION = 1


@dataclass(frozen=True)
class ReverseSpec:
    """The contents of a ``reverse:FILE.json``."""

    # Spec of the base model ([NAME=]KIND:PATH), trained on sentences with their words reversed.
    base: str

    def __post_init__(self) -> None:
        parse_spec(self.base)

    def save(self, path: str | Path) -> None:
        write_format_json(path, FORMAT, VERSION, {"base": self.base})

    @classmethod
    def load(cls, path: str | Path) -> ReverseSpec:
        path = Path(path)
        base = base_spec(read_format_json(path, FORMAT, VERSION), path)
        try:
            return cls(base)
        except ValueError as err:
            raise InputError(str(err), path) from None


def reversed_words(sentences: Sequence[Sequence[str]]) -> list[list[str]]:
    """Each sentence's words in reverse order."""
    return [list(reversed(words)) for words in sentences]


class ReverseLM:
    """A backward base model scoring each hypothesis with its words reversed."""

    def __init__(self, base: LanguageModel, name: str) -> None:
        self.base = base
        self.name = name
        self.units = base.units

    def token_logprobs(
        self,
        sentences: Sequence[Sequence[str]],
        contexts: Sequence[Context | None] | None = None,
    ) -> list[np.ndarray]:
        """The base's token log-probs of the reversed sentences: a word model's in the order of
        the words given (then the end token), other units' in the base's (backward) order."""
        logps = self.base.token_logprobs(reversed_words(sentences), contexts)
        if self.units != "word":
            return logps
        return [np.concatenate([lp[-2::-1], lp[-1:]]) for lp in logps]

    def sentence_logprobs(
        self,
        sentences: Sequence[Sequence[str]],
        contexts: Sequence[Context | None] | None = None,
    ) -> np.ndarray:
        return self.base.sentence_logprobs(reversed_words(sentences), contexts)

    def oov_flags(self, sentences: Sequence[Sequence[str]]) -> list[np.ndarray]:
        """The base's flags, one per word in the order the words were given."""
        return [flags[::-1].copy() for flags in self.base.oov_flags(reversed_words(sentences))]

    def _whole_sentences_only(self) -> ValueError:
        return ValueError(
            f"{self.name}: a backward (reverse:) model scores whole sentences only; it cannot "
            "predict the next word or score a sentence as it is typed"
        )

    def start(self, context: Context | None = None) -> Any:
        raise self._whole_sentences_only()

    def advance(self, states: Sequence[Any], tokens: Sequence[str]) -> tuple[np.ndarray, list]:
        raise self._whole_sentences_only()

    @property
    def stats(self) -> Any:
        """The base's scoring statistics (a torch model's prefix sharing), if it keeps any."""
        return getattr(self.base, "stats", None)

    def __repr__(self) -> str:
        return f"ReverseLM({self.base!r})"


def load_reverse_lm(spec: LMSpec, options: Mapping[str, Any]) -> ReverseLM:
    """The ``reverse`` loader of :data:`rescorer.lms.LOADERS`: options go to the base model."""
    rs = ReverseSpec.load(spec.path)
    base = load_inner(rs.base, spec, options)
    logger.info("reverse %s: base %s scores each sentence backwards", spec.path, rs.base)
    return ReverseLM(base, name=spec.name)
