"""Keyboard evaluation by simulated typing: keystroke savings, next-word accuracy, MRR, latency.

Keystroke convention
--------------------
A sentence ``w_1 .. w_n`` is typed word by word and every word but the last is followed by one
space; the sentence ends with its last word (``final_space=True``, ``--final-space``, counts a
space after it too, as when the send key or the next sentence's space is charged to it).
Without prediction it costs::

    baseline = sum_i (len(w_i) + 1) - 1        (+ 1 with final_space)

With ``k`` suggestions shown: before each letter of ``w_i`` -- with ``j = 0 .. len(w_i) - 1``
letters typed -- the keyboard shows the ``k`` most probable words that start with those letters.
As soon as ``w_i`` is among them the user taps it, and the tap enters the word *and its space*:
the word costs ``j + 1`` keystrokes (``j`` letters and one tap). If it is never shown the user
types every letter and the space, ``len(w_i) + 1`` (the last word: ``len(w_n)``, no space), as
without prediction (a suggestion that could only appear after the last letter saves nothing, so
it is not looked for). Then::

    KS = 1 - used / baseline        (0 <= KS < 1)

Worked example, "on its way" with ``k = 1``: baseline = (2+1) + (3+1) + 3 = 10. Say the
model's first suggestion is "i" before any letter and "on" after "o": "on" costs 2 (``o``, tap).
If "its" is the first suggestion after "on": 1 (tap). If "way" is never the first suggestion
while typing ``w``, ``wa``: 3 (``w a y``). Used = 6, KS = 1 - 6/10 = 0.4 (with the final space:
11 and 7, KS = 0.364).
(``tests/rescorer/test_keyboard.py`` counts this and other sentences by hand.)

Other conventions: words are compared in the vocabulary's case (see :mod:`rescorer.predict`);
lengths are counted on the words as written in the test text; the model always sees the intended
words as history (a tapped word is the intended word, nothing is ever corrected). A word outside
the prediction vocabulary can never be suggested, so it costs ``len + 1``; such words are counted
as ``oov``.

Next-word accuracy and MRR are measured before the first letter of each word: top-k accuracy is
the fraction of words among the first ``k`` suggestions, MRR the mean of ``1 / rank`` of the word
in the full ranking (0 for words outside the vocabulary). Ties are broken alphabetically, as
:class:`rescorer.predict.Session` ranks.

Latency is the time from a keystroke to the suggestion list it shows: at the start of a word it
includes the model step for the previous word and the next-word distribution; after a letter it
is the ranking of the prefix's candidates only. Both the wall-clock time and the process's CPU
time (all its threads) are recorded: on a machine shared with other jobs the wall time measures
the contention, the CPU time what one free core would take.

Per-sentence results (:class:`SentenceResult`, JSONL) let two systems be compared on the same
sentences with the paired tests of :mod:`rescorer.significance` (:func:`compare_systems`).
"""

from __future__ import annotations

import itertools
import json
import logging
import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from rescorer.core.errors import InputError, check_same_ids
from rescorer.core.io import read_lines
from rescorer.core.json_input import parse_json
from rescorer.core.output import atomic_write
from rescorer.lms.contract import Context
from rescorer.predict import Predictor
from rescorer.significance import (
    BootstrapResult,
    TestResult,
    bootstrap_wer_difference,
    matched_pairs,
    sign_test,
    wilcoxon,
)

logger = logging.getLogger(__name__)

TEXT_FORMATS = ("auto", "plain", "tsv", "kaldi")
PER_SENTENCE_FORMAT = "rescorer-keyboard-sentence"
_T = TypeVar("_T")


@dataclass(frozen=True)
class KeyboardOptions:
    """What to measure."""

    # Numbers of suggestions shown while typing (one keystroke count each).
    ks: tuple[int, ...] = (1, 3, 5)
    # Top-k next-word accuracies measured before the first letter of each word.
    accuracy_ks: tuple[int, ...] = (1, 3)
    # Count a space after the last word of each sentence (in the baseline and when it is typed).
    final_space: bool = False
    # Name of the text normaliser the test sentences went through ("none": raw text), recorded
    # in every result so that runs over differently normalised text are not compared.
    normalize: str = "none"

    def __post_init__(self) -> None:
        for name in ("ks", "accuracy_ks"):
            values = tuple(int(v) for v in getattr(self, name))
            if not values or any(v < 1 for v in values):
                raise ValueError(f"{name}: expected one or more integers >= 1, got {values}")
            object.__setattr__(self, name, tuple(sorted(set(values))))

    @property
    def shown(self) -> int:
        """The longest suggestion list any measure needs."""
        return max(self.ks + self.accuracy_ks)


