"""Bulk work on many small objects: the cyclic garbage collector paused while it runs.

Reading, scoring and writing N-best sets builds millions of small tuples, dicts and hypotheses
in one go, none of them in reference cycles. CPython's collector is triggered by allocation
counts and walks the tracked objects again and again as they pile up: measured on the dev_other
30-best set (85,920 hypotheses), adding two features took 0.51 s with the collector on and
0.16 s without, reading the ESPnet folder 1.37 s and 1.09 s (``bench/results/kenlm_cli.md``).

:func:`paused_gc` pauses it for such a step and restores the previous state after (a caller who
had it off keeps it off); reference counting still frees everything as usual. Turned back on,
the collector would still walk everything made in the pause once or twice as it ages (0.2-0.3
s more on that set); a short-lived process such as the CLI calls :func:`freeze_after_bulk`, and
each step then ends with :func:`gc.freeze`, which moves every object alive into a generation the
collector never walks. A long-lived process keeps the default: freezing also keeps any cyclic
garbage not yet collected, for good.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

_freeze = False


def freeze_after_bulk(on: bool = True) -> None:
    """Whether each :func:`paused_gc` block ends with :func:`gc.freeze` (the CLI's choice)."""
    global _freeze
    _freeze = on


@contextmanager
def paused_gc() -> Iterator[None]:
    """The cyclic collector off inside the block, as it was after it."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if _freeze:
            gc.freeze()
        if was_on:
            gc.enable()
