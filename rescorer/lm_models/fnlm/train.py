"""Training factored neural LMs (:mod:`rescorer.lm_models.fnlm.model`) from a JSON config.

    rescorer fnlm-train CONFIG.json --out DIR        (or python -m rescorer.lm_models.fnlm.train
    ...)

The config has three sections, each a frozen dataclass below (every field documented):

```json
{"data":  {"corpus": "conllu", "train": "ud/UD_Turkish-IMST/tr_imst-ud-train.conllu",
           "dev": "ud/UD_Turkish-IMST/tr_imst-ud-dev.conllu", "unit": "token",
           "factors": ["word", "lemma", "upos", "feats"], "language": "tr"},
 "model": {"order": 4, "embed_dim": 32, "hidden_dim": 64, "output": "classes",
           "classes": "frequency", "num_classes": 64},
 "train": {"epochs": 20, "batch_size": 128, "lr": 0.002, "l2": 1e-5, "flatten_alpha": 0.05}}
```

Corpora: ``conllu`` (train and dev files), ``plain`` (one sentence per line, words split on
whitespace; train and dev files) and ``brown`` (the tagged Brown folder, tags as the ``xpos``
factor, split by document into train/dev with ``split``). Paths are relative to the data folder
unless absolute. A ``conllu`` or ``plain`` training corpus larger than memory is cut into shards
(``rescorer corpus shard train.conllu shards/ --shards 64``) and named by ``train_shards``
instead of ``train`` (or ``--train-shards DIR``): the vocabularies, factor values, lexicon and
Brown classes come from one pass over the shards (each process its own, the counts merged over
the processes), the count-flattening weights from a second (the pattern counts summed over the
processes, :func:`rescorer.lm_models.distributed.total_counts`), and each epoch reads the process's
shards one at a time (:func:`train_fnlm`).

Training (section 5 of the paper): Adam on the weighted negative log-likelihood of every token
(its words and ``</s>``), each occurrence weighted by count flattening (eq. 4,
:func:`rescorer.lm_models.fnlm.model.flattening_weights`), plus ``l2`` times the sum of squared
weights of the dense layers (W_ih, W_ho and the class layer; biases and the embedding tables are not
penalised: under Adam an L2 pull on rarely seen embedding rows would drive them to zero between
their visits). Dropout on the input and hidden layers is an option (off by default; not in
the paper). After each epoch the dev perplexity (``train.select_by``: "no_unk", the tokens whose
word was seen in training, or "with_unk", every token; the config's unknown-factor strategy
for unknown history words) decides: the best weights are kept, the learning rate is multiplied
by ``lr_decay`` after an epoch without improvement, and training stops after ``patience`` such
epochs. The output folder is the checkpoint of the best epoch
(usable as ``fnlm:DIR``), with ``training.json`` holding the epoch log.
"""

from __future__ import annotations

import logging
import math
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rescorer.core.errors import InputError
from rescorer.core.io import read_lines
from rescorer.lm_models.batching import row_batches
from rescorer.lm_models.conllu import read_conllu
from rescorer.lm_models.corpora import read_brown_tagged, split_documents
from rescorer.lm_models.corpus_shards import ShardStream, check_training_data
from rescorer.lm_models.distributed import (
    World,
    all_gather_objects,
    all_sum,
    counted_shards,
    init_world,
    process_device,
    rank_seed,
    seed_process,
    share_slices,
    total_counts,
)
from rescorer.lm_models.fnlm.factors import (
    AnnotationCounts,
    FactorEncoder,
    FactorSettings,
    Lexicon,
    WordLike,
    check_strategy,
    count_annotations,
    count_factor_values,
    needs_annotation,
    words_of_conllu,
    words_of_tagged,
    words_of_text,
)
from rescorer.lm_models.fnlm.model import (
    FNLM,
    EncodedTokens,
    FactoredLM,
    FNLMConfig,
    flattened,
    flattening_weights,
    pattern_keys,
    unk_share,
)
from rescorer.lm_models.training import (
    DevResult,
    FitOptions,
    SectionedConfig,
    Step,
    TrainRun,
    config_training_main,
    fit,
)
from rescorer.lm_models.vocab import BOS, EOS, SPECIAL_TOKENS, UNK, Vocabulary
from rescorer.lm_models.word_classes import (
    Bigrams,
    bigram_counts,
    brown_classes,
    frequency_classes,
    merged_bigrams,
)

