"""Linear interpolation of language models, with mixture weights by EM.

p(w|h) = sum_i l_i p_i(w|h), token by token, in natural logs by log-sum-exp:
ln p = logsumexp_i(ln l_i + ln p_i). The weights l_i (non-negative, summing to 1) that maximise
the likelihood of dev text come from EM (:func:`em_weights`), as SRILM's ``compute-best-mix``
finds them: E-step, the posterior of each component for each token,
r_ti = l_i p_i(t) / sum_j l_j p_j(t); M-step, l_i = mean_t r_ti. Each step cannot lower the
likelihood, and the likelihood is concave in the weights, so EM converges to the optimum.

A mixture is one :class:`MixtureLM` behind the LanguageModel contract, so ``rescorer ppl``,
``score``, ``tune`` and ``rescore`` use it like any model. On the command line it is the spec
``mix:FILE.json``; the file (written by ``rescorer mix-weights``) lists component specs and
weights:

```json
{"format": "rescorer-mixture", "version": 1,
 "components": [{"spec": "3gram=kenlm:3gram.bin", "weight": 0.62},
                {"spec": "fnlm=fnlm:fnlm_dir", "weight": 0.38}],
 "meta": {"text": "dev.txt", "tokens": 10542}}
```

Relative model paths are relative to the folder of the JSON file. Components must have the same
units (``word``) and give the same number of tokens per sentence. A word is OOV for the mixture
when it is OOV for every component (the union of their vocabularies, as in SRILM); each
component scores a word it does not know with its own ``<unk>``.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rescorer.core.errors import InputError
from rescorer.core.json_input import json_number, read_format_json
from rescorer.core.output import write_format_json
from rescorer.lms import load_inner, parse_spec
from rescorer.lms.base import TokenSumLM, check_advance
from rescorer.lms.contract import Context, LanguageModel, LMSpec

logger = logging.getLogger(__name__)

FORMAT = "rescorer-mixture"
VERSION = 1


def _check_weights(weights: Sequence[float], k: int) -> np.ndarray:
    w = np.asarray(weights, dtype=np.float64)
    if w.shape != (k,):
        raise ValueError(f"expected {k} mixture weights, got {len(w)}")
    if not np.all(np.isfinite(w)) or (w < 0).any() or not math.isclose(w.sum(), 1.0, abs_tol=1e-6):
        raise ValueError(f"mixture weights must be >= 0 and sum to 1, got {list(w)}")
    return w


def mix_logprobs(logprobs: np.ndarray, weights: Sequence[float]) -> np.ndarray:
    """ln sum_i l_i p_i per row of ``logprobs`` (T, K) natural-log probabilities."""
    lp = np.asarray(logprobs, dtype=np.float64)
    if lp.ndim != 2:
        raise ValueError(f"expected a (tokens, components) array, got shape {lp.shape}")
    w = _check_weights(weights, lp.shape[1])
    with np.errstate(divide="ignore"):
        joint = lp + np.log(w)
    peak = joint.max(axis=1, keepdims=True)
    peak[~np.isfinite(peak)] = 0.0
    with np.errstate(divide="ignore"):
        return (peak + np.log(np.exp(joint - peak).sum(axis=1, keepdims=True)))[:, 0]


@dataclass(frozen=True)
class EMResult:
    """Mixture weights estimated by :func:`em_weights`."""

    # The weights, one per component (sum 1).
    weights: tuple[float, ...]
    # EM iterations run, and whether the likelihood stopped changing before max_iter.
    iterations: int
    converged: bool
    # ln likelihood of the tokens under the mixture with these weights, and the token count.
    log_likelihood: float
    tokens: int

    @property
    def perplexity(self) -> float:
        return math.exp(-self.log_likelihood / self.tokens) if self.tokens else math.nan


def em_weights(
    logprobs: np.ndarray,
    init: Sequence[float] | None = None,
    max_iter: int = 10_000,
    tol: float = 1e-8,
) -> EMResult:
    """Weights maximising sum_t ln sum_i l_i p_i(t) for ``logprobs`` (T, K) natural logs.

    Starts from ``init`` (default uniform); stops when no weight changes by more than ``tol``
    in an iteration, or after ``max_iter`` iterations.
    """
    lp = np.asarray(logprobs, dtype=np.float64)
    if lp.ndim != 2 or lp.shape[0] == 0 or lp.shape[1] == 0:
        raise ValueError(f"expected a non-empty (tokens, components) array, got {lp.shape}")
    t, k = lp.shape
    if np.isnan(lp).any() or np.isposinf(lp).any():
        raise ValueError("log-probabilities must not be NaN or +inf")
    w = _check_weights(init, k) if init is not None else np.full(k, 1.0 / k)
    converged = False
    iterations = 0
    while iterations < max_iter:
        iterations += 1
        total = mix_logprobs(lp, w)
        if np.isneginf(total).any():
            raise ValueError("some token has probability 0 under every component")
        with np.errstate(divide="ignore"):
            post = np.exp(lp + np.log(w) - total[:, None])  # E-step: r_ti
        new = post.mean(axis=0)  # M-step
        new /= new.sum()
        change = float(np.abs(new - w).max())
        w = new
        if change < tol:
            converged = True
            break
    final = float(mix_logprobs(lp, w).sum())
    return EMResult(tuple(float(x) for x in w), iterations, converged, final, t)


# -- mixture files --------------------------------------------------------------------------------


@dataclass(frozen=True)
class MixtureSpec:
    """The content of a mixture file."""

    # Component model specs [NAME=]KIND:PATH, paths relative to the file's folder.
    components: tuple[str, ...]
    # One weight per component (>= 0, sum 1).
    weights: tuple[float, ...]
    # Free-form provenance (dev text, tokens, perplexities).
    meta: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "components", tuple(self.components))
        object.__setattr__(self, "weights", tuple(float(w) for w in self.weights))
        if len(self.components) < 1:
            raise ValueError("a mixture needs at least one component")
        _check_weights(self.weights, len(self.components))
        for spec in self.components:
            parse_spec(spec)

    def save(self, path: str | Path) -> None:
        components = zip(self.components, self.weights, strict=True)
        write_format_json(
            path,
            FORMAT,
            VERSION,
            {
                "components": [{"spec": s, "weight": w} for s, w in components],
                "meta": dict(self.meta),
            },
        )

    @classmethod
    def load(cls, path: str | Path) -> MixtureSpec:
        path = Path(path)
        data = read_format_json(path, FORMAT, VERSION)
        comps = data.get("components")
        if not isinstance(comps, list) or not all(
            isinstance(c, dict) and isinstance(c.get("spec"), str) for c in comps
        ):
            raise InputError('expected "components": [{"spec": ..., "weight": ...}, ...]', path)
        try:
            return cls(
                tuple(c["spec"] for c in comps),
                tuple(json_number(c.get("weight"), path, None, "weight") for c in comps),
                data.get("meta") or {},
            )
        except (TypeError, ValueError) as err:
            raise InputError(str(err), path) from None


def relative_spec(spec: LMSpec, base: Path) -> str:
    """``spec`` as text with its path relative to ``base`` (for a mixture file in ``base``)."""
    rel = os.path.relpath(spec.path.resolve(), base.resolve())
    return f"{spec.name}={spec.kind}:{rel}"


# -- the model --------------------------------------------------------------------------------


class MixtureLM(TokenSumLM):
    """Linear interpolation of word-level models behind the LanguageModel contract."""

    def __init__(
        self, components: Sequence[LanguageModel], weights: Sequence[float], name: str = "mix"
    ) -> None:
        if not components:
            raise ValueError("a mixture needs at least one component")
        units = {c.units for c in components}
        if len(units) != 1:
            raise ValueError(f"mixture components must have the same units, got {sorted(units)}")
        self.components = list(components)
        self.weights = tuple(float(w) for w in _check_weights(weights, len(components)))
        self.name = name
        self.units = units.pop()

    def token_logprobs(
        self,
        sentences: Sequence[Sequence[str]],
        contexts: Sequence[Context | None] | None = None,
    ) -> list[np.ndarray]:
        per_model = [c.token_logprobs(sentences, contexts) for c in self.components]
        out = []
        for i in range(len(sentences)):
            rows = [lp[i] for lp in per_model]
            if len({len(r) for r in rows}) != 1:
                names = [c.name for c in self.components]
                raise ValueError(
                    f"sentence {i}: components {names} give {[len(r) for r in rows]} tokens; "
                    "a linear mixture needs the same tokens from every model"
                )
            out.append(mix_logprobs(np.stack(rows, axis=1), self.weights))
        return out

    def oov_flags(self, sentences: Sequence[Sequence[str]]) -> list[np.ndarray]:
        flags = [c.oov_flags(sentences) for c in self.components]
        return [np.logical_and.reduce([f[i] for f in flags]) for i in range(len(sentences))]

    def start(self, context: Context | None = None) -> tuple[Any, ...]:
        return tuple(c.start(context) for c in self.components)

    def advance(self, states: Sequence[Any], tokens: Sequence[str]) -> tuple[np.ndarray, list]:
        check_advance(states, tokens)
        columns, next_states = [], []
        for i, comp in enumerate(self.components):
            lp, nxt = comp.advance([s[i] for s in states], tokens)
            columns.append(np.asarray(lp, dtype=np.float64))
            next_states.append(nxt)
        mixed = mix_logprobs(np.stack(columns, axis=1), self.weights)
        return mixed, [tuple(ns[j] for ns in next_states) for j in range(len(tokens))]

    def __repr__(self) -> str:
        parts = ", ".join(
            f"{c.name}:{w:.3f}" for c, w in zip(self.components, self.weights, strict=True)
        )
        return f"MixtureLM({parts})"


def load_mixture(spec: LMSpec, options: Mapping[str, Any]) -> MixtureLM:
    """The ``mix`` loader of :data:`rescorer.lms.LOADERS`: options go to every component."""
    mix = MixtureSpec.load(spec.path)
    components = [load_inner(s, spec, options) for s in mix.components]
    logger.info("mixture %s: %s", spec.path, mix.weights)
    return MixtureLM(components, mix.weights, name=spec.name)
