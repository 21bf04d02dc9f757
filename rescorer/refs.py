"""Reference transcripts and speaker maps: sclite ``trn``, Kaldi ``text``, ``utt2spk``; the
choice of a transcript file's format (also NeMo manifests, and sclite ``stm``/``ctm``, which
:mod:`rescorer.formats.sclite` reads: they are scored segment by segment, never by id).

Transcripts are returned as ``{utt_id: (w1, w2, ...)}``; an empty transcript is an empty tuple.

Formats are chosen by name or detected, never guessed silently: ``*.trn``, ``*.stm``, ``*.ctm``
by name, ``*.json``/``*.jsonl`` holding NeMo records (``audio_filepath`` and ``text`` or
``pred_text``) as ``nemo``, a first line ending ``(id)`` as trn, anything else as Kaldi text. A
file read as Kaldi text or trn whose first lines look like another format (sclite ``;;``
comments, stm segments, ctm words, JSON lines) is refused with the candidates and the option to
pass.

sclite ``trn`` lines are ``w1 w2 ... (id)``: the id is the text inside the final parentheses.
ESPnet writes the id as ``<speaker>-<uttid>`` where the utterance id itself begins with
``<speaker>-`` (LibriSpeech ``(1272-128104-1272-128104-0000)`` is speaker ``1272-128104``,
utterance ``1272-128104-0000``); :func:`read_trn` can strip that speaker prefix.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from rescorer.core.errors import InputError, describe_id_mismatch, shorten
from rescorer.core.io import read_lines
from rescorer.core.output import atomic_write
from rescorer.formats import nemo, sniff
from rescorer.formats._common import check_field, first_content_line, read_keyed

logger = logging.getLogger(__name__)

ID_STYLES = ("auto", "full", "espnet")
REF_FORMATS = ("trn", "kaldi", "stm", "nemo")
"""Formats of a reference file (``stm`` only against a ctm hypothesis)."""
HYP_FORMATS = ("trn", "kaldi", "ctm", "nemo")
"""Formats of a hypothesis text (``ctm`` only against an stm reference)."""
SNIFF_LINES = 20
"""Non-blank lines a Kaldi text or trn is checked on for the look of another format."""
TRN_ID = re.compile(r"\(([^()\s]+)\)\s*$")
"""The id at the end of an sclite trn line: ``words (id)``."""


def split_espnet_id(trn_id: str) -> tuple[str, str] | None:
    """``"spk-spk-rest"`` -> ``("spk", "spk-rest")``, or None when the id is not of that shape.

    The speaker is the shortest dash-separated prefix ``S`` for which the rest starts with
    ``S-`` again.
    """
    start = 0
    while True:
        i = trn_id.find("-", start)
        if i < 0:
            return None
        speaker, utt = trn_id[:i], trn_id[i + 1 :]
        if speaker and utt.startswith(speaker + "-") and len(utt) > len(speaker) + 1:
            return speaker, utt
        start = i + 1


def _parse_trn_line(line: str, path: Path, lineno: int) -> tuple[str, tuple[str, ...]]:
    m = TRN_ID.search(line)
    if not m:
        raise InputError(f"expected 'words (id)', got {shorten(line.strip())!r}", path, lineno)
    return m.group(1), tuple(line[: m.start()].split())


def read_trn(
    path: str | Path, id_style: str = "auto", option: str = "--ref-format"
) -> dict[str, tuple[str, ...]]:
    """Read an sclite ``trn`` file: ``{id: words}``.

    ``id_style``: ``full`` keeps ids as written; ``espnet`` strips the ``<speaker>-`` prefix
    (an id not of that shape is an error); ``auto`` strips when every id has that shape, else
    keeps them all as written. A file that looks like another format is refused
    (:func:`check_not_other_format`; ``option`` is named in the message).
    """
    return {key: words for key, _, words in _trn_rows(path, id_style, option)}


def trn_ids(path: str | Path, id_style: str = "auto") -> dict[str, str]:
    """The ids of a trn file as written, keyed by the ids :func:`read_trn` gives: a hypothesis
    trn written with them (:func:`write_trn_lines`) pairs with this file in sclite."""
    return {key: trn_id for key, trn_id, _ in _trn_rows(path, id_style)}


def _trn_rows(
    path: str | Path, id_style: str, option: str = "--ref-format"
) -> list[tuple[str, str, tuple[str, ...]]]:
    """``(id as read_trn gives it, id as written, words)`` of each line of a trn file."""
    if id_style not in ID_STYLES:
        raise ValueError(f"id_style must be one of {ID_STYLES}, got {id_style!r}")
    path = Path(path)
    rows: list[tuple[int, str, tuple[str, ...]]] = []
    for lineno, line in checked_lines(path, "trn", option):
        if line.strip():
            rows.append((lineno, *_parse_trn_line(line, path, lineno)))
    strip = id_style == "espnet"
    if id_style == "auto":
        strip = bool(rows) and all(split_espnet_id(trn_id) for _, trn_id, _ in rows)
    out: list[tuple[str, str, tuple[str, ...]]] = []
    first: dict[str, int] = {}
    for lineno, trn_id, words in rows:
        key = trn_id
        if strip:
            parts = split_espnet_id(trn_id)
            if parts is None:
                raise InputError(
                    f"id {trn_id!r} is not <speaker>-<uttid> with the uttid starting "
                    "<speaker>- (ESPnet style)",
                    path,
                    lineno,
                )
            key = parts[1]
        if key in first:
            raise InputError(f"duplicate id {key!r} (first on line {first[key]})", path, lineno)
        out.append((key, trn_id, words))
        first[key] = lineno
    return out


def read_kaldi_text(path: str | Path, option: str = "--ref-format") -> dict[str, tuple[str, ...]]:
    """Read a Kaldi ``text`` file (``uttid w1 w2 ...``; a bare ``uttid`` is an empty text); a
    file that looks like another format is refused (:func:`check_not_other_format`)."""
    lines = checked_lines(Path(path), "kaldi", option)
    rows = read_keyed(path, lambda rest, _line: tuple(rest.split()), lines=lines)
    return {utt: words for utt, (_, words) in rows.items()}


_NAMES = {"kaldi": "Kaldi text", "trn": "sclite trn"}


def _other_format(
    lines: Sequence[tuple[int, str]], fmt: str, option: str
) -> tuple[int, str] | None:
    """``(line, message)`` when the first non-blank ``lines`` of a file read as ``fmt`` (kaldi
    or trn) look like another format, else None."""
    if not lines:
        return None
    first_no, first = lines[0]
    name = _NAMES.get(fmt, fmt)
    hyp_side = option.startswith("--hyp")
    stripped = first.strip().lstrip("\ufeff")
    if stripped.startswith("{"):
        if nemo.manifest_line(first):
            return first_no, (
                f"looks like a NeMo manifest (JSON lines with {nemo.PATH_KEY!r} and "
                f"{nemo.TEXT_KEY!r}/{nemo.PRED_KEY!r}), not {name}: give {option} nemo"
            )
        import json  # here: most references are not JSON (start-up of `rescorer wer`)

        try:
            json.loads(stripped)
        except (ValueError, RecursionError):
            return None
        return first_no, (
            f"is a JSON line, not {name}: N-best lists (json, jsonl) go to --nbest; a NeMo "
            f"manifest needs {nemo.PATH_KEY!r} and {nemo.TEXT_KEY!r} or {nemo.PRED_KEY!r}"
        )
    data = [(n, line) for n, line in lines if not line.lstrip().startswith(";")]
    comment = stripped.startswith(sniff.STM_COMMENT)
    stm = bool(data) and all(sniff.looks_like_stm(line) for _, line in data)
    ctm = bool(data) and all(sniff.looks_like_ctm(line) for _, line in data)
    if not (stm or ctm or comment):
        return None
    where = data[0][0] if stm or ctm else first_no
    stm_fix = (
        "give it as --ref with --ref-format stm (scored against a ctm --hyp)"
        if hyp_side
        else "give --ref-format stm (with a ctm --hyp)"
    )
    ctm_fix = (
        "give --hyp-format ctm (with an stm --ref)"
        if hyp_side
        else "give it as --hyp with --hyp-format ctm (against an stm --ref)"
    )
    if stm and not ctm:
        what, fix = "an sclite stm reference ('file channel speaker begin end words')", stm_fix
    elif ctm and not stm:
        what, fix = "an sclite ctm hypothesis ('file channel begin duration word')", ctm_fix
    else:
        what = "sclite stm or ctm (';;' comments)" if comment else "sclite stm or ctm"
        fix = f"for stm {stm_fix}; for ctm {ctm_fix}"
    return where, f"looks like {what}, not {name}: {fix}"


def check_not_other_format(
    path: Path, lines: Sequence[tuple[int, str]], fmt: str, option: str = "--ref-format"
) -> None:
    """:class:`InputError` naming the line, the candidates and ``option`` when the first
    non-blank ``lines`` of ``path``, read as ``fmt`` (kaldi or trn), look like an sclite stm or
    ctm file (``;;`` comments, every line with numeric time fields), or JSON (a NeMo manifest,
    an N-best file)."""
    found = _other_format(lines, fmt, option)
    if found is not None:
        raise InputError(found[1], path, found[0])


def checked_lines(path: Path, fmt: str, option: str = "--ref-format") -> Iterator[tuple[int, str]]:
    """The lines of ``path`` (:func:`~rescorer.core.io.read_lines`), its first non-blank
    :data:`SNIFF_LINES` checked by :func:`check_not_other_format` before any is given out (the
    file is read once: a pipe works)."""
    lines = read_lines(path)
    head: list[tuple[int, str]] = []
    content: list[tuple[int, str]] = []
    for lineno, line in lines:
        head.append((lineno, line))
        if line.strip():
            content.append((lineno, line))
            if len(content) >= SNIFF_LINES:
                break
    check_not_other_format(path, content, fmt, option)
    yield from head
    yield from lines


def _strip_gz(path: Path) -> str:
    return path.name[:-3] if path.name.endswith(".gz") else path.name


def trn_speakers(ids: Sequence[str]) -> dict[str, str] | None:
    """sclite's speakers for trn utterance ids (``sclite -i rm``, as ESPnet scores): the id up
    to its first ``-`` (LibriSpeech ``1272-128104-0000`` is speaker ``1272``, as in ESPnet's
    ``result_wer.txt``). None when an id has no ``-`` or no speaker has two utterances: the ids
    then name no speakers."""
    speakers = {}
    for utt in ids:
        speaker, dash, _ = utt.partition("-")
        if not dash or not speaker:
            return None
        speakers[utt] = speaker
    return speakers if len(set(speakers.values())) < len(speakers) else None


def detect_reference_format(path: str | Path) -> str:
    """The format of a transcript file (a reference or a hypothesis text), by name and first line:

    ``*.trn`` -> trn, ``*.stm`` -> stm, ``*.ctm`` -> ctm; ``*.json``/``*.jsonl`` whose first
    line is a NeMo record -> nemo (logged); a first line ending in ``(id)`` -> trn; else kaldi
    (whose reader refuses what looks like another format).
    """
    path = Path(path)
    name = _strip_gz(path)
    for suffix in ("trn", "stm", "ctm"):
        if name.endswith("." + suffix):
            return suffix
    if name.endswith((".json", ".jsonl")) and nemo.looks_like_manifest(path):
        logger.info(
            "%s: read as a NeMo manifest (nemo: 'text' references, 'pred_text' hypotheses)", path
        )
        return "nemo"
    first = first_content_line(path)
    if first is not None and TRN_ID.search(first[1]):
        return "trn"
    return "kaldi"


def transcript_format(path: str | Path, fmt: str | None) -> str:
    """``fmt`` as given, or for ``auto`` (or None) :func:`detect_reference_format`'s."""
    return detect_reference_format(path) if fmt in (None, "auto") else fmt


