"""CUE training data from a shard folder of sentence records, read one shard at a time.

The training corpus is a JSONL file of sentence records, one JSON object per line: the words of
the sentence in ``text`` (split at whitespace: pre-tokenised text) and its context fields, any
other keys (rendered with :func:`rescorer.lm_models.cue.model.render_context`)::

    {"text": "the cat sat", "genre": "press", "prev": "a dog ran"}

It is cut into shards once (``rescorer corpus shard train.jsonl shards/ --shards 64``,
:mod:`rescorer.lm_models.corpus_shards`). A training process then

1. counts its shards in one pass (:func:`count_shards`: words, sentences and each shard's
   sentence lengths), the counts merged over the processes under torchrun, so that
   :meth:`ShardCounts.vocabulary` is the vocabulary one process builds from the whole file;
2. trains the stages of :mod:`rescorer.lm_models.cue.train` on its shards (:class:`CUEShards`):
   process r of N reads shards r, r + N, ..., one at a time, in an order drawn anew each epoch, and
   its steps per epoch come from the counted lengths (the minimum over the processes).

The frozen string encoder is the slow part, and a previous-sentence context makes one string
per sentence, so a shard's string vectors are computed the first time the shard is read and
kept on disk (:class:`ShardVectors`: a :meth:`~rescorer.lm_models.text_encoders.VectorCache.save`
file pair per shard, named by a key of the shard's SHA-256, the embedder and the context fields, so
that a changed shard, embedder or field list is never read from an old file); later epochs and
stages load them. The stages that ignore the context (the sentence LM, the proxy
auto-encoder, proxy training) read no vectors.

Usage (in every process; under torchrun after :func:`rescorer.lm_models.distributed.init_world`)::

    from rescorer.lm_models.text_encoders import VectorCache, make_embedder
    from rescorer.lm_models.cue.shards import (
        CUEShards, ShardVectors, count_shards, read_sentence_records)
    from rescorer.lm_models.cue.train import make_data, train_cue, train_sentence_lm

    stream, counts = count_shards("shards/")
    vocab = counts.vocabulary(max_size=20000)
    fields = (("genre", "genre"), ("prev", "previous sentence"))
    embedder = make_embedder("minilm")
    train = CUEShards(stream, counts, vocab, fields, ShardVectors("vectors/", embedder))
    held = read_sentence_records("dev.jsonl")  # the dev set: small, in memory
    dev = make_data(vocab, held.sentences, held.records, fields, VectorCache(embedder))
    train_sentence_lm(sentence_lm, train, dev, opts)
    train_cue(model, train, dev, "joint", opts)

The vectors are the encoder's for each string, whichever shard or batch it comes from, as far as
the encoder gives a string the same vector in any batch (exactly for ``hash:DIM``; a
transformer pads a batch, which may move the last bits). A ``st:`` or ``hf:`` model changed in
its folder keeps its name: clear the vector folder then.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rescorer.core.errors import InputError
from rescorer.core.io import read_lines
from rescorer.core.json_input import parse_json
from rescorer.lm_models.corpus_shards import ShardInfo, ShardStream
from rescorer.lm_models.cue.model import render_context
from rescorer.lm_models.cue.train import CUEData, batch_count, encode_sentences, make_data
from rescorer.lm_models.distributed import World, counted_shards, current_world
from rescorer.lm_models.text_encoders import TextEmbedder, VectorCache
from rescorer.lm_models.vocab import Vocabulary, counted_vocabulary

logger = logging.getLogger(__name__)

CORPUS = "cue"  # the corpus name in the shard readers' messages
TEXT = "text"  # the key of a record's words


@dataclass(frozen=True)
class SentenceRecords:
    """The sentence records of one file (a shard), in file order."""

    # The file they were read from.
    path: Path
    # Words of each sentence (its text split at whitespace; may be empty).
    sentences: tuple[tuple[str, ...], ...]
    # Each sentence's record without its text: the context fields (and any other keys).
    records: tuple[Mapping[str, Any], ...]


def read_sentence_records(path: str | Path) -> SentenceRecords:
    """The sentence records of the JSONL file ``path`` (module docstring; blank lines skipped).
    A line that is not a JSON object with a string ``text`` is an InputError naming the file
    and line."""
    path = Path(path)
    sentences: list[tuple[str, ...]] = []
    records: list[Mapping[str, Any]] = []
    for lineno, line in read_lines(path):
        if not line.strip():
            continue
        obj = parse_json(line, path, lineno)
        if not isinstance(obj, dict):
            raise InputError(
                f"expected a JSON object (a sentence record), got {type(obj).__name__}",
                path,
                lineno,
            )
        if TEXT not in obj:
            raise InputError(f"expected a {TEXT!r} (the sentence) in every record", path, lineno)
        text = obj.pop(TEXT)
        if not isinstance(text, str):
            raise InputError(
                f"expected {TEXT!r} a string (the sentence), got {type(text).__name__}",
                path,
                lineno,
            )
        sentences.append(tuple(text.split()))
        records.append(obj)
    return SentenceRecords(path, tuple(sentences), tuple(records))


@dataclass
class ShardCounts:
    """What the vocabulary and the steps of an epoch come from, counted shard by shard (so a
    corpus is counted without being held) and added up over the processes (:meth:`merged`)."""

    # Words of the sentences, and the number of sentences.
    words: Counter[str] = field(default_factory=Counter)
    sentences: int = 0
    # Per shard file name, how many sentences have each length in words.
    lengths: dict[str, Counter[int]] = field(default_factory=dict)

    def add(self, part: SentenceRecords) -> None:
        """Count the sentences of one shard."""
        lengths = self.lengths.setdefault(part.path.name, Counter())
        for sentence in part.sentences:
            self.words.update(sentence)
            lengths[len(sentence)] += 1
        self.sentences += len(part.sentences)

    @classmethod
    def merged(cls, parts: Sequence[ShardCounts]) -> ShardCounts:
        """The counts of several parts (the processes' shards) together."""
        out = cls()
        for part in parts:
            out.words.update(part.words)
            out.sentences += part.sentences
            for name, lengths in part.lengths.items():
                out.lengths.setdefault(name, Counter()).update(lengths)
        return out

    def vocabulary(self, max_size: int | None = None, min_count: int = 1) -> Vocabulary:
        """As :func:`rescorer.lm_models.vocab.build_vocabulary` over the counted sentences."""
        return counted_vocabulary(self.words, self.sentences, max_size, min_count)


def count_shards(
    directory: str | Path, world: World | None = None
) -> tuple[ShardStream[SentenceRecords], ShardCounts]:
    """This process's shards of the folder ``directory`` (JSONL shards of sentence records,
    :meth:`ShardStream.open`) and the counts of every process's shards, merged over the
    processes (:func:`rescorer.lm_models.distributed.counted_shards`): one pass over this process's
    shards. ``world``: the running process group (None: :func:`current_world`). InputError
    when the shards hold no sentence."""
    world = current_world() if world is None else world
    stream, counts = counted_shards(
        directory, "jsonl", read_sentence_records, CORPUS, ShardCounts(), ShardCounts.add, world
    )
    if counts.sentences == 0:
        raise InputError("no training sentences in the shards", stream.index.directory)
    return stream, counts


@dataclass(frozen=True)
class ShardVectors:
    """The string vectors of each shard's context strings, kept on disk: computed the first
    time a shard is read, loaded afterwards."""

    # Folder of the vector files (made when needed): per shard and key,
    # ``<shard>.<key>.safetensors`` and ``<shard>.<key>.strings.jsonl`` (VectorCache.save).
    directory: Path
    # The frozen string encoder.
    embedder: TextEmbedder

    def __post_init__(self) -> None:
        object.__setattr__(self, "directory", Path(self.directory))

    def key(self, info: ShardInfo, context_fields: Sequence[tuple[str, str]]) -> str:
        """SHA-256 (hex) of what the vectors depend on: the shard's content (its SHA-256 in the
        index), the embedder (name and width) and the context fields (names and labels)."""
        what = {
            "shard": info.sha256,
            "embedder": self.embedder.name,
            "dim": self.embedder.dim,
            "fields": [list(pair) for pair in context_fields],
        }
        return hashlib.sha256(json.dumps(what, sort_keys=True).encode("utf-8")).hexdigest()

    def path(self, info: ShardInfo, context_fields: Sequence[tuple[str, str]]) -> Path:
        """Where the vectors of shard ``info`` go (without the VectorCache suffixes)."""
        stem = Path(info.file).name.split(".")[0]
        return self.directory / f"{stem}.{self.key(info, context_fields)[:24]}"

    def cache(
        self,
        info: ShardInfo,
        context_fields: Sequence[tuple[str, str]],
        records: Sequence[Mapping[str, Any] | None],
    ) -> VectorCache:
        """A VectorCache holding the vectors of the context strings of ``records`` (shard
        ``info``'s): loaded from the shard's file, or computed and saved there."""
        path = self.path(info, context_fields)
        cache = VectorCache(self.embedder)
        loaded = cache.load(path)
        held = len(cache)
        cache.add(s for r in records for s in render_context(r, context_fields))
        if loaded and len(cache) == held:
            logger.debug("%s: %d string vectors loaded from %s", info.file, held, path)
            return cache
        if loaded:
            logger.warning("%s lacked %d strings: computed, written again", path, len(cache) - held)
        else:
            logger.info("%s: %d string vectors computed, kept in %s", info.file, len(cache), path)
        cache.save(path)
        return cache


@dataclass(frozen=True)
class CUEShards:
    """A training process's shards of sentence records, as training data of the stages of
    :mod:`rescorer.lm_models.cue.train` (a :class:`rescorer.lm_models.cue.train.CUEParts`): each
    shard read whole, encoded and given its string vectors when its turn comes, one at a time."""

    # This process's shards (count_shards).
    stream: ShardStream[SentenceRecords]
    # The counts of a pass over them (count_shards; at least this process's shards' lengths).
    counts: ShardCounts
    # The words' ids (e.g. counts.vocabulary()).
    vocab: Vocabulary
    # The context fields rendered as strings, (record key, label) pairs (render_context).
    context_fields: tuple[tuple[str, str], ...]
    # Where the string vectors are kept (None: no vectors; only the stages that ignore the
    # context strings can train).
    vectors: ShardVectors | None = None

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "context_fields", tuple((str(n), str(lb)) for n, lb in self.context_fields)
        )
        uncounted = [
            self.stream.index.shards[i].file
            for i in self.stream.shards
            if self.stream.index.shards[i].file not in self.counts.lengths
        ]
        if uncounted:
            raise ValueError(
                f"expected the counts of this process's shards (count_shards), got none of "
                f"{uncounted[:3]}"
            )

    @property
    def context_dim(self) -> int | None:
        """Width of the string vectors (None without :attr:`vectors`)."""
        return None if self.vectors is None else self.vectors.embedder.dim

    def check(self, world: World) -> None:
        """ValueError unless these are the shards of process ``world.rank`` of ``world.size``
        (count_shards called in the process group that trains)."""
        n = len(self.stream.index.shards)
        if self.stream.shards != tuple(range(world.rank, n, world.size)):
            raise ValueError(
                f"process {world.rank} of {world.size} trains on shards "
                f"{list(range(world.rank, n, world.size))[:4]}..., these are shards "
                f"{list(self.stream.shards)[:4]}...: count the shards in the process group "
                "that trains (count_shards after init_world)"
            )

    def batch_count(self, max_tokens: int) -> int:
        """This process's batches of one epoch of ``max_tokens``-token batches (from the
        counted sentence lengths, no shard read)."""
        return sum(
            batch_count(self.counts.lengths[self.stream.index.shards[i].file], max_tokens)
            for i in self.stream.shards
        )

    def data(self, part: SentenceRecords, shard: int, vectors: bool = True) -> CUEData:
        """The sentences of shard ``shard`` (read as ``part``) as CUEData: word ids and, with
        ``vectors``, their context strings' rows in the shard's own vector table (loaded or
        computed, :class:`ShardVectors`); without, every context empty."""
        if not vectors:
            n = len(part.sentences)
            return CUEData(
                encode_sentences(self.vocab, part.sentences),
                ((),) * n,
                np.zeros((0, self.context_dim or 0), dtype=np.float32),
            )
        if self.vectors is None:
            raise ValueError("the context strings' vectors need a ShardVectors (vectors=...)")
        info = self.stream.index.shards[shard]
        cache = self.vectors.cache(info, self.context_fields, part.records)
        return make_data(self.vocab, part.sentences, part.records, self.context_fields, cache)

    def parts(self, seed: int, vectors: bool = True) -> Iterator[CUEData]:
        """Each shard's :meth:`data`, the shards in an order drawn with ``seed``, one at a
        time: nothing of a shard is kept once the next is asked for."""
        for shard, part in self.stream.parts(seed):
            data = self.data(part, shard, vectors)
            del part
            yield data
            del data
