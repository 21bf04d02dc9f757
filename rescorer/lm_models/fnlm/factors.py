"""Word factors for the factored neural LM: extractors, factor vocabularies, unknown factors.

A word is seen through its *factors* (Alexandrescu & Kirchhoff 2006, section 3: "a word as a
vector of factors w = <f1, ..., fk>"). Each factor type has a name:

==============  ======================================================  ==================
name            value                                                   needs annotation
==============  ======================================================  ==================
``word``        the word as the LM predicts it (lower-cased when        no
                ``lower``; whitespace inside becomes ``_``)
``lower``       the lower-cased form                                    no
``stem``        a suffix-stripping stem of the lower-cased form         no
                (:func:`stem`; the rules depend on ``language``)
``suffix1..3``  the last 1, 2 or 3 characters of the lower-cased form   no
``shape``       capitalisation + digits/hyphen/punctuation flags        no
                (:func:`word_shape`, e.g. ``title``, ``lower+hyphen``)
``lemma``       the lemma (lower-cased when ``lower``)                  CoNLL-U
``upos``        universal POS tag                                       CoNLL-U
``xpos``        language-specific POS tag (the Brown tag for Brown)     CoNLL-U, Brown
``feats``       the whole FEATS string (``Case=Dat|Number=Sing``)       CoNLL-U
``feat:NAME``   the value of one feature (``feat:Case`` -> ``Dat``),    CoNLL-U
                ``_`` when the word does not have it
==============  ======================================================  ==================

Plain text (N-best hypotheses) has no annotation: for a :class:`PlainWord` the annotation
factors are *unknown*, exactly like the factors of an unseen word, and get the unknown-factor
vector (below). ``_`` (CoNLL-U's "unspecified") is an ordinary, known value.

A :class:`FactorVocab` lists the values of one factor type seen in training, id 0 being the
sentence-start padding ``<s>`` and the others in descending frequency (ties by value), so the
least frequent values are the last ids. :class:`FactorEncoder` turns words into factor ids,
:data:`UNKNOWN` (-1) where a value is not in the vocabulary.

Unknown factors (section 6): "a known factor of an OOV word is used as is"; an unknown one gets a
vector derived from the known values of the same type, by :func:`unknown_vector`:

- ``null``: the zero vector;
- ``all``: the mean of the vectors of all known values;
- ``tail``: the mean over the least frequent 10 % of the known values (the last
  ``ceil(0.1 * n)`` ids);
- ``least``: the vector of the single least frequent value (the last id).
"""

from __future__ import annotations

import logging
import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import numpy as np
import torch

from rescorer.core.errors import InputError
from rescorer.core.io import read_lines
from rescorer.core.output import atomic_write

logger = logging.getLogger(__name__)

START = "<s>"
"""Factor value of the padding positions before a sentence's first word (id 0 of every type)."""
UNKNOWN = -1
"""Factor id of a value not in the factor vocabulary."""
FIRST_VALUE_ID = 1
"""Id of the most frequent real value (id 0 is :data:`START`)."""
UNSPECIFIED = "_"
TAIL_FRACTION = 0.1
"""Share of the known values (least frequent first) that the ``tail`` strategy averages."""

STRATEGIES: tuple[str, ...] = ("null", "all", "tail", "least")
PLAIN_FACTORS: tuple[str, ...] = (
    "word",
    "lower",
    "stem",
    "suffix1",
    "suffix2",
    "suffix3",
    "shape",
)
ANNOTATION_FACTORS: tuple[str, ...] = ("lemma", "upos", "xpos", "feats")
FEATURE_PREFIX = "feat:"


# -- words --------------------------------------------------------------------------------------


class WordLike(Protocol):
    """What factor extraction reads from a word; None means "not annotated"."""

    @property
    def form(self) -> str: ...
    @property
    def lemma(self) -> str | None: ...
    @property
    def upos(self) -> str | None: ...
    @property
    def xpos(self) -> str | None: ...
    @property
    def feats(self) -> str | None: ...


@dataclass(frozen=True)
class PlainWord:
    """A word with whatever annotation its source has (None: not annotated)."""

    # Surface form as written.
    form: str
    # Lemma, universal and language-specific POS tags, FEATS string; None when not given.
    lemma: str | None = None
    upos: str | None = None
    xpos: str | None = None
    feats: str | None = None