def _read_text(
    path: str | Path,
    fmt: str | None,
    role: str,
    id_style: str = "auto",
    id_key: str | None = None,
) -> dict[str, tuple[str, ...]]:
    option = "--ref-format" if role == "reference" else "--hyp-format"
    fmt = transcript_format(path, fmt)
    if fmt == "trn":
        return read_trn(path, id_style, option)
    if fmt in ("kaldi", "text"):
        return read_kaldi_text(path, option)
    if fmt == "nemo":
        field = nemo.TEXT_KEY if role == "reference" else nemo.PRED_KEY
        return nemo.read_manifest(path, field, id_key)
    if fmt == "stm":
        raise InputError(
            "an stm reference is scored against a ctm hypothesis (`rescorer wer --ref X.stm "
            "--hyp Y.ctm`): its segments have times, not the utterance ids of N-best lists or "
            "Kaldi/trn texts"
            + ("; an stm is a reference, not a hypothesis" if role != "reference" else ""),
            path,
        )
    if fmt == "ctm":
        raise InputError(
            "a ctm is a hypothesis scored against an stm reference (`rescorer wer --ref X.stm "
            "--hyp Y.ctm`)"
            + ("; it is not a reference" if role == "reference" else "")
            + ": its words have times, not the utterance ids of Kaldi/trn references",
            path,
        )
    known = REF_FORMATS if role == "reference" else HYP_FORMATS
    raise ValueError(f"unknown {role} format {fmt!r} (known: {', '.join(known)})")


