"""Turning encoded sentences into length-bucketed, padded training batches, and token rows into
shuffled batches of rows (:func:`row_batches`)."""

from __future__ import annotations

import random
from collections.abc import Iterable, Iterator, Mapping, Sequence, Sized
from dataclasses import dataclass
from typing import Any, TypeVar

import torch


@dataclass(frozen=True)
class Example:
    """One encoded sentence: model inputs (``<s> w1 .. wn``), targets (``w1 .. wn </s>``)."""

    inputs: tuple[int, ...]
    targets: tuple[int, ...]
    # Context record of the sentence's document (e.g. {"genre": "news"}); None: no context.
    record: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        if len(self.inputs) != len(self.targets) or not self.inputs:
            raise ValueError(
                f"inputs and targets must have the same non-zero length, got "
                f"{len(self.inputs)} and {len(self.targets)}"
            )

    def __len__(self) -> int:
        return len(self.inputs)


@dataclass(frozen=True)
class Batch:
    """Padded tensors of a batch; positions beyond ``lengths`` hold ``pad_id``."""

    inputs: torch.Tensor  # (N, T) long
    targets: torch.Tensor  # (N, T) long
    lengths: torch.Tensor  # (N,) long
    records: tuple[Mapping[str, Any] | None, ...]

    @property
    def num_tokens(self) -> int:
        return int(self.lengths.sum())

    def mask(self) -> torch.Tensor:
        """(N, T) bool, True at real (non-padding) positions."""
        steps = torch.arange(self.inputs.shape[1], device=self.lengths.device)
        return steps[None, :] < self.lengths[:, None]

    def to(self, device: torch.device | str) -> Batch:
        return Batch(
            self.inputs.to(device), self.targets.to(device), self.lengths.to(device), self.records
        )


def bucket_batches(
    lengths: Sequence[int], batch_tokens: int, seed: int, shuffle: bool = True
) -> list[list[int]]:
    """Group example indices into batches of similar length.

    Each batch holds at most ``batch_tokens`` padded tokens (``len(batch) * longest``), except that
    a single example longer than that forms a batch of its own. Sorting by length (ties in random
    order) keeps padding small; the order of batches is shuffled with ``seed``.
    """
    if batch_tokens < 1:
        raise ValueError(f"batch_tokens must be >= 1, got {batch_tokens}")
    rng = random.Random(seed)
    keys = [(n, rng.random() if shuffle else i) for i, n in enumerate(lengths)]
    order = sorted(range(len(lengths)), key=keys.__getitem__)
    batches: list[list[int]] = []
    current: list[int] = []
    longest = 0
    for idx in order:
        n = lengths[idx]
        if current and max(longest, n) * (len(current) + 1) > batch_tokens:
            batches.append(current)
            current, longest = [], 0
        current.append(idx)
        longest = max(longest, n)
    if current:
        batches.append(current)
    if shuffle:
        rng.shuffle(batches)
    return batches


PART_SEED_STEP = 1_000_003  # seed of part p: seed + PART_SEED_STEP * p


def bucket_parts(
    parts: Iterable[tuple[int, Sequence[Example]]], batch_tokens: int, seed: int
) -> Iterator[list[Example]]:
    """Batches of examples that come in parts (a corpus's shards, read one at a time).

    ``parts`` yields ``(part id, examples)``; each part is cut into batches on its own by
    :func:`bucket_batches` seeded ``seed + PART_SEED_STEP * part id`` (part 0: ``seed``, so one
    part gives the batches of :func:`bucket_batches` on it), and its batches are yielded before
    the next part is drawn; nothing of a part is kept once the next one is asked for.
    """
    for part_id, examples in parts:
        lengths = [len(e) for e in examples]
        for idxs in bucket_batches(lengths, batch_tokens, seed + PART_SEED_STEP * part_id):
            yield [examples[i] for i in idxs]
        del examples  # before `parts` reads the next part


P = TypeVar("P", bound=Sized)


def row_batches(
    parts: Iterable[P], batch_size: int, generator: torch.Generator
) -> Iterator[tuple[P, torch.Tensor]]:
    """Batches of rows that come in parts (all the rows in one part, or a corpus's shards read
    one at a time), as ``(part, row indices)``: each part's ``len(part)`` rows in an order drawn
    with ``generator`` (``torch.randperm``), cut into batches of ``batch_size`` (the part's last
    one smaller). A part's batches all come before the next part is drawn, and nothing of a part
    is kept once the next one is asked for."""
    for part in parts:
        for idx in torch.randperm(len(part), generator=generator).split(batch_size):
            yield part, idx
        del part  # before `parts` reads the next part


def collate(examples: Sequence[Example], pad_id: int) -> Batch:
    """Pad ``examples`` into one :class:`Batch`."""
    if not examples:
        raise ValueError("cannot collate an empty batch")
    width = max(len(e) for e in examples)
    inputs = torch.full((len(examples), width), pad_id, dtype=torch.long)
    targets = torch.full((len(examples), width), pad_id, dtype=torch.long)
    for row, ex in enumerate(examples):
        inputs[row, : len(ex)] = torch.tensor(ex.inputs, dtype=torch.long)
        targets[row, : len(ex)] = torch.tensor(ex.targets, dtype=torch.long)
    lengths = torch.tensor([len(e) for e in examples], dtype=torch.long)
    return Batch(inputs, targets, lengths, tuple(e.record for e in examples))
