"""The LSTM family's training data: documents read, split, counted into a vocabulary and context
variables, and encoded into examples; held in memory or streamed from a sharded corpus.

A config's ``data`` section names the data in one of three ways:

- ``path`` (and ``split``): one corpus, split by document into train/dev/test (stratified by
  ``stratify_by``);
- ``path`` and ``dev``: a training corpus and a dev corpus, each taken whole;
- ``train_shards`` and ``dev``: the training corpus as a shard folder written by
  ``rescorer corpus shard`` (:mod:`rescorer.lm_models.corpus_shards`), never in memory as a whole:
  the vocabulary and context variables come from one streaming pass over the shards, and training
  reads one shard at a time (:meth:`PreparedData.train_parts`).

A ``previous`` section adds a text context variable derived from the corpus itself: for each
sentence, the words of the sentences before it in its document
(:mod:`rescorer.lm_models.context_text`), optionally with ASR-like word errors drawn anew every
epoch, embedded by a frozen string encoder (:mod:`rescorer.lm_models.lstm.context`, kind ``text``).
It is the training form of the ``previous`` field that ``rescorer context build --previous K``
writes for an N-best set. A plain-text corpus needs documents of several sentences for it:
``plain_documents`` ``block`` (blank lines between documents) or ``file``.

Under torchrun (:mod:`rescorer.lm_models.distributed`) every process builds the same vocabulary and
context variables from the whole training data and keeps only its share of the training
examples: every N-th training document (in memory; the corpus is read whole once, then the
rest is let go), or its own shards (streamed: process r reads shards r, r + N, ...; the counts
of the streaming pass are each process's own shards', added over the processes). The dev set is
held whole by every process; its batches are shared out in evaluation.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from rescorer.core.errors import InputError
from rescorer.lm_models.asr_tokens import AsrTokens, load_token_set
from rescorer.lm_models.batching import Example
from rescorer.lm_models.context_text import FIXED_EPOCH, WordNoise, WordSampler, previous_texts
from rescorer.lm_models.corpora import (
    PLAIN_DOCUMENTS,
    Document,
    read_agnews,
    read_brown,
    read_dbpedia,
    read_jsonl,
    read_plain,
    split_documents,
)
from rescorer.lm_models.corpus_shards import ShardStream, check_training_data
from rescorer.lm_models.distributed import (
    ONE_PROCESS,
    World,
    broadcast_object,
    counted_shards,
    share,
)
from rescorer.lm_models.lstm.context import ContextVariable, text_encoder
from rescorer.lm_models.tokenizer import SubwordTokenizer, TokenizerOptions
from rescorer.lm_models.training import options_from_json
from rescorer.lm_models.vocab import (
    EOS_ID,
    UNK_ID,
    Vocabulary,
    check_vocabulary_limits,
    counted_vocabulary,
)

logger = logging.getLogger(__name__)

SHARD_CORPORA = {"plain": "text", "jsonl": "jsonl"}  # corpus reader -> kind of its shards
RATIO_RECORDS = 256  # distinct training contexts the adaptation ratio is measured over
# Training sentences whose derived texts give a text variable's mean vector (a sample: the mean
# is only the value of a missing text, and embedding is the slow part with a pretrained encoder).
MEAN_SAMPLE = 4096


@dataclass(frozen=True)
class PreviousText:
    """A text context variable derived from the sentences before each sentence in its document."""

    # Name of the derived field and of its context variable ("previous", the field that
    # `rescorer context build` writes for the N-best lists it is scored with).
    field: str = "previous"
    # How many earlier sentences of the same document (the most recent ones, oldest first).
    sentences: int = 3
    # The frozen string encoder of the text (rescorer.lm_models.text_encoders.make_embedder spec:
    # "hash:DIM", "minilm", "st:PATH", "hf:PATH"); not trained, not in the weights.
    encoder: str = "hash:256"
    # ASR-like word errors injected into the derived text
    # (rescorer.lm_models.context_text.WordNoise: substitution, deletion, insertion rates per word
    # and a seed), drawn anew every training epoch and once for the dev data; None: the clean text.
    noise: WordNoise | None = None

    def __post_init__(self) -> None:
        if isinstance(self.noise, Mapping):
            object.__setattr__(
                self, "noise", options_from_json(WordNoise, self.noise, "data.previous.noise")
            )
        k = self.sentences
        if not isinstance(k, int) or isinstance(k, bool) or k < 1:
            raise ValueError(f"data.previous.sentences: expected an integer >= 1, got {k!r}")
        if not isinstance(self.encoder, str) or not self.encoder:
            raise ValueError(
                "data.previous.encoder: expected a string encoder's spec (hash:DIM, minilm, ...)"
            )
        # The name rules of context variables (a ValueError naming the field).
        ContextVariable.text(self.field, self.encoder, 1)

    def texts(self, doc: Document, sampler: WordSampler | None, epoch: int) -> list[str | None]:
        """The derived text of each sentence of ``doc`` (None: no earlier sentence)."""
        return previous_texts(doc, self.sentences, self.noise, sampler, epoch)


@dataclass(frozen=True)
class DataConfig:
    """Which documents to train on and how to split them."""

    # Corpus reader, a key of CORPUS_READERS ("brown", "agnews", "dbpedia", "plain", "jsonl").
    corpus: str
    # Path of the corpus, relative to the data folder unless absolute ("" with train_shards).
    path: str = ""
    # Document fields used as categorical context variables (e.g. ["genre"]); [] for none.
    context_fields: tuple[str, ...] = ()
    # Field to stratify the document split by (None: plain random split).
    stratify_by: str | None = None
    # Train/dev/test fractions of the documents, and the split's seed.
    split: tuple[float, float, float] = (0.8, 0.1, 0.1)
    split_seed: int = 0
    # Sentences are truncated to this many words (the paper: 60 for AG News and DBpedia).
    max_len: int | None = 60
    # Vocabulary: at most this many types (specials included), each seen >= min_count times.
    vocab_size: int | None = 10000
    min_count: int = 1
    # Subword units: a sentencepiece tokenizer learnt from the training split (e.g.
    # {"kind": "unigram", "vocab_size": 8000}, see rescorer.lm_models.tokenizer.TokenizerOptions)
    # whose pieces are the model's units (vocab_size and min_count are then unused); None: words.
    tokenizer: TokenizerOptions | None = None
    # A dev corpus of its own, read like `path`: the training data (path or train_shards) are
    # then used whole, and split, stratify_by and split_seed are unused. None: split `path`.
    dev: str | None = None
    # The training corpus as a shard folder (`rescorer corpus shard`; corpus "plain" or
    # "jsonl"), read one shard at a time, each process its own shards; needs `dev` and no
    # `path`. None: the training data are read into memory.
    train_shards: str | None = None
    # An ASR model's token set as the units (rescorer.lm_models.asr_tokens), so that a decoder
    # export speaks the ASR's ids: its tokens.txt ("TOKEN ID" lines) and/or its sentencepiece model
    # (which then cuts the words; without it the text's items are the tokens). Paths relative
    # to the data folder unless absolute; vocab_size, min_count and tokenizer are then unused.
    tokens: str | None = None
    bpe_model: str | None = None
    # Documents of a plain-text corpus: "line" (each line its own), "block" (runs of lines
    # between blank lines: paragraphs, chapters, books) or "file" (the whole file). Documents of
    # several sentences are what a `previous` text context is derived within.
    plain_documents: str = "line"
    # A text context variable derived from the sentences before each sentence in its document,
    # with optional ASR-like noise (PreviousText); None: none.
    previous: PreviousText | None = None
    # Train on runs of up to ``history + 1`` consecutive sentences of a document, each run read
    # as one sequence (``<s> s1 <s> s2 ..``, every word and every ``</s>`` a target), so that the
    # LSTM learns to carry its state across sentence bounds. Scoring then reads the earlier
    # text from the context field ``history_field`` (one line per earlier utterance, as
    # `rescorer context build --previous K` writes it) before each sentence. 0: sentences one
    # by one, from the zero state.
    history: int = 0
    # The context field a history model reads its earlier text from (with history > 0).
    history_field: str = "previous"

    def with_train_shards(self, shards: str | Path) -> DataConfig:
        """This data section training on the shard folder ``shards`` instead of ``path``."""
        return replace(self, path="", train_shards=str(shards))

    @property
    def asr_units(self) -> bool:
        """True when the units are an ASR model's tokens (data.tokens or data.bpe_model)."""
        return self.tokens is not None or self.bpe_model is not None

    def __post_init__(self) -> None:
        if self.corpus not in CORPUS_READERS:
            raise ValueError(f"corpus must be one of {sorted(CORPUS_READERS)}, got {self.corpus!r}")
        check_vocabulary_limits(
            self.vocab_size, self.min_count, "data.vocab_size", "data.min_count"
        )
        if isinstance(self.tokenizer, Mapping):
            tok = options_from_json(TokenizerOptions, self.tokenizer, "data.tokenizer")
            object.__setattr__(self, "tokenizer", tok)
        object.__setattr__(self, "context_fields", tuple(self.context_fields))
        object.__setattr__(self, "split", tuple(self.split))
        if isinstance(self.previous, Mapping):
            prev = options_from_json(PreviousText, self.previous, "data.previous")
            object.__setattr__(self, "previous", prev)
        if self.plain_documents not in PLAIN_DOCUMENTS:
            raise ValueError(
                f"data.plain_documents: expected one of {PLAIN_DOCUMENTS}, got "
                f"{self.plain_documents!r}"
            )
        if self.plain_documents != "line" and self.corpus != "plain":
            raise ValueError(
                f"data.plain_documents is for corpus 'plain'; corpus {self.corpus!r} reads its "
                "own documents"
            )
        if self.plain_documents != "line" and self.train_shards is not None:
            raise ValueError(
                "data.plain_documents 'block'/'file' with train_shards: text shards keep no "
                "blank lines or file bounds; shard a JSONL corpus (a document per line) instead"
            )
        h = self.history
        if not isinstance(h, int) or isinstance(h, bool) or h < 0:
            raise ValueError(f"data.history: expected an integer >= 0, got {h!r}")
        if h and self.previous is not None:
            raise ValueError(
                "data.history reads the earlier sentences as the LSTM's own input and "
                "data.previous embeds them as a context vector: give one or the other, got both"
            )
        if h and (not isinstance(self.history_field, str) or not self.history_field.strip()):
            raise ValueError(
                f"data.history_field: expected a context field name, got {self.history_field!r}"
            )
        if h and self.history_field in self.context_fields:
            raise ValueError(
                f"data.history_field {self.history_field!r} is also in context_fields; the "
                "history is read as text, not as a categorical variable"
            )
        if self.previous is not None and self.previous.field in self.context_fields:
            raise ValueError(
                f"data.previous.field {self.previous.field!r} is also in context_fields; give "
                "the derived text another name"
            )
        if self.asr_units and self.tokenizer is not None:
            raise ValueError(
                "data.tokens / data.bpe_model take the ASR model's token set and data.tokenizer "
                "learns a new one: give one or the other, got both"
            )
        if self.asr_units and self.train_shards is not None:
            raise ValueError(
                "data.tokens / data.bpe_model with train_shards: not supported yet (the ASR "
                "units are counted over the training text in memory); give data.path"
            )
        check_training_data(
            "path", self.path, self.train_shards, self.dev, self.corpus, SHARD_CORPORA, "lines"
        )


