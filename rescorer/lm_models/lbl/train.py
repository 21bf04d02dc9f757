"""Training multiplicative (attribute-gated) LBLs (:mod:`rescorer.lm_models.lbl.model`), and what
the paper does with a trained one: attribute inference, conditional word similarity, conditioned
sampling.

    rescorer lbl-train CONFIG.json --out DIR        (or python -m rescorer.lm_models.lbl.train ...)

The config has three sections, each a frozen dataclass below (every field documented):

```json
{"data":  {"corpus": "brown", "path": "corpora/brown", "attributes": ["genre", "doc"],
           "max_vocab": 5000, "split": [0.8, 0.1, 0.1]},
 "model": {"order": 5, "embed_dim": 64, "factors": 64, "attr_dims": {"genre": 16, "doc": 16}},
 "train": {"epochs": 6, "batch_size": 512, "lr": 0.002}}
```

Corpora: ``brown`` (the Brown folder; fields ``genre`` and ``doc``, the file name) and ``jsonl``
(:func:`rescorer.lm_models.corpora.read_jsonl`, pre-tokenised text; its ``fields`` and ``doc``, the
id). Documents are split into train/dev/test whole (stratified by ``stratify``), so dev and test
documents are *unseen* values of the ``doc`` attribute: they get its expected vector, or one
inferred from their text. ``attributes: []`` with ``factors: 0`` trains the plain LBL. With a
``dev`` corpus of its own the training corpus is used whole (no split); a ``jsonl`` training
corpus larger than memory is cut into shards (``rescorer corpus shard docs.jsonl shards/
--shards 64``) and named by ``train_shards`` instead of ``path`` (or ``--train-shards DIR``):
the vocabulary, attribute values and vocabulary blocks come from one pass over the shards, each
process its own, the counts merged over the processes (:class:`LBLCounts`), and each epoch
reads the process's shards one at a time, in an order drawn anew.

Training: Adam on the mean negative log-likelihood of every token (the words and ``</s>``),
mini-batches of tokens drawn across the corpus (the paper uses SGD with momentum; Adam needs
no schedule tuning for short runs). ``attribute_dropout`` replaces each attribute of a training
token by the expected vector with that probability (not in the paper: it teaches the model the
missing-value case it meets on unseen documents). After each epoch the dev perplexity decides:
the best weights are kept, the learning rate is multiplied by ``lr_decay`` after an epoch
without improvement, training stops after ``patience`` of them. The output folder is the best
epoch's checkpoint (usable as ``lbl:DIR``) with ``training.json`` holding the epoch log and the
document split.

Attribute inference (section 2.5, :func:`infer_attributes`): every weight frozen, Adam on the
vector x_a of one attribute per text (the other attributes as given or expected), starting from
the expected vector, minimising the text's mean negative log-likelihood; with a rectifier the
vector is projected back onto x >= 0 after each step (the range of f). Conditional similarity
(section 3.4, :func:`conditional_neighbours`): cosine neighbours among the rows of T^x for two
attribute vectors. Sampling (Table 2, :func:`sample_sentences`): ancestral sampling given x,
which may be the average of two attribute vectors.
"""

from __future__ import annotations

import logging
import math
import time
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from rescorer.core.errors import InputError
from rescorer.lm_models.batching import row_batches
from rescorer.lm_models.corpora import Document, read_brown, read_jsonl, split_documents
from rescorer.lm_models.corpus_shards import ShardStream, check_training_data
from rescorer.lm_models.distributed import (
    World,
    all_sum,
    counted_shards,
    init_world,
    process_device,
    rank_seed,
    seed_process,
    share,
    share_slices,
)
from rescorer.lm_models.lbl.model import (
    LBL,
    MISSING,
    AttributeSpec,
    LBLConfig,
    attribute_ids,
    history_windows,
    save_lbl,
)
from rescorer.lm_models.training import (
    FitOptions,
    SectionedConfig,
    Step,
    TrainRun,
    config_training_main,
    fit,
)
from rescorer.lm_models.vocab import (
    BOS_ID,
    EOS_ID,
    SPECIAL_TOKENS,
    UNK_ID,
    Vocabulary,
    check_vocabulary_limits,
    counted_vocabulary,
)

logger = logging.getLogger(__name__)

CORPORA = ("brown", "jsonl")
DOC_FIELD = "doc"  # the attribute whose value is the document id
SCORE_ROWS = 4096  # rows per scoring batch (memory: SCORE_ROWS x V floats)


# -- configuration ----------------------------------------------------------------------------