def words_of_conllu(sentence: object, unit: str = "token") -> list[WordLike]:
    """The words of a :class:`rescorer.lm_models.conllu.Sentence` as the LM sees them.

    ``unit="word"``: the syntactic words (the treebank's word count). ``unit="token"``: the
    surface tokens, as in running text and ASR output; a multiword token is one word whose
    lemma, UPOS, XPOS and FEATS are its parts' values joined by ``+`` (``biri+i``,
    ``PRON+AUX``). Empty nodes are never words.
    """
    from rescorer.lm_models.conllu import Sentence

    if not isinstance(sentence, Sentence):
        raise TypeError(f"expected a conllu.Sentence, got {type(sentence).__name__}")
    if unit == "word":
        return list(sentence.words)
    if unit != "token":
        raise ValueError(f"unit must be 'word' or 'token', got {unit!r}")
    out: list[WordLike] = []
    for form, parts in sentence.surface():
        if len(parts) == 1:
            out.append(parts[0])
        else:
            out.append(
                PlainWord(
                    form,
                    lemma="+".join(p.lemma for p in parts),
                    upos="+".join(p.upos for p in parts),
                    xpos="+".join(p.xpos for p in parts),
                    feats="+".join(p.feats for p in parts),
                )
            )
    return out


def words_of_tagged(pairs: Iterable[tuple[str, str]]) -> list[WordLike]:
    """``(word, tag)`` pairs (Brown: :meth:`Document.tagged_sentences`) with the tag as XPOS."""
    return [PlainWord(w, xpos=t) for w, t in pairs]


def words_of_text(words: Iterable[str]) -> list[WordLike]:
    """Plain words without annotation."""
    return [PlainWord(w) for w in words]


# -- plain-text extractors -------------------------------------------------------------------------

_WHITESPACE = re.compile(r"\s+")
_TURKISH_UPPER = str.maketrans({"I": "ı", "İ": "i"})


def lowercase(text: str, language: str = "") -> str:
    """Lower-case ``text``; Turkish (``tr``) maps I -> ı and İ -> i first, as its alphabet does."""
    if language == "tr":
        text = text.translate(_TURKISH_UPPER)
    return text.lower()


def normalise_word(form: str, lower: bool, language: str = "") -> str:
    """The LM's token for ``form``: lower-cased when ``lower``, inner whitespace as ``_``."""
    word = lowercase(form, language) if lower else form
    return _WHITESPACE.sub("_", word.strip()) or UNSPECIFIED


# Suffixes stripped by the stemmer, longest first within each language. Rules are deliberately
# small: enough to merge inflected forms, not a morphological analyser.
_EN_SUFFIXES = (
    "ational", "ations", "ation", "ements", "ement", "ments", "ment", "ness", "ings", "ing",
    "edly", "ies", "ied", "ers", "ed", "er", "es", "ly", "s",
)  # fmt: skip
_EN_REPLACE = {"ies": "y", "ied": "y", "ational": "ate"}
_TR_SUFFIXES = tuple(
    sorted(
        {
            # plural, possessive and case endings in their vowel-harmony variants
            "lar", "ler", "ları", "leri", "ımız", "imiz", "umuz", "ümüz", "ınız", "iniz",
            "unuz", "ünüz", "nın", "nin", "nun", "nün", "ın", "in", "un", "ün", "dan", "den",
            "tan", "ten", "ndan", "nden", "da", "de", "ta", "te", "nda", "nde", "ya", "ye",
            "na", "ne", "yı", "yi", "yu", "yü", "nı", "ni", "nu", "nü", "la", "le", "yla",
            "yle", "sı", "si", "su", "sü", "ım", "im", "um", "üm", "ki",
            # common verbal endings
            "mak", "mek", "dı", "di", "du", "dü", "tı", "ti", "tu", "tü", "mış", "miş",
            "muş", "müş", "yor", "acak", "ecek", "dır", "dir", "dur", "dür", "tır", "tir",
            "tur", "tür", "ken", "arak", "erek", "ması", "mesi", "an", "en", "yan", "yen",
        },
        key=lambda s: (-len(s), s),
    )
)  # fmt: skip
PREFIX_STEM_LENGTH = 5
"""Length of the truncation stem for languages without suffix rules (Turkish IR uses 5)."""


