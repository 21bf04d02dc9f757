"""Resumable CUE stages: what a stage needs to go on after a kill, saved after every epoch.

A stage of :mod:`rescorer.lm_models.cue.train` given a ``resume`` folder writes, after each epoch,
the weights it trains (the current ones and the best epoch's), the optimizer and the one-cycle
schedule, its random generators (batch order, part order, proxy noise, dropout) and its epoch
log, as one set swapped in whole (:func:`rescorer.core.output.atomic_dir`): a kill leaves the
previous epoch's set or the new one. Called again with the same folder, the stage loads the set
and goes on with the next epoch; on one device it ends with the weights an uninterrupted run
reaches. A set written by another run (other options, other trained parameters, another stage)
is refused with a ValueError that says what differs. Only the trained parameters are saved:
the frozen parts come from the model the caller builds, as they did the first time.

Tensors go to safetensors, everything else to JSON (no pickle).
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file
from torch import nn

from rescorer.core.output import atomic_dir
from rescorer.lm_models.checkpoint import (
    load_optimizer_state,
    save_optimizer_state,
    save_tensors,
    sync_files,
)
from rescorer.lm_models.training import EpochRecord

# Version of the folder's layout (a folder of another version is refused).
RESUME_FORMAT = 1
STATE_FILE = "stage.json"


@dataclass(frozen=True)
class Generators:
    """The random generators of a stage's loop."""

    # Batch order and proxy noise.
    batches: torch.Generator
    # Each epoch's order of the parts.
    parts: random.Random
    # The device the global generators (dropout) belong to.
    device: torch.device


@dataclass(frozen=True)
class Resumed:
    """What a stage goes on from."""

    # The last epoch saved (the stage goes on with the next one).
    epoch: int
    # Dev value of the initial weights; best dev value, its epoch, epochs without improvement.
    initial_dev: float
    best_dev: float
    best_epoch: int
    bad_epochs: int
    # Every epoch so far, in order.
    records: tuple[EpochRecord, ...]
    # Wall seconds the earlier calls spent.
    seconds: float


def trained_names(model: nn.Module, params: Sequence[nn.Parameter]) -> list[str]:
    """The names of ``params`` in ``model`` (in the model's order)."""
    wanted = {id(p) for p in params}
    names = [n for n, p in model.named_parameters() if id(p) in wanted]
    if len(names) != len(wanted):
        raise ValueError("a trained parameter is not a parameter of the model")
    return names


def signature(
    what: str, options: Mapping[str, Any], names: Sequence[str], model: nn.Module
) -> dict:
    """What must match for a folder to be resumed: the stage, its options (but the device and
    the time budget, which may change between calls) and the trained parameters' shapes."""
    shapes = dict(model.named_parameters())
    return {
        "format": RESUME_FORMAT,
        "stage": what,
        "options": {k: v for k, v in options.items() if k not in ("device", "max_seconds")},
        "parameters": {n: list(shapes[n].shape) for n in names},
    }


def _tensors(names: Sequence[str], state: Mapping[str, torch.Tensor]) -> dict:
    return {n: state[n].detach().cpu().clone().contiguous() for n in names}


def save_stage(
    folder: Path,
    sig: Mapping[str, Any],
    model: nn.Module,
    names: Sequence[str],
    best_state: Mapping[str, torch.Tensor] | None,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    gens: Generators,
    resumed: Resumed,
) -> None:
    """Write the stage's state after epoch ``resumed.epoch`` (module docstring)."""
    current = model.state_dict()
    rng = {
        "batches": gens.batches.get_state(),
        "torch": torch.get_rng_state(),
    }
    if gens.device.type == "cuda":
        rng["cuda"] = torch.cuda.get_rng_state(gens.device).cpu()
    version, internal, gauss = gens.parts.getstate()
    state = {
        "signature": dict(sig),
        "epoch": resumed.epoch,
        "initial_dev": resumed.initial_dev,
        "best_dev": resumed.best_dev,
        "best_epoch": resumed.best_epoch,
        "bad_epochs": resumed.bad_epochs,
        "seconds": resumed.seconds,
        "records": [asdict(r) for r in resumed.records],
        "scheduler": scheduler.state_dict(),
        "parts_rng": [version, list(internal), gauss],
    }
    with atomic_dir(folder) as tmp:
        save_tensors(_tensors(names, current), tmp / "last.safetensors")
        save_tensors(_tensors(names, best_state or current), tmp / "best.safetensors")
        save_tensors(rng, tmp / "rng.safetensors")
        save_optimizer_state(optimizer, tmp)
        (tmp / STATE_FILE).write_text(json.dumps(state) + "\n", encoding="utf-8")
        sync_files(tmp)


