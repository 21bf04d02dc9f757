"""Word vocabularies for the neural language models.

A :class:`Vocabulary` is an immutable list of tokens whose first three entries are the special
tokens, always at the same ids:

==========  ==  ===========================================================
``<unk>``   0   every word not in the vocabulary
``<s>``     1   sentence start; only ever an *input* (never predicted)
``</s>``    2   sentence end; only ever a *target*
==========  ==  ===========================================================

Ordinary tokens follow, most frequent first, ties broken by the token string (so the same counts
always give the same ids). A vocabulary built from counts keeps them, aligned with the ids, as
:attr:`Vocabulary.unigram_counts` (for a unigram proposal in a sampled softmax): ``<unk>`` holds
the count of the words left out (plus any explicit ``<unk>`` count), ``</s>`` the number of
sentences when built by :func:`build_vocabulary`, and ``<s>`` zero.

On disk a vocabulary is one token per line in id order (``token<TAB>count`` when saved with
counts). Tokens are non-empty and contain no whitespace.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path

from rescorer.core.errors import InputError
from rescorer.core.io import read_lines
from rescorer.core.output import atomic_write

logger = logging.getLogger(__name__)

UNK = "<unk>"
BOS = "<s>"
EOS = "</s>"
UNK_ID = 0
BOS_ID = 1
EOS_ID = 2
SPECIAL_TOKENS: tuple[str, str, str] = (UNK, BOS, EOS)


def _bad_token(token: object) -> str | None:
    """Why ``token`` cannot be a vocabulary entry, or None when it can."""
    if not isinstance(token, str):
        return f"token must be a string, got {type(token).__name__}"
    if not token:
        return "empty token"
    if any(ch.isspace() for ch in token):
        return f"token {token!r} contains whitespace"
    return None


class Vocabulary:
    """An immutable token list with ``<unk>``=0, ``<s>``=1, ``</s>``=2.

    ``Vocabulary(tokens, unigram_counts=None)`` takes the full list, specials included; most
    code builds one with :meth:`from_counts`, :func:`build_vocabulary` or :meth:`load`.
    Raises ``ValueError`` for a list that breaks the rules (specials not at ids 0-2, duplicates,
    empty or whitespace-containing tokens, counts of the wrong length or negative).
    """

    __slots__ = ("_tokens", "_index", "_counts")

    _tokens: tuple[str, ...]
    _index: dict[str, int]
    _counts: tuple[int, ...] | None

    def __init__(self, tokens: Iterable[str], unigram_counts: Iterable[int] | None = None) -> None:
        toks = tuple(tokens)
        if toks[:3] != SPECIAL_TOKENS:
            raise ValueError(f"the first three tokens must be {list(SPECIAL_TOKENS)}")
        index: dict[str, int] = {}
        for i, tok in enumerate(toks):
            why = _bad_token(tok)
            if why is not None:
                raise ValueError(f"id {i}: {why}")
            if tok in index:
                raise ValueError(f"id {i}: duplicate token {tok!r} (first at id {index[tok]})")
            index[tok] = i
        counts: tuple[int, ...] | None = None
        if unigram_counts is not None:
            counts = tuple(int(c) for c in unigram_counts)
            if len(counts) != len(toks):
                raise ValueError(f"{len(counts)} unigram counts for {len(toks)} tokens")
            if any(c < 0 for c in counts):
                raise ValueError("unigram counts must be non-negative")
        object.__setattr__(self, "_tokens", toks)
        object.__setattr__(self, "_index", index)
        object.__setattr__(self, "_counts", counts)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("Vocabulary is immutable")

    def __delattr__(self, name: str) -> None:
        raise AttributeError("Vocabulary is immutable")

    # --- construction ------------------------------------------------------------------------

    @classmethod
    def from_counts(
        cls, counts: Mapping[str, int], max_size: int | None = None, min_count: int = 1
    ) -> Vocabulary:
        """The vocabulary of the most frequent tokens in ``counts``.

        Tokens with a count below ``min_count`` are left out; of the rest, the ``max_size - 3``
        most frequent are kept (``max_size`` counts the three specials; None keeps all). Order:
        count descending, then token ascending. Counts given for the special tokens are not
        ranked: ``<unk>``'s is added to the left-out mass, ``<s>``'s and ``</s>``'s are kept as
        their unigram counts.
        """
        if max_size is not None and max_size < len(SPECIAL_TOKENS):
            raise ValueError(f"max_size must be at least {len(SPECIAL_TOKENS)}, got {max_size}")
        if min_count < 1:
            raise ValueError(f"min_count must be at least 1, got {min_count}")
        ranked: list[tuple[str, int]] = []
        for tok, c in counts.items():
            if tok in SPECIAL_TOKENS:
                continue
            why = _bad_token(tok)
            if why is not None:
                raise ValueError(why)
            if c < 0:
                raise ValueError(f"negative count {c} for {tok!r}")
            ranked.append((tok, int(c)))
        ranked.sort(key=lambda tc: (-tc[1], tc[0]))
        kept = [(t, c) for t, c in ranked if c >= min_count]
        if max_size is not None:
            kept = kept[: max_size - len(SPECIAL_TOKENS)]
        left_out = sum(c for _, c in ranked) - sum(c for _, c in kept)
        unk = int(counts.get(UNK, 0)) + left_out
        tokens = [*SPECIAL_TOKENS, *(t for t, _ in kept)]
        unigram = [unk, int(counts.get(BOS, 0)), int(counts.get(EOS, 0)), *(c for _, c in kept)]
        logger.debug(
            "vocabulary: %d of %d token types kept (%d left-out tokens)",
            len(kept),
            len(ranked),
            left_out,
        )
        return cls(tokens, unigram)

    # --- lookup ------------------------------------------------------------------------------

    @property
    def tokens(self) -> list[str]:
        """All tokens in id order (a fresh list)."""
        return list(self._tokens)

    @property
    def unigram_counts(self) -> tuple[int, ...] | None:
        """Counts aligned with the ids when built from counts (or loaded with them), else None."""
        return self._counts

    @property
    def unk_id(self) -> int:
        return UNK_ID

    @property
    def bos_id(self) -> int:
        return BOS_ID

    @property
    def eos_id(self) -> int:
        return EOS_ID

    def __len__(self) -> int:
        return len(self._tokens)

    def __contains__(self, token: object) -> bool:
        return token in self._index

    def __iter__(self) -> Iterator[str]:
        return iter(self._tokens)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Vocabulary):
            return NotImplemented
        return self._tokens == other._tokens and self._counts == other._counts

    def __hash__(self) -> int:
        return hash(self._tokens)

    def __reduce__(self) -> tuple[type[Vocabulary], tuple[tuple[str, ...], tuple[int, ...] | None]]:
        return (Vocabulary, (self._tokens, self._counts))

    def __repr__(self) -> str:
        shown = ", ".join(repr(t) for t in self._tokens[3:8])
        more = ", ..." if len(self._tokens) > 8 else ""
        return f"Vocabulary(size={len(self)}: {shown}{more})"

    def token_id(self, token: str) -> int:
        """The id of ``token``; ``<unk>``'s id when it is not in the vocabulary."""
        return self._index.get(token, UNK_ID)

    def token(self, token_id: int) -> str:
        """The token with id ``token_id`` (IndexError when out of range)."""
        if not 0 <= token_id < len(self._tokens):
            raise IndexError(f"token id {token_id} out of range [0, {len(self._tokens)})")
        return self._tokens[token_id]

    def encode(self, words: Iterable[str]) -> list[int]:
        """Ids of ``words``; words not in the vocabulary get ``<unk>``'s id (0)."""
        get = self._index.get
        return [get(w, UNK_ID) for w in words]

    def encode_sentence(self, words: Iterable[str]) -> tuple[list[int], list[int]]:
        """``(inputs, targets)`` for one sentence: ``[<s>] + words`` and ``words + [</s>]``."""
        ids = self.encode(words)
        return [BOS_ID, *ids], [*ids, EOS_ID]

    def decode(self, ids: Iterable[int]) -> list[str]:
        """Tokens of ``ids`` (IndexError for an id out of range)."""
        n = len(self._tokens)
        out: list[str] = []
        for i in ids:
            i = int(i)
            if not 0 <= i < n:
                raise IndexError(f"token id {i} out of range [0, {n})")
            out.append(self._tokens[i])
        return out

    def oov_mask(self, words: Iterable[str]) -> list[bool]:
        """True for each word that is not in the vocabulary (it would be encoded as ``<unk>``)."""
        index = self._index
        return [w not in index for w in words]

    # --- files -------------------------------------------------------------------------------

    def save(self, path: str | Path, with_counts: bool = False) -> None:
        """Write one token per line in id order (atomically).

        With ``with_counts`` (and counts present) each line is ``token<TAB>count``.
        """
        if with_counts and self._counts is None:
            raise ValueError("this vocabulary has no unigram counts to save")
        with atomic_write(path) as f:
            if with_counts:
                assert self._counts is not None
                for tok, c in zip(self._tokens, self._counts, strict=True):
                    f.write(f"{tok}\t{c}\n")
            else:
                for tok in self._tokens:
                    f.write(f"{tok}\n")

    @classmethod
    def load(cls, path: str | Path) -> Vocabulary:
        """Read a file written by :meth:`save` (with or without counts).

        Raises :class:`InputError` naming the file and line for an empty line, a token with
        whitespace, a duplicate, a special token missing from ids 0-2, a bad count, or a mix of
        lines with and without counts.
        """
        path = Path(path)
        tokens: list[str] = []
        counts: list[int] = []
        first_line: dict[str, int] = {}
        with_counts: bool | None = None
        for lineno, line in read_lines(path):
            if not line.strip():
                raise InputError("empty line in vocabulary", path, lineno)
            fields = line.split("\t")
            if len(fields) > 2:
                raise InputError(
                    f"expected 'token' or 'token<TAB>count', got {line!r}", path, lineno
                )
            has_count = len(fields) == 2
            if with_counts is None:
                with_counts = has_count
            elif has_count != with_counts:
                raise InputError(
                    "some lines have counts and some do not (expected "
                    + ("'token<TAB>count')" if with_counts else "'token')"),
                    path,
                    lineno,
                )
            tok = fields[0]
            why = _bad_token(tok)
            if why is not None:
                raise InputError(why, path, lineno)
            if tok in first_line:
                raise InputError(
                    f"duplicate token {tok!r} (first on line {first_line[tok]})", path, lineno
                )
            i = len(tokens)
            if i < len(SPECIAL_TOKENS) and tok != SPECIAL_TOKENS[i]:
                raise InputError(
                    f"expected special token {SPECIAL_TOKENS[i]!r} at id {i}, got {tok!r}",
                    path,
                    lineno,
                )
            if has_count:
                try:
                    c = int(fields[1])
                except ValueError:
                    raise InputError(
                        f"count is not an integer: {fields[1]!r}", path, lineno
                    ) from None
                if c < 0:
                    raise InputError(f"negative count {c}", path, lineno)
                counts.append(c)
            first_line[tok] = lineno
            tokens.append(tok)
        if len(tokens) < len(SPECIAL_TOKENS):
            missing = ", ".join(SPECIAL_TOKENS[len(tokens) :])
            raise InputError(
                f"vocabulary ends before the special tokens (missing {missing})",
                path,
                len(tokens) + 1,
            )
        return cls(tokens, counts if with_counts else None)


