"""Next-word prediction and word completion for keyboards, from any language model.

Given the words typed so far (the *history*), an optional partial word (the *prefix*) and an
optional context record, a :class:`Predictor` gives the ``k`` most probable next words, or the
``k`` most probable completions of the prefix, with their probabilities. All log-probabilities
are natural logs.

The next-word distribution
--------------------------
Prediction needs ``p(w | history)`` for every word ``w`` of a vocabulary at once, which the
LanguageModel contract (one token at a time) does not give. :class:`NextWordModel` is the small
protocol that does: ``vocabulary()``, ``start(context)``, ``step(state, word)`` and
``next_logprobs(state)`` (an array over the vocabulary). :func:`next_word_model` wraps a loaded
LanguageModel in one:

* KenLM (:class:`KenLMNextWord`): every candidate is scored with the state API after the
  history's state (:meth:`rescorer.lms.kenlm.KenLM.logprobs_after`); the arrays are cached per KenLM
  state, so histories that end in the same n-gram context share one computation. KenLM's Python
  module does not list a model's vocabulary: it is read from an ARPA file's unigrams or from
  the words a binary stores at its end (:func:`rescorer.lms.kenlm.kenlm_words`), or given as a
  word list (``--vocab``; ``rescorer ngram vocab`` writes one).
* torch checkpoints (:class:`TorchNextWord`): one LSTM step gives the whole softmax; the adapter
  keeps the LSTM state and the distribution after each committed word, so each word typed costs
  one step. It uses TorchLM's public attributes only (``model``, ``vocab_tokens``,
  ``to_units``, ``context_key``, ``device``).
* a model that has ``vocabulary()`` and ``next_logprobs(state)`` itself (the optional extension
  of the LanguageModel contract) is used as it is (:class:`NativeNextWord`);
* a model over a base model (``cache:``) has ``next_word_model(words, adapt)``: it wraps the
  base's adapter (``adapt(base, words)``), so a cache over an LSTM still costs one LSTM step per
  word (:class:`rescorer.lms.cache.CacheNextWord`);
* any other LanguageModel (e.g. an ONNX step model) is scored through ``advance`` with the state
  repeated over the vocabulary (:class:`ScoringNextWord`): correct, one batched call per word.

Vocabulary and interpolation
----------------------------
Several models are combined over one shared word vocabulary: a user word list when given, else
the union of the models' own vocabularies (``<s>``, ``</s>``, ``<unk>`` left out: they are never
suggested). The ``<unk>`` probability of a model is the mass of *all* the words it does not
know, so the vocabulary words a model does not know share it evenly: each gets
``p(<unk>) / n``, n being the number of vocabulary words that model maps to ``<unk>``
(:func:`unk_share`). Otherwise every such word would get the whole mass and crowd the top of the
suggestions (a word LSTM whose vocabulary misses a few hundred of the list's words does exactly
that).
:class:`InterpolatedModel` combines the components' arrays:

* ``linear``: ``ln p(w) = logsumexp_i(ln lambda_i + ln p_i(w))`` with the weights summing to 1
  (not renormalised: the mass outside the vocabulary, e.g. end of sentence, stays outside);
* ``loglinear``: ``sum_i lambda_i ln p_i(w)``, renormalised over the vocabulary (log-sum-exp).

:func:`em_mixture_weights` estimates linear weights on held-out text by EM.

Completion and streaming
------------------------
:class:`PrefixIndex` sorts the vocabulary once; the words with a typed prefix are one contiguous
range of it (two bisections), so a completion ranks only those candidates. A :class:`Session`
holds the model state of one sentence: :meth:`Session.commit` advances it by one word (one model
step), :meth:`Session.suggest` ranks the candidates of a prefix from the distribution computed
once per word. Ties in probability are broken alphabetically, so rankings are deterministic.

Case: the predictor maps typed words and prefixes into the vocabulary's case (``auto``: lower
case when the vocabulary has no upper-case words, upper case in the opposite situation, else
unchanged; see :mod:`rescorer.text`), and suggests words as the vocabulary spells them.
"""

from __future__ import annotations

import bisect
import logging
import math
import sys
import time
from collections import OrderedDict
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from rescorer.core.constants import BOS, EOS, UNK
from rescorer.core.errors import InputError
from rescorer.core.io import read_lines
from rescorer.core.json_input import json_object, parse_json
from rescorer.lms.contract import Context, LanguageModel
from rescorer.lms.kenlm import KenLM, read_arpa_unigrams, read_binary_words
from rescorer.text import CASE_MODES, case_function

logger = logging.getLogger(__name__)

