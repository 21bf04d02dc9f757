"""CUE trained from a shard folder of sentence records (rescorer.lm_models.cue.shards): the
vocabulary of the shards' merged counts is the file's, one shard trains bit for bit as the same data
in memory, each process reads only its own shards one at a time, the string vectors are kept on
disk per shard under a key, and bad shards are input errors naming the file and line."""

from __future__ import annotations

import hashlib
import json
import random
import weakref
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torch.multiprocessing as mp

from rescorer.core.errors import InputError
from rescorer.lm_models.corpus_shards import INDEX_FILE, ShardIndex, ShardReader, write_shards
from rescorer.lm_models.cue.model import SentenceLM, render_context
from rescorer.lm_models.cue.shards import (
    CUEShards,
    ShardCounts,
    ShardVectors,
    count_shards,
    read_sentence_records,
)
from rescorer.lm_models.cue.train import (
    CUEData,
    CUETrainOptions,
    batch_count,
    batch_indices,
    make_data,
    train_cue,
    train_proxy_autoencoder,
    train_sentence_lm,
)
from rescorer.lm_models.distributed import ONE_PROCESS, World, close_world, end_process, init_world
from rescorer.lm_models.text_encoders import HashEmbedder, VectorCache
from rescorer.lm_models.vocab import build_vocabulary
from tests.lm_models.cue.test_cue import CTX_DIM, FIELDS, tiny_corpus, tiny_lm, tiny_vocab
from tests.lm_models.test_distributed import _digest, _free_port

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tiny models: one thread

OPTS = CUETrainOptions(epochs=2, max_tokens=40, lr=1e-2, seed=3)