CORPUS_READERS: dict[str, Callable[[Path, DataConfig], list[Document]]] = {
    "brown": lambda p, c: read_brown(p),
    "agnews": lambda p, c: read_agnews(p, max_len=c.max_len),
    "dbpedia": lambda p, c: read_dbpedia(p, max_len=c.max_len),
    "plain": lambda p, c: read_plain(p, per=c.plain_documents),  # type: ignore[arg-type]
    "jsonl": lambda p, c: read_jsonl(p, max_len=c.max_len),
}


class _Config(Protocol):  # what prepare_data reads of a training config
    @property
    def data(self) -> DataConfig: ...

    @property
    def model(self) -> Any: ...  # context_embed_dim, one_hot_bias


def read_corpus(path: Path, dc: DataConfig) -> list[Document]:
    """The documents of one corpus file (or folder), sentences cut at ``max_len`` words."""
    docs = CORPUS_READERS[dc.corpus](path, dc)
    if dc.max_len is None:  # every reader: sentences longer than max_len are cut
        return docs
    return [
        d
        if all(len(x) <= dc.max_len for x in d.sentences)
        else replace(d, sentences=tuple(tuple(x[: dc.max_len]) for x in d.sentences))
        for d in docs
    ]


# -- examples ---------------------------------------------------------------------------------