def stem(word: str, language: str = "") -> str:
    """A small suffix-stripping stem of a lower-cased word.

    ``en``: strips one English suffix (``-ing``, ``-ed``, ``-s``, ``-ness``, ``-ment``, ...),
    keeping at least 3 characters, with ``-ies``/``-ied`` -> ``-y``. ``tr``: strips Turkish
    case, possessive, plural and common verbal endings repeatedly (agglutination), keeping at
    least 2 characters. Any other language: the first :data:`PREFIX_STEM_LENGTH` characters.
    """
    if language == "en":
        for suf in _EN_SUFFIXES:
            if word.endswith(suf) and len(word) - len(suf) >= 3:
                return word[: -len(suf)] + _EN_REPLACE.get(suf, "")
        return word
    if language == "tr":
        changed = True
        while changed:
            changed = False
            for suf in _TR_SUFFIXES:
                if word.endswith(suf) and len(word) - len(suf) >= 2:  # roots like ev, su
                    word = word[: -len(suf)]
                    changed = True
                    break
        return word
    return word[:PREFIX_STEM_LENGTH]


def word_shape(form: str) -> str:
    """Capitalisation class of ``form`` plus flags: ``upper``, ``title``, ``lower``, ``mixed``
    or ``none`` (no letters), then ``+digit``, ``+hyphen``, ``+punct`` when it has them.

    >>> word_shape("Kennedy"), word_shape("e-mail"), word_shape("1990"), word_shape("NATO's")
    ('title', 'lower+hyphen', 'none+digit', 'mixed+punct')
    """
    letters = [c for c in form if c.isalpha()]
    if not letters:
        case = "none"
    elif all(c.isupper() for c in letters):
        case = "upper" if len(letters) > 1 else "title"
    elif all(c.islower() for c in letters):
        case = "lower"
    elif letters[0].isupper() and all(c.islower() for c in letters[1:]):
        case = "title"
    else:
        case = "mixed"
    flags = []
    if any(c.isdigit() for c in form):
        flags.append("digit")
    if "-" in form:
        flags.append("hyphen")
    if any(not (c.isalnum() or c == "-") for c in form):
        flags.append("punct")
    return "+".join([case, *flags])


# -- settings and extraction ---------------------------------------------------------------------


def check_factor_name(name: str) -> None:
    """ValueError unless ``name`` is a known factor type (see the module docstring)."""
    if name in PLAIN_FACTORS or name in ANNOTATION_FACTORS:
        return
    if (
        isinstance(name, str)
        and name.startswith(FEATURE_PREFIX)
        and len(name) > len(FEATURE_PREFIX)
    ):
        return
    raise ValueError(
        f"unknown factor {name!r}: expected one of {list(PLAIN_FACTORS + ANNOTATION_FACTORS)} "
        f"or {FEATURE_PREFIX}NAME"
    )


def needs_annotation(name: str) -> bool:
    """True for factors that plain text cannot provide (lemma, POS, morphology)."""
    check_factor_name(name)
    return name not in PLAIN_FACTORS


@dataclass(frozen=True)
class FactorSettings:
    """Which factors a model reads and how words are normalised before extraction."""

    # Factor names in input order (eq. 3 concatenates them in this order at each position).
    factors: tuple[str, ...] = ("word",)
    # Lower-case words (and lemmas) before they become tokens or factor values.
    lower: bool = True
    # Language code for lower-casing and stemming rules ("tr", "en"; "" = generic).
    language: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "factors", tuple(self.factors))
        if not self.factors:
            raise ValueError("a model needs at least one factor, got none")
        for name in self.factors:
            check_factor_name(name)
        if len(set(self.factors)) != len(self.factors):
            raise ValueError(f"factors must be distinct, got {list(self.factors)}")

    def token(self, word: WordLike) -> str:
        """The word as the LM predicts it."""
        return normalise_word(word.form, self.lower, self.language)

    def extract(self, word: WordLike) -> tuple[str | None, ...]:
        """One value per factor; None where the word lacks the annotation the factor needs."""
        return tuple(self._value(name, word) for name in self.factors)

    def _value(self, name: str, word: WordLike) -> str | None:
        if name == "word":
            return self.token(word)
        if name in PLAIN_FACTORS:
            low = normalise_word(word.form, True, self.language)
            if name == "lower":
                return low
            if name == "stem":
                return stem(low, self.language)
            if name == "shape":
                return word_shape(word.form)
            return low[-int(name[-1]) :]  # suffix1..3 (the whole word when shorter)
        if name == "lemma":
            lemma = word.lemma
            if lemma is None or lemma == UNSPECIFIED:
                return lemma
            return normalise_word(lemma, self.lower, self.language)
        if name in ("upos", "xpos", "feats"):
            return getattr(word, name)
        feats = word.feats  # feat:NAME
        if feats is None:
            return None
        wanted = name[len(FEATURE_PREFIX) :]
        values = [
            item.partition("=")[2] or UNSPECIFIED
            for part in feats.split("+")  # the parts of a multiword token
            for item in part.split("|")
            if item.partition("=")[0] == wanted
        ]
        return "+".join(values) if values else UNSPECIFIED