def build_vocabulary(
    sentences: Iterable[Sequence[str]], max_size: int | None = None, min_count: int = 1
) -> Vocabulary:
    """Count the words of ``sentences`` and keep the most frequent (see
    :meth:`Vocabulary.from_counts`). ``</s>``'s unigram count is the number of sentences."""
    counts: Counter[str] = Counter()
    n_sentences = 0
    for sentence in sentences:
        if isinstance(sentence, str):
            raise TypeError("sentences must be sequences of words, not strings")
        counts.update(sentence)
        n_sentences += 1
    return counted_vocabulary(counts, n_sentences, max_size, min_count)


def check_vocabulary_limits(
    max_size: object, min_count: object, size_name: str, count_name: str
) -> None:
    """ValueError naming the config settings ``size_name``/``count_name`` unless ``max_size`` is
    None or an integer >= 3 (the specials count) and ``min_count`` an integer >= 1."""
    if max_size is not None and (
        not isinstance(max_size, int) or isinstance(max_size, bool) or max_size < 3
    ):
        raise ValueError(
            f"{size_name}: expected null or an integer >= {len(SPECIAL_TOKENS)} (it counts "
            f"{', '.join(SPECIAL_TOKENS)}), got {max_size!r}"
        )
    if not isinstance(min_count, int) or isinstance(min_count, bool) or min_count < 1:
        raise ValueError(f"{count_name}: expected an integer >= 1, got {min_count!r}")


def counted_vocabulary(
    words: Mapping[str, int], sentences: int, max_size: int | None = None, min_count: int = 1
) -> Vocabulary:
    """What :func:`build_vocabulary` builds from ``sentences`` sentences whose words were
    counted ``words`` (e.g. counts of a corpus's parts added up, never the corpus in memory)."""
    if sentences < 0:
        raise ValueError(f"expected a number of sentences >= 0, got {sentences}")
    counts = Counter(words)
    counts[EOS] += sentences
    return Vocabulary.from_counts(counts, max_size=max_size, min_count=min_count)
