"""NBestSource: a JSONL set read lazily in chunks of whole lists, other sets read whole."""

from __future__ import annotations

import os
import random
import threading
from pathlib import Path

import pytest

from rescorer.core.errors import InputError
from rescorer.formats.json_formats import read_jsonl, write_jsonl
from rescorer.formats.source import NBestSource, open_nbest
from rescorer.nbest import Hypothesis, NBest, NBestList


def random_nbest(n: int = 40, seed: int = 0) -> NBest:
    rng = random.Random(seed)
    lists, refs = [], {}
    for i in range(n):
        hyps = [
            Hypothesis(
                tuple(rng.choice("abcd") for _ in range(rng.randint(0, 5))),
                {"am": -rng.random(), "lm": -rng.random()},
            )
            for _ in range(rng.randint(0, 6))  # empty lists too
        ]
        lists.append(NBestList(f"u{i:03d}", tuple(hyps)))
        if i % 3:
            refs[f"u{i:03d}"] = ("a", "b")
    return NBest(lists, refs)


def check_chunks(chunks: list[NBest], whole: NBest, size: int) -> None:
    """Whole lists, in order, each chunk the fewest lists reaching ``size`` hypotheses."""
    assert [u for c in chunks for u in c] == list(whole)
    for chunk in chunks:
        assert len(chunk) >= 1
        for utt, nb in chunk.items():
            assert nb == whole[utt]
        assert dict(chunk.references or {}) == {
            u: r for u, r in (whole.references or {}).items() if u in chunk
        }
    for chunk in chunks[:-1]:
        assert chunk.num_hyps() >= size
        assert chunk.num_hyps() - len(list(chunk.values())[-1]) < size


def test_jsonl_source_is_read_in_chunks_of_whole_lists(tmp_path: Path) -> None:
    whole = random_nbest()
    path = tmp_path / "set.jsonl"
    write_jsonl(whole, path)
    source = open_nbest(path, "jsonl")
    assert source.streamed and source.whole is None
    assert list(source) == list(whole) and len(source) == len(whole)
    assert source.sizes == tuple(len(nb) for nb in whole.values())
    assert source.num_hyps() == whole.num_hyps()
    assert dict(source.references or {}) == dict(whole.references or {})
    for size in (1, 5, 17, 10_000):
        check_chunks(list(source.chunks(size)), whole, size)
    assert source.load().items() == read_jsonl(path).items()


def test_a_set_read_whole_gives_the_same_chunks(tmp_path: Path) -> None:
    whole = random_nbest(seed=1)
    path = tmp_path / "set.jsonl"
    write_jsonl(whole, path)
    lazy = open_nbest(path, "jsonl")
    eager = NBestSource.of(read_jsonl(path), path, "jsonl")
    assert not eager.streamed
    for size in (1, 7, 100):
        a, b = list(lazy.chunks(size)), list(eager.chunks(size))
        assert [list(c.items()) for c in a] == [list(c.items()) for c in b]
        assert [c.references for c in a] == [c.references for c in b]


def test_chunks_are_read_lazily(tmp_path: Path) -> None:
    """A bad hypothesis on the last line (which the id pass does not look at) is met only
    after the earlier chunks were handed out: the lists are not read ahead."""
    whole = random_nbest(n=30, seed=2)
    path = tmp_path / "set.jsonl"
    write_jsonl(whole, path)
    lines = path.read_text().splitlines()
    lines[-1] = '{"utt": "zz", "hyps": [{"txt": "a"}]}'
    path.write_text("\n".join(lines) + "\n")
    source = open_nbest(path, "jsonl")
    got = []
    with pytest.raises(InputError, match=r"set\.jsonl:30: hypothesis 1: unknown key 'txt'"):
        for chunk in source.chunks(5):
            got.append(chunk)
    assert [u for c in got for u in c] == list(whole)[: sum(len(c) for c in got)]
    assert sum(len(c) for c in got) >= 25  # everything before the bad line was handed out


def test_a_file_changed_between_the_passes_is_refused(tmp_path: Path) -> None:
    whole = random_nbest(n=10, seed=3)
    path = tmp_path / "set.jsonl"
    write_jsonl(whole, path)
    source = open_nbest(path, "jsonl")
    write_jsonl(whole.subset(list(whole)[:6]), path)  # cut short
    with pytest.raises(InputError, match="changed while it was read: 6 lists, the first pass"):
        list(source.chunks(3))
    reordered = list(whole)[::-1]
    write_jsonl(whole.subset(reordered), path)
    with pytest.raises(InputError, match="changed while it was read: list 1 is 'u009'"):
        list(source.chunks(3))


def test_a_pipe_is_read_once_whole(tmp_path: Path) -> None:
    whole = random_nbest(n=12, seed=4)
    src = tmp_path / "set.jsonl"
    write_jsonl(whole, src)
    fifo = tmp_path / "pipe.jsonl"
    os.mkfifo(fifo)
    writer = threading.Thread(target=lambda: fifo.write_bytes(src.read_bytes()))
    writer.start()
    source = open_nbest(fifo, "jsonl")
    writer.join(timeout=10)
    assert not source.streamed
    check_chunks(list(source.chunks(4)), whole, 4)


def test_bad_chunk_size_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "set.jsonl"
    write_jsonl(random_nbest(n=3), path)
    with pytest.raises(ValueError, match="at least 1 hypothesis, got 0"):
        list(open_nbest(path, "jsonl").chunks(0))


@pytest.mark.parametrize("lazy", [True, False])
def test_head_cuts_every_list_as_it_is_read(tmp_path: Path, lazy: bool) -> None:
    """--max-nbest K: the first K hypotheses of each list, read lazily or whole alike."""
    nbest = random_nbest(60, seed=3)
    path = tmp_path / "set.jsonl"
    write_jsonl(nbest, path)
    full = open_nbest(path, "jsonl") if lazy else NBestSource.of(read_jsonl(path), path, "jsonl")
    assert full.streamed is lazy
    cut = full.head(2)
    assert full.head(None) is full
    assert cut.sizes == tuple(min(n, 2) for n in full.sizes)
    assert cut.max_size() == 2 and cut.num_hyps() == sum(cut.sizes)
    lists = [nb for chunk in cut.chunks(7) for nb in chunk.values()]
    assert [nb.hyps for nb in lists] == [nbest[u].hyps[:2] for u in nbest]
    assert cut.load().references == nbest.references
    assert cut.head(5).sizes == cut.sizes  # a larger K does not undo a cut
    with pytest.raises(ValueError, match="at least 1"):
        full.head(0)
