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
from types import MappingProxyType


def _freeze_scores(scores: Mapping[str, float]) -> Mapping[str, float]:
    return MappingProxyType({str(k): float(v) for k, v in scores.items()})


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
        common: list[str] | None = None
        for nb in self._lists.values():
            for hyp in nb:
                if common is None:
                    common = list(hyp.scores)
                else:
                    common = [name for name in common if name in hyp.scores]
        return tuple(common or ())

    def with_scores(self, name: str, values: Mapping[str, Sequence[float]]) -> NBest:
        """A copy with score ``name`` added to every hypothesis.

        ``values[utt_id][i]`` is the score of hypothesis ``i`` of ``utt_id``; every utterance and
        every hypothesis must get a value.
        """
        out = []
        for utt_id, nb in self._lists.items():
            vals = values[utt_id]
            if len(vals) != len(nb):
                raise ValueError(
                    f"{utt_id}: got {len(vals)} values for score {name!r}, expected {len(nb)}"
                )
            out.append(
                NBestList(
                    utt_id, tuple(h.with_scores({name: v}) for h, v in zip(nb, vals, strict=True))
                )
            )
        return NBest(out, self.references)

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
