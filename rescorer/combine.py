"""Log-linear combination of hypothesis scores, and reranking.

``total = sum_k w_k * score_k + w_len * n_words`` over named score columns of the N-best lists
(first-pass scores and LM features alike). Weights live in a small JSON file written by ``tune``
and read by ``rescore``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rescorer.core.constants import LENGTH_FEATURE, TOTAL_SCORE
from rescorer.core.errors import InputError, shorten
from rescorer.core.json_input import json_number, json_object, json_string, read_json
from rescorer.core.output import atomic_write
from rescorer.nbest import NBest, NBestList

WEIGHTS_FORMAT = "rescorer-weights"
WEIGHTS_VERSION = 1
_WEIGHTS_KEYS = frozenset({"format", "version", "features", "length", "meta", "posterior_scale"})


@dataclass(frozen=True)
class Weights:
    """Weights of a log-linear combination."""

    # Score name -> weight. Scores are natural-log values (higher is better) or plain features.
    features: Mapping[str, float]
    # Weight of the number of words in the hypothesis (a word insertion bonus when positive).
    length: float = 0.0
    # Free-form provenance written by `tune` (dev set, errors, options); not used for scoring.
    meta: Mapping[str, Any] = field(default_factory=dict)
    # Scale S of the hypothesis posteriors softmax(S * total) of posterior decoding
    # (rescorer.mbr), when `tune --objective posterior` chose one; None: not tuned.
    posterior_scale: float | None = None

    def __post_init__(self) -> None:
        if not self.features:
            raise ValueError("weights need at least one score feature")
        if LENGTH_FEATURE in self.features:
            raise ValueError(
                f"{LENGTH_FEATURE!r} is the word-count feature; give its weight as `length`"
            )
        if TOTAL_SCORE in self.features:
            raise ValueError(f"{TOTAL_SCORE!r} is reserved for the combined score, not a feature")
        for name, w in self.features.items():
            if not math.isfinite(w):
                raise ValueError(f"weight of {name!r} must be finite, got {w}")
        if not math.isfinite(self.length):
            raise ValueError(f"length weight must be finite, got {self.length}")
        if self.posterior_scale is not None and not (
            math.isfinite(self.posterior_scale) and self.posterior_scale > 0
        ):
            raise ValueError(
                f"posterior_scale must be a finite number > 0, got {self.posterior_scale}"
            )
        object.__setattr__(self, "features", {str(k): float(v) for k, v in self.features.items()})

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self.features)

    def vector(self) -> np.ndarray:
        """Weights in the column order of :func:`feature_matrix` (features, then length)."""
        return np.array([*self.features.values(), self.length], dtype=np.float64)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "format": WEIGHTS_FORMAT,
            "version": WEIGHTS_VERSION,
            "features": dict(self.features),
            "length": self.length,
        }
        if self.posterior_scale is not None:
            out["posterior_scale"] = self.posterior_scale
        out["meta"] = dict(self.meta)
        return out

    def save(self, path: str | Path) -> None:
        with atomic_write(path) as f:
            json.dump(self.to_json(), f, indent=2)
            f.write("\n")

    @classmethod
    def load(cls, path: str | Path) -> Weights:
        """Read a weights file; anything but the layout :meth:`to_json` writes is an InputError."""
        path = Path(path)
        data = read_json(path)
        if not isinstance(data, dict) or data.get("format") != WEIGHTS_FORMAT:
            raise InputError(f'expected a JSON object with "format": "{WEIGHTS_FORMAT}"', path)
        if data.get("version") != WEIGHTS_VERSION:
            raise InputError(
                f"weights version {data.get('version')!r} not supported "
                f"(expected {WEIGHTS_VERSION})",
                path,
            )
        unknown = sorted(set(data) - _WEIGHTS_KEYS)
        if unknown:
            raise InputError(
                f"expected only the keys {sorted(_WEIGHTS_KEYS)}, got {shorten(unknown[0])!r}", path
            )
        feats = json_object(data.get("features"), path, None, '"features"')
        features = {
            json_string(name, path, None, '"features" names'): json_number(
                w, path, None, f'"features" {shorten(name)!r}'
            )
            for name, w in feats.items()
        }
        length = json_number(data.get("length", 0.0), path, None, '"length"')
        meta = json_object(data.get("meta", {}), path, None, '"meta"')
        scale = data.get("posterior_scale")
        if scale is not None:
            scale = json_number(scale, path, None, '"posterior_scale"')
        try:
            return cls(features, length, meta, scale)
        except ValueError as err:
            raise InputError(str(err), path) from None


def check_features(nbest: NBest, names: Sequence[str]) -> None:
    """Raise ValueError unless every hypothesis has every score in ``names``."""
    available = nbest.score_names()
    missing = [n for n in names if n not in available]
    if missing:
        raise ValueError(
            f"score(s) {missing} not on every hypothesis; available: {list(available)}"
        )


def feature_matrix(nb: NBestList, names: Sequence[str]) -> np.ndarray:
    """``(n_hyps, len(names) + 1)`` matrix: the named scores, then the word count."""
    out = np.empty((len(nb), len(names) + 1), dtype=np.float64)
    for i, hyp in enumerate(nb):
        for j, name in enumerate(names):
            out[i, j] = hyp.scores[name]
        out[i, -1] = len(hyp.words)
    return out


def total_scores(nbest: NBest, weights: Weights) -> dict[str, np.ndarray]:
    """Combined score of every hypothesis, per utterance."""
    check_features(nbest, weights.names)
    w = weights.vector()
    return {utt: feature_matrix(nb, weights.names) @ w for utt, nb in nbest.items()}


def best_index(totals: np.ndarray) -> int:
    """Index of the best total; the earliest hypothesis wins a tie (first-pass order)."""
    return int(np.argmax(totals)) if len(totals) else -1


def rerank(nbest: NBest, weights: Weights) -> NBest:
    """Hypotheses re-sorted by combined score (stable), with the score added as ``total``."""
    totals = total_scores(nbest, weights)
    lists = []
    for utt, nb in nbest.items():
        t = totals[utt]
        order = sorted(range(len(nb)), key=lambda i: (-t[i], i))
        lists.append(
            NBestList(utt, tuple(nb.hyps[i].with_scores({TOTAL_SCORE: float(t[i])}) for i in order))
        )
    return NBest(lists, nbest.references)


def one_best(nbest: NBest, weights: Weights | None = None) -> dict[str, tuple[str, ...]]:
    """The best hypothesis per utterance: by ``weights``, or the list's own first when None.

    An utterance with no hypotheses gets the empty word sequence.
    """
    if weights is None:
        return {utt: (nb.hyps[0].words if len(nb) else ()) for utt, nb in nbest.items()}
    totals = total_scores(nbest, weights)
    return {
        utt: (nb.hyps[best_index(totals[utt])].words if len(nb) else ())
        for utt, nb in nbest.items()
    }
