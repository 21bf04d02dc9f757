"""Helpers shared by the N-best readers and writers (private to ``rescorer.formats``).

Nothing here converts log bases; each format module does its own conversion with the constants
from :mod:`rescorer.core.constants`.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from rescorer.core.errors import InputError, shorten
from rescorer.core.io import plain_lines, read_lines

if TYPE_CHECKING:  # annotations only: rescorer.refs reads references through this module
    from rescorer.nbest import NBest

T = TypeVar("T")

# What str.split() splits on, so a token that passes this check survives a write/read cycle.
_HAS_SPACE = re.compile(r"\s")


def check_utt_id(utt_id: str, path: str | Path, line: int | None) -> str:
    """Utterance ids must be non-empty and free of whitespace (they are written as fields)."""
    if not utt_id or _HAS_SPACE.search(utt_id):
        raise InputError(
            f"bad utterance id {shorten(utt_id)!r}: empty or has whitespace", path, line
        )
    return utt_id


def format_float(value: float) -> str:
    """The shortest decimal string that reads back to exactly ``value`` (Python ``repr``)."""
    return repr(float(value))


def read_keyed(
    path: str | Path,
    parse: Callable[[str, int], T],
    what: str = "utterance id",
    lines: Iterable[tuple[int, str]] | None = None,
) -> dict[str, tuple[int, T]]:
    """Read ``key rest-of-line`` lines into ``{key: (line_number, parse(rest, line_number))}``.

    Whitespace-only lines are skipped. A repeated key raises :class:`InputError` on the line of
    the repeat, naming the line of the first occurrence. ``lines``: the ``(line_number, line)``
    of ``path`` when the caller reads them (default :func:`~rescorer.core.io.read_lines`).
    """
    whole = plain_lines(path) if lines is None else None
    if whole is not None:  # the common case, several times faster; the same result
        pairs = [line.split(maxsplit=1) for line in whole]
        if min(map(len, pairs), default=2) == 2:  # no blank line, no key without a value
            try:
                fast = {p[0]: (i, parse(p[1], i)) for i, p in enumerate(pairs, start=1)}
            except InputError:
                fast = {}  # the line-by-line path finds the first problem in file order
            if len(fast) == len(pairs):
                return fast
        # else a repeated key, a blank line, a lone key or a bad value: the path below says
    out: dict[str, tuple[int, T]] = {}
    for lineno, line in read_lines(path) if lines is None else lines:
        parts = line.split(maxsplit=1)
        if not parts:
            continue
        key = parts[0]
        if key in out:
            raise InputError(
                f"duplicate {what} {key!r} (first on line {out[key][0]})", path, lineno
            )
        out[key] = (lineno, parse(parts[1] if len(parts) > 1 else "", lineno))
    return out


def is_file(path: Path) -> bool:
    """``path.is_file()`` that answers False instead of raising for unusable names."""
    try:
        return path.is_file()
    except (OSError, ValueError):
        return False


def is_dir(path: Path) -> bool:
    """``path.is_dir()`` that answers False instead of raising for unusable names."""
    try:
        return path.is_dir()
    except (OSError, ValueError):
        return False


def first_content_line(path: Path) -> tuple[int, str] | None:
    """The first non-blank line of a text file as ``(line_number, line)``, or None if none."""
    for lineno, line in read_lines(path):
        if line.strip():
            return lineno, line
    return None


# ---------------------------------------------------------------------------------------------
# Writer-side checks: refuse (ValueError) what would not read back the same.


def check_field(value: str, what: str) -> None:
    """A value written as one whitespace-separated field must be non-empty and space-free."""
    if not value or _HAS_SPACE.search(value):
        raise ValueError(f"cannot write {what} {value!r}: empty or contains whitespace")
    if "\ufeff" in value:  # every reader drops it (rescorer.core.io): it would not read back
        raise ValueError(f"cannot write {what} {value!r}: contains U+FEFF, which readers drop")


def check_file_name(value: str, what: str) -> None:
    """A value used as a file name must be a plain, visible name."""
    check_field(value, what)
    if "/" in value or os.sep in value or value.startswith(".") or "\x00" in value:
        raise ValueError(f"cannot use {what} {value!r} as a file name")


def check_words(words: Iterable[str], utt_id: str) -> None:
    """Words are written space-separated, so each must be a non-empty, space-free field."""
    for word in words:
        check_field(word, f"word in utterance {utt_id!r}:")


def check_nbest_fields(nbest: NBest) -> None:
    """Every utterance id and word of ``nbest`` can be written as a text field."""
    for utt_id, nb in nbest.items():
        check_field(utt_id, "utterance id")
        for hyp in nb:
            check_words(hyp.words, utt_id)


def check_finite(nbest: NBest) -> None:
    """Writers never write NaN or infinite scores."""
    for utt_id, nb in nbest.items():
        for rank, hyp in enumerate(nb, start=1):
            for name, value in hyp.scores.items():
                if not math.isfinite(value):
                    raise ValueError(
                        f"cannot write non-finite score {name}={value} of {utt_id} hyp {rank}"
                    )


def score_or_fail(scores: Mapping[str, float], name: str, utt_id: str, rank: int) -> float:
    """``scores[name]`` or a ValueError that lists the names there are."""
    try:
        return scores[name]
    except KeyError:
        have = ", ".join(sorted(scores)) or "none"
        raise ValueError(
            f"hypothesis {rank} of {utt_id!r} has no score {name!r} (it has: {have})"
        ) from None
