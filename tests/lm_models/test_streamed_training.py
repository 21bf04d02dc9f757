"""The FNLM and the LBL trained from a sharded corpus (data.train_shards): one process builds from
the shards what it builds from the file (vocabularies, factor values, lexicon, Brown classes,
attribute values, vocabulary blocks, count-flattening weights), trains bit for bit as on the file
from one shard, and two gloo processes each read only their own shards and end with the same
parameters and the one-process vocabulary and weights."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torch.multiprocessing as mp

from rescorer.core.errors import InputError
from rescorer.lm_models.corpus_shards import ShardReader, write_shards
from rescorer.lm_models.distributed import ONE_PROCESS, close_world, end_process, total_counts
from rescorer.lm_models.fnlm.model import pattern_keys
from rescorer.lm_models.training import config_training_main
from tests.lm_models.lbl.test_lbl import write_jsonl
from tests.lm_models.test_distributed import _free_port, _lines, _run_family, _same

NOUNS = {"cat": "NOUN", "dog": "NOUN", "bird": "NOUN", "fish": "NOUN"}
UPOS = {**NOUNS, "the": "DET", "on": "ADP", "sat": "VERB", "ran": "VERB", "ate": "VERB"}


pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tiny models: one thread


def write_conllu(path: Path, n: int, seed: int) -> Path:
    """``_lines`` sentences as CoNLL-U (lemma = form, UPOS by word), a comment before each and
    a multiword token in every fifth, the last sentence without its blank line."""
    blocks = []
    for k, line in enumerate(_lines(n, seed).splitlines()):
        rows = [f"# sent_id = s{k}"]
        words = line.split()
        for i, w in enumerate(words, 1):
            if k % 5 == 0 and i == 2:
                rows.append(f"2-3\t{w}{words[2]}\t_\t_\t_\t_\t_\t_\t_\t_")
            rows.append(f"{i}\t{w}\t{w}\t{UPOS[w]}\t_\t_\t_\t_\t_\t_")
        blocks.append("\n".join(rows))
    path.write_text("\n\n".join(blocks) + "\n", encoding="utf-8")
    return path


# -- the FNLM ------------------------------------------------------------------------------------


def fnlm_config(tmp_path: Path, corpus: str = "plain", epochs: int = 2, **data: Any) -> Any:
    from rescorer.lm_models.fnlm.train import FNLMTrainConfig

    if corpus == "plain":
        (tmp_path / "train.txt").write_text(_lines(200, 0))
        (tmp_path / "dev.txt").write_text(_lines(40, 1))
        files = {"train": "train.txt", "dev": "dev.txt", "factors": ["word"]}
        model = {"num_classes": 4}
    else:  # annotation factors (a lexicon), rare values unknown, Brown classes
        write_conllu(tmp_path / "train.conllu", 120, 0)
        write_conllu(tmp_path / "dev.conllu", 30, 1)
        files = {"train": "train.conllu", "dev": "dev.conllu", "factors": ["word", "upos", "lemma"],
                 "input_min_count": 2}  # fmt: skip
        model = {"num_classes": 4, "classes": "brown"}
    if "train_shards" in data:
        files.pop("train")
    return FNLMTrainConfig.from_json({
        "data": {"corpus": corpus, "output_min_count": 2, **files, **data},
        "model": {"order": 3, "embed_dim": 8, "hidden_dim": 16, **model},
        "train": {"epochs": epochs, "batch_size": 32, "lr": 0.01},
    })  # fmt: skip


def file_weights(cfg: Any, tmp_path: Path, n_shards: int) -> tuple[Any, dict[int, np.ndarray]]:
    """The one-process model from the file, and the count-flattening weights of the file's rows
    grouped as the shards group the sentences (sentence k in shard k mod n_shards)."""
    from rescorer.lm_models.fnlm.model import flattening_weights
    from rescorer.lm_models.fnlm.train import build_lm, patterns_of, read_train_dev

    train, _ = read_train_dev(cfg.data, tmp_path)
    lm, summary = build_lm(cfg, train)
    enc = lm.encode(train)
    weights = flattening_weights(patterns_of(enc), cfg.train.flatten_alpha)
    ends = np.cumsum(enc.lengths)
    per_sentence = np.split(weights, ends[:-1])
    grouped = {
        s: np.concatenate(per_sentence[s::n_shards]).astype(np.float32) for s in range(n_shards)
    }
    return (lm, summary), grouped


def assert_same_lm(a: Any, b: Any) -> None:
    assert list(a.vocab) == list(b.vocab)
    if a.vocab.unigram_counts and b.vocab.unigram_counts:  # (a checkpoint keeps no unit counts)
        assert a.vocab.unigram_counts == b.vocab.unigram_counts
    assert a.model.config == b.model.config  # classes, factor sizes, unk share, rare types
    assert [v.values for v in a.encoder.vocabs] == [v.values for v in b.encoder.vocabs]
    assert [v.counts for v in a.encoder.vocabs] == [v.counts for v in b.encoder.vocabs]
    assert a.word_counts == b.word_counts
    assert (a.lexicon is None) == (b.lexicon is None)
    if a.lexicon is not None:
        assert a.lexicon.entries == b.lexicon.entries


@pytest.mark.parametrize("corpus", ["plain", "conllu"])
def test_fnlm_shards_give_the_files_vocabularies_and_weights(corpus: str, tmp_path: Path) -> None:
    from rescorer.lm_models.fnlm.train import _data_streamed

    cfg = fnlm_config(tmp_path, corpus)
    (lm, summary), weights = file_weights(cfg, tmp_path, 3)
    index = write_shards(tmp_path / cfg.data.train, tmp_path / "shards", 3)
    assert index.kind == {"plain": "text", "conllu": "conllu"}[corpus]
    streamed = _data_streamed(cfg.with_train_shards("shards"), tmp_path, ONE_PROCESS)
    assert_same_lm(streamed.lm, lm)
    assert streamed.summary == summary
    if corpus == "conllu":
        assert lm.lexicon is not None and len(lm.lexicon) > 5
        assert len(set(lm.model.config.word_classes)) > 1  # Brown classes from merged bigrams
    # Every shard's rows each epoch (seed 0: epoch 1 draws its shard order with seed 1), with
    # the weights of the file's counts.
    parts = list(streamed.parts(1))
    assert sum(len(p) for p in parts) == sum(len(w) for w in weights.values())
    assert streamed.stream is not None
    for (shard, _), part in zip(streamed.stream.parts(1), parts, strict=True):
        assert torch.equal(part.weights, torch.from_numpy(weights[shard])), shard


def test_fnlm_from_one_shard_trains_as_from_the_file(tmp_path: Path) -> None:
    cfg = fnlm_config(tmp_path, "plain")
    write_shards(tmp_path / "train.txt", tmp_path / "one", 1)
    a = _run_family("fnlm", cfg, tmp_path, tmp_path / "a")
    b = _run_family("fnlm", cfg.with_train_shards("one"), tmp_path, tmp_path / "b")
    assert a == b  # the same rows, weights and batches: the same parameters, bit for bit
    meta = json.loads((tmp_path / "b" / "training.json").read_text())
    assert meta["config"]["data"]["train_shards"] == "one"


# -- the LBL -------------------------------------------------------------------------------------


def lbl_config(tmp_path: Path, epochs: int = 2, **data: Any) -> Any:
    from rescorer.lm_models.lbl.train import LBLTrainConfig

    write_jsonl(tmp_path / "docs.jsonl", 24, 0)
    write_jsonl(tmp_path / "dev.jsonl", 6, 1)
    files = {"dev": "dev.jsonl", **data}
    if "train_shards" not in data:
        files["path"] = "docs.jsonl"
    return LBLTrainConfig.from_json({
        "data": {"corpus": "jsonl", "attributes": ["genre", "doc"], "max_vocab": 8,
                 **files},
        "model": {"order": 3, "embed_dim": 6, "factors": 6, "attr_dims": {"genre": 3, "doc": 2},
                  "vocab_attribute": "genre"},
        "train": {"epochs": epochs, "batch_size": 16, "lr": 0.1, "attribute_dropout": 0.3},
    })  # fmt: skip


def test_lbl_shards_give_the_files_vocabulary_and_attributes(tmp_path: Path) -> None:
    from rescorer.lm_models.lbl.train import (
        LBLCounts,
        build_model,
        model_of_counts,
        read_data,
        read_documents,
    )

    cfg = lbl_config(tmp_path)
    docs = read_documents(cfg.data, tmp_path)
    model, vocab, summary = build_model(cfg, docs)
    write_shards(tmp_path / "docs.jsonl", tmp_path / "shards", 5)  # 24 documents: 5 or 4 each
    data = read_data(cfg.with_train_shards("shards"), tmp_path, ONE_PROCESS)
    assert data.train == [] and data.train_ids == [] and data.stream is not None
    streamed, streamed_vocab, streamed_summary = model_of_counts(cfg, data.counts)
    assert streamed_vocab == vocab and streamed_vocab.unigram_counts == vocab.unigram_counts
    assert streamed.config == model.config  # attribute values (every doc id), word blocks
    assert streamed_summary == summary
    assert summary["train_unk_rate"] > 0  # max_vocab 8 leaves words out: <unk> counted
    assert set(model.config.word_blocks) == {-1, 0, 1}
    # Each epoch reads every document once, shard by shard.
    seen = [d.doc_id for _, part in data.stream.parts(seed=3) for d in part]
    assert sorted(seen) == sorted(d.doc_id for d in docs)
    # The counts of parts merge to the counts of the whole.
    halves = [LBLCounts.of(cfg, docs[:10]), LBLCounts.of(cfg, docs[10:])]
    assert LBLCounts.merged(halves) == LBLCounts.of(cfg, docs)


def test_lbl_from_one_shard_trains_as_from_the_file(tmp_path: Path) -> None:
    cfg = lbl_config(tmp_path)
    write_shards(tmp_path / "docs.jsonl", tmp_path / "one", 1)
    a = _run_family("lbl", cfg, tmp_path, tmp_path / "a")
    b = _run_family("lbl", cfg.with_train_shards("one"), tmp_path, tmp_path / "b")
    assert a == b
    split = json.loads((tmp_path / "b" / "training.json").read_text())["split"]
    assert split["train"] == [] and split["train_shards"] == str(tmp_path / "one")
    assert split["dev"] == [f"d{i}" for i in range(6)]  # the dev corpus whole, no split


# -- errors --------------------------------------------------------------------------------------


def test_shard_configs_are_refused_with_one_clear_message(tmp_path: Path) -> None:
    from rescorer.lm_models.fnlm.train import FNLMTrainConfig, train_fnlm
    from rescorer.lm_models.lbl.train import LBLTrainConfig, train_lbl

    lbl = {"corpus": "jsonl", "attributes": ["genre"]}
    for data, message in [
        ({**lbl, "train_shards": "s"}, r'"train_shards" needs a dev corpus: "dev" \(the split'),
        ({**lbl, "train_shards": "s", "dev": "d", "path": "p"}, '"path" and "train_shards" both'),
        ({**lbl, "corpus": "brown", "train_shards": "s", "dev": "d"}, 'hold corpus "jsonl" doc'),
        (lbl, 'needs the training corpus "path"'),
    ]:
        with pytest.raises(ValueError, match=message):
            LBLTrainConfig.from_json({"data": data})
    fnlm = {"corpus": "plain", "dev": "d"}
    for data, message in [
        ({**fnlm, "train_shards": "s", "train": "t"}, '"train" and "train_shards" both'),
        ({**fnlm, "corpus": "brown", "train_shards": "s"}, r"hold corpus \['conllu', 'plain'\]"),
        ({"corpus": "conllu", "train_shards": "s"}, "'conllu' needs a dev file"),
        (fnlm, 'needs the training corpus "train"'),
    ]:
        with pytest.raises(ValueError, match=message):
            FNLMTrainConfig.from_json({"data": data})
    # shards of the wrong kind for the corpus: an InputError naming the folder
    write_shards(write_conllu(tmp_path / "c.conllu", 4, 0), tmp_path / "cs", 2)
    cfg = fnlm_config(tmp_path, "plain", train_shards="cs")
    with pytest.raises(InputError, match="cs: shards of CoNLL-U sentences; corpus 'plain' reads"):
        train_fnlm(cfg, tmp_path, tmp_path / "m", progress=False)
    cfg = lbl_config(tmp_path, train_shards="cs")
    with pytest.raises(InputError, match="shards of CoNLL-U sentences; corpus 'jsonl' reads json"):
        train_lbl(cfg, tmp_path, tmp_path / "m", progress=False)


def test_train_shards_on_the_command_line(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from rescorer.lm_models.lbl.train import LBLTrainConfig, train_lbl

    lbl_config(tmp_path)  # the corpus
    write_shards(tmp_path / "docs.jsonl", tmp_path / "shards", 2)
    config = {"data": {"corpus": "jsonl", "path": "docs.jsonl", "attributes": ["genre"]},
              "model": {"order": 3, "embed_dim": 4, "factors": 4, "attr_dims": 2},
              "train": {"epochs": 1, "batch_size": 64}}  # fmt: skip
    (tmp_path / "c.json").write_text(json.dumps(config))
    args = [str(tmp_path / "c.json"), "--out", str(tmp_path / "m"), "--data-dir", str(tmp_path)]
    main = ("python -m rescorer.lm_models.lbl.train", None, LBLTrainConfig.load, train_lbl)
    with pytest.raises(SystemExit) as stop:
        config_training_main([*args, "--train-shards", "shards", "--quiet"], *main)
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ['error: data "train_shards" needs a dev corpus: "dev" (the split fractions '
                   "do not apply to shards)"]  # fmt: skip
    config["data"]["dev"] = "dev.jsonl"
    (tmp_path / "c.json").write_text(json.dumps(config))
    config_training_main([*args, "--train-shards", "shards", "--quiet"], *main)
    meta = json.loads((tmp_path / "m" / "training.json").read_text())
    assert (
        meta["config"]["data"]["train_shards"] == "shards" and meta["config"]["data"]["path"] == ""
    )
    assert meta["data"]["train_documents"] == 24


def test_total_counts_in_one_process_adds_up_repeated_keys() -> None:
    keys = pattern_keys(np.array([[1, 2], [3, 4], [1, 2], [0, 0]]))
    totals, smallest = total_counts(keys, np.array([2, 1, 3, 1]), ONE_PROCESS)
    assert totals.tolist() == [5, 1, 5, 1] and smallest == 1
    totals, smallest = total_counts(keys[:0], np.zeros(0, np.int64), ONE_PROCESS)
    assert len(totals) == 0 and smallest == 0


# -- two processes -------------------------------------------------------------------------------


def start_shard_worker(rank: int, port: int) -> list[int]:
    """In a spawned worker of a 2-process gloo test: its torchrun environment, one thread, and
    the list the indices of the shards it reads are appended to (ShardReader.read spied on)."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                      WORLD_SIZE="2", LOCAL_RANK=str(rank))  # fmt: skip
    torch.set_num_threads(1)
    reads: list[int] = []
    read = ShardReader.read

    def spy(self: ShardReader, i: int) -> Any:
        reads.append(i)
        return read(self, i)

    ShardReader.read = spy  # type: ignore[method-assign]
    return reads


