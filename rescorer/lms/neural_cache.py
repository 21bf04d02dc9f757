"""A neural cache of each utterance's context text over a torch LSTM (``ncache:FILE.json``).

The continuous cache of Grave, Joulin & Usunier, "Improving neural language models with a
continuous cache" (ICLR 2017), eq. 2-3: the LSTM reads the context text (here the earlier
utterances' 1-best of the same recording, as ``rescorer context build`` writes them, one per
line) and keeps, for every word w_i it read, the top-layer output h_{i-1} that predicted it. At a
hypothesis position with output h_t,

    p_cache(w | h_t) = sum_{i: w_i = w} exp(theta h_t . h_{i-1}) / sum_i exp(theta h_t . h_{i-1})
    p(w | h_t)       = (1 - lambda) p_LSTM(w | h_t) + lambda p_cache(w | h_t)

so a word of the earlier utterances becomes likelier where the LSTM is in a state like the one
in which it was said. A unigram cache (``cache:``) raises every cached word everywhere; this one
raises a word where its earlier context matches, which is what a context must do to separate N-best
hypotheses that differ in one word. No training: ``theta`` and ``lambda`` are the only settings.

Each context line is read as a sentence of its own (``<s> w1 .. wn``, the state reset, as the
model was trained); ``<unk>`` and ``</s>`` are not cached (``</s>`` gets ``(1 - lambda)`` of the
LSTM's probability, a constant shift of every sentence), and at most ``max_words`` of the last
cached units are kept. A subword model caches and scores pieces. An utterance with an empty cache
(no context, or a recording's first utterance) is scored by the LSTM unchanged, so the model with
no context equals its base.

```json
{"format": "rescorer-neural-cache", "version": 1, "base": "lstm=torch:exp/lstm/best",
 "theta": 0.5, "lambda": 0.05, "field": "cache", "max_words": 2000}
```

A relative base path is relative to the JSON file's folder; the base must be a ``torch:`` model
(the cache reads its hidden states); loader options (case, device) go to it.
"""

from __future__ import annotations

import logging
import math
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from rescorer.core.context_key import ContextKey, history_lines
from rescorer.core.errors import InputError
from rescorer.core.json_input import json_number, read_format_json
from rescorer.core.output import write_format_json
from rescorer.lm_models.vocab import BOS_ID, EOS_ID, UNK_ID
from rescorer.lms import base_spec, load_inner, parse_spec
from rescorer.lms.contract import LMSpec
from rescorer.lms.torch import TorchLM

logger = logging.getLogger(__name__)

FORMAT = "rescorer-neural-cache"
VERSION = 1
DEFAULT_MAX_WORDS = 2000
# Memories kept (one per distinct context text; an N-best list's hypotheses share one).
MEMORIES = 256
# Context lines whose states are kept (a recording's earlier utterances, each run once).
LINES = 4096


def check_options(theta: float, lam: float, field: str, max_words: int) -> None:
    """ValueError unless theta >= 0, 0 < lam < 1, field is non-empty and max_words >= 1."""
    if not (isinstance(theta, int | float) and math.isfinite(theta) and theta >= 0):
        raise ValueError(f"theta must be a finite number >= 0, got {theta!r}")
    if not (isinstance(lam, int | float) and math.isfinite(lam) and 0.0 < lam < 1.0):
        raise ValueError(f"lambda must be between 0 and 1 (exclusive), got {lam!r}")
    if not field:
        raise ValueError("field must name a context field, got an empty string")
    if isinstance(max_words, bool) or not isinstance(max_words, int) or max_words < 1:
        raise ValueError(f"max_words must be an integer >= 1, got {max_words!r}")


@dataclass(frozen=True)
class NeuralCacheSpec:
    """The contents of an ``ncache:FILE.json``."""

    # Spec of the base model ([NAME=]torch:PATH).
    base: str
    # Flatness of the match between states: exp(theta h_t . h_i), eq. 2.
    theta: float
    # Weight of the cache distribution, 0 < lambda < 1 (eq. 3).
    lam: float
    # Context field whose text (one earlier utterance per line) fills the cache.
    field: str = "cache"
    # At most this many of the last cached units are kept.
    max_words: int = DEFAULT_MAX_WORDS

    def __post_init__(self) -> None:
        parse_spec(self.base)
        check_options(self.theta, self.lam, self.field, self.max_words)

    def save(self, path: str | Path) -> None:
        fields = {"base": self.base, "theta": self.theta, "lambda": self.lam}
        write_format_json(
            path, FORMAT, VERSION, {**fields, "field": self.field, "max_words": self.max_words}
        )

    @classmethod
    def load(cls, path: str | Path) -> NeuralCacheSpec:
        path = Path(path)
        data = read_format_json(path, FORMAT, VERSION)
        base, field = base_spec(data, path), data.get("field", "cache")
        max_words = data.get("max_words", DEFAULT_MAX_WORDS)
        if not isinstance(field, str):
            raise InputError('expected "field": the name of a context field', path)
        try:
            return cls(
                base,
                json_number(data.get("theta"), path, None, "theta"),
                json_number(data.get("lambda"), path, None, "lambda"),
                field,
                max_words,
            )
        except (TypeError, ValueError) as err:
            raise InputError(str(err), path) from None


@dataclass(frozen=True)
class Memory:
    """One context's cache: the states that predicted each cached unit, and the units."""

    # h_{i-1}, (M, d), in the model's dtype.
    keys: Tensor
    # w_i, (M,) long.
    units: Tensor


