"""SRILM N-best lists (``nbest-format(5)``): one utterance per file, three line formats.

* ``srilm1`` -- header ``NBestList1.0``, then ``(score) w1 w2 ...``. The score is a combined
  acoustic + LM score in SRI Decipher *bytelog* units (log base 1.0001, divided by 1024 and
  rounded to an integer); stored as ``score`` in natural log (``x * BYTELOG_TO_LN``).
* ``srilm2`` -- header ``NBestList2.0``, then
  ``(score) w1 ( st: s1 et: e1 g: lm1 a: ac1 ) w2 ( ... ) ...`` with bytelog ``g:`` (LM) and
  ``a:`` (acoustic) per token. Stored as ``score`` (the total), ``acoustic`` (sum of the word
  tokens' ``a:``) and ``lm`` (sum of their ``g:``), all natural log. As in the man page (and
  SRILM's own reader) a token whose start time is not after the end time of the previous word
  is a sub-word unit (phone or HMM state) inside that word: it is skipped, words and scores alike.
* ``srilm3`` -- no header; ``ascore lscore nwords w1 w2 ...`` with **log10** scores, stored as
  ``acoustic`` and ``lm`` in natural log (``x * LN10``) and ``nwords`` as a plain count.

In all three formats the SRILM non-word tokens ``<s>``, ``</s>`` and ``-pau-`` (SRILM's pause
word, ``Vocab_Pause``) are dropped from the words (their scores still count in the sums). Blank
lines are skipped, as SRILM does.

Utterance ids come from file names: the folder part is dropped, then a ``.gz`` suffix, then one
of the suffixes in :data:`ID_SUFFIXES` (``.nbest``, ``.score``, ``.txt``) if present; other dots
are part of the id (``utt.1.nbest.gz`` is utterance ``utt.1``).

A reader accepts one N-best file, a folder of them, or a file list (one path per line, relative
paths relative to the list's folder). A folder is read through its ``nbest.list`` when it has
one (the writers write it, to keep the utterance order), else all its visible files in name
order. Writers (``srilm1``, ``srilm3``; ``srilm2`` would need word times, which the data model
does not keep) write ``<folder>/<uttid>.nbest`` per utterance plus ``<folder>/nbest.list``.

Score directories (``nbest-optimize``'s *scoredir* arguments, ``--extra-scores NAME=DIR``): a
folder with one file per utterance, named like the N-best files (``ID``, ``ID.score.gz``,
...; the id is taken from the name as above), holding one number per line, one line per
hypothesis in list order (blank lines skipped). :func:`add_score_dirs` adds each folder's
numbers to every hypothesis as one more feature. The numbers are taken as they are, with no
log-base conversion: SRILM combines them linearly with its weights whatever they measure
(pronunciation or duration log10 scores, counts), and so does the log-linear combination here,
whose tuned weight absorbs any base. Files of utterances that are not in the lists are ignored.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from rescorer.core.constants import BOS, BYTELOG_TO_LN, EOS, LENGTH_FEATURE, LN10, TOTAL_SCORE
from rescorer.core.errors import InputError, shorten
from rescorer.core.io import read_lines
from rescorer.core.numbers import parse_count, parse_float
from rescorer.core.output import atomic_dir, atomic_write
from rescorer.formats._common import (
    check_file_name,
    check_finite,
    check_nbest_fields,
    first_content_line,
    is_dir,
    is_file,
    score_or_fail,
)
from rescorer.nbest import Hypothesis, NBest, NBestList

logger = logging.getLogger(__name__)

HEADER1 = "NBestList1.0"
HEADER2 = "NBestList2.0"
PAUSE = "-pau-"
NON_WORDS = frozenset({BOS, EOS, PAUSE})
ID_SUFFIXES = (".nbest", ".score", ".txt")
LIST_NAME = "nbest.list"
WRITE_SUFFIX = ".nbest"
# Fields per token in NBestList2.0: w ( st: S et: E g: G a: A )
_FIELDS2 = 11


def utt_id_from_path(path: Path) -> str:
    """The utterance id of an N-best file (see the module docstring for what is stripped)."""
    name = path.name
    if name.endswith(".gz"):
        name = name[:-3]
    for suffix in ID_SUFFIXES:
        if name.endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)]
    return name


# --- line parsers: (tokens, path, line) -> Hypothesis ---------------------------------------


def _paren_score(token: str, path: Path, line: int) -> float:
    if len(token) < 3 or token[0] != "(" or token[-1] != ")":
        raise InputError(f"expected '(score)' first, got {shorten(token)!r}", path, line)
    return parse_float(token[1:-1], path, line, "bytelog score")


def _words(tokens: list[str]) -> tuple[str, ...]:
    return tuple(t for t in tokens if t not in NON_WORDS)


def _parse1(tokens: list[str], path: Path, line: int) -> Hypothesis:
    score = _paren_score(tokens[0], path, line)
    return Hypothesis(_words(tokens[1:]), {"score": score * BYTELOG_TO_LN})


_KEYS2 = {1: "(", 2: "st:", 4: "et:", 6: "g:", 8: "a:", 10: ")"}


def _parse2(tokens: list[str], path: Path, line: int) -> Hypothesis:
    total = _paren_score(tokens[0], path, line)
    rest = tokens[1:]
    if len(rest) % _FIELDS2:
        raise InputError(
            f"{len(rest)} fields after the score; expected groups of {_FIELDS2}: "
            "w ( st: S et: E g: LM a: AC )",
            path,
            line,
        )
    words: list[str] = []
    acoustic = lm = 0.0
    prev_end = -math.inf
    for i in range(0, len(rest), _FIELDS2):
        group = rest[i : i + _FIELDS2]
        for offset, key in _KEYS2.items():
            if group[offset] != key:
                raise InputError(
                    f"token {i // _FIELDS2 + 1} ({shorten(group[0])!r}): expected {key!r}, "
                    f"got {shorten(group[offset])!r}",
                    path,
                    line,
                )
        start = parse_float(group[3], path, line, "start time")
        end = parse_float(group[5], path, line, "end time")
        g = parse_float(group[7], path, line, "g: (LM bytelog)")
        a = parse_float(group[9], path, line, "a: (acoustic bytelog)")
        if start <= prev_end:
            continue  # a phone or state inside the previous word
        lm += g
        acoustic += a
        words.append(group[0])
        prev_end = end
    if not (math.isfinite(acoustic) and math.isfinite(lm)):
        raise InputError(
            "expected sums of g: and a: scores in float range, got an overflow", path, line
        )
    scores = {
        "score": total * BYTELOG_TO_LN,
        "acoustic": acoustic * BYTELOG_TO_LN,
        "lm": lm * BYTELOG_TO_LN,
    }
    return Hypothesis(_words(words), scores)


def _parse3(tokens: list[str], path: Path, line: int) -> Hypothesis:
    if tokens[0].startswith("NBestList"):
        raise InputError(f"{tokens[0]} header: this is not the 3-column format", path, line)
    if len(tokens) < 3:
        raise InputError("expected 'ascore lscore nwords w1 w2 ...'", path, line)
    acoustic = parse_float(tokens[0], path, line, "acoustic log10 score", scale=LN10)
    lm = parse_float(tokens[1], path, line, "LM log10 score", scale=LN10)
    nwords = parse_count(tokens[2], path, line, "word count")
    scores = {"acoustic": acoustic, "lm": lm, "nwords": float(nwords)}
    return Hypothesis(_words(tokens[3:]), scores)


_FORMATS: dict[str, tuple[str | None, Callable[[list[str], Path, int], Hypothesis]]] = {
    "srilm1": (HEADER1, _parse1),
    "srilm2": (HEADER2, _parse2),
    "srilm3": (None, _parse3),
}


def read_srilm_file(path: Path, fmt: str, utt_id: str | None = None) -> NBestList:
    """One SRILM N-best file in format ``fmt`` (``srilm1``/``srilm2``/``srilm3``)."""
    header, parse = _FORMATS[fmt]
    path = Path(path)
    hyps: list[Hypothesis] = []
    seen_header = header is None
    for lineno, line in read_lines(path):
        tokens = line.split()
        if not tokens:
            continue
        if not seen_header:
            if tokens != [header]:
                raise InputError(
                    f"expected the header {header!r} for {fmt}, got {shorten(line)!r}",
                    path,
                    lineno,
                )
            seen_header = True
            continue
        hyps.append(parse(tokens, path, lineno))
    if not seen_header:
        raise InputError(f"empty file: no {header!r} header for {fmt}", path)
    return NBestList(utt_id if utt_id is not None else utt_id_from_path(path), tuple(hyps))


# --- which files --------------------------------------------------------------------------


def looks_like_nbest_line(line: str) -> bool:
    """Whether ``line`` reads as the first line of an N-best file rather than a file path."""
    tokens = line.split()
    if not tokens:
        return False
    if tokens[0] in (HEADER1, HEADER2) or tokens[0].startswith("("):
        return True
    if len(tokens) >= 3:
        try:
            float(tokens[0])
            float(tokens[1])
        except ValueError:
            return False
        return tokens[2].isascii() and tokens[2].isdigit()
    return False


def _read_list(list_path: Path) -> list[tuple[Path, Path | None, int | None]]:
    out: list[tuple[Path, Path | None, int | None]] = []
    for lineno, line in read_lines(list_path):
        name = line.strip()
        if not name:
            continue
        target = Path(name)
        if not target.is_absolute():
            target = list_path.parent / target
        if not is_file(target):
            raise InputError(f"listed N-best file {shorten(name)!r} not found", list_path, lineno)
        out.append((target, list_path, lineno))
    return out


def input_files(path: Path) -> list[tuple[Path, Path | None, int | None]]:
    """The N-best files behind ``path`` as ``(file, list_file, list_line)``.

    ``path`` is a folder (read through its ``nbest.list`` if present, else every visible file
    in name order), a file list, or one N-best file. A file is taken as a list when its first
    non-blank line is not N-best content (a header, ``(score)`` or three numbers) but names an
    existing file.
    """
    path = Path(path)
    if is_dir(path):
        if is_file(path / LIST_NAME):
            return _read_list(path / LIST_NAME)
        files = sorted(p for p in path.iterdir() if not p.name.startswith(".") and is_file(p))
        if not files:
            raise InputError("folder holds no N-best files", path)
        return [(p, None, None) for p in files]
    first = first_content_line(path)
    if first is not None and not looks_like_nbest_line(first[1]):
        name = first[1].strip()
        target = Path(name) if Path(name).is_absolute() else path.parent / name
        if is_file(target):
            return _read_list(path)
    return [(path, None, None)]


def _check_listed(file: Path, fmt: str, list_path: Path, list_line: int | None) -> None:
    """InputError naming ``file`` and its list line unless its first line reads as ``fmt``
    N-best content; the file's content is never shown (a list may name any file)."""
    header = _FORMATS[fmt][0]
    first = first_content_line(file)
    if first is None:
        return  # an empty list of hypotheses (srilm3), or the reader's own "no header" error
    tokens = first[1].split()
    ok = tokens == [header] if header is not None else looks_like_nbest_line(first[1])
    if not ok:
        expected = f"the header {header!r}" if header else "an 'ascore lscore nwords words' line"
        raise InputError(
            f"listed file {file} is not an N-best file in {fmt} form (its first line is not "
            f"{expected})",
            list_path,
            list_line,
        )