def has_stage(folder: Path | None) -> bool:
    """True when ``folder`` holds a saved stage."""
    return folder is not None and (folder / STATE_FILE).is_file()


def _differences(found: Mapping[str, Any], expected: Mapping[str, Any]) -> list[str]:
    out = []
    for key in sorted(set(found) | set(expected)):
        if key == "options":
            a, b = found.get(key, {}), expected.get(key, {})
            out += [
                f"{k} {a.get(k)!r} (this run: {b.get(k)!r})"
                for k in sorted(set(a) | set(b))
                if a.get(k) != b.get(k)
            ]
        elif found.get(key) != expected.get(key):
            out.append(f"{key} {found.get(key)!r} (this run: {expected.get(key)!r})")
    return out


def load_stage(
    folder: Path,
    sig: Mapping[str, Any],
    model: nn.Module,
    names: Sequence[str],
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    gens: Generators,
) -> tuple[Resumed, dict[str, torch.Tensor]]:
    """Load the saved stage into the model (its last epoch's weights), the optimizer, the
    schedule and the generators; returns the loop's state and the best epoch's weights (the
    trained parameters only, on the model's device)."""
    try:
        state = json.loads((folder / STATE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise ValueError(f"{folder / STATE_FILE}: cannot read the saved stage ({err})") from None
    found = state.get("signature", {})
    diffs = _differences(found, sig)
    if diffs:
        raise ValueError(
            f"{folder}: a saved stage of another run ({'; '.join(diffs)}); "
            "delete the folder to start this stage over"
        )
    device = next(model.parameters()).device
    try:
        last = load_file(str(folder / "last.safetensors"), device=str(device))
        best = load_file(str(folder / "best.safetensors"), device=str(device))
        rng = load_file(str(folder / "rng.safetensors"))
        if set(last) != set(names) or set(best) != set(names):
            raise ValueError("its weights are not this stage's trained parameters")
        params = dict(model.named_parameters())
        with torch.no_grad():
            for n in names:
                params[n].copy_(last[n])
        load_optimizer_state(optimizer, folder, device)
        scheduler.load_state_dict(state["scheduler"])
    except (OSError, ValueError, KeyError, RuntimeError, SafetensorError) as err:
        raise ValueError(
            f"{folder}: cannot read the saved stage ({err}); delete the folder to start over"
        ) from None
    gens.batches.set_state(rng["batches"])
    torch.set_rng_state(rng["torch"])
    if gens.device.type == "cuda" and "cuda" in rng:
        torch.cuda.set_rng_state(rng["cuda"], gens.device)
    version, internal, gauss = state["parts_rng"]
    gens.parts.setstate((version, tuple(internal), gauss))
    records = tuple(
        EpochRecord(**{**r, "extra": dict(r.get("extra", {}))}) for r in state["records"]
    )
    resumed = Resumed(
        epoch=int(state["epoch"]),
        initial_dev=float(state["initial_dev"]),
        best_dev=float(state["best_dev"]),
        best_epoch=int(state["best_epoch"]),
        bad_epochs=int(state["bad_epochs"]),
        records=records,
        seconds=float(state["seconds"]),
    )
    return resumed, best
