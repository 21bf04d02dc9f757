"""A unigram cache of each utterance's context text, interpolated with a base word model.

The classic cache LM (Kuhn & De Mori 1990; Jelinek et al. 1991): words a speaker or writer has
just used are more likely to come again, above all the rare ones (names, topic words) that a
model trained elsewhere gives little probability. For each utterance the cache is the text of
one field of its context record (``rescorer context build`` writes the previous utterances'
1-best as ``previous``), and every word of a hypothesis is scored as

    p(w | h, cache) = (1 - lambda) p_base(w | h) + lambda c(w) / n

where ``c(w)`` counts ``w`` in the cache and ``n`` is the number of cached words; ``</s>`` gets
``(1 - lambda) p_base(</s> | h)``. Over the base model's events plus the cached words this is
a distribution (it sums to 1); a cached word the base does not know takes the base's ``<unk>``
probability in the first term, as a closed-vocabulary model always scores unknown words. An
utterance whose cache is empty (no context, or a group's first utterance) is scored by the base
model unchanged, so a model scored with no context equals its base.

``min_chars`` keeps only cached words of at least that many characters: function words are in
every cache and their base probabilities are already high, so the cache's mass goes to content
words (on LibriSpeech dev_clean, 5 characters tuned best; see the recipe's RESULTS.md). Words are
matched without case (``str.casefold``), so a cache of upper-case 1-best text serves a
lower-case model's hypotheses.

On the command line the model is ``cache:FILE.json``:

```json
{"format": "rescorer-cache", "version": 1, "base": "lstm=torch:exp/lstm/best",
 "lambda": 0.1, "field": "previous", "min_chars": 5}
```

A relative base path is relative to the JSON file's folder; loader options (case, device) go to
the base model. Scoring needs a context file (``--context``); contexts also go to the base, so a
context-aware base keeps its own conditioning.
"""

from __future__ import annotations

import functools
import logging
import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rescorer.core.constants import EOS
from rescorer.core.errors import InputError
from rescorer.core.json_input import json_number, read_format_json
from rescorer.core.output import write_format_json
from rescorer.lms import base_spec, load_inner, parse_spec
from rescorer.lms.base import TokenSumLM, check_advance
from rescorer.lms.contract import Context, LanguageModel, LMSpec

logger = logging.getLogger(__name__)

FORMAT = "rescorer-cache"
VERSION = 1


@dataclass(frozen=True)
class CacheSpec:
    """The contents of a ``cache:FILE.json``."""

    # Spec of the base word model ([NAME=]KIND:PATH).
    base: str
    # Weight of the cache distribution, 0 < lambda < 1.
    lam: float
    # Context field whose text fills the cache.
    field: str = "previous"
    # Only cached words of at least this many characters count (0: every word).
    min_chars: int = 0

    def __post_init__(self) -> None:
        parse_spec(self.base)
        check_options(self.lam, self.field, self.min_chars)

    def save(self, path: str | Path) -> None:
        fields = {"base": self.base, "lambda": self.lam, "field": self.field}
        write_format_json(path, FORMAT, VERSION, {**fields, "min_chars": self.min_chars})

    @classmethod
    def load(cls, path: str | Path) -> CacheSpec:
        path = Path(path)
        data = read_format_json(path, FORMAT, VERSION)
        base = base_spec(data, path)
        field, min_chars = data.get("field", "previous"), data.get("min_chars", 0)
        if not isinstance(field, str) or not isinstance(min_chars, int):
            raise InputError('expected "field" a string and "min_chars" an integer', path)
        try:
            return cls(
                base, json_number(data.get("lambda"), path, None, "lambda"), field, min_chars
            )
        except (TypeError, ValueError) as err:
            raise InputError(str(err), path) from None


def check_options(lam: float, field: str, min_chars: int) -> None:
    """ValueError unless 0 < lam < 1, field is non-empty and min_chars >= 0."""
    if not (isinstance(lam, int | float) and math.isfinite(lam) and 0.0 < lam < 1.0):
        raise ValueError(f"lambda must be between 0 and 1 (exclusive), got {lam!r}")
    if not field:
        raise ValueError("field must name a context field, got an empty string")
    if min_chars < 0:
        raise ValueError(f"min_chars must be >= 0, got {min_chars}")


