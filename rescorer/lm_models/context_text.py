"""Text contexts derived from a document itself: the sentences before each sentence, optionally
with ASR-like word errors, so that a model trained on text meets the kind of context a decoder
has (the system's own, imperfect, 1-best of the previous utterances).

:func:`previous_texts` gives, for every sentence of a :class:`rescorer.lm_models.corpora.Document`,
the words of the ``k`` sentences before it in that document, oldest first, joined by spaces (None
for the first sentence: no earlier text), the form ``rescorer context build --previous K``
writes for an N-best set. With a :class:`WordNoise`, each earlier sentence is first corrupted
by :func:`corrupt`:

* every word independently: deleted with probability ``deletion``, replaced by another word
  with probability ``substitution``, kept otherwise;
* after every word of the sentence, one word inserted with probability ``insertion``;

so the expected substitutions, deletions and insertions per word of the clean text are the
three rates (the error rate against the clean text is their sum, as ASR WER counts them).
Substitutes and insertions are drawn by training frequency (:class:`WordSampler`): frequent
short words dominate, as in ASR errors; the substitute always differs from the word it
replaces.

The draws are seeded from ``(seed, epoch, document id, sentence index)``: the same seed gives
the same errors whatever the batching, the process count or the order documents are read in,
and each sentence is corrupted once per epoch, its errors the same in the K contexts it is part
of (one ASR output per utterance). Training draws anew every epoch (the model never sees one
sentence's errors twice, so it cannot learn to trust or undo a fixed corruption); evaluation uses
one fixed draw (epoch 0), so dev perplexities compare across epochs. No torch here.
"""

from __future__ import annotations

import hashlib
import math
import random
from bisect import bisect_right
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import accumulate

from rescorer.lm_models.corpora import Document

FIXED_EPOCH = 0  # the epoch key of the fixed draw (dev data, the training mean of vectors)
MAX_SAMPLER_WORDS = 50_000  # most frequent words substitutes and insertions are drawn from


@dataclass(frozen=True)
class WordNoise:
    """ASR-like word errors injected into derived text contexts (rates per clean word)."""

    # Probability that a word is replaced by another (drawn by training frequency).
    substitution: float = 0.0
    # Probability that a word is dropped.
    deletion: float = 0.0
    # Probability that a word drawn by training frequency follows a word.
    insertion: float = 0.0
    # Seed of the draws (with the epoch, the document id and the sentence's index).
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("substitution", "deletion", "insertion"):
            rate = getattr(self, name)
            ok = isinstance(rate, (int, float)) and not isinstance(rate, bool)
            if not ok or not math.isfinite(rate) or not 0.0 <= rate <= 1.0:
                raise ValueError(f"noise.{name}: expected a rate in [0, 1], got {rate!r}")
        if self.substitution + self.deletion > 1.0:
            raise ValueError(
                "noise: substitution + deletion is the chance a word is not kept: expected at "
                f"most 1, got {self.substitution} + {self.deletion}"
            )
        if not isinstance(self.seed, int) or isinstance(self.seed, bool):
            raise ValueError(f"noise.seed: expected an integer, got {self.seed!r}")

    @property
    def active(self) -> bool:
        """True when some rate is above zero."""
        return self.substitution > 0 or self.deletion > 0 or self.insertion > 0

    def rng(self, epoch: int, doc_id: str, index: int) -> random.Random:
        """The generator of one sentence's errors in one epoch."""
        key = f"{self.seed}\x00{epoch}\x00{doc_id}\x00{index}".encode()
        return random.Random(int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "little"))


class WordSampler:
    """Words drawn with probability proportional to their training count (the most frequent
    :data:`MAX_SAMPLER_WORDS`; ties broken by the word, so every process draws alike)."""

    def __init__(self, counts: Mapping[str, int], limit: int = MAX_SAMPLER_WORDS) -> None:
        ranked = sorted(((c, w) for w, c in counts.items() if c > 0), key=lambda p: (-p[0], p[1]))
        ranked = ranked[:limit]
        if not ranked:
            raise ValueError("word noise needs some training words to draw from, got none")
        self.words: tuple[str, ...] = tuple(w for _, w in ranked)
        self._cum: list[int] = list(accumulate(c for c, _ in ranked))
        self._index = {w: i for i, w in enumerate(self.words)}

    def draw(self, rng: random.Random) -> str:
        return rng.choices(self.words, cum_weights=self._cum)[0]

    def substitute(self, word: str, rng: random.Random) -> str:
        """A word other than ``word``, drawn by count among the others (``word`` itself only
        when it is the one word there is)."""
        i = self._index.get(word)
        if i is None:
            return self.draw(rng)
        lo = self._cum[i - 1] if i else 0
        own = self._cum[i] - lo
        rest = self._cum[-1] - own
        if rest <= 0:
            return word
        r = rng.random() * rest  # a point of the others' mass; the word's interval skipped
        if r >= lo:
            r += own
        return self.words[min(bisect_right(self._cum, r), len(self.words) - 1)]


def corrupt(
    words: Sequence[str], noise: WordNoise, sampler: WordSampler, rng: random.Random
) -> list[str]:
    """``words`` with substitutions, deletions and insertions at ``noise``'s rates."""
    out: list[str] = []
    sub_or_del = noise.substitution + noise.deletion
    for word in words:
        u = rng.random()
        if u < noise.deletion:
            pass
        elif u < sub_or_del:
            out.append(sampler.substitute(word, rng))
        else:
            out.append(word)
        if noise.insertion and rng.random() < noise.insertion:
            out.append(sampler.draw(rng))
    return out


def previous_texts(
    doc: Document,
    k: int,
    noise: WordNoise | None = None,
    sampler: WordSampler | None = None,
    epoch: int = FIXED_EPOCH,
) -> list[str | None]:
    """For each sentence of ``doc``: the (corrupted) words of the ``k`` sentences before it,
    oldest first, joined by spaces; None when there are none (or they have no words)."""
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise ValueError(f"previous sentences: expected an integer >= 1, got {k!r}")
    noisy = noise is not None and noise.active
    if noisy and sampler is None:
        raise ValueError("word noise needs a WordSampler of the training words")
    seen: list[Sequence[str]] = []
    for index, sentence in enumerate(doc.sentences[:-1]):
        if noisy:
            assert noise is not None and sampler is not None
            seen.append(corrupt(sentence, noise, sampler, noise.rng(epoch, doc.doc_id, index)))
        else:
            seen.append(sentence)
    out: list[str | None] = []
    for i in range(len(doc.sentences)):
        text = " ".join(w for s in seen[max(0, i - k) : i] for w in s)
        out.append(text or None)
    return out
