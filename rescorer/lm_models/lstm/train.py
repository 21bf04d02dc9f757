"""Training context-aware LSTM language models from a JSON config.

    python -m rescorer.lm_models.lstm.train CONFIG.json [--data-dir DIR] [--out DIR] [--no-resume]
    torchrun --nproc_per_node 2 -m rescorer.lm_models.lstm.train CONFIG.json --out DIR   #
    data-parallel ... --train-shards DIR     # training data streamed from a shard folder (rescorer
    corpus shard)

The data (:mod:`rescorer.lm_models.lstm.data`): documents read and split by document (stratified by
a field), or a training corpus and a dev corpus each whole, or a sharded training corpus streamed
one shard at a time; the vocabulary and the context variables come from the training data. The
model is trained with Adam on the full softmax or, for large vocabularies, a sampled softmax with
a unigram proposal (training only; dev perplexity always uses the full softmax). Each epoch ends
with the dev perplexity; the best checkpoint is kept in ``OUT/best`` and the latest, with
optimizer and trainer state, in ``OUT/last``, from which a re-run resumes. CUDA is used when
available (bf16 autocast), else the CPU. Under ``torchrun`` every process trains on its share of
the data through :func:`rescorer.lm_models.training.fit` (:mod:`rescorer.lm_models.distributed`:
gradients averaged every step, NCCL on GPUs, gloo on CPUs), and the dev set is scored in shares
whose sums are added over the processes.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from rescorer.core.errors import InputError
from rescorer.core.output import atomic_dir, atomic_write, clean_stale
from rescorer.lm_models.asr_tokens import ASR_TOKENS_FILE, checkpoint_asr_tokens
from rescorer.lm_models.batching import Batch, Example, bucket_batches, bucket_parts, collate
from rescorer.lm_models.checkpoint import (
    TOKENIZER_FILE,
    load_checkpoint,
    load_optimizer_state,
    save_checkpoint,
    save_optimizer_state,
    sync_files,
    write_checkpoint,
)
from rescorer.lm_models.distributed import (
    ONE_PROCESS,
    World,
    all_sum,
    barrier,
    close_world,
    end_process,
    init_world,
    process_device,
    seed_process,
    share,
)
from rescorer.lm_models.lstm.data import (  # noqa: F401  (names of this module before the data moved)
    CORPUS_READERS,
    DataConfig,
    PreparedData,
    asr_vocabulary,
    context_record,
    distinct_records,
    examples_of,
    prepare_data,
)
from rescorer.lm_models.lstm.model import ContextLike, ContextLSTM, LSTMConfig
from rescorer.lm_models.lstm.transformer import CausalTransformerLM, TransformerConfig
from rescorer.lm_models.sampled_softmax import UnigramSampler, sampled_softmax_loss
from rescorer.lm_models.tokenizer import SubwordTokenizer
from rescorer.lm_models.training import (
    BestKeeper,
    DevResult,
    EpochRecord,
    FitOptions,
    SectionedConfig,
    Step,
    fit,
)
from rescorer.lm_models.vocab import Vocabulary
from rescorer.lm_models.word_classes import frequency_classes, shortlist_classes

logger = logging.getLogger(__name__)

# -- configuration ----------------------------------------------------------------------------

ARCHS = ("lstm", "transformer")  # ModelOptions.arch
WordModel = ContextLSTM | CausalTransformerLM  # what build_model makes


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
    # Output layer: 0 for the full softmax, else a class-factored softmax
    # (rescorer.lm_models.output) with about this many classes: frequency-binned (sqrt counts) when
    # shortlist is 0, else the shortlist's words each a class and the rest in num_classes clusters
    # (the adaptive softmax layout; much cheaper in training at large V, see
    # bench/results/output.md).
    num_classes: int = 0
    shortlist: int = 0
    # Nonlinearity of the context embedding: "relu" (the paper, section 2.1) or "none".
    context_activation: str = "relu"
    # The body: "lstm" (the paper's), or "transformer", a small causal Transformer over the same
    # embedding and output layer (rescorer.lm_models.lstm.transformer; mode "unadapted" only). For
    # the transformer, hidden_dim is its width, num_layers its blocks, dropout its dropout.
    arch: str = "lstm"
    # Transformer only: attention heads, feed-forward width, precomputed positions (a longer
    # input computes its own).
    heads: int = 4
    ffn_dim: int = 1024
    max_positions: int = 256

    def __post_init__(self) -> None:
        if self.arch not in ARCHS:
            raise ValueError(f"arch must be one of {ARCHS}, got {self.arch!r}")
        if self.arch == "transformer" and self.mode != "unadapted":
            raise ValueError(
                f'arch "transformer" takes no context: mode must be "unadapted", got {self.mode!r}'
            )
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
    # L2 penalty on Z_L and Z_R (Adam's weight_decay, added to their gradient before Adam's
    # normalisation): a prior that shrinks the FactorCell toward the ConcatCell it contains
    # (A = 0). On AG News the FactorCell's train loss fell below the ConcatCell's of the same
    # seed while its dev perplexity stayed above it: per-value recurrent weights that fit the
    # training articles. 0: none.
    adapt_weight_decay: float = 0.0
    # Learning rate of the context's softmax biases (Q and the per-value tables) as a fraction
    # of lr. Under the full softmax every entry of a value's bias row gets a gradient at every
    # step, and Adam turns even the tiny push on a word that value's training documents never
    # use into a full step: on Brown (about 30 documents a genre) the genre rows had learned
    # -1.2 for such words and +1.2 for the rest (std 1.66 against the shared bias's 0.10), and
    # SoftmaxBias stopped at dev 184 against Unadapted's 168 (halving the rows' deviation from
    # their mean after training: 172.5). 1.0: the same rate as the rest.
    bias_lr_scale: float = 1.0
    # L2 penalty on the same biases (Adam's weight_decay: added to their gradient before Adam's
    # normalisation), a prior that keeps a bias near 0 unless the data pushes it harder than
    # this: the tiny push on a word a value's documents never use is outweighed, a word the
    # value really favours is not. 0: none.
    bias_weight_decay: float = 0.0
    # Stop an epoch after this many optimizer steps (None: the whole epoch); for smoke tests.
    max_steps_per_epoch: int | None = None
    # Wall-clock budget of one `rescorer train` call in seconds: no epoch starts once it is
    # spent, the last one is saved as usual (None: none). For a borrowed GPU of fixed length.
    max_seconds: float | None = None
    # Batches collated, moved to the device and given their encoded context by a background
    # thread ahead of the step (rescorer.lm_models.prefetch); 0: in the loop. The same numbers
    # either way; on a GPU it hides the text context's embedding (0.12 s a 32k-token batch for
    # hash:256, bench/results/context_text.md), which doubled the epoch time of the first context
    # run.
    prefetch: int = 2

    def __post_init__(self) -> None:
        if isinstance(self.epochs, bool) or not isinstance(self.epochs, int) or self.epochs < 1:
            raise ValueError(f"train.epochs: expected an integer >= 1, got {self.epochs!r}")
        if self.prefetch < 0:
            raise ValueError(f"prefetch must be >= 0, got {self.prefetch!r}")
        if not 0.0 < self.lr_decay <= 1.0:
            raise ValueError(f"lr_decay must be in (0, 1], got {self.lr_decay!r}")
        for name in ("adapt_lr_scale", "bias_lr_scale"):
            value = getattr(self, name)
            if not 0.0 < value <= 1.0:
                raise ValueError(f"{name} must be in (0, 1], got {value!r}")
        for name in ("adapt_weight_decay", "bias_weight_decay"):
            value = getattr(self, name)
            if not value >= 0.0:
                raise ValueError(f"{name} must be >= 0, got {value!r}")


@dataclass(frozen=True)
class TrainConfig(SectionedConfig):
    """A whole training run."""

    data: DataConfig
    model: ModelOptions = field(default_factory=ModelOptions)
    train: TrainOptions = field(default_factory=TrainOptions)


def with_train_shards(cfg: TrainConfig, shards: str | Path) -> TrainConfig:
    """``cfg`` training on the shard folder ``shards`` instead of its ``data.path`` (the config
    must name its dev corpus, ``data.dev``; a ValueError otherwise)."""
    return cfg.with_train_shards(shards)


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
        history=cfg.data.history_field if cfg.data.history else "",
    )


def transformer_config(cfg: TrainConfig, data: PreparedData) -> TransformerConfig:
    m = cfg.model
    if cfg.data.history:
        raise ValueError('arch "transformer" reads no history text: data.history must be off')
    return TransformerConfig(
        vocab_size=len(data.vocab),
        embed_dim=m.embed_dim,
        hidden_dim=m.hidden_dim,
        num_layers=m.num_layers,
        heads=m.heads,
        ffn_dim=m.ffn_dim,
        max_positions=m.max_positions,
        dropout=m.dropout,
        word_classes=tuple(word_classes_of(data.vocab, m.num_classes, m.shortlist)),
    )


def build_model(cfg: TrainConfig, data: PreparedData) -> WordModel:
    """The model ``cfg.model.arch`` names, sized for ``data``."""
    if cfg.model.arch == "transformer":
        return CausalTransformerLM(transformer_config(cfg, data))
    return ContextLSTM(model_config(cfg, data))


def parameter_groups(model: WordModel, opts: TrainOptions) -> list[dict[str, Any]]:
    """Adam's parameter groups: everything at ``lr``, the FactorCell's Z_L/Z_R at
    ``lr * adapt_lr_scale`` (weight decay ``adapt_weight_decay``) and, when ``bias_lr_scale`` is
    not 1 or ``bias_weight_decay`` not 0, the context's softmax biases at ``lr * bias_lr_scale``
    with that weight decay (a group only where it has parameters: the layout of runs made
    before a group existed, whose saved optimizer state a resumed run loads, is unchanged)."""
    scaled: list[tuple[list[nn.Parameter], dict[str, float]]] = [
        (
            model.adaptation_parameters(),
            {"lr": opts.lr * opts.adapt_lr_scale, "weight_decay": opts.adapt_weight_decay},
        )
    ]
    if opts.bias_lr_scale != 1.0 or opts.bias_weight_decay != 0.0:
        settings = {"lr": opts.lr * opts.bias_lr_scale, "weight_decay": opts.bias_weight_decay}
        scaled.append((model.context_bias_parameters(), settings))
    scaled = [(params, settings) for params, settings in scaled if params]
    ids = {id(p) for params, _ in scaled for p in params}
    groups: list[dict[str, Any]] = [{"params": [p for p in model.parameters() if id(p) not in ids]}]
    groups += [{"params": params, **settings} for params, settings in scaled]
    return groups


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

    def __init__(self, model: WordModel):
        super().__init__()
        self.model = model

    def forward(
        self,
        inputs: torch.Tensor,
        targets: torch.Tensor,
        mask: torch.Tensor,
        context: ContextLike,
        samples: torch.Tensor | None = None,
        log_expected: torch.Tensor | None = None,
    ) -> torch.Tensor:
        if samples is None:
            # only the targets' values: the class-factored output computes their classes, the
            # full softmax runs by cache-sized blocks on the CPU (rescorer.lm_models.output)
            logp = self.model.target_log_probs(inputs, targets, context, mask > 0)  # (N, T)
            return -logp.sum() / mask.sum()
        assert log_expected is not None
        h = self.model.hidden(inputs, context)  # (N, T, d)
        return sampled_softmax_loss(
            lambda ids: self.model.output_logits(h, context, ids),
            targets,
            samples,
            log_expected,
            mask,
        )


@torch.no_grad()
def evaluate(
    model: WordModel,
    examples: Sequence[Example],
    device: torch.device,
    batch_tokens: int,
    pad_id: int,
    world: World = ONE_PROCESS,
) -> tuple[float, int]:
    """``(total natural-log probability, tokens)`` of ``examples`` (full softmax).

    Under torchrun (``world``) each process scores its share of the batches (every N-th of the
    list one process makes) and the sums are added over the processes: every process gets the
    whole set's values.
    """
    was_training = model.training
    model.eval()
    total, tokens = 0.0, 0
    batches = bucket_batches([len(e) for e in examples], batch_tokens, seed=0, shuffle=False)
    for idxs in share(batches, world):
        batch = collate([examples[i] for i in idxs], pad_id).to(device)
        records = list(batch.records) if model.adaptive else None
        logp = model.score(batch.inputs, batch.targets, batch.lengths, records)
        total += float(logp.sum())
        tokens += batch.num_tokens
    model.train(was_training)
    total, n = all_sum((total, tokens), world)
    return total, int(n)


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
    # Optimizer steps of each process (0 in logs written before it was recorded).
    steps: int = 0


@dataclass(frozen=True)
class TrainResult:
    best_dev_ppl: float
    best_epoch: int
    epochs: tuple[EpochLog, ...]
    out_dir: Path
    device: str


def train(
    cfg: TrainConfig,
    data_dir: Path,
    out_dir: Path,
    resume: bool = True,
    progress: bool = True,
    init: Path | None = None,
) -> TrainResult:
    """Train per ``cfg``; checkpoints under ``out_dir`` (``best/``, ``last/``).

    ``init``: a checkpoint folder whose weights a new run starts from (fine-tuning, or a
    history model warm-started from its twin): the config's architecture and the data's units
    must be the checkpoint's; the optimizer, epoch count and best dev perplexity start afresh.
    A run that resumes from ``out_dir/last`` ignores it."""
    opts = cfg.train
    device = process_device(opts.device)
    # under torchrun: fit trains data-parallel (rescorer.lm_models.distributed)
    world = init_world(device)
    torch.manual_seed(opts.seed)

    out_dir = Path(out_dir)
    last, best = out_dir / "last", out_dir / "best"
    for folder in (last, best):  # a save killed mid-swap (no atomic exchange): its set back
        clean_stale(folder)
    resuming = resume and (last / "trainer.json").exists()
    init = None if resuming else init
    # --init is read before the data, so that a wrong folder fails at once
    start = read_init(Path(init)) if init is not None else None
    # A resumed or initialised subword run keeps its tokenizer (the units must not change).
    units_from = last if resuming else init
    kept_tokenizer = (
        SubwordTokenizer.load(units_from)
        if units_from is not None and SubwordTokenizer.present(units_from)
        else None
    )
    data = prepare_data(cfg, data_dir, kept_tokenizer, world)
    extra: dict[str, str | bytes] = (
        {} if data.tokenizer is None else {TOKENIZER_FILE: data.tokenizer.model_proto}
    )
    if data.asr_tokens is not None:  # the token set travels with the checkpoint, for export
        extra[ASR_TOKENS_FILE] = data.asr_tokens.to_text()
        kept = checkpoint_asr_tokens(units_from) if units_from is not None else None
        if kept is not None:
            kept.check_same(data.asr_tokens)
    pad_id = data.vocab.eos_id
    model = build_model(cfg, data).to(device)
    seed_process(opts.seed, world)  # dropout: each process its own draws
    # The fused update: one kernel over all parameters (8% of a CPU step at V = 50k).
    optimizer = torch.optim.Adam(
        parameter_groups(model, opts), lr=opts.lr, fused=device.type in ("cpu", "cuda")
    )
    # Distinct contexts of the training data for the per-epoch ||A||/||W|| (FactorCell only).
    ratio_records = list(data.contexts) if model.config.mode == "factor" else []
    loss_module = LossModule(model)
    sampler = None
    log_expected = None
    if opts.sampled_softmax:
        counts = torch.tensor(data.vocab.unigram_counts or [1] * len(data.vocab))
        sampler = UnigramSampler(counts, opts.sampled_softmax)
        log_expected = torch.log(sampler.probs.clamp(min=1e-12) * opts.sampled_softmax).to(device)

    state = {"epoch": 0, "best_dev_ppl": math.inf, "best_epoch": 0, "bad_epochs": 0, "log": []}
    if start is not None:
        start_from(model, start, data.vocab.tokens)
        start = None  # its copy of the weights is not kept through the training
    if resuming:
        try:
            prev_model, prev_tokens, _ = load_checkpoint(last, device=device)
            _check_same_run(out_dir, last, model, prev_model, data.vocab.tokens, prev_tokens)
            model.load_state_dict(prev_model.state_dict(), strict=True)
            load_optimizer_state(optimizer, last, device)
            state = json.loads((last / "trainer.json").read_text(encoding="utf-8"))
            logger.info("resuming from %s after epoch %d", last, state["epoch"])
        except OtherRunError:
            raise
        except (ValueError, KeyError, OSError) as err:  # a damaged last/ (kill, full disk)
            state = _fall_back_to_best(best, model, device, err, out_dir, data.vocab.tokens)
    split: dict[str, Any] = {k: list(v) for k, v in data.split_ids.items()}
    if data.stream is not None:
        split["train_shards"] = str(data.stream.reader.index.directory)

    def run_files() -> dict[str, str]:
        """The run's config.json and split.json: name -> text."""
        return {
            "config.json": json.dumps(cfg.to_json(), indent=2) + "\n",
            "split.json": json.dumps(split) + "\n",
        }

    def write_run_files() -> None:
        """The run's config.json and split.json (atomic each)."""
        for name, text in run_files().items():
            with atomic_write(out_dir / name) as fh:
                fh.write(text)

    # A new run into a folder holding an earlier run (--no-resume) leaves that run's config
    # beside its weights until its own first checkpoint replaces them (a run that fails before,
    # e.g. on a full disk or a diverged loss, leaves the folder as it was).
    replacing = not resuming and any((out_dir / f).exists() for f in ("best", "last"))
    pending_run_files = [replacing]
    if world.is_main:
        out_dir.mkdir(parents=True, exist_ok=True)
        if not replacing:
            write_run_files()

    use_amp = opts.amp and device.type == "cuda"
    epoch_gen: list[torch.Generator] = []  # the current epoch's generator (sampled softmax)

    def epoch_batches(epoch: int) -> Any:
        seed = opts.seed * 1000 + epoch
        epoch_gen[:] = [torch.Generator().manual_seed(seed)]
        # Each part (all the examples in memory, or one shard) bucketed on its own; a noisy
        # derived text (data.previous.noise) drawn for this epoch.
        batches = bucket_parts(data.train_parts(seed, epoch), opts.batch_tokens, seed)
        return batches if data.stream is not None else list(batches)

    def prepare(examples: list[Example]) -> tuple[Batch, dict[str, torch.Tensor] | None]:
        """A batch on the device and its encoded context (None: unadapted); run ahead of the
        step in a background thread (``prefetch``). Draws no random numbers."""
        batch: Batch = collate(examples, pad_id).to(device)
        if not model.adaptive:
            return batch, None
        encoded = model.encode_records(list(batch.records))
        return batch, {name: value.to(device) for name, value in encoded.items()}

    def step(prepared: tuple[Batch, dict[str, torch.Tensor] | None]) -> Step:
        batch, context = prepared
        samples = sampler.sample(epoch_gen[0]).to(device) if sampler is not None else None
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=use_amp):
            loss = loss_module(
                batch.inputs,
                batch.targets,
                batch.mask().float(),
                context,
                samples,
                log_expected,
            )
        return Step(loss, loss.detach(), 1, batch.num_tokens)

    def evaluate_dev() -> DevResult:
        total, dev_tokens = evaluate(model, data.dev, device, opts.batch_tokens, pad_id, world)
        ratio = model.adaptation_ratio(ratio_records)
        extra = {} if ratio is None else {"adapt_ratio": ratio}
        return DevResult(math.exp(-total / max(dev_tokens, 1)), extra)

    def end_epoch(record: EpochRecord, keeper: BestKeeper) -> None:
        log = EpochLog(
            record.epoch,
            record.train_loss,
            record.dev_ppl,
            record.tokens,  # over every process
            record.seconds,
            record.tokens / max(record.seconds, 1e-9),
            dict(record.extra),
            record.steps,
        )
        state["log"].append(asdict(log))
        state.update(
            epoch=record.epoch,
            best_dev_ppl=keeper.best_ppl,
            best_epoch=keeper.best_epoch,
            bad_epochs=keeper.bad_epochs,
        )
        if world.is_main:
            meta = {
                "epoch": record.epoch,
                "dev_ppl": record.dev_ppl,
                "config": cfg.to_json(),
                "device": str(device),
                "world_size": world.size,
                # every epoch so far (tokens, seconds): best/ alone tells how it was trained
                "log": state["log"],
            }
            new_best = keeper.best_epoch == record.epoch
            if pending_run_files[0]:
                # A new run over an earlier one: its first checkpoints and run files are all
                # written before any replaces the earlier run's (a full disk, or any failure,
                # leaves the earlier run whole), then swapped in one after the other.
                with contextlib.ExitStack() as stack:
                    if new_best:
                        folder = stack.enter_context(atomic_dir(best))
                        write_checkpoint(folder, model, data.vocab.tokens, meta, extra)
                    folder = stack.enter_context(atomic_dir(last))
                    _write_last(folder, model, optimizer, data.vocab.tokens, meta, state, extra)
                    for name, text in run_files().items():
                        fh = stack.enter_context(atomic_write(out_dir / name))
                        fh.write(text)
                        fh.flush()  # a full disk says so here, before anything is swapped
                pending_run_files[0] = False
                return
            if new_best:
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
            progress=progress and world.is_main,
            name="LSTM" if cfg.model.arch == "lstm" else "Transformer",
            max_seconds=opts.max_seconds,
            prefetch=opts.prefetch,
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
        prepare_fn=prepare,
    )
    barrier(world)  # no process leaves while the main one still saves
    return TrainResult(
        best_dev_ppl=state["best_dev_ppl"],
        best_epoch=state["best_epoch"],
        epochs=tuple(EpochLog(**e) for e in state["log"]),
        out_dir=out_dir,
        device=str(device),
    )


