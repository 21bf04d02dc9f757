"""The toolkit's input error: bad data named by file and line.

Every reader raises :class:`InputError` for malformed input, so the CLI can print one line
(``file:line: what was wrong``) and exit with status 2 instead of a traceback.
"""

from __future__ import annotations

from pathlib import Path


class InputError(ValueError):
    """Malformed or inconsistent input data.

    ``str(err)`` is one line: ``path:line: message`` (or ``path: message`` without a line,
    or just ``message`` without a path). ``line`` is 1-based.
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
) -> None:
    """Raise :class:`InputError` when ``got`` (ids of ``what``) differs from ``expected``."""
    if set(expected) != set(got):
        raise InputError(f"{what} ids do not match: {describe_id_mismatch(expected, got)}", path)