# -- factor vocabularies ---------------------------------------------------------------------------


@dataclass(frozen=True)
class FactorVocab:
    """The known values of one factor type: id 0 ``<s>``, then by descending training count."""

    # Factor type name.
    name: str
    # Values in id order.
    values: tuple[str, ...]
    # Training count of each value (for <s>: the number of padding positions it filled).
    counts: tuple[int, ...]
    _index: dict[str, int] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.values or self.values[0] != START:
            raise ValueError(f"factor vocabulary {self.name!r} must start with {START!r}")
        if len(self.counts) != len(self.values):
            raise ValueError(f"{len(self.counts)} counts for {len(self.values)} values")
        index = {v: i for i, v in enumerate(self.values)}
        if len(index) != len(self.values):
            raise ValueError(f"factor vocabulary {self.name!r} has repeated values")
        self._index.update(index)

    @classmethod
    def build(
        cls, name: str, counts: Counter[str], start_count: int = 0, min_count: int = 1
    ) -> FactorVocab:
        """From value counts: values seen at least ``min_count`` times, by descending count,
        ties by value."""
        if min_count < 1:
            raise ValueError(f"min_count must be >= 1, got {min_count}")
        ranked = sorted(
            ((v, c) for v, c in counts.items() if v != START and c >= min_count), key=_by_count
        )
        return cls(
            name,
            (START, *(v for v, _ in ranked)),
            (start_count, *(c for _, c in ranked)),
        )

    def __len__(self) -> int:
        return len(self.values)

    def id(self, value: str | None) -> int:
        """Id of ``value``; :data:`UNKNOWN` for an unseen value or None."""
        if value is None:
            return UNKNOWN
        return self._index.get(value, UNKNOWN)

    def save(self, path: str | Path) -> None:
        """``value<TAB>count`` per line, in id order."""
        with atomic_write(path) as f:
            f.write(self.to_text())

    def to_text(self) -> str:
        return "".join(f"{v}\t{c}\n" for v, c in zip(self.values, self.counts, strict=True))

    @classmethod
    def load(cls, path: str | Path, name: str) -> FactorVocab:
        """Read :meth:`save`'s format (InputError naming the line for a malformed one)."""
        values: list[str] = []
        counts: list[int] = []
        for lineno, line in read_lines(path):
            value, tab, count = line.rpartition("\t")
            if not tab or not value:
                raise InputError(f"expected 'value<TAB>count', got {line!r}", path, lineno)
            try:
                counts.append(int(count))
            except ValueError:
                raise InputError(f"count is not an integer: {count!r}", path, lineno) from None
            values.append(value)
        try:
            return cls(name, tuple(values), tuple(counts))
        except ValueError as err:
            raise InputError(str(err), path) from None


def _by_count(item: tuple[str, int]) -> tuple[int, str]:
    return (-item[1], item[0])


