"""Splitting an N-best set into shards by utterance id, and joining scored shards again.

A shard is ``K/N`` (1 <= K <= N): the utterances whose id hashes to K. The hash is BLAKE2b of
the id's UTF-8 bytes, so an utterance lands in the same shard on every run, machine and Python
version (``hash()`` is salted per process and would not do), whatever else is in the set and in
whatever order the lists come. Every id is in exactly one of the N shards.

``rescorer score --shard K/N --out PART`` writes the shard's scored lists to ``PART`` and a
:class:`ShardManifest` beside it (``PART.shard.json``, written last): the shard, the source set
(its number of lists and a digest of its ordered ids), each list's position in the source, and
a digest of ``PART``'s bytes. :func:`merge_shards` (``rescorer merge``) checks that the parts
are the N shards of one source, each once, every list present and none twice, and that no part
changed after its manifest was written, and gives the lists back in the source's order: the
merged JSONL is the file one ``rescorer score`` process would have written.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rescorer.core.errors import InputError, shorten
from rescorer.core.json_input import json_object, read_json, type_name
from rescorer.core.output import atomic_write
from rescorer.nbest import NBest, NBestList

MANIFEST_SUFFIX = ".shard.json"
"""The manifest of a scored shard ``PART`` is ``PART`` + this suffix."""

MANIFEST_FORMAT = 1
"""Version of the manifest's fields; a reader refuses other versions."""

_SHARD = re.compile(r"^\s*([0-9]{1,9})\s*/\s*([0-9]{1,9})\s*$")


@dataclass(frozen=True)
class Shard:
    """Shard ``index`` of ``count`` (1-based, as ``split -n K/N`` counts)."""

    # Which shard, 1 <= index <= count.
    index: int
    # How many shards the set is cut into.
    count: int

    def __post_init__(self) -> None:
        if self.count < 1 or not 1 <= self.index <= self.count:
            raise ValueError(
                f"expected a shard K/N with 1 <= K <= N, got {self.index}/{self.count}"
            )

    @classmethod
    def parse(cls, text: str) -> Shard:
        """``"K/N"`` -> ``Shard(K, N)``; ValueError naming what was expected otherwise."""
        match = _SHARD.match(text)
        if match is None:
            raise ValueError(f"expected a shard K/N such as 1/4, got {shorten(text)!r}")
        return cls(int(match.group(1)), int(match.group(2)))

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"

    def holds(self, utt_id: str) -> bool:
        return shard_index(utt_id, self.count) == self.index


def shard_index(utt_id: str, count: int) -> int:
    """The shard (1..``count``) that utterance ``utt_id`` belongs to."""
    if count < 1:
        raise ValueError(f"expected at least 1 shard, got {count}")
    digest = hashlib.blake2b(utt_id.encode("utf-8"), digest_size=8).digest()
    return 1 + int.from_bytes(digest, "big") % count


def ids_digest(utt_ids: Iterable[str]) -> str:
    """A digest of an ordered list of utterance ids (identifies a source set and its order)."""
    h = hashlib.blake2b(digest_size=16)
    for utt in utt_ids:
        h.update(utt.encode("utf-8"))
        h.update(b"\n")
    return h.hexdigest()


def file_digest(path: Path) -> str:
    """A digest of a file's bytes."""
    h = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


@dataclass(frozen=True)
class ShardManifest:
    """What ``score --shard`` records beside a scored shard, for ``merge`` to check."""

    # Which shard of how many.
    shard: Shard
    # Lists in the whole source set, and the digest of its ordered ids (ids_digest).
    source_lists: int
    source_ids: str
    # Position (0-based) in the source of each list of the part, in the part's order.
    positions: tuple[int, ...]
    # Digest of the part file's bytes (file_digest), so that a part rewritten after its
    # manifest (or a kill between the two writes) is noticed.
    part_digest: str

    def to_json(self) -> dict[str, Any]:
        return {
            "format": MANIFEST_FORMAT,
            "shard": str(self.shard),
            "source_lists": self.source_lists,
            "source_ids": self.source_ids,
            "part_digest": self.part_digest,
            "positions": list(self.positions),
        }

    @classmethod
    def read(cls, path: Path) -> ShardManifest:
        """Read a manifest; InputError naming the file for anything malformed."""
        obj = json_object(read_json(path), path, None, "shard manifest")
        fields = {"format", "shard", "source_lists", "source_ids", "part_digest", "positions"}
        if set(obj) != fields:
            raise InputError(
                f"expected a shard manifest with the fields {sorted(fields)}, got {sorted(obj)}",
                path,
            )
        if obj["format"] != MANIFEST_FORMAT:
            raise InputError(
                f"expected shard manifest format {MANIFEST_FORMAT}, got {obj['format']!r}", path
            )
        try:
            shard = Shard.parse(obj["shard"]) if isinstance(obj["shard"], str) else None
        except ValueError as err:
            raise InputError(str(err), path) from None
        if shard is None:
            raise InputError(f"shard: expected 'K/N', got {type_name(obj['shard'])}", path)
        positions = obj["positions"]
        lists = obj["source_lists"]
        ok_positions = isinstance(positions, list) and all(
            type(p) is int and p >= 0 for p in positions
        )
        if type(lists) is not int or lists < 0 or not ok_positions:
            raise InputError("expected source_lists a count and positions a list of counts", path)
        for key in ("source_ids", "part_digest"):
            if not isinstance(obj[key], str):
                raise InputError(f"{key}: expected a string, got {type_name(obj[key])}", path)
        return cls(shard, lists, obj["source_ids"], tuple(positions), obj["part_digest"])


def manifest_path(part: Path) -> Path:
    return part.with_name(part.name + MANIFEST_SUFFIX)


