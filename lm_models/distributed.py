"""Data-parallel training shared by every family: one process per device, started by torchrun.

    torchrun --nproc_per_node 2 -m lm_models.fnlm.train CONFIG.json --out DIR
    torchrun --nnodes 2 --node_rank R --master_addr HOST --nproc_per_node 8
        -m lm_models.lbl.train CONFIG.json --out DIR   # (one command line)

:func:`lm_models.training.fit` uses what is here whenever a process group of more than one
process is up (:func:`init_world` starts it from torchrun's environment), so a family's trainer
needs no code of its own beyond saving its checkpoint on the main process only:

- every process starts from the main process's weights (:func:`broadcast_parameters`);
- each epoch's batches (drawn by every process from the same seeded generator, so the same
  list everywhere; :func:`check_same_batches` refuses lists that differ) are cut into equal
  contiguous shares, one per process (:func:`shard`; the last ``len % size`` batches are left
  out so that every process takes the same number of steps and none waits forever);
- after each backward pass the gradients are averaged over the processes in one collective
  (:func:`average_gradients`), as DDP does: with equal-sized batches whose losses are means,
  a step equals one step on all the processes' batches together;
- the epoch's loss sums and token counts are summed over the processes, and the main process's
  dev value decides early stopping everywhere (:func:`broadcast_value`).

CPU processes use the gloo backend, CUDA ones NCCL. Everything here is a no-op in a single
process, so single-process numerics do not change.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import torch
import torch.distributed as dist
from torch import nn

logger = logging.getLogger(__name__)

T = TypeVar("T")


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


def init_world(device: torch.device | str = "cpu") -> World:
    """Join the process group torchrun set up (gloo on the CPU, NCCL on CUDA) and return this
    process's :class:`World`; a single process joins nothing."""
    world = world_from_env()
    if world.parallel and not dist.is_initialized():
        backend = "nccl" if torch.device(device).type == "cuda" else "gloo"
        dist.init_process_group(backend=backend)
        logger.info("process %d of %d joined the %s process group", world.rank, world.size, backend)
    return world


def close_world() -> None:
    """Leave the process group at the end of a run: wait until every process is there (so none
    exits while another still talks to it: a gloo process torn down under a live peer aborts
    with "terminate called without an active exception"), then destroy the group. Nothing for
    a single process."""
    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


def current_world() -> World:
    """The running process group as a :class:`World` (one process when there is none)."""
    if not (dist.is_available() and dist.is_initialized()):
        return World()
    return World(dist.get_rank(), dist.get_world_size(), _env_int("LOCAL_RANK", 0))


def shard(items: Sequence[T], world: World) -> list[T]:
    """This process's equal contiguous share of ``items`` (the remainder is left out)."""
    if not world.parallel:
        return list(items)
    per = len(items) // world.size
    return list(items[world.rank * per : (world.rank + 1) * per])


def _device_of(module_or_tensor: nn.Module | torch.Tensor) -> torch.device:
    if isinstance(module_or_tensor, torch.Tensor):
        return module_or_tensor.device
    first = next(iter(module_or_tensor.parameters()), None)
    return torch.device("cpu") if first is None else first.device


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
    gradient there, so every process takes part in the same collective.
    """
    if not world.parallel or not params:
        return
    device = _device_of(params[0])
    grads = [
        p.grad.reshape(-1) if p.grad is not None else torch.zeros(p.numel(), device=device)
        for p in params
    ]
    dtype = torch.promote_types(torch.float32, grads[0].dtype)
    flat = torch.cat([g.to(dtype) for g in grads])
    dist.all_reduce(flat, op=dist.ReduceOp.SUM)
    flat /= world.size
    offset = 0
    for p in params:
        n = p.numel()
        piece = flat[offset : offset + n].view_as(p).to(p.dtype)
        if p.grad is None:
            p.grad = piece.clone()
        else:
            p.grad.copy_(piece)
        offset += n


def all_sum(values: Iterable[float], world: World) -> list[float]:
    """Each value summed over the processes (float64)."""
    values = [float(v) for v in values]
    if not world.parallel:
        return values
    device = torch.device("cuda", world.local_rank) if dist.get_backend() == "nccl" else "cpu"
    t = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return t.cpu().tolist()


def broadcast_value(value: float, world: World) -> float:
    """The main process's ``value`` on every process."""
    if not world.parallel:
        return float(value)
    device = torch.device("cuda", world.local_rank) if dist.get_backend() == "nccl" else "cpu"
    t = torch.tensor([float(value)], dtype=torch.float64, device=device)
    dist.broadcast(t, src=0)
    return float(t.item())


def fingerprint(batches: Sequence[Any]) -> str:
    """A digest of a list of batches (tensors, nested lists/tuples of ints, strings)."""
    h = hashlib.blake2b(digest_size=16)

    def add(x: Any) -> None:
        if isinstance(x, torch.Tensor):
            h.update(str((tuple(x.shape), str(x.dtype))).encode())
            h.update(x.detach().cpu().contiguous().numpy().tobytes())
        elif isinstance(x, (list, tuple)):
            h.update(b"[%d" % len(x))
            for y in x:
                add(y)
            h.update(b"]")
        else:
            h.update(repr(x).encode())

    add(list(batches))
    return h.hexdigest()


def check_same_batches(batches: Sequence[Any], world: World, epoch: int) -> None:
    """ValueError unless every process drew the same list of batches for ``epoch``."""
    if not world.parallel:
        return
    mine = fingerprint(batches)
    everyone: list[Any] = [None] * world.size
    dist.all_gather_object(everyone, mine)
    if len(set(everyone)) != 1:
        raise ValueError(
            f"epoch {epoch}: the processes drew different batches (digests {everyone}); "
            "data-parallel training needs each epoch's batch list drawn from a generator seeded "
            "the same way in every process"
        )