class NeuralCache:
    """The cache side of a :class:`rescorer.lms.torch.TorchLM` (see the module docstring): the
    memory of each context text, and the mixing of the LSTM's values with it."""

    def __init__(
        self, theta: float, lam: float, field: str = "cache", max_words: int = DEFAULT_MAX_WORDS
    ) -> None:
        check_options(theta, lam, field, max_words)
        self.theta = float(theta)
        self.lam = float(lam)
        self.field = field
        self.max_words = max_words
        self._log_keep = math.log1p(-self.lam)
        self._log_lam = math.log(self.lam)
        # context key (the weights' fields and the cache text) -> its memory
        self._memories: OrderedDict[ContextKey, Memory | None] = OrderedDict()
        # (weights' context key, a line's unit ids) -> its states (n, d) and units (n,)
        self._lines: OrderedDict[tuple[ContextKey, tuple[int, ...]], tuple[Tensor, Tensor]] = (
            OrderedDict()
        )

    def clear(self) -> None:
        """Forget every memory and line state (they are built again when next needed)."""
        self._memories.clear()
        self._lines.clear()

    def memory(self, lm: TorchLM, key: ContextKey) -> Memory | None:
        """The memory of ``key``'s cache text under ``lm`` (None: nothing cached)."""
        if key in self._memories:  # looked up at every streaming step: by the key, unparsed
            self._memories.move_to_end(key)
            return self._memories[key]
        lines = history_lines(key, self.field)
        memory = self._build(lm, key, lines) if lines else None
        self._memories[key] = memory
        if len(self._memories) > MEMORIES:
            self._memories.popitem(last=False)
        return memory

    def _build(self, lm: TorchLM, key: ContextKey, lines: Sequence[Sequence[str]]) -> Memory | None:
        """The lines' states and units, each line run once per weights (a recording's cache
        grows by a line per utterance: the earlier lines' states are kept, not run again)."""
        weights_key = lm._model_key(key)  # line states depend on the weights, not the cache
        ids, _ = lm._ids(lines)
        todo = [
            x
            for x in dict.fromkeys(tuple(x) for x in ids)
            if x and (weights_key, x) not in self._lines
        ]
        if todo:
            self._run_lines(lm, weights_key, key, todo)
        keys, units = [], []
        for x in ids:
            if x:
                k, u = self._lines[(weights_key, tuple(x))]
                keys.append(k)
                units.append(u)
        if not keys or not sum(len(u) for u in units):
            return None
        return Memory(torch.cat(keys)[-self.max_words :], torch.cat(units)[-self.max_words :])

    def _run_lines(
        self, lm: TorchLM, weights_key: ContextKey, key: ContextKey, lines: list[tuple[int, ...]]
    ) -> None:
        n, longest = len(lines), max(len(x) for x in lines)
        tokens = torch.full((n, longest), BOS_ID, dtype=torch.long)
        for i, x in enumerate(lines):
            tokens[i, 1 : len(x)] = torch.tensor(x[:-1], dtype=torch.long)  # <s> w1 .. w_{n-1}
        with torch.inference_mode():
            top = lm.model.hidden(tokens.to(lm.device), adapted=lm._adapted(key))  # (n, T, d)
        for i, x in enumerate(lines):  # top[i, t] = h_{t-1} predicted x[t]
            keep = [t for t, unit in enumerate(x) if unit not in (UNK_ID, EOS_ID)]
            self._lines[(weights_key, x)] = (
                top[i, keep],
                torch.tensor([x[t] for t in keep], dtype=torch.long, device=lm.device),
            )
            if len(self._lines) > LINES:
                self._lines.popitem(last=False)

    def mix(self, values: Tensor, top: Tensor, targets: Tensor, memory: Memory | None) -> Tensor:
        """ln((1 - lambda) p_LSTM + lambda p_cache) of ``targets`` (M,) at states ``top``
        (M, d), from the LSTM's natural-log ``values`` (M,); unchanged without a memory."""
        if memory is None or not len(targets):
            return values
        scores = self.theta * (top.float() @ memory.keys.float().T)  # (M, cached)
        attention = torch.softmax(scores, dim=1)
        hits = memory.units.unsqueeze(0) == targets.unsqueeze(1)  # (M, cached)
        p_cache = (attention * hits).sum(dim=1).double()
        base = values.double() + self._log_keep
        cached = torch.log(p_cache) + self._log_lam  # -inf where the target is not cached
        return torch.logaddexp(base, cached).to(values.dtype)

    def __repr__(self) -> str:
        return (
            f"NeuralCache(theta={self.theta:g}, lambda={self.lam:g}, field={self.field!r}, "
            f"max_words={self.max_words})"
        )


def load_neural_cache(spec: LMSpec, options: Mapping[str, Any]) -> TorchLM:
    """The ``ncache`` loader of :data:`rescorer.lms.LOADERS`: a ``torch:`` base with the cache
    attached (options go to the base)."""
    ns = NeuralCacheSpec.load(spec.path)
    base = load_inner(ns.base, spec, options)
    if not isinstance(base, TorchLM):
        raise InputError(
            f"a neural cache needs a torch: base model (it reads the LSTM's states), got "
            f"{ns.base!r}",
            spec.path,
        )
    base.attach_cache(NeuralCache(ns.theta, ns.lam, ns.field, ns.max_words))
    base.name = spec.name
    logger.info("neural cache %s: base %s, %r", spec.path, ns.base, base.cache)
    return base
