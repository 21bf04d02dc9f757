"""Text corpora with context metadata, read into one record type: :class:`Document`.

A document is an id, a tuple of tokenised sentences and a mapping of context fields (``genre``,
``topic``, ``class`` ...). Readers return ``list[Document]`` and raise
:class:`rescorer.core.errors.InputError` naming the file and 1-based line for malformed input:

==================  ====================================================================
:func:`read_brown`  Brown corpus folder (``cats.txt`` + 500 ``word/tag`` files), field ``genre``
:func:`read_agnews` AG News CSV (class 1-4, title, description), field ``topic``
:func:`read_dbpedia` DBpedia subset CSV (0-based class, text), field ``class``
:func:`read_state_union` State of the Union addresses (``<year>-<president>.txt``), fields
                    ``year`` and ``president``
:func:`read_novels` novels (``corpora/gutenberg``: one ``.txt`` per novel + ``titles.tsv``),
                    fields ``author``, ``title`` and ``year``
:func:`read_plain`  whitespace-tokenised text, one sentence per line (documents: lines,
                    blank-line separated blocks, or the file)
:func:`read_jsonl`  ``{"id": ..., "text": ..., "fields": {...}}`` per line
==================  ====================================================================

:func:`tokenize` is the preprocessing of Jaech & Ostendorf (2018): "lowercasing, tokenizing and
removing most punctuation"; the paper also truncates AG News and DBpedia sentences to 60 words
(pass ``max_len=PAPER_MAX_LEN``). :func:`split_documents` makes a stratified train/dev/test split
by document, :func:`chunk_documents` cuts documents into fixed-size sentence chunks and
:func:`corpus_stats` counts documents, sentences, tokens and field values.
"""

from __future__ import annotations

import csv
import html
import json
import logging
import math
import random
import re
import sys
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from rescorer.core.errors import InputError
from rescorer.core.io import read_lines, read_text
from rescorer.core.json_input import parse_json

logger = logging.getLogger(__name__)

PAPER_MAX_LEN = 60
"""Sentence length (words) to which Jaech & Ostendorf (2018) truncate AG News and DBpedia."""

Sentence = tuple[str, ...]
Tokenizer = Callable[[str], list[str]]


# --- the record type ---------------------------------------------------------------------------


class FrozenFields(Mapping[str, str]):
    """A read-only, hashable, picklable ``str -> str`` mapping (a document's context fields)."""

    __slots__ = ("_d",)

    def __init__(self, items: Mapping[str, str] | Iterable[tuple[str, str]] = ()) -> None:
        d = dict(items)
        for k, v in d.items():
            if not isinstance(k, str) or not isinstance(v, str):
                raise TypeError(f"context fields must map str to str, got {k!r}: {v!r}")
        self._d = d

    def __getitem__(self, key: str) -> str:
        return self._d[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._d)

    def __len__(self) -> int:
        return len(self._d)

    def __hash__(self) -> int:
        return hash(frozenset(self._d.items()))

    def __repr__(self) -> str:
        return repr(self._d)

    def __getstate__(self) -> dict[str, str]:
        return self._d

    def __setstate__(self, state: dict[str, str]) -> None:
        self._d = state


def _as_sentences(value: Iterable[Iterable[str]], what: str) -> tuple[Sentence, ...]:
    out = []
    for s in value:
        if isinstance(s, str):
            raise TypeError(f"{what} must be sequences of tokens, not strings")
        sent = tuple(s)
        for tok in sent:
            if not isinstance(tok, str):
                raise TypeError(f"{what} hold strings, got {type(tok).__name__}")
        out.append(sent)
    return tuple(out)


@dataclass(frozen=True)
class Document:
    """One document: id, tokenised sentences, context fields and (optionally) per-token tags.

    ``sentences`` and ``tags`` are stored as tuples of tuples (lists are converted); ``fields``
    as a read-only :class:`FrozenFields`. ``tags``, when present, parallels ``sentences``
    token for token (POS tags from :func:`read_brown_tagged`).
    """

    doc_id: str
    sentences: tuple[Sentence, ...]
    fields: Mapping[str, str] = field(default_factory=FrozenFields)
    tags: tuple[Sentence, ...] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.doc_id, str):
            raise TypeError(f"doc_id must be a string, got {type(self.doc_id).__name__}")
        object.__setattr__(self, "sentences", _as_sentences(self.sentences, "sentences"))
        if not isinstance(self.fields, FrozenFields):
            object.__setattr__(self, "fields", FrozenFields(self.fields))
        if self.tags is not None:
            tags = _as_sentences(self.tags, "tags")
            if [len(t) for t in tags] != [len(s) for s in self.sentences]:
                raise ValueError(f"document {self.doc_id}: tags do not parallel the sentences")
            object.__setattr__(self, "tags", tags)

    @property
    def n_tokens(self) -> int:
        """Number of tokens over all sentences (no sentence-boundary tokens)."""
        return sum(len(s) for s in self.sentences)

    def tagged_sentences(self) -> tuple[tuple[tuple[str, str], ...], ...]:
        """Sentences as ``(word, tag)`` pairs (ValueError when the document has no tags)."""
        if self.tags is None:
            raise ValueError(f"document {self.doc_id} has no tags")
        return tuple(
            tuple(zip(s, t, strict=True)) for s, t in zip(self.sentences, self.tags, strict=True)
        )


