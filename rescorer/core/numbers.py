"""Numbers read from text: parsed with range checks, finite after any unit conversion.

``float("1e308")`` is finite but ``1e308 * ln(10)`` is not: a reader that converts a log base
passes the factor to :func:`parse_float`, which checks the converted value. Whole numbers are
refused beyond :data:`MAX_DIGITS` digits before Python is asked to convert them.
"""

from __future__ import annotations

import math
from pathlib import Path

from rescorer.core.errors import InputError, shorten

MAX_DIGITS = 18
"""Most digits of a whole number in a text file (a count, a rank): beyond any real count."""


def parse_float(
    text: str, path: str | Path | None, line: int | None, what: str, scale: float = 1.0
) -> float:
    """``float(text) * scale``, refused (:class:`InputError`) unless a finite number."""
    try:
        value = float(text)
    except (ValueError, OverflowError):
        raise InputError(
            f"{what}: not a number: expected a number, got {shorten(text)!r}", path, line
        ) from None
    if not math.isfinite(value):
        raise InputError(
            f"{what}: expected a finite number, got non-finite value {shorten(text)!r}", path, line
        )
    scaled = value * scale
    if not math.isfinite(scaled):
        raise InputError(
            f"{what}: expected a number whose natural-log value is finite, got "
            f"{shorten(text)!r} (x {scale:.6g} overflows)",
            path,
            line,
        )
    return scaled


def parse_count(text: str, path: str | Path | None, line: int | None, what: str) -> int:
    """A whole number ``>= 0`` written in ASCII digits, at most :data:`MAX_DIGITS` of them."""
    if not text.isascii() or not text.isdigit():
        raise InputError(f"{what}: expected a whole number, got {shorten(text)!r}", path, line)
    if len(text) > MAX_DIGITS:
        raise InputError(
            f"{what}: expected at most {MAX_DIGITS} digits, got {len(text)}", path, line
        )
    return int(text)