SPECIAL_WORDS = frozenset({BOS, EOS, UNK})
"""Tokens that are never suggested."""

MIX_MODES = ("linear", "loglinear")
DEFAULT_CACHE_STATES = 4096


def unk_share(unknown: Sequence[bool] | np.ndarray) -> np.ndarray:
    """Log-probability offsets that share a model's ``<unk>`` mass among its unknown words.

    ``unknown[i]`` says whether vocabulary word i is scored with the model's ``<unk>``. Those
    words get ``-ln n`` (n = how many there are), the others 0: added to the model's log-probs,
    the n words together keep exactly ``p(<unk>)``.
    """
    flags = np.asarray(unknown, dtype=bool)
    offsets = np.zeros(flags.shape, dtype=np.float64)
    n = int(flags.sum())
    if n > 1:
        offsets[flags] = -math.log(n)
    return offsets


# -- the protocol ---------------------------------------------------------------------------------


@runtime_checkable
class NextWordModel(Protocol):
    """A model giving the whole next-word distribution over a fixed vocabulary.

    ``next_logprobs(state)[i]`` is the natural-log probability of ``vocabulary()[i]`` after the
    words that led to ``state``. States come from ``start(context)`` and ``step(state, word)``
    and are never modified (a state may be stepped twice with different words).
    """

    name: str

    def vocabulary(self) -> Sequence[str]: ...

    def start(self, context: Context | None = None) -> Any: ...

    def step(self, state: Any, word: str) -> Any: ...

    def next_logprobs(self, state: Any) -> np.ndarray: ...


# -- vocabularies ---------------------------------------------------------------------------------


def read_word_list(path: str | Path) -> list[str]:
    """Words of a word-list file: the first field of each non-blank line, duplicates dropped.

    ``word`` or ``word count`` lines both work (a vocabulary with counts, or a checkpoint's
    ``vocab.txt``); ``<s>``, ``</s>`` and ``<unk>`` are left out.
    """
    words: dict[str, None] = {}
    for _, line in read_lines(path):
        fields = line.split()
        if fields and fields[0] not in SPECIAL_WORDS:
            words.setdefault(fields[0], None)
    if not words:
        raise InputError("no words in the word list", path)
    return list(words)


def native_vocabulary(lm: Any) -> list[str] | None:
    """A model's own vocabulary when it can tell: ``vocabulary()``, ``vocab_tokens``, the
    unigrams of a KenLM model in ARPA form or the words a KenLM binary stores. None otherwise
    (a binary built with ``build_binary -v``, say)."""
    vocab = getattr(lm, "vocabulary", None)
    if callable(vocab):
        return list(vocab())
    tokens = getattr(lm, "vocab_tokens", None)
    if tokens is not None:
        return list(tokens)
    if isinstance(lm, KenLM):
        words = read_arpa_unigrams(lm.path)
        if words is None:
            try:
                words = read_binary_words(lm.path)
            except InputError:  # a binary without its words
                return None
        return words
    return None


def shared_vocabulary(lms: Sequence[Any], words: Sequence[str] | None = None) -> list[str]:
    """The prediction vocabulary: ``words`` when given, else the union of the models' own
    vocabularies (first model's order first), without ``<s>``, ``</s>``, ``<unk>``."""
    if words is not None:
        vocab = dict.fromkeys(w for w in words if w and w not in SPECIAL_WORDS)
        if not vocab:
            raise ValueError("the word list has no words besides <s>, </s>, <unk>")
        return list(vocab)
    union: dict[str, None] = {}
    without = []
    for lm in lms:
        own = native_vocabulary(lm)
        if own is None:
            without.append(getattr(lm, "name", repr(lm)))
            continue
        union.update(dict.fromkeys(w for w in own if w and w not in SPECIAL_WORDS))
    if not union:
        raise ValueError(
            f"no vocabulary to predict from: model(s) {without} do not expose one (a KenLM "
            "binary built with build_binary -v does not); give a word list with --vocab "
            "(`rescorer ngram vocab MODEL.arpa --out words.txt` writes a KenLM model's words)"
        )
    if without:
        logger.warning(
            "model(s) %s expose no vocabulary; predicting over the other models' (%d words)",
            without,
            len(union),
        )
    return list(union)


def vocabulary_case(words: Iterable[str]) -> str:
    """``lower`` when no word has upper-case letters, ``upper`` in the reverse case, else
    ``none`` (a vocabulary without letters also gives ``none``)."""
    has_lower = has_upper = False
    for w in words:
        has_lower = has_lower or w != w.upper()
        has_upper = has_upper or w != w.lower()
        if has_lower and has_upper:
            return "none"
    if has_lower:
        return "lower"
    if has_upper:
        return "upper"
    return "none"