@dataclass(frozen=True)
class LBLDataConfig:
    """What to train on and which attributes each text has."""

    # "brown" (the tagged Brown folder) or "jsonl" (one document per line).
    corpus: str
    # The Brown folder or the JSONL file, relative to the data folder unless absolute ("" with
    # train_shards).
    path: str = ""
    # Attribute fields of each document ("doc" = its id); [] for the plain LBL.
    attributes: tuple[str, ...] = ("genre",)
    # Lower-case words; leave out punctuation tokens (Brown tags).
    lower: bool = True
    drop_punct: bool = False
    # Vocabulary: at most this many units (specials included), words seen >= min_count times.
    max_vocab: int | None = 5000
    min_count: int = 1
    # Train/dev/test fractions of the documents, the field they are stratified by, the seed.
    split: tuple[float, float, float] = (0.8, 0.1, 0.1)
    stratify: str | None = "genre"
    split_seed: int = 0
    # A dev corpus of its own, read like `path`: the training data (path or train_shards) are
    # then used whole, and split, stratify and split_seed are unused. None: split `path`.
    dev: str | None = None
    # The training corpus as a shard folder of JSONL documents (`rescorer corpus shard`; corpus
    # "jsonl"), read one shard at a time, each process its own shards; needs `dev` and no
    # `path`. None: the training data are read into memory.
    train_shards: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "attributes", tuple(self.attributes))
        object.__setattr__(self, "split", tuple(self.split))
        if self.corpus not in CORPORA:
            raise ValueError(f"corpus must be one of {CORPORA}, got {self.corpus!r}")
        check_training_data(
            "path", self.path, self.train_shards, self.dev, self.corpus, ("jsonl",), "documents"
        )
        if len(set(self.attributes)) != len(self.attributes):
            raise ValueError(f"attributes must be distinct, got {list(self.attributes)}")
        check_vocabulary_limits(self.max_vocab, self.min_count, "data.max_vocab", "data.min_count")

    def with_train_shards(self, shards: str | Path) -> LBLDataConfig:
        """This data section training on the shard folder ``shards`` instead of ``path``."""
        return replace(self, path="", train_shards=str(shards))


@dataclass(frozen=True)
class LBLModelOptions:
    """Architecture (vocabulary and attribute values come from the data)."""

    # n of the n-gram (the paper: context size 5, so n = 6).
    order: int = 5
    # K: word vector width.
    embed_dim: int = 64
    # F: factors of the word tensor; 0 = plain LBL (no attributes).
    factors: int = 64
    # Width of each attribute's vector: one number for all, or {"genre": 16, "doc": 16}.
    attr_dims: int | dict[str, int] = 16
    # Rectifier on the looked-up attribute vectors (section 2.5).
    relu: bool = True
    # Section 2.4, unshared vocabularies: the attribute (one of data.attributes) whose value
    # selects the output vocabulary, e.g. a language. A word seen in training under one value
    # only belongs to that value's vocabulary; words seen under several are shared. "" = off.
    vocab_attribute: str = ""

    def dim_of(self, name: str) -> int:
        if isinstance(self.attr_dims, int):
            return self.attr_dims
        if name not in self.attr_dims:
            raise ValueError(f"attr_dims has no width for attribute {name!r}")
        return int(self.attr_dims[name])


@dataclass(frozen=True)
class LBLTrainOptions:
    """Optimisation."""

    # Most epochs; training stops earlier after `patience` epochs without a better dev ppl.
    epochs: int = 6
    patience: int = 2
    # Tokens per step, Adam learning rate, its factor after an epoch without gain.
    batch_size: int = 512
    lr: float = 2e-3
    lr_decay: float = 0.5
    # Probability of replacing each attribute of a training token by its expected vector.
    attribute_dropout: float = 0.0
    seed: int = 0
    # "cpu", "cuda", "auto".
    device: str = "cpu"
    # Stop each epoch after this many steps (None: all): a compute budget, or smoke tests.
    max_steps_per_epoch: int | None = None

    def __post_init__(self) -> None:
        if self.epochs < 1 or self.batch_size < 1 or self.patience < 1:
            raise ValueError("epochs, batch_size and patience must be >= 1")
        if self.lr <= 0 or not 0 < self.lr_decay <= 1:
            raise ValueError(f"need lr > 0 and 0 < lr_decay <= 1; got {self.lr}, {self.lr_decay}")
        if not 0 <= self.attribute_dropout < 1:
            raise ValueError(f"attribute_dropout must be in [0, 1), got {self.attribute_dropout}")


@dataclass(frozen=True)
class LBLTrainConfig(SectionedConfig):
    """A whole training run."""

    data: LBLDataConfig
    model: LBLModelOptions = field(default_factory=LBLModelOptions)
    train: LBLTrainOptions = field(default_factory=LBLTrainOptions)

    def validate(self) -> None:
        if self.model.factors == 0 and self.data.attributes:
            raise ValueError("a plain LBL (factors 0) takes no attributes: set data.attributes []")
        if self.model.vocab_attribute and self.model.vocab_attribute not in self.data.attributes:
            raise ValueError(
                f"model.vocab_attribute {self.model.vocab_attribute!r} must be one of "
                f"data.attributes {list(self.data.attributes)}"
            )


# -- data -------------------------------------------------------------------------------------


def _resolve(path: str, data_dir: Path) -> Path:
    return Path(path) if Path(path).is_absolute() else data_dir / path


def read_documents(dc: LBLDataConfig, data_dir: Path) -> list[Document]:
    """The corpus of a data config as Documents, ``doc`` added to each one's fields."""
    return read_corpus(dc, _resolve(dc.path, data_dir))


def read_corpus(dc: LBLDataConfig, path: Path) -> list[Document]:
    """The documents of one corpus file (Brown: folder) as the data config reads them, ``doc``
    added to each one's fields, documents without sentences left out."""
    if dc.corpus == "brown":
        docs = read_brown(path, lower=dc.lower, drop_punct=dc.drop_punct)
    else:
        docs = read_jsonl(path, tokenizer=str.split)
        if dc.lower:
            docs = [
                Document(d.doc_id, [[w.lower() for w in s] for s in d.sentences], d.fields)
                for d in docs
            ]
    return [
        Document(d.doc_id, d.sentences, {**d.fields, DOC_FIELD: d.doc_id})
        for d in docs
        if d.sentences
    ]


