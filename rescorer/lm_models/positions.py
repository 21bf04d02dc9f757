"""Sinusoidal position encodings (Vaswani et al. 2017, sec. 3.5), shared by the families whose
models attend over positions (CUE's transformers, the LSTM family's causal Transformer)."""

from __future__ import annotations

import math

import torch
from torch import Tensor


def sinusoids(n: int, dim: int) -> Tensor:
    """(n, dim) sinusoidal position encodings; row p does not depend on n."""
    pos = torch.arange(n, dtype=torch.float32)[:, None]
    freq = torch.exp(torch.arange(0, dim, 2, dtype=torch.float32) * (-math.log(10000.0) / dim))
    table = torch.zeros(n, dim)
    table[:, 0::2] = torch.sin(pos * freq)
    table[:, 1::2] = torch.cos(pos * freq)[:, : dim // 2]
    return table