# -- adapters -------------------------------------------------------------------------------------


class KenLMNextWord:
    """KenLM over a word list: candidates scored with the state API, cached per KenLM state."""

    def __init__(
        self, lm: KenLM, words: Sequence[str], cache_states: int = DEFAULT_CACHE_STATES
    ) -> None:
        self.name = lm.name
        self.lm = lm
        self._words = tuple(words)
        self._units = lm.to_units(self._words)  # decides an `auto` case from the vocabulary
        self._share = unk_share(lm.oov_flags([self._words])[0])
        self._cache: OrderedDict[Any, np.ndarray] = OrderedDict()
        self._cache_states = cache_states
        self.hits = self.misses = 0

    def vocabulary(self) -> Sequence[str]:
        return self._words

    def start(self, context: Context | None = None) -> Any:
        return self.lm.start(context)

    def step(self, state: Any, word: str) -> Any:
        return self.lm.advance([state], [word])[1][0]

    def next_logprobs(self, state: Any) -> np.ndarray:
        cached = self._cache.get(state)
        if cached is not None:
            self.hits += 1
            self._cache.move_to_end(state)
            return cached
        self.misses += 1
        out = self.lm.logprobs_after(state, self._units) + self._share
        out.flags.writeable = False
        self._cache[state] = out
        if len(self._cache) > self._cache_states:
            self._cache.popitem(last=False)
        return out

    def next_logprobs_subset(self, state: Any, ids: np.ndarray) -> np.ndarray:
        """ln p of the vocabulary words ``ids`` only (the cached full array when there is one)."""
        cached = self._cache.get(state)
        if cached is not None:
            return cached[ids]
        return self.lm.logprobs_after(state, [self._units[i] for i in ids]) + self._share[ids]


@dataclass(frozen=True)
class NeuralState:
    """A torch adapter state: the LSTM state after the history and the distribution it gives."""

    # The model's context key (TorchLM.context_key of the session's record).
    context: Any
    # LSTM state (h, m), each (layers, 1, d), after consuming the history.
    h: Any
    m: Any
    # ln p(w | history) over the adapter's vocabulary.
    logprobs: np.ndarray = field(repr=False)


class TorchNextWord:
    """A ``torch:`` checkpoint (TorchLM) over a word list: one LSTM step per committed word.

    The distribution after a word is computed in the step that consumes it, so
    :meth:`next_logprobs` costs nothing. Context-adapted weights are computed once per context.
    """

    def __init__(self, lm: Any, words: Sequence[str]) -> None:
        import torch  # torch models only; `import rescorer.predict` stays light

        self._torch = torch
        self.name = lm.name
        self.lm = lm
        self._model = lm.model
        index = {tok: i for i, tok in enumerate(lm.vocab_tokens)}
        if BOS not in index:
            raise ValueError(f"{lm.name}: expected {BOS} in the model's vocabulary")
        self._index = index
        self._unk = index.get(UNK, 0)
        self._bos = index[BOS]
        self._words = tuple(words)
        units = lm.to_units(list(self._words))
        ids = [index.get(u, self._unk) for u in units]
        self._ids = torch.tensor(ids, dtype=torch.long, device=lm.device)
        self._share = unk_share([u not in index for u in units])
        self._weights: dict[Any, Any] = {}

    def vocabulary(self) -> Sequence[str]:
        return self._words

    def start(self, context: Context | None = None) -> NeuralState:
        return self._run(self.lm.context_key(context), None, self._bos)

    def step(self, state: NeuralState, word: str) -> NeuralState:
        if not isinstance(state, NeuralState):
            raise ValueError(f"expected a NeuralState from start()/step(), got {type(state)!r}")
        unit = self.lm.to_units([word])[0]
        return self._run(state.context, (state.h, state.m), self._index.get(unit, self._unk))

    def next_logprobs(self, state: NeuralState) -> np.ndarray:
        return state.logprobs

    def _adapted(self, key: Any) -> Any:
        weights = self._weights.get(key)
        if weights is None:
            model = self._model
            weights = model.adapt([dict(key)]) if model.adaptive else model.adapt(None)
            self._weights[key] = weights
        return weights

    def _run(self, key: Any, hm: tuple[Any, Any] | None, token: int) -> NeuralState:
        torch = self._torch
        with torch.inference_mode():
            weights = self._adapted(key)
            inp = torch.tensor([[token]], dtype=torch.long, device=self.lm.device)
            log_probs, (h, m) = self._model(inp, None, hm, adapted=weights)
            lp = log_probs[0, 0].index_select(0, self._ids).double().cpu().numpy()
        lp += self._share
        lp.flags.writeable = False
        return NeuralState(key, h, m, lp)


