"""Helpers shared by the N-best readers and writers (private to ``rescorer.formats``).

Nothing here converts log bases; each format module does its own conversion with the constants
from :mod:`rescorer.core.constants`.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import TypeVar

from rescorer.core.errors import InputError
from rescorer.core.io import read_lines
from rescorer.nbest import NBest

T = TypeVar("T")

# What str.split() splits on, so a token that passes this check survives a write/read cycle.
_HAS_SPACE = re.compile(r"\s")


def lines(path: str | Path) -> Iterator[tuple[int, str]]:
    """:func:`rescorer.core.io.read_lines`, with unreadable files (a corrupt ``.gz``, no permission)
    also turned into :class:`InputError` naming the file."""
    try:
        yield from read_lines(path)
    except (OSError, EOFError, zlib.error) as err:
        raise InputError(f"cannot read file ({shorten(str(err))})", path) from None


def parse_float(text: str, path: str | Path, line: int | None, what: str) -> float:
    """``float(text)``, raising :class:`InputError` for non-numbers and non-finite values."""
    try:
        value = float(text)
    except (ValueError, OverflowError):
        raise InputError(f"{what}: not a number: {shorten(text)!r}", path, line) from None
    if not math.isfinite(value):
        raise InputError(f"{what}: non-finite value {shorten(text)!r}", path, line)
    return value


def json_number(value: object, path: str | Path, line: int | None, what: str) -> float:
    """A finite JSON number (``bool`` is not a number), else :class:`InputError`."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InputError(f"{what}: expected a number, got {type_name(value)}", path, line)
    try:
        result = float(value)
    except OverflowError:
        raise InputError(f"{what}: number out of range", path, line) from None
    if not math.isfinite(result):
        raise InputError(f"{what}: non-finite value {value!r}", path, line)
    return result


class DuplicateKey(Exception):
    """A JSON object repeats ``key`` (raised by :func:`no_duplicate_keys`)."""

    def __init__(self, key: str):
        self.key = key


def no_duplicate_keys(pairs: list[tuple[str, object]]) -> dict[str, object]:
    """``object_pairs_hook`` for :mod:`json` that refuses repeated keys."""
    out: dict[str, object] = {}
    for key, value in pairs:
        if key in out:
            raise DuplicateKey(key)
        out[key] = value
    return out


@contextlib.contextmanager
def json_errors(path: str | Path, line: int | None, decoder_lines: bool = False) -> Iterator[None]:
    """Turn every failure of :mod:`json` decoding inside the block into :class:`InputError`.

    ``line`` names the line the decoded text started on (None: unknown). Syntax errors take the
    decoder's own line number instead when ``line`` is None or ``decoder_lines`` is set (the
    text decoded is the whole file, so its line numbers are the file's).
    """
    try:
        yield
    except json.JSONDecodeError as err:
        at = err.lineno if line is None or decoder_lines else line
        raise InputError(f"invalid JSON: {err.msg} (column {err.colno})", path, at) from None
    except DuplicateKey as err:
        raise InputError(f"duplicate JSON key {shorten(err.key)!r}", path, line) from None
    except RecursionError:
        raise InputError("JSON nested too deeply", path, line) from None
    except ValueError as err:  # e.g. integers with too many digits
        raise InputError(f"invalid JSON: {shorten(str(err))}", path, line) from None


def json_string(value: object, path: str | Path, line: int | None, what: str) -> str:
    """A JSON string that is valid Unicode (no lone surrogates), else :class:`InputError`."""
    if not isinstance(value, str):
        raise InputError(f"{what}: expected a string, got {type_name(value)}", path, line)
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InputError(f"{what}: invalid Unicode (lone surrogate)", path, line) from None
    return value


def type_name(value: object) -> str:
    """The JSON name of a parsed value's type."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def check_utt_id(utt_id: str, path: str | Path, line: int | None) -> str:
    """Utterance ids must be non-empty and free of whitespace (they are written as fields)."""
    if not utt_id or _HAS_SPACE.search(utt_id):
        raise InputError(
            f"bad utterance id {shorten(utt_id)!r}: empty or has whitespace", path, line
        )
    return utt_id


def shorten(text: str, limit: int = 60) -> str:
    """``text`` cut to ``limit`` characters for error messages."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def format_float(value: float) -> str:
    """The shortest decimal string that reads back to exactly ``value`` (Python ``repr``)."""
    return repr(float(value))


def read_keyed(
    path: str | Path, parse: Callable[[str, int], T], what: str = "utterance id"
) -> dict[str, tuple[int, T]]:
    """Read ``key rest-of-line`` lines into ``{key: (line_number, parse(rest, line_number))}``.

    Whitespace-only lines are skipped. A repeated key raises :class:`InputError` on the line of
    the repeat, naming the line of the first occurrence.
    """
    out: dict[str, tuple[int, T]] = {}
    for lineno, line in lines(path):
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
    for lineno, line in lines(path):
        if line.strip():
            return lineno, line
    return None


# ---------------------------------------------------------------------------------------------
# Writer-side checks: refuse (ValueError) what would not read back the same.


def check_field(value: str, what: str) -> None:
    """A value written as one whitespace-separated field must be non-empty and space-free."""
    if not value or _HAS_SPACE.search(value):
        raise ValueError(f"cannot write {what} {value!r}: empty or contains whitespace")


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