logger = logging.getLogger(__name__)

CORPORA = ("conllu", "plain", "brown")
UNITS = ("token", "word")
SHARD_CORPORA = {"plain": "text", "conllu": "conllu"}  # corpus reader -> kind of its shards


# -- configuration ----------------------------------------------------------------------------


@dataclass(frozen=True)
class FNLMDataConfig:
    """What to train on and which factors to read."""

    # "conllu", "plain" or "brown".
    corpus: str
    # Training file (conllu, plain) or the Brown folder; "" with train_shards.
    train: str = ""
    # Dev file for early stopping (conllu, plain); None for brown (document split instead).
    dev: str | None = None
    # CoNLL-U units: "token" (surface tokens, a multiword token is one word) or "word".
    unit: str = "token"
    # Leave out punctuation (UPOS PUNCT when annotated, else tokens without letters or digits).
    drop_punct: bool = False
    # Factor types (rescorer.lm_models.fnlm.factors); ["word"] is the plain word NLM.
    factors: tuple[str, ...] = ("word",)
    # Lower-case words and lemmas.
    lower: bool = True
    # Casing and stemming rules ("tr", "en"; "" generic).
    language: str = ""
    # Output words: training words seen this often; rarer ones train <unk>
    # (rescorer.lm_models.fnlm.model).
    output_min_count: int = 2
    # Input factor values: seen this often in training; rarer ones are unknown in training as
    # well and get the model's unknown-factor vector (1: every training value known, as in the
    # paper; 2: the network also learns what to make of unknown factors).
    input_min_count: int = 1
    # Brown only: train/dev/test fractions of the documents and the split's seed.
    split: tuple[float, float, float] = (0.8, 0.1, 0.1)
    split_seed: int = 0
    # The training corpus as a shard folder (`rescorer corpus shard`: text shards for "plain",
    # CoNLL-U shards for "conllu"), read one shard at a time, each process its own shards;
    # needs `dev` and no `train`. None: the training file is read into memory.
    train_shards: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "factors", tuple(self.factors))
        object.__setattr__(self, "split", tuple(self.split))
        if self.corpus not in CORPORA:
            raise ValueError(f"corpus must be one of {CORPORA}, got {self.corpus!r}")
        if self.unit not in UNITS:
            raise ValueError(f"unit must be one of {UNITS}, got {self.unit!r}")
        if self.train_shards is None or self.dev is not None:  # else: the dev check below
            check_training_data(
                "train", self.train, self.train_shards, self.dev, self.corpus, SHARD_CORPORA,
                "sentences",
            )  # fmt: skip
        if self.corpus != "brown" and self.dev is None:
            raise ValueError(f"corpus {self.corpus!r} needs a dev file for early stopping")
        if self.output_min_count < 1 or self.input_min_count < 1:
            raise ValueError(
                "output_min_count and input_min_count must be >= 1, got "
                f"{self.output_min_count}, {self.input_min_count}"
            )
        self.settings()  # validates the factors

    def settings(self) -> FactorSettings:
        return FactorSettings(self.factors, self.lower, self.language)

    def with_train_shards(self, shards: str | Path) -> FNLMDataConfig:
        """This data section training on the shard folder ``shards`` instead of ``train``."""
        return replace(self, train="", train_shards=str(shards))


