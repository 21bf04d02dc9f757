"""Kaldi linear N-best folders (``lattice-to-nbest`` + ``nbest-to-linear`` output).

A folder with::

    text        <uttid>-<N> w1 w2 ...     N = 1-based rank of the hypothesis
    ac_cost     <uttid>-<N> <cost>
    lm_cost     <uttid>-<N> <cost>
    <name>_cost <uttid>-<N> <cost>        (any other cost file)

Costs are *negated natural-log* scores, so every ``<name>_cost`` file becomes the score
``<name> = -cost`` (natural log, higher is better), except ``ac_cost``, which becomes ``am``.
The ids of ``text`` and of every cost file must match. Ranks of an utterance must run 1..n
(in any line order); utterances keep the order of their first line in ``text``. The writer is
the inverse: ``am`` -> ``ac_cost``, any other score ``x`` -> ``x_cost`` holding ``-x``.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from pathlib import Path

from rescorer.core.errors import InputError, check_same_ids, shorten
from rescorer.core.numbers import MAX_DIGITS, parse_float
from rescorer.core.output import atomic_dir, atomic_write
from rescorer.formats._common import (
    check_file_name,
    check_finite,
    check_nbest_fields,
    format_float,
    is_dir,
    read_keyed,
)
from rescorer.nbest import Hypothesis, NBest, NBestList

logger = logging.getLogger(__name__)

TEXT = "text"
COST_SUFFIX = "_cost"
# Cost file stem -> score name, where they differ (and back).
COST_TO_SCORE = {"ac": "am"}
SCORE_TO_COST = {v: k for k, v in COST_TO_SCORE.items()}
_HYP_ID = re.compile(r"^(.+)-([0-9]+)$")


def cost_files(folder: Path) -> dict[str, Path]:
    """``{score_name: path}`` of the ``*_cost`` files in ``folder``, by file name."""
    out: dict[str, Path] = {}
    for p in sorted(folder.iterdir()):
        if p.name.endswith(COST_SUFFIX) and not p.name.startswith(".") and p.is_file():
            stem = p.name[: -len(COST_SUFFIX)]
            if stem:
                name = COST_TO_SCORE.get(stem, stem)
                if name in out:
                    raise InputError(f"{out[name].name} and {p.name} both give score {name!r}", p)
                out[name] = p
    return out


def split_hyp_id(hyp_id: str, path: Path, line: int) -> tuple[str, int]:
    """``"utt-3"`` -> ``("utt", 3)``; the rank must be 1 or more."""
    m = _HYP_ID.match(hyp_id)
    if not m or len(m.group(2)) > MAX_DIGITS or int(m.group(2)) < 1:
        raise InputError(
            f"expected an id <uttid>-<N> with a 1-based rank N, got {shorten(hyp_id)!r}",
            path,
            line,
        )
    return m.group(1), int(m.group(2))


def _cost(path: Path) -> Callable[[str, int], float]:
    def parse(rest: str, lineno: int) -> float:
        fields = rest.split()
        if len(fields) != 1:
            raise InputError(
                f"expected '<uttid>-<N> <cost>', got {len(fields)} values", path, lineno
            )
        return parse_float(fields[0], path, lineno, "cost")

    return parse


def read_kaldi(path: Path) -> NBest:
    """Read a Kaldi N-best folder; ``<name> = -<name>_cost`` (natural log), ``ac`` -> ``am``."""
    folder = Path(path)
    if not is_dir(folder):
        raise InputError("expected a Kaldi N-best folder (with text and *_cost files)", folder)
    text_path = folder / TEXT
    if not text_path.exists():
        raise InputError("Kaldi N-best folder has no text file", text_path)
    texts = read_keyed(text_path, lambda rest, _line: tuple(rest.split()), "hypothesis id")
    costs: dict[str, dict[str, tuple[int, float]]] = {}
    for name, cost_path in cost_files(folder).items():
        costs[name] = read_keyed(cost_path, _cost(cost_path), "hypothesis id")
        check_same_ids(set(texts), set(costs[name]), f"text and {cost_path.name}", cost_path)

    ranks: dict[str, dict[int, Hypothesis]] = {}
    for hyp_id, (lineno, words) in texts.items():
        utt, rank = split_hyp_id(hyp_id, text_path, lineno)
        scores = {name: -values[hyp_id][1] for name, values in costs.items()}
        by_rank = ranks.setdefault(utt, {})
        if rank in by_rank:
            raise InputError(f"utterance {utt!r} has rank {rank} twice", text_path, lineno)
        by_rank[rank] = Hypothesis(words, scores)
    lists = []
    for utt, by_rank in ranks.items():
        n = len(by_rank)
        if set(by_rank) != set(range(1, n + 1)):
            missing = sorted(set(range(1, max(by_rank) + 1)) - set(by_rank))
            raise InputError(
                f"utterance {utt!r}: ranks must run 1..N; missing {utt}-{missing[0]}", text_path
            )
        lists.append(NBestList(utt, tuple(by_rank[r] for r in range(1, n + 1))))
    return NBest(lists)


def write_kaldi(nbest: NBest, path: Path) -> None:
    """Write ``text`` and one ``<name>_cost`` file (``-score``) per score name.

    Only scores that every hypothesis has are written (a warning names the others); ``am``
    goes to ``ac_cost``. ``text`` and the ``*_cost`` files are replaced as one set (stale
    ``*_cost`` files dropped, other files of the folder kept), so the folder reads back as
    ``nbest`` and a killed run leaves the previous set.
    """
    check_nbest_fields(nbest)
    check_finite(nbest)
    for utt_id, nb in nbest.items():
        if not len(nb):
            raise ValueError(f"utterance {utt_id!r} has no hypotheses; Kaldi text cannot hold it")
    names = list(nbest.score_names())
    every = {n for nb in nbest.values() for h in nb for n in h.scores}
    if every - set(names):
        logger.warning(
            "not writing scores missing on some hypotheses: %s",
            ", ".join(sorted(every - set(names))),
        )
    for name in names:
        if name in COST_TO_SCORE:
            raise ValueError(
                f"score {name!r} cannot be written: {name}_cost would read as "
                f"{COST_TO_SCORE[name]!r}"
            )
        check_file_name(name, "score name")
    with atomic_dir(path, owned=_is_kaldi_file) as folder:
        with atomic_write(folder / TEXT) as f:
            for utt_id, nb in nbest.items():
                for rank, hyp in enumerate(nb, start=1):
                    f.write(f"{utt_id}-{rank} {hyp.text}\n" if hyp.words else f"{utt_id}-{rank}\n")
        for name in names:
            file_name = SCORE_TO_COST.get(name, name) + COST_SUFFIX
            with atomic_write(folder / file_name) as f:
                for utt_id, nb in nbest.items():
                    for rank, hyp in enumerate(nb, start=1):
                        f.write(f"{utt_id}-{rank} {format_float(-hyp.scores[name])}\n")


def _is_kaldi_file(name: str) -> bool:
    """Entries of the folder that a written set replaces: ``text`` and every ``*_cost``."""
    return name == TEXT or name.endswith(COST_SUFFIX)