def word_keystrokes(length: int, ranks: Sequence[int | None], k: int, space: bool = True) -> int:
    """Keystrokes to enter a word of ``length`` letters (and its space, when ``space``) with
    ``k`` suggestions.

    ``ranks[j]`` is the word's 1-based place in the suggestion list shown after ``j`` letters
    (None: not in the list); entries from ``j = length`` on are ignored. Missing trailing entries
    mean "not shown" (a simulation may stop once the word is first).
    """
    for j, r in enumerate(ranks[:length]):
        if r is not None and r <= k:
            return j + 1
    return length + int(space)


def sentence_baseline(words: Sequence[str], final_space: bool = False) -> int:
    """Keystrokes without prediction: every letter and a space after every word but the last
    (after the last too with ``final_space``)."""
    if not words:
        return 0
    return sum(len(w) + 1 for w in words) - (0 if final_space else 1)


@dataclass(frozen=True)
class SentenceResult:
    """One sentence typed with prediction."""

    # Sentence id from the test file.
    id: str
    # Number of words.
    words: int
    # Keystrokes without prediction (letters + one space per word).
    baseline: int
    # k -> keystrokes used with k suggestions shown.
    keystrokes: Mapping[int, int]
    # k -> words that were among the first k suggestions before their first letter.
    hits: Mapping[int, int]
    # Sum over words of 1/rank before the first letter (0 for words outside the vocabulary).
    reciprocal_rank: float
    # Words outside the prediction vocabulary.
    oov: int
    # The text normaliser of the test text (KeyboardOptions.normalize).
    normalize: str = "none"
    # Whether a space after the last word was counted (KeyboardOptions.final_space); None:
    # not recorded (files written before it was).
    final_space: bool | None = None
    # k -> the keystrokes of each word in order (summing to keystrokes[k]), and what each word
    # costs without prediction (its letters and its space; summing to baseline): where in a
    # sentence a system saves (keystrokes_by_position). None: not recorded (older files).
    word_keystrokes: Mapping[int, tuple[int, ...]] | None = None
    word_baseline: tuple[int, ...] | None = None

    def ks(self, k: int) -> float:
        """Keystroke savings of this sentence with ``k`` suggestions."""
        return 1.0 - self.keystrokes[k] / self.baseline if self.baseline else 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "words": self.words,
            "baseline": self.baseline,
            "keystrokes": {str(k): v for k, v in self.keystrokes.items()},
            "hits": {str(k): v for k, v in self.hits.items()},
            "reciprocal_rank": round(self.reciprocal_rank, 6),
            "oov": self.oov,
            "normalize": self.normalize,
            **({} if self.final_space is None else {"final_space": self.final_space}),
            **(
                {}
                if self.word_keystrokes is None or self.word_baseline is None
                else {
                    "word_keystrokes": {str(k): list(v) for k, v in self.word_keystrokes.items()},
                    "word_baseline": list(self.word_baseline),
                }
            ),
        }

    @classmethod
    def from_json(cls, obj: Any) -> SentenceResult:
        """A record written by :meth:`to_json`; ValueError for one that no typing could give
        (see :func:`_check_record`)."""
        if not isinstance(obj, dict):
            raise ValueError(f"expected a JSON object, got {type(obj).__name__}")
        missing = [k for k in _RECORD_KEYS if k not in obj]
        if missing:
            raise ValueError(f"missing key {missing[0]!r}")
        final_space = obj.get("final_space")
        if final_space is not None and not isinstance(final_space, bool):
            raise ValueError(f"final_space: expected true or false, got {final_space!r}")
        normalize = obj.get("normalize", "none")  # files written before it: raw text
        if not isinstance(obj["id"], str) or not isinstance(normalize, str):
            bad = "id" if not isinstance(obj["id"], str) else "normalize"
            raise ValueError(f"{bad}: expected a string, got {obj[bad]!r}")
        if ("word_keystrokes" in obj) != ("word_baseline" in obj):
            raise ValueError("word_keystrokes and word_baseline: expected both or neither")
        by_word = None
        if "word_keystrokes" in obj:
            by_word = _by_k(obj["word_keystrokes"], "word_keystrokes", _count_list, "count lists")
        word_baseline = None
        if "word_baseline" in obj:
            word_baseline = _count_list(obj["word_baseline"], "word_baseline")
        result = cls(
            id=obj["id"],
            words=_count(obj["words"], "words"),
            baseline=_count(obj["baseline"], "baseline"),
            keystrokes=_by_k(obj["keystrokes"], "keystrokes", _count, "counts"),
            hits=_by_k(obj["hits"], "hits", _count, "counts"),
            reciprocal_rank=_number(obj["reciprocal_rank"], "reciprocal_rank"),
            oov=_count(obj["oov"], "oov"),
            normalize=normalize,
            final_space=final_space,
            word_keystrokes=by_word,
            word_baseline=word_baseline,
        )
        _check_record(result)
        return result


