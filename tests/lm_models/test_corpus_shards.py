"""The sharded corpus format (rescorer.lm_models.corpus_shards): a stable partition of the lines, an
index that is checked, and a reader that holds one shard at a time."""

from __future__ import annotations

import gc
import hashlib
import json
import weakref
from pathlib import Path

import pytest

from rescorer.core.errors import InputError
from rescorer.lm_models.corpora import read_plain
from rescorer.lm_models.corpus_shards import (
    INDEX_FILE,
    ShardIndex,
    ShardReader,
    check_all,
    kind_of,
    lines_of,
    write_shards,
)

LINES = [f"w{i} x{i % 3} y" for i in range(11)]


def write_text(path: Path) -> Path:
    # blank lines (left out) among the sentences
    path.write_text("\n".join([LINES[0], "", *LINES[1:6], "  ", *LINES[6:]]) + "\n")
    return path


def test_shards_partition_the_lines_in_turn_and_are_stable(tmp_path: Path) -> None:
    source = write_text(tmp_path / "c.txt")
    index = write_shards(source, tmp_path / "a", 3)
    assert index.kind == "text" and index.lines == 11 and index.words == 33
    files = [(tmp_path / "a" / s.file).read_text().splitlines() for s in index.shards]
    assert files == [LINES[0::3], LINES[1::3], LINES[2::3]]  # line k in shard k mod 3, in order
    for info, lines in zip(index.shards, files, strict=True):
        data = (tmp_path / "a" / info.file).read_bytes()
        assert (info.lines, info.bytes) == (len(lines), len(data))
        assert info.sha256 == hashlib.sha256(data).hexdigest()
    assert sorted(lines_of(ShardIndex.load(tmp_path / "a"))) == sorted(LINES)
    # the same input gives byte-identical shards and index (another folder, same names)
    write_shards(source, tmp_path / "b", 3)
    for name in [INDEX_FILE, *(s.file for s in index.shards)]:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    # written again over itself with fewer shards: the old shard files go
    write_shards(source, tmp_path / "a", 2)
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == [
        INDEX_FILE,
        "shard-00000.txt",
        "shard-00001.txt",
    ]


def test_jsonl_documents_are_checked_and_counted(tmp_path: Path) -> None:
    docs = [{"id": f"d{i}", "text": ["a b", "c"] if i % 2 else "a b c d"} for i in range(4)]
    source = tmp_path / "c.jsonl"
    source.write_text("".join(json.dumps(d) + "\n" for d in docs))
    index = write_shards(source, tmp_path / "s", 2)
    assert index.kind == "jsonl" and index.words == 3 + 4 + 3 + 4
    assert [s.file for s in index.shards] == ["shard-00000.jsonl", "shard-00001.jsonl"]
    source.write_text(json.dumps(docs[0]) + '\n{"id": "x", "text": 3}\n')
    with pytest.raises(InputError, match=r"c\.jsonl:2: 'text' must be"):
        write_shards(source, tmp_path / "t", 2)
    source.write_text(json.dumps(docs[0]) + "\n[1, 2\n")
    with pytest.raises(InputError, match=r"c\.jsonl:2:"):
        write_shards(source, tmp_path / "t", 2)
    assert not (tmp_path / "t").exists()  # nothing is left of a failed write
    source.write_text(json.dumps(docs[0]) + "\n\n")
    with pytest.raises(InputError, match=r"c\.jsonl: 1 non-blank lines cannot fill 2 shards"):
        write_shards(source, tmp_path / "t", 2, kind="text")
    with pytest.raises(ValueError, match="kind must be one of"):
        write_shards(source, tmp_path / "t", 2, kind="csv")


def test_a_missing_truncated_or_changed_shard_is_one_error_naming_it(tmp_path: Path) -> None:
    write_shards(write_text(tmp_path / "c.txt"), tmp_path / "s", 3)
    shard = tmp_path / "s" / "shard-00001.txt"
    text = shard.read_bytes()
    # changed, same size: found by the checksum, when the shard is read
    shard.write_bytes(text.replace(b"w1", b"w9"))
    index = ShardIndex.load(tmp_path / "s")
    reader = ShardReader(index, read_plain)
    reader.read(0)
    with pytest.raises(InputError, match=r"shard-00001\.txt: shard 1: SHA-256 .* differs"):
        reader.read(1)
    with pytest.raises(InputError, match=r"shard-00001\.txt"):
        check_all(index)
    # truncated: found when the index is loaded
    shard.write_bytes(text[:-3])
    with pytest.raises(InputError, match=r"shard-00001\.txt: shard 1 has \d+ bytes, index"):
        ShardIndex.load(tmp_path / "s")
    shard.unlink()
    with pytest.raises(InputError, match=r"shard-00001\.txt: shard 1 listed in index\.json is"):
        ShardIndex.load(tmp_path / "s")
    with pytest.raises(InputError, match="no index.json"):
        ShardIndex.load(tmp_path)
    (tmp_path / "s" / INDEX_FILE).write_text('{"format": "lm_models.corpus_shards", "version": 7}')
    with pytest.raises(InputError, match=r"index\.json: expected format version 1, got 7"):
        ShardIndex.load(tmp_path / "s")
    (tmp_path / "s" / INDEX_FILE).write_text("{")
    with pytest.raises(InputError, match=r"index\.json"):
        ShardIndex.load(tmp_path / "s")


