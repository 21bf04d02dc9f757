"""A CoNLL-U reader: sentences of syntactic words, multiword tokens and empty nodes.

The format (https://universaldependencies.org/format.html): comment lines start with ``#``
(``# sent_id = ...`` and ``# text = ...`` are the usual ones), a blank line ends a sentence, and
every other line has ten tab-separated fields ID FORM LEMMA UPOS XPOS FEATS HEAD DEPREL DEPS
MISC. Three kinds of ID:

- ``5``: a syntactic word (a :class:`Word`); words are numbered 1, 2, ... in each sentence.
- ``3-4``: a multiword token (a :class:`MultiwordToken`): one surface token spanning the words
  3 and 4 (``page's`` = ``page`` + ``'s``; Turkish ``yakasındaki`` = ``yakasında`` + ``ki``). It
  has only FORM (and MISC); its line comes right before the first word it spans.
- ``5.1``: an empty node (an :class:`EmptyNode`) of the enhanced graph, inserted after word 5
  (``0.1`` before the first word). It is no word of the sentence: it has no surface form in the
  text and no basic-tree HEAD.

:meth:`Sentence.surface` gives the surface tokens: each multiword token once, in place of the
words it spans, and every other word as itself; empty nodes are left out, as the text leaves
them out. Field values are kept as written; ``_`` means "unspecified" in every field but FORM
and LEMMA, where it can also be a literal underscore (the format does not tell them apart).

Malformed input raises :class:`rescorer.core.errors.InputError` naming the file and line.

:func:`write_tagged_conllu` writes the other way round: POS-tagged documents (tagged Brown,
:func:`rescorer.lm_models.corpora.read_brown_tagged`) as CoNLL-U, so that the CoNLL-U readers (and
their shards) serve them too.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from rescorer.core.errors import InputError
from rescorer.core.io import read_lines
from rescorer.core.output import atomic_write

if TYPE_CHECKING:  # corpora is slow to import (its tokenizer's tables); conllu stays light
    from rescorer.lm_models.corpora import Document

logger = logging.getLogger(__name__)

UNSPECIFIED = "_"
"""The value of a field that is not given."""

_WORD_ID = re.compile(r"[1-9][0-9]*")
_RANGE_ID = re.compile(r"([1-9][0-9]*)-([1-9][0-9]*)")
_EMPTY_ID = re.compile(r"(0|[1-9][0-9]*)\.([1-9][0-9]*)")


@dataclass(frozen=True)
class Word:
    """A syntactic word: one numbered line of a sentence."""

    # 1-based position in the sentence.
    id: int
    # Word form as it appears in the text (for a part of a multiword token, the part's form).
    form: str
    # Lemma or stem; "_" when unspecified.
    lemma: str
    # Universal part-of-speech tag; "_" when unspecified.
    upos: str
    # Language-specific part-of-speech tag; "_" when unspecified.
    xpos: str
    # Morphological features "Case=Dat|Number=Sing" (sorted by name in valid files); "_": none.
    feats: str
    # Head word id (0: the root); None where HEAD is "_" (unparsed data).
    head: int | None
    # Dependency relation to the head; "_" when unspecified.
    deprel: str
    # Enhanced dependency graph "head:rel|..."; "_" when unspecified.
    deps: str
    # Any other annotation ("SpaceAfter=No|..."); "_" when none.
    misc: str
    # Line of the word in its file (1-based).
    line: int = field(default=0, compare=False)

    @property
    def feats_dict(self) -> dict[str, str]:
        """FEATS as ``{name: value}`` (empty for ``_``)."""
        return parse_feats(self.feats)


@dataclass(frozen=True)
class MultiwordToken:
    """A surface token spanning the words ``first``..``last`` (a line with ID ``first-last``)."""

    # Ids of the first and last word it spans (last > first).
    first: int
    last: int
    # Its surface form.
    form: str
    # MISC of the token ("SpaceAfter=No" lives here for multiword tokens).
    misc: str
    # Line in the file (1-based).
    line: int = field(default=0, compare=False)


@dataclass(frozen=True)
class EmptyNode:
    """An empty node of the enhanced graph, ID ``after.index`` (inserted after word ``after``)."""

    # The word it follows (0: before the first word) and its index among those nodes (1, 2, ...).
    after: int
    index: int
    form: str
    lemma: str
    upos: str
    xpos: str
    feats: str
    # Enhanced dependencies; empty nodes take part in the enhanced graph only.
    deps: str
    misc: str
    # Line in the file (1-based).
    line: int = field(default=0, compare=False)


@dataclass(frozen=True)
class Sentence:
    """One sentence: comments, words, multiword tokens and empty nodes."""

    # The words, in order (words[i].id == i + 1).
    words: tuple[Word, ...]
    # Multiword tokens, in order of their first word.
    multiword_tokens: tuple[MultiwordToken, ...] = ()
    # Empty nodes, in file order.
    empty_nodes: tuple[EmptyNode, ...] = ()
    # Comment lines as (key, value) for "# key = value", (text, "") for any other comment.
    comments: tuple[tuple[str, str], ...] = ()
    # File and line where the sentence starts (its first comment or token line).
    path: str = field(default="", compare=False)
    line: int = field(default=0, compare=False)

    @property
    def sent_id(self) -> str | None:
        """The ``# sent_id = ...`` value, if any."""
        return self.comment("sent_id")

    @property
    def text(self) -> str | None:
        """The ``# text = ...`` value, if any."""
        return self.comment("text")

    def comment(self, key: str) -> str | None:
        """Value of the ``# key = value`` comment (the first one), or None."""
        for k, v in self.comments:
            if k == key:
                return v
        return None

    def surface(self) -> list[tuple[str, tuple[Word, ...]]]:
        """The surface tokens: ``(form, words it stands for)`` in order.

        A multiword token appears once, with the words it spans; every other word is its own
        token. Empty nodes are not tokens.
        """
        spans = {m.first: m for m in self.multiword_tokens}
        out: list[tuple[str, tuple[Word, ...]]] = []
        i = 0
        while i < len(self.words):
            word = self.words[i]
            mwt = spans.get(word.id)
            if mwt is None:
                out.append((word.form, (word,)))
                i += 1
            else:
                parts = self.words[mwt.first - 1 : mwt.last]
                out.append((mwt.form, tuple(parts)))
                i += len(parts)
        return out

    def forms(self) -> list[str]:
        """Forms of the syntactic words."""
        return [w.form for w in self.words]


