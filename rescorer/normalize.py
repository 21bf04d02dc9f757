"""Text normalisation for scoring: one mapping applied alike to references and hypotheses.

Raw text is the default everywhere (sclite parity). A normaliser is named by a spec, the value of
``--normalize`` on ``wer``, ``tune``, ``rescore``, ``score`` and ``keyboard-eval``:

``none``
    the words as they are.
steps, comma-separated (``lower,punct``), run in this order whatever order they are given in:
    ``hyphen``  split words at hyphens and dashes (``well-known`` -> ``well known``);
    ``punct``   delete punctuation and symbols (Unicode categories P and S); an apostrophe between
    two letters or digits stays, written ``'`` (``don't``, ``o'clock``); other marks inside a
    word join its parts (``U.S.`` -> ``US``, and ``well-known`` -> ``wellknown`` unless
    ``hyphen`` runs first); a word with nothing left is dropped;
    ``lower`` or ``upper``  case.
presets (on their own):
    ``whisper``  exactly openai-whisper's ``EnglishTextNormalizer``, the normaliser of published
    Whisper-normalised WERs (:func:`whisper_english`). Like ``english`` it removes bracketed
    spans and hesitations and expands contractions and titles; unlike it, it writes numbers as
    digits (``sixty eight`` -> ``68``, ``second`` -> ``2nd``, ``twenty percent`` -> ``20%``),
    ``'s`` as ``is``, British spellings as American (``colour`` -> ``color``), and splits words
    at ``/``, ``:``, ``@`` and ``.`` (``today/tonight``, ``6:30``, e-mail addresses). It needs
    the ``whisper-normalizer`` package (``pip install 'rescorer[whisper]'``), and works on the
    whole text, not word by word.
    ``english``  rescorer's own lighter English normaliser, word by word, and not Whisper's
    (numbers, ``'s`` and British spellings stay as written, so it suits text for language models
    and keyboards): bracketed and parenthesised spans
    (``[laughter]``, ``(inaudible)``) removed, accents stripped, lower case, hyphens split,
    ``&`` -> ``and`` and ``%`` -> ``percent``, punctuation deleted as by ``punct`` except that
    ``.`` between digits stays (``3.5``) and ``,`` between digits goes (``1,000`` -> ``1000``),
    contractions expanded (``won't`` -> ``will not``, ``n't`` -> ``not``, ``'re`` -> ``are``,
    ``'ve`` -> ``have``, ``'ll`` -> ``will``, ``'m`` -> ``am``, ``'d`` -> ``would``,
    ``let's`` -> ``let us``, ``gonna`` -> ``going to``; ``'s`` stays, being possessive as often
    as ``is``), titles spelled out (``mr`` -> ``mister``, ``dr`` -> ``doctor``, ``st`` ->
    ``saint``, ...) and the hesitations ``uh um hmm mm mmm mhm`` deleted. Numbers stay as
    written (no spelling out) and British spellings stay British.
    ``librispeech``  LibriSpeech transcript style (:func:`librispeech_normalise`): upper case, A-Z
    and apostrophes, everything else (digits included) a word boundary, MR/MRS/DR spelled out;
    the recipe ``recipes/librispeech_nbest`` normalises its LM training text with it.

Every step works word by word (words are whitespace-separated and a step never joins two), so
normalised words are cached; only ``english``'s bracket removal and ``whisper`` look at the whole
text.

Noise words (:class:`NoiseWords`, ``--noise-words FILE`` on ``wer``, ``tune`` and ``rescore``)
are the other scoring-only change, as SRILM's ``-noise-vocab``: words such as ``[noise]`` or
``<unk>`` deleted from references and hypotheses before errors are counted. They are matched
exactly against the words as ``--normalize`` leaves them, and they change only what is scored:
the hypotheses keep them for the language models, the word-count feature and the outputs.
"""

from __future__ import annotations

import functools
import logging
import re
import unicodedata
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from rescorer.core.errors import InputError
from rescorer.core.io import read_lines