def take_shard(nbest: NBest, shard: Shard) -> tuple[NBest, tuple[int, ...]]:
    """The lists of ``nbest`` in ``shard`` (in the set's order, with their references) and their
    positions in ``nbest``."""
    keep = [(i, utt) for i, utt in enumerate(nbest) if shard.holds(utt)]
    ids = [utt for _, utt in keep]
    return nbest.subset(ids), tuple(i for i, _ in keep)


def write_manifest(
    part: Path, shard: Shard, source: Collection[str], positions: Sequence[int]
) -> Path:
    """Write the manifest of the scored shard already written to ``part``; returns its path.

    ``source``: the utterance ids of the whole set, in its order (an ``NBest`` will do).
    """
    import json

    manifest = ShardManifest(
        shard, len(source), ids_digest(source), tuple(positions), file_digest(part)
    )
    path = manifest_path(part)
    with atomic_write(path) as f:
        json.dump(manifest.to_json(), f)
        f.write("\n")
    return path


@dataclass(frozen=True)
class ScoredPart:
    """One scored shard as ``merge`` reads it."""

    path: Path
    nbest: NBest
    manifest: ShardManifest


def read_part(path: Path) -> ScoredPart:
    """A scored shard and its manifest, checked against each other."""
    from rescorer.formats.json_formats import read_jsonl

    mpath = manifest_path(path)
    if not mpath.is_file():
        raise InputError(
            f"no shard manifest {mpath.name} beside it: merge joins the parts that "
            "`rescorer score --shard K/N` writes",
            path,
        )
    manifest = ShardManifest.read(mpath)
    if file_digest(path) != manifest.part_digest:
        raise InputError(
            f"its contents are not the ones {mpath.name} describes (rewritten or cut short "
            "after the manifest was written?); score the shard again",
            path,
        )
    nbest = read_jsonl(path)
    if len(nbest) != len(manifest.positions):
        raise InputError(f"holds {len(nbest)} lists, its manifest {len(manifest.positions)}", path)
    for utt in nbest:
        if not manifest.shard.holds(utt):
            raise InputError(f"utterance {shorten(utt)!r} is not in shard {manifest.shard}", path)
    return ScoredPart(path, nbest, manifest)


def merge_parts(parts: Sequence[ScoredPart]) -> NBest:
    """The N shards of one source joined in the source's order.

    ValueError naming the files when the parts are of different sources or shard counts, a
    shard is missing or given twice, a list is in two parts, a list of the source is in none,
    or the parts do not have the same features.
    """
    if not parts:
        raise ValueError("expected the scored shards to merge, got none")
    first = parts[0]
    count = first.manifest.shard.count
    by_index: dict[int, ScoredPart] = {}
    for part in parts:
        m = part.manifest
        if (m.shard.count, m.source_lists, m.source_ids) != (
            count,
            first.manifest.source_lists,
            first.manifest.source_ids,
        ):
            same_source = (m.source_lists, m.source_ids) == (
                first.manifest.source_lists,
                first.manifest.source_ids,
            )
            raise ValueError(
                f"{part.path} is shard {m.shard} of a set of {m.source_lists} lists, "
                f"{first.path} shard {first.manifest.shard} of {first.manifest.source_lists}: "
                "expected the shards of one source cut into one number of shards"
                + ("" if same_source else " (these come from different sources)")
            )
        if m.shard.index in by_index:
            raise ValueError(
                f"{by_index[m.shard.index].path} and {part.path} are both shard {m.shard}: "
                "expected each shard once"
            )
        by_index[m.shard.index] = part
    missing = [k for k in range(1, count + 1) if k not in by_index]
    if missing:
        shown = ", ".join(f"{k}/{count}" for k in missing[:5])
        raise ValueError(
            f"shard{'s' if len(missing) > 1 else ''} {shown}{' ...' if len(missing) > 5 else ''} "
            f"missing: expected all {count} shards, got {len(by_index)}"
        )
    total = first.manifest.source_lists
    slots: list[NBestList | None] = [None] * total
    owner: list[Path | None] = [None] * total
    refs: dict[str, tuple[str, ...]] = {}
    any_refs = False
    features = first.nbest.score_names()
    for part in parts:
        if part.nbest.score_names() != features:
            raise ValueError(
                f"{part.path} has the features {list(part.nbest.score_names())}, "
                f"{first.path} {list(features)}: expected shards scored alike"
            )
        part_refs = part.nbest.references
        any_refs = any_refs or part_refs is not None
        for pos, utt in zip(part.manifest.positions, part.nbest, strict=True):
            if pos >= total:
                raise ValueError(
                    f"{part.path}: position {pos} of {shorten(utt)!r} is past the source's "
                    f"{total} lists"
                )
            if slots[pos] is not None:
                raise ValueError(
                    f"{part.path} and {owner[pos]} both hold list {pos + 1} of the source "
                    f"({shorten(utt)!r} and {shorten(slots[pos].utt_id)!r})"  # type: ignore[union-attr]
                )
            slots[pos] = part.nbest[utt]
            owner[pos] = part.path
            if part_refs is not None and utt in part_refs:
                refs[utt] = part_refs[utt]
    gaps = [i for i, s in enumerate(slots) if s is None]
    if gaps:
        raise ValueError(
            f"{len(gaps)} of the source's {total} lists are in no shard (the first: list "
            f"{gaps[0] + 1}): expected every list in one shard"
        )
    lists = [s for s in slots if s is not None]
    merged = NBest(lists, refs if any_refs else None)
    if ids_digest(merged) != first.manifest.source_ids:
        raise ValueError(
            "the merged ids are not the source's (a part was edited?): expected the ids "
            "the manifests describe"
        )
    return merged
