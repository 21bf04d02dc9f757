"""CUE models (:mod:`lm_models.cue.model`) behind the LanguageModel contract (``cue:DIR``).

Contexts are the per-utterance context records (``--contexts`` files, :mod:`rescorer.contexts`):
the fields the checkpoint declares (``context_fields``) are rendered as English strings
("genre: news"), embedded by the checkpoint's frozen string encoder and folded into one CUE
vector. That vector is computed once per distinct record and cached (the hypotheses of an N-best
list share their utterance's record), so rescoring runs only the sentence encoder and decoder.
A record without any declared field (or no record) gets the model's empty-context vector.

Words are case-mapped into the vocabulary as for KenLM (``case``); words outside it are flagged
OOV and scored as ``<unk>`` (its whole probability: the vocabulary is closed). Natural logs.
Streaming (:meth:`CUELanguageModel.advance`) re-runs the prefix (no key-value cache): fine for
prediction of short texts, not meant for long ones.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from lm_models.cue.model import encode_batch, load_cue
from lm_models.vocab import BOS_ID, EOS, EOS_ID
from rescorer.core.device import resolve_device
from rescorer.lms.contract import Context, LMSpec
from rescorer.text import CASE_MODES, case_function, choose_case

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class CUEState:
    """A streaming state: the CUE vector of the sentence's context and the word ids so far."""

    # (dim,) float32 e_cue of the context record.
    cue: np.ndarray
    # Vocabulary ids of the words scored so far (no <s>).
    ids: tuple[int, ...]


class CUELanguageModel:
    """A CUE checkpoint folder as a word-level LanguageModel."""

    units = "word"

    def __init__(
        self,
        path: str | Path,
        name: str | None = None,
        case: str = "auto",
        device: str | None = None,
        embedder: Any = None,
        batch_size: int = 64,
    ) -> None:
        path = Path(path)
        if case not in CASE_MODES:
            raise ValueError(f"case must be one of {CASE_MODES}, got {case!r}")
        if not path.is_dir():
            raise ValueError(f"CUE checkpoint folder not found: {path}")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.lm = load_cue(path, resolve_device(device), embedder)
        self.name = name or path.name
        self.path = path
        self._batch_size = batch_size
        self._case = case
        self._map: Callable[[str], str] | None = None if case == "auto" else case_function(case)
        self._cue_cache: dict[tuple, np.ndarray] = {}
        self.fields = tuple(f for f, _ in self.lm.config.context_fields)

    # -- words ------------------------------------------------------------------------------------
    def _known(self, word: str) -> bool:
        return word in self.lm.vocab

    def _mapping(self, sentences: Sequence[Sequence[str]]) -> Callable[[str], str]:
        if self._map is None:
            self._case = choose_case((w for s in sentences for w in s), self._known)
            self._map = case_function(self._case)
        return self._map

    @property
    def case(self) -> str:
        return self._case

    def oov_flags(self, sentences: Sequence[Sequence[str]]) -> list[np.ndarray]:
        fn = self._mapping(sentences)
        return [np.array([not self._known(fn(w)) for w in s], dtype=bool) for s in sentences]

    # -- contexts ---------------------------------------------------------------------------------
    def _key(self, record: Context | None) -> tuple:
        if record is None:
            return ()
        return tuple((f, str(record[f])) for f in self.fields if record.get(f) is not None)

    def cue_vectors(self, contexts: Sequence[Context | None]) -> np.ndarray:
        """(N, dim) CUE vectors of the records, each distinct record computed once."""
        keys = [self._key(r) for r in contexts]
        missing = list(dict.fromkeys(k for k in keys if k not in self._cue_cache))
        if missing:
            vecs = self.lm.cue_vectors([dict(k) for k in missing])
            self._cue_cache.update(zip(missing, vecs, strict=True))
        dim = self.lm.config.dim
        if not keys:
            return np.zeros((0, dim), dtype=np.float32)
        return np.stack([self._cue_cache[k] for k in keys])

    # -- scoring ----------------------------------------------------------------------------------
    def token_logprobs(
        self,
        sentences: Sequence[Sequence[str]],
        contexts: Sequence[Context | None] | None = None,
    ) -> list[np.ndarray]:
        if not sentences:
            return []
        if contexts is not None and len(contexts) != len(sentences):
            raise ValueError(f"{len(contexts)} contexts for {len(sentences)} sentences")
        fn = self._mapping(sentences)
        cue = self.cue_vectors(contexts if contexts is not None else [None] * len(sentences))
        mapped = [[fn(w) for w in s] for s in sentences]
        return self.lm.token_logprobs(mapped, cue=cue, batch_size=self._batch_size)

    def sentence_logprobs(
        self,
        sentences: Sequence[Sequence[str]],
        contexts: Sequence[Context | None] | None = None,
    ) -> np.ndarray:
        return np.array([lp.sum() for lp in self.token_logprobs(sentences, contexts)])

    # -- streaming --------------------------------------------------------------------------------
    def start(self, context: Context | None = None) -> CUEState:
        return CUEState(self.cue_vectors([context])[0], ())

    def vocabulary(self) -> list[str]:
        """The model's units, id order (``next_logprobs(state)[i]`` is the i-th one's)."""
        return self.lm.vocab.tokens

    def to_units(self, words: Sequence[str]) -> list[str]:
        """``words`` in the model's case (as scored)."""
        fn = self._mapping([words])
        return [fn(w) for w in words]

    @torch.no_grad()
    def next_logprobs(self, state: CUEState) -> np.ndarray:
        """(V,) ln P of every vocabulary unit after ``state`` (the optional prediction API)."""
        model = self.lm.model
        model.eval()
        device = self.lm.device
        inputs, _ = encode_batch([state.ids], device)
        cue = torch.from_numpy(np.asarray(state.cue, dtype=np.float32)[None]).to(device)
        return model(inputs, cue)[0, len(state.ids)].double().cpu().numpy()

    def advance(
        self, states: Sequence[CUEState], tokens: Sequence[str]
    ) -> tuple[np.ndarray, list[CUEState]]:
        if len(states) != len(tokens):
            raise ValueError(f"got {len(states)} states but {len(tokens)} tokens")
        if not tokens:
            return np.zeros(0), []
        fn = self._map or case_function("none")
        ids = [EOS_ID if t == EOS else self.lm.vocab.token_id(fn(t)) for t in tokens]
        if any(i == BOS_ID for i in ids):
            raise ValueError("<s> is never predicted; start a sentence with start()")
        scores = np.array([self.next_logprobs(s)[i] for s, i in zip(states, ids, strict=True)])
        return scores, [CUEState(s.cue, (*s.ids, i)) for s, i in zip(states, ids, strict=True)]

    def __repr__(self) -> str:
        cfg = self.lm.config
        return (
            f"CUELanguageModel({str(self.path)!r}, sentence={cfg.sentence.kind}, "
            f"fields={list(self.fields)}, embedder={cfg.embedder!r}, case={self._case!r})"
        )


def load_cue_lm(spec: LMSpec, options: Mapping[str, Any]) -> CUELanguageModel:
    """The ``cue`` loader of :data:`rescorer.lms.LOADERS` (options: case, device, embedder)."""
    return CUELanguageModel(
        spec.path,
        name=spec.name,
        case=options.get("case", "auto"),
        device=options.get("device"),
        embedder=options.get("embedder"),
    )
