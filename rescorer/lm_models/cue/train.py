"""Training the parts of a CUE model (:mod:`rescorer.lm_models.cue.model`), each stage on its own.

Stages (Novotney et al. 2022), each a function below:

- :func:`train_sentence_lm`: the sentence encoder as a plain LM on text without context
  (section 3.2); it is frozen afterwards.
- :func:`train_proxy_autoencoder`: the unigram auto-encoder by KL reconstruction (section 4.2.1).
- :func:`train_cue` with a *mode* that decides which parameters learn (:func:`set_trainable`):

  ==========  ===================================================  ===========================
  mode        trained                                              CUE vector from
  ==========  ===================================================  ===========================
  ``joint``   decoder + context encoder (section 6.2)              the context strings
  ``proxy``   decoder + proxy projection (section 4.2.2)           noisy unigram code (sigma)
  ``adapt``   context encoder only (sections 4.1, 4.2.3)           the context strings
  ``decoder`` decoder only, context encoder frozen (Table 6)       the context strings
  ==========  ===================================================  ===========================

  The sentence encoder and the string encoder are frozen in every mode (and kept in eval mode,
  so their features are deterministic); frozen modules get no gradient and no optimiser state.

Data come in as :class:`CUEData`: word ids per sentence and, per sentence, row ids into a table
of precomputed string vectors (:class:`rescorer.lm_models.text_encoders.VectorCache`), so the
pretrained encoder runs once per distinct string. Optimisation follows section 6.1 of the paper:
AdamW with a one-cycle learning-rate schedule and gradient clipping; batches hold up to
``max_tokens`` target tokens of sentences of similar length. After each epoch the dev
perplexity decides which epoch's weights are kept. All log-likelihoods are natural logs.

Training data larger than memory come as parts read one at a time (:class:`CUEParts`): a shard
folder of sentence records (:class:`rescorer.lm_models.cue.shards.CUEShards`). Each epoch reads the
parts in an order drawn anew and forms the batches within each part (:func:`part_batches`);
the steps of an epoch are counted beforehand from the parts' sentence lengths
(:func:`batch_count`), which sets the one-cycle schedule, and the batches carry their part
(:class:`Part`), which is let go before the next is read. With one part (one shard) a stage
trains exactly as on the same data in memory.

Data-parallel training (:mod:`rescorer.lm_models.distributed`): a stage called in every process
under torchrun trains on the process's share of the training sentences: every N-th sentence when
each process passes the same :class:`CUEData` (:func:`share_data`), or the process's own shards
(``r``, ``r + N``, ...) when each passes its :class:`~rescorer.lm_models.cue.shards.CUEShards`. It
draws its batches, its parts' order and its proxy noise from its own generators, takes as many steps
as the process with the fewest batches (counted beforehand: the minimum over the processes) and
averages the gradients every step through :func:`rescorer.lm_models.training.fit`; the dev set stays
a :class:`CUEData` in memory, its value computed in shares of the dev batches whose sums are added
over the processes, so every process keeps the same epoch.
"""

from __future__ import annotations

import itertools
import logging
import math
import random
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch
from torch import Tensor, nn

from rescorer.lm_models.cue.model import (
    CUEModel,
    SentenceLM,
    encode_batch,
    gather_targets,
    render_context,
    unigram_distributions,
)
from rescorer.lm_models.cue.resume import (
    Generators,
    Resumed,
    has_stage,
    load_stage,
    save_stage,
    signature,
    trained_names,
)
from rescorer.lm_models.distributed import (
    ONE_PROCESS,
    World,
    all_min,
    all_sum,
    init_world,
    process_device,
    rank_seed,
    seed_process,
    share,
)
from rescorer.lm_models.training import BestKeeper, EpochRecord, FitOptions, Step, fit
from rescorer.lm_models.vocab import Vocabulary

logger = logging.getLogger(__name__)

MODES = ("joint", "proxy", "adapt", "decoder")