_RECORD_KEYS = ("id", "words", "baseline", "keystrokes", "hits", "reciprocal_rank", "oov")


def _count(value: Any, name: str) -> int:
    """A JSON integer >= 0 (not a float, a string or a boolean)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name}: expected a whole number, got {value!r}")
    if value < 0:
        raise ValueError(f"{name}: expected a number >= 0, got {value}")
    return value


def _number(value: Any, name: str) -> float:
    """A finite JSON number >= 0 (not a string or a boolean)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{name}: expected a number, got {value!r}")
    if value < 0:
        raise ValueError(f"{name}: expected a number >= 0, got {value}")
    return float(value)


def _count_list(value: Any, name: str) -> tuple[int, ...]:
    """A JSON list of whole numbers >= 0."""
    if not isinstance(value, list):
        raise ValueError(f"{name}: expected a list of counts, got {value!r}")
    return tuple(_count(v, f"{name}[{i}]") for i, v in enumerate(value))


def _by_k(value: Any, name: str, item: Callable[[Any, str], _T], what: str) -> dict[int, _T]:
    """``{"k": item}`` with k >= 1, each item read by ``item``, sorted by k."""
    if not isinstance(value, dict) or not value:
        raise ValueError(f"{name}: expected an object of {what} by k, got {value!r}")
    out = {}
    for key, v in value.items():
        if not (isinstance(key, str) and key.isascii() and key.isdigit() and int(key) >= 1):
            raise ValueError(f"{name}: expected keys k >= 1, got {key!r}")
        out[int(key)] = item(v, f"{name}[{key}]")
    return dict(sorted(out.items()))


def _check_words(r: SentenceResult) -> None:
    """ValueError unless the per-word counts (when recorded) have one entry per word, sum to
    the sentence's totals, and cost each word between 1 keystroke and its baseline."""
    if r.word_keystrokes is None or r.word_baseline is None:
        return
    if len(r.word_baseline) != r.words:
        raise ValueError(
            f"word_baseline: expected one per word ({r.words}), got {len(r.word_baseline)}"
        )
    if sum(r.word_baseline) != r.baseline:
        raise ValueError(
            f"word_baseline: expected them to sum to the baseline {r.baseline}, got "
            f"{sum(r.word_baseline)}"
        )
    if set(r.word_keystrokes) != set(r.keystrokes):
        raise ValueError(
            f"word_keystrokes: expected the same k as keystrokes ({sorted(r.keystrokes)}), got "
            f"{sorted(r.word_keystrokes)}"
        )
    for k, used in r.word_keystrokes.items():
        if len(used) != r.words:
            raise ValueError(
                f"word_keystrokes[{k}]: expected one per word ({r.words}), got {len(used)}"
            )
        for i, (u, b) in enumerate(zip(used, r.word_baseline, strict=True)):
            if not 1 <= u <= b:
                raise ValueError(
                    f"word_keystrokes[{k}][{i}] {u}: expected between 1 and the word's baseline {b}"
                )
        if sum(used) != r.keystrokes[k]:
            raise ValueError(
                f"word_keystrokes[{k}]: expected them to sum to keystrokes[{k}] "
                f"{r.keystrokes[k]}, got {sum(used)}"
            )


def _check_record(r: SentenceResult) -> None:
    """ValueError for a record that typing a sentence cannot give: every word takes at least
    one keystroke and at most its letters and space (the baseline); hits and reciprocal ranks
    count the words in the vocabulary at most; more suggestions never cost keystrokes or lose
    hits."""
    if r.words < 1:
        raise ValueError(f"words: expected at least 1, got {r.words}")
    least = 2 * r.words - (0 if r.final_space else 1)  # one letter a word, and the spaces
    if r.baseline < least:
        raise ValueError(
            f"baseline {r.baseline}: {r.words} word(s) take at least {least} keystrokes"
        )
    if r.oov > r.words:
        raise ValueError(f"oov {r.oov}: more words outside the vocabulary than the {r.words} words")
    known = r.words - r.oov
    for k, used in r.keystrokes.items():
        if not r.words <= used <= r.baseline:
            raise ValueError(
                f"keystrokes[{k}] {used}: expected between the {r.words} word(s) (one keystroke "
                f"each at least) and the baseline {r.baseline}"
            )
    for k, hit in r.hits.items():
        if hit > known:
            raise ValueError(
                f"hits[{k}] {hit}: more hits than the {known} word(s) in the vocabulary"
            )
    if r.reciprocal_rank > known + 1e-6:
        raise ValueError(
            f"reciprocal_rank {r.reciprocal_rank:g}: above the {known} word(s) in the vocabulary "
            "(each adds 1/rank <= 1)"
        )
    _check_words(r)
    for name, table, sign in (("keystrokes", r.keystrokes, -1), ("hits", r.hits, 1)):
        ks = sorted(table)
        for lo, hi in zip(ks, ks[1:], strict=False):
            if sign * (table[hi] - table[lo]) < 0:
                change = "more" if sign < 0 else "fewer"
                raise ValueError(
                    f"{name}: {table[hi]} at k={hi} but {table[lo]} at k={lo} (more suggestions "
                    f"cannot give {change})"
                )