def context_record(doc: Document, variables: Sequence[ContextVariable]) -> dict[str, Any] | None:
    """The document's categorical context; a value unseen in training is missing (expected
    embedding). Text variables are per sentence (:func:`sentence_records`)."""
    if not variables:
        return None
    return {
        v.name: (doc.fields.get(v.name) if doc.fields.get(v.name) in v.values else None)
        for v in variables
        if v.kind == "categorical"
    }


@dataclass(frozen=True)
class DerivedText:
    """The derived text field of one pass over the data: which field, and the noise's epoch."""

    # The field and how it is derived.
    previous: PreviousText
    # Draws substitutes and insertions (None without noise).
    sampler: WordSampler | None
    # The epoch whose noise is drawn (FIXED_EPOCH for dev data).
    epoch: int = FIXED_EPOCH


def sentence_records(
    doc: Document, variables: Sequence[ContextVariable], derived: DerivedText | None
) -> list[dict[str, Any] | None]:
    """The context record of each sentence of ``doc``: its document's, plus the derived text."""
    record = context_record(doc, variables)
    if derived is None:
        return [record] * len(doc.sentences)
    texts = derived.previous.texts(doc, derived.sampler, derived.epoch)
    field = derived.previous.field
    return [{**(record or {}), field: text} for text in texts]


