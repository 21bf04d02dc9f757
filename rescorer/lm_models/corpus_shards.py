"""A training corpus cut into shards on disk, read lazily: training data larger than memory.

    rescorer corpus shard train.jsonl shards/ --shards 64      (write_shards)

A shard folder holds the shard files and ``index.json``. Unit k of the input (k counted from 0)
goes to shard ``k mod N``, in input order: the shards partition the units, each one a sample of
the whole corpus, their sizes within one unit of each other, and the same input always gives
byte-identical shards. A unit is a non-blank line (``text``: one sentence per line; ``jsonl``:
one document per line, checked to be a JSON object with a ``text``) or a sentence block
(``conllu``: comment and word lines up to a blank line, each line checked to be a comment or to
have ten tab-separated fields). Units are copied as they are, so a shard is a corpus file of its
own for the readers of :mod:`rescorer.lm_models.corpora`, :mod:`rescorer.lm_models.conllu`.

``index.json``::

    {"format": "lm_models.corpus_shards", "version": 1, "kind": "jsonl",
     "source": "train.jsonl", "lines": 120000, "words": 2875310,
     "shards": [{"file": "shard-00000.jsonl", "lines": 1875, "words": 44907,
                 "bytes": 310442, "sha256": "9f2c..."}, ...]}

``lines`` counts the units (lines; sentences of a CoNLL-U corpus), ``words`` the
whitespace-separated words of the text before any tokenisation (CoNLL-U: the syntactic words,
the lines with a whole-number ID).
:meth:`ShardIndex.load` checks the index and that every shard is there with its size; a
:class:`ShardReader` checks a shard's SHA-256 the first time it reads it. A missing, truncated
or changed shard is an :class:`~rescorer.core.errors.InputError` naming the file.

Data-parallel training: process r of N reads shards r, r + N, ... (:meth:`ShardIndex.assigned`),
one shard at a time, in an order drawn anew each epoch (:meth:`ShardReader.parts`): a process
never holds more than one shard of the corpus. A trainer opens its shards as a
:class:`ShardStream` (:meth:`ShardStream.open`: the index checked, the kind its corpus reader
reads, this process's shards), counts them in one pass for its vocabulary (the counts merged over
the processes with :func:`rescorer.lm_models.distributed.all_merged`) and reads them again each
epoch.
"""

from __future__ import annotations

import hashlib
import json
import logging
import random
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

from rescorer.core.errors import InputError
from rescorer.core.io import read_lines, sha256_of
from rescorer.core.json_input import parse_json, read_json
from rescorer.core.output import atomic_dir

logger = logging.getLogger(__name__)

FORMAT = "lm_models.corpus_shards"
VERSION = 1
INDEX_FILE = "index.json"
KINDS = ("text", "jsonl", "conllu")
UNITS = {"text": "text lines", "jsonl": "jsonl lines", "conllu": "CoNLL-U sentences"}  # of a kind
EXTENSIONS = {"text": "txt", "jsonl": "jsonl", "conllu": "conllu"}  # of the shard files
FLUSH_BYTES = 32 * 2**20  # lines kept in memory by the writer before they go to the files

T = TypeVar("T")
C = TypeVar("C")


def check_training_data(
    path_key: str,
    path: str,
    train_shards: str | None,
    dev: str | None,
    corpus: str,
    shard_corpora: Iterable[str],
    units: str,
) -> None:
    """A training config's data section names its training data once: the corpus file
    (``path_key``: ``path``) or a shard folder (``train_shards``), the latter with a ``dev``
    corpus of its own and a ``corpus`` reader whose ``units`` shards hold. ValueError saying
    what is missing or twice, otherwise."""
    if train_shards is None:
        if not path:
            raise ValueError(
                f'data needs the training corpus "{path_key}" (or "train_shards" and "dev")'
            )
        return
    if path:
        raise ValueError(
            f'data "{path_key}" and "train_shards" both name the training data: give one'
        )
    if dev is None:
        raise ValueError(
            'data "train_shards" needs a dev corpus: "dev" (the split fractions do not apply '
            "to shards)"
        )
    if corpus not in shard_corpora:
        held = sorted(shard_corpora)
        named = f'"{held[0]}"' if len(held) == 1 else str(held)
        raise ValueError(f"train_shards hold corpus {named} {units}, got corpus {corpus!r}")


