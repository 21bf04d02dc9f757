"""Per-utterance context files: utterance id -> context record (``{"genre": "news", ...}``).

Two formats, told apart by the file name (``.jsonl``/``.json`` or ``.tsv``, ``.gz`` allowed) or,
for other names, by the first non-blank line (``{`` starts JSONL):

``jsonl`` -- one object per line; the canonical form keeps the fields in ``fields``::

    {"utt": "1272-128104-0000", "fields": {"genre": "news", "speaker": "1272"}}

  The flat form ``{"utt": "1272-128104-0000", "genre": "news"}`` is accepted too (every key
  but ``utt`` is a field). Values are strings or numbers (numbers are kept as their decimal
  text; a list of numbers becomes ``"x,y"``, as a numerical variable of several numbers reads
  it); ``null`` or ``""`` means missing and leaves the field out of the record.

``tsv`` -- a header line ``utt<TAB>field1<TAB>field2 ...``, then one line per utterance with
  exactly as many tab-separated cells; an empty cell means missing.

Blank lines are skipped. A malformed line, an empty or duplicate utterance id, or a bad header
raises :class:`rescorer.core.errors.InputError` naming the file and line. Whether a model knows a
field or value is the model's business (a torch model ignores fields it does not declare and
treats unseen values as missing); an n-gram model ignores contexts altogether.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping
from pathlib import Path

from rescorer.core.errors import InputError, check_same_ids, shorten
from rescorer.core.io import read_lines
from rescorer.core.json_input import json_object_lines, type_name

logger = logging.getLogger(__name__)

CONTEXT_FORMATS = ("jsonl", "tsv")
ID_KEY = "utt"
FIELDS_KEY = "fields"

Contexts = dict[str, dict[str, str]]


def detect_context_format(path: str | Path) -> str:
    """``jsonl`` or ``tsv`` from the name, else from the first non-blank line."""
    path = Path(path)
    name = path.name[:-3] if path.name.endswith(".gz") else path.name
    suffix = Path(name).suffix.lower()
    if suffix in (".jsonl", ".json"):
        return "jsonl"
    if suffix == ".tsv":
        return "tsv"
    for _, line in read_lines(path):
        if line.strip():
            return "jsonl" if line.lstrip().startswith("{") else "tsv"
    return "tsv"


def read_contexts(path: str | Path, fmt: str | None = None) -> Contexts:
    """Read a context file: ``{utt_id: {field: value}}`` (``fmt`` None: detected)."""
    path = Path(path)
    fmt = fmt or detect_context_format(path)
    if fmt == "jsonl":
        out = _read_jsonl(path)
    elif fmt == "tsv":
        out = _read_tsv(path)
    else:
        raise ValueError(f"context format must be one of {CONTEXT_FORMATS}, got {fmt!r}")
    logger.info("read contexts of %d utterances from %s (%s)", len(out), path, fmt)
    return out


def check_context_ids(ids: Iterable[str], contexts: Mapping[str, object], path: str | Path) -> None:
    """The context file must name exactly the utterances ``ids`` (InputError naming the rest)."""
    check_same_ids(set(ids), set(contexts), "context", path)


def _check_id(value: object, path: Path, lineno: int) -> str:
    if not isinstance(value, str) or not value.strip():
        raise InputError(
            f"expected a non-empty string utterance id, got {shorten(repr(value))}", path, lineno
        )
    if any(ch.isspace() for ch in value):
        raise InputError(f"utterance id {value!r} contains whitespace", path, lineno)
    return value


def _add(
    out: Contexts, first: dict[str, int], utt: str, record: dict[str, str], path: Path, lineno: int
) -> None:
    if utt in out:
        raise InputError(
            f"duplicate utterance id {utt!r} (first on line {first[utt]})", path, lineno
        )
    out[utt] = record
    first[utt] = lineno


def _check_field_name(name: str, path: Path, lineno: int) -> str:
    if not name or any(ch.isspace() for ch in name):
        raise InputError(f"bad field name {name!r} (expected a name without spaces)", path, lineno)
    return name


def _json_value(field: str, value: object, path: Path, lineno: int) -> str | None:
    """A JSON field value as text; None for missing (null or empty)."""
    if value is None:
        return None
    if isinstance(value, str):
        return value if value.strip() else None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if not math.isfinite(value):
            raise InputError(f"field {field!r}: value is not finite", path, lineno)
        return str(value)
    if isinstance(value, list) and all(
        isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) for x in value
    ):
        return ",".join(str(x) for x in value)
    raise InputError(
        f"field {field!r}: expected a string, a number, a list of numbers or null, "
        f"got {type_name(value)}",
        path,
        lineno,
    )


def _read_jsonl(path: Path) -> Contexts:
    out: Contexts = {}
    first: dict[str, int] = {}
    expected = f'an object {{"{ID_KEY}": ..., "{FIELDS_KEY}": {{...}}}}'
    for lineno, obj in json_object_lines(path, expected):
        if ID_KEY not in obj:
            raise InputError(f'missing "{ID_KEY}" (the utterance id)', path, lineno)
        utt = _check_id(obj[ID_KEY], path, lineno)
        if FIELDS_KEY in obj:
            extra = sorted(k for k in obj if k not in (ID_KEY, FIELDS_KEY))
            if extra:
                raise InputError(
                    f'keys {extra} beside "{FIELDS_KEY}": put every field inside "{FIELDS_KEY}"',
                    path,
                    lineno,
                )
            fields = obj[FIELDS_KEY]
            if not isinstance(fields, dict):
                raise InputError(
                    f'"{FIELDS_KEY}" must be an object of field -> value, got {type_name(fields)}',
                    path,
                    lineno,
                )
        else:
            fields = {k: v for k, v in obj.items() if k != ID_KEY}
        record: dict[str, str] = {}
        for name, value in fields.items():
            text = _json_value(_check_field_name(name, path, lineno), value, path, lineno)
            if text is not None:
                record[name] = text
        _add(out, first, utt, record, path, lineno)
    return out


def _read_tsv(path: Path) -> Contexts:
    out: Contexts = {}
    first: dict[str, int] = {}
    header: list[str] | None = None
    for lineno, line in read_lines(path):
        if not line.strip():
            continue
        cells = [c.strip() for c in line.split("\t")]
        if header is None:
            if cells[0] != ID_KEY:
                raise InputError(
                    f"expected a header line 'utt<TAB>field1<TAB>...', got {shorten(line)!r}",
                    path,
                    lineno,
                )
            names = [_check_field_name(c, path, lineno) for c in cells[1:]]
            dup = sorted({n for n in names if names.count(n) > 1} | ({ID_KEY} & set(names)))
            if dup:
                raise InputError(f"repeated header field(s) {dup}", path, lineno)
            header = names
            continue
        if len(cells) != len(header) + 1:
            raise InputError(
                f"expected {len(header) + 1} tab-separated cells (utt + {len(header)} fields "
                f"from the header), got {len(cells)}",
                path,
                lineno,
            )
        utt = _check_id(cells[0], path, lineno)
        record = {name: value for name, value in zip(header, cells[1:], strict=True) if value}
        _add(out, first, utt, record, path, lineno)
    if header is None:
        raise InputError("empty context file (expected a header line 'utt<TAB>field1...')", path)
    return out
