"""A one-line description of the machine, for results tables and benchmark reports."""

from __future__ import annotations

import os
import platform
from pathlib import Path


def cpu_name() -> str:
    """The CPU model from /proc/cpuinfo, else what the platform module knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def describe_machine() -> str:
    """CPU model, core count, and the GPU torch sees (if torch is installed and sees one)."""
    text = f"{cpu_name()}, {os.cpu_count()} cores"
    try:
        import torch

        if torch.cuda.is_available():
            text += f", GPU {torch.cuda.get_device_name(0)}"
        else:
            text += ", no GPU"
    except ImportError:  # pragma: no cover - torch is a dependency
        pass
    return text
