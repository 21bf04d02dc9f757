"""NeMo manifests: JSON lines ``{"audio_filepath": ..., "text": ..., "pred_text": ...}``.

A manifest holds one transcript per utterance: ``text`` is the reference and ``pred_text`` the
recognised text (NeMo's ``transcribe_speech.py`` adds it), so one file can be both. Other keys
(``duration``, ``offset``, ``lang``, ...) are allowed and not read. The utterance id is the file
stem of ``audio_filepath`` (``/data/dev/1272-128104-0000.flac`` -> ``1272-128104-0000``), or
the value of another key (``id_key``); a repeated id is refused with both lines named.

A manifest is a 1-best, not N-best lists: :func:`refuse_as_nbest` says so where an N-best file
is expected.
"""

from __future__ import annotations

from pathlib import Path, PurePath
from typing import Any

from rescorer.core.errors import InputError, shorten
from rescorer.formats._common import check_utt_id, is_file

# json, gzip and the JSON reader are imported where used: rescorer.refs imports this module
# to sniff every reference file (start-up of `rescorer wer`, issue 50).

PATH_KEY = "audio_filepath"
TEXT_KEY = "text"
PRED_KEY = "pred_text"
TEXT_KEYS = (TEXT_KEY, PRED_KEY)


def is_manifest_object(obj: object) -> bool:
    """A JSON object with ``audio_filepath`` and ``text`` or ``pred_text``."""
    return isinstance(obj, dict) and PATH_KEY in obj and any(k in obj for k in TEXT_KEYS)


def manifest_line(line: str) -> bool:
    """Whether one line of a file is a NeMo manifest record."""
    stripped = line.strip().lstrip("\ufeff")
    if not stripped.startswith("{"):
        return False
    import json

    try:
        return is_manifest_object(json.loads(stripped))
    except (ValueError, RecursionError):
        return False


def _first_line(path: Path, limit: int = 2**20) -> str | None:
    """The first non-blank line of a (``.gz``) file, cut at ``limit`` bytes; None if none or
    unreadable (the reader of the file names the trouble)."""
    import gzip
    import zlib

    opener = gzip.open if path.name.endswith(".gz") else open
    try:
        with opener(path, "rb") as f:
            while raw := f.readline(limit):
                text = raw.decode("utf-8", errors="replace").strip().lstrip("\ufeff")
                if text:
                    return text
    except (OSError, EOFError, zlib.error):
        return None
    return None


def looks_like_manifest(path: Path) -> bool:
    """The first non-blank line of a regular file is a manifest record (a pipe is not read)."""
    if not is_file(path):
        return False
    first = _first_line(path)
    return first is not None and manifest_line(first)


def not_nbest_error(path: Path, line: int | None = None) -> InputError:
    """The error of a NeMo manifest given where N-best lists go."""
    return InputError(
        "a NeMo manifest holds one hypothesis per utterance ('pred_text'), not N-best lists: "
        f"score it with `rescorer wer --ref {path} --ref-format nemo --hyp {path} "
        "--hyp-format nemo`",
        path,
        line,
    )


def refuse_as_nbest(path: Path) -> None:
    """:func:`not_nbest_error` when ``path`` is a NeMo manifest (by its first line)."""
    if looks_like_manifest(path):
        raise not_nbest_error(path)


def _utt_id(obj: dict[str, Any], id_key: str | None, path: Path, line: int) -> str:
    from rescorer.core.json_input import json_string

    if id_key is not None:
        if id_key not in obj:
            raise InputError(f"no {id_key!r} (--id-key)", path, line)
        value = obj[id_key]
        if isinstance(value, int) and not isinstance(value, bool):
            value = str(value)
        return check_utt_id(json_string(value, path, line, id_key), path, line)
    if PATH_KEY not in obj:
        raise InputError(
            f"no {PATH_KEY!r} to take the utterance id from (or give --id-key)", path, line
        )
    audio = json_string(obj[PATH_KEY], path, line, PATH_KEY)
    stem = PurePath(audio).stem if audio.strip() else ""
    if not stem:
        raise InputError(f"{PATH_KEY} {shorten(audio)!r} has no file name", path, line)
    return check_utt_id(stem, path, line)


def read_manifest(
    path: str | Path, field: str = TEXT_KEY, id_key: str | None = None
) -> dict[str, tuple[str, ...]]:
    """``{utt_id: words}`` of the ``field`` (``text``: references, ``pred_text``: hypotheses)
    of every record, in file order; blank lines are skipped."""
    path = Path(path)
    out: dict[str, tuple[str, ...]] = {}
    first: dict[str, int] = {}
    from rescorer.core.json_input import json_object_lines, json_string

    for lineno, obj in json_object_lines(path, "a JSON object (a NeMo manifest record)"):
        utt = _utt_id(obj, id_key, path, lineno)
        if utt in out:
            how = f"--id-key {id_key}" if id_key else f"the file stem of {PATH_KEY}"
            raise InputError(
                f"duplicate utterance id {utt!r} (first on line {first[utt]}; ids are {how}"
                f"{'' if id_key else '; give --id-key KEY to take them from another key'})",
                path,
                lineno,
            )
        if field not in obj:
            raise InputError(f"no {field!r} in this record", path, lineno)
        out[utt] = tuple(json_string(obj[field], path, lineno, field).split())
        first[utt] = lineno
    return out