@dataclass(frozen=True)
class InitCheckpoint:
    """The checkpoint a new run starts from (``--init``)."""

    path: Path
    model: nn.Module
    tokens: list[str]


def read_init(init: Path) -> InitCheckpoint:
    """Checkpoint ``init`` (on the CPU: its weights are copied into the run's model once, so
    no second copy takes device memory), or a ValueError naming it."""
    try:
        model, tokens, _ = load_checkpoint(init, device=torch.device("cpu"))
    except (ValueError, OSError) as err:
        raise ValueError(f"--init {init}: {err}") from None
    return InitCheckpoint(init, model, tokens)


def start_from(model: WordModel, start: InitCheckpoint, tokens: Sequence[str]) -> None:
    """Load ``start``'s weights into ``model``, a new run's first state, after checking that
    both have the same units and the same parameters."""
    init, prev_model, prev_tokens = start.path, start.model, start.tokens
    if list(prev_tokens) != list(tokens):
        diff = next(
            (i for i, (a, b) in enumerate(zip(prev_tokens, tokens, strict=False)) if a != b),
            min(len(prev_tokens), len(tokens)),
        )
        raise ValueError(
            f"--init {init}: its vocabulary ({len(prev_tokens)} units) is not this data's "
            f"({len(tokens)} units; the first difference at id {diff}); fine-tuning needs the "
            "same units (the same data and vocab settings)"
        )
    mine, theirs = model.state_dict(), prev_model.state_dict()
    if mine.keys() != theirs.keys() or any(mine[k].shape != theirs[k].shape for k in mine):
        differ = sorted(set(mine) ^ set(theirs)) or sorted(
            k for k in mine if mine[k].shape != theirs[k].shape
        )
        raise ValueError(
            f"--init {init}: its parameters are not the config's model's (they differ in "
            f"{', '.join(differ[:4])}{' ...' if len(differ) > 4 else ''}); expected the same "
            "model section (mode, sizes, context variables)"
        )
    model.load_state_dict(theirs, strict=True)
    logger.info("starting from the weights of %s", init)