def read_references(
    path: str | Path, fmt: str | None = None, id_style: str = "auto", id_key: str | None = None
) -> dict[str, tuple[str, ...]]:
    """Read references as ``trn``, Kaldi ``text`` or ``nemo`` (its ``text``; ids: ``id_key`` or
    the stems of ``audio_filepath``); ``fmt`` None: detected, see
    :func:`detect_reference_format`. An ``stm`` (or a ``ctm``) is refused here: it is scored
    against a ctm by :func:`rescorer.formats.sclite.read_stm_ctm`."""
    return _read_text(path, fmt, "reference", id_style, id_key)


def read_hypothesis_text(
    path: str | Path, fmt: str | None = None, id_key: str | None = None
) -> dict[str, tuple[str, ...]]:
    """Read a 1-best hypothesis text as ``trn``, Kaldi ``text`` or ``nemo`` (its
    ``pred_text``), like :func:`read_references`."""
    return _read_text(path, fmt, "hypothesis", id_key=id_key)


@dataclass(frozen=True)
class MatchedReferences:
    """The references of exactly the utterances scored, and the extra ones that were dropped."""

    # Utterance id -> reference words, in the order of the references file.
    refs: dict[str, tuple[str, ...]]
    # Ids of references without hypotheses, dropped: those with no words, and the others.
    extra_empty: tuple[str, ...] = ()
    extra_nonempty: tuple[str, ...] = ()


