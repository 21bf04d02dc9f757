"""Perplexity with and without unknown words, and the probability of words after unknown ones.

The figures of Alexandrescu & Kirchhoff (2006), for any model that gives a natural-log
probability per token (the words of each sentence and its ``</s>``):

- Table 2, "w/unk": perplexity over every token, a word never seen in training scored as the
  model's ``<unk>`` (for a KenLM n-gram its own ``<unk>`` probability; for an FNLM
  P(<unk>|h) times the unseen share, see :mod:`rescorer.lm_models.fnlm.model`).
- Table 2, "no unk": perplexity over the tokens whose word was seen in training (every
  ``</s>`` included); unknown words are left out of both the log-probability sum and the token
  count, as SRILM's ``ppl`` does, and counted separately. Models trained on the same text share
  the vocabulary, so "no unk" covers the same tokens for all of them.
- Table 1: the average probability (arithmetic mean of P, not of ln P) of *known* words (seen
  in training; ``</s>`` not counted) that have an unknown word among the ``context`` previous
  words of their sentence (the paper: "known words with unknown words in order-2 context").

Known words are a set of training words, so the flags do not depend on the model.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Container, Sequence
from dataclasses import dataclass

import numpy as np

TABLE1_CONTEXT = 2
"""History words examined for unknown ones in Table 1 (the paper's "order-2 context")."""


@dataclass(frozen=True)
class TokenFlags:
    """Per token of some sentences (each sentence's words, then its ``</s>``)."""

    # The word was never seen in training (always False for </s>).
    target_oov: np.ndarray
    # An unknown word is among the `context` words before this token in its sentence.
    history_unknown: np.ndarray
    # A word, not </s>.
    is_word: np.ndarray


def token_flags(
    sentences: Sequence[Sequence[str]],
    known: Container[str] | Callable[[str], bool],
    context: int = TABLE1_CONTEXT,
) -> TokenFlags:
    """Flags of the tokens of ``sentences`` (the LM's tokens, e.g. lower-cased words)."""
    if context < 1:
        raise ValueError(f"context must be >= 1, got {context}")
    is_known = known if callable(known) else known.__contains__
    oov, hist, word = [], [], []
    for words in sentences:
        unknown = [not is_known(w) for w in words]
        for t in range(len(words) + 1):
            oov.append(t < len(words) and unknown[t])
            hist.append(any(unknown[max(0, t - context) : t]))
            word.append(t < len(words))
    return TokenFlags(np.array(oov, bool), np.array(hist, bool), np.array(word, bool))


@dataclass(frozen=True)
class PerplexityReport:
    """Perplexities of one model on one text (natural-log totals)."""

    # Sentences, tokens (words + one </s> per sentence) and unknown words among them.
    sentences: int
    tokens: int
    oov: int
    # ln P summed over all tokens, and over the tokens whose word is known.
    logprob: float
    logprob_known: float

    @property
    def ppl_with_unk(self) -> float:
        """Table 2 "w/unk": exp(-logprob / tokens)."""
        return math.exp(-self.logprob / self.tokens) if self.tokens else math.nan

    @property
    def ppl_no_unk(self) -> float:
        """Table 2 "no unk": exp(-logprob_known / (tokens - oov))."""
        known = self.tokens - self.oov
        return math.exp(-self.logprob_known / known) if known else math.nan

    def describe(self) -> str:
        return (
            f"{self.sentences} sentences, {self.tokens} tokens incl. </s>, {self.oov} OOV "
            f"({100 * self.oov / max(self.tokens, 1):.2f}%): ppl no unk {self.ppl_no_unk:.2f}, "
            f"w/unk {self.ppl_with_unk:.2f}"
        )


def perplexity_report(logprobs: np.ndarray, flags: TokenFlags) -> PerplexityReport:
    """:class:`PerplexityReport` of per-token natural-log probabilities (concatenated)."""
    lp = np.asarray(logprobs, dtype=np.float64)
    if lp.shape != flags.target_oov.shape:
        raise ValueError(f"{lp.shape[0]} log-probabilities for {len(flags.target_oov)} tokens")
    return PerplexityReport(
        sentences=int((~flags.is_word).sum()),
        tokens=len(lp),
        oov=int(flags.target_oov.sum()),
        logprob=float(lp.sum()),
        logprob_known=float(lp[~flags.target_oov].sum()),
    )


def mean_prob_after_unknown(logprobs: np.ndarray, flags: TokenFlags) -> tuple[float, int]:
    """Table 1: (mean P of known words after an unknown word, how many such words)."""
    lp = np.asarray(logprobs, dtype=np.float64)
    mask = flags.is_word & ~flags.target_oov & flags.history_unknown
    n = int(mask.sum())
    return (float(np.exp(lp[mask]).mean()) if n else math.nan), n
