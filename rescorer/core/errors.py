"""The toolkit's data errors: bad input named by file and line, failed outputs named by file.

Every reader raises :class:`InputError` for malformed input and every writer raises
:class:`OutputError` for a target it cannot write, so the CLI can print one line
(``file[:line]: what was expected, what was found``) and exit with status 2 instead of a
traceback.
"""

from __future__ import annotations

from pathlib import Path


class FileError(ValueError):
    """A data error about one file: ``str(err)`` is one line.

    ``path:line: message`` (or ``path: message`` without a line, or just ``message`` without a
    path). ``line`` is 1-based.
    """

    def __init__(self, message: str, path: str | Path | None = None, line: int | None = None):
        self.message = message
        self.path = None if path is None else str(path)
        self.line = line
        super().__init__(self._render())

    def _render(self) -> str:
        if self.path is None:
            return self.message
        if self.line is None:
            return f"{self.path}: {self.message}"
        return f"{self.path}:{self.line}: {self.message}"

    def __str__(self) -> str:
        return self._render()


class InputError(FileError):
    """Malformed or inconsistent input data."""


class OutputError(FileError):
    """An output that cannot be written (special file, directory, no permission, disk full).

    Raised before anything is written where the target can be checked up front; the previous
    output, if any, is left as it was.
    """


def shorten(text: str, limit: int = 60) -> str:
    """``text`` cut to ``limit`` characters for error messages."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def describe_id_mismatch(
    expected: set[str] | frozenset[str], got: set[str] | frozenset[str], limit: int = 5
) -> str:
    """One-line description of how two id sets differ, naming a few of the ids."""

    def show(ids: set[str] | frozenset[str]) -> str:
        first = sorted(ids)[:limit]
        more = f" (+{len(ids) - limit} more)" if len(ids) > limit else ""
        return ", ".join(first) + more

    parts = []
    missing = set(expected) - set(got)
    extra = set(got) - set(expected)
    if missing:
        parts.append(f"{len(missing)} missing id(s): {show(missing)}")
    if extra:
        parts.append(f"{len(extra)} extra id(s): {show(extra)}")
    return "; ".join(parts) if parts else "ids match"


def check_same_ids(
    expected: set[str] | frozenset[str],
    got: set[str] | frozenset[str],
    what: str,
    path: str | Path | None = None,
    against: str | Path | None = None,
) -> None:
    """Raise :class:`InputError` when ``got`` (ids of ``what``, read from ``path``) differs from
    ``expected`` (the ids of ``against``, named in the message when given)."""
    if set(expected) != set(got):
        theirs = "" if against is None else f" those of {against}"
        raise InputError(
            f"{what} ids do not match{theirs}: {describe_id_mismatch(expected, got)}", path
        )


class KenLMToolError(RuntimeError):
    """lmplz or build_binary is missing or failed (raised by :mod:`rescorer.ngram`)."""