@dataclass(frozen=True)
class Cache:
    """One utterance's cache: the probability of each cached word (case-folded)."""

    # Cached word (casefolded) -> c(w) / n.
    probs: Mapping[str, float]

    def __len__(self) -> int:
        return len(self.probs)

    def prob(self, word: str) -> float:
        return self.probs.get(word.casefold(), 0.0) if word != EOS else 0.0


EMPTY = Cache({})


class CacheLM(TokenSumLM):
    """A base word model interpolated with a unigram cache of each utterance's context text."""

    units = "word"

    def __init__(
        self,
        base: LanguageModel,
        lam: float,
        field: str = "previous",
        min_chars: int = 0,
        name: str = "cache",
    ) -> None:
        check_options(lam, field, min_chars)
        if base.units != "word":
            raise ValueError(
                f"a cache needs a base model over words, got {base.name!r} with units "
                f"{base.units!r}"
            )
        self.base = base
        self.lam = float(lam)
        self.field = field
        self.min_chars = min_chars
        self.name = name
        self._log_keep = math.log1p(-self.lam)
        # an N-best list's hypotheses share one context: its cache is counted once
        self._cache_of = functools.lru_cache(maxsize=256)(self._build)

    def cache(self, context: Context | None) -> Cache:
        """The cache of one context record (empty without the field)."""
        text = context.get(self.field) if context else None
        if not text:
            return EMPTY
        if not isinstance(text, str):
            raise ValueError(
                f"context field {self.field!r} must be text, got {type(text).__name__}"
            )
        return self._cache_of(text)

    def _build(self, text: str) -> Cache:
        words = [w.casefold() for w in text.split() if len(w) >= self.min_chars]
        if not words:
            return EMPTY
        n = len(words)
        return Cache({w: c / n for w, c in Counter(words).items()})

    def _mix(self, base_lp: np.ndarray, q: np.ndarray, cached: np.ndarray) -> np.ndarray:
        """ln((1 - lambda) p_base + lambda q) per token where ``cached`` (the token's cache is
        not empty), the base's value elsewhere."""
        base_lp = np.asarray(base_lp, dtype=np.float64)
        with np.errstate(divide="ignore"):
            mixed = np.logaddexp(base_lp + self._log_keep, math.log(self.lam) + np.log(q))
        return np.where(cached, mixed, base_lp)

    def token_logprobs(
        self,
        sentences: Sequence[Sequence[str]],
        contexts: Sequence[Context | None] | None = None,
    ) -> list[np.ndarray]:
        base = self.base.token_logprobs(sentences, contexts)
        out = []
        for i, words in enumerate(sentences):
            cache = self.cache(contexts[i]) if contexts is not None else EMPTY
            if not len(cache):
                out.append(np.asarray(base[i], dtype=np.float64))
                continue
            if len(base[i]) != len(words) + 1:
                raise ValueError(
                    f"base model {self.base.name!r} gave {len(base[i])} values for a sentence "
                    f"of {len(words)} words; a cache needs one per word and one for </s>"
                )
            q = np.array([cache.prob(w) for w in words] + [0.0], dtype=np.float64)  # </s>: 0
            out.append(self._mix(base[i], q, True))
        return out

    def oov_flags(self, sentences: Sequence[Sequence[str]]) -> list[np.ndarray]:
        return self.base.oov_flags(sentences)

    def start(self, context: Context | None = None) -> tuple[Any, Cache]:
        return self.base.start(context), self.cache(context)

    def advance(self, states: Sequence[Any], tokens: Sequence[str]) -> tuple[np.ndarray, list]:
        if check_advance(states, tokens):
            return np.empty(0, dtype=np.float64), []
        base_lp, nxt = self.base.advance([s[0] for s in states], tokens)
        caches = [s[1] for s in states]
        q = np.array([c.prob(t) for c, t in zip(caches, tokens, strict=True)], dtype=np.float64)
        cached = np.array([len(c) > 0 for c in caches])
        return self._mix(base_lp, q, cached), [(n, c) for n, c in zip(nxt, caches, strict=True)]

    def next_word_model(self, words: Sequence[str], adapt: Callable[..., Any]) -> CacheNextWord:
        """The next-word distribution over ``words`` for prediction (:mod:`rescorer.predict`):
        the base model's own adapter (``adapt(base, words)``) mixed with each context's cache."""
        return CacheNextWord(self, adapt(self.base, words))

    def __repr__(self) -> str:
        return (
            f"CacheLM({self.base.name!r}, lambda={self.lam:g}, field={self.field!r}, "
            f"min_chars={self.min_chars})"
        )


