"""Training context-aware LSTM language models from a JSON config.

    python -m lm_models.lstm.train CONFIG.json [--data-dir DIR] [--out DIR] [--no-resume]
    torchrun --nproc_per_node 2 -m lm_models.lstm.train CONFIG.json      # data-parallel (DDP)

Documents are read and split by document (stratified by a field), the vocabulary and the
context variables are built from the training split, and the model is trained with Adam on the
full softmax or, for large vocabularies, a sampled softmax with a unigram proposal (training only;
dev perplexity always uses the full softmax). Each epoch ends with the dev perplexity; the best
checkpoint is kept in ``OUT/best`` and the latest, with optimizer and trainer state, in
``OUT/last``, from which a re-run resumes. CUDA is used when available (bf16 autocast), else the
CPU. Under ``torchrun`` every process trains on its share of the batches and DDP averages the
gradients (NCCL on GPUs, gloo on CPUs).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from safetensors.torch import load_file, save_file
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from lm_models.asr_tokens import (
    ASR_TOKENS_FILE,
    AsrTokens,
    checkpoint_asr_tokens,
    load_token_set,
)
from lm_models.batching import Batch, Example, bucket_batches, collate
from lm_models.checkpoint import (
    TOKENIZER_FILE,
    load_checkpoint,
    save_checkpoint,
    sync_files,
    write_checkpoint,
)
from lm_models.corpora import (
    Document,
    read_agnews,
    read_brown,
    read_dbpedia,
    read_jsonl,
    read_plain,
    split_documents,
)
from lm_models.lstm.context import ContextVariable
from lm_models.lstm.model import ContextLSTM, LSTMConfig
from lm_models.sampled_softmax import UnigramSampler, sampled_softmax_loss
from lm_models.tokenizer import SubwordTokenizer, TokenizerOptions
from lm_models.training import (
    BestKeeper,
    DevResult,
    EpochRecord,
    FitOptions,
    SectionedConfig,
    Step,
    fit,
    options_from_json,
)
from lm_models.vocab import EOS_ID, UNK_ID, Vocabulary, build_vocabulary
from lm_models.word_classes import frequency_classes, shortlist_classes
from rescorer.core.device import resolve_device
from rescorer.core.output import atomic_dir, clean_stale

logger = logging.getLogger(__name__)

# -- configuration ----------------------------------------------------------------------------


@dataclass(frozen=True)
class DataConfig:
    """Which documents to train on and how to split them."""

    # Corpus reader, a key of CORPUS_READERS ("brown", "agnews", "dbpedia", "plain", "jsonl").
    corpus: str
    # Path of the corpus, relative to the data folder unless absolute.
    path: str
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
    # {"kind": "unigram", "vocab_size": 8000}, see lm_models.tokenizer.TokenizerOptions) whose
    # pieces are the model's units (vocab_size and min_count are then unused); None: words.
    tokenizer: TokenizerOptions | None = None
    # An ASR model's token set as the units (lm_models.asr_tokens), so that a decoder export
    # speaks the ASR's ids: its tokens.txt ("TOKEN ID" lines) and/or its sentencepiece model
    # (which then cuts the words; without it the text's items are the tokens). Paths relative
    # to the data folder unless absolute; vocab_size, min_count and tokenizer are then unused.
    tokens: str | None = None
    bpe_model: str | None = None

    def __post_init__(self) -> None:
        if self.corpus not in CORPUS_READERS:
            raise ValueError(f"corpus must be one of {sorted(CORPUS_READERS)}, got {self.corpus!r}")
        if isinstance(self.tokenizer, Mapping):
            tok = options_from_json(TokenizerOptions, self.tokenizer, "data.tokenizer")
            object.__setattr__(self, "tokenizer", tok)
        if self.asr_units and self.tokenizer is not None:
            raise ValueError(
                "data.tokens / data.bpe_model take the ASR model's token set and data.tokenizer "
                "learns a new one: give one or the other, got both"
            )

    @property
    def asr_units(self) -> bool:
        """True when the units are an ASR model's tokens (data.tokens or data.bpe_model)."""
        return self.tokens is not None or self.bpe_model is not None
        object.__setattr__(self, "context_fields", tuple(self.context_fields))
        object.__setattr__(self, "split", tuple(self.split))


