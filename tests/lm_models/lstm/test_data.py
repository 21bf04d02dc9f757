"""The LSTM family's training data (rescorer.lm_models.lstm.data): a dev corpus of its own, each
process's share, and training streamed from shards (one shard in memory at a time)."""

from __future__ import annotations

import gc
import json
import weakref
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from rescorer.core.errors import InputError
from rescorer.lm_models.batching import bucket_parts
from rescorer.lm_models.checkpoint import load_checkpoint
from rescorer.lm_models.corpus_shards import ShardReader, ShardStream, write_shards
from rescorer.lm_models.distributed import World
from rescorer.lm_models.lstm.data import prepare_data, read_corpus
from rescorer.lm_models.lstm.train import TrainConfig, train, with_train_shards
from tests.lm_models.lstm.test_train import write_corpus


def files(tmp_path: Path) -> tuple[Path, Path]:
    return write_corpus(tmp_path / "train.jsonl", 28, 0), write_corpus(
        tmp_path / "dev.jsonl", 12, 1
    )


def config(tmp_path: Path, epochs: int = 3, **data: object) -> TrainConfig:
    return TrainConfig.from_json({
        "data": {"corpus": "jsonl", "context_fields": ["topic"], "vocab_size": 100,
                 "dev": str(tmp_path / "dev.jsonl"), **data},
        "model": {"mode": "factor", "embed_dim": 16, "hidden_dim": 24, "context_dim": 4,
                  "rank": 2, "context_embed_dim": 4, "dropout": 0.1},
        "train": {"epochs": epochs, "batch_tokens": 120, "lr": 0.02, "device": "cpu"},
    })  # fmt: skip


def bag(examples) -> Counter:
    """The examples as a multiset (an Example's record is a dict: not hashable)."""
    return Counter((e.inputs, e.targets, json.dumps(e.record, sort_keys=True)) for e in examples)


def test_training_from_one_shard_is_training_from_the_file(tmp_path: Path) -> None:
    train_file, _ = files(tmp_path)
    write_shards(train_file, tmp_path / "shards", 1)
    plain = config(tmp_path, path=str(train_file))
    a = train(plain, tmp_path, tmp_path / "a", progress=False)
    b = train(
        with_train_shards(plain, tmp_path / "shards"), tmp_path, tmp_path / "b", progress=False
    )
    # the same examples in the same batches in the same order: the same run, bit for bit
    assert [e.dev_ppl for e in a.epochs] == [e.dev_ppl for e in b.epochs]
    assert [(e.tokens, e.steps) for e in a.epochs] == [(e.tokens, e.steps) for e in b.epochs]
    ma, va, _ = load_checkpoint(tmp_path / "a" / "last")
    mb, vb, _ = load_checkpoint(tmp_path / "b" / "last")
    assert va == vb
    for (name, x), y in zip(ma.state_dict().items(), mb.state_dict().values(), strict=True):
        assert torch.equal(x, y), name


def test_shards_give_the_files_vocabulary_and_every_token_each_epoch(tmp_path: Path) -> None:
    train_file, _ = files(tmp_path)
    write_shards(train_file, tmp_path / "shards", 3)
    whole = prepare_data(config(tmp_path, path=str(train_file)), tmp_path)
    streamed = prepare_data(config(tmp_path, train_shards="shards"), tmp_path)
    assert streamed.train == () and streamed.stream is not None
    assert streamed.vocab == whole.vocab
    assert streamed.vocab.unigram_counts == whole.vocab.unigram_counts
    assert streamed.context_vars == whole.context_vars
    assert streamed.dev == whole.dev
    # Each epoch: every training sentence once, batches formed within a shard.
    parts = list(streamed.train_parts(seed=3))
    assert sorted(shard for shard, _ in parts) == [0, 1, 2]
    examples = [e for _, part in parts for e in part]
    assert bag(examples) == bag(whole.train)
    result = train(
        config(tmp_path, train_shards="shards"), tmp_path, tmp_path / "m", progress=False
    )
    tokens = sum(len(e) for e in whole.train)
    assert [e.tokens for e in result.epochs] == [tokens] * 3
    assert result.best_dev_ppl < 14  # learned: uniform guessing over the 14 types is 14


def test_streamed_training_holds_one_shard_of_examples(tmp_path: Path) -> None:
    train_file, _ = files(tmp_path)
    write_shards(train_file, tmp_path / "shards", 4)
    cfg = config(tmp_path, train_shards="shards")
    data = prepare_data(cfg, tmp_path)
    assert data.stream is not None
    # Weak references to every document read and every example made, per shard.
    held: dict[int, list[weakref.ref]] = {}
    index = data.stream.reader.index

    def read(path: Path) -> list:
        docs = read_corpus(path, cfg.data)
        held.setdefault(int(path.stem.split("-")[1]), []).extend(weakref.ref(d) for d in docs)
        return docs

    def watched(parts):
        for shard, examples in parts:
            held[shard].extend(weakref.ref(e) for e in examples)
            yield shard, examples
            del examples

    data = replace(data, stream=ShardStream(ShardReader(index, read), data.stream.shards))
    seen: list[int] = []
    sentences = 0
    for batch in bucket_parts(watched(data.train_parts(seed=1)), 120, seed=1):
        shard = next(s for s, refs in held.items() if any(r() is batch[0] for r in refs))
        sentences += len(batch)
        if not seen or seen[-1] != shard:
            seen.append(shard)
            del batch
            gc.collect()
            for earlier in seen[:-1]:  # nothing of a shard before this one is alive
                assert all(r() is None for r in held[earlier]), earlier
        batch = None
    assert sorted(seen) == [0, 1, 2, 3] and sentences == 28 * 5