class FactorEncoder:
    """Words -> factor ids, one column per factor type, :data:`UNKNOWN` for unseen values."""

    def __init__(self, settings: FactorSettings, vocabs: Sequence[FactorVocab]) -> None:
        names = tuple(v.name for v in vocabs)
        if names != settings.factors:
            raise ValueError(
                f"factor vocabularies {list(names)} do not match the factors "
                f"{list(settings.factors)}"
            )
        self.settings = settings
        self.vocabs = tuple(vocabs)
        self._cache: dict[tuple[str | None, ...], tuple[int, ...]] = {}

    @classmethod
    def fit(
        cls,
        settings: FactorSettings,
        sentences: Iterable[Sequence[WordLike]],
        min_count: int = 1,
    ) -> FactorEncoder:
        """Factor vocabularies of the values seen at least ``min_count`` times in ``sentences``
        (the training data). With ``min_count`` 1 (the paper's setting) no training value is
        unknown; above 1 the rarer values are unknown in training too, so the network learns
        from the unknown-factor vectors it meets at evaluation."""
        counters: list[Counter[str]] = [Counter() for _ in settings.factors]
        n_sentences = count_factor_values(settings, sentences, counters)
        return cls.from_counts(settings, counters, n_sentences, min_count)

    @classmethod
    def from_counts(
        cls,
        settings: FactorSettings,
        counters: Sequence[Counter[str]],
        n_sentences: int,
        min_count: int = 1,
    ) -> FactorEncoder:
        """:meth:`fit` from counts already made (:func:`count_factor_values`, e.g. added up
        over a corpus's shards)."""
        vocabs = [
            FactorVocab.build(name, c, start_count=n_sentences, min_count=min_count)
            for name, c in zip(settings.factors, counters, strict=True)
        ]
        return cls(settings, vocabs)

    @property
    def sizes(self) -> tuple[int, ...]:
        """Known values of each factor type (``<s>`` included)."""
        return tuple(len(v) for v in self.vocabs)

    def encode(self, words: Sequence[WordLike]) -> np.ndarray:
        """``(len(words), n_factors)`` int64 ids; :data:`UNKNOWN` for unknown values."""
        out = np.empty((len(words), len(self.vocabs)), dtype=np.int64)
        for i, w in enumerate(words):
            values = self.settings.extract(w)
            ids = self._cache.get(values)
            if ids is None:
                ids = tuple(v.id(x) for v, x in zip(self.vocabs, values, strict=True))
                if len(self._cache) < 1_000_000:
                    self._cache[values] = ids
            out[i] = ids
        return out


def count_factor_values(
    settings: FactorSettings,
    sentences: Iterable[Sequence[WordLike]],
    counters: Sequence[Counter[str]],
) -> int:
    """Add the factor values of ``sentences`` to ``counters`` (one per factor type); returns
    the number of sentences."""
    n_sentences = 0
    for words in sentences:
        n_sentences += 1
        for w in words:
            for counter, value in zip(counters, settings.extract(w), strict=True):
                if value is not None:
                    counter[value] += 1
    return n_sentences


# -- lexicon: annotation for plain text -----------------------------------------------------------

LEXICON_FIELDS: tuple[str, ...] = ("lemma", "upos", "xpos", "feats")
"""The annotation a :class:`Lexicon` stores per word, in its file's column order."""
_NONE = ""  # a field the training word did not have (None), as written in the lexicon file


AnnotationCounts = dict[str, Counter[tuple[str | None, ...]]]
"""Per word (its lower-cased form), how often it carried each annotation (LEXICON_FIELDS)."""


def count_annotations(
    language: str, sentences: Iterable[Sequence[WordLike]], counts: AnnotationCounts
) -> None:
    """Add the annotations of the words of ``sentences`` to ``counts`` (words without any
    annotation are skipped)."""
    for words in sentences:
        for w in words:
            fields = tuple(getattr(w, name) for name in LEXICON_FIELDS)
            if all(f is None for f in fields):
                continue
            key = normalise_word(w.form, True, language)
            counts.setdefault(key, Counter())[fields] += 1


