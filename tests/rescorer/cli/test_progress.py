"""Progress bars only where a person watches: not with -q, not into a redirected log, not from
every torchrun process (issue 48's small items)."""

from __future__ import annotations

import sys

import click
import pytest

from rescorer.cli.main import main
from rescorer.cli.options import progress_bars


@pytest.mark.parametrize(
    ("quiet", "tty", "rank", "expected"),
    [
        (False, True, None, True),
        (False, True, "0", True),
        (True, True, None, False),  # -q
        (False, False, None, False),  # stderr redirected to a file or a pipe
        (False, True, "1", False),  # a torchrun process other than the first
    ],
)
def test_progress_bars(
    quiet: bool, tty: bool, rank: str | None, expected: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys.stderr, "isatty", lambda: tty)
    if rank is None:
        monkeypatch.delenv("RANK", raising=False)
    else:
        monkeypatch.setenv("RANK", rank)
    with click.Context(main) as ctx:
        ctx.params["quiet"] = quiet
        assert progress_bars() is expected