# --- tokenisation ------------------------------------------------------------------------------


def _mark_class() -> str:
    """A regex character class body listing every combining mark (categories Mn, Mc, Me)."""
    ranges: list[tuple[int, int]] = []
    for cp in range(sys.maxunicode + 1):
        if unicodedata.category(chr(cp)).startswith("M"):
            if ranges and ranges[-1][1] == cp - 1:
                ranges[-1] = (ranges[-1][0], cp)
            else:
                ranges.append((cp, cp))
    return "".join(
        re.escape(chr(a)) if a == b else f"{re.escape(chr(a))}-{re.escape(chr(b))}"
        for a, b in ranges
    )


_WORD_CHAR = rf"(?:[^\W_]|[{_mark_class()}])"
# A word: runs of letters, digits and combining marks, joined by single apostrophes or hyphens;
# by a period or comma between digits; or by a period after a one-character run (u.s, p.m).
_TOKEN_RE = re.compile(
    rf"{_WORD_CHAR}+(?:(?:['\-]|(?<=\d)[.,](?=\d)|(?<![^\W_][^\W_])\.){_WORD_CHAR}+)*"
)
_CHAR_MAP = str.maketrans(
    {
        "\u2019": "'",  # right single quotation mark (the usual typographic apostrophe)
        "\u2018": "'",
        "\u02bc": "'",  # modifier letter apostrophe
        "\u2032": "'",  # prime
        "`": "'",
        "\u2010": "-",  # hyphen
        "\u2011": "-",  # non-breaking hyphen
    }
)


def tokenize(text: str, lower: bool = True) -> list[str]:
    """Lower-case, tokenise and remove most punctuation (deterministic, no state).

    Rules, in order:

    1. Unicode NFKC normalisation (ligatures, full-width forms, compatibility digits); typographic
       apostrophes (’ ‘ ʼ ′ and the backtick) become ``'``; the Unicode hyphens U+2010/U+2011
       become ``-``.
    2. Lower-casing (``str.lower``) when ``lower`` is true.
    3. A token is a maximal run of letters, digits and combining marks, continued across a
       single apostrophe or hyphen (``don't``, ``o'clock``, ``singer-songwriter``), across a
       period or comma between digits (``3.5``, ``10,000``: numbers are tokens like words), and
       across a period after a one-character run (``u.s``, ``p.m``, ``a.k.a``).
    4. Everything else is dropped: punctuation, symbols and underscores separate tokens and are
       removed, as are leading and trailing apostrophes, hyphens and periods (``'em`` -> ``em``,
       ``workers'`` -> ``workers``, ``u.s.`` -> ``u.s``, ``$415`` -> ``415``, ``--`` -> nothing).
       Other periods split: ``space.com`` -> ``space com`` and ``Poland.The`` (a missing space in
       the DBpedia text) -> ``poland the``.

    >>> tokenize("He said: \\"Don't pay $1,000.50 for U.S. e-books!\\"")
    ['he', 'said', "don't", 'pay', '1,000.50', 'for', 'u.s', 'e-books']
    """
    text = unicodedata.normalize("NFKC", text).translate(_CHAR_MAP)
    if lower:
        text = text.lower()
    return _TOKEN_RE.findall(text)


# A sentence ends at . ! or ? (possibly repeated, possibly followed by closing quotes or
# brackets) before whitespace and a capital letter, digit or opening quote/bracket.
_SENTENCE_END_RE = re.compile(r"[.!?]+[\"')\]\u201d\u2019]*(?=\s+[\"'(\[\u201c\u2018]*[A-Z0-9])")


def split_sentences(text: str) -> list[str]:
    """Split raw text into sentences at ``.``, ``!`` or ``?`` followed by a capitalised word.

    Closing quotes and brackets stay with the sentence they close. Approximate: an abbreviation
    before a capitalised name (``Mr. Smith``) also splits. Empty pieces are dropped.
    """
    pieces = []
    start = 0
    for m in _SENTENCE_END_RE.finditer(text):
        pieces.append(text[start : m.end()])
        start = m.end()
    pieces.append(text[start:])
    return [p for p in (p.strip() for p in pieces) if p]