if TYPE_CHECKING:
    from rescorer.nbest import NBest

logger = logging.getLogger(__name__)

STEPS: tuple[str, ...] = ("hyphen", "punct", "lower", "upper")
"""Composable steps, in the order they run."""
PRESETS: tuple[str, ...] = ("whisper", "english", "librispeech")
"""Fixed normalisers, used on their own."""
CHOICES: tuple[str, ...] = ("none", *STEPS, *PRESETS)
"""Every name a spec may hold."""

_APOSTROPHES = "'\u2019\u02bc"
_HYPHENS = re.compile("[-\u2010-\u2015\u2212\ufe58\ufe63\uff0d]+")
_BRACKETED = re.compile(r"\[[^\[\]]*\]|\([^()]*\)")


# --------------------------------------------------------------------------------------------
# LibriSpeech
# --------------------------------------------------------------------------------------------

# Titles as LibriSpeech transcribers spelled them out ("MISTER QUILTER'S").
_LIBRISPEECH_ABBREVIATIONS = {"MR": "MISTER", "MRS": "MISSUS", "DR": "DOCTOR"}


def librispeech_normalise(line: str) -> list[str]:
    """Words of ``line`` in LibriSpeech transcript style: upper case, A-Z and apostrophes.

    Accented letters lose their accents (``É`` -> ``E``); curly apostrophes become ``'``.
    Hyphens, digits and other punctuation separate words; an apostrophe inside a word is kept
    (``DON'T``), leading or trailing ones are dropped (they are quotation marks). The titles
    MR, MRS and DR are spelled out as LibriSpeech transcripts have them.
    """
    decomposed = unicodedata.normalize("NFKD", line.replace("\u2019", "'").upper())
    out: list[str] = []
    buf: list[str] = []
    for ch in decomposed + " ":
        if "A" <= ch <= "Z" or ch == "'":
            buf.append(ch)
        elif unicodedata.combining(ch):
            continue
        elif buf:
            word = "".join(buf).strip("'")
            if word:
                out.append(word)
            buf = []
    return [_LIBRISPEECH_ABBREVIATIONS.get(w, w) for w in out]


# --------------------------------------------------------------------------------------------
# Word-level steps
# --------------------------------------------------------------------------------------------


def split_hyphens(word: str) -> list[str]:
    """``word`` split at hyphens and dashes, empty parts dropped (``--`` alone -> ``[]``)."""
    return [part for part in _HYPHENS.split(word) if part]


def _is_mark(ch: str) -> bool:
    return unicodedata.category(ch)[0] in "PS"


def strip_punctuation(word: str, keep_in_numbers: str = "") -> str:
    """``word`` without punctuation and symbols (see ``punct`` in the module docstring).

    An apostrophe between two letters or digits stays (as ``'``); a character of
    ``keep_in_numbers`` stays when it stands between two digits.
    """
    if word.isalnum():
        return word
    out = []
    last = len(word) - 1
    for i, ch in enumerate(word):
        inside = 0 < i < last
        if ch in _APOSTROPHES:
            if inside and word[i - 1].isalnum() and word[i + 1].isalnum():
                out.append("'")
        elif not _is_mark(ch) or (
            ch in keep_in_numbers and inside and word[i - 1].isdigit() and word[i + 1].isdigit()
        ):
            out.append(ch)
    return "".join(out)


# --------------------------------------------------------------------------------------------
# English
# --------------------------------------------------------------------------------------------

# Letters that NFKD does not decompose into a base letter and an accent.
_LETTERS = str.maketrans({"æ": "ae", "œ": "oe", "ø": "o", "ß": "ss", "đ": "d", "ł": "l", "ð": "d",
                          "þ": "th", "ı": "i"})  # fmt: skip