def split_corpus(
    dc: LBLDataConfig, docs: Sequence[Document]
) -> tuple[list[Document], list[Document], list[Document]]:
    """Train, dev and test documents (whole documents, stratified as configured)."""
    stratify = dc.stratify if dc.stratify and all(dc.stratify in d.fields for d in docs) else None
    return split_documents(docs, dc.split, stratify, dc.split_seed)


@dataclass(frozen=True)
class EncodedRows:
    """Every token of some documents (words and ``</s>``) ready for the network."""

    # (N, n-1) history word ids, most recent first.
    history: np.ndarray
    # (N,) target ids (<unk> for words outside the vocabulary).
    targets: np.ndarray
    # (N, A) attribute value ids (MISSING for a missing or unseen value).
    attrs: np.ndarray
    # (N,) index of the document each row comes from (in the order given to encode_documents).
    doc_index: np.ndarray
    # Tokens per sentence (words + 1), over all documents in order.
    lengths: tuple[int, ...]


def encode_sentences(
    config: LBLConfig,
    vocab: Vocabulary,
    sentences: Sequence[Sequence[str]],
    records: Sequence[Mapping[str, Any] | None] | None = None,
) -> EncodedRows:
    """Rows of sentences (``records[i]`` the attributes of sentence i; None: all missing)."""
    n1 = config.order - 1
    hist, tgt, attrs, idx, lengths = [], [], [], [], []
    for i, words in enumerate(sentences):
        ids = vocab.encode(words)
        hist.append(history_windows(ids, config.order))
        tgt.append(np.asarray([*ids, EOS_ID], dtype=np.int64))
        ids_a = attribute_ids(config, None if records is None else records[i])
        attrs.append(np.tile(np.asarray(ids_a, dtype=np.int64).reshape(1, -1), (len(ids) + 1, 1)))
        idx.append(np.full(len(ids) + 1, i, dtype=np.int64))
        lengths.append(len(ids) + 1)
    a = len(config.attributes)
    return EncodedRows(
        np.concatenate(hist) if hist else np.zeros((0, n1), np.int64),
        np.concatenate(tgt) if tgt else np.zeros(0, np.int64),
        np.concatenate(attrs) if attrs else np.zeros((0, a), np.int64),
        np.concatenate(idx) if idx else np.zeros(0, np.int64),
        tuple(lengths),
    )


def encode_documents(
    config: LBLConfig,
    vocab: Vocabulary,
    docs: Sequence[Document],
    override: Mapping[str, str | None] | None = None,
) -> EncodedRows:
    """Rows of whole documents; ``doc_index`` is the document's position in ``docs``.

    ``override`` replaces fields of every document (a value None makes the attribute missing).
    """
    sentences, records, owner = [], [], []
    for j, d in enumerate(docs):
        record: dict[str, Any] = dict(d.fields)
        record.update(override or {})
        for s in d.sentences:
            sentences.append(s)
            records.append(record)
            owner.append(j)
    enc = encode_sentences(config, vocab, sentences, records)
    per_sentence = np.asarray(owner, dtype=np.int64)
    return EncodedRows(
        enc.history, enc.targets, enc.attrs, per_sentence[enc.doc_index], enc.lengths
    )


def rows_of(rows: EncodedRows, part: slice) -> EncodedRows:
    """Some of the rows (sentence lengths dropped)."""
    return EncodedRows(
        rows.history[part], rows.targets[part], rows.attrs[part], rows.doc_index[part], ()
    )


def limit_rows(rows: EncodedRows, max_tokens: int | None) -> EncodedRows:
    """At most the first ``max_tokens`` rows of each document (sentence lengths dropped)."""
    if max_tokens is None:
        return rows
    first = np.ones(len(rows.doc_index), dtype=bool)
    first[1:] = rows.doc_index[1:] != rows.doc_index[:-1]
    start = np.maximum.accumulate(np.where(first, np.arange(len(first)), 0))
    keep = np.arange(len(first)) - start < max_tokens
    return EncodedRows(
        rows.history[keep], rows.targets[keep], rows.attrs[keep], rows.doc_index[keep], ()
    )


# -- building and scoring ------------------------------------------------------------------------