_sentence_splitter = split_sentences  # readers have a parameter of the same name


def _truncate(sentence: list[str], max_len: int | None) -> list[str]:
    return sentence if max_len is None else sentence[:max_len]


def _check_max_len(max_len: int | None) -> None:
    if max_len is not None and max_len < 1:
        raise ValueError(f"max_len must be at least 1, got {max_len}")


# --- Brown -------------------------------------------------------------------------------------

BROWN_PUNCT_TAGS = frozenset({".", ",", ":", "--", "(", ")", "``", "''", "'"})
"""Brown tags of punctuation tokens (``.`` also tags ``;``, ``?`` and ``!``)."""
_BROWN_TAG_SUFFIXES = ("-hl", "-tl", "-nc")  # headline, title, cited word
_FILE_ID_RE = re.compile(r"\w[\w.-]*")
_BROWN_MODIFIER = re.compile(r"[-$]")


def brown_base_tag(tag: str) -> str:
    """A Brown tag without its ``-hl``/``-tl``/``-nc`` suffixes (``.-hl`` -> ``.``)."""
    while len(tag) > 3 and tag.endswith(_BROWN_TAG_SUFFIXES):
        tag = tag[:-3]
    return tag


def brown_coarse_tag(tag: str) -> str:
    """The part of speech of a Brown tag without its modifiers: ``PUNCT`` for punctuation
    (:data:`BROWN_PUNCT_TAGS`), else :func:`brown_base_tag` up to its first ``-`` or ``$``: the
    foreign-word prefix and the possessive suffix go (``fw-nn`` -> ``fw``, ``nns$-tl`` ->
    ``nns``, ``pp$$`` -> ``pp``); number, tense, negation (``md*``) and contractions
    (``ppss+md``) stay. 452 tags of the Brown corpus's words become 160."""
    base = brown_base_tag(tag)
    if base in BROWN_PUNCT_TAGS:
        return "PUNCT"
    return _BROWN_MODIFIER.split(base, maxsplit=1)[0] or base


def _read_brown_cats(cats: Path) -> list[tuple[int, str, str]]:
    entries: list[tuple[int, str, str]] = []
    seen: dict[str, int] = {}
    for lineno, line in read_lines(cats):
        parts = line.split()
        if not parts:
            continue
        if len(parts) != 2:
            raise InputError(f"expected 'file genre', got {line.strip()!r}", cats, lineno)
        file_id, genre = parts
        if not _FILE_ID_RE.fullmatch(file_id):
            raise InputError(f"not a plain file name: {file_id!r}", cats, lineno)
        if file_id in seen:
            raise InputError(
                f"file {file_id!r} listed twice (first on line {seen[file_id]})", cats, lineno
            )
        seen[file_id] = lineno
        entries.append((lineno, file_id, genre))
    return entries


def _read_brown(
    brown_dir: str | Path, lower: bool, drop_punct: bool, keep_tags: bool
) -> list[Document]:
    brown_dir = Path(brown_dir)
    cats = brown_dir / "cats.txt"
    docs: list[Document] = []
    for cats_line, file_id, genre in _read_brown_cats(cats):
        path = brown_dir / file_id
        try:
            if not path.is_file():
                raise InputError(f"file {file_id!r} listed here is missing", cats, cats_line)
        except OSError as err:
            raise InputError(f"cannot read file {file_id!r}: {err}", cats, cats_line) from None
        sentences: list[list[str]] = []
        tags: list[list[str]] = []
        for lineno, line in read_lines(path):
            tokens = line.split()
            if not tokens:
                continue
            words: list[str] = []
            sent_tags: list[str] = []
            for tok in tokens:
                word, slash, tag = tok.rpartition("/")
                if not slash or not word or not tag:
                    raise InputError(f"token {tok!r} is not 'word/tag'", path, lineno)
                if drop_punct and brown_base_tag(tag) in BROWN_PUNCT_TAGS:
                    continue
                words.append(word.lower() if lower else word)
                sent_tags.append(tag)
            if words:
                sentences.append(words)
                tags.append(sent_tags)
        docs.append(
            Document(file_id, sentences, {"genre": genre}, tags if keep_tags else None)  # type: ignore[arg-type]
        )
    logger.info("read %d Brown documents from %s", len(docs), brown_dir)
    return docs


def read_brown(
    brown_dir: str | Path, lower: bool = True, drop_punct: bool = True
) -> list[Document]:
    """The Brown corpus: one Document per file listed in ``cats.txt``, in that order.

    ``doc_id`` is the file name (``ca01``), ``fields={"genre": ...}``. Each non-blank line is a
    sentence of ``word/tag`` tokens (split at the last ``/``); tags are dropped, words are the
    corpus's own tokens, lower-cased when ``lower``. With ``drop_punct`` the tokens tagged as
    punctuation (:data:`BROWN_PUNCT_TAGS`, with or without ``-hl``/``-tl``/``-nc``) are removed,
    and a sentence left empty is dropped.
    """
    return _read_brown(brown_dir, lower, drop_punct, keep_tags=False)


