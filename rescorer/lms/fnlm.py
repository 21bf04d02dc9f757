"""Factored neural LMs (:mod:`rescorer.lm_models.fnlm.model`) behind the LanguageModel contract
(``fnlm:DIR``).

N-best hypotheses are plain words without annotation, so each word's factors are computed by
the plain-text extractors of :mod:`rescorer.lm_models.fnlm.factors` (the word, lower-cased form,
stem, suffixes, shape). Factors that need annotation (lemma, POS, FEATS) come from the checkpoint's
lexicon (``lexicon.txt``: each training word's most frequent annotation, as the paper obtained
its factors from an analyser run over the text): a hypothesis word listed there gets that
annotation, any other word has unknown annotation factors and gets the model's unknown-factor
vector (section 6 of Alexandrescu & Kirchhoff 2006, strategy from the checkpoint unless given),
exactly as an unseen word. A model with annotation factors and no lexicon (trained before
lexicons existed) is refused: every history word would be unknown and its scores would not
depend on the history.

Words are case-mapped into the model's vocabulary as for KenLM (``case``). A word never seen in
training is flagged OOV and scored as ``<unk>`` with the unseen-word share
(rescorer.lm_models.fnlm.model); a rare training word is in the vocabulary and gets its share of
``<unk>``.

Scoring a batch: every token of every sentence becomes one (history, target) row; identical rows
(N-best hypotheses share most of their n-grams) are scored once. All scores are natural logs.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rescorer.core.constants import EOS
from rescorer.core.device import resolve_device
from rescorer.lm_models.fnlm.factors import (
    PLAIN_FACTORS,
    PlainWord,
    WordLike,
    check_strategy,
    needs_annotation,
    words_of_text,
)
from rescorer.lm_models.fnlm.model import LEXICON_FILE, EncodedTokens, load_fnlm
from rescorer.lms.base import WordLM, check_advance, checkpoint_folder, loader, positive
from rescorer.lms.contract import Context
from rescorer.lms.word_vocab import CaseMapping

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class FNLMState:
    """A streaming state: the factor ids of the last n-1 words, most recent first."""

    history: tuple[tuple[int, ...], ...]


class FNLMLanguageModel(WordLM):
    """An FNLM checkpoint folder as a word-level LanguageModel."""

    def __init__(
        self,
        path: str | Path,
        name: str | None = None,
        case: str = "auto",
        device: str | None = None,
        strategy: str | None = None,
        batch_size: int = 4096,
    ) -> None:
        words = CaseMapping(case, self._known)
        path = checkpoint_folder(path, "FNLM")
        self._batch_size = positive("batch_size", batch_size)
        self.device = resolve_device(device)
        self._lm = load_fnlm(path, self.device)
        cfg = self._lm.config
        self.strategy = check_strategy(strategy or cfg.unk_strategy)
        self.name = name or path.name
        self.path = path
        self.words = words
        # Factors that plain text cannot give; the lexicon supplies them (None: not needed).
        self.missing_factors = tuple(f for f in cfg.factors if needs_annotation(f))
        self.lexicon = self._lm.lexicon if self.missing_factors else None
        if self.missing_factors and self.lexicon is None:
            raise ValueError(
                f"{path}: factors {list(self.missing_factors)} need annotation that N-best text "
                f"does not have, and the checkpoint has no {LEXICON_FILE} to supply it (it "
                "predates lexicons); retrain it with fnlm-train, or use a model with plain-text "
                f"factors only ({list(PLAIN_FACTORS)})"
            )
        if self.lexicon is not None:
            logger.info(
                "%s: factors %s from the training lexicon (%d words); other words have them "
                "unknown (strategy %s)",
                path,
                list(self.missing_factors),
                len(self.lexicon),
                self.strategy,
            )

    # -- words ------------------------------------------------------------------------------------
    def _token(self, word: str) -> str:
        return self._lm.token(PlainWord(word))

    def _known(self, word: str) -> bool:
        return self._lm.is_known(self._token(word))

    def _words(self, forms: Iterable[str]) -> list[WordLike]:
        """Plain words, annotated from the lexicon where the model reads annotation."""
        words = words_of_text(forms)
        if self.lexicon is None:
            return words
        return [self.lexicon.annotate(w) for w in words]

    # -- scoring ----------------------------------------------------------------------------------
    def _score_rows(self, history: np.ndarray, targets: np.ndarray) -> np.ndarray:
        """ln P(target | history) per row, each distinct row computed once."""
        n = len(targets)
        if n == 0:
            return np.zeros(0)
        rows = np.concatenate([history.reshape(n, -1), targets[:, None]], axis=1)
        unique, inverse = np.unique(rows, axis=0, return_inverse=True)
        enc = EncodedTokens(
            unique[:, :-1].reshape(len(unique), *history.shape[1:]),
            unique[:, -1].copy(),
            np.zeros(len(unique)),
            np.zeros(len(unique), dtype=bool),
            (len(unique),),
        )
        scores = self._lm.score_encoded(enc, self.strategy, self._batch_size)
        return scores[inverse.reshape(-1)]

    def token_logprobs(
        self,
        sentences: Sequence[Sequence[str]],
        contexts: Sequence[Context | None] | None = None,
    ) -> list[np.ndarray]:
        # Contexts are accepted for the common contract; an FNLM has no context variables.
        if not sentences:
            return []
        fn = self.words.mapping(sentences)
        enc = self._lm.encode([self._words(fn(w) for w in s) for s in sentences])
        flat = self._score_rows(enc.history, enc.targets) + enc.log_extra
        bounds = np.cumsum((0, *enc.lengths))
        return [flat[a:b] for a, b in zip(bounds[:-1], bounds[1:], strict=True)]

    # -- streaming --------------------------------------------------------------------------------
    def start(self, context: Context | None = None) -> FNLMState:
        k = len(self._lm.config.factors)
        return FNLMState(((0,) * k,) * (self._lm.config.order - 1))  # <s> padding

    def advance(
        self, states: Sequence[FNLMState], tokens: Sequence[str]
    ) -> tuple[np.ndarray, list[FNLMState]]:
        if check_advance(states, tokens):
            return np.zeros(0), []
        fn = self.words.current()
        words = self._words(t if t == EOS else fn(t) for t in tokens)
        targets, extra = [], []
        for w in words:
            unit, ext, _ = self._lm.target(w.form if w.form == EOS else self._lm.token(w))
            targets.append(unit)
            extra.append(ext)
        history = np.array([s.history for s in states], dtype=np.int64)
        scores = self._score_rows(history, np.array(targets, dtype=np.int64)) + np.array(extra)
        ids = self._lm.encoder.encode(words)
        new_states = [
            FNLMState((tuple(int(x) for x in ids[i]), *s.history[:-1]))
            for i, s in enumerate(states)
        ]
        return scores, new_states

    def describe(self) -> dict[str, Any]:
        cfg = self._lm.config
        return {
            "factors": list(cfg.factors),
            "order": cfg.order,
            "strategy": self.strategy,
            "case": self.case,
            "lexicon_words": None if self.lexicon is None else len(self.lexicon),
        }


load_fnlm_lm = loader(FNLMLanguageModel, "device", "strategy")