def read_srilm(path: Path, fmt: str) -> NBest:
    """Read SRILM N-best files in format ``fmt`` from a file, folder or file list."""
    if fmt not in _FORMATS:
        raise ValueError(f"unknown SRILM format {fmt!r}")
    lists: list[NBestList] = []
    where: dict[str, Path] = {}
    for file, list_path, list_line in input_files(Path(path)):
        utt_id = utt_id_from_path(file)
        if not utt_id or any(ch.isspace() for ch in utt_id):
            raise InputError(
                f"cannot make an utterance id from file name {file.name!r}",
                list_path or file,
                list_line,
            )
        if utt_id in where:
            raise InputError(
                f"utterance id {utt_id!r} of {file} repeats that of {where[utt_id]}",
                list_path or file,
                list_line,
            )
        where[utt_id] = file
        if list_path is not None:
            _check_listed(file, fmt, list_path, list_line)
        lists.append(read_srilm_file(file, fmt, utt_id))
    return NBest(lists)


def read_srilm1(path: Path) -> NBest:
    """``NBestList1.0`` files: ``score`` (bytelog -> natural log)."""
    return read_srilm(path, "srilm1")


def read_srilm2(path: Path) -> NBest:
    """``NBestList2.0`` files: ``score``, ``acoustic``, ``lm`` (bytelog -> natural log)."""
    return read_srilm(path, "srilm2")


