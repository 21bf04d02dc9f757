"""Reference transcripts and speaker maps: sclite ``trn``, Kaldi ``text``, ``utt2spk``.

Transcripts are returned as ``{utt_id: (w1, w2, ...)}``; an empty transcript is an empty tuple.

sclite ``trn`` lines are ``w1 w2 ... (id)``: the id is the text inside the final parentheses.
ESPnet writes the id as ``<speaker>-<uttid>`` where the utterance id itself begins with
``<speaker>-`` (LibriSpeech ``(1272-128104-1272-128104-0000)`` is speaker ``1272-128104``,
utterance ``1272-128104-0000``); :func:`read_trn` can strip that speaker prefix.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from rescorer.core.errors import InputError, describe_id_mismatch, shorten
from rescorer.core.io import read_lines
from rescorer.core.output import atomic_write
from rescorer.formats._common import check_field, first_content_line, read_keyed

logger = logging.getLogger(__name__)

ID_STYLES = ("auto", "full", "espnet")
REF_FORMATS = ("trn", "kaldi")
_TRN_ID = re.compile(r"\(([^()\s]+)\)\s*$")


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
    m = _TRN_ID.search(line)
    if not m:
        raise InputError(f"expected 'words (id)', got {shorten(line.strip())!r}", path, lineno)
    return m.group(1), tuple(line[: m.start()].split())


def read_trn(path: str | Path, id_style: str = "auto") -> dict[str, tuple[str, ...]]:
    """Read an sclite ``trn`` file: ``{id: words}``.

    ``id_style``: ``full`` keeps ids as written; ``espnet`` strips the ``<speaker>-`` prefix
    (an id not of that shape is an error); ``auto`` strips when every id has that shape, else
    keeps them all as written.
    """
    if id_style not in ID_STYLES:
        raise ValueError(f"id_style must be one of {ID_STYLES}, got {id_style!r}")
    path = Path(path)
    rows: list[tuple[int, str, tuple[str, ...]]] = []
    for lineno, line in read_lines(path):
        if line.strip():
            rows.append((lineno, *_parse_trn_line(line, path, lineno)))
    strip = id_style == "espnet"
    if id_style == "auto":
        strip = bool(rows) and all(split_espnet_id(trn_id) for _, trn_id, _ in rows)
    out: dict[str, tuple[str, ...]] = {}
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
        if key in out:
            raise InputError(f"duplicate id {key!r} (first on line {first[key]})", path, lineno)
        out[key] = words
        first[key] = lineno
    return out


def read_kaldi_text(path: str | Path) -> dict[str, tuple[str, ...]]:
    """Read a Kaldi ``text`` file (``uttid w1 w2 ...``; a bare ``uttid`` is an empty text)."""
    rows = read_keyed(path, lambda rest, _line: tuple(rest.split()))
    return {utt: words for utt, (_, words) in rows.items()}


def detect_reference_format(path: str | Path) -> str:
    """``trn`` if the file is named ``*.trn`` or its first line ends in ``(id)``, else ``kaldi``."""
    path = Path(path)
    name = path.name[:-3] if path.name.endswith(".gz") else path.name
    if name.endswith(".trn"):
        return "trn"
    first = first_content_line(path)
    if first is not None and _TRN_ID.search(first[1]):
        return "trn"
    return "kaldi"


def read_references(
    path: str | Path, fmt: str | None = None, id_style: str = "auto"
) -> dict[str, tuple[str, ...]]:
    """Read references as ``trn`` or Kaldi ``text`` (``fmt`` None: detected, see above)."""
    if fmt is None:
        fmt = detect_reference_format(path)
    if fmt == "trn":
        return read_trn(path, id_style)
    if fmt in ("kaldi", "text"):
        return read_kaldi_text(path)
    raise ValueError(f"unknown reference format {fmt!r} (known: {', '.join(REF_FORMATS)})")


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
) -> None:
    """Write sclite ``trn`` lines ``w1 w2 ...<TAB>(id)``.

    With ``speakers`` (utt -> speaker) the id is written ESPnet style, ``(<speaker>-<uttid>)``;
    the utterance id must then begin with ``<speaker>-`` so that :func:`read_trn` can strip it.
    """
    rows = []
    for utt, words in mapping.items():
        check_field(utt, "utterance id")
        if "(" in utt or ")" in utt:
            raise ValueError(f"cannot write utterance id {utt!r} in trn: it has parentheses")
        for w in words:
            check_field(w, f"word of {utt!r}")
        trn_id = utt
        if speakers is not None:
            if utt not in speakers:
                raise ValueError(f"no speaker for utterance {utt!r}")
            trn_id = f"{speakers[utt]}-{utt}"
            check_field(trn_id, "trn id")
            if split_espnet_id(trn_id) != (speakers[utt], utt):
                raise ValueError(
                    f"utterance {utt!r} does not start with its speaker {speakers[utt]!r}-, "
                    "so the ESPnet-style id could not be split again"
                )
        rows.append(f"{' '.join(words)}\t({trn_id})\n")
    with atomic_write(path) as f:
        f.writelines(rows)