def test_each_process_keeps_its_share_of_the_training_documents(tmp_path: Path) -> None:
    train_file, _ = files(tmp_path)
    cfg = config(tmp_path, path=str(train_file))
    one = prepare_data(cfg, tmp_path)
    shares = [prepare_data(cfg, tmp_path, world=World(r, 2)) for r in range(2)]
    assert all(s.vocab == one.vocab and s.context_vars == one.context_vars for s in shares)
    assert all(s.dev == one.dev and s.contexts == one.contexts for s in shares)
    assert [len(s.train) for s in shares] == [14 * 5, 14 * 5]  # 28 documents of 5 sentences
    assert bag(shares[0].train + shares[1].train) == bag(one.train)


def test_bad_shard_configs_name_the_problem(tmp_path: Path) -> None:
    train_file, _ = files(tmp_path)
    with pytest.raises(ValueError, match='"path" and "train_shards" both'):
        config(tmp_path, path=str(train_file), train_shards="s")
    with pytest.raises(ValueError, match='"train_shards" needs a dev corpus'):
        TrainConfig.from_json({"data": {"corpus": "jsonl", "train_shards": "s"}})
    with pytest.raises(ValueError, match="train_shards hold corpus"):
        TrainConfig.from_json({"data": {"corpus": "brown", "train_shards": "s", "dev": "d"}})
    with pytest.raises(ValueError, match='needs the training corpus "path"'):
        TrainConfig.from_json({"data": {"corpus": "jsonl"}})
    write_shards(train_file, tmp_path / "text", 2, kind="text")
    with pytest.raises(InputError, match="shards of text lines; corpus 'jsonl' reads jsonl"):
        prepare_data(config(tmp_path, train_shards="text"), tmp_path)


def test_subword_units_learnt_from_one_shard_are_the_files(tmp_path: Path) -> None:
    train_file, _ = files(tmp_path)
    write_shards(train_file, tmp_path / "shards", 1)
    tok = {"kind": "bpe", "vocab_size": 300}
    whole = prepare_data(config(tmp_path, path=str(train_file), tokenizer=tok), tmp_path)
    streamed = prepare_data(config(tmp_path, train_shards="shards", tokenizer=tok), tmp_path)
    assert streamed.tokenizer is not None and whole.tokenizer is not None
    assert streamed.tokenizer.model_proto == whole.tokenizer.model_proto
    assert streamed.vocab.unigram_counts == whole.vocab.unigram_counts


# -- a text context derived from the previous sentences (data.previous) -----------------------


def block_corpus(path: Path, docs: int, start: int = 0) -> Path:
    """Documents of five sentences between blank lines; word d{doc}s{i}w{j} says where it is."""
    lines = []
    for d in range(start, start + docs):
        lines += [" ".join(f"d{d}s{i}w{j}" for j in range(3)) for i in range(5)] + [""]
    path.write_text("\n".join(lines), encoding="utf-8")
    return path


def previous_config(tmp_path: Path, previous: dict, **data: object) -> TrainConfig:
    block_corpus(tmp_path / "train.txt", 6)
    block_corpus(tmp_path / "dev.txt", 2, start=100)
    return TrainConfig.from_json({
        "data": {"corpus": "plain", "path": "train.txt", "dev": "dev.txt",
                 "plain_documents": "block", "previous": previous, **data},
        "model": {"mode": "factor", "embed_dim": 8, "hidden_dim": 8, "context_dim": 3,
                  "rank": 2},
        "train": {"epochs": 2, "batch_tokens": 64, "device": "cpu"},
    })  # fmt: skip


def place(word: str) -> tuple[int, int]:
    """(document, sentence) of a word of block_corpus: d{doc}s{i}w{j}."""
    d, rest = word[1:].split("s")
    return int(d), int(rest.split("w")[0])


