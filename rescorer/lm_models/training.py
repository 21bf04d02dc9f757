"""What the model families' trainers share: sectioned JSON configs, early stopping and one epoch
loop.

- :class:`SectionedConfig` and :func:`options_from_json`: training configs of the JSON sections
  ``data``, ``model`` and ``train``, each a frozen options dataclass (unknown keys are errors).
- :func:`config_training_main`: the ``python -m`` entry point of the trainers that take
  ``CONFIG --out DIR``.
- :class:`BestKeeper`: keep the best weights by dev perplexity, decay the learning rate after an
  epoch without improvement, stop after ``patience`` of them.
- :func:`fit`: the epoch loop. A family supplies the batches of an epoch (it owns its random
  generators), a step function (the forward pass of one batch) and a dev evaluation; the loop
  owns the epochs, the step cap, the progress bar, zero_grad/backward/clipping/step, the timing,
  the per-epoch log and early stopping with :class:`BestKeeper`, and restores the best weights.

The loop adds no random number use of its own and keeps the order of operations of the
trainers it replaced, so a family's numerics do not depend on it being shared.
"""

from __future__ import annotations

import argparse
import copy
import itertools
import logging
import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, NamedTuple, TypeVar, get_type_hints

import torch
from torch import Tensor, nn
from tqdm import tqdm

from rescorer.core.errors import InputError
from rescorer.core.json_input import json_fields, read_json
from rescorer.lm_models.distributed import (
    World,
    all_gather_values,
    all_sum,
    average_gradients,
    broadcast_parameters,
    close_world,
    common_steps,
    current_world,
    end_process,
)
from rescorer.lm_models.prefetch import Prefetcher

logger = logging.getLogger(__name__)

POSTFIX_SECONDS = 0.5  # how often the progress bar's loss and tokens/s are updated
# Without a progress bar (a log file), a line at least this often within an epoch (INFO).
PROGRESS_LOG_SECONDS = 60.0

# -- configuration ----------------------------------------------------------------------------


def options_from_json(kind: type, values: Mapping[str, Any] | None, what: str) -> Any:
    """The options dataclass ``kind`` from a JSON object; unknown keys and values of the wrong
    type are a ValueError naming the key (:func:`rescorer.core.json_input.json_fields`)."""
    return kind(**json_fields(kind, values, what))


_Config = TypeVar("_Config", bound="SectionedConfig")


class SectionedConfig:
    """A training config of three JSON sections, ``data`` (required), ``model`` and ``train``.

    Mixed into frozen dataclasses whose fields ``data``, ``model``, ``train`` are option
    dataclasses; each section is built with :func:`options_from_json` (unknown keys are errors).
    Subclasses check what spans sections in :meth:`validate`.
    """

    @classmethod
    def from_json(cls: type[_Config], data: Any) -> _Config:
        if not isinstance(data, Mapping):
            raise ValueError(f"expected a JSON object, got {type(data).__name__}")
        unknown = sorted(set(data) - {"data", "model", "train"})
        if unknown:
            raise ValueError(f"unknown config section(s) {unknown}; expected data, model, train")
        if "data" not in data:
            raise ValueError('config needs a "data" section')
        kinds = get_type_hints(cls)
        sections = {
            f.name: options_from_json(kinds[f.name], data.get(f.name), f.name)
            for f in fields(cls)  # type: ignore[arg-type]
        }
        cfg = cls(**sections)
        cfg.validate()
        return cfg

    def validate(self) -> None:
        """Checks across sections (ValueError); none by default."""

    def with_train_shards(self: _Config, shards: str | Path) -> _Config:
        """This config training on the shard folder ``shards`` (``rescorer corpus shard``) in
        place of its training corpus, through its data section's ``with_train_shards``; a
        ValueError for a family that reads no shards, or a data section that cannot (no dev
        corpus, a corpus whose shards there are none of)."""
        shard = getattr(self.data, "with_train_shards", None)  # type: ignore[attr-defined]
        if shard is None:
            raise ValueError(f"{type(self).__name__} does not train from shards")
        cfg = replace(self, data=shard(shards))  # type: ignore[type-var]
        cfg.validate()
        return cfg

    @classmethod
    def load(cls: type[_Config], path: str | Path) -> _Config:
        """The config in the JSON file ``path``; anything wrong with it is an InputError."""
        raw = read_json(path)
        try:
            return cls.from_json(raw)
        except (TypeError, ValueError) as err:
            raise InputError(str(err), path) from None

    def to_json(self) -> dict[str, Any]:
        return {f.name: asdict(getattr(self, f.name)) for f in fields(self)}  # type: ignore[arg-type]


