"""Prefetching batches in a background thread (rescorer.lm_models.prefetch) and its use by the epoch
loop and the LSTM trainer: the same items in the same order, errors raised in the consumer, no
thread left behind, and training numbers that do not depend on it."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from torch import nn

from rescorer.lm_models.checkpoint import load_checkpoint
from rescorer.lm_models.lstm.train import TrainConfig, train
from rescorer.lm_models.prefetch import Prefetcher
from rescorer.lm_models.training import FitOptions, Step, fit
from tests.lm_models.lstm.test_data import previous_config


def wait_for(condition, seconds: float = 5.0) -> bool:  # type: ignore[no-untyped-def]
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if condition():
            return True
        time.sleep(0.005)
    return condition()


def test_items_come_in_order_prepared_in_another_thread() -> None:
    threads: set[int] = set()

    def prepare(i: int) -> int:
        threads.add(threading.get_ident())
        return i * i

    with Prefetcher(range(50), prepare, depth=3) as feed:
        assert list(feed) == [i * i for i in range(50)]
        assert list(feed) == []  # exhausted: iterated once
    assert threads and threading.get_ident() not in threads
    assert not feed.running


def test_it_prepares_ahead_but_no_more_than_depth() -> None:
    prepared: list[int] = []

    def prepare(i: int) -> int:
        prepared.append(i)
        return i

    feed = Prefetcher(itertools.count(), prepare, depth=2)
    try:
        assert next(feed) == 0
        # while the consumer holds item 0, items 1 and 2 fill the queue and item 3 waits for room
        assert wait_for(lambda: len(prepared) >= 4)
        time.sleep(0.1)
        assert len(prepared) == 4
        assert [next(feed) for _ in range(3)] == [1, 2, 3]
    finally:
        feed.close()
    assert not feed.running
    done = len(prepared)
    time.sleep(0.1)
    assert len(prepared) == done  # nothing prepared after close


@pytest.mark.parametrize("where", ["source", "prepare"])
def test_an_error_is_raised_in_the_consumer_after_the_items_before_it(where: str) -> None:
    def source() -> Iterator[int]:
        for i in range(10):
            if where == "source" and i == 3:
                raise KeyError("shard 3 is missing")
            yield i

    def prepare(i: int) -> int:
        if where == "prepare" and i == 3:
            raise ValueError("bad record in batch 3")
        return i

    feed = Prefetcher(source(), prepare, depth=2)
    got = []
    with pytest.raises(KeyError if where == "source" else ValueError, match="3"):
        for item in feed:
            got.append(item)
    assert got == [0, 1, 2]
    assert wait_for(lambda: not feed.running)
    assert list(feed) == []


def test_closing_early_stops_a_worker_blocked_on_a_full_queue() -> None:
    feed = Prefetcher(itertools.count(), lambda i: i, depth=1)
    assert next(feed) == 0
    assert wait_for(lambda: feed._queue.full())  # the worker now waits for room
    feed.close()
    assert not feed.running
    with pytest.raises(StopIteration):
        next(feed)


def test_depth_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="depth must be >= 1"):
        Prefetcher([1], lambda i: i, depth=0)
    with pytest.raises(ValueError, match="prefetch must be >= 0"):
        FitOptions(epochs=1, prefetch=-1)


def fit_counting(prefetch: int, cap: int | None) -> tuple[list[int], list[bool]]:
    """A one-weight model fitted on 10 batches a epoch for 2 epochs; which batches were prepared
    and, at each dev evaluation, whether a prefetch thread was still alive."""
    model = nn.Linear(1, 1, bias=False)
    # inputs of 100..209: a step of 0.1 would diverge (an infinite loss stops training)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-7)
    prepared: list[int] = []
    alive_at_dev: list[bool] = []

    def prepare(i: int) -> torch.Tensor:
        prepared.append(i)
        return torch.tensor([[float(i)]])

    def step(x: torch.Tensor) -> Step:
        loss = (model(x) - 2 * x).pow(2).mean()
        return Step(loss, loss.detach(), 1, None)

    def dev() -> float:
        alive_at_dev.append(any(t.name == "prefetch" for t in threading.enumerate()))
        return 1.0 + float(model.weight.detach())

    fit(
        model,
        optimizer,
        step,
        lambda epoch: iter(range(epoch * 100, epoch * 100 + 10)),
        dev,
        FitOptions(epochs=2, progress=False, max_steps_per_epoch=cap, prefetch=prefetch),
        prepare_fn=prepare,
    )
    return prepared, alive_at_dev


@pytest.mark.parametrize("prefetch", [0, 2])
def test_fit_prepares_each_step_batch_once_and_stops_the_thread_before_dev(prefetch: int) -> None:
    prepared, alive = fit_counting(prefetch, cap=None)
    assert prepared == [*range(100, 110), *range(200, 210)]
    assert alive == [False, False]
    prepared, alive = fit_counting(prefetch, cap=3)  # no batch beyond the cap is prepared
    assert prepared == [100, 101, 102, 200, 201, 202]
    assert alive == [False, False]


def lstm_with_previous_text(tmp_path: Path, prefetch: int) -> TrainConfig:
    noise = {"substitution": 0.2, "deletion": 0.1, "insertion": 0.1, "seed": 1}
    cfg = previous_config(tmp_path, {"sentences": 2, "encoder": "hash:16", "noise": noise})
    as_json = cfg.to_json()
    as_json["train"].update(epochs=2, prefetch=prefetch, batch_tokens=48)
    return TrainConfig.from_json(as_json)


def test_lstm_training_is_the_same_with_and_without_prefetching(tmp_path: Path) -> None:
    runs = {}
    for prefetch in (0, 2):
        cfg = lstm_with_previous_text(tmp_path, prefetch)
        runs[prefetch] = train(cfg, tmp_path, tmp_path / f"p{prefetch}", progress=False)
    assert [e.dev_ppl for e in runs[0].epochs] == [e.dev_ppl for e in runs[2].epochs]
    assert [e.train_loss for e in runs[0].epochs] == [e.train_loss for e in runs[2].epochs]
    a, _, _ = load_checkpoint(tmp_path / "p0" / "last")
    b, _, _ = load_checkpoint(tmp_path / "p2" / "last")
    for (name, pa), pb in zip(a.state_dict().items(), b.state_dict().values(), strict=True):
        assert torch.equal(pa, pb), name
    # the batches had a text context (what the thread embeds ahead of the step)
    assert [v.kind for v in a.config.context_vars] == ["text"]
