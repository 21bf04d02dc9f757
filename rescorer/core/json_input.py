"""JSON input: one parser for every JSON document or JSON line the toolkit reads.

:func:`parse_json` refuses, with an :class:`~rescorer.core.errors.InputError` naming the file
(and line): invalid JSON, a key repeated in one object (Python would keep the last silently),
``NaN``/``Infinity`` (not JSON) and numbers that overflow a float (``1e400``), integers with more
digits than Python converts, and nesting deeper than :data:`MAX_DEPTH`. The helpers
:func:`json_number`, :func:`json_string` and :func:`type_name` check the types of parsed values.
"""

from __future__ import annotations

import collections.abc
import contextlib
import dataclasses
import functools
import json
import math
import types
import typing
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from rescorer.core.errors import InputError, shorten
from rescorer.core.io import read_lines, read_text

_T = TypeVar("_T")

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


@functools.lru_cache(maxsize=1)
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


def json_object_lines(path: str | Path, expected: str) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(line number, object)`` of each non-blank line of a JSON-lines file; a line that is
    not a JSON object is an :class:`InputError` saying ``expected`` (e.g. ``"a NeMo manifest
    record"``) was expected there."""
    for lineno, line in read_lines(path):
        if not line.strip():
            continue
        obj = parse_json(line, path, lineno)
        if not isinstance(obj, dict):
            raise InputError(f"expected {expected}, got {type_name(obj)}", path, lineno)
        yield lineno, obj


def read_json(path: str | Path) -> Any:
    """A whole JSON document through the input layer (:func:`rescorer.core.io.read_text`)."""
    return parse_json(read_text(path), path)


def read_format_json(path: str | Path, fmt: str, version: int) -> dict[str, Any]:
    """A JSON object stamped ``"format": fmt, "version": version`` (the toolkit's small model
    files, e.g. mixtures and caches); anything else is an InputError naming the file."""
    data = read_json(path)
    if not isinstance(data, dict) or data.get("format") != fmt:
        raise InputError(f"expected a JSON object with format {fmt!r}", path)
    if data.get("version") != version:
        raise InputError(f"expected version {version}, got {data.get('version')!r}", path)
    return data


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


# -- typed options from JSON objects ----------------------------------------------------------


def _expected(hint: Any) -> str:
    """A type hint in words (``an integer``, ``a list of integers``, ``null or a string``)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return "any value"
    if hint is type(None):
        return "null"
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_expected(a) for a in args)
    if origin is typing.Literal:
        return "one of " + ", ".join(repr(a) for a in args)
    simple = {bool: "a boolean", int: "an integer", float: "a number", str: "a string"}
    if hint in simple:
        return simple[hint]
    if origin in (list, tuple, Sequence, collections.abc.Sequence) or hint in (list, tuple):
        return "an array"
    if origin in (dict, Mapping, collections.abc.Mapping) or hint in (dict,):
        return "an object"
    if dataclasses.is_dataclass(hint):
        return f"an object ({hint.__name__})"
    return getattr(hint, "__name__", str(hint))


def check_json_value(value: Any, hint: Any, what: str) -> None:
    """ValueError ``what: expected ..., got ...`` when a parsed JSON value does not have the
    type ``hint`` (an annotation: bool, int, float, str, X | None, Literal, tuple/list/Sequence
    of X, dict/Mapping of X, a dataclass given as an object; others are not checked).

    Integers are not booleans; a float is finite (an integer is a float); arrays may stand for
    tuples (the options' ``__post_init__`` converts them).
    """
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any or isinstance(hint, (str, typing.TypeVar)):
        return
    if origin in (typing.Union, types.UnionType):
        arms = [a for a in args if a is not type(None)]
        if value is None and len(arms) < len(args):
            return
        if len(arms) == 1:  # X | None with a value: X's own message
            check_json_value(value, arms[0], what)
            return
        for arm in arms:
            try:
                check_json_value(value, arm, what)
                return
            except ValueError:
                continue
        raise ValueError(f"{what}: expected {_expected(hint)}, got {_shown(value)}")
    if hint is type(None):
        ok = value is None
    elif origin is typing.Literal:
        ok = value in args
    elif hint is bool:
        ok = isinstance(value, bool)
    elif hint is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif hint is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        if ok and not math.isfinite(value):
            raise ValueError(f"{what}: expected a finite number, got {value!r}")
    elif hint is str:
        ok = isinstance(value, str)
    elif origin in (list, tuple, collections.abc.Sequence) or hint in (list, tuple):
        if not isinstance(value, (list, tuple)):
            ok = False
        else:
            if origin is tuple and args and args[-1] is not Ellipsis:
                if len(value) != len(args):
                    raise ValueError(
                        f"{what}: expected an array of {len(args)} values, got {len(value)}"
                    )
                for i, (item, arm) in enumerate(zip(value, args, strict=True)):
                    check_json_value(item, arm, f"{what}[{i}]")
            elif args:
                for i, item in enumerate(value):
                    check_json_value(item, args[0], f"{what}[{i}]")
            return
    elif origin in (dict, collections.abc.Mapping) or hint is dict:
        if not isinstance(value, dict):
            ok = False
        else:
            if len(args) == 2:
                for key, item in value.items():
                    check_json_value(key, args[0], f"{what} key")
                    check_json_value(item, args[1], f"{what}[{shorten(str(key))!r}]")
            return
    elif dataclasses.is_dataclass(hint) and isinstance(hint, type):
        ok = isinstance(value, (dict, hint))
    elif isinstance(hint, type):
        ok = isinstance(value, hint)
    else:
        return  # a hint this checker does not know: left to the options' own checks
    if not ok:
        raise ValueError(f"{what}: expected {_expected(hint)}, got {_shown(value)}")


def _shown(value: Any) -> str:
    """A parsed value's type and, for a scalar, the value (``a string ('abc')``)."""
    name = type_name(value)
    if isinstance(value, (str, int, float)) and not isinstance(value, bool):
        return f"{name} ({shorten(repr(value))})"
    return name


def json_fields(kind: type[_T], values: Mapping[str, Any] | None, what: str) -> dict[str, Any]:
    """The keyword arguments of the dataclass ``kind`` from a JSON object, type-checked.

    ValueError (naming ``what``) for a value that is not an object, an unknown key, a missing
    one (a field without a default), or a value of the wrong type for its field
    (:func:`check_json_value`).
    """
    if values is None:
        values = {}
    if not isinstance(values, Mapping):
        raise ValueError(f"{what}: expected a JSON object, got {type_name(values)}")
    known = {f.name: f for f in dataclasses.fields(kind)}  # type: ignore[arg-type]
    unknown = sorted(set(values) - set(known))
    if unknown:
        raise ValueError(f"unknown {what} key(s) {unknown}; expected some of {sorted(known)}")
    missing = [
        name
        for name, f in known.items()
        if f.init
        and f.default is dataclasses.MISSING
        and f.default_factory is dataclasses.MISSING
        and name not in values
    ]
    if missing:
        raise ValueError(f"{what}: missing field(s) {missing}")
    try:
        hints = typing.get_type_hints(kind)
    except (NameError, TypeError):  # annotations naming what only type checkers import
        hints = {}
    for name, value in values.items():
        if name in hints:
            check_json_value(value, hints[name], f"{what}.{name}")
    return dict(values)