def match_references(
    refs: Mapping[str, Sequence[str]],
    ids: Sequence[str],
    allow_extra: bool = False,
    path: str | Path | None = None,
    against: str | Path | None = None,
) -> MatchedReferences:
    """The references of the utterances ``ids`` (read from ``path``; the ids from ``against``).

    Every id needs a reference. A reference whose id is not among ``ids`` is dropped when it is
    empty (an utterance with nothing to recognise, as a larger references file may hold) or,
    with ``allow_extra``, whatever it holds; any other extra reference is an
    :class:`InputError` naming the ids, as is a missing one.
    """
    wanted = set(ids)
    missing = wanted - set(refs)
    extra = [u for u in refs if u not in wanted]
    extra_empty = tuple(u for u in extra if not refs[u])
    extra_nonempty = tuple(u for u in extra if refs[u])
    if missing or (extra_nonempty and not allow_extra):
        got = set(refs) - set(extra_empty) - (set(extra_nonempty) if allow_extra else set())
        theirs = "" if against is None else f" those of {against}"
        hint = ""
        if extra_nonempty and not allow_extra:
            hint = (
                " (a reference without hypotheses is accepted when it is empty, any with "
                "--allow-extra-refs)"
            )
        raise InputError(
            f"reference ids do not match{theirs}: {describe_id_mismatch(wanted, got)}{hint}",
            path,
        )
    if extra_empty:
        logger.info("%s: %d empty reference(s) without hypotheses dropped", path, len(extra_empty))
    if extra_nonempty:
        logger.warning(
            "%s: %d reference(s) without hypotheses ignored (--allow-extra-refs): %s%s",
            path,
            len(extra_nonempty),
            ", ".join(extra_nonempty[:5]),
            f" (+{len(extra_nonempty) - 5} more)" if len(extra_nonempty) > 5 else "",
        )
    kept = {u: tuple(words) for u, words in refs.items() if u in wanted}
    return MatchedReferences(kept, extra_empty, extra_nonempty)


