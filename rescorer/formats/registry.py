"""The N-best format registry: readers and writers by name, and format detection.

Imported on first use through :mod:`rescorer.formats` (``from rescorer.formats import
read_nbest``), so that a command that reads no N-best list (``rescorer wer``) does not import
every format's module. The formats and how each stores its scores: :mod:`rescorer.formats`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import rescorer.formats.espnet as espnet
import rescorer.formats.hyporadise as hyporadise
import rescorer.formats.json_formats as json_formats
import rescorer.formats.kaldi as kaldi
import rescorer.formats.nemo as nemo
import rescorer.formats.srilm as srilm
from rescorer.core.bulk import paused_gc
from rescorer.core.errors import InputError, shorten
from rescorer.formats._common import first_content_line, is_dir
from rescorer.nbest import NBest

READERS: dict[str, Callable[[Path], NBest]] = {
    "espnet": espnet.read_espnet,
    "srilm1": srilm.read_srilm1,
    "srilm2": srilm.read_srilm2,
    "srilm3": srilm.read_srilm3,
    "kaldi": kaldi.read_kaldi,
    "json": json_formats.read_json,
    "jsonl": json_formats.read_jsonl,
    "hyporadise": hyporadise.read_hyporadise,
}

WRITERS: dict[str, Callable[[NBest, Path], None]] = {
    "espnet": espnet.write_espnet,
    "srilm1": srilm.write_srilm1,
    "srilm3": srilm.write_srilm3,
    "kaldi": kaldi.write_kaldi,
    "json": json_formats.write_json,
    "jsonl": json_formats.write_jsonl,
    "hyporadise": hyporadise.write_hyporadise,
}

FILE_FORMATS = frozenset({"json", "jsonl"})
"""Formats written as one file; the others are folders."""

__all__ = ["FILE_FORMATS", "READERS", "WRITERS", "detect_format", "read_nbest", "write_nbest"]


def _srilm_line_format(line: str) -> str | None:
    tokens = line.split()
    if not tokens:
        return None
    if tokens[0] == srilm.HEADER1:
        return "srilm1"
    if tokens[0] == srilm.HEADER2:
        return "srilm2"
    if srilm.looks_like_nbest_line(line) and not tokens[0].startswith("("):
        return "srilm3"
    return None


def _detect_dir(path: Path) -> str:
    names = {p.name for p in path.iterdir()}
    if is_dir(path / "raw_hypotheses") or any(
        espnet.KBEST_DIR.match(n) and is_dir(path / n) for n in names
    ):
        return "espnet"
    costs = sorted(n for n in names if n.endswith(kaldi.COST_SUFFIX))
    if "text" in names and costs:
        return "kaldi"
    if espnet.KBEST_DIR.match(path.name) or ("text" in names and names & {"score", "scores"}):
        raise InputError(
            "this looks like one <k>best_recog folder of an ESPnet set; "
            "give the set folder (holding raw_hypotheses/) instead",
            path,
        )
    if "text" in names:
        return "kaldi"
    files = srilm.input_files(path)  # raises if the folder holds no files
    if not files:
        raise InputError(f"cannot tell the N-best format: {srilm.LIST_NAME} lists no files", path)
    first = None
    for first_file, _, _ in files:  # the first file with content (srilm3 files may be empty)
        first = first_content_line(first_file)
        if first is not None:
            break
    fmt = _srilm_line_format(first[1]) if first else None
    if fmt is None:
        shown = "empty" if first is None else repr(shorten(first[1]))
        raise InputError(
            "cannot tell the N-best format: no raw_hypotheses/ or <k>best_recog/ (espnet), no "
            f"text (kaldi), and the first non-empty file {first_file.name} starts {shown}, not "
            "an NBestList header or 'ascore lscore nwords' (srilm)",
            path,
        )
    return fmt


def detect_format(path: str | Path) -> str:
    """Guess the format of ``path`` (a file or folder) from names and the first content line.

    Folders: ``raw_hypotheses/`` or ``<k>best_recog/`` -> espnet; ``text`` (+ ``*_cost``) ->
    kaldi; else SRILM files (by the first file's first line). Files: ``.jsonl``/``.json``
    suffixes (also ``.gz``; a ``.json`` file that starts with ``[`` is hyporadise), else a first
    line that starts a JSON array (hyporadise) or object (with ``"utt"`` -> jsonl), an
    ``NBestList`` header or three numbers (srilm), or a file list whose first entry is one of
    those. Raises :class:`InputError` saying what it looked at when it cannot tell.
    """
    path = Path(path)
    if not path.exists():
        raise InputError("no such file or folder", path)
    if is_dir(path):
        return _detect_dir(path)
    nemo.refuse_as_nbest(path)  # a 1-best manifest, not lists
    name = path.name[:-3] if path.name.endswith(".gz") else path.name
    if name.endswith(".jsonl"):
        return "jsonl"
    first = first_content_line(path)
    if name.endswith(".json"):
        return "hyporadise" if first and first[1].lstrip(" \t\ufeff").startswith("[") else "json"
    if first is None:
        raise InputError("cannot tell the N-best format of an empty file", path)
    lineno, line = first
    stripped = line.strip()
    if stripped.lstrip("\ufeff").startswith("["):
        return "hyporadise"
    if stripped.startswith("{"):
        try:
            obj = json.loads(stripped)
        except (ValueError, RecursionError):
            return "json"  # a multi-line JSON document
        return "jsonl" if isinstance(obj, dict) and "utt" in obj else "json"
    fmt = _srilm_line_format(line)
    if fmt is not None:
        return fmt
    files = srilm.input_files(path)
    if files and files[0][0] != path:  # a file list (non-empty: its first line names a file)
        inner = None
        for first_file, _, _ in files:
            inner = first_content_line(first_file)
            if inner is not None:
                break
        fmt = _srilm_line_format(inner[1]) if inner else None
        if fmt is not None:
            return fmt
        # the listed file is named, never shown: a list may name any file on the machine
        raise InputError(
            f"file list: its first non-empty file {first_file} is not an SRILM N-best file "
            "(no NBestList header, '(score)' or 'ascore lscore nwords' line)",
            path,
            lineno,
        )
    raise InputError(
        f"cannot tell the N-best format: the first line {shorten(stripped)!r} is not JSON, "
        "an NBestList header, 'ascore lscore nwords words' or the name of an existing file",
        path,
        lineno,
    )


def read_nbest(path: str | Path, fmt: str | None = None) -> NBest:
    """Read an N-best set in format ``fmt`` (detected when None); scores in natural log."""
    path = Path(path)
    if fmt is None:
        fmt = detect_format(path)
    reader = READERS.get(fmt)
    if reader is None:
        raise InputError(f"unknown N-best format {fmt!r} (known: {', '.join(READERS)})")
    with paused_gc():  # millions of small objects, no cycles (rescorer.core.bulk)
        return reader(path)


def write_nbest(nbest: NBest, path: str | Path, fmt: str) -> None:
    """Write ``nbest`` in format ``fmt`` (natural-log scores converted as the format needs)."""
    writer = WRITERS.get(fmt)
    if writer is None:
        raise ValueError(f"no writer for N-best format {fmt!r} (known: {', '.join(WRITERS)})")
    with paused_gc():
        writer(nbest, Path(path))