def _shard_worker(rank: int, port: int, family: str, tmp: str) -> None:
    reads = start_shard_worker(rank, port)
    got: dict[str, Any] = {}
    if family == "fnlm":
        import rescorer.lm_models.fnlm.train as module

        compute = module.shard_weights

        def weights_spy(*args: Any) -> Any:
            out = compute(*args)
            got["weights"] = {s: w.tolist() for s, w in out.items()}
            return out

        module.shard_weights = weights_spy
        cfg = fnlm_config(Path(tmp), "conllu", epochs=3).with_train_shards("shards")
    else:
        cfg = lbl_config(Path(tmp), epochs=3).with_train_shards("shards")
    got.update(_run_family(family, cfg, Path(tmp), Path(tmp, "two")))
    got["reads"] = reads
    Path(tmp, f"rank{rank}.json").write_text(json.dumps(got))
    end_process(close_world())  # neither leaves while the other talks to it; no teardown


def _two_processes(family: str, tmp_path: Path) -> list[dict[str, Any]]:
    mp.spawn(_shard_worker, args=(_free_port(), family, str(tmp_path)), nprocs=2, join=True)
    two = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    assert two[0]["digest"] == two[1]["digest"]  # the same parameters in both processes
    assert two[0]["epochs"] == two[1]["epochs"]
    for rank, got in enumerate(two):  # each process read its own shards, and only those
        assert set(got["reads"]) == {rank, rank + 2}, (rank, got["reads"])
    return two