def kind_of(path: str | Path) -> str:
    """``jsonl`` for a ``.jsonl`` (or ``.jsonl.gz``) file name, ``conllu`` for a ``.conllu``
    (``.conllu.gz``) one, else ``text``."""
    name = Path(path).name
    for kind in ("jsonl", "conllu"):
        if name.endswith((f".{kind}", f".{kind}.gz")):
            return kind
    return "text"


def shard_name(i: int, kind: str) -> str:
    return f"shard-{i:05d}.{EXTENSIONS[kind]}"


_SHARD_FILE = re.compile(r"^shard-[0-9]{5,}\.[a-z]+$")


def is_set_file(name: str) -> bool:
    """Whether ``name`` belongs to a shard set (its index or a shard): the entries a new set
    replaces or drops; anything else in the folder is left as it is."""
    return name == INDEX_FILE or _SHARD_FILE.match(name) is not None


@dataclass(frozen=True)
class ShardInfo:
    """One shard file as the index records it."""

    # File name inside the shard folder.
    file: str
    # Units (non-blank input lines; CoNLL-U sentences) and the words of their text.
    lines: int
    words: int
    # Size in bytes and SHA-256 (hex) of the file as written.
    bytes: int
    sha256: str


@dataclass(frozen=True)
class ShardIndex:
    """A shard folder's ``index.json``."""

    # The shard folder.
    directory: Path
    # "text" (one sentence per line), "jsonl" (one JSON document per line) or "conllu"
    # (CoNLL-U sentence blocks).
    kind: str
    # The input file the shards were cut from, as given to the writer.
    source: str
    # Every shard, shard i at position i.
    shards: tuple[ShardInfo, ...]

    @property
    def lines(self) -> int:
        return sum(s.lines for s in self.shards)

    @property
    def words(self) -> int:
        return sum(s.words for s in self.shards)

    def path(self, i: int) -> Path:
        return self.directory / self.shards[i].file

    def assigned(self, rank: int, size: int) -> tuple[int, ...]:
        """The shards process ``rank`` of ``size`` reads: ``rank``, ``rank + size``, ...

        ValueError when there are fewer shards than processes; a warning when the shards do not
        divide evenly (the processes with fewer shards bound every epoch's steps, the others'
        surplus batches sit it out).
        """
        if not 0 <= rank < size:
            raise ValueError(f"expected 0 <= rank < size, got rank {rank}, size {size}")
        n = len(self.shards)
        if n < size:
            raise ValueError(
                f"{self.directory}: {n} shards for {size} processes; write at least one shard "
                f"per process (rescorer corpus shard ... --shards {size})"
            )
        if n % size and rank == 0:
            logger.warning(
                "%s: %d shards do not divide among %d processes; the processes with fewer "
                "shards bound each epoch's steps (use a multiple of %d)",
                self.directory,
                n,
                size,
                size,
            )
        return tuple(range(rank, n, size))

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "version": VERSION,
            "kind": self.kind,
            "source": self.source,
            "lines": self.lines,
            "words": self.words,
            "shards": [asdict(s) for s in self.shards],
        }

    @classmethod
    def load(cls, directory: str | Path) -> ShardIndex:
        """The index of a shard folder, every shard file checked to be there with its size."""
        directory = Path(directory)
        index_path = directory / INDEX_FILE
        if not index_path.is_file():
            raise InputError(
                f"no {INDEX_FILE}: expected a shard folder written by `rescorer corpus shard`",
                directory,
            )
        raw = read_json(index_path)
        index = _index_from_json(raw, directory, index_path)
        for i, info in enumerate(index.shards):
            path = index.path(i)
            _check_size(path, i, info.bytes)
        return index