@dataclass(frozen=True)
class LatencyStats:
    """Summary of latencies, in milliseconds."""

    # Number of measurements.
    count: int
    mean_ms: float
    p50_ms: float
    p95_ms: float
    max_ms: float

    @classmethod
    def from_seconds(cls, seconds: Sequence[float] | np.ndarray) -> LatencyStats:
        ms = np.asarray(seconds, dtype=np.float64) * 1000.0
        if ms.size == 0:
            return cls(0, math.nan, math.nan, math.nan, math.nan)
        p50, p95 = np.percentile(ms, [50, 95])
        return cls(int(ms.size), float(ms.mean()), float(p50), float(p95), float(ms.max()))

    def describe(self) -> str:
        return (
            f"mean {self.mean_ms:.3f} ms, median {self.p50_ms:.3f} ms, p95 {self.p95_ms:.3f} ms, "
            f"max {self.max_ms:.1f} ms over {self.count} suggestion lists"
        )


@dataclass(frozen=True)
class KeyboardReport:
    """Totals of an evaluation."""

    # Name of the predicting model.
    system: str
    sentences: int
    words: int
    # Words outside the prediction vocabulary.
    oov: int
    # Total keystrokes without prediction.
    baseline: int
    # k -> total keystrokes used with k suggestions.
    keystrokes: Mapping[int, int]
    # k -> words among the first k suggestions before their first letter.
    hits: Mapping[int, int]
    # Sum of reciprocal ranks over all words.
    reciprocal_rank: float
    # Per-keystroke latency (time to each suggestion list), wall clock and process CPU time.
    latency: LatencyStats
    latency_cpu: LatencyStats
    # Latency of the keystrokes that start a word (model step + distribution + ranking).
    word_start_latency: LatencyStats
    word_start_latency_cpu: LatencyStats
    # Size of the prediction vocabulary.
    vocabulary: int = 0
    # Wall time of the whole evaluation, seconds.
    seconds: float = 0.0
    # Whether a space after each sentence's last word was counted (KeyboardOptions.final_space).
    final_space: bool = False
    # The text normaliser of the test text (KeyboardOptions.normalize).
    normalize: str = "none"

    def ks(self, k: int) -> float:
        """Keystroke savings with ``k`` suggestions: 1 - used / baseline."""
        return 1.0 - self.keystrokes[k] / self.baseline if self.baseline else 0.0

    def accuracy(self, k: int) -> float:
        return self.hits[k] / self.words if self.words else 0.0

    @property
    def mrr(self) -> float:
        return self.reciprocal_rank / self.words if self.words else 0.0

    @property
    def oov_rate(self) -> float:
        return self.oov / self.words if self.words else 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "system": self.system,
            "sentences": self.sentences,
            "words": self.words,
            "oov": self.oov,
            "vocabulary": self.vocabulary,
            "baseline": self.baseline,
            "final_space": self.final_space,
            "normalize": self.normalize,
            "keystrokes": {str(k): v for k, v in self.keystrokes.items()},
            "ks": {str(k): self.ks(k) for k in self.keystrokes},
            "accuracy": {str(k): self.accuracy(k) for k in self.hits},
            "mrr": self.mrr,
            "latency_ms": _latency_json(self.latency),
            "word_start_latency_ms": _latency_json(self.word_start_latency),
            "latency_cpu_ms": _latency_json(self.latency_cpu),
            "word_start_latency_cpu_ms": _latency_json(self.word_start_latency_cpu),
            "seconds": self.seconds,
        }

    def summary(self) -> str:
        """A few lines for the terminal."""
        ks = ", ".join(f"k={k} {100 * self.ks(k):.2f}%" for k in self.keystrokes)
        acc = ", ".join(f"top-{k} {100 * self.accuracy(k):.2f}%" for k in self.hits)
        return "\n".join(
            [
                f"{self.system}: {self.sentences} sentences, {self.words} words, "
                f"{100 * self.oov_rate:.2f}% outside the {self.vocabulary}-word vocabulary"
                + ("" if self.normalize == "none" else f" (normalize: {self.normalize})"),
                f"keystroke savings: {ks} (baseline {self.baseline} keystrokes, "
                f"{'a' if self.final_space else 'no'} space after a sentence's last word)",
                f"next-word accuracy: {acc}; MRR {self.mrr:.4f}",
                f"latency per keystroke: wall {self.latency.describe()}",
                f"  CPU time {self.latency_cpu.describe()}",
                f"latency at word starts: wall {self.word_start_latency.describe()}",
                f"  CPU time {self.word_start_latency_cpu.describe()}",
            ]
        )


