"""HyPoradise / LLM-correction N-best files: a JSON array of records.

The layout of the HyPoradise benchmark and of generative error-correction data sets built like
it, one record per utterance::

    [{"input": ["hyp one", "hyp two"], "output": "the reference",
      "score": [-0.19, -0.25], "id": "utt1"},
     ...]

``input``
    the N-best texts, best first (required; an empty list is an utterance without hypotheses).
``output``
    the reference text (optional; ``null`` = none). It fills ``NBest.references``, so commands
    that need references take them from here when ``--ref`` is not given.
``id``
    the utterance id (a string or an integer; optional). Either every record has one or none
    has: without ids, utterance ``k`` (0-based, in file order) gets the id ``f"{k:06d}"``
    (``000000``, ``000001``, ...), so ids do not depend on the file's size and sort in file order
    below a million records.
any other key holding a list
    a per-hypothesis score of that name (``"score": [...]``, ``"am_score": [...]``): one number
    per entry of ``input``, taken as it is (the toolkit assumes natural log, higher is better).
any other key holding a string, number, boolean, object or null
    metadata of the record (``instruction`` in HyPoradise); not read. Keys other than
    ``instruction`` are named in one warning per file, so a misspelt ``output`` does not pass
    unseen.

Errors name the file and the line on which the faulty record starts. The writer puts one record
per line, always with ``id``, with ``output`` where there is a reference and one list per score
name; subword tokens are not kept (the layout has no place for them).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path

from rescorer.core.errors import InputError, shorten
from rescorer.core.io import read_lines
from rescorer.core.json_input import decoder, json_errors, json_number, json_string, type_name
from rescorer.core.output import atomic_write
from rescorer.formats._common import check_finite, check_nbest_fields, check_utt_id
from rescorer.nbest import Hypothesis, NBest, NBestList

logger = logging.getLogger(__name__)

INPUT_KEY = "input"
OUTPUT_KEY = "output"
ID_KEY = "id"
KNOWN_METADATA = ("instruction",)
"""Keys of records that are metadata the reader skips without a warning."""

_RESERVED = (INPUT_KEY, OUTPUT_KEY, ID_KEY, *KNOWN_METADATA)


def default_id(index: int) -> str:
    """The utterance id of record ``index`` (0-based) in a file whose records have no ``id``."""
    return f"{index:06d}"


class _Text:
    """A decoded file with 1-based line numbers of character offsets (offsets only grow)."""

    def __init__(self, text: str):
        self.text = text
        self._pos = 0
        self._line = 1

    def line_at(self, pos: int) -> int:
        self._line += self.text.count("\n", self._pos, pos)
        self._pos = pos
        return self._line

    def skip_space(self, pos: int) -> int:
        text = self.text
        while pos < len(text) and text[pos] in " \t\r\n\ufeff":
            pos += 1
        return pos


def _records(path: Path) -> Iterator[tuple[int, object]]:
    """``(line, value)`` of each element of the file's top-level JSON array."""
    doc = _Text("\n".join(line for _, line in read_lines(path)))
    text = doc.text
    records = decoder()
    pos = doc.skip_space(0)
    if pos >= len(text) or text[pos] != "[":
        found = "nothing" if pos >= len(text) else repr(text[pos])
        raise InputError(
            f"expected a JSON array of records [{{'input': [...]}}, ...], found {found}",
            path,
            doc.line_at(min(pos, len(text))),
        )
    pos = doc.skip_space(pos + 1)
    if pos < len(text) and text[pos] == "]":
        pos += 1
    else:
        while True:
            line = doc.line_at(pos)
            with json_errors(path, line, decoder_lines=True):
                value, pos = records.raw_decode(text, pos)
            yield line, value
            pos = doc.skip_space(pos)
            if pos < len(text) and text[pos] == ",":
                pos = doc.skip_space(pos + 1)
                continue
            if pos < len(text) and text[pos] == "]":
                pos += 1
                break
            found = "the end of the file" if pos >= len(text) else repr(text[pos])
            raise InputError(
                f"expected ',' or ']' after a record, found {found}", path, doc.line_at(pos)
            )
    pos = doc.skip_space(pos)
    if pos < len(text):
        raise InputError("text after the closing ']' of the array", path, doc.line_at(pos))


def _record_id(value: object, path: Path, line: int, what: str) -> str:
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    utt = json_string(value, path, line, f"{what}: id")
    return check_utt_id(utt, path, line)