_SYMBOL_WORDS = str.maketrans({"&": " and ", "%": " percent "})
_WHOLE_WORDS = {
    "ain't": ("ain't",),
    "won't": ("will", "not"),
    "can't": ("can", "not"),
    "shan't": ("shall", "not"),
    "let's": ("let", "us"),
    "y'all": ("you", "all"),
    "ma'am": ("madam",),
    "gonna": ("going", "to"),
    "wanna": ("want", "to"),
    "gotta": ("got", "to"),
}
_SUFFIXES = (("n't", "not"), ("'re", "are"), ("'ve", "have"), ("'ll", "will"), ("'m", "am"),
             ("'d", "would"))  # fmt: skip
_TITLES = {
    "mr": "mister",
    "mrs": "missus",
    "ms": "miss",
    "dr": "doctor",
    "prof": "professor",
    "st": "saint",
    "jr": "junior",
    "sr": "senior",
    "capt": "captain",
    "lt": "lieutenant",
    "sgt": "sergeant",
    "gov": "governor",
    "rev": "reverend",
}
_HESITATIONS = frozenset({"uh", "um", "hmm", "mm", "mmm", "mhm"})


def _fold_letters(word: str) -> str:
    """Lower case without accents (``Élan`` -> ``elan``, ``Æsir`` -> ``aesir``)."""
    word = word.lower()
    if word.isascii():
        return word
    decomposed = unicodedata.normalize("NFKD", word.translate(_LETTERS))
    return "".join(ch for ch in decomposed if not unicodedata.combining(ch))


def _expand(word: str) -> tuple[str, ...]:
    """Contractions, titles and hesitations of one lower-case, punctuation-free word."""
    if word in _WHOLE_WORDS:
        return _WHOLE_WORDS[word]
    if word in _HESITATIONS:
        return ()
    if word in _TITLES:
        return (_TITLES[word],)
    for suffix, full in _SUFFIXES:
        if word.endswith(suffix) and len(word) > len(suffix):
            return (word[: -len(suffix)], full)
    return (word,)


def english_word(word: str) -> tuple[str, ...]:
    """One word through the ``english`` preset (bracketed spans are removed before)."""
    out: list[str] = []
    for piece in split_hyphens(_fold_letters(word).translate(_SYMBOL_WORDS)):
        for token in piece.split():
            token = strip_punctuation(token, keep_in_numbers=".")
            if token:
                out.extend(_expand(token))
    return tuple(out)


def remove_bracketed(text: str) -> str:
    """``text`` without ``[...]`` and ``(...)`` spans (innermost first, so nesting goes too)."""
    while True:
        new = _BRACKETED.sub(" ", text)
        if new == text:
            return new
        text = new


# --------------------------------------------------------------------------------------------
# Whisper
# --------------------------------------------------------------------------------------------

WHISPER_REQUIREMENT = "whisper-normalizer>=0.1.15,<0.2"
"""The package ``--normalize whisper`` runs (the ``[whisper]`` extra)."""

# Rules that whisper-normalizer's EnglishTextNormalizer has and openai-whisper's has not (0.1.15:
# kinda -> kind of, sorta -> sort of, dunno -> do not know, cause -> because, which turns "the
# cause of" into "the because of"). Without them its output is openai-whisper's
# (tests/rescorer/test_whisper_normalize.py compares the two where openai-whisper is installed).
_NOT_WHISPER_RULES = frozenset({r"\bkinda\b", r"\bsorta\b", r"\bdunno\b", r"\bcause\b"})


def whisper_english() -> Callable[[str], str]:
    """openai-whisper's ``EnglishTextNormalizer``: a function from a text to its normalised text.

    It is whisper-normalizer's (MIT; the spelling map ``english.json`` ships with it) less the
    rules that package adds to Whisper's. ValueError saying what to install when it is missing.
    """
    try:
        from whisper_normalizer.english import EnglishTextNormalizer
    except ImportError:
        raise ValueError(
            "--normalize whisper needs the whisper-normalizer package: pip install "
            f"'rescorer[whisper]' (or pip install '{WHISPER_REQUIREMENT}')"
        ) from None
    normalizer = EnglishTextNormalizer()
    normalizer.replacers = {
        pattern: replacement
        for pattern, replacement in normalizer.replacers.items()
        if pattern not in _NOT_WHISPER_RULES
    }
    return normalizer


