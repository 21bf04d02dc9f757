"""JSON and JSONL N-best files.

``json`` -- one object for the whole set (the layout several rescoring recipes use)::

    {"utt1": {"hyp1": {"score": -12.5, "text": "w1 w2"}, "hyp2": {...}, "ref": "w1 w2"}, ...}

Hypothesis keys end in an integer that gives the rank (``hyp1``, ``hyp2``, ... ``hyp10``; sorted
numerically). ``ref`` is optional and fills ``NBest.references``. Each hypothesis needs
``text``; ``tokens`` (a list of strings) is optional; every other field must be a number and
becomes a score of that name, taken as it is (the toolkit assumes natural log).

``jsonl`` -- the toolkit's canonical format, one utterance per line::

    {"utt": "utt1", "hyps": [{"text": "w1 w2", "scores": {"am": -1.5, "lm": -7.25},
                              "tokens": ["▁w1", "▁w2"]}], "ref": "w1 w2"}

``scores`` holds any names (natural log for log-probabilities, as everywhere in the toolkit);
``tokens`` and ``ref`` are optional. Unknown keys are errors, so a misspelt key is not silently
ignored. Floats are written with ``repr`` precision, so a write/read round trip is exact.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from rescorer.core import json_input
from rescorer.core.bulk import paused_gc
from rescorer.core.errors import InputError, shorten
from rescorer.core.io import read_lines
from rescorer.core.json_input import json_number, json_string, parse_json, type_name
from rescorer.core.numbers import MAX_DIGITS
from rescorer.core.output import atomic_write
from rescorer.formats._common import (
    check_field,
    check_finite,
    check_nbest_fields,
    check_utt_id,
    check_words,
)
from rescorer.formats.nemo import is_manifest_object, not_nbest_error, refuse_as_nbest
from rescorer.nbest import Hypothesis, NBest, NBestList

_RANK_KEY = re.compile(r"^(.*?)([0-9]+)$")
REF_KEY = "ref"
_HYP_FIELDS = ("text", "tokens")


def _tokens(value: object, path: Path, line: int | None, what: str) -> tuple[str, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list):
        raise InputError(f"{what}: tokens must be a list of strings", path, line)
    return tuple(json_string(t, path, line, f"{what}: token") for t in value)


def _ref(value: object, path: Path, line: int | None, what: str) -> tuple[str, ...] | None:
    if value is None:
        return None
    return tuple(json_string(value, path, line, f"{what}: ref").split())


# --- json ---------------------------------------------------------------------------------


def _json_hyp(value: object, path: Path, what: str) -> Hypothesis:
    if not isinstance(value, dict):
        raise InputError(f"{what}: expected an object, got {type_name(value)}", path)
    if "text" not in value:
        raise InputError(f"{what}: no 'text'", path)
    words = tuple(json_string(value["text"], path, None, f"{what}: text").split())
    tokens = _tokens(value.get("tokens"), path, None, what)
    scores = {
        json_string(name, path, None, f"{what}: score name"): json_number(
            v, path, None, f"{what}: score {shorten(name)!r}"
        )
        for name, v in value.items()
        if name not in _HYP_FIELDS
    }
    return Hypothesis(words, scores, tokens)


def read_json(path: Path) -> NBest:
    """Read a ``{utt: {hypN: {...}, "ref": ...}}`` JSON file (see the module docstring)."""
    path = Path(path)
    try:
        obj = json_input.read_json(path)
    except InputError:
        refuse_as_nbest(path)  # JSON lines: say what the file is when it is a manifest
        raise
    if is_manifest_object(obj):
        raise not_nbest_error(path)
    if not isinstance(obj, dict):
        hint = " (an array of records is the hyporadise format)" if isinstance(obj, list) else ""
        raise InputError(f"expected a JSON object of utterances, got {type_name(obj)}{hint}", path)
    lists = []
    refs: dict[str, tuple[str, ...]] = {}
    for utt, entry in obj.items():
        check_utt_id(json_string(utt, path, None, "utterance id"), path, None)
        if not isinstance(entry, dict):
            raise InputError(f"utterance {utt!r}: expected an object, got {type_name(entry)}", path)
        ranked: dict[int, tuple[str, Hypothesis]] = {}
        for key, value in entry.items():
            if key == REF_KEY:
                ref = _ref(value, path, None, f"utterance {utt!r}")
                if ref is not None:
                    refs[utt] = ref
                continue
            m = _RANK_KEY.match(key)
            if not m or len(m.group(2)) > MAX_DIGITS:
                raise InputError(
                    f"utterance {utt!r}: key {shorten(key)!r} is neither 'ref' nor a "
                    "hypothesis key ending in its rank (hyp1, hyp2, ...)",
                    path,
                )
            rank = int(m.group(2))
            if rank in ranked:
                raise InputError(
                    f"utterance {utt!r}: keys {ranked[rank][0]!r} and {shorten(key)!r} give the "
                    f"same rank {rank}",
                    path,
                )
            ranked[rank] = (key, _json_hyp(value, path, f"utterance {utt!r} {shorten(key)!r}"))
        lists.append(NBestList(utt, tuple(ranked[r][1] for r in sorted(ranked))))
    return NBest(lists, refs or None)


def _refs_of(nbest: NBest) -> Mapping[str, tuple[str, ...]]:
    return nbest.references or {}


def write_json(nbest: NBest, path: Path) -> None:
    """Write the ``json`` layout; hypothesis keys ``hyp1..hypN``, scores as they are stored."""
    check_nbest_fields(nbest)
    check_finite(nbest)
    refs = _refs_of(nbest)
    out: dict[str, dict[str, object]] = {}
    for utt, nb in nbest.items():
        entry: dict[str, object] = {}
        for rank, hyp in enumerate(nb, start=1):
            clash = set(hyp.scores) & set(_HYP_FIELDS)
            if clash:
                raise ValueError(f"score name {sorted(clash)[0]!r} clashes with a json field")
            item: dict[str, object] = {"text": hyp.text, **hyp.scores}
            if hyp.tokens is not None:
                item["tokens"] = list(hyp.tokens)
            entry[f"hyp{rank}"] = item
        if utt in refs:
            entry[REF_KEY] = " ".join(refs[utt])
        out[utt] = entry
    with atomic_write(path) as f:
        json.dump(out, f, ensure_ascii=False, allow_nan=False, indent=1)
        f.write("\n")


# --- jsonl --------------------------------------------------------------------------------

_LINE_KEYS = {"utt", "hyps", REF_KEY}
_HYP_KEYS = {"text", "scores", "tokens"}


def _jsonl_hyp(value: object, path: Path, line: int, what: str) -> Hypothesis:
    if not isinstance(value, dict):
        raise InputError(f"{what}: expected an object, got {type_name(value)}", path, line)
    unknown = set(value) - _HYP_KEYS
    if unknown:
        raise InputError(f"{what}: unknown key {shorten(sorted(unknown)[0])!r}", path, line)
    if "text" not in value:
        raise InputError(f"{what}: no 'text'", path, line)
    words = tuple(json_string(value["text"], path, line, f"{what}: text").split())
    raw = value.get("scores", {})
    if not isinstance(raw, dict):
        raise InputError(f"{what}: scores must be an object, got {type_name(raw)}", path, line)
    scores = {
        json_string(n, path, line, f"{what}: score name"): json_number(
            v, path, line, f"{what}: score {shorten(n)!r}"
        )
        for n, v in raw.items()
    }
    return Hypothesis(words, scores, _tokens(value.get("tokens"), path, line, what))


@dataclass(frozen=True)
class JsonlIndex:
    """What a light pass over a JSONL set finds: ids, list sizes and embedded references."""

    # Utterance ids in file order, and the number of hypotheses of each.
    ids: tuple[str, ...]
    sizes: tuple[int, ...]
    # Embedded references by id (None when no line has one).
    references: dict[str, tuple[str, ...]] | None


def _jsonl_objects(path: Path) -> Iterator[tuple[int, dict[str, Any], str]]:
    """``(line number, object, utterance id)`` of each non-blank line; the line's keys, its id
    and the types of ``hyps`` checked, ids unique (the hypotheses are not looked at)."""
    first_line: dict[str, int] = {}
    for lineno, line in read_lines(path):
        if not line.strip():
            continue
        obj = parse_json(line, path, lineno)
        if not isinstance(obj, dict):
            raise InputError(f"expected a JSON object, got {type_name(obj)}", path, lineno)
        unknown = set(obj) - _LINE_KEYS
        if unknown and is_manifest_object(obj):
            raise not_nbest_error(path, lineno)
        if unknown:
            raise InputError(f"unknown key {shorten(sorted(unknown)[0])!r}", path, lineno)
        if "utt" not in obj or "hyps" not in obj:
            raise InputError("each line needs 'utt' and 'hyps'", path, lineno)
        utt = check_utt_id(json_string(obj["utt"], path, lineno, "utt"), path, lineno)
        if utt in first_line:
            raise InputError(
                f"duplicate utterance {utt!r} (first on line {first_line[utt]})", path, lineno
            )
        first_line[utt] = lineno
        if not isinstance(obj["hyps"], list):
            raise InputError(f"'hyps' must be a list, got {type_name(obj['hyps'])}", path, lineno)
        yield lineno, obj, utt


def index_jsonl(path: Path) -> JsonlIndex:
    """The ids, list sizes and references of a JSONL set, holding no hypothesis (for reading
    the set again list by list with :func:`iter_jsonl`)."""
    path = Path(path)
    ids: list[str] = []
    sizes: list[int] = []
    refs: dict[str, tuple[str, ...]] = {}
    for lineno, obj, utt in _jsonl_objects(path):
        ids.append(utt)
        sizes.append(len(obj["hyps"]))
        ref = _ref(obj.get(REF_KEY), path, lineno, "ref")
        if ref is not None:
            refs[utt] = ref
    return JsonlIndex(tuple(ids), tuple(sizes), refs or None)


def iter_jsonl(path: Path) -> Iterator[tuple[NBestList, tuple[str, ...] | None]]:
    """Each list of a JSONL set with its embedded reference (None if it has none), read lazily:
    one line in memory at a time (see the module docstring for the format)."""
    path = Path(path)
    for lineno, obj, utt in _jsonl_objects(path):
        hyps = tuple(
            _jsonl_hyp(h, path, lineno, f"hypothesis {i}") for i, h in enumerate(obj["hyps"], 1)
        )
        yield NBestList(utt, hyps), _ref(obj.get(REF_KEY), path, lineno, "ref")


def read_jsonl(path: Path) -> NBest:
    """Read the canonical JSONL format (see the module docstring)."""
    lists = []
    refs: dict[str, tuple[str, ...]] = {}
    for nb, ref in iter_jsonl(path):
        lists.append(nb)
        if ref is not None:
            refs[nb.utt_id] = ref
    return NBest(lists, refs or None)


def write_jsonl_lines(nbest: NBest, out: TextIO) -> None:
    """Append ``nbest`` to an open JSONL file, one line per list (its references embedded).

    Lists are checked as they are written (ids and words fields, scores finite) and the lines
    written in one call, so a refused set leaves nothing of itself in ``out``.
    """
    refs = _refs_of(nbest)
    dumps = json.JSONEncoder(ensure_ascii=False, allow_nan=False).encode
    with paused_gc():  # rescorer.core.bulk
        lines = _jsonl_lines(nbest, refs, dumps)
    out.write("\n".join(lines) + "\n" if lines else "")


def _jsonl_lines(
    nbest: NBest, refs: Mapping[str, tuple[str, ...]], dumps: Callable[[object], str]
) -> list[str]:
    lines = []
    for utt, nb in nbest.items():
        check_field(utt, "utterance id")
        hyps = []
        for hyp in nb:
            text = " ".join(hyp.words)
            if text.split() != list(hyp.words) or "\ufeff" in text:  # check_words says why
                check_words(hyp.words, utt)
            item: dict[str, object] = {"text": text, "scores": hyp.scores}
            if hyp.tokens is not None:
                item["tokens"] = list(hyp.tokens)
            hyps.append(item)
        obj: dict[str, object] = {"utt": utt, "hyps": hyps}
        if utt in refs:
            obj[REF_KEY] = " ".join(refs[utt])
        try:
            lines.append(dumps(obj))
        except ValueError:  # a non-finite score: say which
            check_finite(nbest.subset([utt]))
            raise
    return lines


def write_jsonl(nbest: NBest, path: Path) -> None:
    """Write the canonical JSONL format; a read gives back exactly ``nbest``."""
    with atomic_write(path) as f:  # a refused list leaves no file (the temp one is removed)
        write_jsonl_lines(nbest, f)