def _latency_json(stats: LatencyStats) -> dict[str, float]:
    return {
        "count": stats.count,
        "mean": stats.mean_ms,
        "p50": stats.p50_ms,
        "p95": stats.p95_ms,
        "max": stats.max_ms,
    }


class LatencyLog:
    """Collects the wall and CPU seconds of each suggestion list, word starts apart."""

    def __init__(self) -> None:
        self.wall: list[float] = []
        self.cpu: list[float] = []
        self.start_wall: list[float] = []
        self.start_cpu: list[float] = []

    def add(self, wall: float, cpu: float, word_start: bool) -> None:
        self.wall.append(wall)
        self.cpu.append(cpu)
        if word_start:
            self.start_wall.append(wall)
            self.start_cpu.append(cpu)


@dataclass(frozen=True)
class Evaluation:
    """Result of :func:`evaluate`: the totals and one record per sentence."""

    report: KeyboardReport
    sentences: tuple[SentenceResult, ...] = field(repr=False)


def simulate_sentence(
    predictor: Predictor,
    sent_id: str,
    words: Sequence[str],
    context: Context | None = None,
    options: KeyboardOptions = KeyboardOptions(),
    latencies: LatencyLog | None = None,
) -> SentenceResult:
    """Type ``words`` with prediction (see the module docstring), logging the time of every
    suggestion list in ``latencies``."""
    shown = options.shown
    by_word: dict[int, list[int]] = {k: [] for k in options.ks}
    word_baseline: list[int] = []
    hits = dict.fromkeys(options.accuracy_ks, 0)
    rr = 0.0
    oov = 0
    session = None
    for i, word in enumerate(words):
        target = predictor.word_id(word)
        target_pos = None if target is None else int(predictor.index.position[target])
        oov += target is None
        ranks: list[int | None] = []
        for j in range(len(word)):
            if j > predictor.longest and len(predictor.normalise(word[:j])) > predictor.longest:
                break  # no word of the vocabulary has this prefix: nothing to suggest from here
            t0, c0 = time.perf_counter(), time.process_time()
            if session is None:
                session = predictor.session(context)
            elif j == 0:
                session.commit(words[i - 1])
            top = session.top_positions(word[:j], shown)
            if latencies is not None:
                latencies.add(time.perf_counter() - t0, time.process_time() - c0, j == 0)
            found = np.flatnonzero(top == target_pos) if target_pos is not None else ()
            rank = int(found[0]) + 1 if len(found) else None
            ranks.append(rank)
            if j == 0:
                for k in hits:
                    hits[k] += rank is not None and rank <= k
                if target is not None:
                    full = rank if rank is not None else session.rank(word)
                    rr += 1.0 / full if full else 0.0
            if rank is not None and rank == 1:
                break  # first from here on: every k is settled
            if target is None and latencies is None:
                break  # never suggested, and no latencies wanted
        space = options.final_space or i < len(words) - 1
        word_baseline.append(len(word) + int(space))
        for k, used in by_word.items():
            used.append(word_keystrokes(len(word), ranks, k, space))
    return SentenceResult(
        id=sent_id,
        words=len(words),
        baseline=sentence_baseline(words, options.final_space),
        keystrokes={k: sum(used) for k, used in by_word.items()},
        hits=hits,
        reciprocal_rank=rr,
        oov=oov,
        normalize=options.normalize,
        final_space=options.final_space,
        word_keystrokes={k: tuple(used) for k, used in by_word.items()},
        word_baseline=tuple(word_baseline),
    )


def evaluate(
    predictor: Predictor,
    sentences: Sequence[tuple[str, Sequence[str]]],
    contexts: Mapping[str, Context | None] | None = None,
    options: KeyboardOptions = KeyboardOptions(),
    progress: Callable[[int], None] | None = None,
) -> Evaluation:
    """Simulate typing every sentence ``(id, words)``; ``contexts`` maps ids to records."""
    t_start = time.perf_counter()
    latencies = LatencyLog()
    results = []
    for sent_id, words in sentences:
        ctx = None if contexts is None else contexts.get(sent_id)
        results.append(simulate_sentence(predictor, sent_id, words, ctx, options, latencies))
        if progress is not None:
            progress(1)
    report = summarise(
        predictor.name,
        results,
        options,
        latencies,
        vocabulary=len(predictor.words),
        seconds=time.perf_counter() - t_start,
    )
    return Evaluation(report, tuple(results))