def _hypotheses(obj: dict[str, object], path: Path, line: int, what: str) -> list[Hypothesis]:
    texts = obj.get(INPUT_KEY)
    if not isinstance(texts, list):
        shown = "no 'input'" if INPUT_KEY not in obj else f"'input' is {type_name(texts)}"
        raise InputError(f"{what}: {shown}; expected a list of hypothesis texts", path, line)
    words = [tuple(json_string(t, path, line, f"{what}: input").split()) for t in texts]
    scores: list[dict[str, float]] = [{} for _ in words]
    for name, values in obj.items():
        if name in _RESERVED or not isinstance(values, list):
            continue
        if len(values) != len(words):
            raise InputError(
                f"{what}: {shorten(name)!r} has {len(values)} values for {len(words)} "
                "hypotheses (a list is read as one score per hypothesis)",
                path,
                line,
            )
        for k, v in enumerate(values):
            scores[k][name] = json_number(v, path, line, f"{what}: {shorten(name)!r}")
    return [Hypothesis(w, s) for w, s in zip(words, scores, strict=True)]


def read_hyporadise(path: Path) -> NBest:
    """Read a JSON array of ``{"input": [...], "output": ...}`` records (see the module)."""
    path = Path(path)
    lists: list[NBestList] = []
    refs: dict[str, tuple[str, ...]] = {}
    first_line: dict[str, int] = {}
    with_ids: bool | None = None
    ignored: set[str] = set()
    for index, (line, obj) in enumerate(_records(path)):
        what = f"record {index}"
        if not isinstance(obj, dict):
            raise InputError(f"{what}: expected an object, got {type_name(obj)}", path, line)
        has_id = ID_KEY in obj
        if with_ids is None:
            with_ids = has_id
        elif has_id != with_ids:
            raise InputError(
                f"{what} {'has' if has_id else 'has no'} 'id' but record 0 "
                f"{'has none' if has_id else 'has one'}: give every record an id, or none",
                path,
                line,
            )
        utt = _record_id(obj[ID_KEY], path, line, what) if has_id else default_id(index)
        if utt in first_line:
            raise InputError(
                f"duplicate utterance id {utt!r} (first in the record on line {first_line[utt]})",
                path,
                line,
            )
        first_line[utt] = line
        lists.append(NBestList(utt, tuple(_hypotheses(obj, path, line, what))))
        ref = obj.get(OUTPUT_KEY)
        if ref is not None:
            refs[utt] = tuple(json_string(ref, path, line, f"{what}: output").split())
        ignored.update(k for k, v in obj.items() if k not in _RESERVED and not isinstance(v, list))
    if ignored:
        logger.warning(
            "%s: record field(s) %s ignored (neither input, output, id nor a per-hypothesis "
            "score list)",
            path,
            ", ".join(repr(shorten(k)) for k in sorted(ignored)),
        )
    return NBest(lists, refs or None)


def _score_lists(nb: NBestList) -> dict[str, list[float]]:
    names = list(nb.hyps[0].scores) if len(nb) else []
    for rank, hyp in enumerate(nb, start=1):
        if sorted(hyp.scores) != sorted(names):
            raise ValueError(
                f"cannot write {nb.utt_id!r} as hyporadise: hypothesis {rank} has scores "
                f"{sorted(hyp.scores)}, hypothesis 1 has {sorted(names)} (one list per name)"
            )
    clash = sorted(set(names) & set(_RESERVED))
    if clash:
        raise ValueError(f"score name {clash[0]!r} clashes with a hyporadise record key")
    return {name: [hyp.scores[name] for hyp in nb] for name in names}


def write_hyporadise(nbest: NBest, path: Path) -> None:
    """Write one record per line: ``id``, ``input``, ``output`` (with a reference), scores."""
    check_nbest_fields(nbest)
    check_finite(nbest)
    refs = nbest.references or {}
    records = []
    for utt, nb in nbest.items():
        record: dict[str, object] = {ID_KEY: utt, INPUT_KEY: [hyp.text for hyp in nb]}
        if utt in refs:
            record[OUTPUT_KEY] = " ".join(refs[utt])
        record.update(_score_lists(nb))
        records.append(json.dumps(record, ensure_ascii=False, allow_nan=False))
    with atomic_write(path) as f:
        f.write("[\n" + ",\n".join(records) + "\n]\n" if records else "[]\n")