@dataclass
class LBLCounts:
    """What the vocabulary, the attribute values and the vocabulary blocks are built from,
    counted document by document (so that a corpus streamed shard by shard is counted without
    being held, and the counts of the processes' shards add up: :meth:`merged`)."""

    # Words of the training sentences; the training documents and sentences.
    words: Counter[str] = field(default_factory=Counter)
    documents: int = 0
    sentences: int = 0
    # Per attribute field, the values of the training documents.
    values: dict[str, set[str]] = field(default_factory=dict)
    # Per word, the values of model.vocab_attribute of the documents it occurs in (section 2.4;
    # empty without one).
    word_values: dict[str, set[str]] = field(default_factory=dict)

    @classmethod
    def of(cls, cfg: LBLTrainConfig, docs: Sequence[Document]) -> LBLCounts:
        counts = cls()
        counts.add(docs, cfg)
        return counts

    def add(self, docs: Sequence[Document], cfg: LBLTrainConfig) -> None:
        by = cfg.model.vocab_attribute
        for d in docs:
            self.documents += 1
            self.sentences += len(d.sentences)
            for s in d.sentences:
                self.words.update(s)
            for name in cfg.data.attributes:
                if name in d.fields:
                    self.values.setdefault(name, set()).add(d.fields[name])
            if by:
                if by not in d.fields:
                    raise ValueError(f"training document {d.doc_id!r} has no {by!r} field")
                for s in d.sentences:
                    for w in s:
                        self.word_values.setdefault(w, set()).add(d.fields[by])

    @classmethod
    def merged(cls, parts: Sequence[LBLCounts]) -> LBLCounts:
        """The counts of several parts (the processes' shards) together."""
        out = cls()
        for part in parts:
            out.words.update(part.words)
            out.documents += part.documents
            out.sentences += part.sentences
            for into, more in ((out.values, part.values), (out.word_values, part.word_values)):
                for key, values in more.items():
                    into.setdefault(key, set()).update(values)
        return out

    def vocabulary(self, dc: LBLDataConfig) -> Vocabulary:
        """As :func:`rescorer.lm_models.vocab.build_vocabulary` over the counted sentences."""
        return counted_vocabulary(self.words, self.sentences, dc.max_vocab, dc.min_count)

    def blocks(self, vocab: Vocabulary, values: Sequence[str]) -> tuple[int, ...]:
        """Section 2.4: per output unit, the position in ``values`` of the only vocabulary
        attribute value whose training documents contain the word, or -1 (shared) for words
        seen under several values, words never seen and the specials."""
        out = [-1] * len(vocab)
        for word, seen in self.word_values.items():
            w = vocab.token_id(word)
            if w >= len(SPECIAL_TOKENS) and len(seen) == 1:
                out[w] = values.index(next(iter(seen)))
        return tuple(out)


def build_model(
    cfg: LBLTrainConfig, train_docs: Sequence[Document]
) -> tuple[LBL, Vocabulary, dict[str, Any]]:
    """A freshly initialised model for the training documents, its vocabulary, a data summary."""
    return model_of_counts(cfg, LBLCounts.of(cfg, train_docs))


def model_of_counts(cfg: LBLTrainConfig, data: LBLCounts) -> tuple[LBL, Vocabulary, dict[str, Any]]:
    """:func:`build_model` from the training documents' counts."""
    vocab = data.vocabulary(cfg.data)
    attributes = []
    for name in cfg.data.attributes:
        values = sorted(data.values.get(name, ()))
        if not values:
            raise ValueError(f"no training document has the attribute field {name!r}")
        attributes.append(AttributeSpec(name, tuple(values), cfg.model.dim_of(name)))
    m = cfg.model
    blocks: tuple[int, ...] = ()
    if m.vocab_attribute:
        spec = attributes[list(cfg.data.attributes).index(m.vocab_attribute)]
        blocks = data.blocks(vocab, spec.values)
    config = LBLConfig(
        vocab_size=len(vocab),
        order=m.order,
        embed_dim=m.embed_dim,
        factors=m.factors,
        attributes=tuple(attributes),
        relu=m.relu,
        vocab_attribute=m.vocab_attribute,
        word_blocks=blocks,
        lower=cfg.data.lower,
    )
    torch.manual_seed(cfg.train.seed)
    model = LBL(config)
    tokens = sum(data.words.values())
    unk = sum(c for w, c in data.words.items() if w not in vocab)
    summary = {
        "train_documents": data.documents,
        "train_sentences": data.sentences,
        "train_words": tokens,
        "train_unk_rate": unk / max(tokens, 1),
        "vocab_size": len(vocab),
        "attribute_values": {a.name: len(a.values) for a in attributes},
        "parameters": model.num_parameters(),
    }
    if blocks:
        counts = Counter(blocks)
        summary["vocabulary_blocks"] = {
            (spec.values[i] if i >= 0 else "shared"): n for i, n in sorted(counts.items())
        }
    return model, vocab, summary


