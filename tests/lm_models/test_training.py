"""The shared epoch loop (rescorer.lm_models.training.fit): early stopping, lr decay, step cap."""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence

import pytest
import torch
from torch import nn

from rescorer.lm_models.training import BestKeeper, DevResult, EpochRecord, FitOptions, Step, fit


def scripted_run(
    dev_values: Sequence[float], initial_dev_ppl: float = math.inf, **options: object
) -> tuple[nn.Linear, torch.optim.SGD, list[torch.Tensor], list[float], object]:
    """fit() on a 1-parameter model whose dev values are scripted; each epoch's weights after
    training and the lr seen by each step are recorded."""
    torch.manual_seed(0)
    model = nn.Linear(1, 1, bias=False)
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    after_epoch: list[torch.Tensor] = []
    step_lrs: list[float] = []
    values = iter(dev_values)

    def batches(epoch: int) -> Iterator[int]:
        return iter(range(4))

    def step(batch: int) -> Step:
        step_lrs.append(optimizer.param_groups[0]["lr"])
        loss = model(torch.ones(1, 1)).sum() * 0.1  # gradient 0.1: each step moves w by -0.1 lr
        return Step(loss, float(loss.detach()), 1)

    def evaluate() -> DevResult:
        after_epoch.append(model.weight.detach().clone())
        return DevResult(next(values))

    opts = FitOptions(len(dev_values), progress=False, **options)  # type: ignore[arg-type]
    result = fit(model, optimizer, step, batches, evaluate, opts, initial_dev_ppl=initial_dev_ppl)
    return model, optimizer, after_epoch, step_lrs, result


def test_early_stopping_after_patience_bad_epochs_restores_the_best_weights() -> None:
    model, _, after_epoch, _, result = scripted_run([5.0, 3.0, 4.0, 4.5, 2.0], patience=2)
    # Epoch 2 is the best; epochs 3 and 4 are no better, so epoch 5 never runs.
    assert [e.epoch for e in result.epochs] == [1, 2, 3, 4]
    assert result.best_epoch == 2 and result.best_dev_ppl == 3.0
    assert torch.equal(model.weight, after_epoch[1])
    assert not torch.equal(model.weight, after_epoch[3])
    assert not model.training


def test_lr_decays_by_lr_decay_after_a_bad_epoch_only() -> None:
    _, optimizer, _, lrs, result = scripted_run([5.0, 6.0, 4.0, 7.0], patience=3, lr_decay=0.5)
    # Steps of epochs 1, 2 at lr 1; epoch 2 bad -> 0.5 in epoch 3; epoch 3 good; epoch 4 bad.
    assert lrs == [1.0] * 8 + [0.5] * 8
    assert [e.lr for e in result.epochs] == [1.0, 1.0, 0.5, 0.5]
    assert optimizer.param_groups[0]["lr"] == 0.25


def test_max_steps_per_epoch_caps_the_steps() -> None:
    _, _, after_epoch, lrs, result = scripted_run([3.0, 2.0], max_steps_per_epoch=3)
    assert len(lrs) == 6
    assert [(e.steps, e.tokens) for e in result.epochs] == [(3, 3), (3, 3)]
    # Plain SGD, gradient 0.1 per step: three steps per epoch move the weight by 0.3.
    assert float(after_epoch[1] - after_epoch[0]) == pytest.approx(-0.3)


def test_max_seconds_stops_after_the_epoch_that_spends_the_budget(monkeypatch) -> None:
    """A fake clock that only steps move (2.5 s each, 4 steps per epoch: 10 s an epoch) and a
    budget of 25 s: epochs 1-3 run (the third starts at 20 s, under the budget; it ends at 30 s),
    the fourth never starts, and the best epoch's weights are restored as usual."""
    import rescorer.lm_models.training as training

    now = [0.0]
    monkeypatch.setattr(training.time, "perf_counter", lambda: now[0])
    model = nn.Linear(1, 1, bias=False)
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    dev = iter([5.0, 4.0, 3.0, 2.0, 1.0])

    def step(batch: int) -> Step:
        now[0] += 2.5
        loss = model(torch.ones(1, 1)).sum()
        return Step(loss, float(loss.detach()), 1)

    def run(budget: float | None) -> object:
        opts = FitOptions(5, progress=False, max_seconds=budget)
        return fit(model, optimizer, step, lambda e: range(4), lambda: DevResult(next(dev)), opts)

    result = run(25.0)
    assert [e.epoch for e in result.epochs] == [1, 2, 3]
    assert result.best_epoch == 3 and result.best_dev_ppl == 3.0
    dev = iter([5.0, 4.0, 3.0, 2.0, 1.0])
    assert len(run(None).epochs) == 5