def _index_from_json(raw: Any, directory: Path, index_path: Path) -> ShardIndex:
    def bad(what: str) -> InputError:
        return InputError(what, index_path)

    if not isinstance(raw, dict) or raw.get("format") != FORMAT:
        raise bad(f'expected a JSON object with "format": "{FORMAT}"')
    if raw.get("version") != VERSION:
        raise bad(f"expected format version {VERSION}, got {raw.get('version')!r}")
    kind = raw.get("kind")
    if kind not in KINDS:
        raise bad(f"expected kind one of {list(KINDS)}, got {kind!r}")
    entries = raw.get("shards")
    if not isinstance(entries, list) or not entries:
        raise bad('expected a non-empty list "shards"')
    shards = []
    for i, entry in enumerate(entries):
        try:
            info = ShardInfo(**entry)
        except TypeError:
            raise bad(
                f"shard {i}: expected the keys file, lines, words, bytes, sha256, got "
                f"{sorted(entry) if isinstance(entry, dict) else type(entry).__name__}"
            ) from None
        name_ok = isinstance(info.file, str) and info.file and Path(info.file).name == info.file
        counts_ok = all(
            isinstance(v, int) and not isinstance(v, bool) and v >= 0
            for v in (info.lines, info.words, info.bytes)
        )
        if not name_ok or not counts_ok or not isinstance(info.sha256, str):
            raise bad(
                f"shard {i}: expected a plain file name, counts >= 0 and a sha256, got {entry}"
            )
        shards.append(info)
    return ShardIndex(directory, kind, str(raw.get("source", "")), tuple(shards))


# -- writing --------------------------------------------------------------------------------------


def _words_of(line: str, kind: str, source: Path, lineno: int) -> int:
    if kind == "text":
        return len(line.split())
    obj = parse_json(line, source, lineno)
    if not isinstance(obj, dict):
        raise InputError(f"expected a JSON object, got {type(obj).__name__}", source, lineno)
    text = obj.get("text")
    if isinstance(text, str):
        return len(text.split())
    if isinstance(text, list) and all(isinstance(t, str) for t in text):
        return sum(len(t.split()) for t in text)
    raise InputError("'text' must be a string or a list of strings", source, lineno)


def _conllu_word(line: str, source: Path, lineno: int) -> int:
    """1 for a syntactic word line, 0 for a comment, multiword token or empty node line;
    InputError for a line of neither shape (the reader checks the rest)."""
    if line.startswith("#"):
        return 0
    fields = line.split("\t")
    if len(fields) != 10:
        raise InputError(
            f"expected a comment or 10 tab-separated fields, got {len(fields)}: {line[:60]!r}",
            source,
            lineno,
        )
    return 1 if fields[0].isdigit() else 0


def _units(source: Path, kind: str) -> Iterator[tuple[str, int]]:
    """The units of ``source`` as ``(text written to the shard, words)``: non-blank lines, or
    for CoNLL-U each sentence block with the blank line that ends it."""
    block: list[str] = []
    words = 0
    for lineno, line in read_lines(source):
        if kind != "conllu":
            if line.strip():
                yield line, _words_of(line, kind, source, lineno)
        elif line.strip():
            block.append(line)
            words += _conllu_word(line, source, lineno)
        elif block:
            yield "\n".join(block) + "\n", words
            block, words = [], 0
    if block:  # a file may end without the blank line
        yield "\n".join(block) + "\n", words