def summarise(
    system: str,
    results: Sequence[SentenceResult],
    options: KeyboardOptions,
    latencies: LatencyLog | None = None,
    vocabulary: int = 0,
    seconds: float = 0.0,
) -> KeyboardReport:
    """Totals over per-sentence results."""
    log = latencies or LatencyLog()
    return KeyboardReport(
        system=system,
        sentences=len(results),
        words=sum(r.words for r in results),
        oov=sum(r.oov for r in results),
        baseline=sum(r.baseline for r in results),
        keystrokes={k: sum(r.keystrokes[k] for r in results) for k in options.ks},
        hits={k: sum(r.hits[k] for r in results) for k in options.accuracy_ks},
        reciprocal_rank=float(sum(r.reciprocal_rank for r in results)),
        latency=LatencyStats.from_seconds(log.wall),
        latency_cpu=LatencyStats.from_seconds(log.cpu),
        word_start_latency=LatencyStats.from_seconds(log.start_wall),
        word_start_latency_cpu=LatencyStats.from_seconds(log.start_cpu),
        vocabulary=vocabulary,
        seconds=seconds,
        final_space=options.final_space,
        normalize=options.normalize,
    )


# -- files ----------------------------------------------------------------------------------------


def read_sentences(path: str | Path, fmt: str = "auto") -> list[tuple[str, tuple[str, ...]]]:
    """Test sentences as ``(id, words)``.

    ``tsv``: ``id<TAB>sentence`` (the Enron Mobile files); ``kaldi``: ``id words...``;
    ``plain``: one sentence per line, its line number as id; ``auto``: ``tsv`` when the first
    non-blank line has a tab, else ``plain``. Blank lines and sentences without words are
    skipped; a duplicate or empty id is an :class:`InputError`.
    """
    if fmt not in TEXT_FORMATS:
        raise ValueError(f"text format must be one of {TEXT_FORMATS}, got {fmt!r}")
    out: list[tuple[str, tuple[str, ...]]] = []
    seen: dict[str, int] = {}
    skipped = 0
    for lineno, line in read_lines(path):
        if not line.strip():
            continue
        if fmt == "auto":
            fmt = "tsv" if "\t" in line else "plain"
        if fmt == "plain":
            sent_id, text = str(lineno), line
        elif fmt == "tsv":
            cols = line.split("\t")
            if len(cols) != 2:
                raise InputError(
                    f"expected 'id<TAB>sentence', got {len(cols)} tab-separated columns",
                    path,
                    lineno,
                )
            sent_id, text = cols[0].strip(), cols[1]
        else:
            parts = line.split(None, 1)
            sent_id, text = parts[0], parts[1] if len(parts) > 1 else ""
        if not sent_id:
            raise InputError("empty sentence id", path, lineno)
        if sent_id in seen:
            raise InputError(
                f"duplicate sentence id {sent_id!r} (first on line {seen[sent_id]})", path, lineno
            )
        seen[sent_id] = lineno
        words = tuple(text.split())
        if not words:
            skipped += 1
            continue
        out.append((sent_id, words))
    if skipped:
        logger.warning("%s: %d sentence(s) without words skipped", path, skipped)
    if not out:
        raise InputError("no sentences", path)
    return out


def write_sentence_results(path: str | Path, results: Iterable[SentenceResult]) -> None:
    """One JSON object per sentence (see :meth:`SentenceResult.to_json`)."""
    with atomic_write(path) as f:
        for r in results:
            f.write(json.dumps(r.to_json()) + "\n")


def read_sentence_results(path: str | Path) -> list[SentenceResult]:
    """Per-sentence results written by :func:`write_sentence_results`."""
    out = []
    first: dict[str, int] = {}
    for lineno, line in read_lines(path):
        if not line.strip():
            continue
        obj = parse_json(line, path, lineno)
        try:
            result = SentenceResult.from_json(obj)
        except ValueError as err:
            raise InputError(f"not a per-sentence keyboard result: {err}", path, lineno) from None
        if result.id in first:
            raise InputError(
                f"sentence id {result.id!r} again (first on line {first[result.id]}): expected "
                "one result per sentence",
                path,
                lineno,
            )
        first[result.id] = lineno
        out.append(result)
    if not out:
        raise InputError("no per-sentence results", path)
    return out