@dataclass(frozen=True)
class FNLMModelOptions:
    """Architecture (the factor vocabularies and output words come from the data)."""

    # n of the n-gram (the paper uses 3 to 7).
    order: int = 4
    # Embedding width per factor, hidden units (the paper: d 32-64, 45-64 hidden units).
    embed_dim: int = 32
    hidden_dim: int = 64
    # "classes" (class-factored output) or "full" (one softmax over all output words).
    output: str = "classes"
    # Class assignment: "frequency" (binning) or "brown" (exchange algorithm).
    classes: str = "frequency"
    # Number of classes (at most; frequency binning can give fewer).
    num_classes: int = 64
    # Exchange-algorithm passes for "brown".
    brown_iterations: int = 5
    # Dropout on the input and hidden layers in training (not in the paper; 0 = off).
    dropout: float = 0.0
    # Default unknown-factor strategy: "null", "all", "tail" or "least".
    unk_strategy: str = "least"

    def __post_init__(self) -> None:
        if self.output not in ("classes", "full"):
            raise ValueError(f"output must be 'classes' or 'full', got {self.output!r}")
        if self.classes not in ("frequency", "brown"):
            raise ValueError(f"classes must be 'frequency' or 'brown', got {self.classes!r}")
        if self.num_classes < 1:
            raise ValueError(f"num_classes must be >= 1, got {self.num_classes}")
        check_strategy(self.unk_strategy)


@dataclass(frozen=True)
class FNLMTrainOptions:
    """Optimisation."""

    # Most epochs; training stops earlier after `patience` epochs without a better dev ppl.
    epochs: int = 20
    patience: int = 3
    # Samples (tokens) per step, Adam learning rate, its factor after an epoch without gain.
    batch_size: int = 128
    lr: float = 2e-3
    lr_decay: float = 0.5
    # L2 weight of the dense layers' squared weights (the paper's lambda).
    l2: float = 1e-5
    # Count flattening alpha of eq. 4 (0: plain counts).
    flatten_alpha: float = 0.05
    seed: int = 0
    # "cpu", "cuda", "auto" ...
    device: str = "cpu"
    # Stop each epoch after this many steps (None: all); for smoke tests.
    max_steps_per_epoch: int | None = None
    # Dev perplexity that selects the epoch: "no_unk" (tokens whose word was seen in training)
    # or "with_unk" (every token, unknown words as <unk>); see rescorer.lm_models.fnlm.evaluate.
    select_by: str = "no_unk"

    def __post_init__(self) -> None:
        if self.epochs < 1 or self.batch_size < 1 or self.patience < 1:
            raise ValueError("epochs, batch_size and patience must be >= 1")
        if self.lr <= 0 or not 0 < self.lr_decay <= 1 or self.l2 < 0:
            raise ValueError(
                f"need lr > 0, 0 < lr_decay <= 1, l2 >= 0; got {self.lr}, {self.lr_decay}, "
                f"{self.l2}"
            )
        if not 0 <= self.flatten_alpha <= 1:
            raise ValueError(f"flatten_alpha must be in [0, 1], got {self.flatten_alpha}")
        if self.select_by not in ("no_unk", "with_unk"):
            raise ValueError(f"select_by must be 'no_unk' or 'with_unk', got {self.select_by!r}")


@dataclass(frozen=True)
class FNLMTrainConfig(SectionedConfig):
    """A whole training run."""

    data: FNLMDataConfig
    model: FNLMModelOptions = field(default_factory=FNLMModelOptions)
    train: FNLMTrainOptions = field(default_factory=FNLMTrainOptions)


# -- data -------------------------------------------------------------------------------------


def is_punct(word: WordLike) -> bool:
    """UPOS PUNCT (every part of a multiword token) when annotated, else no letter or digit."""
    if word.upos is not None and word.upos != "_":
        return all(p == "PUNCT" for p in word.upos.split("+"))
    return not any(c.isalnum() for c in word.form)


def read_sentences(
    path: str | Path, corpus: str, unit: str = "token", drop_punct: bool = False
) -> list[list[WordLike]]:
    """Sentences of a CoNLL-U or plain-text file as words with annotation (empty ones dropped)."""
    if corpus == "conllu":
        sentences = [words_of_conllu(s, unit) for s in read_conllu(path)]
    elif corpus == "plain":
        sentences = [words_of_text(line.split()) for _, line in read_lines(path)]
    else:
        raise ValueError(f"corpus must be 'conllu' or 'plain' for a file, got {corpus!r}")
    if drop_punct:
        sentences = [[w for w in s if not is_punct(w)] for s in sentences]
    return [s for s in sentences if s]


def _resolve(path: str, data_dir: Path) -> Path:
    return Path(path) if Path(path).is_absolute() else data_dir / path