def config_training_main(
    argv: Sequence[str] | None,
    prog: str,
    description: str | None,
    load_config: Callable[[Path], Any],
    run: Callable[[Any, Path, Path, bool], Any],
) -> None:
    """The ``python -m`` entry point shared by the trainers that take ``CONFIG --out DIR``.

    ``load_config(path)`` raises ValueError on a bad file (reported as one line);
    ``run(config, data_dir, out_dir, progress)`` returns a result with ``best_dev_ppl`` and
    ``best_epoch``. ``--train-shards DIR`` trains on a shard folder instead of the config's
    training corpus (:meth:`SectionedConfig.with_train_shards`).
    """
    from rescorer.core.data import default_data_dir

    ap = argparse.ArgumentParser(prog=prog, description=description)
    ap.add_argument("config", type=Path)
    ap.add_argument("--data-dir", type=Path, default=None)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument(
        "--train-shards",
        type=Path,
        default=None,
        help="train on this shard folder (rescorer corpus shard), each process reading its own "
        "shards one at a time, instead of the config's training corpus (the config names its "
        "dev corpus)",
    )
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)
    logging.basicConfig(
        level=logging.WARNING if args.quiet else logging.INFO,
        format="%(levelname)s %(name)s: %(message)s",
    )
    try:
        cfg = load_config(args.config)
        if args.train_shards is not None:
            cfg = cfg.with_train_shards(args.train_shards)
    except ValueError as err:
        ap.exit(2, f"error: {err}\n")  # bad input: one line, exit status 2
    result = run(cfg, args.data_dir or default_data_dir(), args.out, not args.quiet)
    closed = close_world()  # under torchrun: every process leaves the group together
    logger.info("best dev perplexity %.2f at epoch %d", result.best_dev_ppl, result.best_epoch)
    end_process(closed)


# -- early stopping ---------------------------------------------------------------------------


class TrainingDiverged(ValueError):
    """The loss or the dev perplexity stopped being finite: training stops, and no checkpoint of
    the diverged weights is kept as the best (a ValueError: one line, exit status 2 at the CLI)."""


class BestKeeper:
    """Early stopping for the in-memory trainers: keep the best weights by dev perplexity; after
    ``patience`` epochs without improvement stop (``None``: never), and after each epoch that
    did not improve multiply the learning rate by ``lr_decay``.

    ``best_ppl`` is the value to beat (e.g. the dev perplexity of the initial weights, which are
    then what :meth:`restore` loads when no epoch beats it). A resumed run passes the
    ``best_epoch`` and ``bad_epochs`` it had reached. With ``keep_weights=False`` no copy of the
    weights is kept (the trainer saves the best checkpoint itself) and :meth:`restore` does
    nothing.
    """

    def __init__(
        self,
        model: nn.Module,
        patience: int | None,
        lr_decay: float = 1.0,
        best_ppl: float = math.inf,
        *,
        best_epoch: int = 0,
        bad_epochs: int = 0,
        keep_weights: bool = True,
    ) -> None:
        self.model = model
        self.patience = patience
        self.lr_decay = lr_decay
        self.best_ppl = best_ppl
        self.best_epoch = best_epoch
        self.bad_epochs = bad_epochs
        self.keep_weights = keep_weights
        self._state = copy.deepcopy(model.state_dict()) if keep_weights else None

    @property
    def best_state(self) -> Mapping[str, torch.Tensor] | None:
        """The copy of the best weights (None without ``keep_weights``)."""
        return self._state

    @property
    def stopped(self) -> bool:
        """True once ``patience`` epochs in a row did not improve."""
        return self.patience is not None and self.bad_epochs >= self.patience

    def update(self, epoch: int, dev_ppl: float, optimizer: torch.optim.Optimizer) -> bool:
        """Record ``epoch``'s dev perplexity; True when training should stop."""
        if dev_ppl < self.best_ppl:
            self.best_ppl, self.best_epoch, self.bad_epochs = dev_ppl, epoch, 0
            if self.keep_weights:
                self._state = copy.deepcopy(self.model.state_dict())
            return False
        self.bad_epochs += 1
        if self.stopped:
            return True
        if self.lr_decay != 1.0:
            for group in optimizer.param_groups:
                group["lr"] *= self.lr_decay
        return False

    def restore(self) -> None:
        """Load the best weights back into the model (eval mode); nothing without a copy."""
        if self._state is None:
            return
        self.model.load_state_dict(self._state)
        self.model.eval()