def parse_feats(feats: str) -> dict[str, str]:
    """``"Case=Dat|Number=Sing"`` -> ``{"Case": "Dat", "Number": "Sing"}``; ``"_"`` -> ``{}``.

    Raises ValueError for a feature without ``=``.
    """
    if feats == UNSPECIFIED or not feats:
        return {}
    out: dict[str, str] = {}
    for item in feats.split("|"):
        name, eq, value = item.partition("=")
        if not eq or not name or not value:
            raise ValueError(f"expected features 'Name=Value|...', got {feats!r}")
        out[name] = value
    return out


class _SentenceBuilder:
    """Collects the lines of one sentence and checks how their ids follow each other."""

    def __init__(self, path: Path, line: int) -> None:
        self.path = path
        self.line = line
        self.comments: list[tuple[str, str]] = []
        self.words: list[Word] = []
        self.mwts: list[MultiwordToken] = []
        self.empty: list[EmptyNode] = []
        self.open_mwt: MultiwordToken | None = None  # the last one, until its words are read

    def error(self, message: str, lineno: int) -> InputError:
        return InputError(message, self.path, lineno)

    def add_comment(self, text: str) -> None:
        body = text[1:].strip()
        key, eq, value = body.partition("=")
        self.comments.append((key.strip(), value.strip()) if eq else (body, ""))

    def add(self, fields: list[str], lineno: int) -> None:
        ident = fields[0]
        if _WORD_ID.fullmatch(ident):
            self._add_word(int(ident), fields, lineno)
        elif m := _RANGE_ID.fullmatch(ident):
            self._add_mwt(int(m.group(1)), int(m.group(2)), fields, lineno)
        elif m := _EMPTY_ID.fullmatch(ident):
            self._add_empty(int(m.group(1)), int(m.group(2)), fields, lineno)
        else:
            raise self.error(
                f"bad ID {ident!r}: expected a word number (5), a range (3-4) or a decimal (5.1)",
                lineno,
            )

    def _add_word(self, ident: int, f: list[str], lineno: int) -> None:
        expected = len(self.words) + 1
        if ident != expected:
            raise self.error(f"word ID {ident} out of sequence: expected {expected}", lineno)
        if f[6] == UNSPECIFIED:
            head = None
        elif f[6].isdigit():
            head = int(f[6])
        else:
            raise self.error(f"HEAD must be a word number or '_', got {f[6]!r}", lineno)
        self._check_feats(f[5], lineno)
        self.words.append(Word(ident, *f[1:6], head, f[7], f[8], f[9], line=lineno))  # type: ignore[arg-type]
        if self.open_mwt is not None and ident == self.open_mwt.last:
            self.open_mwt = None

    def _add_mwt(self, first: int, last: int, f: list[str], lineno: int) -> None:
        expected = len(self.words) + 1
        if last <= first:
            raise self.error(f"multiword token range {first}-{last} is empty", lineno)
        if first != expected:
            raise self.error(
                f"multiword token {first}-{last} must come right before word {first}; "
                f"the next word here is {expected}",
                lineno,
            )
        if self.open_mwt is not None:
            prev = self.open_mwt
            raise self.error(
                f"multiword token {first}-{last} overlaps {prev.first}-{prev.last}", lineno
            )
        if any(v != UNSPECIFIED for v in f[2:9]):
            raise self.error(
                "a multiword token has only FORM and MISC; LEMMA..DEPS must be '_'", lineno
            )
        mwt = MultiwordToken(first, last, f[1], f[9], line=lineno)
        self.mwts.append(mwt)
        self.open_mwt = mwt

    def _add_empty(self, after: int, index: int, f: list[str], lineno: int) -> None:
        if after != len(self.words):
            raise self.error(
                f"empty node {after}.{index} must follow word {after}; "
                f"the last word here is {len(self.words)}",
                lineno,
            )
        prev = [e.index for e in self.empty if e.after == after]
        expected = (prev[-1] if prev else 0) + 1
        if index != expected:
            raise self.error(
                f"empty node {after}.{index} out of sequence: expected {after}.{expected}", lineno
            )
        if f[6] != UNSPECIFIED or f[7] != UNSPECIFIED:
            raise self.error("an empty node has no HEAD or DEPREL: both must be '_'", lineno)
        self._check_feats(f[5], lineno)
        self.empty.append(EmptyNode(after, index, *f[1:6], f[8], f[9], line=lineno))  # type: ignore[arg-type]

    def _check_feats(self, feats: str, lineno: int) -> None:
        try:
            parse_feats(feats)
        except ValueError as err:
            raise self.error(str(err), lineno) from None

    def finish(self, lineno: int) -> Sentence:
        if self.open_mwt is not None:
            m = self.open_mwt
            raise self.error(
                f"multiword token {m.first}-{m.last} spans words the sentence does not have",
                lineno,
            )
        if not self.words:
            raise self.error("sentence has no words", lineno)
        return Sentence(
            tuple(self.words),
            tuple(self.mwts),
            tuple(self.empty),
            tuple(self.comments),
            path=str(self.path),
            line=self.line,
        )