def examples_of(
    docs: Sequence[Document],
    vocab: Vocabulary,
    variables: Sequence[ContextVariable],
    tokenizer: SubwordTokenizer | None = None,
    derived: DerivedText | None = None,
    history: int = 0,
) -> list[Example]:
    """The encoded sentences of ``docs``; with ``history`` > 0, runs of up to ``history + 1``
    consecutive sentences of a document joined into one example (:func:`join_runs`)."""
    out = []
    for doc in docs:
        records = sentence_records(doc, variables, derived)
        mine = []
        for sentence, record in zip(doc.sentences, records, strict=True):
            units = sentence if tokenizer is None else tokenizer.encode(sentence)
            inputs, targets = vocab.encode_sentence(units)
            mine.append(Example(tuple(inputs), tuple(targets), record))
        out.extend(join_runs(mine, history) if history else mine)
    return out


def join_runs(examples: Sequence[Example], history: int) -> list[Example]:
    """One document's sentences in runs of ``history + 1`` (the last run shorter), each run
    one example: inputs ``<s> s1 <s> s2 ..`` and targets ``s1 </s> s2 </s> ..``, so that the
    k-th sentence of a run is predicted after the k - 1 before it, as a history model scores an
    utterance after the previous ones. The run takes its first sentence's context record (a
    document's categorical record is the same for all its sentences)."""
    if history < 0:
        raise ValueError(f"history: expected an integer >= 0, got {history}")
    size = history + 1
    out = []
    for a in range(0, len(examples), size):
        run = examples[a : a + size]
        inputs = tuple(i for e in run for i in e.inputs)
        targets = tuple(t for e in run for t in e.targets)
        out.append(Example(inputs, targets, run[0].record))
    return out


def distinct_records(
    examples: Sequence[Example], limit: int = RATIO_RECORDS
) -> list[Mapping[str, Any] | None]:
    """Up to ``limit`` distinct context records of ``examples`` (first seen first)."""
    return _distinct((e.record for e in examples), limit)