# -- the epoch loop ---------------------------------------------------------------------------


@dataclass(frozen=True)
class FitOptions:
    """How :func:`fit` runs the epochs."""

    # Most epochs (fewer when early stopping ends training).
    epochs: int
    # Stop after this many epochs without a better dev perplexity (None: run every epoch).
    patience: int | None = None
    # Factor of the learning rate after an epoch without improvement (1.0: no decay).
    lr_decay: float = 1.0
    # Stop each epoch after this many optimizer steps (None: every batch of the epoch). The
    # loop draws a batch before it checks the cap, as the trainers it replaced did.
    max_steps_per_epoch: int | None = None
    # Largest gradient norm of the optimizer's parameters (None: no clipping).
    grad_clip: float | None = None
    # Show a tqdm progress bar per epoch.
    progress: bool = True
    # Names the run in the log lines and the progress bar (e.g. "FNLM").
    name: str = "train"
    # Inside a process group (torchrun), train data-parallel (rescorer.lm_models.distributed): every
    # process its own batches, as many steps each, gradients averaged. False: this process
    # trains alone even in a group.
    data_parallel: bool = True
    # Wall-clock budget of this call in seconds: no epoch starts once it is spent (the epoch
    # running then finishes, is evaluated and saved). None: no budget. For a lease of fixed
    # length (a borrowed GPU, a CI job); a resumed run counts its own call only.
    max_seconds: float | None = None
    # With a ``prepare_fn`` (see :func:`fit`): how many batches a background thread prepares
    # ahead of the step (rescorer.lm_models.prefetch); 0: each batch is prepared in the loop, just
    # before its step. The numbers are the same either way.
    prefetch: int = 2

    def __post_init__(self) -> None:
        if self.prefetch < 0:
            raise ValueError(f"prefetch must be >= 0, got {self.prefetch}")
        if self.max_seconds is not None and not self.max_seconds > 0:
            raise ValueError(f"max_seconds must be > 0 or None, got {self.max_seconds}")
        if self.epochs < 0:
            raise ValueError(f"epochs must be >= 0, got {self.epochs}")
        if self.patience is not None and self.patience < 1:
            raise ValueError(f"patience must be >= 1 or None, got {self.patience}")
        if self.max_steps_per_epoch is not None and self.max_steps_per_epoch < 0:
            raise ValueError(f"max_steps_per_epoch must be >= 0, got {self.max_steps_per_epoch}")

    @classmethod
    def early_stopping(cls, train: Any, progress: bool, name: str) -> FitOptions:
        """Options of a family's train section with the fields ``epochs``, ``patience``,
        ``lr_decay`` and ``max_steps_per_epoch`` (the FNLM's and the LBL's); no clipping."""
        return cls(
            epochs=train.epochs,
            patience=train.patience,
            lr_decay=train.lr_decay,
            max_steps_per_epoch=train.max_steps_per_epoch,
            progress=progress,
            name=name,
        )


class Step(NamedTuple):
    """What a family's step function returns for one batch."""

    # The loss to backpropagate.
    loss: Tensor
    # This batch's share of the epoch's summed training loss (a float, or a tensor read with
    # float() after the optimizer step); the epoch's train loss is their sum over ``count``.
    logged: float | Tensor
    # Units the logged loss is summed over (tokens, sentences; 1 when the loss is a batch mean).
    count: int
    # Tokens trained on, for the epoch's token count and throughput (None: ``count``).
    tokens: int | None = None