@dataclass(frozen=True)
class ModelOptions:
    """Architecture; the vocabulary size and context value sets come from the data."""

    # "unadapted", "softmax_bias", "concat" or "factor" (Jaech & Ostendorf 2018, section 2).
    mode: str = "factor"
    # Word embedding size e, LSTM size d, layers.
    embed_dim: int = 128
    hidden_dim: int = 256
    num_layers: int = 1
    # Context embedding size k, FactorCell rank r, embedding size of each categorical variable.
    context_dim: int = 16
    rank: int = 8
    context_embed_dim: int = 16
    # Direct per-value softmax biases for the context variables (section 2.3, low cardinality).
    one_hot_bias: bool = True
    layer_norm: bool = False
    # Recurrent dropout on the candidate (Semeniuta et al. 2016).
    dropout: float = 0.1
    # Dropout on the input embeddings and the top layer's outputs (not in the paper; for small
    # corpora trained for many epochs).
    io_dropout: float = 0.0
    # Output layer: 0 for the full softmax, else a class-factored softmax (lm_models.output)
    # with about this many classes: frequency-binned (sqrt counts) when shortlist is 0, else
    # the shortlist's words each a class and the rest in num_classes clusters (the adaptive
    # softmax layout; much cheaper in training at large V, see bench/results/output.md).
    num_classes: int = 0
    shortlist: int = 0
    # Nonlinearity of the context embedding: "relu" (the paper, section 2.1) or "none".
    context_activation: str = "relu"

    def __post_init__(self) -> None:
        for name in ("num_classes", "shortlist"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"{name} must be an integer >= 0, got {value!r}")
        if self.shortlist and not self.num_classes:
            raise ValueError("shortlist needs num_classes >= 1 (the clusters of the other words)")


@dataclass(frozen=True)
class TrainOptions:
    """Optimisation settings."""

    epochs: int = 10
    # Padded tokens per batch (sentences are bucketed by length).
    batch_tokens: int = 4096
    lr: float = 1e-3
    # Stop after this many epochs without a better dev perplexity.
    patience: int = 2
    # Multiply the learning rate by this after each epoch without a better dev perplexity
    # (1.0: never; 0.5 halves it, the usual schedule for LSTM LMs trained to convergence).
    lr_decay: float = 1.0
    seed: int = 0
    # "auto" (CUDA when available), "cpu", "cuda", "cuda:1", ...
    device: str = "auto"
    # bf16 autocast on CUDA.
    amp: bool = True
    # Negative samples per batch for the sampled softmax; 0: full softmax.
    sampled_softmax: int = 0
    grad_clip: float = 5.0
    # Learning rate of the FactorCell's Z_L and Z_R as a fraction of lr. A = (c x1 Z_L)(Z_R x3 c)
    # is a product of four trained factors: at the full rate ||A||/||W|| grew to 16-31 on AG
    # News (adaptation swamping W); at 0.1 it stayed at 0.5-1.5 and FactorCell beat ConcatCell.
    adapt_lr_scale: float = 0.1
    # Stop an epoch after this many optimizer steps (None: the whole epoch); for smoke tests.
    max_steps_per_epoch: int | None = None

    def __post_init__(self) -> None:
        if not 0.0 < self.lr_decay <= 1.0:
            raise ValueError(f"lr_decay must be in (0, 1], got {self.lr_decay!r}")
        if not 0.0 < self.adapt_lr_scale <= 1.0:
            raise ValueError(f"adapt_lr_scale must be in (0, 1], got {self.adapt_lr_scale!r}")


@dataclass(frozen=True)
class TrainConfig(SectionedConfig):
    """A whole training run."""

    data: DataConfig
    model: ModelOptions = field(default_factory=ModelOptions)
    train: TrainOptions = field(default_factory=TrainOptions)


CORPUS_READERS: dict[str, Callable[[Path, DataConfig], list[Document]]] = {
    "brown": lambda p, c: read_brown(p),
    "agnews": lambda p, c: read_agnews(p, max_len=c.max_len),
    "dbpedia": lambda p, c: read_dbpedia(p, max_len=c.max_len),
    "plain": lambda p, c: read_plain(p),
    "jsonl": lambda p, c: read_jsonl(p, max_len=c.max_len),
}


