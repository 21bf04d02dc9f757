"""Data-parallel training shared by every family: one process per device, started by torchrun.

    torchrun --nproc_per_node 2 -m rescorer.lm_models.fnlm.train CONFIG.json --out DIR
    torchrun --nnodes 2 --node_rank R --master_addr HOST --nproc_per_node 8
        -m rescorer.lm_models.lstm.train CONFIG.json --out DIR   # (one command line)

:func:`rescorer.lm_models.training.fit` uses what is here whenever a process group of more than one
process is up (:func:`init_world` starts it from torchrun's environment):

- each process trains on its own share of the data: a trainer keeps every ``size``-th
  document, sentence or row of the corpus (:func:`share`; the vocabulary is built from the
  whole corpus first, the same in every process), or reads only its own shards of a sharded
  corpus (:mod:`rescorer.lm_models.corpus_shards`), so that its training data take 1/N of the
  memory; the counts its vocabulary comes from are then each process's own shards' merged over the
  processes (:func:`all_merged`; counts of many distinct keys, such as the FNLM's n-gram
  patterns, by owner process: :func:`total_counts`);
- every process starts from the main process's weights (:func:`broadcast_parameters`) and
  draws its own batches from its own share (its generators seeded with :func:`rank_seed`);
- every process takes the same number of steps in an epoch, as many as the process with the
  fewest batches has (:func:`common_steps`; the others' surplus batches sit that epoch out), so
  that none waits forever in a collective;
- after each backward pass the gradients are averaged over the processes in one collective
  (:func:`average_gradients`), as DDP does: with equal-sized batches whose losses are means, a
  step equals one step on all the processes' batches together;
- the dev set is scored in parts, each process its share of the dev batches (:func:`share`,
  :func:`share_slices`), and the sums (log-likelihood, tokens) are added over the processes
  (:func:`all_sum`): every process gets the value one process computes, up to the order of the
  float64 additions (:func:`rescorer.lm_models.training.fit` checks that the processes agree);
- the epoch's loss sums and token counts are summed over the processes.

What differs from one process is the batches: they are formed within each process's share, so
their composition and order are not those of one process, and a step averages N batches (N
times the batch size). CPU processes use the gloo backend, CUDA ones NCCL. Everything here is a
no-op in a single process, so single-process numerics do not change.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from rescorer.core.device import resolve_device
from rescorer.lm_models.corpus_shards import ShardStream

logger = logging.getLogger(__name__)

T = TypeVar("T")
M = TypeVar("M", bound="Mergeable")


@dataclass(frozen=True)
class World:
    """This process's place among the training processes."""

    # 0-based rank of this process, and how many processes train together.
    rank: int = 0
    size: int = 1
    # Rank on this machine (the CUDA device index under torchrun).
    local_rank: int = 0

    def __post_init__(self) -> None:
        if self.size < 1 or not 0 <= self.rank < self.size or self.local_rank < 0:
            raise ValueError(
                f"expected 0 <= rank < size and local_rank >= 0, got rank {self.rank}, size "
                f"{self.size}, local_rank {self.local_rank}"
            )

    @property
    def is_main(self) -> bool:
        """The process that logs, saves checkpoints and decides early stopping."""
        return self.rank == 0

    @property
    def parallel(self) -> bool:
        return self.size > 1


ONE_PROCESS = World()
"""The world of a process that trains alone (the default of the functions that take one)."""


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    try:
        return int(value)
    except ValueError:
        raise ValueError(
            f"environment variable {name}: expected an integer, got {value!r}"
        ) from None


def world_from_env() -> World:
    """The world torchrun describes (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``); one process
    when they are not set."""
    return World(_env_int("RANK", 0), _env_int("WORLD_SIZE", 1), _env_int("LOCAL_RANK", 0))


def process_device(spec: str | torch.device | None) -> torch.device:
    """The device this process trains on: :func:`rescorer.core.device.resolve_device` with
    torchrun's ``LOCAL_RANK``, and a CUDA device named without an index (``"cuda"``) taken as
    this process's own GPU, ``cuda:LOCAL_RANK`` (``cuda:0`` in one process)."""
    local = world_from_env().local_rank
    device = resolve_device(spec, local)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", local)
    return device