class _ShardWriter:
    """The shard files being written: lines kept per shard and appended in chunks, so that the
    writer holds at most FLUSH_BYTES of text and one open file at a time."""

    def __init__(self, folder: Path, n: int, kind: str) -> None:
        self.paths = [folder / shard_name(i, kind) for i in range(n)]
        self.buffers: list[list[bytes]] = [[] for _ in range(n)]
        self.hashes = [hashlib.sha256() for _ in range(n)]
        self.sizes = [0] * n
        self.lines = [0] * n
        self.words = [0] * n
        self.buffered = 0
        for path in self.paths:
            path.write_bytes(b"")

    def add(self, i: int, line: str, words: int) -> None:
        data = (line + "\n").encode("utf-8")
        self.buffers[i].append(data)
        self.lines[i] += 1
        self.words[i] += words
        self.buffered += len(data)
        if self.buffered >= FLUSH_BYTES:
            self.flush()

    def flush(self) -> None:
        for i, pieces in enumerate(self.buffers):
            if not pieces:
                continue
            data = b"".join(pieces)
            with open(self.paths[i], "ab") as f:
                f.write(data)
            self.hashes[i].update(data)
            self.sizes[i] += len(data)
            pieces.clear()
        self.buffered = 0

    def infos(self) -> tuple[ShardInfo, ...]:
        self.flush()
        return tuple(
            ShardInfo(
                p.name, self.lines[i], self.words[i], self.sizes[i], self.hashes[i].hexdigest()
            )
            for i, p in enumerate(self.paths)
        )


def write_shards(
    source: str | Path, out_dir: str | Path, n_shards: int, kind: str | None = None
) -> ShardIndex:
    """Cut the corpus file ``source`` into ``n_shards`` shards in the folder ``out_dir``.

    ``kind`` is "text", "jsonl" or "conllu" (None: from the file name, :func:`kind_of`). The
    input is read line by line (``.gz`` too); the folder is written aside and swapped in whole,
    so a kill leaves the old folder or the new one. A JSONL line that is not a document, or a
    CoNLL-U line neither a comment nor ten fields, is an InputError naming the input line, and
    so is an input of fewer units than shards (a shard would be empty).
    """
    source = Path(source)
    kind = kind_of(source) if kind is None else kind
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {list(KINDS)}, got {kind!r}")
    if not isinstance(n_shards, int) or n_shards < 1:
        raise ValueError(f"expected a number of shards >= 1, got {n_shards!r}")
    with atomic_dir(out_dir, owned=is_set_file) as folder:
        writer = _ShardWriter(folder, n_shards, kind)
        k = 0
        for unit, words in _units(source, kind):
            writer.add(k % n_shards, unit, words)
            k += 1
        if k < n_shards:
            what = "sentences" if kind == "conllu" else "non-blank lines"
            raise InputError(f"{k} {what} cannot fill {n_shards} shards", source)
        index = ShardIndex(Path(out_dir), kind, str(source), writer.infos())
        (folder / INDEX_FILE).write_text(
            json.dumps(index.to_json(), indent=1) + "\n", encoding="utf-8"
        )
    logger.info(
        "wrote %d shards of %s to %s: %d %s, %d words",
        n_shards,
        source,
        out_dir,
        index.lines,
        UNITS[kind],
        index.words,
    )
    return index


# -- reading --------------------------------------------------------------------------------------