def _distinct(
    records: Iterable[Mapping[str, Any] | None], limit: int
) -> list[Mapping[str, Any] | None]:
    seen: dict[str, Mapping[str, Any] | None] = {}
    for record in records:
        key = json.dumps(record, sort_keys=True, default=str)
        if key not in seen:
            seen[key] = record
            if len(seen) >= limit:
                break
    return list(seen.values())


# -- counts of the training data ----------------------------------------------------------------


@dataclass
class CorpusCounts:
    """What the vocabulary and the context variables are built from, counted document by
    document (so a corpus streamed shard by shard is counted without being held)."""

    # Words of the training sentences, and the number of sentences and documents.
    words: Counter[str] = field(default_factory=Counter)
    sentences: int = 0
    documents: int = 0
    # Per context field, the sentences of each value.
    values: dict[str, Counter[str]] = field(default_factory=dict)
    # Distinct context-field values of documents with sentences, first seen first (at most
    # RATIO_RECORDS): the contexts the adaptation ratio is measured over.
    contexts: list[tuple[str | None, ...]] = field(default_factory=list)
    # The first documents of several sentences, kept until they hold `sample` sentences: what
    # a derived text variable's mean vector is estimated from.
    sample: list[Document] = field(default_factory=list)

    def add(self, docs: Sequence[Document], fields: Sequence[str], sample: int = 0) -> None:
        seen = set(self.contexts)
        kept = sum(len(d.sentences) for d in self.sample)
        for doc in docs:
            if kept < sample and len(doc.sentences) > 1:
                self.sample.append(doc)
                kept += len(doc.sentences)
            self.documents += 1
            for sentence in doc.sentences:
                self.words.update(sentence)
            self.sentences += len(doc.sentences)
            for name in fields:
                value = doc.fields.get(name)
                if value is not None:
                    self.values.setdefault(name, Counter())[value] += len(doc.sentences)
            key = tuple(doc.fields.get(name) for name in fields)
            if doc.sentences and len(self.contexts) < RATIO_RECORDS and key not in seen:
                seen.add(key)
                self.contexts.append(key)

    @classmethod
    def merged(cls, parts: Sequence[CorpusCounts], sample: int = MEAN_SAMPLE) -> CorpusCounts:
        """The counts of several parts (the processes' shards) together, parts in order."""
        out = cls()
        seen: set[tuple[str | None, ...]] = set()
        for part in parts:
            for doc in part.sample:
                if sum(len(d.sentences) for d in out.sample) < sample:
                    out.sample.append(doc)
            out.words.update(part.words)
            out.sentences += part.sentences
            out.documents += part.documents
            for name, counts in part.values.items():
                out.values.setdefault(name, Counter()).update(counts)
            for key in part.contexts:
                if len(out.contexts) < RATIO_RECORDS and key not in seen:
                    seen.add(key)
                    out.contexts.append(key)
        return out

    def vocabulary(self, dc: DataConfig, tokenizer: SubwordTokenizer | None) -> Vocabulary:
        """As :func:`rescorer.lm_models.vocab.build_vocabulary` (words) or
        :meth:`SubwordTokenizer.vocabulary` (pieces) over the counted sentences."""
        if tokenizer is not None:
            return tokenizer.vocabulary_of_counts(self.words, self.sentences)
        return counted_vocabulary(self.words, self.sentences, dc.vocab_size, dc.min_count)

    def variables(self, dc: DataConfig, model: Any) -> list[ContextVariable]:
        """The categorical context variables of ``dc.context_fields``, values sorted, each
        weighted by its sentences."""
        variables = []
        for name in dc.context_fields:
            counts = self.values.get(name)
            if not counts:
                raise ValueError(f"context field {name!r} has no value in the training documents")
            values = sorted(counts)
            variables.append(
                ContextVariable.categorical(
                    name,
                    values,
                    [counts[v] for v in values],
                    embed_dim=model.context_embed_dim,
                    one_hot_bias=model.one_hot_bias,
                )
            )
        return variables

    def text_variable(self, previous: PreviousText) -> tuple[ContextVariable, WordSampler | None]:
        """The derived text's context variable, its mean the mean vector of the sample's texts
        (one fixed noise draw), and the sampler of its noise (None without noise)."""
        sampler = None
        if previous.noise is not None and previous.noise.active:
            sampler = WordSampler(self.words)
        texts = [t for doc in self.sample for t in previous.texts(doc, sampler, FIXED_EPOCH) if t][
            :MEAN_SAMPLE
        ]
        if not texts:
            raise ValueError(
                f"data.previous: no training sentence has an earlier one in its document, so "
                f"the derived text {previous.field!r} is always missing; give documents of "
                "several sentences (corpus 'plain' with plain_documents 'block' or 'file', or a "
                "JSONL document per line)"
            )
        cache = text_encoder(previous.encoder)
        vectors = cache.vectors(texts)
        mean = vectors.astype("float64").mean(axis=0)
        logger.info(
            "text context %r: the %d previous sentence(s), encoder %s (%d dims), mean over %d "
            "training texts%s",
            previous.field,
            previous.sentences,
            previous.encoder,
            cache.embedder.dim,
            len(texts),
            "" if sampler is None else f", noise {previous.noise}",
        )
        var = ContextVariable.text(
            previous.field, previous.encoder, cache.embedder.dim, mean.tolist()
        )
        return var, sampler

    def records(
        self, variables: Sequence[ContextVariable], derived: DerivedText | None = None
    ) -> list[Mapping[str, Any] | None]:
        """The counted contexts as context records (none without variables); with a derived
        text, the sample's sentences' records instead (their distinct texts)."""
        if not variables:
            return [None] if self.contexts else []
        if derived is not None:
            records = (r for d in self.sample for r in sentence_records(d, variables, derived))
            return _distinct(records, RATIO_RECORDS)
        names = [v.name for v in variables if v.kind == "categorical"]
        return [dict(zip(names, key, strict=True)) for key in self.contexts]