def init_world(device: torch.device | str = "cpu") -> World:
    """Join the process group torchrun set up (gloo on the CPU, NCCL on CUDA) and return this
    process's :class:`World`; a single process joins nothing, and a process already in a group
    (started by its caller) stays in it."""
    if dist.is_available() and dist.is_initialized():
        return current_world()
    world = world_from_env()
    if world.parallel:
        device = torch.device(device)
        backend = "nccl" if device.type == "cuda" else "gloo"
        if device.type == "cuda":
            torch.cuda.set_device(device)  # where NCCL's object collectives put their tensors
        dist.init_process_group(backend=backend)
        logger.info("process %d of %d joined the %s process group", world.rank, world.size, backend)
    return world


def close_world() -> bool:
    """Leave the process group at the end of a run: wait until every process is there (so none
    exits while another still talks to it), then destroy the group. True when there was a group
    to leave (then finish with :func:`end_process`); nothing for a single process."""
    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
        return True
    return False


def end_process(closed: bool) -> None:
    """The last call of a process that left a process group (``closed``, from
    :func:`close_world`): flush the logs and the standard streams and exit with status 0 at
    once, without the interpreter's teardown. A gloo process whose C++ state is torn down at
    interpreter exit now and then aborts there with "terminate called without an active
    exception" (no Python frame left; 1 run in 4 of a 2-process training on a loaded 2-core
    machine), which torchrun reports as a failed run although everything was written. Nothing
    happens when ``closed`` is False (one process, or a caller that keeps its group)."""
    if not closed:
        return
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def current_world() -> World:
    """The running process group as a :class:`World` (one process when there is none)."""
    if not (dist.is_available() and dist.is_initialized()):
        return World()
    return World(dist.get_rank(), dist.get_world_size(), _env_int("LOCAL_RANK", 0))


def barrier(world: World) -> None:
    """Wait until every process is here (nothing in one process)."""
    if world.parallel:
        dist.barrier()


# -- shares of the data and of the steps ----------------------------------------------------------


def share(items: Sequence[T], world: World) -> list[T]:
    """This process's share of ``items``: those at ``rank``, ``rank + size``, ...

    The shares are disjoint and cover every item; their sizes differ by at most one. Taken in
    turn rather than in blocks, so that each share samples the whole (a corpus ordered by genre
    or by length gives every process some of each).
    """
    if not world.parallel:
        return list(items)
    return list(items[world.rank :: world.size])


def share_slices(n: int, block: int, world: World) -> list[slice]:
    """This process's blocks of ``range(n)``: block k (rows ``k * block`` up to
    ``(k + 1) * block``) belongs to process ``k mod size``. A scorer that runs in batches of
    ``block`` rows forms the same batches on a process's blocks as one process on all rows."""
    if n < 0 or block < 1:
        raise ValueError(f"expected n >= 0 and block >= 1, got n {n}, block {block}")
    return [
        slice(lo, min(lo + block, n)) for lo in range(world.rank * block, n, world.size * block)
    ]


def rank_seed(seed: int, world: World) -> int:
    """The seed of this process's own draws (the order of its data, its dropout, its noise):
    ``seed`` itself on the main process, so that one process draws as it always did, and a
    different one on each other process, so that theirs do not repeat the main one's."""
    return seed + 1_000_003 * world.rank


def seed_process(seed: int, world: World) -> None:
    """Under torchrun, reseed torch's global generator (dropout) with :func:`rank_seed`; call it
    once the model is built (its weights come from the main process). Nothing in one process."""
    if world.parallel:
        torch.manual_seed(rank_seed(seed, world))


_END = object()


def common_steps(batches: Iterable[T], world: World) -> Iterable[T]:
    """This process's batches of an epoch, cut to the number that every process has.

    A sequence is cut at once, to the shortest process's length (one collective); any other
    iterable is drawn lazily and ends as soon as one process has no batch left (one small
    collective per batch). In one process the batches are returned as they are.
    """
    if not world.parallel:
        return batches
    if isinstance(batches, Sequence):
        counts = [int(c) for c in all_gather_values(len(batches), world)]
        n = min(counts)
        if world.is_main and sum(counts) > n * world.size:
            logger.info(
                "batches per process %s: %d steps each, %d batches left out this epoch",
                counts,
                n,
                sum(counts) - n * world.size,
            )
        return list(batches[:n])
    return _while_every_process_has(iter(batches), world)


def _while_every_process_has(batches: Iterator[T], world: World) -> Iterator[T]:
    while True:
        batch = next(batches, _END)
        if all_min(0 if batch is _END else 1, world) == 0:
            if batch is not _END:
                logger.debug("process %d: batches left out, another process ran out", world.rank)
            return
        yield batch  # type: ignore[misc]


# -- collectives ----------------------------------------------------------------------------------