def test_processes_read_disjoint_shards(tmp_path: Path) -> None:
    index = write_shards(write_text(tmp_path / "c.txt"), tmp_path / "s", 4)
    assert [index.assigned(r, 2) for r in range(2)] == [(0, 2), (1, 3)]
    assert index.assigned(0, 1) == (0, 1, 2, 3)
    with pytest.raises(ValueError, match="4 shards for 5 processes"):
        index.assigned(0, 5)


def test_the_reader_holds_one_shard_at_a_time(tmp_path: Path) -> None:
    index = write_shards(write_text(tmp_path / "c.txt"), tmp_path / "s", 3)
    reads: list[Path] = []

    def read(path: Path) -> list:
        reads.append(path)
        return read_plain(path)

    reader = ShardReader(index, read)
    parts = reader.parts([0, 1, 2], seed=5)
    previous: list[weakref.ref] = []
    order = []
    for shard, docs in parts:
        assert len(reads) == len(order) + 1  # read lazily: only when asked for
        order.append(shard)
        assert len(docs) == index.shards[shard].lines
        gc.collect()
        assert all(ref() is None for ref in previous)  # nothing of the shard before is held
        previous = [weakref.ref(d) for d in docs]
        del docs
    assert sorted(order) == [0, 1, 2]
    assert order == [s for s, _ in ShardReader(index, read).parts([0, 1, 2], seed=5)]


def test_conllu_sentences_are_the_units(tmp_path: Path) -> None:
    from rescorer.lm_models.conllu import read_conllu
    from tests.lm_models.test_conllu import GOOD

    # GOOD: two sentences (a multiword token, an empty node, no final blank line); five of them
    # with extra blank lines between some.
    source = tmp_path / "c.conllu"
    source.write_text("\n\n\n".join([GOOD] * 3) + "\n\n" + "\n\n".join([GOOD] * 2))
    assert kind_of(source) == "conllu" and kind_of("x.conllu.gz") == "conllu"
    index = write_shards(source, tmp_path / "s", 3)
    assert index.kind == "conllu" and index.lines == 10  # sentences
    assert index.words == 5 * (6 + 3)  # syntactic words: not the multiword token, empty node
    assert [s.file for s in index.shards] == [f"shard-0000{i}.conllu" for i in range(3)]
    whole = read_conllu(source)
    for i in range(3):  # sentence k in shard k mod 3, in order, read back as it was
        got = read_conllu(tmp_path / "s" / index.shards[i].file)
        assert got == whole[i::3]  # words, multiword tokens, empty nodes, comments
        assert index.shards[i].lines == len(got)
    write_shards(source, tmp_path / "t", 3)
    for name in [INDEX_FILE, *(s.file for s in index.shards)]:
        assert (tmp_path / "s" / name).read_bytes() == (tmp_path / "t" / name).read_bytes()
    source.write_text(GOOD.replace("\tSG\tNumber=Sing\t5", " SG"))  # line 7: too few fields
    with pytest.raises(InputError, match=r"c\.conllu:7: expected a comment or 10 tab-separated"):
        write_shards(source, tmp_path / "u", 2)
    source.write_text(GOOD)
    with pytest.raises(InputError, match=r"c\.conllu: 2 sentences cannot fill 3 shards"):
        write_shards(source, tmp_path / "u", 3)


def test_only_the_shard_files_are_the_sets(tmp_path: Path) -> None:
    """issue 51: `corpus shard` into a folder removed a file it had not written (o2/mine.txt),
    and `--out .` changed unrelated files of the current folder. The set is the index and the
    shard files; anything else in the folder stays as it was."""
    source = write_text(tmp_path / "c.txt")
    out = tmp_path / "o2"
    out.mkdir()
    (out / "mine.txt").write_text("the user's\n")
    write_shards(source, out, 3)
    write_shards(source, out, 2)  # fewer shards: the third one is the set's own, dropped
    assert sorted(p.name for p in out.iterdir()) == [
        "index.json", "mine.txt", "shard-00000.txt", "shard-00001.txt"
    ]  # fmt: skip
    assert (out / "mine.txt").read_text() == "the user's\n"