def read_utt2spk(path: str | Path) -> dict[str, str]:
    """Read a Kaldi ``utt2spk`` file: ``{utt_id: speaker}`` (exactly two fields per line)."""
    path = Path(path)

    def parse(rest: str, lineno: int) -> str:
        fields = rest.split()
        if len(fields) != 1:
            raise InputError(
                f"expected 'uttid speaker', got {len(fields) + 1} fields", path, lineno
            )
        return fields[0]

    return {utt: spk for utt, (_, spk) in read_keyed(path, parse).items()}


def write_kaldi_lines(out: TextIO, mapping: Mapping[str, Sequence[str]]) -> None:
    """Append ``uttid w1 w2 ...`` lines (a bare ``uttid`` for an empty text) to an open file,
    in mapping order; every id and word is checked before the first line is written."""
    for utt, words in mapping.items():
        check_field(utt, "utterance id")
        for w in words:
            check_field(w, f"word of {utt!r}")
    for utt, words in mapping.items():
        out.write(" ".join((utt, *words)) + "\n")


def write_kaldi_text(path: str | Path, mapping: Mapping[str, Sequence[str]]) -> None:
    """Write ``uttid w1 w2 ...`` lines (a bare ``uttid`` for an empty text), in mapping order."""
    with atomic_write(path) as f:
        write_kaldi_lines(f, mapping)


def write_trn(
    path: str | Path,
    mapping: Mapping[str, Sequence[str]],
    speakers: Mapping[str, str] | None = None,
    ids: Mapping[str, str] | None = None,
) -> None:
    """Write sclite ``trn`` lines ``w1 w2 ...<TAB>(id)`` (see :func:`write_trn_lines`)."""
    with atomic_write(path) as f:
        write_trn_lines(f, mapping, speakers, ids)


def write_trn_lines(
    out: TextIO,
    mapping: Mapping[str, Sequence[str]],
    speakers: Mapping[str, str] | None = None,
    ids: Mapping[str, str] | None = None,
) -> None:
    """Append sclite ``trn`` lines ``w1 w2 ...<TAB>(id)`` to an open file, in mapping order;
    every line is checked before the first is written.

    The id is ``ids[utt]`` when given (a reference's own ids, :func:`trn_ids`); else, with
    ``speakers`` (utt -> speaker), ESPnet style ``(<speaker>-<uttid>)``, where the utterance id
    must begin with ``<speaker>-`` so that :func:`read_trn` can strip it; else the utterance id.
    """
    rows = []
    for utt, words in mapping.items():
        check_field(utt, "utterance id")
        for w in words:
            check_field(w, f"word of {utt!r}")
        trn_id = utt
        if ids is not None:
            if utt not in ids:
                raise ValueError(f"no trn id for utterance {utt!r}")
            trn_id = ids[utt]
        elif speakers is not None:
            if utt not in speakers:
                raise ValueError(f"no speaker for utterance {utt!r}")
            trn_id = f"{speakers[utt]}-{utt}"
            check_field(trn_id, "trn id")
            if split_espnet_id(trn_id) != (speakers[utt], utt):
                raise ValueError(
                    f"utterance {utt!r} does not start with its speaker {speakers[utt]!r}-, "
                    "so the ESPnet-style id could not be split again"
                )
        if "(" in trn_id or ")" in trn_id:
            raise ValueError(f"cannot write utterance id {trn_id!r} in trn: it has parentheses")
        rows.append(f"{' '.join(words)}\t({trn_id})\n")
    out.writelines(rows)