def _device_of(module_or_tensor: nn.Module | torch.Tensor) -> torch.device:
    if isinstance(module_or_tensor, torch.Tensor):
        return module_or_tensor.device
    first = next(iter(module_or_tensor.parameters()), None)
    return torch.device("cpu") if first is None else first.device


def _collective_device(world: World) -> torch.device:
    """Where small collective tensors live: the process's GPU under NCCL, else the CPU."""
    if dist.get_backend() == "nccl":
        return torch.device("cuda", world.local_rank)
    return torch.device("cpu")


def broadcast_parameters(module: nn.Module, world: World) -> None:
    """Give every process the main process's parameters and buffers."""
    if not world.parallel:
        return
    with torch.no_grad():
        for tensor in [*module.parameters(), *module.buffers()]:
            dist.broadcast(tensor.data, src=0)


def average_gradients(params: Sequence[nn.Parameter], world: World) -> None:
    """Average the gradients of ``params`` over the processes, in one all-reduce.

    A parameter without a gradient on some process (not used by its batch) counts as a zero
    gradient there, so every process takes part in the same collective; one without a gradient
    on every process keeps none (the optimizer skips it, as in one process).
    """
    if not world.parallel or not params:
        return
    device = _device_of(params[0])
    dtype = torch.promote_types(torch.float32, params[0].dtype)
    pieces = [
        p.grad.reshape(-1).to(dtype)
        if p.grad is not None
        else torch.zeros(p.numel(), device=device, dtype=dtype)
        for p in params
    ]
    had = torch.tensor([p.grad is not None for p in params], dtype=dtype, device=device)
    flat = torch.cat([*pieces, had])
    dist.all_reduce(flat, op=dist.ReduceOp.SUM)
    flat /= world.size
    offset = 0
    for k, p in enumerate(params):
        n = p.numel()
        piece = flat[offset : offset + n].view_as(p).to(p.dtype)
        offset += n
        if p.grad is not None:
            p.grad.copy_(piece)
        elif flat[-len(params) + k] > 0:
            p.grad = piece.clone()


def all_sum(values: Iterable[float], world: World) -> list[float]:
    """Each value summed over the processes (float64; the same result in every process)."""
    values = [float(v) for v in values]
    if not world.parallel:
        return values
    t = torch.tensor(values, dtype=torch.float64, device=_collective_device(world))
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return t.cpu().tolist()


def all_min(value: int, world: World) -> int:
    """The smallest of the processes' ``value``."""
    if not world.parallel:
        return int(value)
    t = torch.tensor([int(value)], dtype=torch.int64, device=_collective_device(world))
    dist.all_reduce(t, op=dist.ReduceOp.MIN)
    return int(t.item())


def all_gather_values(value: float, world: World) -> list[float]:
    """Every process's ``value``, in rank order (float64)."""
    if not world.parallel:
        return [float(value)]
    t = torch.tensor([float(value)], dtype=torch.float64, device=_collective_device(world))
    out = [torch.zeros_like(t) for _ in range(world.size)]
    dist.all_gather(out, t)
    return [float(x.item()) for x in out]


def all_gather_objects(obj: Any, world: World) -> list[Any]:
    """Every process's picklable ``obj``, in rank order (e.g. word counts to merge)."""
    if not world.parallel:
        return [obj]
    everyone: list[Any] = [None] * world.size
    dist.all_gather_object(everyone, obj)
    return everyone


def broadcast_object(obj: Any, world: World) -> Any:
    """The main process's picklable ``obj`` in every process (what the others pass is unused)."""
    if not world.parallel:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def all_to_all_objects(pieces: Sequence[Any], world: World) -> list[Any]:
    """Piece r of this process's picklable ``pieces`` (one per process) goes to process r;
    returns the pieces every process sent this one, in rank order. One scatter per process, so
    a process receives only its own pieces."""
    if len(pieces) != world.size:
        raise ValueError(f"expected one piece per process ({world.size}), got {len(pieces)}")
    if not world.parallel:
        return list(pieces)
    received = []
    for src in range(world.size):
        box: list[Any] = [None]
        dist.scatter_object_list(box, list(pieces) if world.rank == src else None, src=src)
        received.append(box[0])
    return received


# -- counts merged over the processes -------------------------------------------------------------


class Mergeable(Protocol):
    """Counts that add up: ``type(c).merged([c1, c2, ...])`` is the counts of their parts
    together (e.g. :class:`rescorer.lm_models.lstm.data.CorpusCounts`)."""

    @classmethod
    def merged(cls: type[M], parts: Sequence[M]) -> M: ...