def read_train_dev(
    dc: FNLMDataConfig, data_dir: Path
) -> tuple[list[list[WordLike]], list[list[WordLike]]]:
    """Training and dev sentences of a data config."""
    if dc.corpus == "brown":
        docs = read_brown_tagged(_resolve(dc.train, data_dir), lower=False, drop_punct=False)
        train_docs, dev_docs, _ = split_documents(docs, dc.split, None, dc.split_seed)
        train, dev = (
            [words_of_tagged(s) for d in part for s in d.tagged_sentences()]
            for part in (train_docs, dev_docs)
        )
        if dc.drop_punct:
            train = [[w for w in s if not is_punct(w)] for s in train]
            dev = [[w for w in s if not is_punct(w)] for s in dev]
        return [s for s in train if s], [s for s in dev if s]
    return (
        read_sentences(_resolve(dc.train, data_dir), dc.corpus, dc.unit, dc.drop_punct),
        _read_dev(dc, data_dir),
    )


def _read_dev(dc: FNLMDataConfig, data_dir: Path) -> list[list[WordLike]]:
    assert dc.dev is not None
    return read_sentences(_resolve(dc.dev, data_dir), dc.corpus, dc.unit, dc.drop_punct)


@dataclass
class FNLMCounts:
    """What the output vocabulary, the factor values and the lexicon are built from, counted
    sentence by sentence (so that a corpus streamed shard by shard is counted without being
    held, and the counts of the processes' shards add up: :meth:`merged`)."""

    # Training tokens (FactorSettings.token of each word), and the training sentences.
    tokens: Counter[str] = field(default_factory=Counter)
    sentences: int = 0
    # Per factor type, in the config's order, the counts of its values.
    factors: list[Counter[str]] = field(default_factory=list)
    # Per word, the counts of its annotations (the lexicon's); None when no factor needs one.
    annotations: AnnotationCounts | None = None

    @classmethod
    def empty(cls, settings: FactorSettings) -> FNLMCounts:
        needs_lexicon = any(needs_annotation(f) for f in settings.factors)
        return cls(
            factors=[Counter() for _ in settings.factors],
            annotations={} if needs_lexicon else None,
        )

    @classmethod
    def of(cls, settings: FactorSettings, sentences: Sequence[Sequence[WordLike]]) -> FNLMCounts:
        counts = cls.empty(settings)
        counts.add(settings, sentences)
        return counts

    def add(self, settings: FactorSettings, sentences: Sequence[Sequence[WordLike]]) -> None:
        for words in sentences:
            self.tokens.update(settings.token(w) for w in words)
        self.sentences += count_factor_values(settings, sentences, self.factors)
        if self.annotations is not None:
            count_annotations(settings.language, sentences, self.annotations)

    @classmethod
    def merged(cls, parts: Sequence[FNLMCounts]) -> FNLMCounts:
        """The counts of several parts (the processes' shards) together."""
        out = cls(
            factors=[Counter() for _ in parts[0].factors],
            annotations=None if parts[0].annotations is None else {},
        )
        for part in parts:
            out.tokens.update(part.tokens)
            out.sentences += part.sentences
            for mine, theirs in zip(out.factors, part.factors, strict=True):
                mine.update(theirs)
            if out.annotations is not None and part.annotations is not None:
                for key, counts in part.annotations.items():
                    out.annotations.setdefault(key, Counter()).update(counts)
        return out


def sentence_ids(
    settings: FactorSettings, sentences: Iterable[Sequence[WordLike]], vocab: Vocabulary
) -> Iterator[list[int]]:
    """The sentences as output unit ids between ``<s>`` and ``</s>`` (for Brown classes)."""
    for words in sentences:
        yield [vocab.bos_id, *vocab.encode([settings.token(w) for w in words]), vocab.eos_id]


def build_lm(
    cfg: FNLMTrainConfig, train: Sequence[Sequence[WordLike]]
) -> tuple[FactoredLM, dict[str, Any]]:
    """A freshly initialised FactoredLM for the training sentences, and a data summary."""
    settings = cfg.data.settings()
    return lm_of_counts(
        cfg,
        FNLMCounts.of(settings, train),
        lambda vocab: bigram_counts(sentence_ids(settings, train, vocab), len(vocab)),
    )