def test_a_run_without_progress_bars_logs_a_progress_line_a_minute(monkeypatch, caplog) -> None:
    """Into a log file (no progress bar) a long epoch is not silent: a line once
    PROGRESS_LOG_SECONDS have passed since the epoch began or the last line, with the batches
    done, the loss and the speed. A fake clock moved 25 s by each step, 4 steps of 1,000 tokens
    an epoch: a line after step 3 of each epoch (75 s in; step 4 is 25 s after it). None with a
    bar (it shows the same), none when INFO is off (--quiet)."""
    import logging

    import rescorer.lm_models.training as training

    now = [0.0]
    monkeypatch.setattr(training.time, "perf_counter", lambda: now[0])
    model = nn.Linear(1, 1, bias=False)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

    def step(batch: int) -> Step:
        now[0] += 25.0
        loss = model(torch.ones(1, 1)).sum()
        return Step(loss, 2.0 * 1000, 1000)

    def run(progress: bool) -> list[str]:
        caplog.clear()
        opts = FitOptions(2, progress=progress, name="LSTM")
        fit(model, optimizer, step, lambda e: list(range(4)), lambda: DevResult(1.0), opts)
        return [r.getMessage() for r in caplog.records if "batches" in r.getMessage()]

    line = "LSTM epoch {}: 3/4 batches, train loss 2.0000, 40 tokens/s, 75 s"
    with caplog.at_level(logging.INFO, logger="rescorer.lm_models.training"):
        assert run(False) == [line.format(1), line.format(2)]
        assert run(True) == []  # the bar shows it (drawn nowhere here: not a terminal)
    with caplog.at_level(logging.WARNING, logger="rescorer.lm_models.training"):
        assert run(False) == []


def test_max_seconds_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_seconds must be > 0"):
        FitOptions(3, max_seconds=0)


def test_train_loss_is_the_logged_sum_over_the_counts_and_extras_are_kept() -> None:
    model = nn.Linear(1, 1, bias=False)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)

    def step(batch: int) -> Step:
        loss = model(torch.ones(1, 1)).sum()
        return Step(loss, float(batch), 2)  # logged sums 1 + 2 + 3 over 6 units

    result = fit(
        model,
        optimizer,
        step,
        lambda epoch: [1, 2, 3],
        lambda: DevResult(1.5, {"other": 2.5}),
        FitOptions(epochs=1, progress=False),
    )
    assert result.epochs[0].train_loss == 1.0 and result.epochs[0].tokens == 6
    assert result.epochs[0].extra == {"other": 2.5}


def test_no_epoch_beating_the_initial_value_keeps_the_initial_weights() -> None:
    model, _, _, _, result = scripted_run([5.0, 6.0], initial_dev_ppl=4.0)
    torch.manual_seed(0)
    assert torch.equal(model.weight, nn.Linear(1, 1, bias=False).weight)
    assert result.best_epoch == 0 and result.best_dev_ppl == 4.0
    assert len(result.epochs) == 2  # patience None: every epoch runs
    assert math.isfinite(result.seconds)


def test_resumed_keeper_state_and_the_epoch_hook() -> None:
    model = nn.Linear(1, 1, bias=False)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    seen: list[tuple[int, bool, int]] = []

    def step(batch: int) -> Step:
        return Step(model(torch.ones(1, 1)).sum(), 1.0, 1, tokens=5)

    def hook(record: EpochRecord, keeper: BestKeeper) -> None:
        seen.append((record.epoch, keeper.best_epoch == record.epoch, keeper.bad_epochs))

    values = iter([2.0, 3.0, 3.0])
    keeper = BestKeeper(model, 2, best_ppl=2.5, best_epoch=3, bad_epochs=1, keep_weights=False)
    result = fit(
        model,
        optimizer,
        step,
        lambda epoch: [0, 1],
        lambda: next(values),
        FitOptions(epochs=10, patience=2, progress=False),
        start_epoch=4,
        keeper=keeper,
        on_epoch_end=hook,
    )
    # Epoch 4 improves on the resumed best (2.5), epochs 5 and 6 do not: patience 2 stops.
    assert seen == [(4, True, 0), (5, False, 1), (6, False, 2)]
    assert result.best_epoch == 4 and [e.epoch for e in result.epochs] == [4, 5, 6]
    assert result.epochs[0].tokens == 10 and result.epochs[0].train_loss == 1.0
    # A keeper that has already stopped runs no epoch.
    stopped = BestKeeper(model, 1, bad_epochs=1, keep_weights=False)
    again = fit(
        model,
        optimizer,
        step,
        lambda epoch: [0],
        lambda: 1.0,
        FitOptions(epochs=10, progress=False),
        keeper=stopped,
    )
    assert again.epochs == ()


def test_gradient_clipping_bounds_the_update() -> None:
    model = nn.Linear(1, 1, bias=False)
    with torch.no_grad():
        model.weight.fill_(0.0)
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)

    def step(batch: int) -> Step:
        return Step(model(torch.ones(1, 1)).sum() * 100.0, 0.0, 1)  # gradient 100

    fit(
        model,
        optimizer,
        step,
        lambda epoch: [0],
        lambda: 1.0,
        FitOptions(epochs=1, grad_clip=0.5, progress=False),
    )
    assert float(model.weight.detach()) == pytest.approx(-0.5)