class NativeNextWord:
    """A LanguageModel that has ``vocabulary()`` and ``next_logprobs(state)`` itself."""

    def __init__(self, lm: Any, words: Sequence[str]) -> None:
        self.name = lm.name
        self.lm = lm
        native = list(lm.vocabulary())
        index = {w: i for i, w in enumerate(native)}
        to_units = getattr(lm, "to_units", None)
        units = to_units(list(words)) if callable(to_units) else list(words)
        unk = index.get(UNK)
        missing = [u for u in units if u not in index]
        if missing and unk is None:
            raise ValueError(
                f"{lm.name}: {len(missing)} vocabulary words unknown to the model (e.g. "
                f"{missing[:3]}) and no {UNK} to score them with"
            )
        self._gather = np.array([index.get(u, unk) for u in units], dtype=np.int64)
        self._share = unk_share([u not in index for u in units])
        self._words = tuple(words)

    def vocabulary(self) -> Sequence[str]:
        return self._words

    def start(self, context: Context | None = None) -> Any:
        return self.lm.start(context)

    def step(self, state: Any, word: str) -> Any:
        return self.lm.advance([state], [word])[1][0]

    def next_logprobs(self, state: Any) -> np.ndarray:
        lp = np.asarray(self.lm.next_logprobs(state), dtype=np.float64)[self._gather]
        return lp + self._share


class ScoringNextWord:
    """Any LanguageModel: every candidate scored by ``advance`` (the state repeated).

    Correct for any model, but a neural model then runs one step per candidate: ``advance`` is
    called with at most ``chunk`` copies of the state at a time (memory ~ chunk x its vocabulary).
    A model that can do better implements ``vocabulary()`` and ``next_logprobs(state)``
    (:class:`NativeNextWord`). The last ``cache_states`` distributions are kept, keyed by the
    state object itself.
    """

    def __init__(
        self,
        lm: LanguageModel,
        words: Sequence[str],
        cache_states: int = 64,
        chunk: int = 512,
    ) -> None:
        if chunk < 1:
            raise ValueError(f"chunk must be >= 1, got {chunk}")
        self.name = lm.name
        self.lm = lm
        self.chunk = chunk
        self._words = tuple(words)
        to_units = getattr(lm, "to_units", None)
        self._units = list(to_units(list(words))) if callable(to_units) else list(words)
        self._share = unk_share(lm.oov_flags([self._words])[0])
        self._cache: OrderedDict[int, tuple[Any, np.ndarray]] = OrderedDict()
        self._cache_states = cache_states

    def vocabulary(self) -> Sequence[str]:
        return self._words

    def start(self, context: Context | None = None) -> Any:
        return self.lm.start(context)

    def step(self, state: Any, word: str) -> Any:
        return self.lm.advance([state], [word])[1][0]

    def next_logprobs(self, state: Any) -> np.ndarray:
        hit = self._cache.get(id(state))
        if hit is not None and hit[0] is state:
            return hit[1]
        parts = []
        for a in range(0, len(self._units), self.chunk):
            units = self._units[a : a + self.chunk]
            parts.append(np.asarray(self.lm.advance([state] * len(units), units)[0]))
        lp = np.concatenate(parts).astype(np.float64) + self._share
        lp.flags.writeable = False
        self._cache[id(state)] = (state, lp)
        if len(self._cache) > self._cache_states:
            self._cache.popitem(last=False)
        return lp


def next_word_model(lm: Any, words: Sequence[str]) -> NextWordModel:
    """Wrap a loaded model so it predicts over ``words`` (see the module docstring)."""
    if isinstance(lm, KenLM):
        return KenLMNextWord(lm, words)
    over_base = getattr(lm, "next_word_model", None)
    if callable(over_base):  # a model over a base model (a cache): the base's adapter, wrapped
        return over_base(words, next_word_model)
    torch_lm = sys.modules.get("rescorer.lms.torch")
    if torch_lm is not None and isinstance(lm, torch_lm.TorchLM) and lm.units == "word":
        return TorchNextWord(lm, words)
    if callable(getattr(lm, "vocabulary", None)) and callable(getattr(lm, "next_logprobs", None)):
        return NativeNextWord(lm, words)
    if isinstance(lm, LanguageModel):
        return ScoringNextWord(lm, words)
    raise ValueError(f"expected a LanguageModel, got {type(lm).__name__}")