def read_srilm3(path: Path) -> NBest:
    """3-column files: ``acoustic``, ``lm`` (log10 -> natural log) and ``nwords`` (a count)."""
    return read_srilm(path, "srilm3")


# --- score directories --------------------------------------------------------------------

RESERVED_SCORE_NAMES = frozenset({LENGTH_FEATURE, TOTAL_SCORE})
"""Names an extra score cannot take: the word-count feature and rescore's combined score."""


@dataclass(frozen=True)
class ScoreDir:
    """A folder of per-utterance score files that becomes the feature ``name``."""

    name: str
    folder: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "folder", Path(self.folder))
        if not self.name or any(ch.isspace() or ch == "=" for ch in self.name):
            raise ValueError(
                f"expected a score name without spaces or '=', got {shorten(self.name)!r}"
            )
        if self.name in RESERVED_SCORE_NAMES:
            raise ValueError(
                f"score name {self.name!r} is taken by the toolkit "
                f"({', '.join(sorted(RESERVED_SCORE_NAMES))}); name the scores otherwise"
            )

    @classmethod
    def parse(cls, spec: str) -> ScoreDir:
        """``NAME=DIR``; ValueError saying what was expected otherwise."""
        name, eq, folder = spec.partition("=")
        if not eq or not name or not folder:
            raise ValueError(f"expected NAME=DIR, got {shorten(spec)!r}")
        return cls(name, Path(folder))


