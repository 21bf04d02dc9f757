"""JSON input: one parser for every JSON document or JSON line the toolkit reads.

:func:`parse_json` refuses, with an :class:`~rescorer.core.errors.InputError` naming the file
(and line): invalid JSON, a key repeated in one object (Python would keep the last silently),
``NaN``/``Infinity`` (not JSON) and numbers that overflow a float (``1e400``), integers with more
digits than Python converts, and nesting deeper than :data:`MAX_DEPTH`. The helpers
:func:`json_number`, :func:`json_string` and :func:`type_name` check the types of parsed values.
"""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from rescorer.core.errors import InputError, shorten
from rescorer.core.io import read_text

MAX_DEPTH = 64
"""Deepest nesting of arrays and objects accepted (the toolkit's own files use 4 or fewer)."""


class _Refused(ValueError):
    """A value the decoder hooks refuse (raised inside ``json.loads``)."""


def _no_duplicates(pairs: Sequence[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _Refused(
                f"duplicate JSON key {shorten(key)!r}: expected unique keys in an object"
            )
        out[key] = value
    return out


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _Refused(
            f"expected a finite number, got non-finite value {shorten(text)} (out of range)"
        )
    return value


def _no_constant(name: str) -> float:
    raise _Refused(f"expected a finite JSON number, got non-finite value {name} (not JSON)")


def _depth(value: Any) -> int:
    """Nesting depth of arrays and objects in a parsed value, without recursion."""
    deepest = 0
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item
        deepest = max(deepest, depth)
        stack.extend((c, depth + 1) for c in children if isinstance(c, (dict, list)))
    return deepest


def decoder() -> json.JSONDecoder:
    """A decoder with the checks of :func:`parse_json` (duplicate keys, non-finite numbers),
    for readers that decode a file piece by piece (``raw_decode``); wrap its calls in
    :func:`json_errors`."""
    return json.JSONDecoder(
        object_pairs_hook=_no_duplicates, parse_float=_finite_float, parse_constant=_no_constant
    )


@contextlib.contextmanager
def json_errors(
    path: str | Path | None, line: int | None, decoder_lines: bool = False
) -> Iterator[None]:
    """Every failure of JSON decoding inside the block as :class:`InputError` at ``line``.

    A syntax error takes the decoder's own line number when ``line`` is None or with
    ``decoder_lines`` (the text decoded is the whole file, so its line numbers are the file's).
    """
    try:
        yield
    except json.JSONDecodeError as err:
        at = err.lineno if line is None or decoder_lines else line
        raise InputError(f"invalid JSON: {err.msg} (column {err.colno})", path, at) from None
    except _Refused as err:
        raise InputError(str(err), path, line) from None
    except RecursionError:
        raise InputError(
            f"invalid JSON: nested too deeply (expected at most {MAX_DEPTH} levels)", path, line
        ) from None
    except ValueError as err:  # integers with more digits than int() converts
        raise InputError(f"invalid JSON: {shorten(str(err))}", path, line) from None


def parse_json(text: str, path: str | Path | None = None, line: int | None = None) -> Any:
    """Parse JSON ``text`` from ``path`` (at ``line`` for a JSON-lines file); see the module."""
    with json_errors(path, line):
        value = decoder().decode(text)
    if isinstance(value, (dict, list)) and (text.count("[") + text.count("{")) > MAX_DEPTH:
        depth = _depth(value)
        if depth > MAX_DEPTH:
            raise InputError(
                f"invalid JSON: nested too deeply (expected at most {MAX_DEPTH} levels, got "
                f"{depth})",
                path,
                line,
            )
    return value


def read_json(path: str | Path) -> Any:
    """A whole JSON document through the input layer (:func:`rescorer.core.io.read_text`)."""
    return parse_json(read_text(path), path)


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


def json_number(value: object, path: str | Path | None, line: int | None, what: str) -> float:
    """A finite JSON number as a float (``bool`` is not a number), else :class:`InputError`."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InputError(f"{what}: expected a number, got {type_name(value)}", path, line)
    try:
        result = float(value)
    except OverflowError:
        raise InputError(
            f"{what}: expected a number in float range, got more", path, line
        ) from None
    if not math.isfinite(result):
        raise InputError(
            f"{what}: expected a finite number, got non-finite value {value!r}", path, line
        )
    return result


def json_string(value: object, path: str | Path | None, line: int | None, what: str) -> str:
    """A JSON string that is valid Unicode (no lone surrogates), else :class:`InputError`."""
    if not isinstance(value, str):
        raise InputError(f"{what}: expected a string, got {type_name(value)}", path, line)
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InputError(
            f"{what}: expected valid Unicode, got a lone surrogate", path, line
        ) from None
    return value


def json_object(value: object, path: str | Path | None, line: int | None, what: str) -> dict:
    """A JSON object, else :class:`InputError` saying what ``what`` was instead."""
    if not isinstance(value, dict):
        raise InputError(f"{what}: expected an object, got {type_name(value)}", path, line)
    return value