def lm_of_counts(
    cfg: FNLMTrainConfig, data: FNLMCounts, bigrams_of: Callable[[Vocabulary], Bigrams]
) -> tuple[FactoredLM, dict[str, Any]]:
    """:func:`build_lm` from the training data's counts; ``bigrams_of(vocab)`` gives the
    training sentences' bigram counts over the output units (``<s>`` and ``</s>`` around each
    sentence), asked for only when the classes are Brown classes."""
    settings = cfg.data.settings()
    counts = data.tokens
    min_count = cfg.data.output_min_count
    frequent = sorted((w for w, c in counts.items() if c >= min_count and w not in SPECIAL_TOKENS),
                      key=lambda w: (-counts[w], w))  # fmt: skip
    rare_tokens = sum(c for w, c in counts.items() if c < min_count)
    unit_counts = [rare_tokens, 0, data.sentences, *(counts[w] for w in frequent)]
    vocab = Vocabulary([UNK, BOS, EOS, *frequent], unit_counts)
    m = cfg.model
    word_classes: list[int] = []
    if m.output == "classes":
        if m.classes == "frequency":
            word_classes = frequency_classes(unit_counts, m.num_classes)
        else:
            word_classes = brown_classes(
                (),
                unit_counts,
                m.num_classes,
                m.brown_iterations,
                fixed=[vocab.bos_id],
                bigrams=bigrams_of(vocab),
            )
    encoder = FactorEncoder.from_counts(
        settings, data.factors, data.sentences, cfg.data.input_min_count
    )
    config = FNLMConfig(
        vocab_size=len(vocab),
        factors=settings.factors,
        factor_sizes=encoder.sizes,
        order=m.order,
        embed_dim=m.embed_dim,
        hidden_dim=m.hidden_dim,
        word_classes=tuple(word_classes),
        lower=settings.lower,
        language=settings.language,
        dropout=m.dropout,
        unk_strategy=m.unk_strategy,
        unk_share=unk_share(counts, min_count),
        rare_types=sum(1 for c in counts.values() if c < min_count),
    )
    torch.manual_seed(cfg.train.seed)
    # Plain text (N-best hypotheses) has no annotation: the lexicon gives it the training one.
    lexicon = None
    if data.annotations is not None:
        lexicon = Lexicon.from_counts(settings.language, data.annotations)
    lm = FactoredLM(FNLM(config), vocab, encoder, counts, lexicon)
    summary = {
        "train_sentences": data.sentences,
        "train_words": sum(counts.values()),
        "word_types": len(counts),
        "output_units": len(vocab),
        "classes": config.num_classes,
        "factor_values": dict(zip(settings.factors, encoder.sizes, strict=True)),
        "unk_share": config.unk_share,
        "rare_types": config.rare_types,
        "parameters": lm.model.num_parameters(),
        "lexicon_words": 0 if lexicon is None else len(lexicon),
    }
    return lm, summary


# -- training ---------------------------------------------------------------------------------


def _l2_penalty(model: FNLM) -> torch.Tensor:
    dense = [model.hidden.weight, model.out.weight]
    if model.class_layer is not None:
        dense.append(model.class_layer.weight)
    return sum((w * w).sum() for w in dense)  # type: ignore[return-value]


@dataclass(frozen=True)
class TokenRows:
    """Training rows of the network, one per token (its words and ``</s>``)."""

    # (N, order-1, K) history factor ids, most recent first.
    history: torch.Tensor
    # (N,) target unit ids.
    targets: torch.Tensor
    # (N,) eq. 4 weights (float32), from the pattern counts of the whole training corpus.
    weights: torch.Tensor

    def __len__(self) -> int:
        return len(self.targets)


def patterns_of(enc: EncodedTokens) -> np.ndarray:
    """(N, D) patterns that count flattening counts: each row's history factor ids and target."""
    n = len(enc.targets)
    return np.concatenate([enc.history.reshape(n, -1), enc.targets[:, None]], axis=1)