def write_records(path: Path, n: int, seed: int) -> Path:
    """``tiny_corpus`` as JSONL sentence records: the text, its genre and previous sentence."""
    sents, records = tiny_corpus(n, seed)
    lines = [json.dumps({"text": " ".join(s), **r}) for s, r in zip(sents, records, strict=True)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


class CountingEmbedder:
    """The hash embedder, counting the strings it embeds."""

    def __init__(self, dim: int = CTX_DIM) -> None:
        self._inner = HashEmbedder(dim)
        self.name, self.dim = self._inner.name, dim
        self.embedded = 0

    def embed(self, texts: Any) -> np.ndarray:
        self.embedded += len(texts)
        return self._inner.embed(texts)


def in_memory(path: Path, cache: VectorCache) -> CUEData:
    recs = read_sentence_records(path)
    return make_data(tiny_vocab(), recs.sentences, recs.records, FIELDS, cache)


def open_shards(folder: Path, vectors: Path, embedder: Any = None) -> CUEShards:
    stream, counts = count_shards(folder, ONE_PROCESS)
    embedder = HashEmbedder(CTX_DIM) if embedder is None else embedder
    return CUEShards(stream, counts, tiny_vocab(), FIELDS, ShardVectors(vectors, embedder))


# -- vocabulary and counts ------------------------------------------------------------------------


def test_the_shards_counts_give_the_files_vocabulary(tmp_path: Path) -> None:
    corpus = write_records(tmp_path / "train.jsonl", 50, 0)
    sentences = read_sentence_records(corpus).sentences
    write_shards(corpus, tmp_path / "shards", 3)
    stream, counts = count_shards(tmp_path / "shards", ONE_PROCESS)
    assert stream.shards == (0, 1, 2) and counts.sentences == 50
    for max_size, min_count in [(None, 1), (10, 1), (None, 3)]:
        vocab = counts.vocabulary(max_size, min_count)
        file_vocab = build_vocabulary(sentences, max_size, min_count)
        assert vocab == file_vocab  # tokens and unigram counts (</s>: the sentences)
        assert vocab.unigram_counts == file_vocab.unigram_counts
    assert len(counts.vocabulary(10)) == 10 < len(counts.vocabulary())
    # Each shard's sentence lengths (sentence k in shard k mod 3); parts merge to the whole.
    for i in range(3):
        lengths = Counter(len(s) for s in sentences[i::3])
        assert counts.lengths[f"shard-0000{i}.jsonl"] == lengths
    parts = []
    for _, part in stream.parts():
        one = ShardCounts()
        one.add(part)
        parts.append(one)
    assert ShardCounts.merged(parts) == counts


def test_batch_count_from_lengths_is_the_batches_formed(tmp_path: Path) -> None:
    def reference(lengths: list[int], max_tokens: int) -> list[list[int]]:
        """The greedy batching written out sentence by sentence."""
        batches: list[list[int]] = []
        cur: list[int] = []
        for i in sorted(range(len(lengths)), key=lambda i: lengths[i]):
            if cur and (lengths[i] + 1) * (len(cur) + 1) > max_tokens:
                batches.append(cur)
                cur = []
            cur.append(i)
        return [*batches, cur] if cur else batches

    rng = random.Random(0)
    for trial in range(30):
        lengths = [rng.randint(0, 30) for _ in range(rng.randint(1, 80))]
        data = CUEData(tuple(np.zeros(n, np.int64) for n in lengths), ((),) * len(lengths),
                       np.zeros((0, 4), np.float32))  # fmt: skip
        for max_tokens in (1, 5, 16, 40, 333):
            batches = batch_indices(data, max_tokens)
            assert batches == reference(lengths, max_tokens), (trial, max_tokens)
            assert batch_count(Counter(lengths), max_tokens) == len(batches)
    with pytest.raises(ValueError, match="expected lengths and counts >= 0"):
        batch_count({3: -1}, 10)


# -- training ------------------------------------------------------------------------------------


def train_stages(train: Any, dev: CUEData) -> dict[str, Any]:
    """Every stage on ``train`` (in memory or shards): per stage the epoch logs, the best dev
    value and the parameters afterwards."""
    lm = tiny_lm(seed=1, dropout=0.1)  # dropout: the global generator's draws must match too
    torch.manual_seed(2)
    se = SentenceLM(lm.config.sentence)
    got: dict[str, Any] = {}

    def keep(name: str, result: Any, module: torch.nn.Module) -> None:
        got[name] = (
            [(e.train_loss, e.dev, e.steps) for e in result.epochs],
            result.best_dev,
            {k: v.clone() for k, v in module.state_dict().items()},
        )

    keep("sentence", train_sentence_lm(se, train, dev, OPTS), se)
    lm.model.sentence.load_state_dict(se.state_dict())
    keep("proxy AE", train_proxy_autoencoder(lm.model, train, dev, OPTS), lm.model)
    keep("joint", train_cue(lm.model, train, dev, "joint", OPTS), lm.model)
    capped = replace(OPTS, max_steps=3)  # stops inside an epoch
    keep("adapt", train_cue(lm.model, train, dev, "adapt", capped), lm.model)
    keep("proxy", train_cue(lm.model, train, dev, "proxy", replace(OPTS, sigma=0.5)), lm.model)
    return got


def test_one_shard_trains_bit_for_bit_as_the_data_in_memory(tmp_path: Path) -> None:
    corpus = write_records(tmp_path / "train.jsonl", 40, 0)
    cache = VectorCache(HashEmbedder(CTX_DIM))
    memory = in_memory(corpus, cache)
    dev = in_memory(write_records(tmp_path / "dev.jsonl", 12, 1), cache)
    write_shards(corpus, tmp_path / "one", 1)
    shards = open_shards(tmp_path / "one", tmp_path / "vectors")
    a = train_stages(memory, dev)
    b = train_stages(shards, dev)
    for stage, (epochs, best, state) in a.items():
        assert b[stage][0] == epochs and b[stage][1] == best, stage
        assert all(torch.equal(state[k], b[stage][2][k]) for k in state), stage
    assert [s for _, _, s in a["adapt"][0]] == [3, 3]


def test_each_epoch_reads_every_shard_once_holding_one_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    corpus = write_records(tmp_path / "train.jsonl", 45, 0)
    dev = in_memory(write_records(tmp_path / "dev.jsonl", 9, 1), VectorCache(HashEmbedder(32)))
    write_shards(corpus, tmp_path / "shards", 3)
    embedder = CountingEmbedder()
    shards = open_shards(tmp_path / "shards", tmp_path / "vectors", embedder)
    reads: list[int] = []
    alive: list[weakref.ref] = []  # every shard read and every part made of one
    read, data = ShardReader.read, CUEShards.data

    def read_spy(self: ShardReader, i: int) -> Any:
        assert all(r() is None for r in alive), "a shard still held when the next is read"
        reads.append(i)
        out = read(self, i)
        alive.append(weakref.ref(out))
        return out

    def data_spy(self: CUEShards, *args: Any, **kwargs: Any) -> CUEData:
        out = data(self, *args, **kwargs)
        alive.append(weakref.ref(out))
        return out

    monkeypatch.setattr(ShardReader, "read", read_spy)
    monkeypatch.setattr(CUEShards, "data", data_spy)
    lm = tiny_lm()
    opts = replace(OPTS, epochs=4)
    result = train_cue(lm.model, shards, dev, "joint", opts)
    assert [e.steps for e in result.epochs] == [shards.batch_count(opts.max_tokens)] * 4
    orders = [tuple(reads[k : k + 3]) for k in range(0, 12, 3)]
    assert len(reads) == 12 and all(sorted(o) == [0, 1, 2] for o in orders)
    assert len(set(orders)) > 1  # an order drawn anew each epoch
    # The vectors: computed in the first epoch, one file pair per shard, loaded afterwards.
    records = read_sentence_records(corpus).records
    computed = embedder.embedded  # each shard's distinct strings
    assert computed == sum(
        len({s for r in records[i::3] for s in render_context(r, FIELDS)}) for i in range(3)
    )
    assert len(list((tmp_path / "vectors").glob("*.safetensors"))) == 3
    reads.clear()
    train_cue(lm.model, shards, dev, "decoder", replace(OPTS, max_steps=2))
    assert embedder.embedded == computed  # loaded
    assert len(reads) == OPTS.epochs  # 2 steps an epoch: one shard read each
    # The stages that ignore the context read no vectors (and need none).
    plain = replace(shards, vectors=None)
    train_sentence_lm(SentenceLM(lm.config.sentence), plain, dev, replace(OPTS, epochs=1))
    with pytest.raises(ValueError, match="mode 'joint' reads the context strings: expected"):
        train_cue(lm.model, plain, dev, "joint", OPTS)


def test_cached_vectors_equal_fresh_ones_and_a_changed_key_recomputes(tmp_path: Path) -> None:
    corpus = write_records(tmp_path / "train.jsonl", 30, 0)
    write_shards(corpus, tmp_path / "shards", 2)
    vectors = tmp_path / "vectors"

    def every_part(embedder: Any, fields: Any = FIELDS) -> list[CUEData]:
        shards = replace(open_shards(tmp_path / "shards", vectors, embedder), context_fields=fields)
        return [shards.data(part, i) for i, part in shards.stream.parts()]

    first = CountingEmbedder()
    fresh = every_part(first)
    assert first.embedded > 0 and len(list(vectors.glob("*.strings.jsonl"))) == 2
    records = read_sentence_records(corpus).records
    for i, part in enumerate(fresh):  # the encoder's vectors of each sentence's strings
        for k, rows in enumerate(part.contexts):
            strings = render_context(records[2 * k + i], FIELDS)
            assert np.array_equal(part.table[list(rows)], HashEmbedder(CTX_DIM).embed(strings))
    again = CountingEmbedder()
    cached = every_part(again)
    assert again.embedded == 0  # loaded from disk
    for a, b in zip(fresh, cached, strict=True):
        assert all(np.array_equal(x, y) for x, y in zip(a.sentences, b.sentences, strict=True))
        assert a.contexts == b.contexts and np.array_equal(a.table, b.table)
    # Another field list, another embedder, other shard contents: computed anew.
    fewer = CountingEmbedder()
    every_part(fewer, (("genre", "genre"),))
    assert 0 < fewer.embedded <= 2  # the two genres
    narrow = CountingEmbedder(16)
    assert every_part(narrow)[0].table.shape[1] == 16 and narrow.embedded > 0
    write_shards(write_records(tmp_path / "other.jsonl", 30, 5), tmp_path / "shards", 2)
    changed = CountingEmbedder()
    every_part(changed)
    assert changed.embedded > 0
    assert len(list(vectors.glob("*.safetensors"))) == 2 * 4  # one pair per shard and key


# -- errors -------------------------------------------------------------------------------------


def _replace_shard(folder: Path, i: int, text: str) -> Path:
    """Shard ``i`` of ``folder`` holding ``text``, the index updated to it (a shard written
    badly from the start, not one changed since)."""
    index = ShardIndex.load(folder)
    path = index.path(i)
    path.write_text(text, encoding="utf-8")
    data = path.read_bytes()
    info = replace(index.shards[i], bytes=len(data), sha256=hashlib.sha256(data).hexdigest())
    shards = tuple(info if k == i else s for k, s in enumerate(index.shards))
    raw = replace(index, shards=shards).to_json()
    (folder / INDEX_FILE).write_text(json.dumps(raw), encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('{"genre": "press"}', "expected a 'text' \\(the sentence\\) in every record"),
        ('{"text": "a cat", "genre": "pr', "invalid JSON"),
        ('{"text": ["a", "cat"]}', "expected 'text' a string \\(the sentence\\), got list"),
        ('["a", "cat"]', "expected a JSON object \\(a sentence record\\), got list"),
    ],
)
def test_a_bad_shard_is_an_input_error_naming_file_and_line(
    tmp_path: Path, line: str, message: str
) -> None:
    write_shards(write_records(tmp_path / "train.jsonl", 6, 0), tmp_path / "shards", 2)
    path = _replace_shard(tmp_path / "shards", 1, f'{{"text": "the cat"}}\n{line}\n')
    with pytest.raises(InputError, match=message) as err:
        count_shards(tmp_path / "shards", ONE_PROCESS)
    assert err.value.path == str(path) and err.value.line == 2
    assert str(err.value).startswith(f"{path}:2: ")