# -- comparing two systems ------------------------------------------------------------------------


@dataclass(frozen=True)
class KeystrokeComparison:
    """Paired tests of system B against A on keystrokes used per sentence (``d = A - B``:
    positive statistics favour B, which then needed fewer keystrokes)."""

    name_a: str
    name_b: str
    # Number of suggestions shown.
    k: int
    # Sentences compared.
    n: int
    ks_a: float
    ks_b: float
    # Sentences where B needed fewer / more keystrokes than A.
    b_better: int
    b_worse: int
    matched_pairs: TestResult
    sign: TestResult
    wilcoxon: TestResult
    # Bootstrap of (used_B - used_A) / baseline, i.e. KS_A - KS_B.
    bootstrap: BootstrapResult
    alpha: float = 0.05

    @property
    def difference(self) -> float:
        """``KS_B - KS_A`` (positive when B saves more)."""
        return self.ks_b - self.ks_a

    @property
    def verdict(self) -> str:
        mp = self.matched_pairs
        if not mp.significant(self.alpha) or mp.statistic == 0:
            return "inconclusive"
        return "better" if mp.statistic > 0 else "worse"

    def summary(self) -> str:
        a, b, bs = self.name_a, self.name_b, self.bootstrap
        return "\n".join(
            [
                f"KS at k={self.k}: {a} {100 * self.ks_a:.2f}%, {b} {100 * self.ks_b:.2f}%, "
                f"difference {b} - {a} {100 * self.difference:+.2f} points over {self.n} "
                f"sentences ({b} better on {self.b_better}, worse on {self.b_worse})",
                f"matched pairs: z = {self.matched_pairs.statistic:.3f}, "
                f"p = {self.matched_pairs.p_value:.4g}",
                f"sign test: {b} better on {self.sign.statistic:g} of {self.sign.n}, "
                f"p = {self.sign.p_value:.4g}",
                f"wilcoxon ({self.wilcoxon.method}): W+ = {self.wilcoxon.statistic:g}, "
                f"p = {self.wilcoxon.p_value:.4g}",
                f"bootstrap ({bs.n_resamples} resamples, seed {bs.seed}): "
                f"{100 * bs.confidence:g}% CI of KS {b} - {a} "
                f"[{-100 * bs.ci_high:+.2f}, {-100 * bs.ci_low:+.2f}] points, "
                f"P({b} better) = {bs.prob_improvement:.3f}",
                f"verdict (matched pairs, alpha = {self.alpha:g}): {b} is {self.verdict}"
                + ("" if self.verdict == "inconclusive" else f" than {a}"),
            ]
        )


def compare_systems(
    results_a: Sequence[SentenceResult],
    results_b: Sequence[SentenceResult],
    k: int,
    names: tuple[str, str] = ("A", "B"),
    n_resamples: int = 1000,
    seed: int = 0,
    alpha: float = 0.05,
) -> KeystrokeComparison:
    """Compare keystrokes used per sentence with ``k`` suggestions, matched by sentence id.

    The ids must match, and each sentence must have the same baseline in both (else they were
    typed from different texts): :class:`InputError` otherwise.
    """
    pairs = _paired(results_a, results_b, k)
    used_a = np.array([ra.keystrokes[k] for ra, _ in pairs], dtype=np.float64)
    used_b = np.array([rb.keystrokes[k] for _, rb in pairs], dtype=np.float64)
    base = np.array([ra.baseline for ra, _ in pairs], dtype=np.float64)
    d = used_a - used_b
    return KeystrokeComparison(
        name_a=names[0],
        name_b=names[1],
        k=k,
        n=len(pairs),
        ks_a=1.0 - float(used_a.sum() / base.sum()),
        ks_b=1.0 - float(used_b.sum() / base.sum()),
        b_better=int((d > 0).sum()),
        b_worse=int((d < 0).sum()),
        matched_pairs=matched_pairs(used_a, used_b),
        sign=sign_test(used_a, used_b),
        wilcoxon=wilcoxon(used_a, used_b),
        bootstrap=bootstrap_wer_difference(used_a, used_b, base, n_resamples, seed),
        alpha=alpha,
    )


