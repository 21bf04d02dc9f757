"""sclite ``stm`` references and ``ctm`` hypotheses, cut into segments as sclite cuts them.

The rules are those of NIST SCTK's sclite (``doc/infmts.htm`` for the formats,
``src/sclite/stm.c`` and ``src/sclite/fillmrks.c`` for the readers, ``src/sclite/stm2ctm.c``
for the alignment of a ctm to an stm with its default dynamic-programming alignment):

``stm`` line: ``file channel speaker begin end [<label,...>] words...``. Lines starting ``;;``
(or ``**``, sclite's comment information) are comments and blank lines are skipped. The sixth
field is a label when it starts with ``<`` (``<o,f0,male>``: sclite's subset labels, kept but
not reported). A segment whose transcript
holds ``IGNORE_TIME_SEGMENT_IN_SCORING`` (or ``IGNORETIMESEGMENTINSCORING``; any case) is not
scored, and the hypothesis words it receives are dropped; a segment without words is scored
(its hypothesis words are insertions). Each line is one segment.

``ctm`` line: ``file channel begin duration word [confidence]``; lines starting ``;`` are
comments, blank lines are skipped; the confidence is a number or ``NA``.

Words go to segments channel by channel (a channel is a ``file channel`` pair; channels never
share words), in time order (sclite requires sorted files; here the segments of a channel are
sorted by begin time and its words by begin time, both stably). sclite's rule, which this module
follows: the words of a segment are the next words whose midpoint ``begin + duration / 2`` is
before the segment's end, the last segment of a channel taking all the words left. So

* a word whose midpoint is exactly a segment's end belongs to the next segment (sclite closes a
  segment at the first word with ``midpoint >= end``); midpoints are computed exactly from the
  decimals as written, so a tie is a tie (sclite computes in binary floating point);
* a word in no segment's span is an insertion of the next segment of its channel (a word in a
  gap before segment k goes to k), or of the channel's last segment when it comes after every
  segment; when that segment is ignored, the word is dropped with it.

Hypothesis words of a channel the stm does not have are refused (sclite stops with "Hyp file
has more data than ref file"); an stm channel without ctm words is scored as all deletions.
Speakers are the stm's speaker column, and a segment is named as sclite names it,
``<speaker>-<NNN>`` (the NNN-th scored segment of that speaker, from 000). Words are compared
as they are written (sclite folds case unless ``-s``; ``--normalize`` does that here).
sclite's alternations (``{ a / b }``), optional words (``(word)``) and null word ``@`` in an stm
are refused, since they would be scored as plain words.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

from rescorer.core.errors import InputError, shorten
from rescorer.core.io import read_lines
from rescorer.formats.sniff import (
    CTM_COMMENT,
    STM_COMMENT,
    is_number,
)

logger = logging.getLogger(__name__)

IGNORE_MARKS = ("IGNORE_TIME_SEGMENT_IN_SCORING", "IGNORETIMESEGMENTINSCORING")
STM_COMMENTS = (STM_COMMENT, "**")
_STM_FIELDS = "file channel speaker begin end [<label>] words..."
_CTM_FIELDS = "file channel begin duration word [confidence]"


def _time(token: str, what: str, path: Path, line: int) -> Fraction:
    if not is_number(token):
        raise InputError(
            f"expected a number of seconds as {what}, got {shorten(token)!r}", path, line
        )
    value = Fraction(token)
    if value < 0:
        raise InputError(f"expected a time of at least 0 as {what}, got {token}", path, line)
    return value


@dataclass(frozen=True)
class StmSegment:
    """One stm line: a segment of a channel with its speaker, times and transcript."""

    file: str
    channel: str
    speaker: str
    # Times in seconds, exactly as written.
    begin: Fraction
    end: Fraction
    # The subset labels of a ``<a,b,c>`` field (empty without one).
    labels: tuple[str, ...]
    words: tuple[str, ...]
    # 1-based line in the stm file.
    line: int

    @property
    def channel_key(self) -> tuple[str, str]:
        return (self.file, self.channel)

    @property
    def ignored(self) -> bool:
        """Marked ``IGNORE_TIME_SEGMENT_IN_SCORING``: not scored, its words dropped."""
        text = " ".join(self.words).upper()
        return any(mark in text for mark in IGNORE_MARKS)


@dataclass(frozen=True)
class CtmWord:
    """One ctm line: a time-marked hypothesis word."""

    file: str
    channel: str
    begin: Fraction
    duration: Fraction
    word: str
    confidence: float | None
    line: int

    @property
    def channel_key(self) -> tuple[str, str]:
        return (self.file, self.channel)

    @property
    def midpoint(self) -> Fraction:
        return self.begin + self.duration / 2


def _unsupported(word: str) -> bool:
    return (
        word in ("{", "}", "/", "@")
        or word.startswith("{")
        or (len(word) > 2 and word.startswith("(") and word.endswith(")"))
    )


def parse_stm_line(line: str, path: Path, lineno: int) -> StmSegment:
    fields = line.split()
    if len(fields) < 5:
        raise InputError(
            f"expected an stm segment '{_STM_FIELDS}', got {len(fields)} field(s)", path, lineno
        )
    file, channel, speaker = fields[:3]
    begin = _time(fields[3], "begin time (field 4)", path, lineno)
    end = _time(fields[4], "end time (field 5)", path, lineno)
    if end < begin:
        raise InputError(f"segment ends ({fields[4]}) before it begins ({fields[3]})", path, lineno)
    rest = fields[5:]
    labels: tuple[str, ...] = ()
    if rest and rest[0].startswith("<"):  # sclite: a sixth field starting '<' is the label
        label = rest.pop(0)
        if not label.endswith(">"):
            raise InputError(f"expected a label '<a,b,...>', got {shorten(label)!r}", path, lineno)
        labels = tuple(x for x in label[1:-1].split(",") if x)
    segment = StmSegment(file, channel, speaker, begin, end, labels, tuple(rest), lineno)
    if not segment.ignored:
        for word in segment.words:
            if _unsupported(word):
                raise InputError(
                    f"sclite alternation, optional word or null word {shorten(word)!r} is not "
                    "supported (it would be scored as a plain word); write the transcript "
                    "without it",
                    path,
                    lineno,
                )
    return segment


def read_stm(path: str | Path) -> tuple[StmSegment, ...]:
    """The segments of an stm file, in file order (see the module docstring)."""
    path = Path(path)
    segments = []
    for lineno, line in read_lines(path):
        stripped = line.lstrip()
        if not stripped or stripped.startswith(STM_COMMENTS):
            continue
        segments.append(parse_stm_line(line, path, lineno))
    if not segments:
        raise InputError("no stm segments in it", path)
    return tuple(segments)


def parse_ctm_line(line: str, path: Path, lineno: int) -> CtmWord:
    fields = line.split()
    if len(fields) not in (5, 6):
        raise InputError(
            f"expected a ctm word '{_CTM_FIELDS}', got {len(fields)} field(s)", path, lineno
        )
    file, channel, begin_s, dur_s, word = fields[:5]
    begin = _time(begin_s, "begin time (field 3)", path, lineno)
    duration = _time(dur_s, "duration (field 4)", path, lineno)
    confidence = None
    if len(fields) == 6 and fields[5].upper() != "NA":
        if not is_number(fields[5]):
            raise InputError(
                f"expected a confidence (a number or NA) in field 6, got {shorten(fields[5])!r}",
                path,
                lineno,
            )
        confidence = float(fields[5])
    if word.upper().startswith("<ALT"):
        raise InputError(f"ctm alternations ({shorten(word)}) are not supported", path, lineno)
    return CtmWord(file, channel, begin, duration, word, confidence, lineno)


def read_ctm(path: str | Path) -> tuple[CtmWord, ...]:
    """The words of a ctm file, in file order (see the module docstring)."""
    path = Path(path)
    words = []
    for lineno, line in read_lines(path):
        stripped = line.lstrip()
        if not stripped or stripped.startswith(CTM_COMMENT):
            continue
        words.append(parse_ctm_line(line, path, lineno))
    return tuple(words)


@dataclass(frozen=True)
class SegmentedText:
    """An stm and a ctm cut into the scored segments: references, hypotheses and speakers
    keyed by segment name (``<speaker>-<NNN>``), in channel and time order."""

    refs: dict[str, tuple[str, ...]]
    hyps: dict[str, tuple[str, ...]]
    speakers: dict[str, str]
    # Segments marked IGNORE_TIME_SEGMENT_IN_SCORING, and the ctm words they took.
    ignored_segments: int = 0
    dropped_words: int = 0


def _by_channel(items: Iterable[StmSegment | CtmWord]) -> dict[tuple[str, str], list]:
    out: dict[tuple[str, str], list] = {}
    for item in items:
        out.setdefault(item.channel_key, []).append(item)
    return out


def _chop(segments: Sequence[StmSegment], words: Sequence[CtmWord]) -> list[list[CtmWord]]:
    """The words of each segment of one channel (both sorted by begin time), by sclite's rule:
    the next words whose midpoint is before the segment's end; the last takes the rest."""
    out: list[list[CtmWord]] = []
    start = 0
    for k, seg in enumerate(segments):
        stop = start
        if k == len(segments) - 1:
            stop = len(words)
        else:
            while stop < len(words) and words[stop].midpoint < seg.end:
                stop += 1
        out.append(list(words[start:stop]))
        start = stop
    return out