def test_shards_of_another_process_or_kind_are_refused(tmp_path: Path) -> None:
    corpus = write_records(tmp_path / "train.jsonl", 8, 0)
    write_shards(corpus, tmp_path / "shards", 2)
    shards = open_shards(tmp_path / "shards", tmp_path / "vectors")
    with pytest.raises(ValueError, match="process 1 of 2 trains on shards \\[1\\]"):
        shards.check(World(1, 2))
    shards.check(ONE_PROCESS)
    with pytest.raises(ValueError, match="expected the counts of this process's shards"):
        CUEShards(shards.stream, ShardCounts(), tiny_vocab(), FIELDS)
    text = tmp_path / "train.txt"
    text.write_text("the cat\na dog\n")
    write_shards(text, tmp_path / "text", 2)
    with pytest.raises(InputError, match="shards of text lines; corpus 'cue' reads jsonl"):
        count_shards(tmp_path / "text", ONE_PROCESS)


# -- two processes -------------------------------------------------------------------------------


def _two_stages(tmp: Path, world: World) -> dict[str, Any]:
    """The sentence LM and joint stages on this process's shards of ``tmp/shards``."""
    cache = VectorCache(HashEmbedder(CTX_DIM))
    dev = in_memory(tmp / "dev.jsonl", cache)
    stream, counts = count_shards(tmp / "shards", world)
    vocab = counts.vocabulary()
    shards = CUEShards(
        stream, counts, tiny_vocab(), FIELDS, ShardVectors(tmp / "vectors", cache.embedder)
    )
    lm = tiny_lm(seed=1)
    got: dict[str, Any] = {"vocab": list(vocab), "batches": shards.batch_count(OPTS.max_tokens)}
    se = SentenceLM(lm.config.sentence)
    result = train_sentence_lm(se, shards, dev, OPTS)
    got["sentence"] = ([(e.steps, e.dev) for e in result.epochs], _digest(se))
    lm.model.sentence.load_state_dict(se.state_dict())
    result = train_cue(lm.model, shards, dev, "joint", OPTS)
    got["joint"] = ([(e.steps, e.dev) for e in result.epochs], _digest(lm.model))
    return got