@dataclass(frozen=True)
class CUETrainOptions:
    """Optimisation of one stage."""

    # Passes over the training data (the kept weights are those of the best dev epoch).
    epochs: int = 2
    # Target tokens per batch (sentences of similar length are batched together).
    max_tokens: int = 4096
    # Peak learning rate of the one-cycle schedule (it starts at lr / 25, the paper's ratio
    # 0.0001 : 0.004 is 1 : 40).
    lr: float = 2e-3
    # AdamW weight decay.
    weight_decay: float = 0.01
    # Largest gradient norm (the paper: 0.95).
    clip: float = 0.95
    # Proxy noise: standard deviation of the Gaussian added to the unit-length code (eq. 7).
    sigma: float = 0.5
    # Seed of the initialisation of new parts, batch order, dropout and proxy noise.
    seed: int = 0
    # Stop each epoch after this many batches (None: all); for quick runs and tests.
    max_steps: int | None = None
    # "cpu", "cuda" ...
    device: str = "cpu"
    # Wall-clock budget of one call in seconds: no epoch starts once it is spent (None: no
    # budget). With a ``resume`` folder a later call goes on where this one stopped.
    max_seconds: float | None = None

    def __post_init__(self) -> None:
        if self.max_seconds is not None and not self.max_seconds > 0:
            raise ValueError(f"max_seconds must be > 0 or None, got {self.max_seconds}")
        if self.epochs < 1 or self.max_tokens < 1:
            raise ValueError(
                f"epochs and max_tokens must be >= 1, got {self.epochs}, {self.max_tokens}"
            )
        if self.lr <= 0 or self.weight_decay < 0 or self.clip <= 0 or self.sigma < 0:
            raise ValueError("need lr > 0, weight_decay >= 0, clip > 0 and sigma >= 0")
        if self.max_steps is not None and self.max_steps < 1:
            raise ValueError(f"max_steps must be >= 1 or None, got {self.max_steps}")


@dataclass(frozen=True)
class CUEData:
    """Sentences with their context strings, ready for training and evaluation."""

    # Word ids of each sentence (no <s> or </s>).
    sentences: tuple[np.ndarray, ...]
    # Per sentence, the rows of ``table`` holding its context strings' vectors (may be empty).
    contexts: tuple[tuple[int, ...], ...]
    # (strings, context_dim) float32 vectors of the frozen string encoder.
    table: np.ndarray

    def __post_init__(self) -> None:
        if len(self.sentences) != len(self.contexts):
            raise ValueError(
                f"{len(self.sentences)} sentences but {len(self.contexts)} context lists"
            )

    @property
    def tokens(self) -> int:
        """Target tokens (words + one </s> per sentence)."""
        return sum(len(s) + 1 for s in self.sentences)


def make_data(
    vocab: Vocabulary,
    sentences: Sequence[Sequence[str]],
    records: Sequence[Mapping[str, Any] | None],
    context_fields: Sequence[tuple[str, str]],
    cache: Any,
) -> CUEData:
    """:class:`CUEData` of word sentences and context records (strings embedded via ``cache``).

    Only ``context_fields`` are read from each record; the table is the whole cache, so several
    data sets built with one cache share it.
    """
    if len(records) != len(sentences):
        raise ValueError(f"{len(records)} context records for {len(sentences)} sentences")
    strings = [render_context(r, context_fields) for r in records]
    cache.add(s for ss in strings for s in ss)
    rows = tuple(tuple(cache.index(ss)) for ss in strings)
    return CUEData(encode_sentences(vocab, sentences), rows, cache.table())


def encode_sentences(
    vocab: Vocabulary, sentences: Iterable[Sequence[str]]
) -> tuple[np.ndarray, ...]:
    """Word ids of each sentence (int64; unknown words as ``<unk>``)."""
    return tuple(np.asarray(vocab.encode(s), dtype=np.int64) for s in sentences)


def share_data(data: CUEData, world: World) -> CUEData:
    """This process's share of the sentences (every N-th; all of them in one process)."""
    if not world.parallel:
        return data
    return CUEData(
        tuple(share(data.sentences, world)), tuple(share(data.contexts, world)), data.table
    )