class InterpolatedModel:
    """Several NextWordModels over the same vocabulary, mixed linearly or log-linearly.

    ``weights`` are positive and normalised to sum to 1. States are tuples of the components'
    states. See the module docstring for the two modes.
    """

    def __init__(
        self,
        components: Sequence[NextWordModel],
        weights: Sequence[float] | None = None,
        mode: str = "linear",
        name: str | None = None,
    ) -> None:
        if not components:
            raise ValueError("expected at least one component model, got none")
        if mode not in MIX_MODES:
            raise ValueError(f"mix mode must be one of {MIX_MODES}, got {mode!r}")
        if weights is None:
            weights = [1.0] * len(components)
        if len(weights) != len(components):
            raise ValueError(f"expected {len(components)} weights, got {len(weights)}")
        w = np.asarray(weights, dtype=np.float64)
        if not (np.isfinite(w).all() and (w > 0).all()):
            raise ValueError(f"interpolation weights must be positive numbers, got {list(weights)}")
        vocab = components[0].vocabulary()
        for c in components[1:]:
            other = c.vocabulary()
            if len(other) != len(vocab) or any(a != b for a, b in zip(other, vocab, strict=True)):
                raise ValueError(
                    f"components must share one vocabulary: {c.name!r} differs from "
                    f"{components[0].name!r}"
                )
        self.components = tuple(components)
        self.weights = w / w.sum()
        self.mode = mode
        self.name = name or "+".join(c.name for c in components)
        self._log_w = np.log(self.weights)[:, None]

    def vocabulary(self) -> Sequence[str]:
        return self.components[0].vocabulary()

    def start(self, context: Context | None = None) -> tuple[Any, ...]:
        return tuple(c.start(context) for c in self.components)

    def step(self, state: tuple[Any, ...], word: str) -> tuple[Any, ...]:
        return tuple(c.step(s, word) for c, s in zip(self.components, state, strict=True))

    def next_logprobs(self, state: tuple[Any, ...]) -> np.ndarray:
        stack = np.stack([c.next_logprobs(s) for c, s in zip(self.components, state, strict=True)])
        if self.mode == "linear":
            return _logsumexp(self._log_w + stack, axis=0)
        scores = self.weights @ stack
        return scores - _logsumexp(scores, axis=0)

    def next_logprobs_subset(self, state: tuple[Any, ...], ids: np.ndarray) -> np.ndarray:
        """ln p of the words ``ids``; a linear mixture scores only those (a log-linear one needs
        the whole vocabulary for its normaliser)."""
        if self.mode != "linear":
            return self.next_logprobs(state)[ids]
        parts = []
        for c, s in zip(self.components, state, strict=True):
            subset = getattr(c, "next_logprobs_subset", None)
            parts.append(subset(s, ids) if subset is not None else c.next_logprobs(s)[ids])
        return _logsumexp(self._log_w + np.stack(parts), axis=0)


def _logsumexp(a: np.ndarray, axis: int) -> np.ndarray | Any:
    top = np.max(a, axis=axis, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)
    with np.errstate(divide="ignore"):
        out = np.log(np.sum(np.exp(a - top), axis=axis, keepdims=True)) + top
    return np.squeeze(out, axis=axis)


def em_mixture_weights(
    logprobs: np.ndarray, iterations: int = 100, tol: float = 1e-7
) -> np.ndarray:
    """Linear mixture weights maximising the held-out likelihood, by EM.

    ``logprobs`` is ``(models, tokens)``: each model's natural-log probability of each held-out
    token. Starts from uniform weights; stops when no weight moves more than ``tol``.
    """
    lp = np.asarray(logprobs, dtype=np.float64)
    if lp.ndim != 2 or lp.shape[0] < 1 or lp.shape[1] < 1:
        raise ValueError(f"expected a (models, tokens) array with both > 0, got shape {lp.shape}")
    n = lp.shape[0]
    w = np.full(n, 1.0 / n)
    for _ in range(iterations):
        joint = np.log(w)[:, None] + lp
        post = np.exp(joint - _logsumexp(joint, axis=0))
        new = post.mean(axis=1)
        done = float(np.abs(new - w).max()) < tol
        w = new
        if done:
            break
    return w


def predictable_logprobs(
    models: Sequence[LanguageModel],
    sentences: Sequence[Sequence[str]],
    vocabulary: Collection[str],
    contexts: Sequence[Context | None] | None = None,
) -> np.ndarray:
    """``(models, tokens)`` natural-log probabilities of the held-out words a keyboard mixing
    ``models`` could suggest: in ``vocabulary`` and known to every model (``</s>`` is never
    suggested): the columns :func:`em_mixture_weights` fits. Each model scores the sentences
    with ``contexts`` (a model without context ignores them)."""
    scores = [m.token_logprobs(sentences, contexts) for m in models]
    flags = [m.oov_flags(sentences) for m in models]
    columns: list[list[float]] = [[] for _ in models]
    for i, words in enumerate(sentences):
        for j, word in enumerate(words):
            if word in vocabulary and not any(f[i][j] for f in flags):
                for column, lp in zip(columns, scores, strict=True):
                    column.append(float(lp[i][j]))
    return np.array(columns, dtype=np.float64)