def test_previous_text_holds_the_earlier_sentences_of_the_same_document(tmp_path: Path) -> None:
    from rescorer.lm_models.text_encoders import HashEmbedder

    cfg = previous_config(tmp_path, {"sentences": 2, "encoder": "hash:16"})
    data = prepare_data(cfg, tmp_path)
    var = data.context_vars[-1]
    assert (var.name, var.kind, var.encoder, var.dim) == ("previous", "text", "hash:16", 16)
    order = [(d, i) for d in range(6) for i in range(5)] + [
        (d, i) for d in (100, 101) for i in range(5)
    ]
    for example, (d, i) in zip(data.train + data.dev, order, strict=True):
        if d < 100:  # the training words are in the vocabulary: the example is sentence i of d
            assert place(data.vocab.tokens[example.inputs[1]]) == (d, i)
        expected = " ".join(f"d{d}s{s}w{j}" for s in range(max(0, i - 2), i) for j in range(3))
        assert example.record == {"previous": expected or None}, (d, i)
    # the mean is the training texts' mean vector (the dev texts are not in it)
    train_texts = [e.record["previous"] for e in data.train if e.record["previous"]]
    mean = HashEmbedder(16).embed(train_texts).astype("float64").mean(axis=0)
    assert var.mean == pytest.approx(mean.tolist(), abs=1e-6)
    # without noise the records are the same every epoch
    assert list(data.train_parts(0, epoch=1))[0][1] == list(data.train_parts(0, epoch=2))[0][1]


def test_noisy_previous_text_is_drawn_anew_each_epoch_and_fixed_for_dev(tmp_path: Path) -> None:
    noise = {"substitution": 0.3, "deletion": 0.1, "insertion": 0.1, "seed": 4}
    cfg = previous_config(tmp_path, {"sentences": 2, "encoder": "hash:16", "noise": noise})
    data = prepare_data(cfg, tmp_path)
    assert data.derived is not None and data.derived.sampler is not None
    [(_, one)], [(_, again)] = list(data.train_parts(0, 1)), list(data.train_parts(5, 1))
    [(_, two)] = list(data.train_parts(0, 2))
    assert one == again  # the same epoch: the same draws whatever the shuffling seed
    assert [e.inputs for e in one] == [e.inputs for e in two] == [e.inputs for e in data.train]
    assert [e.record for e in one] != [e.record for e in two]
    clean = prepare_data(
        previous_config(tmp_path, {"sentences": 2, "encoder": "hash:16"}), tmp_path
    )
    assert [e.record for e in one] != [e.record for e in clean.train]
    # dev: one draw, the fixed one, the same whenever the data are prepared
    assert data.dev == prepare_data(cfg, tmp_path).dev
    assert [e.record for e in data.dev] != [e.record for e in clean.dev]
    # the errors come from the training words and keep to the document's earlier sentences
    drawn = 0
    for example in one:
        d, i = place(data.vocab.tokens[example.inputs[1]])
        for word in (example.record["previous"] or "").split():
            dd, s = place(word)  # every word is a training word
            assert s < i or dd != d  # a clean word of an earlier sentence, or a drawn one
            drawn += (dd, s) not in {(d, i - 1), (d, i - 2)}
    assert drawn > 0


def test_noisy_previous_text_is_the_same_streamed_or_in_memory(tmp_path: Path) -> None:
    train_file, _ = files(tmp_path)
    write_shards(train_file, tmp_path / "shards", 3)
    prev = {"sentences": 3, "encoder": "hash:8", "noise": {"substitution": 0.2, "seed": 2}}
    whole = prepare_data(config(tmp_path, path=str(train_file), previous=prev), tmp_path)
    streamed = prepare_data(config(tmp_path, train_shards="shards", previous=prev), tmp_path)
    assert streamed.context_vars == whole.context_vars  # the topic, then the derived text
    assert [v.kind for v in whole.context_vars] == ["categorical", "text"]
    for epoch in (1, 2):
        parts = [e for _, part in streamed.train_parts(seed=3, epoch=epoch) for e in part]
        assert bag(parts) == bag(next(iter(whole.train_parts(0, epoch)))[1])
    assert all(set(e.record) == {"topic", "previous"} for e in whole.train)


def test_previous_text_config_errors(tmp_path: Path) -> None:
    prev = {"encoder": "hash:8"}
    with pytest.raises(ValueError, match="plain_documents: expected one of"):
        previous_config(tmp_path, prev, plain_documents="para")
    with pytest.raises(ValueError, match="plain_documents is for corpus 'plain'"):
        config(tmp_path, path="x.jsonl", plain_documents="block")
    with pytest.raises(ValueError, match="text shards keep no blank lines"):
        previous_config(tmp_path, prev, path="", train_shards="s")
    with pytest.raises(ValueError, match="also in context_fields"):
        config(tmp_path, path="x.jsonl", previous={"field": "topic"})
    with pytest.raises(ValueError, match=r"noise.insertion: expected a rate in \[0, 1\]"):
        previous_config(tmp_path, {"noise": {"insertion": 2}})
    with pytest.raises(ValueError, match="unknown data.previous.noise key"):
        previous_config(tmp_path, {"noise": {"sub": 0.1}})
    with pytest.raises(ValueError, match="sentences: expected an integer >= 1"):
        previous_config(tmp_path, {"sentences": 0})
    # documents of one sentence each (a plain corpus read by line): nothing to derive from
    with pytest.raises(ValueError, match="no training sentence has an earlier one"):
        prepare_data(previous_config(tmp_path, prev, plain_documents="line"), tmp_path)