def _check_size(path: Path, i: int, expected: int) -> None:
    """InputError when shard ``i`` at ``path`` is missing, unreadable or not ``expected`` bytes
    long (truncated or changed since it was written)."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        raise InputError(f"shard {i} listed in {INDEX_FILE} is missing", path) from None
    except OSError as err:
        raise InputError(f"cannot read shard {i}: {err.strerror}", path) from None
    if size != expected:
        raise InputError(
            f"shard {i} has {size} bytes, {INDEX_FILE} says {expected}: truncated or "
            "changed since it was written; write the shards again",
            path,
        )


class ShardReader(Generic[T]):
    """Reads shards of one index with ``read(path)`` (e.g. a corpus reader giving Documents),
    one shard at a time; a shard's checksum is checked the first time this reader reads it."""

    def __init__(self, index: ShardIndex, read: Callable[[Path], T]) -> None:
        self.index = index
        self._read = read
        self._checked: set[int] = set()

    def check(self, i: int) -> Path:
        """Shard ``i``'s path once its size and SHA-256 match the index (else InputError)."""
        path = self.index.path(i)
        if i in self._checked:
            return path
        info = self.index.shards[i]
        _check_size(path, i, info.bytes)
        try:
            digest = sha256_of(path)
        except OSError as err:
            raise InputError(f"cannot read shard {i}: {err.strerror}", path) from None
        if digest != info.sha256:
            raise InputError(
                f"shard {i}: SHA-256 {digest[:12]}... differs from {INDEX_FILE}'s "
                f"{info.sha256[:12]}...: changed since it was written; write the shards again",
                path,
            )
        self._checked.add(i)
        return path

    def read(self, i: int) -> T:
        """Shard ``i`` read whole (after :meth:`check`)."""
        return self._read(self.check(i))

    def parts(self, shards: Sequence[int], seed: int | None = None) -> Iterator[tuple[int, T]]:
        """``(shard, what read(shard) gave)`` for ``shards``, one at a time, in the order given
        or shuffled with ``seed``; nothing of one shard is kept once the next is read."""
        order = list(shards)
        if seed is not None:
            random.Random(seed).shuffle(order)
        for i in order:
            part = self.read(i)
            yield i, part
            del part  # the caller's reference is the only one left


@dataclass(frozen=True)
class ShardStream(Generic[T]):
    """A training process's shards of a shard folder, read with its corpus reader: what a
    trainer streams its training data from, one shard at a time."""

    # Reads (and checks) a shard into what the corpus reader gives (documents, sentences).
    reader: ShardReader[T]
    # The shards this process reads (ShardIndex.assigned), in shard order.
    shards: tuple[int, ...]

    @classmethod
    def open(
        cls,
        directory: str | Path,
        kind: str,
        read: Callable[[Path], T],
        rank: int = 0,
        size: int = 1,
        corpus: str = "",
    ) -> ShardStream[T]:
        """Process ``rank`` of ``size``'s shards of the folder ``directory``, which must hold
        shards of ``kind`` (the units the ``corpus`` reader ``read`` reads; InputError
        otherwise)."""
        index = ShardIndex.load(directory)
        if index.kind != kind:
            raise InputError(
                f"shards of {UNITS[index.kind]}; corpus {corpus!r} reads {UNITS[kind]}",
                index.directory,
            )
        mine = index.assigned(rank, size)
        logger.info(
            "training data: %d shards in %s (%d %s, %d words), this process reads %d",
            len(index.shards),
            index.directory,
            index.lines,
            UNITS[kind],
            index.words,
            len(mine),
        )
        return cls(ShardReader(index, read), mine)

    @property
    def index(self) -> ShardIndex:
        return self.reader.index

    def parts(self, seed: int | None = None) -> Iterator[tuple[int, T]]:
        """``(shard, what the reader gave)`` for this process's shards, one at a time, in shard
        order or in an order drawn with ``seed`` (:meth:`ShardReader.parts`)."""
        return self.reader.parts(self.shards, seed)

    def count(self, counts: C, add: Callable[[C, T], object]) -> C:
        """``counts`` after ``add(counts, part)`` for each of this process's shards, read one at a
        time in shard order (the counting pass before training)."""
        for _, part in self.parts():
            add(counts, part)
            del part
        return counts


def check_all(index: ShardIndex) -> None:
    """Check every shard's size and SHA-256 against the index (InputError naming the file)."""
    reader: ShardReader[None] = ShardReader(index, lambda _path: None)
    for i in range(len(index.shards)):
        reader.check(i)


def lines_of(index: ShardIndex, shards: Iterable[int] | None = None) -> Iterator[str]:
    """The lines of ``shards`` (default: all, in shard order), read one shard at a time (text and
    jsonl shards; a CoNLL-U shard's lines include the blank ones that end its sentences)."""
    reader = ShardReader(index, lambda path: [line for _, line in read_lines(path)])
    for _, lines in reader.parts(range(len(index.shards)) if shards is None else list(shards)):
        yield from lines