# --------------------------------------------------------------------------------------------
# Normalisers
# --------------------------------------------------------------------------------------------


def _step_function(steps: Sequence[str]) -> Callable[[str], tuple[str, ...]]:
    def run(word: str) -> tuple[str, ...]:
        words = split_hyphens(word) if "hyphen" in steps else [word]
        if "punct" in steps:
            words = [strip_punctuation(w) for w in words]
        if "lower" in steps:
            words = [w.lower() for w in words]
        elif "upper" in steps:
            words = [w.upper() for w in words]
        return tuple(w for w in words if w)

    return run


def _librispeech_word(word: str) -> tuple[str, ...]:
    return tuple(librispeech_normalise(word))


@dataclass(frozen=True)
class Normalizer:
    """A normaliser of word sequences (see the module docstring).

    Build one with :func:`get_normalizer`.
    """

    # The canonical spec: "none", a preset, or the steps joined by commas in the order they run.
    name: str
    # One input word -> its output words (None: the identity).
    word_function: Callable[[str], tuple[str, ...]] | None = field(
        default=None, repr=False, compare=False
    )
    # A pass over the whole text before it is split into words (None: none).
    text_function: Callable[[str], str] | None = field(default=None, repr=False, compare=False)

    @property
    def is_identity(self) -> bool:
        """True for ``none``: the words stay as they are."""
        return self.word_function is None and self.text_function is None

    def words(self, words: Iterable[str]) -> tuple[str, ...]:
        """The normalised words of a word sequence."""
        words = tuple(words)
        if self.text_function is not None:
            words = tuple(self.text_function(" ".join(words)).split())
        if self.word_function is None:
            return words
        fn = self.word_function
        return tuple(out for word in words for out in fn(word))

    def text(self, line: str) -> str:
        """The normalised words of a line of text, joined by single spaces."""
        return " ".join(self.words(line.split()))

    def mapping(self, texts: Mapping[str, Sequence[str]]) -> dict[str, tuple[str, ...]]:
        """Every word sequence of ``texts`` (utterance id -> words) normalised, ids kept."""
        return {utt: self.words(words) for utt, words in texts.items()}

    def nbest(self, nbest: NBest) -> NBest:
        """A copy of ``nbest`` with every hypothesis and embedded reference normalised.

        Scores stay; subword tokens stay only on hypotheses whose words did not change.
        """
        from rescorer.nbest import Hypothesis, NBest, NBestList

        if self.is_identity:
            return nbest
        lists = []
        for utt, nb in nbest.items():
            hyps = []
            for hyp in nb:
                words = self.words(hyp.words)
                tokens = hyp.tokens if words == hyp.words else None
                hyps.append(Hypothesis(words, hyp.scores, tokens))
            lists.append(NBestList(utt, tuple(hyps)))
        refs = None if nbest.references is None else self.mapping(nbest.references)
        return NBest(lists, refs)


def parse_spec(spec: str) -> tuple[str, ...]:
    """The names of a spec in the order they run: ``("none",)``, ``(preset,)`` or steps.

    Raises ValueError saying what was expected for unknown names, repeated names, ``lower``
    with ``upper``, and a preset or ``none`` combined with anything.
    """
    names = [n.strip() for n in spec.split(",")]
    unknown = [n for n in names if n not in CHOICES]
    if not spec.strip() or unknown:
        shown = repr(unknown[0]) if spec.strip() else "an empty spec"
        raise ValueError(
            f"unknown text normaliser {shown}: expected none, {', '.join(PRESETS)}, or "
            f"comma-separated steps of {', '.join(STEPS)}"
        )
    if len(set(names)) != len(names):
        raise ValueError(f"text normaliser spec {spec!r} names a step twice")
    if len(names) > 1 and set(names) & {"none", *PRESETS}:
        raise ValueError(
            f"text normaliser spec {spec!r}: none and the presets ({', '.join(PRESETS)}) "
            "stand alone"
        )
    if {"lower", "upper"} <= set(names):
        raise ValueError(f"text normaliser spec {spec!r}: lower or upper, not both")
    return tuple(sorted(names, key=CHOICES.index))


