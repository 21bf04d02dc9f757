"""Context files from the recording itself: the system's own text of the previous utterances.

For each utterance, the 1-best of the ``previous`` utterances before it in the same group (a
LibriSpeech chapter, a speaker, a recording), oldest first, one line each (joined by newlines:
models that embed the text read its words, a history model reads each line as an utterance of
its own), in one text field, plus the group's metadata. The text is the *system's* output,
never a reference: the first pass's 1-best (each list's first hypothesis, as the decoder ranked
it), or the rescored 1-best of an earlier pass (``rescorer rescore``'s ``1best.txt``) for a
second pass. An online decoder has exactly this when it reaches the utterance.

Groups and order come from the utterance ids: ``speaker-chapter-index`` (LibriSpeech, and any id
whose last ``-`` or ``_`` part is its position) gives the recording ``speaker-chapter``, the
speaker ``speaker`` and the position ``index`` (numbers compare as numbers). The output is the
toolkit's context file (:mod:`rescorer.contexts`, JSONL), read by ``--context``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from rescorer.contexts import FIELDS_KEY, ID_KEY, Contexts
from rescorer.core.output import atomic_write

GROUP_BY = ("recording", "speaker")  # "chapter" is accepted as LibriSpeech's name of a recording
PREVIOUS_FIELD = "previous"  # the text field's default name
CACHE_FIELD = "cache"  # the second, longer text field's default name (a cache's span)
_SEPARATOR = re.compile(r"[-_]")


@dataclass(frozen=True)
class ContextBuildOptions:
    """What :func:`build_contexts` puts in each utterance's record."""

    # How many earlier utterances of the group to include (the most recent ones).
    previous: int = 3
    # "recording" (the id minus its last part; LibriSpeech's chapter) or "speaker" (its first part).
    group_by: str = "recording"
    # Name of the text field; the group fields are `recording` and `speaker`.
    field: str = PREVIOUS_FIELD
    # Also write the `recording` and `speaker` fields read from the ids.
    metadata: bool = True
    # A second text field of the same form over the `cache` utterances before (e.g. the
    # chapter so far for a `cache:` model, beside a few for a context LM); 0: none.
    cache: int = 0
    # Name of that field.
    cache_field: str = CACHE_FIELD

    def __post_init__(self) -> None:
        group_by = "recording" if self.group_by == "chapter" else self.group_by
        object.__setattr__(self, "group_by", group_by)
        k = self.previous
        if not isinstance(k, int) or isinstance(k, bool) or k < 1:
            raise ValueError(f"previous must be an integer >= 1, got {self.previous!r}")
        if self.group_by not in GROUP_BY:
            raise ValueError(
                f"group_by must be one of {(*GROUP_BY, 'chapter')}, got {self.group_by!r}"
            )
        if not self.field or self.field in ("recording", "speaker"):
            raise ValueError(
                f"field must be a name other than recording/speaker, got {self.field!r}"
            )
        c = self.cache
        if not isinstance(c, int) or isinstance(c, bool) or c < 0:
            raise ValueError(f"cache must be an integer >= 0, got {self.cache!r}")
        if c and self.cache_field in ("", self.field, "recording", "speaker"):
            raise ValueError(
                f"cache_field must be a name other than {self.field}/recording/speaker, got "
                f"{self.cache_field!r}"
            )


@dataclass(frozen=True)
class UttPlace:
    """Where an utterance sits: its speaker, recording and position there."""

    speaker: str
    recording: str
    position: tuple[int, str]  # (number, "") for numeric positions, else (-1, text): sortable


def utt_place(utt_id: str) -> UttPlace:
    """``116-288045-0003`` -> speaker 116, recording 116-288045, position 3."""
    parts = _SEPARATOR.split(utt_id)
    if len(parts) < 2 or not all(parts):
        raise ValueError(
            f"utterance id {utt_id!r}: expected speaker-recording-position (e.g. "
            "116-288045-0003, parts separated by - or _) to find its group and order"
        )
    last = parts[-1]
    position = (int(last), "") if last.isdigit() else (-1, last)
    return UttPlace(parts[0], utt_id[: len(utt_id) - len(last) - 1], position)


def build_contexts(
    texts: Mapping[str, Sequence[str]], options: ContextBuildOptions = ContextBuildOptions()
) -> Contexts:
    """``{utt: words}`` (the system's 1-best) -> ``{utt: record}`` with the previous text.

    The first utterance of a group has no previous text (the field is left out: missing).
    Utterances whose 1-best is empty still count as a previous utterance (they add no words).
    """
    places = {u: utt_place(u) for u in texts}
    groups: dict[str, list[str]] = {}
    for u, place in places.items():
        key = place.recording if options.group_by == "recording" else place.speaker
        groups.setdefault(key, []).append(u)
    contexts: Contexts = {}
    for members in groups.values():
        members.sort(key=lambda u: (places[u].recording, places[u].position))
        for i, u in enumerate(members):
            record: dict[str, str] = {}
            if options.metadata:
                record["speaker"] = places[u].speaker
                record["recording"] = places[u].recording
            for field, k in (
                (options.field, options.previous),
                (options.cache_field, options.cache),
            ):
                lines = [" ".join(texts[e]) for e in members[max(0, i - k) : i] if texts[e]]
                if k and lines:
                    record[field] = "\n".join(lines)
            contexts[u] = record
    return {u: contexts[u] for u in texts}  # the input's order


def write_contexts(path: str | Path, contexts: Contexts) -> None:
    """The canonical JSONL form, written to a temporary file and renamed into place."""
    with atomic_write(path) as f:
        for utt, record in contexts.items():
            f.write(json.dumps({ID_KEY: utt, FIELDS_KEY: record}, ensure_ascii=False) + "\n")