@dataclass(frozen=True)
class TrainingData:
    """What :func:`train_fnlm` trains on, in memory or streamed from shards."""

    # The model (freshly initialised) with its vocabularies, and the data summary.
    lm: FactoredLM
    summary: dict[str, Any]
    dev: list[list[WordLike]]
    # An epoch's training rows of this process, in parts (one part in memory, else a shard).
    parts: Callable[[int], Iterable[TokenRows]]
    # The shards streamed (None: the rows are in memory).
    stream: ShardStream[list[list[WordLike]]] | None = None


def _data_in_memory(cfg: FNLMTrainConfig, data_dir: Path, world: World) -> TrainingData:
    train_sents, dev_sents = read_train_dev(cfg.data, data_dir)
    if not train_sents or not dev_sents:
        raise ValueError(
            f"need training and dev sentences, got {len(train_sents)} and {len(dev_sents)}"
        )
    lm, summary = build_lm(cfg, train_sents)  # from every training sentence, in every process
    enc = lm.encode(train_sents)
    del train_sents
    weights = flattening_weights(patterns_of(enc), cfg.train.flatten_alpha)  # the whole corpus
    # This process's share of the rows (every N-th), copied so that the rest can go.
    mine = slice(world.rank, None, world.size)
    rows = TokenRows(
        torch.from_numpy(np.ascontiguousarray(enc.history[mine])),
        torch.from_numpy(np.ascontiguousarray(enc.targets[mine])),
        torch.from_numpy(np.ascontiguousarray(weights[mine])).float(),
    )
    return TrainingData(lm, summary, dev_sents, lambda epoch: [rows])


def _data_streamed(cfg: FNLMTrainConfig, data_dir: Path, world: World) -> TrainingData:
    """The vocabularies from one pass over this process's shards (the counts merged over the
    processes), Brown classes' bigrams from a second, the eq. 4 weights from a third; each epoch
    then encodes one shard at a time."""
    dc = cfg.data
    assert dc.train_shards is not None
    settings = dc.settings()
    stream, counts = counted_shards(
        _resolve(dc.train_shards, data_dir),
        SHARD_CORPORA[dc.corpus],
        lambda path: read_sentences(path, dc.corpus, dc.unit, dc.drop_punct),
        dc.corpus,
        FNLMCounts.empty(settings),
        lambda c, part: c.add(settings, part),
        world,
    )
    if counts.sentences == 0:
        raise InputError("no training sentences in the shards", stream.index.directory)
    dev = _read_dev(dc, data_dir)
    if not dev:
        raise ValueError(f"{dc.dev}: no dev sentences")

    def bigrams_of(vocab: Vocabulary) -> Bigrams:
        v = len(vocab)
        mine = bigram_counts((), v)
        for _, part in stream.parts():
            mine = merged_bigrams([mine, bigram_counts(sentence_ids(settings, part, vocab), v)], v)
        return merged_bigrams(all_gather_objects(mine, world), v)

    lm, summary = lm_of_counts(cfg, counts, bigrams_of)
    weights = shard_weights(lm, stream, cfg.train.flatten_alpha, world)

    def parts(epoch: int) -> Iterator[TokenRows]:
        for shard, sentences in stream.parts(cfg.train.seed * 1000 + epoch):
            enc = lm.encode(sentences)
            del sentences
            yield TokenRows(torch.from_numpy(enc.history), torch.from_numpy(enc.targets),
                            weights[shard])  # fmt: skip
            del enc

    return TrainingData(lm, summary, dev, parts, stream)


def shard_weights(
    lm: FactoredLM,
    stream: ShardStream[list[list[WordLike]]],
    alpha: float,
    world: World,
) -> dict[int, torch.Tensor]:
    """Eq. 4's weight of every training row of this process's shards (float32, in each shard's
    row order; what :func:`flattening_weights` gives them over the whole corpus): each shard's
    patterns counted, the counts summed over every process's shards (by owner process,
    :func:`rescorer.lm_models.distributed.total_counts`), then only the weights kept."""
    keys, counts, inverses = [], [], []
    for shard, sentences in stream.parts():
        distinct, inverse, n = np.unique(
            pattern_keys(patterns_of(lm.encode(sentences))),
            return_inverse=True,
            return_counts=True,
        )
        keys.append(distinct)
        counts.append(n)
        inverses.append((shard, inverse.reshape(-1)))
        del sentences
    totals, smallest = total_counts(np.concatenate(keys), np.concatenate(counts), world)
    del keys
    out: dict[int, torch.Tensor] = {}
    start = 0
    for (shard, inverse), n in zip(inverses, counts, strict=True):
        mine = totals[start : start + len(n)]
        start += len(n)
        out[shard] = torch.from_numpy(flattened(mine[inverse], smallest, alpha)).float()
    return out