def all_merged(counts: M, world: World) -> M:
    """This process's ``counts`` merged with every other process's (``merged`` of all of them in
    rank order): the counts of every process's shards, the same in every process (one
    all-gather; in one process, ``merged([counts])``)."""
    return type(counts).merged(all_gather_objects(counts, world))


def counted_shards(
    directory: str | Path,
    kind: str,
    read: Callable[[Path], T],
    corpus: str,
    counts: M,
    add: Callable[[M, T], object],
    world: World,
) -> tuple[ShardStream[T], M]:
    """A trainer's streamed training corpus: this process's shards of the folder ``directory``
    (:meth:`ShardStream.open`: shards of ``kind``, read with the ``corpus`` reader ``read``),
    and the counts of every process's shards: ``counts`` after ``add(counts, part)`` for each
    shard of this process, read one at a time, merged over the processes (:func:`all_merged`),
    so that every process builds the vocabulary one process builds from the whole corpus."""
    stream = ShardStream.open(directory, kind, read, world.rank, world.size, corpus)
    return stream, all_merged(stream.count(counts, add), world)


_NO_COUNT = 2**62  # the smallest count of an owner without keys


def _owners(keys: np.ndarray, size: int) -> np.ndarray:
    """The process that sums each key's counts: a hash of the key's bytes mod ``size``, the
    same in every process and run (Python's own hash of bytes is salted per process)."""
    columns = np.ascontiguousarray(keys).view(np.uint8).reshape(len(keys), -1)
    h = np.zeros(len(keys), dtype=np.uint64)
    for j in range(columns.shape[1]):  # wrapping uint64 arithmetic
        h = h * np.uint64(1_000_003) + columns[:, j].astype(np.uint64)
    return (h % np.uint64(size)).astype(np.int64)


def _summed(keys: Sequence[np.ndarray], counts: Sequence[np.ndarray]) -> tuple[np.ndarray, Any]:
    """The total count of each distinct key of ``keys`` (concatenated), and each given key's
    position among them (the inverse of np.unique)."""
    every = np.concatenate(list(keys))
    distinct, inverse = np.unique(every, return_inverse=True)
    totals = np.bincount(
        inverse.reshape(-1), weights=np.concatenate(list(counts)), minlength=len(distinct)
    )
    return np.rint(totals).astype(np.int64), inverse.reshape(-1)


def total_counts(keys: np.ndarray, counts: np.ndarray, world: World) -> tuple[np.ndarray, int]:
    """Counts of keys summed over the processes, for keys too many to gather in every process.

    ``keys`` (1-D, any fixed-size dtype np.unique sorts, e.g. a pattern row viewed as one
    ``void`` value) were counted ``counts`` times in this process's data; a key may be listed
    more than once (counted in several parts). Returns, for each key as listed, its count over
    every process's data, and the smallest count of any key counted anywhere (0 without keys).
    Each key's counts are summed by one owner process (a hash of the key): every process sends
    each owner its keys, and receives its keys' totals back, so a process holds its own keys
    and about 1/N of all the distinct keys, never every process's. In one process: the sums of
    duplicate keys.
    """
    if len(keys) != len(counts):
        raise ValueError(f"expected a count per key, got {len(keys)} keys, {len(counts)} counts")
    counts = np.asarray(counts, dtype=np.int64)
    if not world.parallel:
        if not len(keys):
            return counts, 0
        totals, inverse = _summed([keys], [counts])
        return totals[inverse], int(totals.min())
    owner = _owners(keys, world.size)
    order = np.argsort(owner, kind="stable")
    bounds = np.searchsorted(owner[order], np.arange(world.size + 1))
    mine = [order[a:b] for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
    received = all_to_all_objects([(keys[m], counts[m]) for m in mine], world)
    # This process owns the keys it received: their totals, answered to each sender.
    totals, inverse = _summed([k for k, _ in received], [c for _, c in received])
    ends = np.cumsum([len(k) for k, _ in received])
    answers = [
        totals[inverse[end - len(k) : end]] for (k, _), end in zip(received, ends, strict=True)
    ]
    smallest = all_min(int(totals.min()) if len(totals) else _NO_COUNT, world)
    del received, inverse, totals
    out = np.empty(len(keys), dtype=np.int64)
    for positions, answer in zip(mine, all_to_all_objects(answers, world), strict=True):
        out[positions] = answer
    return out, (0 if smallest == _NO_COUNT else smallest)