# -- prefix index, predictor, sessions ------------------------------------------------------------


def _prefix_end(prefix: str) -> str | None:
    """The smallest string above every string that starts with ``prefix`` (None: no bound)."""
    chars = list(prefix)
    while chars:
        code = ord(chars[-1])
        if code < sys.maxunicode:
            chars[-1] = chr(code + 1)
            return "".join(chars)
        chars.pop()
    return None


class PrefixIndex:
    """The vocabulary sorted once: the words with a prefix are one range of sorted positions."""

    def __init__(self, words: Sequence[str]) -> None:
        order = sorted(range(len(words)), key=words.__getitem__)
        self.sorted_words: list[str] = [words[i] for i in order]
        # Sorted position -> vocabulary id.
        self.order = np.asarray(order, dtype=np.int64)
        # Vocabulary id -> sorted position.
        self.position = np.empty_like(self.order)
        self.position[self.order] = np.arange(len(order))

    def __len__(self) -> int:
        return len(self.sorted_words)

    def span(self, prefix: str) -> tuple[int, int]:
        """``(lo, hi)``: sorted positions ``lo..hi-1`` hold exactly the words with ``prefix``."""
        if not prefix:
            return 0, len(self.sorted_words)
        lo = bisect.bisect_left(self.sorted_words, prefix)
        end = _prefix_end(prefix)
        hi = len(self.sorted_words) if end is None else bisect.bisect_left(self.sorted_words, end)
        return lo, max(lo, hi)

    def candidates(self, prefix: str) -> np.ndarray:
        """Vocabulary ids of the words that start with ``prefix`` (alphabetical order)."""
        lo, hi = self.span(prefix)
        return self.order[lo:hi]


@dataclass(frozen=True)
class Suggestion:
    """One suggested word."""

    # The word as the vocabulary spells it.
    word: str
    # ln p(word | history, context) under the model (not renormalised over the prefix's words).
    logprob: float

    @property
    def prob(self) -> float:
        return math.exp(self.logprob)

    def to_json(self) -> dict[str, Any]:
        return {"word": self.word, "logprob": round(self.logprob, 6), "prob": self.prob}


class Predictor:
    """Top-k next words and completions from a :class:`NextWordModel`.

    ``case`` maps typed words and prefixes into the vocabulary (``auto``: see
    :func:`vocabulary_case`).
    """

    def __init__(self, model: NextWordModel, case: str = "auto") -> None:
        if case not in CASE_MODES:
            raise ValueError(f"case must be one of {CASE_MODES}, got {case!r}")
        self.model = model
        self.words: tuple[str, ...] = tuple(model.vocabulary())
        if not self.words:
            raise ValueError("expected a non-empty vocabulary, got none")
        self.index = PrefixIndex(self.words)
        # Letters of the longest word: a longer prefix has no candidates.
        self.longest = max(len(w) for w in self.words)
        self.case = vocabulary_case(self.words) if case == "auto" else case
        self._map = case_function(self.case)
        self._ids = {w: i for i, w in enumerate(self.words)}

    @property
    def name(self) -> str:
        return self.model.name

    def normalise(self, word: str) -> str:
        """``word`` in the vocabulary's case."""
        return self._map(word)

    def word_id(self, word: str) -> int | None:
        """Vocabulary id of ``word`` (case-mapped), None when it is not in the vocabulary."""
        return self._ids.get(self._map(word))

    def session(self, context: Context | None = None) -> Session:
        """A streaming session at the start of a sentence."""
        return Session(self, context)

    def predict(
        self,
        history: Sequence[str],
        prefix: str = "",
        k: int = 5,
        context: Context | None = None,
    ) -> list[Suggestion]:
        """The ``k`` best next words after ``history`` (completions of ``prefix`` when given)."""
        session = self.session(context)
        session.commit_all(history)
        return session.suggest(prefix, k)