@torch.no_grad()
def score_rows(model: LBL, rows: EncodedRows, batch_size: int = SCORE_ROWS) -> np.ndarray:
    """ln P(target | history, attributes) of every row (natural log)."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    out = np.empty(len(rows.targets), dtype=np.float64)
    for lo in range(0, len(out), batch_size):
        sl = slice(lo, lo + batch_size)
        h = torch.from_numpy(rows.history[sl]).to(device)
        t = torch.from_numpy(rows.targets[sl]).to(device)
        a = torch.from_numpy(rows.attrs[sl]).to(device)
        out[sl] = model(h, t, attrs=a).double().cpu().numpy()
    model.train(was_training)
    return out


def perplexity(logprobs: np.ndarray) -> float:
    return math.exp(-float(np.mean(logprobs))) if len(logprobs) else math.nan


# -- training ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class TrainRows:
    """Training rows of the network, one per token (its words and ``</s>``)."""

    # (N, n-1) history word ids, (N,) target ids, (N, A) attribute value ids.
    history: Tensor
    targets: Tensor
    attrs: Tensor

    @classmethod
    def of(cls, rows: EncodedRows) -> TrainRows:
        return cls(*(torch.from_numpy(a) for a in (rows.history, rows.targets, rows.attrs)))

    def __len__(self) -> int:
        return len(self.targets)


@dataclass(frozen=True)
class LBLData:
    """The documents :func:`train_lbl` trains on: counted, and held or streamed."""

    # The training documents' counts (every process's shards, merged).
    counts: LBLCounts
    # This process's training documents in memory (none when streamed), the dev and test ones.
    train: list[Document]
    dev: list[Document]
    test: list[Document]
    # Ids of the training documents, for the checkpoint's split (none when streamed).
    train_ids: list[str]
    # This process's shards of the training corpus (None: `train` holds its documents).
    stream: ShardStream[list[Document]] | None = None


def read_data(cfg: LBLTrainConfig, data_dir: Path, world: World) -> LBLData:
    """The corpus split into train/dev/test, or a training corpus (file or shards) and a dev
    corpus; under torchrun each process keeps its share of the documents (every N-th) or reads
    its own shards (the counts of every process's shards merged)."""
    dc = cfg.data
    if dc.train_shards is not None:
        stream, counts = counted_shards(
            _resolve(dc.train_shards, data_dir),
            "jsonl",
            lambda path: read_corpus(dc, path),
            dc.corpus,
            LBLCounts(),
            lambda c, docs: c.add(docs, cfg),
            world,
        )
        if counts.sentences == 0:
            raise InputError("no training sentences in the shards", stream.index.directory)
        return LBLData(counts, [], _read_dev(dc, data_dir), [], [], stream)
    docs = read_documents(dc, data_dir)
    if dc.dev is None:
        train_docs, dev_docs, test_docs = split_corpus(dc, docs)
    else:
        train_docs, dev_docs, test_docs = docs, _read_dev(dc, data_dir), []
    del docs
    if not train_docs or not dev_docs:
        raise ValueError(
            f"need training and dev documents, got {len(train_docs)} and {len(dev_docs)}"
        )
    counts = LBLCounts.of(cfg, train_docs)  # from every training document
    ids = [d.doc_id for d in train_docs]
    return LBLData(counts, share(train_docs, world), dev_docs, test_docs, ids)


def _read_dev(dc: LBLDataConfig, data_dir: Path) -> list[Document]:
    assert dc.dev is not None
    dev = read_corpus(dc, _resolve(dc.dev, data_dir))
    if not dev:
        raise ValueError(f"{dc.dev}: no dev documents")
    return dev


def train_lbl(
    cfg: LBLTrainConfig, data_dir: Path, out_dir: Path, progress: bool = True
) -> TrainRun:
    """Train per ``cfg`` and write the best epoch's checkpoint to ``out_dir``.

    With ``data.train_shards`` every process reads only its own shards: the counts of a pass
    over them are merged over the processes, so that every process builds the vocabulary,
    attribute values and vocabulary blocks one process builds from the whole corpus; each epoch
    it encodes one shard at a time, in an order drawn anew, and draws its batches within it."""
    t_start = time.perf_counter()
    opts = cfg.train
    device = process_device(opts.device)
    # under torchrun: fit trains data-parallel (rescorer.lm_models.distributed)
    world = init_world(device)
    data = read_data(cfg, data_dir, world)
    model, vocab, summary = model_of_counts(cfg, data.counts)
    model.to(device)
    seed_process(opts.seed, world)
    logger.info("LBL data and model: %s", summary)
    stream = data.stream
    # This process's share: every N-th training document (all of them in one process).
    train = TrainRows.of(encode_documents(model.config, vocab, data.train))
    data.train.clear()  # the documents of this process's share go once encoded
    dev = encode_documents(model.config, vocab, data.dev)

    def parts(epoch: int) -> Iterator[TrainRows]:
        if stream is None:
            yield train
            return
        for _, docs in stream.parts(opts.seed * 1000 + epoch):
            rows = TrainRows.of(encode_documents(model.config, vocab, docs))
            del docs
            yield rows
            del rows

    # Attribute dropout never hides the attribute that selects the output vocabulary.
    droppable = torch.ones(len(model.config.attributes), dtype=torch.bool)
    if model.config.vocab_attribute:
        droppable[model.config.attribute_index(model.config.vocab_attribute)] = False

    optimizer = torch.optim.Adam(model.parameters(), lr=opts.lr)
    gen = torch.Generator().manual_seed(rank_seed(opts.seed, world))  # order and dropout

    def epoch_batches(epoch: int) -> Iterable[tuple[TrainRows, Tensor]]:
        batches = row_batches(parts(epoch), opts.batch_size, gen)
        return batches if stream is not None else list(batches)

    def step(batch: tuple[TrainRows, Tensor]) -> Step:
        rows, idx = batch
        a = rows.attrs[idx]
        if opts.attribute_dropout > 0 and a.shape[1]:
            drop = torch.rand(a.shape, generator=gen) < opts.attribute_dropout
            a = a.masked_fill(drop & droppable, MISSING)
        history, targets = rows.history[idx].to(device), rows.targets[idx].to(device)
        nll = -model(history, targets, attrs=a.to(device))
        loss = nll.mean()
        return Step(loss, float(loss.detach()) * len(idx), len(idx))

    def evaluate() -> float:
        # Each process scores its blocks of the dev rows; the sums are added over them.
        total, count = 0.0, 0
        for part in share_slices(len(dev.targets), SCORE_ROWS, world):
            lp = score_rows(model, rows_of(dev, part))
            total, count = total + float(lp.sum()), count + len(lp)
        total, count = all_sum((total, count), world)
        return math.exp(-total / count) if count else math.nan

    fit_options = FitOptions.early_stopping(opts, progress, "LBL")
    fitted = fit(
        model,
        optimizer,
        step,
        epoch_batches,
        evaluate,
        fit_options,
    )
    seconds = time.perf_counter() - t_start
    run = TrainRun.of(fitted, out_dir, device, summary["parameters"], seconds)
    split: dict[str, Any] = {
        "train": data.train_ids,
        "dev": [d.doc_id for d in data.dev],
        "test": [d.doc_id for d in data.test],
    }
    if stream is not None:  # the training documents are the shards'
        split["train_shards"] = str(stream.index.directory)
    if world.is_main:
        meta = run.meta(data=summary, split=split, config=cfg.to_json(), processes=world.size)
        save_lbl(out_dir, model, vocab, meta)
    return run


# -- attribute vectors ---------------------------------------------------------------------------


def attribute_vector(
    model: LBL,
    record: Mapping[str, Any] | None = None,
    overrides: Mapping[str, Tensor] | None = None,
) -> Tensor:
    """x (D,) of a context record; ``overrides`` gives some attributes' vectors directly."""
    config = model.config
    ids = torch.tensor([attribute_ids(config, record)], dtype=torch.long)
    with torch.no_grad():
        x = model.attribute_vector(ids.to(model.bias.device))[0].clone()
        for name, vec in (overrides or {}).items():
            sl = config.slices()[config.attribute_index(name)]
            if vec.shape != (sl.stop - sl.start,):
                raise ValueError(
                    f"attribute {name!r}: expected a vector of {sl.stop - sl.start}, "
                    f"got shape {tuple(vec.shape)}"
                )
            x[sl] = vec.to(x)
    return x


@dataclass(frozen=True)
class InferenceOptions:
    """Gradient descent on new attribute vectors, every network weight frozen (section 2.5)."""

    # Adam steps on the vectors.
    steps: int = 50
    # Adam learning rate.
    lr: float = 0.05
    # Rows per chunk of the gradient computation (memory: rows x V floats).
    chunk_rows: int = SCORE_ROWS

    def __post_init__(self) -> None:
        if self.steps < 0 or self.lr <= 0 or self.chunk_rows < 1:
            raise ValueError(
                f"need steps >= 0, lr > 0, chunk_rows >= 1; got {self.steps}, {self.lr}, "
                f"{self.chunk_rows}"
            )


@dataclass(frozen=True)
class InferenceResult:
    """Inferred vectors of one attribute, one per text, and how the fit went."""

    # Attribute whose vector was inferred.
    attribute: str
    # (G, dim_a) inferred vectors (f's range: >= 0 with a rectifier).
    vectors: np.ndarray
    # (steps + 1, G) mean negative log-likelihood per token (nats) of each text before each
    # step and after the last one.
    losses: np.ndarray
    # (G,) tokens of each text used.
    tokens: np.ndarray
    # Wall seconds.
    seconds: float

    def steps_to_converge(self, tolerance: float = 0.01) -> np.ndarray:
        """Per text, the first step whose loss is within ``tolerance`` nats of the final one."""
        final = self.losses[-1]
        close = np.abs(self.losses - final[None, :]) <= tolerance
        return close.argmax(axis=0)


def _frozen_parts(model: LBL, rows: EncodedRows, a: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """What attribute inference holds fixed: u = W^fk r_hat (N, F), the gate from the other
    attributes (N, F), targets (N,) and attrs (N, A) as tensors on the model's device."""
    if not model.config.attributes:
        raise ValueError("the model has no attributes to infer")
    device = model.bias.device
    sl = model.config.slices()[a]
    us, gs = [], []
    with torch.no_grad():
        for lo in range(0, len(rows.targets), SCORE_ROWS):
            h = torch.from_numpy(rows.history[lo : lo + SCORE_ROWS]).to(device)
            at = torch.from_numpy(rows.attrs[lo : lo + SCORE_ROWS]).to(device)
            us.append(model.predict(h) @ model.W_fk.T)
            x = model.attribute_vector(at)
            x[:, sl] = 0.0
            gs.append(x @ model.W_fd.T)
    u = torch.cat(us) if us else torch.zeros(0, model.config.factors, device=device)
    g = torch.cat(gs) if gs else torch.zeros(0, model.config.factors, device=device)
    return (
        u,
        g,
        torch.from_numpy(rows.targets).to(device),
        torch.from_numpy(rows.attrs).to(device),
    )


def _row_logprobs(model: LBL, f: Tensor, targets: Tensor, attrs: Tensor) -> Tensor:
    """ln P(target) from factor outputs f (rows, F): the output half of eq. 5."""
    bias = model.bias.detach()
    if model.config.vocab_attribute:
        bias = model._restrict(bias.expand(f.shape[0], -1), attrs)
    return model.output.log_prob(f, targets, model.W_fv.detach().T, bias)  # the shared output


class InferenceDiverged(ValueError):
    """Attribute inference whose loss stopped being a number (a learning rate too large)."""


def infer_attributes(
    model: LBL,
    rows: EncodedRows,
    attribute: str,
    options: InferenceOptions | None = None,
    init: Tensor | None = None,
) -> InferenceResult:
    """Infer one vector of ``attribute`` per text (``rows.doc_index``: 0..G-1) from its rows.

    The other attributes of each row are used as encoded (their value or the expected vector).
    Each text's vector starts at ``init`` (G, dim_a) or at the attribute's expected vector.
    :class:`InferenceDiverged` when the loss is no longer a number (or the learning rate is
    beyond what the parameters' type holds).
    """
    opts = options or InferenceOptions()
    t0 = time.perf_counter()
    config = model.config
    a = config.attribute_index(attribute)
    sl = config.slices()[a]
    if len(rows.targets) == 0:
        raise ValueError("attribute inference needs at least one token")
    groups_np = rows.doc_index
    n_groups = int(groups_np.max()) + 1
    u, g_fixed, targets, attrs = _frozen_parts(model, rows, a)
    device = u.device
    groups = torch.from_numpy(groups_np).to(device)
    counts = torch.bincount(groups, minlength=n_groups).clamp(min=1).to(u.dtype)
    w_a = model.W_fd.detach()[:, sl]  # (F, dim_a)
    with torch.no_grad():
        start = model.expected_attribute(a).detach().expand(n_groups, -1)
        z0 = start.clone() if init is None else init.detach().to(device, u.dtype).clone()
    if z0.shape != (n_groups, sl.stop - sl.start):
        raise ValueError(f"init must be ({n_groups}, {sl.stop - sl.start}), got {tuple(z0.shape)}")
    if not 0 < opts.lr <= torch.finfo(z0.dtype).max:
        raise InferenceDiverged(
            f"a learning rate of {opts.lr:g} is beyond what {z0.dtype} parameters take"
        )
    z = z0.requires_grad_(True)
    optimizer = torch.optim.Adam([z], lr=opts.lr)
    losses = []
    for step in range(opts.steps + 1):
        optimizer.zero_grad(set_to_none=True)
        total = torch.zeros(n_groups, device=device, dtype=u.dtype)
        for lo in range(0, len(targets), opts.chunk_rows):
            sl_rows = slice(lo, lo + opts.chunk_rows)
            gr = groups[sl_rows]
            gate = g_fixed[sl_rows] + z[gr] @ w_a.T  # W^fd x with x_a = z of the row's text
            lp = _row_logprobs(model, u[sl_rows] * gate, targets[sl_rows], attrs[sl_rows])
            nll = torch.zeros(n_groups, device=device, dtype=u.dtype).index_add(0, gr, -lp)
            nll = nll / counts
            if step < opts.steps:
                nll.sum().backward()  # texts are independent: the sum's gradient is each one's
            total += nll.detach()
        losses.append(total.cpu().numpy())
        if not np.isfinite(losses[-1]).all():
            raise InferenceDiverged(
                f"the loss diverged (it is {float(np.max(losses[-1]))} after {step} steps of "
                f"learning rate {opts.lr:g})"
            )
        if step < opts.steps:
            optimizer.step()
            if config.relu:
                with torch.no_grad():
                    z.clamp_(min=0.0)
    return InferenceResult(
        attribute,
        z.detach().cpu().numpy(),
        np.stack(losses),
        counts.cpu().numpy().astype(np.int64),
        time.perf_counter() - t0,
    )


@torch.no_grad()
def attribute_loglik(model: LBL, rows: EncodedRows, attribute: str) -> np.ndarray:
    """(G, values) total ln P of each text under each training value of ``attribute``.

    The generative classifier of a text's attribute is the argmax over values (uniform prior).
    """
    a = model.config.attribute_index(attribute)
    sl = model.config.slices()[a]
    u, g_fixed, targets, attrs = _frozen_parts(model, rows, a)
    groups = torch.from_numpy(rows.doc_index).to(u.device)
    n_groups = int(groups.max()) + 1
    table = model.attribute_table(a)  # (values, dim_a)
    w_a = model.W_fd[:, sl]
    out = torch.zeros(n_groups, len(table), dtype=torch.float64)
    for v in range(len(table)):
        g_v = table[v] @ w_a.T  # (F,)
        for lo in range(0, len(targets), SCORE_ROWS):
            s = slice(lo, lo + SCORE_ROWS)
            att = attrs[s].clone()
            if model.config.vocab_attribute == attribute:
                att[:, a] = v
            lp = _row_logprobs(model, u[s] * (g_fixed[s] + g_v), targets[s], att)
            out[:, v] += (
                torch.zeros(n_groups, dtype=torch.float64, device=u.device)
                .index_add(0, groups[s], lp.double())
                .cpu()
            )
    return out.numpy()


# -- conditional word similarity (section 3.4) ----------------------------------------------------


@dataclass(frozen=True)
class Neighbours:
    """Nearest neighbours of a word under two attribute vectors A and B (Table 5)."""

    # The query word.
    word: str
    # The top-ranked neighbours under A and under B (cosine on rows of T^x), best first.
    top_a: tuple[str, ...]
    top_b: tuple[str, ...]
    # Neighbours in both lists (ordered by their best rank), and those unique to A and to B.
    common: tuple[str, ...]
    unique_a: tuple[str, ...]
    unique_b: tuple[str, ...]


@torch.no_grad()
def neighbours_under(
    model: LBL, vocab: Vocabulary, word: str, x: Tensor | None, top: int = 15
) -> list[tuple[str, float]]:
    """The ``top`` words nearest to ``word`` by cosine among the rows of T^x."""
    wid = vocab.token_id(word)
    if wid == UNK_ID and word != vocab.token(UNK_ID):
        raise ValueError(f"word {word!r} is not in the model's vocabulary")
    t = model.word_matrix(x)  # (V, K): attribute-gated word vectors
    t = t / t.norm(dim=1, keepdim=True).clamp(min=1e-12)
    sims = t @ t[wid]
    sims[[wid, *range(len(SPECIAL_TOKENS))]] = -math.inf
    best = torch.topk(sims, min(top, len(sims) - len(SPECIAL_TOKENS) - 1))
    return [(vocab.token(int(i)), float(s)) for s, i in zip(best.values, best.indices, strict=True)]


def conditional_neighbours(
    model: LBL,
    vocab: Vocabulary,
    word: str,
    x_a: Tensor,
    x_b: Tensor,
    top: int = 15,
    show: int = 3,
) -> Neighbours:
    """Section 3.4: the top-``top`` neighbours under each attribute vector; ``show`` of the
    common ones and of those unique to each side."""
    list_a = [w for w, _ in neighbours_under(model, vocab, word, x_a, top)]
    list_b = [w for w, _ in neighbours_under(model, vocab, word, x_b, top)]
    rank_b = {w: i for i, w in enumerate(list_b)}
    common = sorted(
        (w for w in list_a if w in rank_b), key=lambda w: min(list_a.index(w), rank_b[w])
    )
    return Neighbours(
        word,
        tuple(list_a),
        tuple(list_b),
        tuple(common[:show]),
        tuple(w for w in list_a if w not in rank_b)[:show],
        tuple(w for w in list_b if w not in set(list_a))[:show],
    )


# -- sampling (Table 2) ---------------------------------------------------------------------------


@torch.no_grad()
def sample_sentences(
    model: LBL,
    vocab: Vocabulary,
    x: Tensor | None,
    n: int = 1,
    max_words: int = 40,
    seed: int = 0,
    temperature: float = 1.0,
    allow_unk: bool = False,
) -> list[list[str]]:
    """``n`` sentences drawn word by word from P(w | history, x) until ``</s>`` (or cut after
    ``max_words`` words)."""
    if n < 1 or max_words < 1 or not 0 < temperature < math.inf:
        raise ValueError(f"need n, max_words >= 1 and a finite temperature > 0; got {n}, "
                         f"{max_words}, {temperature}")  # fmt: skip
    device = model.bias.device
    gen = torch.Generator(device=device).manual_seed(seed)
    hist = torch.full((n, model.config.order - 1), BOS_ID, dtype=torch.long, device=device)
    xb = None if x is None else x.to(device)[None, :].expand(n, -1)
    done = torch.zeros(n, dtype=torch.bool, device=device)
    drawn = []
    for _ in range(max_words):  # a sentence still going after max_words words is cut there
        logits = model.logits(model.predict(hist), x=xb).double()
        if not allow_unk:
            logits[:, UNK_ID] = -math.inf
        # Measured from the best word before the division (in float64): any finite temperature
        # gives probabilities, down to the best word alone (tiny) or all alike (huge).
        logits = (logits - logits.max(dim=-1, keepdim=True).values) / temperature
        nxt = torch.multinomial(F.softmax(logits, dim=-1), 1, generator=gen)[:, 0]
        nxt = nxt.masked_fill(done, EOS_ID)  # finished sentences only pad
        drawn.append(nxt)
        done |= nxt == EOS_ID
        if bool(done.all()):
            break
        hist = torch.cat([nxt[:, None], hist[:, :-1]], dim=1)
    out = []
    for row in torch.stack(drawn, dim=1).tolist():
        end = row.index(EOS_ID) if EOS_ID in row else len(row)
        out.append([vocab.token(t) for t in row[:end]])
    return out


# -- logistic regression on attribute vectors ----------------------------------------------------


@dataclass(frozen=True)
class LogisticRegression:
    """A multinomial logistic regression on standardised features."""

    # Feature means and standard deviations of the training data.
    mean: np.ndarray
    std: np.ndarray
    # (classes, features) weights and (classes,) biases.
    weight: np.ndarray
    bias: np.ndarray

    def predict(self, features: np.ndarray) -> np.ndarray:
        z = (features - self.mean) / self.std
        return (z @ self.weight.T + self.bias).argmax(axis=1)


def fit_logistic_regression(
    features: np.ndarray, labels: np.ndarray, n_classes: int, l2: float = 1e-2, steps: int = 200
) -> LogisticRegression:
    """Multinomial logistic regression, L2 penalty ``l2`` on the weights, fit by L-BFGS."""
    if len(features) != len(labels) or len(features) == 0:
        raise ValueError(f"need matching non-empty features and labels, got {len(features)}, "
                         f"{len(labels)}")  # fmt: skip
    mean = features.mean(0)
    std = features.std(0) + 1e-8
    x = torch.from_numpy((features - mean) / std).double()
    y = torch.from_numpy(np.asarray(labels, dtype=np.int64))
    w = torch.zeros(n_classes, x.shape[1], dtype=torch.float64, requires_grad=True)
    b = torch.zeros(n_classes, dtype=torch.float64, requires_grad=True)
    opt = torch.optim.LBFGS([w, b], max_iter=steps, line_search_fn="strong_wolfe")

    def closure() -> Tensor:
        opt.zero_grad()
        loss = F.cross_entropy(x @ w.T + b, y) + l2 * (w * w).sum()
        loss.backward()
        return loss

    opt.step(closure)
    return LogisticRegression(mean, std, w.detach().numpy(), b.detach().numpy())


def main(argv: Sequence[str] | None = None) -> None:
    config_training_main(
        argv, "python -m rescorer.lm_models.lbl.train", __doc__, LBLTrainConfig.load, train_lbl
    )


if __name__ == "__main__":
    main()