def _shard_worker(rank: int, port: int, tmp: str) -> None:
    from tests.lm_models.test_streamed_training import start_shard_worker

    reads = start_shard_worker(rank, port)
    got = _two_stages(Path(tmp), init_world("cpu"))
    got["reads"] = reads
    Path(tmp, f"rank{rank}.json").write_text(json.dumps(got))
    end_process(close_world())  # neither leaves while the other talks to it; no teardown


@pytest.mark.slow
def test_two_processes_read_their_own_shards_and_end_alike(tmp_path: Path) -> None:
    corpus = write_records(tmp_path / "train.jsonl", 48, 0)
    write_records(tmp_path / "dev.jsonl", 12, 1)
    write_shards(corpus, tmp_path / "shards", 4)
    mp.spawn(_shard_worker, args=(_free_port(), str(tmp_path)), nprocs=2, join=True)
    two = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    for rank, got in enumerate(two):  # the counting pass and every epoch: its shards only
        assert set(got["reads"]) == {rank, rank + 2}, (rank, got["reads"])
        assert len(got["reads"]) == 2 * (1 + 2 * OPTS.epochs)  # count, 2 stages x epochs
    # The vocabulary of the merged counts is the file's; both processes end alike.
    file_vocab = build_vocabulary(read_sentence_records(corpus).sentences)
    assert two[0]["vocab"] == two[1]["vocab"] == list(file_vocab)
    for stage in ("sentence", "joint"):
        assert two[0][stage] == two[1][stage], stage  # steps, dev values, parameters
        steps = min(two[0]["batches"], two[1]["batches"])
        assert [s for s, _ in two[0][stage][0]] == [steps] * OPTS.epochs
    assert len(list((tmp_path / "vectors").glob("*.safetensors"))) == 4