class Session:
    """One sentence being typed: the model state advances one word at a time.

    The next-word distribution is computed once per committed word (lazily, on the first
    :meth:`suggest`); every keystroke after that only ranks the prefix's candidates.
    """

    def __init__(self, predictor: Predictor, context: Context | None = None) -> None:
        self.predictor = predictor
        self.context = context
        self.history: list[str] = []
        self._state = predictor.model.start(context)
        self._sorted: np.ndarray | None = None  # ln p in sorted-vocabulary order

    def commit(self, word: str) -> None:
        """The user finished ``word``: advance the model by it."""
        if not word or any(ch.isspace() for ch in word):
            raise ValueError(f"expected one word without spaces, got {word!r}")
        word = self.predictor.normalise(word)
        self._state = self.predictor.model.step(self._state, word)
        self.history.append(word)
        self._sorted = None

    def commit_all(self, words: Iterable[str]) -> None:
        for w in words:
            self.commit(w)

    def sorted_logprobs(self) -> np.ndarray:
        """ln p(next word) for the vocabulary in sorted (alphabetical) order."""
        if self._sorted is None:
            lp = self.predictor.model.next_logprobs(self._state)
            if lp.shape != (len(self.predictor.words),):
                raise ValueError(
                    f"{self.predictor.name}: expected {len(self.predictor.words)} log-probs, "
                    f"got shape {lp.shape}"
                )
            self._sorted = lp[self.predictor.index.order]
        return self._sorted

    def _segment(self, lo: int, hi: int) -> np.ndarray:
        """ln p of the sorted positions ``lo..hi-1``: from the full distribution when it is
        there (or the range is all of it), else from the model's subset scoring if it has one."""
        subset = getattr(self.predictor.model, "next_logprobs_subset", None)
        if self._sorted is not None or subset is None or hi - lo == len(self.predictor.words):
            return self.sorted_logprobs()[lo:hi]
        return np.asarray(subset(self._state, self.predictor.index.order[lo:hi]))

    def _ranked(self, prefix: str, k: int) -> tuple[np.ndarray, np.ndarray]:
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        lo, hi = self.predictor.index.span(self.predictor.normalise(prefix))
        if hi <= lo:
            return np.empty(0, dtype=np.int64), np.empty(0)
        seg = self._segment(lo, hi)
        if hi - lo > k:
            kth = np.partition(seg, hi - lo - k)[hi - lo - k]  # k-th largest value
            cand = np.flatnonzero(seg >= kth)
        else:
            cand = np.arange(hi - lo)
        # Best first; ties alphabetically (lower position first).
        cand = cand[np.lexsort((cand, -seg[cand]))][:k]
        return cand + lo, seg[cand]

    def top_positions(self, prefix: str = "", k: int = 5) -> np.ndarray:
        """Sorted-vocabulary positions of the ``k`` best words with ``prefix``, best first."""
        return self._ranked(prefix, k)[0]

    def suggest(self, prefix: str = "", k: int = 5) -> list[Suggestion]:
        """The ``k`` most probable next words starting with ``prefix``, best first.

        With a prefix and no next-word distribution computed yet, a model that can score a
        subset of its vocabulary (``next_logprobs_subset``: KenLM, linear mixtures of such
        models) scores only the prefix's candidates.
        """
        positions, values = self._ranked(prefix, k)
        words = self.predictor.index.sorted_words
        return [Suggestion(words[p], float(v)) for p, v in zip(positions, values, strict=True)]

    def rank(self, word: str) -> int | None:
        """1-based rank of ``word`` among all next words (None when not in the vocabulary)."""
        wid = self.predictor.word_id(word)
        if wid is None:
            return None
        lp = self.sorted_logprobs()
        pos = int(self.predictor.index.position[wid])
        value = lp[pos]
        return 1 + int(np.count_nonzero(lp > value)) + int(np.count_nonzero(lp[:pos] == value))


# -- batch mode -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class PredictRequest:
    """One line of a batch file."""

    # 1-based line number in the input file.
    line: int
    # Words typed before the current one.
    history: tuple[str, ...]
    # The partial word typed so far ("" for next-word prediction).
    prefix: str
    # Context record for this line (None: none given).
    context: Mapping[str, Any] | None


def read_requests(path: str | Path) -> list[PredictRequest]:
    """A batch file: ``history words[<TAB>partial word[<TAB>{context JSON}]]`` per line.

    An empty history is a sentence start, a blank line included (it asks for the first word
    of a sentence): every line is one request, so answers line up with the input. The context
    column is a JSON object of fields (``{"genre": "news"}``).
    """
    out = []
    for lineno, line in read_lines(path):
        cols = line.split("\t")
        if len(cols) > 3:
            raise InputError(
                f"expected 'history[<TAB>prefix[<TAB>context JSON]]', got {len(cols)} columns",
                path,
                lineno,
            )
        prefix = cols[1].strip() if len(cols) > 1 else ""
        if any(ch.isspace() for ch in prefix):
            raise InputError(f"the partial word must be one word, got {prefix!r}", path, lineno)
        context = None
        if len(cols) == 3 and cols[2].strip():
            context = json_object(parse_json(cols[2], path, lineno), path, lineno, "context")
        out.append(PredictRequest(lineno, tuple(cols[0].split()), prefix, context))
    if not out:
        raise InputError("expected lines 'history[<TAB>prefix[<TAB>context JSON]]', got none", path)
    return out