def _paired(
    results_a: Sequence[SentenceResult], results_b: Sequence[SentenceResult], k: int
) -> list[tuple[SentenceResult, SentenceResult]]:
    """The two systems' results of each sentence, in A's order; InputError unless both typed
    the same sentences under the same conventions, with counts for ``k``."""
    by_id = {r.id: r for r in results_b}
    check_same_ids({r.id for r in results_a}, set(by_id), "system B sentence")
    pairs = [(r, by_id[r.id]) for r in results_a]
    if not pairs:
        raise InputError("no sentences to compare")
    for ra, rb in pairs:
        if ra.normalize != rb.normalize:
            raise InputError(
                f"sentence {ra.id!r} was typed from text normalised with {ra.normalize!r} in A "
                f"but {rb.normalize!r} in B: expected both runs with the same --normalize"
            )
        if None not in (ra.final_space, rb.final_space) and ra.final_space != rb.final_space:
            with_a = "with" if ra.final_space else "without"
            with_b = "with" if rb.final_space else "without"
            raise InputError(
                f"sentence {ra.id!r} was typed {with_a} --final-space in A but {with_b} it in B: "
                "expected both runs with the same --final-space setting"
            )
        if ra.baseline != rb.baseline:
            raise InputError(
                f"sentence {ra.id!r} has baseline {ra.baseline} in A but {rb.baseline} in B; "
                "were both typed from the same text, with the same --final-space setting?"
            )
        if k not in ra.keystrokes or k not in rb.keystrokes:
            raise InputError(f"sentence {ra.id!r} has no keystroke count for k={k}")
    return pairs


# First word positions (1-based) of the bands of keystrokes_by_position: 1, 2, 3, 4-5, 6-10, 11+.
POSITION_BANDS = (1, 2, 3, 4, 6, 11)


@dataclass(frozen=True)
class PositionGain:
    """Keystrokes of two systems on the words at positions ``first .. last`` of their
    sentences (1-based; ``last`` None: to the end)."""

    first: int
    last: int | None
    # Words at these positions, and their keystrokes without prediction.
    words: int
    baseline: int
    # Keystrokes used on them by A and by B.
    used_a: int
    used_b: int
    # Baseline keystrokes of every sentence compared (all positions).
    total_baseline: int

    @property
    def label(self) -> str:
        if self.last is None:
            return f"{self.first}+"
        return str(self.first) if self.last == self.first else f"{self.first}-{self.last}"

    @property
    def ks_a(self) -> float:
        """KS of A on these words."""
        return 1.0 - self.used_a / self.baseline

    @property
    def ks_b(self) -> float:
        return 1.0 - self.used_b / self.baseline

    @property
    def contribution(self) -> float:
        """These words' share of ``KS_B - KS_A`` over the whole set (the bands' shares sum to
        it)."""
        return (self.used_a - self.used_b) / self.total_baseline


def _per_word(
    r: SentenceResult, system: str
) -> tuple[tuple[int, ...], Mapping[int, tuple[int, ...]]]:
    """A result's per-word baseline and keystrokes; InputError for one typed before they
    were recorded."""
    if r.word_keystrokes is None or r.word_baseline is None:
        raise InputError(
            f"sentence {r.id!r} of {system} has no per-word keystrokes: expected results typed "
            "word by word (written by a keyboard-eval --per-sentence that records them: run it "
            "again)"
        )
    return r.word_baseline, r.word_keystrokes


def keystrokes_by_position(
    results_a: Sequence[SentenceResult],
    results_b: Sequence[SentenceResult],
    k: int,
    starts: Sequence[int] = POSITION_BANDS,
) -> tuple[PositionGain, ...]:
    """Where in their sentences B saves keystrokes against A with ``k`` suggestions: the
    words in bands of positions (``starts``: each band's first position, from 1 up), matched
    by sentence id as :func:`compare_systems` matches them. Needs the per-word counts
    (``word_keystrokes``, recorded by :func:`simulate_sentence`): InputError for results
    without them. Bands no sentence reaches are left out."""
    starts = tuple(starts)
    if not starts or starts[0] != 1 or any(b <= a for a, b in itertools.pairwise(starts)):
        raise ValueError(f"starts: expected increasing positions from 1, got {starts}")
    n = len(starts)
    words, base, used_a, used_b = (np.zeros(n, dtype=np.int64) for _ in range(4))
    for ra, rb in _paired(results_a, results_b, k):
        base_a, by_word_a = _per_word(ra, "A")
        _, by_word_b = _per_word(rb, "B")
        band = np.searchsorted(starts, np.arange(1, ra.words + 1), side="right") - 1
        np.add.at(words, band, 1)
        np.add.at(base, band, base_a)
        np.add.at(used_a, band, by_word_a[k])
        np.add.at(used_b, band, by_word_b[k])
    total = int(base.sum())
    return tuple(
        PositionGain(
            first=starts[i],
            last=starts[i + 1] - 1 if i + 1 < n else None,
            words=int(words[i]),
            baseline=int(base[i]),
            used_a=int(used_a[i]),
            used_b=int(used_b[i]),
            total_baseline=total,
        )
        for i in range(n)
        if words[i]
    )