def segment_ctm(
    segments: Sequence[StmSegment],
    words: Sequence[CtmWord],
    stm_path: str | Path | None = None,
    ctm_path: str | Path | None = None,
) -> SegmentedText:
    """Cut the ctm ``words`` into the stm ``segments`` (see the module docstring for the rules).

    A ctm channel that the stm does not have is an :class:`InputError` naming its first line.
    """
    seg_by = _by_channel(segments)
    word_by = _by_channel(words)
    for key, ws in word_by.items():
        if key not in seg_by:
            raise InputError(
                f"file {shorten(key[0])!r} channel {shorten(key[1])!r} has no segment in "
                f"{stm_path or 'the stm'} (sclite refuses hypothesis words of a channel the "
                "reference does not have)",
                ctm_path,
                ws[0].line,
            )
    refs: dict[str, tuple[str, ...]] = {}
    hyps: dict[str, tuple[str, ...]] = {}
    speakers: dict[str, str] = {}
    count: dict[str, int] = {}
    ignored = dropped = 0
    for key, segs in seg_by.items():
        segs = sorted(segs, key=lambda s: s.begin)
        ws = sorted(word_by.get(key, []), key=lambda w: w.begin)
        if not ws:
            logger.info(
                "%s: no ctm words for file %s channel %s: its %d segment(s) are deletions",
                ctm_path,
                key[0],
                key[1],
                len(segs),
            )
        for seg, got in zip(segs, _chop(segs, ws), strict=True):
            if seg.ignored:
                ignored += 1
                dropped += len(got)
                continue
            n = count.get(seg.speaker, 0)
            count[seg.speaker] = n + 1
            name = f"{seg.speaker}-{n:03d}"
            refs[name] = seg.words
            hyps[name] = tuple(w.word for w in got)
            speakers[name] = seg.speaker
    if ignored:
        logger.info(
            "%s: %d segment(s) IGNORE_TIME_SEGMENT_IN_SCORING, %d hypothesis word(s) in them "
            "dropped",
            stm_path,
            ignored,
            dropped,
        )
    return SegmentedText(refs, hyps, speakers, ignored, dropped)


def read_stm_ctm(stm_path: str | Path, ctm_path: str | Path) -> SegmentedText:
    """Read an stm reference and a ctm hypothesis and cut the ctm into the stm's segments."""
    return segment_ctm(read_stm(stm_path), read_ctm(ctm_path), stm_path, ctm_path)
