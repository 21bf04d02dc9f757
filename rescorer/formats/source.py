"""An N-best set read in chunks of lists, so that commands run in memory that does not grow with
the set.

A JSONL file (the toolkit's canonical format, one list per line) is read twice: a light first
pass (:func:`~rescorer.formats.json_formats.index_jsonl`) gives the ids, list sizes and
embedded references, so every id check (references, contexts, speakers) runs before any list
is scored; :meth:`NBestSource.chunks` then reads the lists lazily, a chunk of about
:data:`~rescorer.core.constants.CHUNK_HYPOTHESES` hypotheses at a time. Other formats (folders
of files, one JSON document) and pipes, which cannot be read twice, are read whole and handed
out in the same chunks, so a command has one code path.
"""

from __future__ import annotations

import stat
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from rescorer.core import constants
from rescorer.core.errors import InputError, shorten
from rescorer.formats.json_formats import index_jsonl, iter_jsonl
from rescorer.nbest import NBest, NBestList


def _readable_twice(path: Path) -> bool:
    """A regular file (a pipe can be read only once)."""
    try:
        return stat.S_ISREG(path.stat().st_mode)
    except (OSError, ValueError):
        return False


@dataclass(frozen=True)
class NBestSource:
    """An N-best set known by its ids, whose lists are read in chunks.

    Iterating a source gives its utterance ids in file order (like :class:`NBest`), so the id
    checks of references, contexts and speakers take either.
    """

    # Where the set is and its format.
    path: Path
    fmt: str
    # Utterance ids in file order and the number of hypotheses of each.
    ids: tuple[str, ...]
    sizes: tuple[int, ...]
    # References embedded in the lists (json, jsonl, hyporadise), None when there are none.
    references: Mapping[str, tuple[str, ...]] | None
    # The whole set when it is not read lazily (not JSONL, or a pipe), else None.
    whole: NBest | None = field(default=None, repr=False)
    # Hypotheses kept of each list, the first ones (SRILM's -max-nbest; None: all of them).
    max_nbest: int | None = None

    def __iter__(self) -> Iterator[str]:
        return iter(self.ids)

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def streamed(self) -> bool:
        """Whether the lists are read lazily (memory independent of the set's size)."""
        return self.whole is None

    def num_hyps(self) -> int:
        return sum(self.sizes)

    def max_size(self) -> int:
        """Hypotheses in the longest list (0 for an empty set)."""
        return max(self.sizes, default=0)

    def head(self, k: int | None) -> NBestSource:
        """The set with every list cut to its first ``k`` hypotheses as it is read (itself
        for None); ``sizes`` are those of the cut lists."""
        if k is None:
            return self
        if k < 1:
            raise ValueError(f"expected at least 1 hypothesis per list, got {k}")
        return replace(
            self,
            sizes=tuple(min(n, k) for n in self.sizes),
            whole=None if self.whole is None else self.whole.head(k),
            max_nbest=k if self.max_nbest is None else min(k, self.max_nbest),
        )

    @classmethod
    def of(cls, nbest: NBest, path: Path, fmt: str) -> NBestSource:
        """A source over a set already in memory."""
        return cls(
            path,
            fmt,
            tuple(nbest),
            tuple(len(nb) for nb in nbest.values()),
            nbest.references,
            nbest,
        )

    def chunks(self, hypotheses: int | None = None) -> Iterator[NBest]:
        """The lists in file order, as sets of whole lists of about ``hypotheses`` hypotheses
        (default :data:`~rescorer.core.constants.CHUNK_HYPOTHESES`; at least one list each),
        each with its embedded references.

        A JSONL file is read here a second time: if it no longer holds the lists the first
        pass found (it changed in between), :class:`InputError` says so.
        """
        if hypotheses is None:
            hypotheses = constants.CHUNK_HYPOTHESES
        if hypotheses < 1:
            raise ValueError(f"expected a chunk of at least 1 hypothesis, got {hypotheses}")
        if self.whole is not None:
            yield from self._chunks_of_whole(hypotheses)
            return
        lists: list[NBestList] = []
        refs: dict[str, tuple[str, ...]] = {}
        held = 0
        position = 0
        for nb, ref in iter_jsonl(self.path):
            if position >= len(self.ids) or nb.utt_id != self.ids[position]:
                expected = (
                    repr(shorten(self.ids[position])) if position < len(self.ids) else "the end"
                )
                raise InputError(
                    f"changed while it was read: list {position + 1} is "
                    f"{shorten(nb.utt_id)!r}, the first pass found {expected}",
                    self.path,
                )
            position += 1
            if self.max_nbest is not None:
                nb = nb.head(self.max_nbest)
            lists.append(nb)
            if ref is not None:
                refs[nb.utt_id] = ref
            held += len(nb)
            if held >= hypotheses:
                yield NBest(lists, refs if self.references is not None else None)
                lists, refs, held = [], {}, 0
        if position != len(self.ids):
            raise InputError(
                f"changed while it was read: {position} lists, the first pass found "
                f"{len(self.ids)}",
                self.path,
            )
        if lists:
            yield NBest(lists, refs if self.references is not None else None)

    def _chunks_of_whole(self, hypotheses: int) -> Iterator[NBest]:
        assert self.whole is not None
        part: list[str] = []
        held = 0
        for utt, size in zip(self.ids, self.sizes, strict=True):
            part.append(utt)
            held += size
            if held >= hypotheses:
                yield self.whole.subset(part)
                part, held = [], 0
        if part:
            yield self.whole.subset(part)

    def load(self) -> NBest:
        """The whole set in memory."""
        if self.whole is not None:
            return self.whole
        lists = [nb for chunk in self.chunks() for nb in chunk.values()]
        return NBest(lists, self.references)


def open_nbest(path: str | Path, fmt: str) -> NBestSource:
    """The N-best set at ``path`` in format ``fmt`` (not ``auto``: detect it first), read
    lazily when it is a JSONL file, else read whole."""
    from rescorer.formats import read_nbest

    path = Path(path)
    if fmt == "jsonl" and _readable_twice(path):
        index = index_jsonl(path)
        return NBestSource(path, fmt, index.ids, index.sizes, index.references)
    return NBestSource.of(read_nbest(path, fmt), path, fmt)