def train_fnlm(
    cfg: FNLMTrainConfig, data_dir: Path, out_dir: Path, progress: bool = True
) -> TrainRun:
    """Train per ``cfg`` and write the best epoch's checkpoint to ``out_dir``.

    With ``data.train_shards`` every process reads only its own shards: the counts of a pass
    over them are merged over the processes, so that every process builds what one process
    builds from the whole corpus (vocabularies, classes, lexicon, eq. 4 weights); each epoch it
    encodes one shard at a time, in an order drawn anew, and draws its batches within it."""
    t_start = time.perf_counter()
    opts = cfg.train
    device = process_device(opts.device)
    # under torchrun: fit trains data-parallel (rescorer.lm_models.distributed)
    world = init_world(device)
    if cfg.data.train_shards is None:
        data = _data_in_memory(cfg, data_dir, world)
    else:
        data = _data_streamed(cfg, data_dir, world)
    lm, summary = data.lm, data.summary
    model = lm.model.to(device)
    seed_process(opts.seed, world)  # dropout: each process its own draws
    logger.info("FNLM data and model: %s", summary)
    dev = lm.encode(data.dev)

    optimizer = torch.optim.Adam(model.parameters(), lr=opts.lr)
    gen = torch.Generator().manual_seed(rank_seed(opts.seed, world))

    def epoch_batches(epoch: int) -> Iterable[tuple[TokenRows, torch.Tensor]]:
        batches = row_batches(data.parts(epoch), opts.batch_size, gen)
        return batches if data.stream is not None else list(batches)

    def step(batch: tuple[TokenRows, torch.Tensor]) -> Step:
        rows, idx = batch
        hist, tgt = rows.history[idx].to(device), rows.targets[idx].to(device)
        w = rows.weights[idx].to(device)
        nll = -(w * model(hist, tgt)).mean()
        loss = nll + opts.l2 * _l2_penalty(model) if opts.l2 > 0 else nll
        return Step(loss, float(nll.detach()) * len(idx), len(idx))

    block = lm.score_rows()

    def evaluate() -> DevResult:
        # Each process scores its blocks of the dev tokens; the sums are added over them.
        sums = np.zeros(4)  # ln P of the known tokens, their number, of every token, theirs
        for part in share_slices(len(dev.targets), block, world):
            lp = lm.score_encoded(dev.rows(part))
            known = ~dev.oov[part]
            sums += (lp[known].sum(), known.sum(), lp.sum(), len(lp))
        known_lp, n_known, all_lp, n_all = all_sum(sums, world)
        no_unk = math.exp(-known_lp / n_known) if n_known else math.nan
        with_unk = math.exp(-all_lp / max(n_all, 1))
        selected = no_unk if opts.select_by == "no_unk" else with_unk
        return DevResult(selected, {"dev_ppl_no_unk": no_unk, "dev_ppl_with_unk": with_unk})

    fit_options = FitOptions.early_stopping(opts, progress, "FNLM")
    fitted = fit(model, optimizer, step, epoch_batches, evaluate, fit_options)
    seconds = time.perf_counter() - t_start
    run = TrainRun.of(fitted, out_dir, device, summary["parameters"], seconds)
    if world.is_main:
        lm.save(out_dir, run.meta(data=summary, config=cfg.to_json(), processes=world.size))
    return run


def main(argv: Sequence[str] | None = None) -> None:
    config_training_main(
        argv, "python -m rescorer.lm_models.fnlm.train", __doc__, FNLMTrainConfig.load, train_fnlm
    )


if __name__ == "__main__":
    main()
