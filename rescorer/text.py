"""Text normalisation at the language-model boundary.

N-best lists and language models often disagree on case (LibriSpeech hypotheses are upper case,
many LMs are lower case). A model adapter maps the N-best words into its own units through a
:class:`CaseMapping`; ``auto`` picks the mapping under which most of a sample of words is in the
model's vocabulary. Normalisation of the text that is scored (references and hypotheses alike)
is :mod:`rescorer.normalize`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Literal

logger = logging.getLogger(__name__)

CaseMode = Literal["auto", "none", "lower", "upper"]
CASE_MODES: tuple[str, ...] = ("auto", "none", "lower", "upper")

_CASE_FUNCS: dict[str, Callable[[str], str]] = {
    "none": lambda w: w,
    "lower": str.lower,
    "upper": str.upper,
}


def case_function(mode: str) -> Callable[[str], str]:
    """The word mapping for a fixed case mode (``none``, ``lower`` or ``upper``)."""
    try:
        return _CASE_FUNCS[mode]
    except KeyError:
        raise ValueError(f"case mode must be one of {sorted(_CASE_FUNCS)}, got {mode!r}") from None


def choose_case(
    words: Iterable[str], in_vocab: Callable[[str], bool], sample_size: int = 2000
) -> str:
    """Pick the case mode under which most distinct sample words are in the vocabulary.

    Ties prefer ``none`` (leave the text alone), then ``lower``, then ``upper``.
    """
    sample: list[str] = []
    seen: set[str] = set()
    for w in words:
        if w not in seen:
            seen.add(w)
            sample.append(w)
            if len(sample) >= sample_size:
                break
    best_mode, best_hits = "none", -1
    for mode in ("none", "lower", "upper"):
        fn = _CASE_FUNCS[mode]
        hits = sum(1 for w in sample if in_vocab(fn(w)))
        if hits > best_hits:
            best_mode, best_hits = mode, hits
    logger.info(
        "case mapping %r chosen: %d of %d sample words in vocabulary",
        best_mode,
        best_hits,
        len(sample),
    )
    return best_mode