def predict_stream(
    predictor: Predictor,
    requests: Iterable[PredictRequest],
    k: int,
    default_context: Mapping[str, Any] | None = None,
) -> Iterator[tuple[PredictRequest, list[Suggestion], float]]:
    """Answer requests in order: ``(request, suggestions, seconds)``.

    A request whose history extends the previous one's (same context) reuses its session, so a
    file of a sentence typed word by word costs one model step per word.
    """
    session: Session | None = None
    session_ctx: Any = None
    for req in requests:
        ctx = req.context if req.context is not None else default_context
        t0 = time.perf_counter()
        hist = [predictor.normalise(w) for w in req.history]
        if (
            session is None
            or session_ctx != ctx
            or len(session.history) > len(hist)
            or session.history != hist[: len(session.history)]
        ):
            session = predictor.session(ctx)
            session_ctx = ctx
        session.commit_all(hist[len(session.history) :])
        suggestions = session.suggest(req.prefix, k)
        yield req, suggestions, time.perf_counter() - t0


# -- building a predictor from loaded models ------------------------------------------------------


def build_predictor(
    lms: Sequence[Any],
    weights: Sequence[float] | None = None,
    mix: str = "linear",
    words: Sequence[str] | None = None,
    case: str = "auto",
) -> Predictor:
    """A Predictor over loaded models: one model as it is, several interpolated.

    ``words``: the prediction vocabulary (default: the union of the models', see
    :func:`shared_vocabulary`); ``weights`` and ``mix`` as :class:`InterpolatedModel`'s.
    """
    if not lms:
        raise ValueError("expected at least one language model, got none")
    if weights is not None and len(weights) != len(lms):
        raise ValueError(f"expected {len(lms)} interpolation weights, got {len(weights)}")
    vocab = shared_vocabulary(lms, words)
    components = [next_word_model(lm, vocab) for lm in lms]
    logger.info("prediction vocabulary: %d words", len(vocab))
    if len(components) == 1:
        return Predictor(components[0], case)
    return Predictor(InterpolatedModel(components, weights, mix), case)


# -- interactive typing ---------------------------------------------------------------------------

CONSOLE_HELP = """\
Type words and see suggestions after each line:
  some words        commit these words, then suggest the next word
  some words pre*   commit "some words", then complete the partial word "pre"
  =N                accept suggestion N of the last list
  (empty line)      start a new sentence
  :q                quit (or end of input)"""


class TypingConsole:
    """The interactive mode's logic, one input line at a time (see :data:`CONSOLE_HELP`).

    :meth:`feed` returns the text to show, or None to quit. Terminal I/O is the caller's.
    """

    def __init__(self, predictor: Predictor, k: int = 5, context: Context | None = None) -> None:
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        self.predictor = predictor
        self.k = k
        self.context = context
        self.session = predictor.session(context)
        self.last: list[Suggestion] = []
        self.prefix = ""

    def feed(self, line: str) -> str | None:
        text = line.strip()
        if text in (":q", ":quit"):
            return None
        note = ""
        self.prefix = ""
        t0 = time.perf_counter()  # the model steps of the committed words count too
        if not text:
            self.session = self.predictor.session(self.context)
            note = "(new sentence)\n"
        elif text.startswith("=") and text[1:].isdigit():
            n = int(text[1:])
            if not 1 <= n <= len(self.last):
                return f"no suggestion {n}: the last list has {len(self.last)}"
            self.session.commit(self.last[n - 1].word)
        else:
            tokens = text.split()
            if tokens[-1].endswith("*"):
                self.prefix = tokens.pop()[:-1]
            self.session.commit_all(tokens)
        self.last = self.session.suggest(self.prefix, self.k)
        ms = 1000.0 * (time.perf_counter() - t0)
        typed = " ".join(self.session.history)
        head = f"{note}[{typed}]" + (f" {self.prefix}*" if self.prefix else "")
        if not self.last:
            body = "  (no word in the vocabulary starts with that)"
        else:
            body = "\n".join(
                f"  {i}. {s.word}  p={s.prob:.4f}" for i, s in enumerate(self.last, start=1)
            )
        return f"{head}\n{body}\n  ({ms:.2f} ms)"