class DevResult(NamedTuple):
    """What a family's dev evaluation returns."""

    # The value early stopping minimises (a perplexity, or e.g. a KL).
    dev_ppl: float
    # Further per-epoch values to keep in the log (e.g. another perplexity).
    extra: Mapping[str, float] = {}


@dataclass(frozen=True)
class EpochRecord:
    """One epoch of :func:`fit`."""

    # 1-based epoch number.
    epoch: int
    # Summed logged loss over the summed counts (nats per token for the LMs).
    train_loss: float
    # Dev value after the epoch (what early stopping minimises).
    dev_ppl: float
    # Tokens trained on (Step.tokens, else Step.count, summed), optimizer steps taken.
    tokens: int
    steps: int
    # Wall seconds of the training steps and of the dev evaluation.
    seconds: float
    dev_seconds: float
    # Learning rate of the first parameter group after the epoch (before any decay).
    lr: float
    # The family's further values (DevResult.extra).
    extra: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class FitResult:
    """What :func:`fit` did; the model holds the best weights (eval mode) afterwards."""

    # Best dev value and its epoch (0: no epoch beat the initial best).
    best_dev_ppl: float
    best_epoch: int
    # Every epoch run.
    epochs: tuple[EpochRecord, ...]
    # Wall seconds of the loop.
    seconds: float


@dataclass(frozen=True)
class TrainRun:
    """What a family's training run did; its best checkpoint is in ``out_dir``."""

    # Best dev value (what early stopping minimised) and its epoch.
    best_dev_ppl: float
    best_epoch: int
    # Every epoch run.
    epochs: tuple[EpochRecord, ...]
    # Where the checkpoint is, the device used, the parameter count, wall seconds in all.
    out_dir: Path
    device: str
    parameters: int
    seconds: float

    @classmethod
    def of(
        cls, fitted: FitResult, out_dir: Path, device: object, parameters: int, seconds: float
    ) -> TrainRun:
        return cls(
            fitted.best_dev_ppl,
            fitted.best_epoch,
            fitted.epochs,
            Path(out_dir),
            str(device),
            parameters,
            seconds,
        )

    def meta(self, **more: Any) -> dict[str, Any]:
        """The checkpoint's ``training.json``: the run, then the family's own entries."""
        return {
            "best_epoch": self.best_epoch,
            "best_dev_ppl": self.best_dev_ppl,
            "epochs": [asdict(e) for e in self.epochs],
            **more,
            "device": self.device,
            "seconds": self.seconds,
        }


def _agree(values: Sequence[float], rel_tol: float) -> bool:
    """Whether the processes' values are the same (within ``rel_tol``; NaN as NaN)."""
    first = values[0]
    return all(
        (math.isnan(v) and math.isnan(first)) or math.isclose(v, first, rel_tol=rel_tol)
        for v in values
    )


def _agreed_dev_value(value: float, world: World, epoch: int) -> float:
    """The dev value, which every process must have computed alike: each scores its share of
    the dev set and the sums are added (rescorer.lm_models.distributed). ValueError when they
    differ."""
    values = all_gather_values(value, world)
    if not _agree(values, 1e-6):
        raise ValueError(
            f"epoch {epoch}: the processes' dev values differ ({values}); a family's dev "
            "evaluation under torchrun must add up each process's share over all of them "
            "(rescorer.lm_models.distributed.all_sum)"
        )
    return values[0]


def _check_same_weights(params: Sequence[nn.Parameter], world: World, epoch: int) -> None:
    """ValueError unless the trained parameters are the same in every process (a checksum):
    what a step that did not average its gradients would break."""
    with torch.no_grad():
        mine = sum(float(p.detach().double().sum()) for p in params)
    values = all_gather_values(mine, world)
    if not _agree(values, 1e-9):
        raise ValueError(
            f"epoch {epoch}: the processes' weights differ (checksums {values}): their "
            "gradients must be averaged every step "
            "(rescorer.lm_models.distributed.average_gradients)"
        )