def read_brown_tagged(
    brown_dir: str | Path, lower: bool = True, drop_punct: bool = True
) -> list[Document]:
    """As :func:`read_brown`, with each Document's ``tags`` holding the Brown tags as written
    (lower case, suffixes kept, e.g. ``nn-tl``); :meth:`Document.tagged_sentences` pairs them."""
    return _read_brown(brown_dir, lower, drop_punct, keep_tags=True)


# --- AG News and DBpedia -----------------------------------------------------------------------


def _read_classes(path: Path) -> list[str]:
    """Class names, one per line; trailing blank lines are allowed, others are not."""
    names: list[str] = []
    blank: int | None = None
    seen: dict[str, int] = {}
    for lineno, line in read_lines(path):
        name = line.strip()
        if not name:
            blank = blank or lineno
            continue
        if blank is not None:
            raise InputError("blank line among the class names", path, blank)
        if name in seen:
            raise InputError(
                f"class {name!r} listed twice (first on line {seen[name]})", path, lineno
            )
        seen[name] = lineno
        names.append(name)
    if not names:
        raise InputError("no class names", path)
    return names


_NUMERIC_ENTITY_RE = re.compile(r"[ &]?#(\d{1,7});")
_NAMED_ENTITY_RE = re.compile(r"(?:&| |\b)(quot|amp|lt|gt|apos|nbsp);")
_HTML_TAG_RE = re.compile(r"</?[A-Za-z][^<>]*>")
_APOSTROPHE_LIKE = frozenset("'\u2018\u2019")
_CONTRACTION_RE = re.compile(r"(?:[stdm]|re|ve|ll)\b|\W|$", re.IGNORECASE)


def _numeric_entity(m: re.Match[str]) -> str:
    n = int(m.group(1))
    if 128 <= n < 160:  # Windows-1252 code points written as entities (#146; #151; ...)
        ch = bytes([n]).decode("cp1252", errors="replace")
    elif 32 <= n <= sys.maxunicode and not 0xD800 <= n < 0xE000:
        ch = chr(n)
    else:
        return m.group(0)
    if ch in _APOSTROPHE_LIKE and m.group(0)[0] in " &":
        # "doesn #39;t", "country #39;s", "makers #39; effort": the space was the entity's "&";
        # before any other word the apostrophe is an opening quote and the space is real.
        if _CONTRACTION_RE.match(m.string, m.end()):
            return ch
        return f" {ch}"
    return ch if ch in _APOSTROPHE_LIKE else f" {ch}"


def clean_agnews_text(text: str) -> str:
    """Undo the AG News escapes before tokenising.

    - ``\\$`` is an escaped dollar sign; every other run of backslashes stands for a line or
      paragraph break and becomes a space.
    - HTML entities lost their ``&``, which became a space: ``doesn #39;t``, `` #36;10``,
      `` quot;``, ``&lt;``. Numeric entities become their character (128-159 read as
      Windows-1252); an apostrophe joins the word before when a contraction or possessive
      follows (``doesn't``, ``country's``, ``makers'``), not when it opens a quote; named ones
      (``quot amp lt gt apos nbsp``) are unescaped.
    - HTML tags that the unescaping reveals (``<a href=...>``, ``</a>``, and ticker symbols
      written ``<TXN.N>``) are removed; the text between tags is kept.
    """
    text = text.replace("\\$", "$")
    text = re.sub(r"\\+", " ", text)
    text = _NUMERIC_ENTITY_RE.sub(_numeric_entity, text)
    text = _NAMED_ENTITY_RE.sub(lambda m: " " + html.unescape(f"&{m.group(1)};"), text)
    return _HTML_TAG_RE.sub(" ", text)


def _text_sentences(
    texts: Sequence[str], splitter: Callable[[str], list[str]] | None, tok: Tokenizer
) -> list[list[str]]:
    """Tokenised sentences of ``texts``: one sentence for all of them without a splitter."""
    if splitter is None:
        words = [w for t in texts for w in tok(t)]
        return [words] if words else []
    out = []
    for t in texts:
        for piece in splitter(t):
            words = tok(piece)
            if words:
                out.append(words)
    return out


def _class_index(value: str, low: int, n: int, path: Path, lineno: int) -> int:
    try:
        idx = int(value.strip())
    except ValueError:
        raise InputError(f"class index is not an integer: {value!r}", path, lineno) from None
    if not low <= idx < low + n:
        raise InputError(
            f"class index {idx} out of range {low}-{low + n - 1} ({n} classes)", path, lineno
        )
    return idx - low


