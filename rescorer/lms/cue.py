"""CUE models (:mod:`rescorer.lm_models.cue.model`) behind the LanguageModel contract (``cue:DIR``).

Contexts are the per-utterance context records (``--contexts`` files, :mod:`rescorer.contexts`):
the fields the checkpoint declares (``context_fields``) are rendered as English strings
("genre: news"), embedded by the checkpoint's frozen string encoder and folded into one CUE
vector. That vector is computed once per distinct record and cached (the hypotheses of an N-best
list share their utterance's record), so rescoring runs only the sentence encoder and decoder.
A record without any declared field (or no record) gets the model's empty-context vector.

Words are case-mapped into the vocabulary as for KenLM (``case``); words outside it are flagged
OOV and scored as ``<unk>`` (its whole probability: the vocabulary is closed). A subword
checkpoint (``tokenizer.model`` beside the weights) cuts every word into its pieces and scores it
as the sum of theirs: no word is OOV. Natural logs.
Streaming (:meth:`CUELanguageModel.advance`) re-runs the prefix (no key-value cache): fine for
prediction of short texts, not meant for long ones.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rescorer.core.device import resolve_device
from rescorer.lm_models.cue.model import encode_batch, load_cue
from rescorer.lm_models.vocab import BOS_ID, EOS, EOS_ID
from rescorer.lms.base import WordLM, check_advance, checkpoint_folder, loader, positive
from rescorer.lms.contract import Context
from rescorer.lms.word_vocab import CaseMapping, SubwordVocab

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class CUEState:
    """A streaming state: the CUE vector of the sentence's context and the word ids so far."""

    # (dim,) float32 e_cue of the context record.
    cue: np.ndarray
    # Unit ids (words, or pieces of a subword model) scored so far (no <s>).
    ids: tuple[int, ...]


class CUELanguageModel(WordLM):
    """A CUE checkpoint folder as a word-level LanguageModel."""

    def __init__(
        self,
        path: str | Path,
        name: str | None = None,
        case: str = "auto",
        device: str | None = None,
        embedder: Any = None,
        batch_size: int = 64,
    ) -> None:
        path = checkpoint_folder(path, "CUE")
        self._batch_size = positive("batch_size", batch_size)
        self.lm = load_cue(path, resolve_device(device), embedder)
        self.name = name or path.name
        self.path = path
        tokenizer = self.lm.tokenizer
        self.words: CaseMapping = (
            CaseMapping(case, self._known) if tokenizer is None else SubwordVocab(tokenizer, case)
        )
        self.units = "word" if tokenizer is None else "subword"
        self._cue_cache: dict[tuple, np.ndarray] = {}
        self.fields = tuple(f for f, _ in self.lm.config.context_fields)

    def _known(self, word: str) -> bool:
        return word in self.lm.vocab

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
        fn = self.words.mapping(sentences)
        cue = self.cue_vectors(contexts if contexts is not None else [None] * len(sentences))
        mapped = [[fn(w) for w in s] for s in sentences]
        return self.lm.token_logprobs(mapped, cue=cue, batch_size=self._batch_size)

    # -- streaming --------------------------------------------------------------------------------
    def start(self, context: Context | None = None) -> CUEState:
        return CUEState(self.cue_vectors([context])[0], ())

    def vocabulary(self) -> list[str]:
        """The model's units, id order (``next_logprobs(state)[i]`` is the i-th one's): words,
        or the pieces of a subword model."""
        return self.lm.vocab.tokens

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
        if check_advance(states, tokens):
            return np.zeros(0), []
        fn = self.words.current()
        units = [(EOS_ID,) if t == EOS else tuple(self.lm.encode_words([fn(t)])) for t in tokens]
        if any(BOS_ID in u for u in units):
            raise ValueError("<s> is never predicted; start a sentence with start()")
        scores, out = np.zeros(len(tokens)), []
        for k, (state, ids) in enumerate(zip(states, units, strict=True)):
            for i in ids:  # a word's pieces, each given the ones before it
                scores[k] += self.next_logprobs(state)[i]
                state = CUEState(state.cue, (*state.ids, i))
            out.append(state)
        return scores, out

    def describe(self) -> dict[str, Any]:
        cfg = self.lm.config
        return {
            "sentence": cfg.sentence.kind,
            "fields": list(self.fields),
            "embedder": cfg.embedder,
            "units": self.units,
            "case": self.case,
        }


load_cue_lm = loader(CUELanguageModel, "device", "embedder")
