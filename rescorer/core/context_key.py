"""Context records reduced to a model's context variables, the same way for every model adapter.

A context record is a mapping of field -> value (``{"genre": "news", "speaker": "s1"}``) or None.
:class:`ContextKeys` turns one into a :data:`ContextKey` (sorted ``(field, value)`` pairs) by the
rules the ``torch:`` and ``onnx:`` adapters share:

* a field the model does not declare is ignored (logged once, at INFO: a context file may well
  hold fields for other models);
* an empty value (None, blank string) is missing;
* a categorical value the model never saw in training is treated as missing (logged once, at
  WARNING), as training does;
* a numerical value becomes a tuple of ``dim`` floats (a string is split on commas/spaces);
* a text value (e.g. the previous utterances' words) is kept as its string, so each distinct
  text is one context (the model embeds it);
* missing fields are simply absent from the key, and the model uses its expected context.

Variables are described by anything with ``name``, ``kind`` ("categorical" | "numerical" | "text"),
``values`` and ``dim`` attributes: :class:`rescorer.lm_models.lstm.context.ContextVariable`, or the
torch-free :class:`ContextField` that ONNX exports describe in their metadata.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

FIELD_KINDS = ("categorical", "numerical", "text")
ContextKey = tuple[tuple[str, Any], ...]
"""A context record normalised to the model's fields: sorted ``(field, value)`` pairs."""


class FieldLike(Protocol):
    name: str
    kind: str
    values: tuple[str, ...]
    dim: int


@dataclass(frozen=True)
class ContextField:
    """A context variable as far as normalising records goes (no embeddings, no torch)."""

    # Field name in context records.
    name: str
    # "categorical" | "numerical" | "text".
    kind: str
    # Categorical: the values seen in training, in id order.
    values: tuple[str, ...] = ()
    # Numerical: how many numbers the value holds.
    dim: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "values", tuple(self.values))
        if self.kind not in FIELD_KINDS:
            raise ValueError(
                f"context field {self.name!r}: kind must be one of {FIELD_KINDS}, got {self.kind!r}"
            )
        if self.kind == "numerical" and (not isinstance(self.dim, int) or self.dim < 1):
            raise ValueError(f"context field {self.name!r}: dim must be >= 1, got {self.dim!r}")

    def to_json(self) -> dict[str, Any]:
        if self.kind == "categorical":
            return {"name": self.name, "kind": self.kind, "values": list(self.values)}
        if self.kind == "text":
            return {"name": self.name, "kind": self.kind}
        return {"name": self.name, "kind": self.kind, "dim": self.dim}

    @classmethod
    def from_json(cls, data: Any) -> ContextField:
        if not isinstance(data, Mapping) or "name" not in data or "kind" not in data:
            raise ValueError(f"context field: expected an object with name and kind, got {data!r}")
        return cls(
            name=str(data["name"]),
            kind=str(data["kind"]),
            values=tuple(str(v) for v in data.get("values", ())),
            dim=int(data.get("dim", 0)),
        )


def numbers(name: str, dim: int, value: Any) -> tuple[float, ...]:
    """A numerical context value as a tuple of ``dim`` floats (strings split on commas/spaces)."""
    if isinstance(value, str):
        items: list[Any] = value.replace(",", " ").split()
    elif isinstance(value, (list, tuple)):
        items = list(value)
    else:
        items = [value]
    try:
        out = tuple(float(x) for x in items)
    except (TypeError, ValueError):
        raise ValueError(
            f"context variable {name!r}: expected {dim} number(s), got {value!r}"
        ) from None
    if len(out) != dim:
        raise ValueError(f"context variable {name!r}: expected {dim} number(s), got {value!r}")
    return out


def without_field(key: ContextKey, field: str) -> ContextKey:
    """``key`` without ``field`` ("": unchanged): e.g. a history model's history, which the
    weights do not depend on."""
    return tuple(item for item in key if item[0] != field) if field else key


def history_lines(key: ContextKey, field: str) -> list[list[str]]:
    """The words of each non-empty line of ``key``'s text ``field`` ([] without one): the
    earlier utterances a history model reads, one per line as ``rescorer context build`` writes
    them, each to be run as ``<s> w1 .. wn`` before the sentence."""
    text = dict(key).get(field) if field else None
    if not text:
        return []
    return [words for words in (line.split() for line in text.splitlines()) if words]


class ContextKeys:
    """Normalises context records for one model (see the module docstring for the rules).

    ``owner`` names the model in log messages; ``log`` is the logger they go to (the adapter's
    own, so that its log configuration applies).
    """

    def __init__(
        self, variables: Sequence[FieldLike], owner: str, log: logging.Logger | None = None
    ) -> None:
        self.variables: dict[str, FieldLike] = {v.name: v for v in variables}
        self.owner = owner
        self.log = log or logging.getLogger(__name__)
        self._warned: set[tuple[str, str]] = set()

    def log_once(self, level: int, key: tuple[str, str], message: str, *args: object) -> None:
        """Log ``message`` the first time ``key`` is seen."""
        if key not in self._warned:
            self._warned.add(key)
            self.log.log(level, message, *args)

    def key(self, record: Mapping[str, Any] | None) -> ContextKey:
        """``record`` reduced to the model's fields, unknown values dropped (so: missing)."""
        if record is None or not self.variables:
            return ()
        if not isinstance(record, Mapping):
            raise ValueError(
                f"context record: expected a mapping of field -> value or None, "
                f"got {type(record).__name__}"
            )
        items: list[tuple[str, Any]] = []
        for field, value in record.items():
            var = self.variables.get(field)
            if var is None:
                self.log_once(
                    logging.INFO,
                    ("field", str(field)),
                    "%s: context field %r is not one of the model's (%s); ignored",
                    self.owner,
                    field,
                    ", ".join(sorted(self.variables)),
                )
                continue
            if value is None or (isinstance(value, str) and not value.strip()):
                continue
            if var.kind == "categorical":
                if isinstance(value, int) and not isinstance(value, bool):
                    value = str(value)
                if value not in var.values:
                    self.log_once(
                        logging.WARNING,
                        (field, str(value)),
                        "%s: context value %s=%r was not seen in training; "
                        "using the expected context for %s",
                        self.owner,
                        field,
                        value,
                        field,
                    )
                    continue
                items.append((field, value))
            elif var.kind == "text":
                if not isinstance(value, str):
                    raise ValueError(
                        f"context variable {var.name!r}: expected a string, got {value!r:.40}"
                    )
                items.append((field, value))
            else:
                items.append((field, numbers(var.name, var.dim, value)))
        return tuple(sorted(items))

    def keys(self, n: int, contexts: Sequence[Mapping[str, Any] | None] | None) -> list[ContextKey]:
        """Keys of ``n`` sentences' contexts (None: every sentence has no context)."""
        if contexts is None:
            return [()] * n
        if len(contexts) != n:
            raise ValueError(f"got {len(contexts)} contexts for {n} sentences")
        # The hypotheses of one utterance share one record object: normalise each object once.
        seen: dict[int, ContextKey] = {}
        out = []
        for c in contexts:
            key = seen.get(id(c))
            if key is None:
                key = seen[id(c)] = self.key(c)
            out.append(key)
        return out