class OtherRunError(InputError):
    """The run folder holds a run of another config (not resumable with this one)."""


def _check_same_run(
    out_dir: Path,
    folder: Path,
    model: nn.Module,
    prev_model: nn.Module,
    tokens: Sequence[str],
    prev_tokens: Sequence[str],
) -> None:
    """:class:`OtherRunError` unless the checkpoint in ``folder`` (``last/`` or ``best/``) has
    this run's parameters (names and shapes) and vocabulary: resuming needs the same model."""
    mine, theirs = model.state_dict(), prev_model.state_dict()
    differ = sorted(set(mine) ^ set(theirs)) or sorted(
        k for k in mine if mine[k].shape != theirs[k].shape
    )
    if differ:
        what = f"parameters ({', '.join(differ[:3])}{' ...' if len(differ) > 3 else ''})"
    elif list(tokens) != list(prev_tokens):
        what = f"vocabulary ({len(prev_tokens)} units, this data gives {len(tokens)})"
    else:
        return
    raise OtherRunError(
        f"holds a run of another config: its {folder.name}/ has other {what} than this "
        "config's model; give --no-resume to start a new run there (it replaces that one), or "
        "another --out",
        out_dir,
    )


def _fall_back_to_best(
    best: Path,
    model: WordModel,
    device: torch.device,
    err: Exception,
    out_dir: Path,
    tokens: Sequence[str],
) -> dict[str, Any]:
    """Resume from ``best/`` when ``last/`` cannot be read: its weights, a fresh optimizer, and
    the epoch count and log ``best/training.json`` records. No usable ``best/`` either: the
    error says what is wrong with both."""
    try:
        prev_model, prev_tokens, meta = load_checkpoint(best, device=device)
        epoch = int((meta or {})["epoch"])
        dev_ppl = float((meta or {})["dev_ppl"])
    except (ValueError, KeyError, TypeError, OSError) as best_err:
        raise ValueError(
            f"cannot resume: last/ is unreadable ({err}) and best/ too ({best_err}); "
            "train again with --no-resume"
        ) from None
    _check_same_run(out_dir, best, model, prev_model, tokens, prev_tokens)
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
    model: WordModel,
    optimizer: torch.optim.Optimizer,
    vocab_tokens: Sequence[str],
    meta: Mapping[str, Any],
    state: Mapping[str, Any],
    extra_files: Mapping[str, str | bytes],
) -> None:
    """Model, optimizer and trainer state, written aside and swapped in whole: a kill leaves
    the previous ``last/`` or the new one (:func:`rescorer.core.output.atomic_dir`)."""
    with atomic_dir(last) as folder:
        _write_last(folder, model, optimizer, vocab_tokens, meta, state, extra_files)