def iter_conllu(path: str | Path) -> Iterator[Sentence]:
    """Yield the sentences of a CoNLL-U file in order (see the module docstring).

    Raises :class:`InputError` (file:line) for a line without ten tab-separated fields, an empty
    field, an ID out of sequence, a multiword token that does not span the words following it,
    an empty node out of place, malformed FEATS or HEAD, or a sentence without words.
    """
    path = Path(path)
    builder: _SentenceBuilder | None = None
    last = 0
    for lineno, line in read_lines(path):
        last = lineno
        if not line.strip():
            if builder is not None:
                yield builder.finish(lineno)
                builder = None
            continue
        if builder is None:
            builder = _SentenceBuilder(path, lineno)
        if line.startswith("#"):
            if builder.words or builder.mwts or builder.empty:
                raise InputError("comment line inside a sentence", path, lineno)
            builder.add_comment(line)
            continue
        fields = line.split("\t")
        if len(fields) != 10:
            raise InputError(
                f"expected 10 tab-separated fields, got {len(fields)}: {line[:60]!r}", path, lineno
            )
        if any(not f for f in fields):
            raise InputError(f"empty field {fields.index('') + 1} (use '_')", path, lineno)
        builder.add(fields, lineno)
    if builder is not None:  # a file may end without the final blank line
        yield builder.finish(last)