def score_files(folder: Path) -> dict[str, Path]:
    """Utterance id -> score file of a score directory (hidden files and ``nbest.list`` are
    not score files); two files of one id are an :class:`InputError` naming both."""
    folder = Path(folder)
    if not is_dir(folder):
        raise InputError("expected a folder of score files (one per utterance)", folder)
    out: dict[str, Path] = {}
    for file in sorted(folder.iterdir()):
        if file.name.startswith(".") or file.name == LIST_NAME or not is_file(file):
            continue
        utt_id = utt_id_from_path(file)
        if utt_id in out:
            raise InputError(
                f"two score files for utterance {utt_id!r}: {out[utt_id].name} and {file.name}",
                folder,
            )
        out[utt_id] = file
    return out


def read_score_file(path: Path, count: int, utt_id: str, name: str = "extra") -> list[float]:
    """The ``count`` numbers of one score file (one per non-blank line, finite, as written).

    A line with more than one field, a non-number, a non-finite number, a line past the
    ``count``-th number or a file that ends before it is an :class:`InputError` naming the
    file and the line.
    """
    path = Path(path)
    values: list[float] = []
    last = None
    for lineno, line in read_lines(path):
        fields = line.split()
        if not fields:
            continue
        if len(values) == count:
            raise InputError(
                f"expected {count} scores, one per hypothesis of {utt_id!r}, got more",
                path,
                lineno,
            )
        if len(fields) > 1:
            raise InputError(
                f"expected one number per line (the {name} score of hypothesis "
                f"{len(values) + 1}), got {len(fields)} fields",
                path,
                lineno,
            )
        values.append(parse_float(fields[0], path, lineno, f"{name} score"))
        last = lineno
    if len(values) < count:
        raise InputError(
            f"expected {count} scores, one per hypothesis of {utt_id!r}, got {len(values)}",
            path,
            last,
        )
    return values