@pytest.mark.slow
def test_fnlm_in_two_processes_reads_its_own_shards(tmp_path: Path) -> None:
    from rescorer.lm_models.fnlm.model import load_fnlm
    from rescorer.lm_models.fnlm.train import read_train_dev

    cfg = fnlm_config(tmp_path, "conllu")
    (lm, _), weights = file_weights(cfg, tmp_path, 4)
    write_shards(tmp_path / "train.conllu", tmp_path / "shards", 4)
    two = _two_processes("fnlm", tmp_path)
    # The pattern counts summed over the processes: each row's weight is the file's.
    assert sorted(two[0]["weights"]) == ["0", "2"] and sorted(two[1]["weights"]) == ["1", "3"]
    for got in two:
        for shard, w in got["weights"].items():
            assert np.array_equal(np.array(w, dtype=np.float32), weights[int(shard)]), shard
    assert min(min(w) for w in two[0]["weights"].values()) < 1  # frequent patterns damped
    # The merged counts give the one-process vocabularies, lexicon and Brown classes.
    trained = load_fnlm(tmp_path / "two")
    assert_same_lm(trained, lm)
    # The dev value reduced over the processes is the one-process value of the checkpoint.
    _, dev = read_train_dev(cfg.data, tmp_path)
    enc = trained.encode(dev)
    _same(two[0]["best"], math.exp(-trained.score_encoded(enc)[~enc.oov].mean()))


@pytest.mark.slow
def test_lbl_in_two_processes_reads_its_own_shards(tmp_path: Path) -> None:
    from rescorer.lm_models.lbl.model import load_lbl
    from rescorer.lm_models.lbl.train import (
        build_model,
        encode_documents,
        perplexity,
        read_corpus,
        read_documents,
        score_rows,
    )

    cfg = lbl_config(tmp_path)
    model, vocab, summary = build_model(cfg, read_documents(cfg.data, tmp_path))
    write_shards(tmp_path / "docs.jsonl", tmp_path / "shards", 4)
    two = _two_processes("lbl", tmp_path)
    # The merged counts give the one-process vocabulary, attribute values, blocks and summary.
    trained, trained_vocab = load_lbl(tmp_path / "two")
    assert list(trained_vocab) == list(vocab) and trained.config == model.config
    meta = json.loads((tmp_path / "two" / "training.json").read_text())
    assert meta["data"] == json.loads(json.dumps(summary)) and meta["processes"] == 2
    dev = read_corpus(cfg.data, tmp_path / "dev.jsonl")
    rows = encode_documents(trained.config, trained_vocab, dev)
    _same(two[0]["best"], perplexity(score_rows(trained, rows)))
