"""Multiplicative (attribute-gated) LBLs (:mod:`rescorer.lm_models.lbl.model`) behind the
LanguageModel contract (``lbl:DIR``).

Words map into the checkpoint's vocabulary after the case mapping (:class:`WordVocab`, as for
``torch:`` models); a word outside it is scored as ``<unk>`` and flagged by :meth:`oov_flags`.

Context records give the attribute values: a record ``{"genre": "news"}`` selects the genre's
vector of the lookup table. The records are normalised by :class:`ContextKeys` like every other
context-aware model: fields the model does not declare are ignored, a value it never saw in
training (an unseen document, say) and a missing field use the attribute's expected vector (the
mean of f(L_a) over the training values). A model without attributes ignores contexts.

Scoring: every token of every sentence becomes one (history, target, attributes) row; the
n-gram model needs nothing else, so identical rows (the shared n-grams of N-best hypotheses) are
scored once. Streaming states hold the attribute ids and the last n-1 word ids. All scores are
natural logs.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rescorer.core.context_key import ContextField, ContextKeys
from rescorer.core.device import resolve_device
from rescorer.lm_models.lbl.model import attribute_ids, history_windows, load_lbl
from rescorer.lm_models.vocab import BOS_ID, EOS_ID
from rescorer.lms.base import WordLM, check_advance, checkpoint_folder, loader, positive
from rescorer.lms.contract import Context
from rescorer.lms.word_vocab import WordVocab

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class LBLState:
    """A streaming state: attribute value ids and the last n-1 word ids, most recent first."""

    # Attribute value id per attribute of the model (-1: expected vector).
    attrs: tuple[int, ...]
    # Word ids of the history, most recent first (<s> = 1 before the sentence start).
    history: tuple[int, ...]


class LBLLanguageModel(WordLM):
    """An LBL checkpoint folder as a word-level LanguageModel with attribute contexts."""

    def __init__(
        self,
        path: str | Path,
        name: str | None = None,
        case: str = "auto",
        device: str | None = None,
        batch_size: int = 4096,
    ) -> None:
        path = checkpoint_folder(path, "LBL")
        self._batch_size = positive("batch_size", batch_size)
        self.device = resolve_device(device)
        self.model, vocab = load_lbl(path, self.device)
        self.config = self.model.config
        self.name = name or path.name
        self.path = path
        self.words = WordVocab(vocab.tokens, case)
        fields = [ContextField(a.name, "categorical", a.values) for a in self.config.attributes]
        self._keys = ContextKeys(fields, self.name, logger)

    def _attrs_of(self, record: Mapping[str, Any] | None) -> tuple[int, ...]:
        return attribute_ids(self.config, dict(self._keys.key(record)))

    @torch.no_grad()
    def _score_rows(
        self, history: np.ndarray, targets: np.ndarray, attrs: np.ndarray
    ) -> np.ndarray:
        """ln P(target | history, attributes) per row, each distinct row computed once."""
        n = len(targets)
        if n == 0:
            return np.zeros(0)
        rows = np.concatenate([history, targets[:, None], attrs], axis=1)
        unique, inverse = np.unique(rows, axis=0, return_inverse=True)
        n1 = history.shape[1]
        out = np.empty(len(unique), dtype=np.float64)
        for lo in range(0, len(unique), self._batch_size):
            chunk = torch.from_numpy(unique[lo : lo + self._batch_size]).to(self.device)
            lp = self.model(chunk[:, :n1], chunk[:, n1], attrs=chunk[:, n1 + 1 :])
            out[lo : lo + len(chunk)] = lp.double().cpu().numpy()
        return out[inverse.reshape(-1)]

    def token_logprobs(
        self,
        sentences: Sequence[Sequence[str]],
        contexts: Sequence[Context | None] | None = None,
    ) -> list[np.ndarray]:
        if not sentences:
            return []
        keys = self._keys.keys(len(sentences), contexts)
        ids = self.words.ids(sentences)
        order = self.config.order
        hist, tgt, attrs = [], [], []
        for words, key in zip(ids, keys, strict=True):
            hist.append(history_windows(words, order))
            tgt.append(np.asarray([*words, EOS_ID], dtype=np.int64))
            a = attribute_ids(self.config, dict(key))
            attrs.append(np.tile(np.asarray(a, dtype=np.int64).reshape(1, -1), (len(words) + 1, 1)))
        flat = self._score_rows(np.concatenate(hist), np.concatenate(tgt), np.concatenate(attrs))
        bounds = np.cumsum([0, *(len(w) + 1 for w in ids)])
        return [flat[a:b] for a, b in zip(bounds[:-1], bounds[1:], strict=True)]

    # -- streaming --------------------------------------------------------------------------------
    def start(self, context: Context | None = None) -> LBLState:
        return LBLState(self._attrs_of(context), (BOS_ID,) * (self.config.order - 1))

    def advance(
        self, states: Sequence[LBLState], tokens: Sequence[str]
    ) -> tuple[np.ndarray, list[LBLState]]:
        if check_advance(states, tokens):
            return np.zeros(0), []
        ids = self.words.token_ids(tokens)
        n_attr = len(self.config.attributes)
        scores = self._score_rows(
            np.array([s.history for s in states], dtype=np.int64),
            np.array(ids, dtype=np.int64),
            np.array([s.attrs for s in states], dtype=np.int64).reshape(len(states), n_attr),
        )
        new_states = [
            LBLState(s.attrs, (i, *s.history[:-1])) for s, i in zip(states, ids, strict=True)
        ]
        return scores, new_states

    def describe(self) -> dict[str, Any]:
        cfg = self.config
        return {
            "order": cfg.order,
            "factors": cfg.factors,
            "attributes": [a.name for a in cfg.attributes],
            "case": self.case,
        }


load_lbl_lm = loader(LBLLanguageModel, "device")