def _write_last(
    folder: Path,
    model: WordModel,
    optimizer: torch.optim.Optimizer,
    vocab_tokens: Sequence[str],
    meta: Mapping[str, Any],
    state: Mapping[str, Any],
    extra_files: Mapping[str, str | bytes],
) -> None:
    """The files of ``last/`` written and synced into the empty ``folder``."""
    write_checkpoint(folder, model, vocab_tokens, meta, extra_files)
    save_optimizer_state(optimizer, folder)
    (folder / "trainer.json").write_text(json.dumps(state) + "\n", encoding="utf-8")
    sync_files(folder)


def main(argv: Sequence[str] | None = None) -> None:
    from rescorer.core.data import default_data_dir

    ap = argparse.ArgumentParser(
        prog="python -m rescorer.lm_models.lstm.train",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("config", type=Path)
    ap.add_argument("--data-dir", type=Path, default=None)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--no-resume", action="store_true")
    ap.add_argument(
        "--init",
        type=Path,
        default=None,
        help="start a new run from this checkpoint's weights (same model section and units)",
    )
    ap.add_argument(
        "--train-shards",
        type=Path,
        default=None,
        help="train on this shard folder (rescorer corpus shard) instead of the config's path",
    )
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)
    logging.basicConfig(
        level=logging.WARNING if args.quiet else logging.INFO,
        format="%(levelname)s %(name)s: %(message)s",
    )
    try:
        cfg = TrainConfig.load(args.config)
        if args.train_shards is not None:
            cfg = cfg.with_train_shards(args.train_shards)
    except ValueError as err:
        raise SystemExit(f"error: {err}") from None
    result = train(
        cfg,
        args.data_dir or default_data_dir(),
        args.out,
        resume=not args.no_resume,
        progress=not args.quiet,
        init=args.init,
    )
    closed = close_world()  # under torchrun: every process leaves the group together
    logger.info("best dev perplexity %.2f at epoch %d", result.best_dev_ppl, result.best_epoch)
    end_process(closed)


if __name__ == "__main__":
    main()