def read_conllu(path: str | Path) -> list[Sentence]:
    """All sentences of a CoNLL-U file (see :func:`iter_conllu`)."""
    sentences = list(iter_conllu(path))
    logger.info("read %d sentences from %s", len(sentences), path)
    return sentences


# -- writing ----------------------------------------------------------------------------------

_NOT_IN_FIELD = re.compile(r"[\t\n\r]")


def _field(value: str, what: str) -> str:
    if not value or _NOT_IN_FIELD.search(value):
        raise ValueError(f"{what} {value!r} cannot be a CoNLL-U field (empty, tab or line break)")
    return value


def tagged_sentence(
    words: Sequence[tuple[str, str, str]], comments: Sequence[tuple[str, str]] = ()
) -> str:
    """One CoNLL-U sentence (its lines and the blank line that ends it) of ``(form, upos,
    xpos)`` words, every other field ``_``; ``comments`` as ``# key = value`` lines first.
    ValueError for no words or a value that a field cannot hold (empty, tab, line break)."""
    if not words:
        raise ValueError("a CoNLL-U sentence needs at least one word")
    lines = [f"# {_field(k, 'comment key')} = {_field(v, 'comment value')}" for k, v in comments]
    for i, (form, upos, xpos) in enumerate(words, 1):
        fields = (_field(form, "form"), _field(upos, "UPOS"), _field(xpos, "XPOS"))
        lines.append(f"{i}\t{fields[0]}\t_\t{fields[1]}\t{fields[2]}\t_\t_\t_\t_\t_")
    return "\n".join(lines) + "\n\n"


def write_tagged_conllu(
    path: str | Path, docs: Iterable[Document], upos: Callable[[str], str]
) -> int:
    """Write tagged documents (:attr:`Document.tags`) to ``path`` as CoNLL-U; the number of
    sentences written.

    Each token is a word: FORM the token, XPOS its tag, UPOS ``upos(tag)`` (e.g.
    :func:`rescorer.lm_models.corpora.brown_coarse_tag`), the other fields ``_``. A document starts
    with ``# newdoc id = DOC``, its sentences have ``# sent_id = DOC-k`` (k from 1). ValueError for
    a document without tags, an empty sentence or a token, tag or id a field cannot hold; the
    file is then not written (:func:`rescorer.core.output.atomic_write`).
    """
    n = 0
    with atomic_write(path) as f:
        for doc in docs:
            for k, sentence in enumerate(doc.tagged_sentences(), 1):
                comments = [("sent_id", f"{doc.doc_id}-{k}")]
                if k == 1:
                    comments.insert(0, ("newdoc id", doc.doc_id))
                words = [(form, upos(tag), tag) for form, tag in sentence]
                try:
                    f.write(tagged_sentence(words, comments))
                except ValueError as err:
                    raise ValueError(f"document {doc.doc_id}, sentence {k}: {err}") from None
                n += 1
    return n