def read_agnews(
    csv_path: str | Path,
    classes_path: str | Path | None = None,
    *,
    max_len: int | None = None,
    split_sentences: bool = False,
    lower: bool = True,
) -> list[Document]:
    """AG News: one Document per CSV row ``"class","title","description"``.

    Class indices are 1-based into ``classes_path`` (default ``classes.txt`` beside the CSV);
    ``fields={"topic": name}``; ``doc_id`` is ``<csv stem>-<line>``. Text is cleaned with
    :func:`clean_agnews_text` and tokenised with :func:`tokenize`.

    By default, as in the paper, a document is ONE sentence: the title's words followed by the
    description's (the separating period is punctuation and would be removed anyway). With
    ``split_sentences`` the title is one sentence and the description is split with
    :func:`split_sentences`. ``max_len`` truncates each sentence to that many words (the paper
    uses :data:`PAPER_MAX_LEN`). Rows must be one per line; blank lines are skipped.
    """
    _check_max_len(max_len)
    csv_path = Path(csv_path)
    classes_file = (
        Path(classes_path) if classes_path is not None else csv_path.parent / "classes.txt"
    )
    classes = _read_classes(classes_file)
    tok: Tokenizer = lambda t: tokenize(t, lower=lower)  # noqa: E731
    docs: list[Document] = []
    for lineno, line in read_lines(csv_path):
        if not line.strip():
            continue
        try:
            rows = list(csv.reader([line], strict=True))
        except csv.Error as err:
            raise InputError(f"bad CSV: {err}", csv_path, lineno) from None
        row = rows[0] if len(rows) == 1 else []
        if len(row) != 3:
            raise InputError(
                f"expected 3 columns (class, title, description), got {len(row)}", csv_path, lineno
            )
        cls = _class_index(row[0], 1, len(classes), csv_path, lineno)
        title, desc = clean_agnews_text(row[1]), clean_agnews_text(row[2])
        if split_sentences:
            sents = _text_sentences([title], None, tok) + _text_sentences(
                [desc], _sentence_splitter, tok
            )
        else:
            sents = _text_sentences([title, desc], None, tok)
        sents = [_truncate(s, max_len) for s in sents]
        docs.append(Document(f"{csv_path.stem}-{lineno}", sents, {"topic": classes[cls]}))  # type: ignore[arg-type]
    logger.info("read %d AG News documents from %s", len(docs), csv_path)
    return docs


def read_dbpedia(
    csv_path: str | Path,
    classes_path: str | Path | None = None,
    *,
    max_len: int | None = None,
    split_sentences: bool = False,
    lower: bool = True,
) -> list[Document]:
    """DBpedia subset: one Document per ``index,text`` line, split at the first comma.

    The index is 0-based into ``classes_path`` (default ``classes.txt`` beside the CSV);
    ``fields={"class": name}``; ``doc_id`` is ``<csv stem>-<line>``. The text is tokenised with
    :func:`tokenize` as ONE sentence by default (as in the paper); with ``split_sentences`` the
    tab characters of the data separate sentences. ``max_len`` truncates each sentence.
    """
    _check_max_len(max_len)
    csv_path = Path(csv_path)
    classes_file = (
        Path(classes_path) if classes_path is not None else csv_path.parent / "classes.txt"
    )
    classes = _read_classes(classes_file)
    tok: Tokenizer = lambda t: tokenize(t, lower=lower)  # noqa: E731
    splitter = (lambda t: t.split("\t")) if split_sentences else None
    docs: list[Document] = []
    for lineno, line in read_lines(csv_path):
        if not line.strip():
            continue
        index, comma, text = line.partition(",")
        if not comma:
            raise InputError("expected 'class,text' (no comma)", csv_path, lineno)
        cls = _class_index(index, 0, len(classes), csv_path, lineno)
        sents = [_truncate(s, max_len) for s in _text_sentences([text], splitter, tok)]
        docs.append(Document(f"{csv_path.stem}-{lineno}", sents, {"class": classes[cls]}))  # type: ignore[arg-type]
    logger.info("read %d DBpedia documents from %s", len(docs), csv_path)
    return docs


# --- State of the Union ------------------------------------------------------------------------

# <year>-<president>[-<n>].txt: n numbers the addresses of one year (1965-Johnson-1).
_SOTU_NAME_RE = re.compile(r"(\d{4})-([A-Za-z]+)(?:-\d+)?")
# The date line under the title ("January 31, 1990", trailing blanks allowed).
_SOTU_DATE_RE = re.compile(r"[A-Z][a-z]+ \d{1,2}, \d{4}\s*")