class CacheNextWord:
    """A :class:`CacheLM` as a next-word model (:class:`rescorer.predict.NextWordModel`).

    ``inner`` is the base model's adapter over the prediction vocabulary; each word ``w`` gets
    ``ln((1 - lambda) p_inner(w) + lambda c(w) / n)`` (the base's value where the cache is empty).
    The inner adapter has already shared the base's ``<unk>`` among the words the base does not
    know, so the cache adds its mass on top of that share, and the words' total stays the
    base's (mass on ``</s>`` and on cached words outside the vocabulary stays outside it). A
    state is the inner state and the context's cache.
    """

    def __init__(self, lm: CacheLM, inner: Any, max_caches: int = 64) -> None:
        self.name = lm.name
        self.lm = lm
        self.inner = inner
        self._folded = [w.casefold() for w in inner.vocabulary()]
        self._q: dict[int, tuple[Cache, np.ndarray]] = {}  # id(cache) -> c(w)/n per word
        self._max_caches = max_caches

    def vocabulary(self) -> Sequence[str]:
        return self.inner.vocabulary()

    def start(self, context: Context | None = None) -> tuple[Any, Cache]:
        return self.inner.start(context), self.lm.cache(context)

    def step(self, state: tuple[Any, Cache], word: str) -> tuple[Any, Cache]:
        return self.inner.step(state[0], word), state[1]

    def _cache_probs(self, cache: Cache) -> np.ndarray:
        """c(w)/n of every vocabulary word, built once per context's cache."""
        hit = self._q.get(id(cache))
        if hit is not None and hit[0] is cache:
            return hit[1]
        q = np.array([cache.probs.get(w, 0.0) for w in self._folded], dtype=np.float64)
        if len(self._q) >= self._max_caches:
            self._q.pop(next(iter(self._q)))
        self._q[id(cache)] = (cache, q)
        return q

    def next_logprobs(self, state: tuple[Any, Cache]) -> np.ndarray:
        base = self.inner.next_logprobs(state[0])
        if not len(state[1]):
            return np.asarray(base, dtype=np.float64)
        return self.lm._mix(base, self._cache_probs(state[1]), True)

    def next_logprobs_subset(self, state: tuple[Any, Cache], ids: np.ndarray) -> np.ndarray:
        """ln p of the words ``ids`` only (the inner adapter's subset when it has one)."""
        subset = getattr(self.inner, "next_logprobs_subset", None)
        if subset is None:
            return self.next_logprobs(state)[ids]
        base = subset(state[0], ids)
        if not len(state[1]):
            return np.asarray(base, dtype=np.float64)
        return self.lm._mix(base, self._cache_probs(state[1])[ids], True)


def load_cache_lm(spec: LMSpec, options: Mapping[str, Any]) -> CacheLM:
    """The ``cache`` loader of :data:`rescorer.lms.LOADERS`: options go to the base model."""
    cs = CacheSpec.load(spec.path)
    base = load_inner(cs.base, spec, options)
    logger.info(
        "cache %s: base %s, lambda %g, field %r, min_chars %d",
        spec.path, base.name, cs.lam, cs.field, cs.min_chars,
    )  # fmt: skip
    return CacheLM(base, cs.lam, cs.field, cs.min_chars, name=spec.name)