@functools.lru_cache(maxsize=32)
def get_normalizer(spec: str = "none") -> Normalizer:
    """The normaliser of ``spec`` (see the module docstring); ValueError for a bad spec."""
    names = parse_spec(spec)
    name = ",".join(names)
    if names == ("none",):
        return Normalizer("none")
    if names == ("whisper",):
        return Normalizer(name, None, functools.lru_cache(maxsize=1 << 16)(whisper_english()))
    if names == ("english",):
        word_fn: Callable[[str], tuple[str, ...]] = english_word
        return Normalizer(name, functools.lru_cache(maxsize=1 << 18)(word_fn), remove_bracketed)
    word_fn = _librispeech_word if names == ("librispeech",) else _step_function(names)
    return Normalizer(name, functools.lru_cache(maxsize=1 << 18)(word_fn))


# --------------------------------------------------------------------------------------------
# Noise words
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class NoiseWords:
    """Words deleted from references and hypotheses before scoring (SRILM's ``-noise-vocab``).

    Empty by default (nothing deleted). Build one from a file with :func:`read_noise_words`.
    """

    # The words, matched exactly (after any --normalize).
    words: frozenset[str] = frozenset()
    # Where they were read from (named in result lines), or None.
    source: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "words", frozenset(self.words))

    @property
    def is_empty(self) -> bool:
        return not self.words

    def label(self) -> str:
        """`` (noise words: FILE)`` after a result line, or nothing when there are none."""
        if self.is_empty:
            return ""
        return f" (noise words: {self.source or f'{len(self.words)} words'})"

    def strip(self, words: Sequence[str]) -> tuple[str, ...]:
        """``words`` without the noise words."""
        if not self.words:
            return tuple(words)
        return tuple(w for w in words if w not in self.words)

    def mapping(self, texts: Mapping[str, Sequence[str]]) -> dict[str, tuple[str, ...]]:
        """Every word sequence of ``texts`` (utterance id -> words) without the noise words."""
        return {utt: self.strip(words) for utt, words in texts.items()}

    def nbest(self, nbest: NBest) -> NBest:
        """A copy of ``nbest`` with the noise words deleted from every hypothesis and embedded
        reference, for scoring only (the word-count feature of the copy changes with them).

        Scores stay; subword tokens stay only on hypotheses whose words did not change.
        """
        from rescorer.nbest import Hypothesis, NBest, NBestList

        if self.is_empty:
            return nbest
        lists = []
        for utt, nb in nbest.items():
            hyps = []
            for hyp in nb:
                words = self.strip(hyp.words)
                hyps.append(
                    Hypothesis(words, hyp.scores, hyp.tokens if words == hyp.words else None)
                )
            lists.append(NBestList(utt, tuple(hyps)))
        refs = None if nbest.references is None else self.mapping(nbest.references)
        return NBest(lists, refs)


NO_NOISE = NoiseWords()
"""No noise words: nothing deleted."""


def read_noise_words(path: str | Path) -> NoiseWords:
    """Noise words from a file with one word per line (blank lines skipped, ``.gz`` read).

    A line with more than one word is an :class:`InputError` naming the file and line; a file
    without words gives an empty set (nothing deleted) and a warning.
    """
    path = Path(path)
    words: set[str] = set()
    for lineno, line in read_lines(path):
        fields = line.split()
        if not fields:
            continue
        if len(fields) > 1:
            raise InputError(
                f"expected one noise word per line, got {len(fields)} words", path, lineno
            )
        words.add(fields[0])
    if not words:
        logger.warning("%s: no noise words in it; nothing is deleted", path)
    return NoiseWords(frozenset(words), str(path))