def _budget_spent(t_start: float, budget: float, world: World) -> bool:
    """True once ``budget`` seconds have passed since ``t_start`` in any process (so that every
    process of a group stops after the same epoch)."""
    spent = 1.0 if time.perf_counter() - t_start >= budget else 0.0
    if world.parallel:
        (spent,) = all_sum((spent,), world)
    return spent > 0


def fit(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    step_fn: Callable[[Any], Step],
    epoch_batches_fn: Callable[[int], Iterable[Any]],
    evaluate_fn: Callable[[], DevResult | float],
    options: FitOptions,
    *,
    scheduler: torch.optim.lr_scheduler.LRScheduler | None = None,
    train_mode: Callable[[], None] | None = None,
    initial_dev_ppl: float = math.inf,
    start_epoch: int = 1,
    keeper: BestKeeper | None = None,
    on_epoch_end: Callable[[EpochRecord, BestKeeper], None] | None = None,
    prepare_fn: Callable[[Any], Any] | None = None,
) -> FitResult:
    """Train ``model`` epoch by epoch, keep and restore the weights of the best dev epoch.

    Per epoch: ``train_mode()`` (default ``model.train()``), ``epoch_batches_fn(epoch)`` (the
    epoch's batches, drawn lazily or not; the family owns its generators), then per batch
    ``step_fn(batch)``, ``zero_grad``, ``backward``, optional clipping of the optimizer's
    parameters, ``optimizer.step()`` and ``scheduler.step()``; then ``evaluate_fn()`` and
    :meth:`BestKeeper.update` (which may decay the learning rate or stop). ``initial_dev_ppl``
    is the value to beat (the initial weights are kept when no epoch beats it).

    A resumed run starts at ``start_epoch`` with its own ``keeper`` (which then stands for
    ``options.patience``, ``options.lr_decay`` and ``initial_dev_ppl``); ``on_epoch_end(record,
    keeper)`` runs after each epoch's early-stopping update (e.g. to save checkpoints; the epoch
    improved when ``keeper.best_epoch == record.epoch``).

    Inside a process group (torchrun, :mod:`rescorer.lm_models.distributed`) every process passes
    its own batches (drawn from its share of the data) and takes as many steps as the process with
    the fewest; the gradients are averaged after each backward pass, and ``evaluate_fn`` must
    return the value of the whole dev set in every process (each scoring its share, the sums
    added over the processes); a difference between the processes is a ValueError. The
    record's loss and tokens are totals over the processes, its steps each process's.
    """
    t_start = time.perf_counter()
    world = current_world() if options.data_parallel else World()
    broadcast_parameters(model, world)  # every process starts from the main one's weights
    if keeper is None:
        keeper = BestKeeper(model, options.patience, options.lr_decay, initial_dev_ppl)
    params = [p for group in optimizer.param_groups for p in group["params"]]
    cap = options.max_steps_per_epoch
    log: list[EpochRecord] = []
    show = options.progress and world.is_main
    # into a log file (no bar): a progress line a minute, unless INFO is off (--quiet)
    log_progress = not show and world.is_main and logger.isEnabledFor(logging.INFO)
    for epoch in range(start_epoch, options.epochs + 1):
        if keeper.stopped:
            break
        (train_mode or model.train)()
        batches = epoch_batches_fn(epoch)
        # this process's own batches, as many as every process has (a sequence is cut at once)
        lazy_common = world.parallel and not isinstance(batches, Sequence)
        if world.parallel and not lazy_common:
            batches = common_steps(batches, world)
        total = len(batches) if isinstance(batches, Sequence) else None
        if total is not None and cap is not None:
            total = min(total, cap)
        prefetcher = None
        if prepare_fn is not None:
            source = batches if cap is None else itertools.islice(batches, cap)
            if options.prefetch > 0:
                batches = prefetcher = Prefetcher(source, prepare_fn, options.prefetch)
            else:
                batches = map(prepare_fn, source)
        if lazy_common:  # a collective per batch: in this thread, after any prefetching
            batches = common_steps(batches, world)
        t0, loss_sum, count, tokens, steps = time.perf_counter(), 0.0, 0, 0, 0
        shown = told = t0
        bar = tqdm(
            batches,
            total=total,
            desc=f"{options.name} epoch {epoch}",
            unit="batch",
            disable=not show,
        )
        try:
            for n, batch in enumerate(bar):
                if cap is not None and n >= cap:
                    break
                step = step_fn(batch)
                optimizer.zero_grad(set_to_none=True)
                step.loss.backward()
                average_gradients(params, world)
                if options.grad_clip is not None:
                    nn.utils.clip_grad_norm_(params, options.grad_clip)
                optimizer.step()
                if scheduler is not None:
                    scheduler.step()
                logged = float(step.logged)
                if not (world.parallel or math.isfinite(logged)):  # a process group: below
                    raise TrainingDiverged(
                        f"{options.name} epoch {epoch} step {steps + 1}: the training loss is "
                        f"{logged} (training diverged); lower train.lr (now "
                        f"{optimizer.param_groups[0]['lr']:g}) or clip the gradients"
                    )
                loss_sum += logged
                count += step.count
                tokens += step.count if step.tokens is None else step.tokens
                steps += 1
                now = time.perf_counter()
                if log_progress and now - told >= PROGRESS_LOG_SECONDS:
                    told = now
                    logger.info(
                        "%s epoch %d: %s batches, train loss %.4f, %.0f tokens/s, %.0f s",
                        options.name,
                        epoch,
                        f"{steps}/{total}" if total is not None else steps,
                        loss_sum / max(count, 1),
                        tokens / (now - t0),
                        now - t0,
                    )
                if show and now - shown >= POSTFIX_SECONDS:
                    shown = now  # the bar redraws by itself; the figures need not change every step
                    bar.set_postfix(
                        loss=f"{loss_sum / max(count, 1):.3f}",
                        tok_s=f"{tokens / (now - t0):.0f}",
                        refresh=False,
                    )
        finally:
            if prefetcher is not None:  # stopped before the dev evaluation (and on errors)
                prefetcher.close()
        bar.close()
        seconds = time.perf_counter() - t0
        dev = evaluate_fn()
        if not isinstance(dev, DevResult):
            dev = DevResult(float(dev))
        if world.parallel:  # totals over the processes; each process took `steps` steps
            loss_sum, count, tokens = all_sum((loss_sum, count, tokens), world)
            count, tokens = int(count), int(tokens)
            dev = DevResult(_agreed_dev_value(dev.dev_ppl, world, epoch), dev.extra)
            _check_same_weights(params, world, epoch)
        if not (math.isfinite(loss_sum) and math.isfinite(dev.dev_ppl)):
            # every process sees the same totals, so every one stops here together
            raise TrainingDiverged(
                f"{options.name} epoch {epoch}: training loss {loss_sum / max(count, 1)}, dev "
                f"perplexity {dev.dev_ppl} (training diverged); lower train.lr (now "
                f"{optimizer.param_groups[0]['lr']:g}) or clip the gradients"
            )
        record = EpochRecord(
            epoch=epoch,
            train_loss=loss_sum / max(count, 1),
            dev_ppl=dev.dev_ppl,
            tokens=tokens,
            steps=steps,
            seconds=seconds,
            dev_seconds=time.perf_counter() - t0 - seconds,
            lr=optimizer.param_groups[0]["lr"],
            extra=dict(dev.extra),
        )
        log.append(record)
        (logger.info if world.is_main else logger.debug)(
            "%s epoch %d: train loss %.4f, dev %.3f%s, %d steps, %d tokens, %.1f s (%.0f tokens/s)",
            options.name,
            epoch,
            record.train_loss,
            record.dev_ppl,
            "".join(f", {k} {v:.3f}" for k, v in record.extra.items()),
            steps,
            tokens,
            seconds,
            tokens / max(seconds, 1e-9),
        )
        stop = keeper.update(epoch, dev.dev_ppl, optimizer)
        if on_epoch_end is not None:
            on_epoch_end(record, keeper)
        if stop:
            break
        if options.max_seconds is not None and _budget_spent(t_start, options.max_seconds, world):
            logger.info(
                "%s: time budget of %.0f s spent after epoch %d; stopping",
                options.name,
                options.max_seconds,
                epoch,
            )
            break
    keeper.restore()
    return FitResult(keeper.best_ppl, keeper.best_epoch, tuple(log), time.perf_counter() - t_start)