# -- the prepared data ------------------------------------------------------------------------


@dataclass(frozen=True)
class PreparedData:
    """Everything derived from the corpus before training."""

    vocab: Vocabulary
    context_vars: tuple[ContextVariable, ...]
    # The subword tokenizer when the units are pieces (None: words).
    tokenizer: SubwordTokenizer | None
    # This process's training examples (all of them in one process); () when streamed.
    train: tuple[Example, ...]
    dev: tuple[Example, ...]
    # Document ids of each split (written beside the checkpoints for later evaluation); the
    # training ids are not listed for a streamed corpus.
    split_ids: Mapping[str, tuple[str, ...]]
    # Distinct context records of the training data (the adaptation ratio's contexts).
    contexts: tuple[Mapping[str, Any] | None, ...] = ()
    # The ASR token set the units are (data.tokens / data.bpe_model), else None.
    asr_tokens: AsrTokens | None = None
    # The training corpus streamed from this process's shards, read as documents (None:
    # `train` holds this process's examples).
    stream: ShardStream[list[Document]] | None = None
    # The derived text field (data.previous) and its noise's sampler; None without one.
    derived: DerivedText | None = None
    # This process's training documents in memory when the derived text is noisy: each
    # epoch's records are derived from them anew (`train` keeps the examples' units).
    train_docs: tuple[Document, ...] = ()
    # Sentences joined per training example (data.history; 0: one).
    history: int = 0

    def train_parts(
        self, seed: int, epoch: int = FIXED_EPOCH
    ) -> Iterator[tuple[int, list[Example]]]:
        """This process's training examples as ``(part, examples)``: all in one part (0) in
        memory, or one part per shard, the shards in an order drawn with ``seed``, one shard
        read and encoded at a time. A noisy derived text is drawn for ``epoch``."""
        derived = None if self.derived is None else replace(self.derived, epoch=epoch)
        if self.stream is None:
            if not self.train_docs or derived is None:
                yield 0, list(self.train)
                return
            records = [
                r for d in self.train_docs for r in sentence_records(d, self.context_vars, derived)
            ]
            yield 0, [replace(e, record=r) for e, r in zip(self.train, records, strict=True)]
            return
        for shard, docs in self.stream.parts(seed):
            examples = examples_of(
                docs, self.vocab, self.context_vars, self.tokenizer, derived, self.history
            )
            del docs  # only the examples of one shard are held
            yield shard, examples
            del examples