def add_score_dirs(nbest: NBest, dirs: Sequence[ScoreDir]) -> NBest:
    """``nbest`` with the numbers of each score directory added as its feature ``name``.

    Every utterance of ``nbest`` needs a file in every folder, with one number per hypothesis.
    A name given twice, or one the lists already have on any hypothesis, is a ValueError.
    """
    names = [d.name for d in dirs]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ValueError(f"extra score name(s) given twice: {', '.join(twice)}")
    existing = {name for nb in nbest.values() for hyp in nb for name in hyp.scores}
    for d in dirs:
        if d.name in existing:
            raise ValueError(
                f"extra scores {d.name}={d.folder}: the N-best lists already have a score "
                f"named {d.name!r}; name them otherwise"
            )
    for d in dirs:
        files = score_files(d.folder)
        missing = [u for u in nbest if u not in files]
        if missing:
            more = f" (+{len(missing) - 5} more)" if len(missing) > 5 else ""
            raise InputError(
                f"no score file for {len(missing)} utterance(s) of the N-best lists: "
                f"{', '.join(missing[:5])}{more} (expected files named like the N-best files: "
                "ID, ID.gz, ID.score.gz, ...)",
                d.folder,
            )
        unused = len(files) - len(nbest)
        if unused:
            logger.info("%s: %d score file(s) of other utterances ignored", d.folder, unused)
        values = {u: read_score_file(files[u], len(nb), u, d.name) for u, nb in nbest.items()}
        nbest = nbest.with_scores(d.name, values)
        logger.info("%s: extra score %r added to %d lists", d.folder, d.name, len(nbest))
    return nbest


# --- writers ------------------------------------------------------------------------------


def _write_files(
    nbest: NBest, path: Path, header: str | None, line: Callable[[Hypothesis, str, int], str]
) -> None:
    check_nbest_fields(nbest)
    check_finite(nbest)
    folder = Path(path)
    names = []
    for utt_id in nbest:
        check_file_name(utt_id, "utterance id")
        names.append(utt_id + WRITE_SUFFIX)  # the reader strips exactly this suffix again
    with atomic_dir(folder, owned=_is_srilm_file) as tmp:
        for (utt_id, nb), name in zip(nbest.items(), names, strict=True):
            with atomic_write(tmp / name) as f:
                if header is not None:
                    f.write(header + "\n")
                for rank, hyp in enumerate(nb, start=1):
                    f.write(line(hyp, utt_id, rank) + "\n")
        with atomic_write(tmp / LIST_NAME) as f:
            for name in names:
                f.write(name + "\n")


def _is_srilm_file(name: str) -> bool:
    """Entries of the folder that a written set replaces: ``*.nbest`` and ``nbest.list``."""
    return name == LIST_NAME or name.endswith(WRITE_SUFFIX)


def write_srilm1(nbest: NBest, path: Path, *, score: str = "score") -> None:
    """Write ``NBestList1.0`` files: ``(bytelog) words``, bytelog = round(score / BYTELOG_TO_LN).

    Bytelogs are integers, so scores come back rounded to a multiple of ``BYTELOG_TO_LN``.
    """

    def line(hyp: Hypothesis, utt_id: str, rank: int) -> str:
        value = score_or_fail(hyp.scores, score, utt_id, rank)
        return " ".join((f"({round(value / BYTELOG_TO_LN)})", *hyp.words))

    _write_files(nbest, path, HEADER1, line)


def write_srilm3(nbest: NBest, path: Path, *, acoustic: str = "acoustic", lm: str = "lm") -> None:
    """Write 3-column files: ``acoustic/LN10 lm/LN10 nwords words`` (log10 scores).

    ``nwords`` is the hypothesis' ``nwords`` score when it has one (a whole number), else its
    word count. Scores round-trip to within one unit in the last place (log10 conversion).
    """

    def line(hyp: Hypothesis, utt_id: str, rank: int) -> str:
        a = score_or_fail(hyp.scores, acoustic, utt_id, rank) / LN10
        g = score_or_fail(hyp.scores, lm, utt_id, rank) / LN10
        n = hyp.scores.get("nwords", float(len(hyp.words)))
        if n < 0 or n != int(n):
            raise ValueError(f"hypothesis {rank} of {utt_id!r}: nwords {n} is not a count")
        return " ".join((repr(a), repr(g), str(int(n)), *hyp.words))

    _write_files(nbest, path, None, line)