# Titles before a name, whose period does not end a sentence ("Mr. Speaker").
_TITLES = frozenset({"mr.", "mrs.", "ms.", "dr.", "st.", "jr.", "sr.", "gen.", "sen.", "gov."})


def _join_titles(pieces: list[str]) -> list[str]:
    """:func:`split_sentences`'s pieces with a piece that ends in a title (``Mr.``) joined to
    the next."""
    out: list[str] = []
    for piece in pieces:
        if out and out[-1].rsplit(None, 1)[-1].lower() in _TITLES:
            out[-1] = f"{out[-1]} {piece}"
        else:
            out.append(piece)
    return out


def read_state_union(folder: str | Path, lower: bool = True) -> list[Document]:
    """State of the Union addresses (NLTK's ``state_union``): one Document per
    ``<year>-<president>[-<n>].txt`` file, in year order, ``doc_id`` the file stem.

    Fields ``year`` (``"1990"``) and ``president`` (``"Bush"``, as the file names it). The first
    non-blank line (the title) and a date line right under it are dropped; every other line is
    split into sentences (:func:`split_sentences`, not after a title such as ``Mr.``) and
    tokenised (:func:`tokenize`: most
    punctuation removed, lower-cased when ``lower``). Files are UTF-8 or, failing that, Latin-1
    (six of the 65 addresses are).
    """
    folder = Path(folder)
    files = sorted(folder.glob("*.txt")) if folder.is_dir() else []
    if not files:
        raise InputError("no State of the Union addresses (<year>-<president>.txt)", folder)
    docs = []
    for path in files:
        m = _SOTU_NAME_RE.fullmatch(path.stem)
        if m is None:
            raise InputError(
                f"expected a file named <year>-<president>[-<n>].txt, got {path.name!r}", path
            )
        raw = path.read_bytes()
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            text = raw.decode("latin-1")
        lines = [line for line in text.splitlines() if line.strip()][1:]  # the title goes
        if lines and _SOTU_DATE_RE.fullmatch(lines[0].strip() + " "):
            lines = lines[1:]
        sentences = [
            words
            for line in lines
            for piece in _join_titles(split_sentences(line))
            if (words := tokenize(piece, lower=lower))
        ]
        if not sentences:
            raise InputError("an address without text", path)
        fields = {"year": m.group(1), "president": m.group(2)}
        docs.append(Document(path.stem, sentences, fields))  # type: ignore[arg-type]
    return docs


def book_sentences(text: str, lower: bool = True) -> list[list[str]]:
    """The tokenised sentences of a book's text in reading order: paragraphs separated by blank
    lines (LF or CRLF), a paragraph's hard-wrapped lines joined, split into sentences
    (:func:`split_sentences`, not after a title such as ``Mr.``) and tokenised (:func:`tokenize`,
    lower-cased when ``lower``); pieces without words dropped."""
    return [
        words
        for para in re.split(r"\n\s*\n", text)
        for piece in _join_titles(split_sentences(" ".join(para.split())))
        if (words := tokenize(piece, lower=lower))
    ]


_NOVEL_TITLES_HEADER = ["file", "author", "title", "year", "words"]


def read_novels(folder: str | Path, lower: bool = True) -> list[Document]:
    """Novels, one ``.txt`` file each, listed in ``titles.tsv`` (tab-separated ``file author
    title year words``, as in ``corpora/gutenberg``): one Document per listed novel, in the
    list's order, ``doc_id`` the file stem, fields ``author``, ``title`` and ``year``.

    The text (UTF-8, an optional byte-order mark, CRLF or LF line ends, hard-wrapped lines) is
    read by :func:`book_sentences`. Title and chapter headings stay, as the short sentences they
    are. Sentences run on across paragraphs in reading order, so consecutive sentences are
    consecutive in the book.
    """
    folder = Path(folder)
    listing = folder / "titles.tsv"
    docs = []
    for lineno, line in read_lines(listing):
        cols = line.split("\t")
        if lineno == 1:
            if cols != _NOVEL_TITLES_HEADER:
                raise InputError(
                    f"expected the header {' '.join(_NOVEL_TITLES_HEADER)!r} (tab-separated), "
                    f"got {line.strip()!r}",
                    listing,
                    lineno,
                )
            continue
        if not line.strip():
            continue
        if len(cols) != len(_NOVEL_TITLES_HEADER) or not cols[0].endswith(".txt"):
            raise InputError(
                f"expected 5 tab-separated columns, the first a .txt file name, got {line!r}",
                listing,
                lineno,
            )
        path = folder / cols[0]
        if not path.is_file():
            raise InputError(f"novel {cols[0]!r} listed here is missing", listing, lineno)
        sentences = book_sentences(read_text(path), lower)  # the one text reader
        if not sentences:
            raise InputError(f"novel {cols[0]!r} has no text", listing, lineno)
        fields = {"author": cols[1], "title": cols[2], "year": cols[3]}
        docs.append(Document(path.stem, sentences, fields))  # type: ignore[arg-type]
    if not docs:
        raise InputError("no novels listed", listing)
    return docs


