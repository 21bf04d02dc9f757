"""Device choice for every torch model, in training and in scoring: one rule, one error message."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch is imported on first use: the floor stays light to import
    import torch


def resolve_device(device: str | torch.device | None, local_rank: int = 0) -> torch.device:
    """The torch device named by ``device``.

    ``None`` or ``"auto"``: CUDA device ``local_rank`` when CUDA is available (one device per
    process under torchrun), else the CPU. Anything else is parsed by ``torch.device``; a bad
    name, or CUDA asked for where there is none, is a ``ValueError`` that says so. The
    process settings recorded by :func:`rescorer.core.runtime.configure` (threads, allocator)
    are applied on the first call.
    """
    import torch

    from rescorer.core import runtime

    runtime.apply_to_torch()  # the CLI's threads and allocator settings, once
    if device is None or device == "auto":
        return torch.device(f"cuda:{local_rank}" if torch.cuda.is_available() else "cpu")
    try:
        resolved = torch.device(device)
    except RuntimeError as err:
        raise ValueError(f"bad device {device!r}: {err}") from None
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {device!r} asked for, but CUDA is not available here")
    return resolved