def _resolve(path: str, data_dir: Path) -> Path:
    return Path(path) if Path(path).is_absolute() else data_dir / path


def prepare_data(
    cfg: _Config,
    data_dir: Path,
    tokenizer: SubwordTokenizer | None = None,
    world: World = ONE_PROCESS,
) -> PreparedData:
    """Read (and split) the corpus, build the vocabulary and the context variables, encode the
    examples (for subword units, learn the tokenizer from the training data unless
    ``tokenizer`` is given, e.g. a resumed run's). Under torchrun, ``world`` is this process's
    place: it keeps its share of the training examples (module docstring)."""
    dc = cfg.data
    if dc.train_shards is not None:
        return _prepare_stream(cfg, data_dir, tokenizer, world)
    path = _resolve(dc.path, data_dir)
    docs = read_corpus(path, dc)
    if not docs:
        raise ValueError(f"{path}: no documents")
    if dc.dev is None:
        train, dev, test = split_documents(docs, dc.split, dc.stratify_by, dc.split_seed)
        if not train or not dev:
            raise ValueError(f"split {dc.split} of {len(docs)} documents left train or dev empty")
    else:
        train, dev, test = docs, _read_dev(dc, data_dir), []
    del docs
    counts = CorpusCounts()
    counts.add(train, dc.context_fields, MEAN_SAMPLE if dc.previous is not None else 0)
    asr = None
    if dc.asr_units:
        asr, tokenizer, vocab = asr_vocabulary(
            dc, data_dir, [s for d in train for s in d.sentences]
        )
    else:
        if dc.tokenizer is not None and tokenizer is None:
            sentences = (s for d in train for s in d.sentences)
            tokenizer = SubwordTokenizer.learn_or_load(dc.tokenizer, lambda: sentences, data_dir)
        if dc.tokenizer is None:
            tokenizer = None
        vocab = counts.vocabulary(dc, tokenizer)
    variables, derived = _variables(dc, cfg.model, counts)
    _log_data(len(train), len(dev), len(test), vocab, _units(dc, tokenizer, asr), variables)
    split_ids = {
        "train": tuple(d.doc_id for d in train),
        "dev": tuple(d.doc_id for d in dev),
        "test": tuple(d.doc_id for d in test),
    }
    mine = share(train, world)
    del train  # this process keeps its share only
    noisy = derived is not None and derived.sampler is not None
    return PreparedData(
        vocab=vocab,
        context_vars=tuple(variables),
        tokenizer=tokenizer,
        train=tuple(examples_of(mine, vocab, variables, tokenizer, derived, dc.history)),
        dev=tuple(examples_of(dev, vocab, variables, tokenizer, derived, dc.history)),
        split_ids=split_ids,
        contexts=tuple(counts.records(variables, derived)),
        asr_tokens=asr,
        derived=derived,
        train_docs=tuple(mine) if noisy else (),
        history=dc.history,
    )


def _variables(
    dc: DataConfig, model: Any, counts: CorpusCounts
) -> tuple[list[ContextVariable], DerivedText | None]:
    """The context variables of the training data: the categorical ones of ``context_fields``,
    then the derived text's (``previous``), with what derives its records."""
    variables = counts.variables(dc, model)
    if dc.previous is None:
        return variables, None
    var, sampler = counts.text_variable(dc.previous)
    return [*variables, var], DerivedText(dc.previous, sampler)


def _read_dev(dc: DataConfig, data_dir: Path) -> list[Document]:
    assert dc.dev is not None
    path = _resolve(dc.dev, data_dir)
    dev = read_corpus(path, dc)
    if not dev:
        raise ValueError(f"{path}: no dev documents")
    return dev


def _log_data(
    n_train: int,
    n_dev: int,
    n_test: int,
    vocab: Vocabulary,
    units: str,
    variables: Sequence[ContextVariable],
) -> None:
    logger.info(
        "data: %d/%d/%d documents, vocabulary %d %s, context %s",
        n_train,
        n_dev,
        n_test,
        len(vocab),
        units,
        {v.name: len(v.values) if v.kind == "categorical" else v.encoder for v in variables},
    )