# --- generic formats ---------------------------------------------------------------------------


PLAIN_DOCUMENTS = ("line", "block", "file")
"""What a document of :func:`read_plain` is: a line, a run of lines between blank lines, a file."""


def read_plain(
    path: str | Path,
    fields: Mapping[str, str] | None = None,
    *,
    per: Literal["line", "block", "file"] = "line",
    lower: bool = False,
) -> list[Document]:
    """Already tokenised text, one sentence per line, words split on whitespace.

    ``per="line"``: one Document per non-blank line, ``doc_id`` ``<stem>-<line>``;
    ``per="block"``: one Document per run of non-blank lines (blank lines separate documents:
    paragraphs, chapters or books), ``doc_id`` ``<stem>-<its first line>``;
    ``per="file"``: one Document (``doc_id`` the file stem) holding every non-blank line.
    Every Document gets ``fields``. Words are lower-cased only when ``lower``.
    """
    if per not in PLAIN_DOCUMENTS:
        raise ValueError(f"per must be one of {PLAIN_DOCUMENTS}, got {per!r}")
    path = Path(path)
    fields = dict(fields or {})
    docs: list[Document] = []
    sentences: list[list[str]] = []
    first = 0  # line of the block's first sentence
    for lineno, line in read_lines(path):
        words = (line.lower() if lower else line).split()
        if not words:
            if per == "block" and sentences:
                docs.append(Document(f"{path.stem}-{first}", sentences, fields))  # type: ignore[arg-type]
                sentences = []
            continue
        if per == "line":
            docs.append(Document(f"{path.stem}-{lineno}", [words], fields))  # type: ignore[list-item]
        else:
            first = first if sentences else lineno
            sentences.append(words)
    if per == "block" and sentences:
        docs.append(Document(f"{path.stem}-{first}", sentences, fields))  # type: ignore[arg-type]
    if per == "file":
        docs.append(Document(path.stem, sentences, fields))  # type: ignore[arg-type]
    return docs