# -- data -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PreparedData:
    """Everything derived from the corpus before training."""

    vocab: Vocabulary
    context_vars: tuple[ContextVariable, ...]
    # The subword tokenizer when the units are pieces (None: words).
    tokenizer: SubwordTokenizer | None
    train: tuple[Example, ...]
    dev: tuple[Example, ...]
    # Document ids of each split (written beside the checkpoints for later evaluation).
    split_ids: Mapping[str, tuple[str, ...]]
    # The ASR token set the units are (data.tokens / data.bpe_model), else None.
    asr_tokens: AsrTokens | None = None


def context_record(doc: Document, variables: Sequence[ContextVariable]) -> dict[str, Any] | None:
    """The document's context; a value unseen in training is missing (expected embedding)."""
    if not variables:
        return None
    return {
        v.name: (doc.fields.get(v.name) if doc.fields.get(v.name) in v.values else None)
        for v in variables
    }


def examples_of(
    docs: Sequence[Document],
    vocab: Vocabulary,
    variables: Sequence[ContextVariable],
    tokenizer: SubwordTokenizer | None = None,
) -> list[Example]:
    out = []
    for doc in docs:
        record = context_record(doc, variables)
        for sentence in doc.sentences:
            units = sentence if tokenizer is None else tokenizer.encode(sentence)
            inputs, targets = vocab.encode_sentence(units)
            out.append(Example(tuple(inputs), tuple(targets), record))
    return out


def prepare_data(
    cfg: TrainConfig, data_dir: Path, tokenizer: SubwordTokenizer | None = None
) -> PreparedData:
    """Read, cut and split the corpus; build the vocabulary (and, for subword units, learn the
    tokenizer from the training split unless ``tokenizer`` is given, e.g. a resumed run's)."""
    dc = cfg.data
    path = Path(dc.path) if Path(dc.path).is_absolute() else data_dir / dc.path
    docs = CORPUS_READERS[dc.corpus](path, dc)
    if not docs:
        raise ValueError(f"{path}: no documents")
    if dc.max_len is not None:  # every reader: sentences longer than max_len are cut
        docs = [
            d
            if all(len(x) <= dc.max_len for x in d.sentences)
            else replace(d, sentences=tuple(tuple(x[: dc.max_len]) for x in d.sentences))
            for d in docs
        ]
    train, dev, test = split_documents(docs, dc.split, dc.stratify_by, dc.split_seed)
    if not train or not dev:
        raise ValueError(f"split {dc.split} of {len(docs)} documents left train or dev empty")
    asr = None
    if dc.asr_units:
        sentences = [s for d in train for s in d.sentences]
        asr, tokenizer, vocab = asr_vocabulary(dc, data_dir, sentences)
        units = f"ASR tokens ({asr.describe()})"
    elif dc.tokenizer is None:
        tokenizer = None
        vocab = build_vocabulary(
            (s for d in train for s in d.sentences), dc.vocab_size, dc.min_count
        )
        units = "words"
    else:
        if tokenizer is None:
            tokenizer = SubwordTokenizer.train(
                (s for d in train for s in d.sentences), dc.tokenizer
            )
        vocab = tokenizer.vocabulary(s for d in train for s in d.sentences)
        units = f"{dc.tokenizer.kind} pieces"
    variables = []
    for name in dc.context_fields:
        counts: dict[str, int] = {}
        for doc in train:
            value = doc.fields.get(name)
            if value is not None:
                counts[value] = counts.get(value, 0) + len(doc.sentences)
        if not counts:
            raise ValueError(f"context field {name!r} has no value in the training documents")
        values = sorted(counts)
        variables.append(
            ContextVariable.categorical(
                name,
                values,
                [counts[v] for v in values],
                embed_dim=cfg.model.context_embed_dim,
                one_hot_bias=cfg.model.one_hot_bias,
            )
        )
    logger.info(
        "data: %d/%d/%d documents, vocabulary %d %s, context %s",
        len(train),
        len(dev),
        len(test),
        len(vocab),
        units,
        {v.name: len(v.values) for v in variables},
    )
    return PreparedData(
        vocab=vocab,
        context_vars=tuple(variables),
        tokenizer=tokenizer,
        train=tuple(examples_of(train, vocab, variables, tokenizer)),
        dev=tuple(examples_of(dev, vocab, variables, tokenizer)),
        split_ids={
            "train": tuple(d.doc_id for d in train),
            "dev": tuple(d.doc_id for d in dev),
            "test": tuple(d.doc_id for d in test),
        },
        asr_tokens=asr,
    )


