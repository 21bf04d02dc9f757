"""N-best data model: utterance id -> ordered hypotheses with named scores.

Scores are floats keyed by name (``decoder``, ``ctc``, ``lm``, ``am``, ``lm_srilm`` ...). Every
score that is a log-probability is stored as a *natural-log* value where higher is better; readers
of formats that store log10, bytelog or costs convert on the way in (see ``rescorer.formats``).
Readers and writers for the on-disk formats live in ``rescorer.formats``; this module only holds
the data model.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NoReturn

from rescorer.core.bulk import paused_gc


class Scores(dict[str, float]):
    """A hypothesis's scores: a dict that refuses changes (a new hypothesis takes new scores,
    :meth:`Hypothesis.with_scores`). Being a dict, it is written to JSON as it is and copied at
    C speed (``.copy()`` gives a plain, changeable dict)."""

    __slots__ = ()

    def _read_only(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise TypeError("hypothesis scores are read-only: use Hypothesis.with_scores")

    __setitem__ = __delitem__ = __ior__ = _read_only
    clear = pop = popitem = setdefault = update = _read_only

    def __reduce__(self) -> tuple[type, tuple[dict[str, float]]]:  # pickle, copy: no setitem
        return (Scores, (dict(self),))


def _freeze_scores(scores: Mapping[str, float]) -> Mapping[str, float]:
    return Scores({str(k): float(v) for k, v in scores.items()})


@dataclass(frozen=True)
class Hypothesis:
    """One recognition hypothesis."""

    # The words, in order; an empty tuple is a legal (empty) hypothesis.
    words: tuple[str, ...]
    # Named scores (natural-log where they are log-probabilities; higher is better).
    scores: Mapping[str, float] = field(default_factory=dict)
    # Optional subword tokens (e.g. BPE pieces) as the recogniser produced them.
    tokens: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "words", tuple(self.words))
        object.__setattr__(self, "scores", _freeze_scores(self.scores))
        if self.tokens is not None:
            object.__setattr__(self, "tokens", tuple(self.tokens))

    @property
    def text(self) -> str:
        return " ".join(self.words)

    @classmethod
    def _checked(
        cls, words: tuple[str, ...], scores: dict[str, float], tokens: tuple[str, ...] | None
    ) -> Hypothesis:
        """A hypothesis from values already of the right types (a tuple of words, a fresh dict
        of str -> float, a tuple or None): the readers' and the scorers' path, which builds
        millions of them, without the conversions of ``__init__``."""
        hyp = object.__new__(cls)
        fields = hyp.__dict__  # what the frozen dataclass's __init__ fills, filled directly
        fields["words"] = words
        fields["scores"] = Scores(scores)
        fields["tokens"] = tokens
        return hyp

    def with_scores(self, extra: Mapping[str, float]) -> Hypothesis:
        """A copy with ``extra`` scores added (or replaced)."""
        return Hypothesis(self.words, {**self.scores, **extra}, self.tokens)


@dataclass(frozen=True)
class NBestList:
    """The ordered hypotheses of one utterance (best first, as the recogniser ranked them)."""

    utt_id: str
    hyps: tuple[Hypothesis, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "hyps", tuple(self.hyps))

    def __len__(self) -> int:
        return len(self.hyps)

    def __iter__(self) -> Iterator[Hypothesis]:
        return iter(self.hyps)

    def __getitem__(self, i: int) -> Hypothesis:
        return self.hyps[i]

    def head(self, k: int) -> NBestList:
        """The list cut to its first ``k`` hypotheses (itself when it has no more)."""
        return self if len(self.hyps) <= k else NBestList(self.utt_id, self.hyps[:k])


class NBest(Mapping[str, NBestList]):
    """A set of N-best lists keyed by utterance id, in file order.

    ``references`` holds reference word sequences for formats that embed them (JSON, JSONL);
    it is ``None`` when the source had none.
    """

    def __init__(
        self,
        lists: Sequence[NBestList] | Mapping[str, NBestList],
        references: Mapping[str, tuple[str, ...]] | None = None,
    ):
        items = list(lists.values()) if isinstance(lists, Mapping) else list(lists)
        self._lists: dict[str, NBestList] = {}
        for nb in items:
            if nb.utt_id in self._lists:
                raise ValueError(f"duplicate utterance id {nb.utt_id!r} in N-best set")
            self._lists[nb.utt_id] = nb
        self.references: Mapping[str, tuple[str, ...]] | None = (
            None if references is None else {k: tuple(v) for k, v in references.items()}
        )
        self._score_names: tuple[str, ...] | None = None  # computed on first use

    def __getitem__(self, utt_id: str) -> NBestList:
        return self._lists[utt_id]

    def __iter__(self) -> Iterator[str]:
        return iter(self._lists)

    def __len__(self) -> int:
        return len(self._lists)

    def __repr__(self) -> str:
        return f"NBest({len(self)} utterances, {self.num_hyps()} hypotheses)"

    def num_hyps(self) -> int:
        return sum(len(nb) for nb in self._lists.values())

    def score_names(self) -> tuple[str, ...]:
        """Score names present on every hypothesis, in first-seen order."""
        if self._score_names is None:
            common: list[str] | None = None
            for nb in self._lists.values():
                for hyp in nb:
                    if common is None:
                        common = list(hyp.scores)
                    elif len(hyp.scores) != len(common) or not all(
                        map(hyp.scores.__contains__, common)
                    ):
                        common = [name for name in common if name in hyp.scores]
            self._score_names = tuple(common or ())
        return self._score_names

    def with_scores(self, name: str, values: Mapping[str, Sequence[float]]) -> NBest:
        """A copy with score ``name`` added to every hypothesis.

        ``values[utt_id][i]`` is the score of hypothesis ``i`` of ``utt_id``; every utterance and
        every hypothesis must get a value.
        """
        return self.with_features({name: values})

    def with_features(self, columns: Mapping[str, Mapping[str, Sequence[float]]]) -> NBest:
        """A copy with every score of ``columns`` (``{name: {utt_id: values}}``, as for
        :meth:`with_scores`) added to every hypothesis at once: one new hypothesis each,
        however many features a model brings."""
        with paused_gc():  # rescorer.core.bulk
            return self._with_features(columns)

    def _with_features(self, columns: Mapping[str, Mapping[str, Sequence[float]]]) -> NBest:
        names = list(columns)
        checked = Hypothesis._checked
        out = []
        for utt_id, nb in self._lists.items():
            cols = []
            for name in names:
                vals = columns[name][utt_id]
                if len(vals) != len(nb):
                    raise ValueError(
                        f"{utt_id}: got {len(vals)} values for score {name!r}, expected {len(nb)}"
                    )
                cols.append(vals)
            named = list(zip(names, cols, strict=True))
            hyps = []
            for i, hyp in enumerate(nb.hyps):
                scores = hyp.scores.copy()  # a plain dict
                for name, col in named:
                    scores[name] = float(col[i])
                hyps.append(checked(hyp.words, scores, hyp.tokens))
            out.append(NBestList(utt_id, tuple(hyps)))
        new = NBest(out, self.references)
        if self._score_names is not None:
            new._score_names = self._score_names + tuple(
                n for n in names if n not in self._score_names
            )
        return new

    def rename_scores(self, renames: Mapping[str, str]) -> NBest:
        """A copy with the scores named as keys of ``renames`` named as its values, all at once
        (``{"a": "b", "b": "a"}`` swaps two). ValueError, naming the score, for an old name that
        no hypothesis has and for a new name a hypothesis already has for another score."""
        if not renames:
            return self
        seen: set[str] = set()
        for nb in self._lists.values():
            for rank, hyp in enumerate(nb, start=1):
                seen.update(hyp.scores)
                for old, new in renames.items():
                    if new in hyp.scores and new not in renames and old in hyp.scores:
                        raise ValueError(
                            f"cannot rename score {old!r} to {new!r}: hypothesis {rank} of "
                            f"{nb.utt_id!r} already has a score {new!r} (rename that one too)"
                        )
        if self._lists:
            missing = [old for old in renames if old not in seen]
            if missing:
                raise ValueError(
                    f"cannot rename score {missing[0]!r}: the lists have no such score (they "
                    f"have: {', '.join(sorted(seen)) or 'none'})"
                )

        def renamed(hyp: Hypothesis) -> Hypothesis:
            scores = {renames.get(k, k): v for k, v in hyp.scores.items()}
            return Hypothesis(hyp.words, scores, hyp.tokens)

        lists = [NBestList(u, tuple(renamed(h) for h in nb)) for u, nb in self._lists.items()]
        return NBest(lists, self.references)

    def head(self, k: int) -> NBest:
        """Every list cut to its first ``k`` hypotheses (SRILM's ``-max-nbest``)."""
        if k < 1:
            raise ValueError(f"expected at least 1 hypothesis per list, got {k}")
        return NBest([nb.head(k) for nb in self._lists.values()], self.references)

    def subset(self, utt_ids: Sequence[str]) -> NBest:
        """The lists of ``utt_ids``, in that order."""
        refs = None
        if self.references is not None:
            refs = {u: self.references[u] for u in utt_ids if u in self.references}
        return NBest([self._lists[u] for u in utt_ids], refs)