def _units(dc: DataConfig, tokenizer: SubwordTokenizer | None, asr: AsrTokens | None) -> str:
    """The model's units in words, for the log."""
    if asr is not None:
        return f"ASR tokens ({asr.describe()})"
    return "words" if tokenizer is None else f"{dc.tokenizer.kind} pieces"  # type: ignore[union-attr]


def asr_vocabulary(
    dc: DataConfig, data_dir: Path, sentences: Sequence[Sequence[str]]
) -> tuple[AsrTokens, SubwordTokenizer | None, Vocabulary]:
    """The units of an LM over an ASR model's tokens (data.tokens / data.bpe_model): the token
    set, the tokenizer that cuts words into them (None: the text's items are the tokens) and the
    vocabulary ``[<unk>, <s>, </s>] + tokens`` with its counts in ``sentences``."""
    token_set = load_token_set(
        None if dc.tokens is None else _resolve(dc.tokens, data_dir),
        None if dc.bpe_model is None else _resolve(dc.bpe_model, data_dir),
    )
    asr = token_set.asr
    tokenizer = None
    if token_set.sentencepiece is not None:
        tokenizer = SubwordTokenizer(token_set.sentencepiece, asr.source)
    units = asr.lm_tokens()
    index = {t: i for i, t in enumerate(units)}
    counts = [0] * len(units)
    for sentence in sentences:
        for unit in sentence if tokenizer is None else tokenizer.encode(sentence):
            counts[index.get(unit, UNK_ID)] += 1
        counts[EOS_ID] += 1
    total = sum(counts) - counts[EOS_ID]
    if total and counts[UNK_ID] / total > 0.05:
        logger.warning(
            "%.1f%% of the training text's units are <unk> under %s: is the text normalised as "
            "the ASR model's transcripts are (case, punctuation)%s?",
            100 * counts[UNK_ID] / total,
            asr.source,
            "" if tokenizer is not None else ", and split into its tokens",
        )
    return asr, tokenizer, Vocabulary(units, counts)


def _prepare_stream(
    cfg: _Config, data_dir: Path, tokenizer: SubwordTokenizer | None, world: World
) -> PreparedData:
    dc = cfg.data
    assert dc.train_shards is not None
    stream, counts = counted_shards(
        _resolve(dc.train_shards, data_dir),
        SHARD_CORPORA[dc.corpus],
        lambda p: read_corpus(p, dc),
        dc.corpus,
        CorpusCounts(),
        lambda c, docs: c.add(docs, dc.context_fields, MEAN_SAMPLE if dc.previous else 0),
        world,
    )
    index = stream.index
    if counts.sentences == 0:
        raise InputError("no training sentences in the shards", index.directory)
    if dc.tokenizer is not None and tokenizer is None:
        proto = None
        if world.is_main:  # learnt in one process from every shard, one at a time
            every = stream.reader.parts(range(len(index.shards)))
            proto = SubwordTokenizer.learn_or_load(
                dc.tokenizer,
                lambda: (s for _, docs in every for d in docs for s in d.sentences),
                data_dir,
            ).model_proto
        tokenizer = SubwordTokenizer(broadcast_object(proto, world))
    if dc.tokenizer is None:
        tokenizer = None
    vocab = counts.vocabulary(dc, tokenizer)
    variables, derived = _variables(dc, cfg.model, counts)
    dev = _read_dev(dc, data_dir)
    _log_data(counts.documents, len(dev), 0, vocab, _units(dc, tokenizer, None), variables)
    return PreparedData(
        vocab=vocab,
        context_vars=tuple(variables),
        tokenizer=tokenizer,
        train=(),
        dev=tuple(examples_of(dev, vocab, variables, tokenizer, derived, dc.history)),
        split_ids={"train": (), "dev": tuple(d.doc_id for d in dev), "test": ()},
        contexts=tuple(counts.records(variables, derived)),
        stream=stream,
        derived=derived,
        history=dc.history,
    )