def _json_field_value(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    return None


def read_jsonl(
    path: str | Path, *, tokenizer: Tokenizer | None = None, max_len: int | None = None
) -> list[Document]:
    """One JSON object per line: ``{"id": ..., "text": ..., "fields": {...}}``.

    - ``id``: a string (or integer), unique in the file.
    - ``text``: a string, one sentence per ``\\n``-separated line, or a list of strings, one
      sentence each. Sentences are tokenised with ``tokenizer`` (default :func:`tokenize`; pass
      ``str.split`` for text that is already tokenised); empty ones are dropped.
    - ``fields`` (optional): an object of context fields; values are strings or numbers
      (numbers are kept as their JSON text via ``str``).

    Other keys are ignored; blank lines are skipped.
    """
    _check_max_len(max_len)
    path = Path(path)
    tok = tokenizer or tokenize
    docs: list[Document] = []
    seen: dict[str, int] = {}
    for lineno, line in read_lines(path):
        if not line.strip():
            continue
        obj = parse_json(line, path, lineno)
        if not isinstance(obj, dict):
            raise InputError(f"expected a JSON object, got {type(obj).__name__}", path, lineno)
        doc_id = obj.get("id")
        if isinstance(doc_id, int) and not isinstance(doc_id, bool):
            doc_id = str(doc_id)
        if not isinstance(doc_id, str) or not doc_id:
            raise InputError("'id' must be a non-empty string or an integer", path, lineno)
        if doc_id in seen:
            raise InputError(
                f"duplicate id {doc_id!r} (first on line {seen[doc_id]})", path, lineno
            )
        seen[doc_id] = lineno
        text = obj.get("text")
        if isinstance(text, str):
            pieces = text.split("\n")
        elif isinstance(text, list) and all(isinstance(t, str) for t in text):
            pieces = text
        else:
            raise InputError("'text' must be a string or a list of strings", path, lineno)
        raw_fields = obj.get("fields", {})
        if not isinstance(raw_fields, dict):
            raise InputError("'fields' must be a JSON object", path, lineno)
        fields: dict[str, str] = {}
        for key, value in raw_fields.items():
            v = _json_field_value(value)
            if v is None:
                raise InputError(
                    f"field {key!r} must be a string or a number, got {json.dumps(value)[:40]}",
                    path,
                    lineno,
                )
            fields[key] = v
        sents = [_truncate(s, max_len) for s in (tok(p) for p in pieces) if s]
        docs.append(Document(doc_id, sents, fields))  # type: ignore[arg-type]
    return docs


# --- splits, chunks, statistics ----------------------------------------------------------------


def _allocate(n: int, fractions: Sequence[float]) -> list[int]:
    """Split ``n`` items into counts by ``fractions`` (largest remainder), giving every split
    with a positive fraction at least one item when ``n`` allows."""
    exact = [n * f for f in fractions]
    counts = [math.floor(x) for x in exact]
    order = sorted(range(len(fractions)), key=lambda i: (-(exact[i] - counts[i]), i))
    for i in order[: n - sum(counts)]:
        counts[i] += 1
    positive = [i for i, f in enumerate(fractions) if f > 0]
    if n >= len(positive):
        for i in positive:
            if counts[i] == 0:
                donor = max(positive, key=lambda j: (counts[j], -j))
                counts[donor] -= 1
                counts[i] += 1
    return counts


def split_documents(
    docs: Sequence[Document],
    fractions: Sequence[float] = (0.8, 0.1, 0.1),
    stratify_by: str | None = "genre",
    seed: int = 0,
) -> tuple[list[Document], list[Document], list[Document]]:
    """Split documents into ``(train, dev, test)`` by ``fractions``, whole documents only.

    With ``stratify_by``, documents are grouped by that field's value (a missing value is a
    group of its own) and every group is split by the fractions, so every value with at least 3
    documents appears in every split with a positive fraction. Within a group, documents are
    ordered by ``doc_id`` and shuffled with a generator seeded from ``seed`` and the value, so
    the split depends only on the documents and the seed, not on the input order. Each split is
    returned in input order.
    """
    if len(fractions) != 3 or any(f < 0 for f in fractions):
        raise ValueError(f"fractions must be three non-negative numbers, got {fractions}")
    if not math.isclose(sum(fractions), 1.0, abs_tol=1e-6):
        raise ValueError(f"fractions must sum to 1, got {sum(fractions)}")
    groups: dict[str | None, list[int]] = {}
    for i, doc in enumerate(docs):
        key = doc.fields.get(stratify_by) if stratify_by is not None else None
        groups.setdefault(key, []).append(i)
    assignment = [0] * len(docs)
    for key, members in groups.items():
        members = sorted(members, key=lambda i: docs[i].doc_id)
        random.Random(f"{seed}\x00{key}").shuffle(members)
        counts = _allocate(len(members), fractions)
        start = 0
        for split, count in enumerate(counts):
            for i in members[start : start + count]:
                assignment[i] = split
            start += count
    out: tuple[list[Document], list[Document], list[Document]] = ([], [], [])
    for i, doc in enumerate(docs):
        out[assignment[i]].append(doc)
    logger.debug("split %d documents into %s", len(docs), [len(s) for s in out])
    return out


def chunk_documents(
    docs: Iterable[Document], n_sentences: int = 5, drop_last: bool = False
) -> list[Document]:
    """Cut each document into consecutive chunks of ``n_sentences`` sentences.

    A chunk keeps its document's fields (and tags); its id is ``<doc_id>#<k>`` with ``k``
    counting from 0. The last, shorter chunk of a document is kept unless ``drop_last``.
    Documents without sentences give no chunks.
    """
    if n_sentences < 1:
        raise ValueError(f"n_sentences must be at least 1, got {n_sentences}")
    out: list[Document] = []
    for doc in docs:
        for k, start in enumerate(range(0, len(doc.sentences), n_sentences)):
            sents = doc.sentences[start : start + n_sentences]
            if drop_last and len(sents) < n_sentences:
                break
            tags = None if doc.tags is None else doc.tags[start : start + n_sentences]
            out.append(Document(f"{doc.doc_id}#{k}", sents, doc.fields, tags))
    return out


def corpus_stats(docs: Iterable[Document]) -> dict[str, Any]:
    """Counts over ``docs``: ``documents``, ``sentences``, ``tokens``, ``types`` (distinct
    tokens) and ``fields``: ``{field: {value: number of documents}}``, values ordered by
    count (descending) then value."""
    n_docs = n_sents = n_tokens = 0
    types: set[str] = set()
    per_field: dict[str, Counter[str]] = {}
    for doc in docs:
        n_docs += 1
        n_sents += len(doc.sentences)
        for s in doc.sentences:
            n_tokens += len(s)
            types.update(s)
        for name, value in doc.fields.items():
            per_field.setdefault(name, Counter())[value] += 1
    return {
        "documents": n_docs,
        "sentences": n_sents,
        "tokens": n_tokens,
        "types": len(types),
        "fields": {
            name: dict(sorted(c.items(), key=lambda kv: (-kv[1], kv[0])))
            for name, c in sorted(per_field.items())
        },
    }
