"""File helpers: text reading with line numbers, atomic writes.

Outputs are written to a temporary file in the destination folder and renamed into place, so an
interrupted run never leaves a half-written file where a good one was.
"""

from __future__ import annotations

import contextlib
import gzip
import os
import tempfile
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from rescorer.core.errors import InputError


def _check_file(path: Path) -> None:
    if not path.exists():
        raise InputError("file not found", path)
    if path.is_dir():
        raise InputError("expected a file, got a directory", path)


def open_text(path: str | Path) -> IO[str]:
    """Open a UTF-8 text file for reading (``.gz`` transparently)."""
    path = Path(path)
    _check_file(path)
    if path.suffix == ".gz":
        return gzip.open(path, "rt", encoding="utf-8", newline="\n")
    return open(path, encoding="utf-8", newline="\n")


def read_lines(path: str | Path) -> Iterator[tuple[int, str]]:
    """Yield ``(line_number, line)`` with 1-based numbers and the line ending stripped.

    Lines are decoded one by one, so undecodable bytes raise :class:`InputError` naming the
    right line; a corrupt ``.gz`` file raises it too.
    """
    path = Path(path)
    _check_file(path)
    opener = gzip.open if path.suffix == ".gz" else open
    lineno = 0
    try:
        with opener(path, "rb") as f:
            for lineno, raw in enumerate(f, start=1):  # noqa: B007 - lineno used below
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError as err:
                    raise InputError(f"not UTF-8 text ({err.reason})", path, lineno) from None
                yield lineno, line.rstrip("\r\n")
    except (gzip.BadGzipFile, EOFError, zlib.error) as err:
        raise InputError(f"corrupt gzip data ({err})", path, lineno + 1) from None


@contextlib.contextmanager
def atomic_write(path: str | Path, mode: str = "w") -> Iterator[IO]:
    """Write ``path`` through a temp file in the same folder, renamed into place on success."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        kwargs = {} if "b" in mode else {"encoding": "utf-8", "newline": "\n"}
        with os.fdopen(fd, mode, **kwargs) as f:
            yield f
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