class Lexicon:
    """Each training word's most frequent annotation, to annotate plain text like the training data.

    The paper obtained its factors by running an analyser over the text; N-best hypotheses have
    none, so a model with annotation factors (lemma, POS, FEATS) would see every history word's
    factors as unknown and stop depending on the history. A lexicon built from the training
    sentences maps each word (its lower-cased form) to the annotation it carried most often
    there (ties: the smallest value tuple), and :meth:`annotate` gives plain words that
    annotation. Words it does not know stay unannotated, i.e. their annotation factors are
    unknown, as for a word never seen in training (section 6).
    """

    def __init__(self, language: str, entries: Mapping[str, tuple[str | None, ...]]) -> None:
        for key, fields in entries.items():
            if len(fields) != len(LEXICON_FIELDS):
                raise ValueError(
                    f"lexicon entry {key!r}: expected {len(LEXICON_FIELDS)} fields "
                    f"{list(LEXICON_FIELDS)}, got {len(fields)}"
                )
        self.language = language
        self.entries = dict(entries)

    @classmethod
    def fit(cls, language: str, sentences: Iterable[Sequence[WordLike]]) -> Lexicon:
        """From annotated training sentences (words without any annotation are skipped)."""
        counts: AnnotationCounts = {}
        count_annotations(language, sentences, counts)
        return cls.from_counts(language, counts)

    @classmethod
    def from_counts(cls, language: str, counts: AnnotationCounts) -> Lexicon:
        """:meth:`fit` from counts already made (:func:`count_annotations`, e.g. added up over a
        corpus's shards)."""
        entries = {
            key: min(c.items(), key=lambda fc: (-fc[1], tuple(f or _NONE for f in fc[0])))[0]
            for key, c in counts.items()
        }
        return cls(language, entries)

    def __len__(self) -> int:
        return len(self.entries)

    def annotate(self, word: WordLike) -> WordLike:
        """``word`` with its lexicon annotation when it has none of its own and is listed."""
        if any(getattr(word, name) is not None for name in LEXICON_FIELDS):
            return word
        fields = self.entries.get(normalise_word(word.form, True, self.language))
        if fields is None:
            return word
        return PlainWord(word.form, *fields)

    def to_text(self) -> str:
        """``word<TAB>lemma<TAB>upos<TAB>xpos<TAB>feats`` per line (empty: not annotated)."""
        lines = (
            "\t".join((key, *(_NONE if f is None else f for f in fields))) + "\n"
            for key, fields in sorted(self.entries.items())
        )
        return "".join(lines)

    @classmethod
    def load(cls, path: str | Path, language: str) -> Lexicon:
        """Read :meth:`to_text`'s format (InputError naming the line for a malformed one)."""
        entries: dict[str, tuple[str | None, ...]] = {}
        width = 1 + len(LEXICON_FIELDS)
        for lineno, line in read_lines(path):
            parts = line.split("\t")
            if len(parts) != width or not parts[0]:
                raise InputError(
                    f"expected {width} tab-separated fields (word, "
                    f"{', '.join(LEXICON_FIELDS)}), got {len(parts)}",
                    path,
                    lineno,
                )
            if parts[0] in entries:
                raise InputError(f"word {parts[0]!r} listed twice", path, lineno)
            entries[parts[0]] = tuple(None if f == _NONE else f for f in parts[1:])
        return cls(language, entries)


# -- unknown factors (section 6) -------------------------------------------------------------------


def check_strategy(strategy: str) -> str:
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown-factor strategy must be one of {STRATEGIES}, got {strategy!r}")
    return strategy


def unknown_vector(
    known: torch.Tensor, strategy: str, tail_fraction: float = TAIL_FRACTION
) -> torch.Tensor:
    """The vector for an unknown value, from the rows of the known values (section 6).

    ``known`` is ``(n, d)``: the embeddings of the real values of one factor type in descending
    frequency (the ``<s>`` row left out), so the least frequent values are the last rows.
    NULL: zeros; ALL: the mean of all rows; TAIL: the mean of the last ``ceil(tail_fraction*n)``
    rows; LEAST: the last row.
    """
    check_strategy(strategy)
    if known.dim() != 2:
        raise ValueError(f"expected a (values, dim) table, got shape {tuple(known.shape)}")
    n = known.shape[0]
    if strategy == "null" or n == 0:
        return known.new_zeros(known.shape[1])
    if strategy == "all":
        return known.mean(dim=0)
    if strategy == "tail":
        if not 0 < tail_fraction <= 1:
            raise ValueError(f"tail_fraction must be in (0, 1], got {tail_fraction}")
        k = max(1, math.ceil(tail_fraction * n))
        return known[n - k :].mean(dim=0)
    return known[n - 1]
