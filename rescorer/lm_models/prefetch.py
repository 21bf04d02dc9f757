"""Prepare the next batches in a background thread while the current one trains.

A training step on a GPU leaves the Python thread idle while the kernels run; the work that
turns a batch of examples into tensors (collating, moving to the device, embedding a text
context with a frozen encoder: about 0.12 s a 32k-token batch for ``hash:256``,
``bench/results/context_text.md``) can run in that time. :class:`Prefetcher` runs
``prepare(item)`` for the items of an iterable in one worker thread, up to ``depth`` items ahead
of the consumer, and hands the results over in order.

- The items and their order are those of ``prepare`` applied in a plain loop: the worker adds
  nothing, so training with and without prefetching gives the same numbers as long as
  ``prepare`` uses no random generator the training step also draws from.
- An exception raised by the source or by ``prepare`` is raised again in the consumer, at the
  item where it happened (the items before it are delivered first).
- :meth:`Prefetcher.close` (or leaving a ``with`` block) stops the worker and waits for it, so
  that nothing ``prepare`` touches (e.g. a text encoder's cache) is used by two threads once the
  consumer goes on; stopping early (a step cap, an error in the step) leaves no thread behind.

Torch operations release the GIL, so ``prepare``'s Python work overlaps with the step's kernels;
on a CPU with every core busy there is little to gain, and the epoch loop's ``prefetch=0``
(:class:`rescorer.lm_models.training.FitOptions`) prepares inline, without a Prefetcher.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Generic, TypeVar

S = TypeVar("S")
T = TypeVar("T")

_POLL_SECONDS = 0.05  # how often a blocked worker checks whether it was stopped


class _End:
    """The worker's last message: the source is exhausted."""


class _Failed:
    """The worker's last message: the source or ``prepare`` raised ``error``."""

    def __init__(self, error: BaseException):
        self.error = error


class Prefetcher(Generic[S, T]):
    """Iterate ``prepare(item)`` over ``source``, computed up to ``depth`` items ahead in one
    background thread (``depth >= 1``). Iterate it once; close it when done."""

    def __init__(self, source: Iterable[S], prepare: Callable[[S], T], depth: int = 2):
        if depth < 1:
            raise ValueError(f"depth must be >= 1 (prepare inline instead of 0), got {depth}")
        self._queue: queue.Queue[object] = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._done = False
        self._thread = threading.Thread(
            target=self._work, args=(iter(source), prepare), name="prefetch", daemon=True
        )
        self._thread.start()

    def _put(self, message: object) -> bool:
        """Queue ``message`` unless stopped first; whether it was queued."""
        while not self._stop.is_set():
            try:
                self._queue.put(message, timeout=_POLL_SECONDS)
                return True
            except queue.Full:
                continue
        return False

    def _work(self, items: Iterator[S], prepare: Callable[[S], T]) -> None:
        try:
            for item in items:
                if self._stop.is_set() or not self._put(prepare(item)):
                    return
        except BaseException as err:  # noqa: BLE001  (handed to the consumer, raised there)
            self._put(_Failed(err))
            return
        self._put(_End())

    def __iter__(self) -> Iterator[T]:
        return self

    def __next__(self) -> T:
        if self._done:
            raise StopIteration
        message = self._queue.get()
        if isinstance(message, _End):
            self._done = True
            raise StopIteration
        if isinstance(message, _Failed):
            self._done = True
            raise message.error
        return message  # type: ignore[return-value]

    def close(self) -> None:
        """Stop the worker (after the item it is preparing) and wait for it to end."""
        self._done = True
        self._stop.set()
        while self._thread.is_alive():
            with contextlib.suppress(queue.Empty):  # room for a worker blocked on a full queue
                self._queue.get_nowait()
            self._thread.join(timeout=_POLL_SECONDS)

    @property
    def running(self) -> bool:
        """Whether the worker thread is still alive."""
        return self._thread.is_alive()

    def __enter__(self) -> Prefetcher[S, T]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
