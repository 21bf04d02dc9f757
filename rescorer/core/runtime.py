"""Process-wide settings of the heavy work: CPU threads and the memory allocator.

The CLI records them once at start-up (``rescorer --threads N``, :func:`configure`); nothing
happens until a model is put on a device (:func:`rescorer.core.device.resolve_device` calls
:func:`apply_to_torch`) or an ONNX Runtime session is made (:func:`threads`), so commands
that load no model (``wer``, ``tune``) neither import torch nor pay for any of it. Library
users who never call :func:`configure` keep torch's and ONNX Runtime's own defaults.

Threads (measured in ``bench/results/lstm.md``): N-best scoring and training run their
matrix products on every thread torch is given. On an idle 2-core machine 2 threads score
1.7x faster than 1, but with another job on the second core 2 threads ran 1.6-2.9x *slower*
than 1 (the threads wait for each other). ``auto`` therefore takes the cores that are idle
now: the usable cores less the 1-minute load average, at least 1; or ``$OMP_NUM_THREADS``
when it is set (jobs started together all see the cores idle: two trainings of 2 threads
each on 2 cores took 8x longer an epoch than one alone).

Work of many tiny operations (``tune --method risk``: thousands of small tensor operations)
has a default of its own when the user chose no thread count: :func:`torch_threads` runs it on
that default, or on the count the user chose (``--threads N``, ``auto`` or ``default`` given on
the command line or in ``$RESCORER_THREADS``), and puts torch's count back afterwards.

Allocator: a scoring or training step allocates tensors of up to hundreds of MB; glibc hands
blocks that large back to the kernel on every ``free`` (``mmap``/``munmap``) and the next step
page-faults them in again, zero-filled. Keeping freed memory for reuse (``mallopt``:
``M_MMAP_MAX`` = 0, a high ``M_TRIM_THRESHOLD``; the same as ``MALLOC_MMAP_MAX_=0
MALLOC_TRIM_THRESHOLD_=...`` in the environment) made a training step of the recipe's LSTM
1.6x faster before the output layer stopped allocating (``rescorer.lm_models.output``). The cost:
the process keeps its peak memory until it exits. ``RESCORER_MALLOC=system`` turns it off.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

logger = logging.getLogger(__name__)

# Environment variables read by the CLI (the command-line option wins over them).
THREADS_ENV = "RESCORER_THREADS"
ALLOCATOR_ENV = "RESCORER_MALLOC"
# glibc mallopt parameters (malloc.h) and the trim threshold used (largest int: never trim).
_M_TRIM_THRESHOLD, _M_MMAP_MAX = -1, -4
_NEVER_TRIM = 2**31 - 1


@dataclass(frozen=True)
class RuntimeOptions:
    """What :func:`configure` recorded."""

    # CPU threads for torch and ONNX Runtime sessions; None leaves their own defaults.
    threads: int | None = None
    # Keep freed memory for reuse instead of returning it to the kernel (glibc only).
    keep_freed_memory: bool = False
    # Whether the user chose `threads` (--threads or $RESCORER_THREADS); False: the CLI's
    # default (auto), or nothing configured. Work with a default of its own takes it then.
    threads_given: bool = False
    # `rescorer -q`: libraries print no progress or advice of their own (KenLM's ARPA loading).
    quiet: bool = False


_options = RuntimeOptions()
_applied = False


def usable_cores() -> int:
    """CPU cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1


def idle_cores() -> int:
    """Usable cores less the 1-minute load average (rounded), at least 1."""
    cores = usable_cores()
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):
        return cores
    return max(1, min(cores, cores - round(load)))


def omp_threads() -> int | None:
    """The thread count ``$OMP_NUM_THREADS`` sets (its outer level), None when unset or not
    a count >= 1."""
    first = os.environ.get("OMP_NUM_THREADS", "").split(",")[0].strip()
    return int(first) if first.isdigit() and int(first) >= 1 else None


def parse_threads(value: str | int | None) -> int | None:
    """``auto`` -> ``$OMP_NUM_THREADS`` when it holds a count, else :func:`idle_cores`;
    ``default`` or None -> None; else an integer >= 1."""
    if value is None or value == "default":
        return None
    if value == "auto":
        return omp_threads() or idle_cores()
    try:
        threads = int(value)
    except (TypeError, ValueError):
        threads = 0
    if threads < 1:
        raise ValueError(f"threads: expected auto, default or an integer >= 1, got {value!r}")
    return threads


def configure(options: RuntimeOptions) -> None:
    """Record the settings; they apply when torch or ONNX Runtime is first used."""
    global _options, _applied
    if options.threads is not None and options.threads < 1:
        raise ValueError(f"threads must be >= 1, got {options.threads}")
    _options, _applied = options, False


def current() -> RuntimeOptions:
    """The recorded settings (defaults when :func:`configure` was never called)."""
    return _options


def quiet() -> bool:
    """Whether the CLI was asked for quiet (``rescorer -q``): no progress or advice printed by
    the libraries (KenLM's C++ writes to stderr on its own)."""
    return _options.quiet


def threads() -> int | None:
    """The recorded thread count, for ONNX Runtime sessions (None: its own default)."""
    return _options.threads


def apply_to_torch() -> None:
    """Apply the recorded settings to torch and the allocator, once per :func:`configure`."""
    global _applied
    if _applied:
        return
    _applied = True
    if _options.keep_freed_memory:
        keep_freed_memory()
    if _options.threads is not None:
        import torch

        if torch.get_num_threads() != _options.threads:
            torch.set_num_threads(_options.threads)
        logger.info("torch uses %d CPU thread(s)", _options.threads)


@contextmanager
def torch_threads(default: int) -> Iterator[int]:
    """Run a piece of work on the threads the user chose, else on ``default`` (its own, e.g.
    the faster one measured for that work); torch's thread count is put back afterwards.

    Applies the recorded settings first (:func:`apply_to_torch`). Yields the count the work
    runs on (``--threads default`` given: torch's own, left as it is).
    """
    import torch

    apply_to_torch()
    before = torch.get_num_threads()
    if _options.threads_given:
        count = before if _options.threads is None else _options.threads
    else:
        count = default
    if count != before:
        torch.set_num_threads(count)
    try:
        yield count
    finally:
        if torch.get_num_threads() != before:
            torch.set_num_threads(before)


def keep_freed_memory() -> bool:
    """Ask glibc to keep freed memory for reuse; False where there is no glibc."""
    import ctypes

    try:  # by name: ctypes.util.find_library would run ldconfig
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):
        logger.debug("no glibc mallopt here: the allocator keeps its defaults")
        return False
    done = bool(mallopt(_M_MMAP_MAX, 0)) and bool(mallopt(_M_TRIM_THRESHOLD, _NEVER_TRIM))
    logger.debug("allocator keeps freed memory for reuse: %s", done)
    return done