def _data_path(name: str, data_dir: Path) -> Path:
    return Path(name) if Path(name).is_absolute() else data_dir / name


def asr_vocabulary(
    dc: DataConfig, data_dir: Path, sentences: Sequence[Sequence[str]]
) -> tuple[AsrTokens, SubwordTokenizer | None, Vocabulary]:
    """The units of an LM over an ASR model's tokens (data.tokens / data.bpe_model): the token
    set, the tokenizer that cuts words into them (None: the text's items are the tokens) and the
    vocabulary ``[<unk>, <s>, </s>] + tokens`` with its counts in ``sentences``."""
    token_set = load_token_set(
        None if dc.tokens is None else _data_path(dc.tokens, data_dir),
        None if dc.bpe_model is None else _data_path(dc.bpe_model, data_dir),
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


def model_config(cfg: TrainConfig, data: PreparedData) -> LSTMConfig:
    m = cfg.model
    adaptive = m.mode != "unadapted"
    return LSTMConfig(
        vocab_size=len(data.vocab),
        embed_dim=m.embed_dim,
        hidden_dim=m.hidden_dim,
        num_layers=m.num_layers,
        mode=m.mode,
        context_dim=m.context_dim if adaptive else 0,
        rank=m.rank if m.mode == "factor" else 0,
        context_vars=data.context_vars if adaptive else (),
        layer_norm=m.layer_norm,
        dropout=m.dropout,
        io_dropout=m.io_dropout,
        word_classes=tuple(word_classes_of(data.vocab, m.num_classes, m.shortlist)),
        context_activation=m.context_activation,
    )


def parameter_groups(model: ContextLSTM, opts: TrainOptions) -> list[dict[str, Any]]:
    """Adam's parameter groups: everything at ``lr``, the FactorCell's Z_L/Z_R at
    ``lr * adapt_lr_scale`` (one group when there are none, as before)."""
    adapt = model.adaptation_parameters()
    if not adapt:
        return [{"params": list(model.parameters())}]
    ids = {id(p) for p in adapt}
    rest = [p for p in model.parameters() if id(p) not in ids]
    return [{"params": rest}, {"params": adapt, "lr": opts.lr * opts.adapt_lr_scale}]


def distinct_records(
    examples: Sequence[Example], limit: int = 256
) -> list[Mapping[str, Any] | None]:
    """Up to ``limit`` distinct context records of ``examples`` (first seen first)."""
    seen: dict[str, Mapping[str, Any] | None] = {}
    for example in examples:
        key = json.dumps(example.record, sort_keys=True, default=str)
        if key not in seen:
            seen[key] = example.record
            if len(seen) >= limit:
                break
    return list(seen.values())


def word_classes_of(vocab: Vocabulary, num_classes: int, shortlist: int = 0) -> list[int]:
    """Classes of the vocabulary's units for the output layer (none when ``num_classes`` is 0).

    ``<s>`` is never predicted: it is counted 0, so it joins the last class.
    """
    if num_classes == 0:
        return []
    if vocab.unigram_counts is None:
        raise ValueError("a class-factored output needs the vocabulary's unigram counts")
    counts = list(vocab.unigram_counts)
    counts[vocab.bos_id] = 0
    if shortlist:
        return shortlist_classes(counts, shortlist, num_classes)
    return frequency_classes(counts, num_classes)


# -- the training step ----------------------------------------------------------------------


class LossModule(nn.Module):
    """Mean per-token negative log-likelihood of a batch; what DDP wraps."""

    def __init__(self, model: ContextLSTM):
        super().__init__()
        self.model = model

    def forward(
        self,
        inputs: torch.Tensor,
        targets: torch.Tensor,
        mask: torch.Tensor,
        records: Sequence[Mapping[str, Any] | None] | None,
        samples: torch.Tensor | None = None,
        log_expected: torch.Tensor | None = None,
    ) -> torch.Tensor:
        if samples is None:
            # only the targets' values: the class-factored output computes their classes, the
            # full softmax runs by cache-sized blocks on the CPU (lm_models.output)
            logp = self.model.target_log_probs(inputs, targets, records, mask > 0)  # (N, T)
            return -logp.sum() / mask.sum()
        assert log_expected is not None
        h = self.model.hidden(inputs, records)  # (N, T, d)
        return sampled_softmax_loss(
            lambda ids: self.model.output_logits(h, records, ids),
            targets,
            samples,
            log_expected,
            mask,
        )


@torch.no_grad()
def evaluate(
    model: ContextLSTM,
    examples: Sequence[Example],
    device: torch.device,
    batch_tokens: int,
    pad_id: int,
) -> tuple[float, int]:
    """``(total natural-log probability, tokens)`` of ``examples`` (full softmax)."""
    was_training = model.training
    model.eval()
    total, tokens = 0.0, 0
    for idxs in bucket_batches([len(e) for e in examples], batch_tokens, seed=0, shuffle=False):
        batch = collate([examples[i] for i in idxs], pad_id).to(device)
        records = list(batch.records) if model.adaptive else None
        logp = model.score(batch.inputs, batch.targets, batch.lengths, records)
        total += float(logp.sum())
        tokens += batch.num_tokens
    model.train(was_training)
    return total, tokens


# -- state saving ---------------------------------------------------------------------------


def _save_optimizer(opt: torch.optim.Optimizer, folder: Path) -> None:
    sd = opt.state_dict()
    tensors: dict[str, torch.Tensor] = {}
    scalars: dict[str, Any] = {}
    for pid, st in sd["state"].items():
        for key, value in st.items():
            if torch.is_tensor(value):
                tensors[f"{pid}.{key}"] = value.detach().cpu().contiguous()
            else:
                scalars[f"{pid}.{key}"] = value
    save_file(tensors, str(folder / "optimizer.safetensors"))
    (folder / "optimizer.json").write_text(
        json.dumps({"param_groups": sd["param_groups"], "scalars": scalars}), encoding="utf-8"
    )


def _load_optimizer(opt: torch.optim.Optimizer, folder: Path, device: torch.device) -> None:
    meta = json.loads((folder / "optimizer.json").read_text(encoding="utf-8"))
    tensors = load_file(str(folder / "optimizer.safetensors"), device=str(device))
    state: dict[int, dict[str, Any]] = {}
    for key, value in tensors.items():
        pid, name = key.split(".", 1)
        state.setdefault(int(pid), {})[name] = value
    for key, value in meta["scalars"].items():
        pid, name = key.split(".", 1)
        state.setdefault(int(pid), {})[name] = value
    opt.load_state_dict({"state": state, "param_groups": meta["param_groups"]})


# -- the loop -------------------------------------------------------------------------------


@dataclass(frozen=True)
class EpochLog:
    epoch: int
    train_loss: float
    dev_ppl: float
    tokens: int
    seconds: float
    tokens_per_second: float
    # Further values of the epoch, e.g. the FactorCell's "adapt_ratio" (||A||/||W||).
    extra: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class TrainResult:
    best_dev_ppl: float
    best_epoch: int
    epochs: tuple[EpochLog, ...]
    out_dir: Path
    device: str


def train(
    cfg: TrainConfig, data_dir: Path, out_dir: Path, resume: bool = True, progress: bool = True
) -> TrainResult:
    """Train per ``cfg``; checkpoints under ``out_dir`` (``best/``, ``last/``)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    opts = cfg.train
    device = resolve_device(opts.device, local_rank)
    if world > 1 and not dist.is_initialized():
        dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
    is_main = rank == 0
    torch.manual_seed(opts.seed)

    out_dir = Path(out_dir)
    last, best = out_dir / "last", out_dir / "best"
    for folder in (last, best):  # a save killed mid-swap (no atomic exchange): its set back
        clean_stale(folder)
    resuming = resume and (last / "trainer.json").exists()
    # A resumed subword run keeps its tokenizer (the vocabulary's units must not change).
    kept_tokenizer = (
        SubwordTokenizer.load(last) if resuming and SubwordTokenizer.present(last) else None
    )
    data = prepare_data(cfg, data_dir, kept_tokenizer)
    extra: dict[str, str | bytes] = (
        {} if data.tokenizer is None else {TOKENIZER_FILE: data.tokenizer.model_proto}
    )
    if data.asr_tokens is not None:  # the token set travels with the checkpoint, for export
        extra[ASR_TOKENS_FILE] = data.asr_tokens.to_text()
        kept = checkpoint_asr_tokens(last) if resuming else None
        if kept is not None:
            kept.check_same(data.asr_tokens)
    pad_id = data.vocab.eos_id
    model = ContextLSTM(model_config(cfg, data)).to(device)
    # The fused update: one kernel over all parameters (8% of a CPU step at V = 50k).
    optimizer = torch.optim.Adam(
        parameter_groups(model, opts), lr=opts.lr, fused=device.type in ("cpu", "cuda")
    )
    # Distinct contexts of the training data for the per-epoch ||A||/||W|| (FactorCell only).
    ratio_records = distinct_records(data.train) if model.config.mode == "factor" else []
    loss_module: nn.Module = LossModule(model)
    if world > 1:
        loss_module = DistributedDataParallel(
            loss_module, device_ids=[device.index] if device.type == "cuda" else None
        )
    sampler = None
    log_expected = None
    if opts.sampled_softmax:
        counts = torch.tensor(data.vocab.unigram_counts or [1] * len(data.vocab))
        sampler = UnigramSampler(counts, opts.sampled_softmax)
        log_expected = torch.log(sampler.probs.clamp(min=1e-12) * opts.sampled_softmax).to(device)

    state = {"epoch": 0, "best_dev_ppl": math.inf, "best_epoch": 0, "bad_epochs": 0, "log": []}
    if resuming:
        try:
            prev_model, _, _ = load_checkpoint(last, device=device)
            model.load_state_dict(prev_model.state_dict(), strict=True)
            _load_optimizer(optimizer, last, device)
            state = json.loads((last / "trainer.json").read_text(encoding="utf-8"))
            logger.info("resuming from %s after epoch %d", last, state["epoch"])
        except (ValueError, KeyError, OSError) as err:  # a damaged last/ (kill, full disk)
            state = _fall_back_to_best(best, model, device, err)
    if is_main:
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "config.json").write_text(json.dumps(cfg.to_json(), indent=2) + "\n")
        (out_dir / "split.json").write_text(
            json.dumps({k: list(v) for k, v in data.split_ids.items()}) + "\n"
        )

    use_amp = opts.amp and device.type == "cuda"
    lengths = [len(e) for e in data.train]
    epoch_gen: list[torch.Generator] = []  # the current epoch's generator (sampled softmax)

    def epoch_batches(epoch: int) -> list[list[int]]:
        batches = bucket_batches(lengths, opts.batch_tokens, seed=opts.seed * 1000 + epoch)
        per_rank = len(batches) // world
        batches = batches[rank * per_rank : (rank + 1) * per_rank]  # equal shares: no hang
        epoch_gen[:] = [torch.Generator().manual_seed(opts.seed * 1000 + epoch)]
        return batches

    def step(idxs: list[int]) -> Step:
        batch: Batch = collate([data.train[i] for i in idxs], pad_id).to(device)
        records = list(batch.records) if model.adaptive else None
        samples = sampler.sample(epoch_gen[0]).to(device) if sampler is not None else None
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=use_amp):
            loss = loss_module(
                batch.inputs,
                batch.targets,
                batch.mask().float(),
                records,
                samples,
                log_expected,
            )
        return Step(loss, loss.detach(), 1, batch.num_tokens)

    def evaluate_dev() -> DevResult:
        total, dev_tokens = evaluate(model, data.dev, device, opts.batch_tokens, pad_id)
        if world > 1:  # every rank evaluates the whole dev set: keep them in step
            dist.barrier()
        ratio = model.adaptation_ratio(ratio_records)
        extra = {} if ratio is None else {"adapt_ratio": ratio}
        return DevResult(math.exp(-total / max(dev_tokens, 1)), extra)

    def end_epoch(record: EpochRecord, keeper: BestKeeper) -> None:
        tokens = record.tokens * world
        log = EpochLog(
            record.epoch,
            record.train_loss,
            record.dev_ppl,
            tokens,
            record.seconds,
            tokens / max(record.seconds, 1e-9),
            dict(record.extra),
        )
        state["log"].append(asdict(log))
        state.update(
            epoch=record.epoch,
            best_dev_ppl=keeper.best_ppl,
            best_epoch=keeper.best_epoch,
            bad_epochs=keeper.bad_epochs,
        )
        if is_main:
            meta = {
                "epoch": record.epoch,
                "dev_ppl": record.dev_ppl,
                "config": cfg.to_json(),
                "device": str(device),
                "world_size": world,
                # every epoch so far (tokens, seconds): best/ alone tells how it was trained
                "log": state["log"],
            }
            if keeper.best_epoch == record.epoch:
                save_checkpoint(best, model, data.vocab.tokens, meta, extra)
            _save_last(last, model, optimizer, data.vocab.tokens, meta, state, extra)

    fit(
        model,
        optimizer,
        step,
        epoch_batches,
        evaluate_dev,
        FitOptions(
            epochs=opts.epochs,
            patience=opts.patience,
            lr_decay=opts.lr_decay,
            max_steps_per_epoch=opts.max_steps_per_epoch,
            grad_clip=opts.grad_clip if opts.grad_clip > 0 else None,
            progress=progress and is_main,
            name="LSTM",
            data_parallel=False,  # DDP wraps the loss module and epoch_batches shards
        ),
        start_epoch=state["epoch"] + 1,
        keeper=BestKeeper(
            model,
            opts.patience,
            opts.lr_decay,
            best_ppl=state["best_dev_ppl"],
            best_epoch=state["best_epoch"],
            bad_epochs=state["bad_epochs"],
            keep_weights=False,  # the best checkpoint is on disk (best/)
        ),
        on_epoch_end=end_epoch,
    )
    if world > 1:
        dist.barrier()
    return TrainResult(
        best_dev_ppl=state["best_dev_ppl"],
        best_epoch=state["best_epoch"],
        epochs=tuple(EpochLog(**e) for e in state["log"]),
        out_dir=out_dir,
        device=str(device),
    )


def _fall_back_to_best(
    best: Path, model: ContextLSTM, device: torch.device, err: Exception
) -> dict[str, Any]:
    """Resume from ``best/`` when ``last/`` cannot be read: its weights, a fresh optimizer, and
    the epoch count and log ``best/training.json`` records. No usable ``best/`` either: the
    error says what is wrong with both."""
    try:
        prev_model, _, meta = load_checkpoint(best, device=device)
        epoch = int((meta or {})["epoch"])
        dev_ppl = float((meta or {})["dev_ppl"])
    except (ValueError, KeyError, TypeError, OSError) as best_err:
        raise ValueError(
            f"cannot resume: last/ is unreadable ({err}) and best/ too ({best_err}); "
            "train again with --no-resume"
        ) from None
    model.load_state_dict(prev_model.state_dict(), strict=True)
    log = [e for e in (meta or {}).get("log", []) if int(e.get("epoch", 0)) <= epoch]
    logger.warning(
        "last/ is unreadable (%s); resuming from %s (epoch %d, dev %.3f) with a fresh optimizer",
        err,
        best,
        epoch,
        dev_ppl,
    )
    return {
        "epoch": epoch,
        "best_dev_ppl": dev_ppl,
        "best_epoch": epoch,
        "bad_epochs": 0,
        "log": log,
    }


def _save_last(
    last: Path,
    model: ContextLSTM,
    optimizer: torch.optim.Optimizer,
    vocab_tokens: Sequence[str],
    meta: Mapping[str, Any],
    state: Mapping[str, Any],
    extra_files: Mapping[str, str | bytes],
) -> None:
    """Model, optimizer and trainer state, written aside and swapped in whole: a kill leaves
    the previous ``last/`` or the new one (:func:`rescorer.core.output.atomic_dir`)."""
    with atomic_dir(last) as folder:
        write_checkpoint(folder, model, vocab_tokens, meta, extra_files)
        _save_optimizer(optimizer, folder)
        (folder / "trainer.json").write_text(json.dumps(state) + "\n", encoding="utf-8")
        sync_files(folder)


def main(argv: Sequence[str] | None = None) -> None:
    from rescorer.core.data import default_data_dir

    ap = argparse.ArgumentParser(
        prog="python -m lm_models.lstm.train",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("config", type=Path)
    ap.add_argument("--data-dir", type=Path, default=None)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--no-resume", action="store_true")
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)
    logging.basicConfig(
        level=logging.WARNING if args.quiet else logging.INFO,
        format="%(levelname)s %(name)s: %(message)s",
    )
    try:
        cfg = TrainConfig.load(args.config)
    except ValueError as err:
        raise SystemExit(f"error: {err}") from None
    result = train(
        cfg,
        args.data_dir or default_data_dir(),
        args.out,
        resume=not args.no_resume,
        progress=not args.quiet,
    )
    logger.info("best dev perplexity %.2f at epoch %d", result.best_dev_ppl, result.best_epoch)


if __name__ == "__main__":
    main()
