"""ESPnet N-best folders (``asr_inference.py`` output with ``--nbest N``).

Layout of one decoded set::

    <set>/raw_hypotheses/1best_recog/text     uttid w1 w2 ...   (may be just "uttid": empty hyp)
                                    /score    uttid tensor(-46.6314)
                                    /scores   uttid {"decoder": "tensor(-0.3654)", "ctc": ..., ...}
                                    /token    uttid tok1 tok2 ...          (optional)
                        /2best_recog/...

Folder ``<k>best_recog`` holds the k-th hypothesis of every utterance. The reader accepts the set
folder (the one holding ``raw_hypotheses/``) or the folder holding the ``<k>best_recog`` folders.

Scores: ``score`` (the weighted total ESPnet ranked by) and every key of the ``scores`` JSON
(``decoder``, ``ctc``, ``lm``, ...) are **natural-log** values already, so they are stored
unchanged, under those names. Values may be written ``tensor(x)`` or as plain numbers.

The writer produces the same layout under ``<set>/raw_hypotheses/``. It writes ``score`` as its
own file when every hypothesis of that rank has one, otherwise into the ``scores`` JSON (the reader
takes a score from either place), and ``token`` when the hypotheses of that rank carry tokens.
Values are written ``tensor(<repr>)`` so a round trip is exact.
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rescorer.core.errors import InputError, check_same_ids, shorten
from rescorer.core.json_input import json_number, json_string, parse_json
from rescorer.core.numbers import MAX_DIGITS, parse_float
from rescorer.core.output import atomic_dir, atomic_write
from rescorer.formats._common import (
    check_field,
    check_finite,
    check_nbest_fields,
    format_float,
    is_dir,
    read_keyed,
)
from rescorer.nbest import Hypothesis, NBest, NBestList

logger = logging.getLogger(__name__)

KBEST_DIR = re.compile(r"^([0-9]+)best_recog$")
TEXT, SCORE, SCORES, TOKEN = "text", "score", "scores", "token"
# Score name of the ``score`` file.
TOTAL_NAME = "score"
# A scores line as ESPnet's json.dumps writes it, and one of its pairs: no escapes, no control
# characters, no nesting (what JSON would refuse, the careful path refuses).
_NAME, _VALUE = r'"[^"\\\x00-\x1f]+"', r'"tensor\([^()"\\\x00-\x1f]*\)"'
_ESPNET_SCORES = re.compile(rf"\{{{_NAME}: {_VALUE}(?:, {_NAME}: {_VALUE})*\}}")
_ESPNET_PAIR = re.compile(r'"([^"]+)": "tensor\(([^)]*)\)"')  # on a line _ESPNET_SCORES took
_SPACE = re.compile(r"\s")
_TENSOR = re.compile(r"^\s*tensor\(\s*([^,()\s]+)\s*(?:,[^()]*)?\)\s*$")


def find_kbest_dirs(path: Path) -> tuple[Path, list[tuple[int, Path]]]:
    """The folder holding the ``<k>best_recog`` folders and those folders sorted by k.

    Raises :class:`InputError` when there are none, when ``1best_recog`` is missing, or when a
    rank is skipped (``1best``, ``2best``, ``4best``).
    """
    path = Path(path)
    if not is_dir(path):
        raise InputError("expected an ESPnet set folder (holding raw_hypotheses/)", path)
    root = path / "raw_hypotheses" if is_dir(path / "raw_hypotheses") else path
    found: list[tuple[int, Path]] = []
    for child in root.iterdir():
        m = KBEST_DIR.match(child.name)
        if m and len(m.group(1)) <= MAX_DIGITS and is_dir(child):
            found.append((int(m.group(1)), child))
    if not found:
        raise InputError("no <k>best_recog folders found (looked for raw_hypotheses/)", root)
    found.sort()
    if found[0][0] == 0:
        raise InputError(
            "0best_recog: ranks count from 1 (1best_recog is the first hypothesis); "
            "renumber the folders",
            found[0][1],
        )
    for expected, (k, child) in enumerate(found, start=1):
        if k != expected:
            raise InputError(
                f"rank folders skip from {expected - 1} to {k}: {expected}best_recog is missing",
                child,
            )
    return root, found


def parse_value(text: str, path: str | Path, line: int | None, what: str) -> float:
    """A score written ``tensor(x)``, ``tensor(x, device=...)`` or as a plain number."""
    if text.startswith("tensor(") and text.endswith(")"):  # fast path for the common case
        try:
            value = float(text[7:-1])
        except ValueError:
            pass
        else:
            if math.isfinite(value):
                return value
    m = _TENSOR.match(text)
    return parse_float(m.group(1) if m else text.strip(), path, line, what)


def _parse_score(path: Path) -> Callable[[str, int], float]:
    def parse(rest: str, lineno: int) -> float:
        if not rest.strip():
            raise InputError("missing score value", path, lineno)
        return parse_value(rest, path, lineno, "score")

    return parse


def _parse_scores(path: Path) -> Callable[[str, int], dict[str, float]]:
    good_names: set[str] = set()

    def parse(rest: str, lineno: int) -> dict[str, float]:
        # The line ESPnet writes, {"name": "tensor(x)", ...} with names seen before, at C
        # speed; anything else (and every error) goes the careful way below.
        if _ESPNET_SCORES.fullmatch(rest):
            pairs = _ESPNET_PAIR.findall(rest)
            try:
                out = {name: float(value) for name, value in pairs}
            except ValueError:
                out = {}
            if (
                len(out) == len(pairs)
                and good_names.issuperset(out)
                and all(map(math.isfinite, out.values()))
            ):
                return out
        try:
            obj = parse_json(rest, path, lineno)
        except InputError as err:
            raise InputError(f"scores are not valid JSON: {err.message}", path, lineno) from None
        if not isinstance(obj, dict):
            raise InputError("scores must be a JSON object {name: value}", path, lineno)
        out: dict[str, float] = {}
        for name, value in obj.items():
            if name not in good_names:
                if not name or _SPACE.search(name):
                    raise InputError(f"bad score name {shorten(name)!r}", path, lineno)
                json_string(name, path, lineno, "score name")
                good_names.add(name)
            if isinstance(value, str):
                out[name] = parse_value(value, path, lineno, f"score {name!r}")
            elif isinstance(value, (int, float)) and not isinstance(value, bool):
                out[name] = json_number(value, path, lineno, f"score {name!r}")
            else:
                raise InputError(
                    f"score {shorten(name)!r} must be a number or 'tensor(x)' string", path, lineno
                )
        return out

    return parse


def _parse_words(rest: str, lineno: int) -> tuple[str, ...]:
    return tuple(rest.split())


def _read_rank(k: int, folder: Path) -> dict[str, Hypothesis]:
    """The hypotheses of one ``<k>best_recog`` folder keyed by utterance id."""
    text_path = folder / TEXT
    if not text_path.exists():
        raise InputError(f"{k}best_recog has no text file", text_path)
    texts = read_keyed(text_path, _parse_words)

    def same_ids(read: dict[str, Any], name: str, path: Path) -> None:
        if read.keys() != texts.keys():  # one C-level comparison for the common case
            check_same_ids(set(texts), set(read), f"{k}best_recog/text and {name}", path)

    score_path = folder / SCORE
    totals = read_keyed(score_path, _parse_score(score_path)) if score_path.exists() else None
    if totals is not None:
        same_ids(totals, "score", score_path)
    scores_path = folder / SCORES
    named = read_keyed(scores_path, _parse_scores(scores_path)) if scores_path.exists() else None
    if named is not None:
        same_ids(named, "scores", scores_path)
        if totals is not None:
            for lineno, values in named.values():
                if TOTAL_NAME in values:
                    raise InputError(
                        f"score {TOTAL_NAME!r} is given in both score and scores",
                        scores_path,
                        lineno,
                    )
    tokens: dict[str, tuple[str, ...]] | None = None
    token_path = folder / TOKEN
    if token_path.exists():
        read = read_keyed(token_path, _parse_words)
        same_ids(read, "token", token_path)
        tokens = {utt: toks for utt, (_, toks) in read.items()}
    out = {}
    checked = Hypothesis._checked
    for utt, (_, words) in texts.items():
        scores = {} if totals is None else {TOTAL_NAME: totals[utt][1]}
        if named is not None:
            scores.update(named[utt][1])
        out[utt] = checked(words, scores, None if tokens is None else tokens[utt])
    return out


def read_espnet(path: Path) -> NBest:
    """Read an ESPnet N-best set (see the module docstring); scores are natural log."""
    root, ranks = find_kbest_dirs(Path(path))
    per_rank = [_read_rank(k, folder) for k, folder in ranks]
    order = list(per_rank[0])  # utterance order of 1best_recog/text
    hyps: dict[str, list[Hypothesis]] = {u: [] for u in order}
    for (k, folder), rank in zip(ranks, per_rank, strict=True):
        for utt, hyp in rank.items():
            got = hyps.get(utt)
            if got is None or len(got) != k - 1:
                prev = "1best_recog" if got is None else f"{k - 1}best_recog"
                raise InputError(
                    f"utterance {utt!r} has hypothesis {k} but is not in {prev}/text",
                    folder / TEXT,
                )
            got.append(hyp)
    logger.debug("read %d utterances, %d ranks from %s", len(order), len(ranks), root)
    return NBest([NBestList(u, tuple(hyps[u])) for u in order])


def _tensor(value: float) -> str:
    return f"tensor({format_float(value)})"


def write_espnet(nbest: NBest, path: Path) -> None:
    """Write ``nbest`` as ``<path>/raw_hypotheses/<k>best_recog/{text,score,scores,token}``.

    Scores are written as they are stored (natural log). ``raw_hypotheses/`` is written as one
    set (:func:`rescorer.core.output.atomic_dir`): its ``<k>best_recog`` folders are replaced
    together, so reading the folder back gives exactly ``nbest``, and a killed run leaves the
    previous set; other entries of ``raw_hypotheses/`` and the rest of ``path`` are kept.
    """
    check_nbest_fields(nbest)
    check_finite(nbest)
    for utt_id, nb in nbest.items():
        for hyp in nb:
            for name in hyp.scores:
                check_field(name, f"score name of {utt_id!r}")
            if hyp.tokens is not None:
                for tok in hyp.tokens:
                    check_field(tok, f"token of {utt_id!r}")
    for utt_id, nb in nbest.items():
        if not len(nb):
            raise ValueError(
                f"utterance {utt_id!r} has no hypotheses; ESPnet folders cannot hold it"
            )
    # An empty set still gets an (empty) 1best_recog so that it reads back.
    max_n = max((len(nb) for nb in nbest.values()), default=1)
    any_named = any(set(h.scores) - {TOTAL_NAME} for nb in nbest.values() for h in nb)
    with atomic_dir(Path(path) / "raw_hypotheses", owned=_is_rank_folder) as root:
        for k in range(1, max_n + 1):
            rank = [(u, nb[k - 1]) for u, nb in nbest.items() if len(nb) >= k]
            _write_rank(root / f"{k}best_recog", k, rank, any_named)


def _is_rank_folder(name: str) -> bool:
    """Entries of ``raw_hypotheses/`` that a written set replaces (all ``<k>best_recog``)."""
    return KBEST_DIR.match(name) is not None


def _write_rank(folder: Path, k: int, rank: list[tuple[str, Hypothesis]], any_named: bool) -> None:
    has_total = all(TOTAL_NAME in h.scores for _, h in rank)
    with_tokens = sum(h.tokens is not None for _, h in rank)
    if 0 < with_tokens < len(rank):
        raise ValueError(
            f"rank {k}: only {with_tokens} of {len(rank)} hypotheses have tokens; "
            "the ESPnet token file needs all or none"
        )
    folder.mkdir()
    with atomic_write(folder / TEXT) as f:
        for u, h in rank:
            f.write(f"{u} {h.text}\n" if h.words else f"{u}\n")
    if has_total:
        with atomic_write(folder / SCORE) as f:
            for u, h in rank:
                f.write(f"{u} {_tensor(h.scores[TOTAL_NAME])}\n")
    if any_named or (not has_total and any(h.scores for _, h in rank)):
        with atomic_write(folder / SCORES) as f:
            for u, h in rank:
                obj = {
                    n: _tensor(v)
                    for n, v in h.scores.items()
                    if not (has_total and n == TOTAL_NAME)
                }
                f.write(f"{u} {json.dumps(obj, ensure_ascii=False)}\n")
    if with_tokens:
        with atomic_write(folder / TOKEN) as f:
            for u, h in rank:
                f.write(" ".join((u, *(h.tokens or ()))) + "\n")