def with_table(data: CUEData, table: np.ndarray) -> CUEData:
    """The same data over a newer (grown) vector table."""
    return CUEData(data.sentences, data.contexts, table)


# -- batches --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Batch:
    """Tensors of one batch."""

    # (B, T) <s> w1 .. wn, padded.
    inputs: Tensor
    # (B, T) w1 .. wn </s>, -1 padded.
    targets: Tensor
    # (B, K, context_dim) string vectors and (B, K) presence mask.
    vectors: Tensor
    present: Tensor


def _batch_sizes(runs: Iterable[tuple[int, int]], max_tokens: int) -> list[int]:
    """Sizes of the batches of sentences taken shortest first: ``runs`` are ``(width, n)``,
    ``n`` sentences of ``width`` target tokens each, widths ascending. A sentence joins the
    current batch while the batch, padded to its width, stays within ``max_tokens`` (a batch
    holds at least one sentence)."""
    sizes: list[int] = []
    n = 0  # sentences in the current batch
    for width, count in runs:
        fits = max(1, max_tokens // width)  # sentences of this width a batch holds
        while count:
            if n >= fits:
                sizes.append(n)
                n = 0
            take = min(count, fits - n)
            n += take
            count -= take
    if n:
        sizes.append(n)
    return sizes


def batch_count(lengths: Mapping[int, int], max_tokens: int) -> int:
    """How many batches :func:`batch_indices` forms of sentences of these lengths (``{words:
    sentences}``, e.g. one shard's, counted without holding it)."""
    if any(w < 0 or n < 0 for w, n in lengths.items()):
        raise ValueError(f"expected lengths and counts >= 0, got {dict(lengths)}")
    runs = ((words + 1, n) for words, n in sorted(lengths.items()) if n)
    return len(_batch_sizes(runs, max_tokens))


def batch_indices(
    data: CUEData, max_tokens: int, generator: torch.Generator | None = None
) -> list[list[int]]:
    """Sentence indices grouped by length into batches of about ``max_tokens`` target tokens;
    shuffled batch order when a generator is given."""
    order = sorted(range(len(data.sentences)), key=lambda i: len(data.sentences[i]))
    runs = (
        (width, sum(1 for _ in same))
        for width, same in itertools.groupby(order, key=lambda i: len(data.sentences[i]) + 1)
    )
    batches: list[list[int]] = []
    lo = 0
    for size in _batch_sizes(runs, max_tokens):
        batches.append(order[lo : lo + size])
        lo += size
    if generator is not None:
        perm = torch.randperm(len(batches), generator=generator).tolist()
        batches = [batches[p] for p in perm]
    return batches


class CUEParts(Protocol):
    """Training data read in parts, one at a time: a process's shards of a sentence-record
    corpus (:class:`rescorer.lm_models.cue.shards.CUEShards`)."""

    @property
    def context_dim(self) -> int | None:
        """Width of the parts' string vectors (None: the parts have none)."""
        ...

    def check(self, world: World) -> None:
        """ValueError unless these are the parts of process ``world.rank`` of ``world.size``."""
        ...

    def batch_count(self, max_tokens: int) -> int:
        """The batches of one epoch over every part (:func:`batch_count` of each part's
        sentence lengths), without reading the parts."""
        ...

    def parts(self, seed: int, vectors: bool = True) -> Iterator[CUEData]:
        """Each part in an order drawn with ``seed``, one at a time (nothing of a part is kept
        once the next is asked for); ``vectors=False``: every context left empty (no string
        vectors computed or read)."""
        ...


class Part:
    """The part of the training data a batch comes from (the whole data in memory, or one
    shard), held by every batch of the part; :func:`part_batches` lets go of it (``data``
    None) before it reads the next part, so a batch the training loop still holds keeps no
    part alive."""

    __slots__ = ("data",)

    def __init__(self, data: CUEData | None) -> None:
        self.data = data


def part_batches(
    parts: Iterable[CUEData],
    max_tokens: int,
    generator: torch.Generator,
    limit: int | None = None,
) -> Iterator[tuple[Part, list[int]]]:
    """``(part, sentence indices)`` batches of each part in turn (:func:`batch_indices` of the
    part, in an order drawn with ``generator``), at most ``limit`` of them (None: all). A part
    is let go before the next is read, and the last one when the batches end (no part is read
    for a batch past the limit)."""
    n = 0
    if limit is not None and limit <= 0:
        return
    for data in parts:
        held = Part(data)
        batches = batch_indices(data, max_tokens, generator)
        del data
        for idx in batches:
            if limit is not None and n >= limit:
                held.data = None
                return
            yield held, idx
            n += 1
        held.data = None
        if limit is not None and n >= limit:
            return


def make_batch(data: CUEData, idx: Sequence[int], device: torch.device) -> Batch:
    inputs, targets = encode_batch([data.sentences[i] for i in idx], device)
    k = max(1, max(len(data.contexts[i]) for i in idx))
    dim = data.table.shape[1]
    vecs = np.zeros((len(idx), k, dim), dtype=np.float32)
    present = np.zeros((len(idx), k), dtype=bool)
    for row, i in enumerate(idx):
        ctx = data.contexts[i]
        if ctx:
            vecs[row, : len(ctx)] = data.table[list(ctx)]
            present[row, : len(ctx)] = True
    return Batch(
        inputs, targets, torch.from_numpy(vecs).to(device), torch.from_numpy(present).to(device)
    )


# -- which parameters learn -----------------------------------------------------------------------


def set_trainable(model: CUEModel, mode: str) -> list[nn.Parameter]:
    """Freeze everything, unfreeze what ``mode`` trains (module docstring); its parameters."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    for p in model.parameters():
        p.requires_grad_(False)
    parts: list[nn.Module] = []
    if mode in ("joint", "proxy", "decoder"):
        parts.append(model.decoder)
    if mode in ("joint", "adapt"):
        parts.append(model.context)
    if mode == "proxy":
        if model.proxy_proj is None:
            raise ValueError("proxy training needs a model with a proxy auto-encoder")
        parts.append(model.proxy_proj)
    params = [p for part in parts for p in part.parameters()]
    for p in params:
        p.requires_grad_(True)
    return params


def _train_mode(model: CUEModel, mode: str) -> None:
    """Dropout on in the modules that learn, off in the frozen ones."""
    model.eval()
    if mode in ("joint", "proxy", "decoder"):
        model.decoder.train()
    if mode in ("joint", "adapt"):
        model.context.train()


def warm_start_decoder(model: CUEModel) -> None:
    """Start the decoder as the sentence LM itself: output layer copied from the sentence
    encoder's softmax, input projection the identity, and every block's residual branches
    zero, so that before training ln P is close to the sentence LM's (only the decoder's
    final layer norm differs; a cheap start; the paper trains the decoder from random
    weights). Needs ``dim`` equal to the sentence encoder's.
    """
    dec, se = model.decoder, model.sentence
    d = model.config.dim
    if model.config.sentence.dim != d:
        raise ValueError(
            f"warm start needs the decoder dim ({d}) equal to the sentence encoder's "
            f"({model.config.sentence.dim})"
        )
    with torch.no_grad():
        if dec.kind == "concat":
            dec.out.weight.zero_()
            dec.out.weight[:, :d].copy_(se.out.weight)
            dec.out.bias.copy_(se.out.bias)
            return
        dec.out.weight.copy_(se.out.weight)
        dec.out.bias.copy_(se.out.bias)
        if not model.config.sentence_inputs:
            return
        dec.inp.weight.copy_(torch.eye(d))
        dec.inp.bias.zero_()
        for block in dec.blocks:
            for lin in (block.self_att.o, block.ffn[-1]):
                lin.weight.zero_()
                lin.bias.zero_()
            if block.cross_att is not None:
                # Zero too: its value path still gets gradient, so e_cue is used after a step.
                block.cross_att.o.weight.zero_()
                block.cross_att.o.bias.zero_()


# -- the loops ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class EpochLog:
    """One epoch of a stage."""

    epoch: int
    # Mean training loss over the epoch's tokens (nats per token; KL per sentence for the
    # proxy auto-encoder).
    train_loss: float
    # Dev perplexity after the epoch (dev KL for the proxy auto-encoder).
    dev: float
    seconds: float
    # Optimizer steps (each process's, under torchrun).
    steps: int = 0


@dataclass(frozen=True)
class StageResult:
    """What one stage achieved."""

    # Best dev value (perplexity; KL for the auto-encoder) and its epoch (0: before training).
    best_dev: float
    best_epoch: int
    # Dev value before any training (the initial weights).
    initial_dev: float
    epochs: tuple[EpochLog, ...]
    # Parameters updated by the stage.
    trained_parameters: int
    seconds: float


def one_cycle(
    optimizer: torch.optim.Optimizer, lr: float, steps: int
) -> torch.optim.lr_scheduler.OneCycleLR:
    """The one-cycle schedule of ``steps`` optimizer steps: 10 % warm-up to ``lr``, then down.

    The warm-up has at least 2 steps (OneCycleLR divides by the length of a phase, which was 0
    at exactly 9 steps); runs of 19 steps or more keep exactly 10 %.
    """
    total = max(4, steps)
    return torch.optim.lr_scheduler.OneCycleLR(
        optimizer, max_lr=lr, total_steps=total + 1, pct_start=max(0.1, 2 / (total + 1))
    )


def _own_data(train: CUEData | CUEParts, world: World) -> CUEData | CUEParts:
    """This process's training data: its share of ``train`` in memory (:func:`share_data`), or
    its parts as given (checked to be its own)."""
    if isinstance(train, CUEData):
        return share_data(train, world)
    train.check(world)
    return train


def _fit(
    model: nn.Module,
    params: list[nn.Parameter],
    train: CUEData | CUEParts,
    loss_of: Callable[[CUEData, list[int], torch.Generator], tuple[Tensor, int]],
    dev: Callable[[], float],
    opts: CUETrainOptions,
    set_mode: Callable[[], None],
    what: str,
    world: World,
    vectors: bool = True,
    resume: Path | None = None,
) -> StageResult:
    """The loop of every stage: ``loss_of(data, batch, generator)`` gives the summed loss of
    the sentences ``batch`` of ``data`` and its count (tokens; sentences for the
    auto-encoder); the best dev epoch is kept.

    With a ``resume`` folder the stage saves its state after every epoch and, called again,
    goes on from the last epoch saved (:mod:`rescorer.lm_models.cue.resume`; one process only).

    ``train`` is this process's share under torchrun (in memory, or its parts: read each epoch
    one at a time, in an order drawn anew from this process's generator, ``vectors`` saying
    whether the stage uses their context strings). Its batches are drawn from its own
    generator (seeded with :func:`rescorer.lm_models.distributed.rank_seed`), every process takes as
    many steps as the one with the fewest batches (counted before training; this sets the
    one-cycle schedule's length everywhere) and the gradients are averaged
    (:func:`rescorer.lm_models.training.fit`).
    """
    t_start = time.perf_counter()
    gen = torch.Generator().manual_seed(rank_seed(opts.seed, world))
    order = random.Random(rank_seed(opts.seed, world))  # each epoch's order of the parts
    torch.manual_seed(opts.seed)
    seed_process(opts.seed, world)  # dropout: each process its own draws
    optimizer = torch.optim.AdamW(params, lr=opts.lr, weight_decay=opts.weight_decay)
    if isinstance(train, CUEData):
        batches = len(batch_indices(train, opts.max_tokens))
    else:
        batches = train.batch_count(opts.max_tokens)
    steps_per_epoch = all_min(batches, world)
    if opts.max_steps is not None:
        steps_per_epoch = min(steps_per_epoch, opts.max_steps)
    schedule = one_cycle(optimizer, opts.lr, steps_per_epoch * opts.epochs)
    if resume is not None and world.parallel:
        raise ValueError(f"resume ({resume}) is for a stage in one process, not under torchrun")
    names = trained_names(model, params) if resume is not None else []
    sig = signature(what, asdict(opts), names, model) if resume is not None else {}
    gens = Generators(gen, order, next(model.parameters()).device)
    earlier: Resumed | None = None
    if resume is not None and has_stage(resume):
        earlier, best = load_stage(resume, sig, model, names, optimizer, schedule, gens)
        logger.info("%s: resuming from %s after epoch %d", what, resume, earlier.epoch)
    initial = dev() if earlier is None else earlier.initial_dev
    keeper = BestKeeper(model, None, 1.0, initial)
    if earlier is not None:
        keeper = _resumed_keeper(model, names, best, earlier)
    records: list[EpochRecord] = list(earlier.records) if earlier is not None else []
    seconds_before = earlier.seconds if earlier is not None else 0.0

    def save(record: EpochRecord, kept: BestKeeper) -> None:
        records.append(record)
        if resume is None:
            return
        now = Resumed(
            record.epoch,
            initial,
            kept.best_ppl,
            kept.best_epoch,
            kept.bad_epochs,
            tuple(records),
            seconds_before + time.perf_counter() - t_start,
        )
        save_stage(resume, sig, model, names, kept.best_state, optimizer, schedule, gens, now)

    def epoch_batches(epoch: int) -> Iterable[tuple[Part, list[int]]]:
        if isinstance(train, CUEData):
            whole = Part(train)
            return [(whole, idx) for idx in batch_indices(train, opts.max_tokens, gen)]
        parts = train.parts(order.getrandbits(63), vectors)
        return part_batches(parts, opts.max_tokens, gen, steps_per_epoch)  # drawn lazily

    def step(batch: tuple[Part, list[int]]) -> Step:
        part, idx = batch
        if part.data is None:
            raise ValueError("a batch of a part that was let go (drawn out of order)")
        loss, k = loss_of(part.data, idx, gen)
        return Step(loss / max(k, 1), loss.detach(), k)

    fit_options = FitOptions(
        epochs=opts.epochs,
        patience=None,
        max_steps_per_epoch=opts.max_steps,
        grad_clip=opts.clip,
        progress=False,
        name=what,
        max_seconds=opts.max_seconds,
    )
    fitted = fit(
        model,
        optimizer,
        step,
        epoch_batches,
        dev,
        fit_options,
        scheduler=schedule,
        train_mode=set_mode,
        initial_dev_ppl=initial,
        start_epoch=1 if earlier is None else earlier.epoch + 1,
        keeper=keeper,
        on_epoch_end=save,
    )
    for p in model.parameters():
        p.requires_grad_(False)
    return StageResult(
        fitted.best_dev_ppl,
        fitted.best_epoch,
        initial,
        tuple(
            EpochLog(e.epoch, e.train_loss, e.dev_ppl, e.seconds + e.dev_seconds, e.steps)
            for e in records
        ),
        sum(p.numel() for p in params),
        seconds_before + time.perf_counter() - t_start,
    )


def _resumed_keeper(
    model: nn.Module, names: Sequence[str], best: Mapping[str, Tensor], earlier: Resumed
) -> BestKeeper:
    """The early-stopping keeper of a resumed stage, holding the best epoch's weights (the
    model keeps its last epoch's)."""
    params = dict(model.named_parameters())
    with torch.no_grad():
        last = {n: params[n].detach().clone() for n in names}
        for n in names:
            params[n].copy_(best[n])
        keeper = BestKeeper(
            model,
            None,
            1.0,
            earlier.best_dev,
            best_epoch=earlier.best_epoch,
            bad_epochs=earlier.bad_epochs,
        )
        for n in names:
            params[n].copy_(last[n])
    return keeper


@torch.no_grad()
def sentence_lm_perplexity(
    model: SentenceLM, data: CUEData, max_tokens: int = 8192, world: World = ONE_PROCESS
) -> float:
    """Perplexity of the sentence LM alone (every token, </s> included; <unk> as a word).

    Under torchrun (``world``) each process scores its share of the batches and the sums are
    added over the processes (the same value everywhere)."""
    model.eval()
    device = next(model.parameters()).device
    nll, n = 0.0, 0
    for idx in share(batch_indices(data, max_tokens), world):
        inputs, targets = encode_batch([data.sentences[i] for i in idx], device)
        nll -= float(gather_targets(model(inputs), targets).sum())
        n += int((targets >= 0).sum())
    nll, n = all_sum((nll, n), world)
    return math.exp(nll / max(n, 1))


def train_sentence_lm(
    model: SentenceLM,
    train: CUEData | CUEParts,
    dev: CUEData,
    opts: CUETrainOptions,
    resume: Path | None = None,
) -> StageResult:
    """Section 3.2: fit the sentence encoder as a plain LM (contexts in the data are ignored;
    parts are read without their string vectors).

    Under torchrun every process passes the same data and trains on its share of ``train``
    (:func:`share_data`), or passes its own parts (shards); the dev set is scored in shares."""
    device = process_device(opts.device)
    world = init_world(device)
    model.to(device)
    params = list(model.parameters())
    for p in params:
        p.requires_grad_(True)
    mine = _own_data(train, world)

    def loss_of(data: CUEData, idx: list[int], gen: torch.Generator) -> tuple[Tensor, int]:
        inputs, targets = encode_batch([data.sentences[i] for i in idx], device)
        return -gather_targets(model(inputs), targets).sum(), int((targets >= 0).sum())

    return _fit(
        model,
        params,
        mine,
        loss_of,
        lambda: sentence_lm_perplexity(model, dev, world=world),
        opts,
        model.train,
        "sentence LM",
        world,
        vectors=False,
        resume=resume,
    )


def _unigram_targets(data: CUEData, idx: Sequence[int], device: torch.device) -> Tensor:
    return encode_batch([data.sentences[i] for i in idx], device)[1]


@torch.no_grad()
def proxy_kl(
    model: CUEModel, data: CUEData, max_tokens: int = 8192, world: World = ONE_PROCESS
) -> float:
    """Mean KL(P~ || F(P~)) per sentence (nats) of the proxy auto-encoder on ``data`` (under
    torchrun, each process its share of the batches, the sums added over the processes)."""
    if model.proxy is None:
        raise ValueError("the model has no proxy auto-encoder")
    model.eval()
    device = next(model.parameters()).device
    total = 0.0
    for idx in share(batch_indices(data, max_tokens), world):
        p = unigram_distributions(_unigram_targets(data, idx, device), model.config.vocab_size)
        total += float(model.proxy.kl(p, model.proxy(p)).sum())
    (total,) = all_sum((total,), world)
    return total / max(len(data.sentences), 1)


def train_proxy_autoencoder(
    model: CUEModel,
    train: CUEData | CUEParts,
    dev: CUEData,
    opts: CUETrainOptions,
    resume: Path | None = None,
) -> StageResult:
    """Section 4.2.1: fit the unigram auto-encoder by KL reconstruction (only it learns; parts
    are read without their string vectors). Under torchrun as :func:`train_sentence_lm`."""
    if model.proxy is None:
        raise ValueError("the model has no proxy auto-encoder (proxy_dim = 0)")
    proxy = model.proxy
    device = process_device(opts.device)
    world = init_world(device)
    model.to(device)
    for p in model.parameters():
        p.requires_grad_(False)
    params = list(proxy.parameters())
    for p in params:
        p.requires_grad_(True)
    mine = _own_data(train, world)

    def loss_of(data: CUEData, idx: list[int], gen: torch.Generator) -> tuple[Tensor, int]:
        p = unigram_distributions(_unigram_targets(data, idx, device), model.config.vocab_size)
        return proxy.kl(p, proxy(p)).sum(), len(p)

    return _fit(
        model,
        params,
        mine,
        loss_of,
        lambda: proxy_kl(model, dev, world=world),
        opts,
        proxy.train,
        "proxy AE",
        world,
        vectors=False,
        resume=resume,
    )


def batch_cue(
    model: CUEModel, batch: Batch, source: str, sigma: float, gen: torch.Generator | None
) -> Tensor:
    """e_cue of a batch: from the context strings (``context``) or the proxy (``proxy``)."""
    if source == "proxy":
        return model.proxy_cue(batch.targets, sigma, gen)
    if source == "context":
        return model.cue(batch.vectors, batch.present)
    raise ValueError(f"cue source must be 'context' or 'proxy', got {source!r}")


@torch.no_grad()
def cue_perplexity(
    model: CUEModel,
    data: CUEData,
    source: str = "context",
    sigma: float = 0.0,
    seed: int = 0,
    max_tokens: int = 8192,
    world: World = ONE_PROCESS,
) -> float:
    """Perplexity of the CUE model on ``data`` (every token, </s> included; natural logs).

    ``source="proxy"`` scores with the proxy of each sentence's own words (the paper's
    "cheating" row), the noise of batch b drawn from a generator seeded with ``seed`` and b (so
    that it does not depend on which process scores the batch). Under torchrun (``world``) each
    process scores its share of the batches and the sums are added over the processes.
    """
    model.eval()
    device = next(model.parameters()).device
    gen = torch.Generator(device=device)
    batches = list(enumerate(batch_indices(data, max_tokens)))
    nll, n = 0.0, 0
    for b, idx in share(batches, world):
        gen.manual_seed(seed * 1_000_003 + b)
        batch = make_batch(data, idx, device)
        cue = batch_cue(model, batch, source, sigma, gen)
        nll -= float(gather_targets(model(batch.inputs, cue), batch.targets).sum())
        n += int((batch.targets >= 0).sum())
    nll, n = all_sum((nll, n), world)
    return math.exp(nll / max(n, 1))


def train_cue(
    model: CUEModel,
    train: CUEData | CUEParts,
    dev: CUEData,
    mode: str,
    opts: CUETrainOptions,
    resume: Path | None = None,
) -> StageResult:
    """Train the parts ``mode`` names (module docstring); the best dev epoch is kept.

    Dev perplexity uses the same CUE source as training (the proxy with noise for ``proxy``;
    parts are then read without their string vectors). Under torchrun every process passes the
    same data and trains on its share of ``train`` (:func:`share_data`), or passes its own
    parts (shards); the dev set is scored in shares.
    """
    device = process_device(opts.device)
    world = init_world(device)
    model.to(device)
    params = set_trainable(model, mode)
    source = "proxy" if mode == "proxy" else "context"
    dim = train.table.shape[1] if isinstance(train, CUEData) else train.context_dim
    if source == "context" and dim != model.config.context_dim:
        raise ValueError(
            f"mode {mode!r} reads the context strings: expected string vectors of "
            f"{model.config.context_dim} dims (the model's), got "
            + ("none" if dim is None else f"{dim} dims")
        )
    mine = _own_data(train, world)

    def loss_of(data: CUEData, idx: list[int], gen: torch.Generator) -> tuple[Tensor, int]:
        batch = make_batch(data, idx, device)
        cue = batch_cue(model, batch, source, opts.sigma, gen)
        lp = gather_targets(model(batch.inputs, cue), batch.targets)
        return -lp.sum(), int((batch.targets >= 0).sum())

    return _fit(
        model,
        params,
        mine,
        loss_of,
        lambda: cue_perplexity(model, dev, source, opts.sigma, opts.seed, world=world),
        opts,
        lambda: _train_mode(model, mode),
        f"CUE {mode}",
        world,
        vectors=source == "context",
        resume=resume,
    )
