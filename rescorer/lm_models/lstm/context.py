"""Context variables and the context embedding of Jaech & Ostendorf (2018), section 2.1.

A *context* is a record of named fields, e.g. ``{"genre": "news", "geo": (47.6, -122.3)}``. A
model declares its fields as :class:`ContextVariable` objects: categorical ones (a closed set of
value names), numerical ones (a fixed number of floats) and text ones (a string, e.g. the
previous sentences, turned into a fixed vector by a frozen string encoder). :class:`ContextEncoder`
turns a batch of such records into the context embedding ``c in R^k``:

    x = [emb_1(f_1), ..., emb_n(f_n)]      categorical values embedded, numerical used as given,
                                           text embedded by its frozen encoder
    c = ReLU(P x + p)                      one feed-forward layer with a ReLU (section 2.1;
                                           ``activation="none"``: c = P x + p, as the
                                           authors' code for a single variable)

Missing values (the paper's conclusion: "use the expected value for the missing variable(s)"):

* A missing *categorical* variable j gives the expected context embedding over that variable's
  training distribution, the other variables as given::

      c = sum_v p_j(v) * ReLU(P [.., emb_j(v), ..] + p),     p_j(v) = counts_j[v] / sum(counts_j)

  i.e. the expectation is taken of ``c`` itself (after the ReLU), by enumerating the values. When
  several categorical variables are missing in the same record they are treated as independent
  and the expectation runs over every combination of their values, with weight
  ``prod_j p_j(v_j)`` (values with a zero count are skipped).
* A missing *numerical* variable (a NaN component) is replaced by its training mean before the
  feed-forward layer (``c`` at the expected input; the training distribution of numbers is not
  stored, so the expectation of ``c`` cannot be enumerated). Each NaN component is replaced by the
  matching component of the mean.

* A missing *text* variable (no field, or an empty string) is a numerical one with every
  component missing: its training mean vector.

A text variable names its encoder by a spec of
:func:`rescorer.lm_models.text_encoders.make_embedder` (``hash:256``, ``minilm``, ...), kept in the
checkpoint's config.json as data with the vectors' width and training mean; the encoder is frozen
and not part of the model's weights. Vectors are cached per distinct string (:func:`text_vectors`),
so the hypotheses of an utterance, or the sentences sharing a previous text, embed it once.

The downstream adaptation (FactorCell ``A``, ConcatCell ``Vc``, softmax bias ``Qc``) is then
computed from that expected ``c``; see :mod:`rescorer.lm_models.lstm.model`.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn
from torch.nn import functional as F

from rescorer.core.json_input import json_fields
from rescorer.lm_models.text_encoders import VectorCache, make_embedder

logger = logging.getLogger(__name__)

KINDS = ("categorical", "numerical", "text")
MISSING_ID = -1  # value id of a missing categorical value in an encoded batch
# Distinct strings a text encoder's vector cache holds before it is emptied and starts again
# (training draws new noisy previous texts every epoch; scoring needs one per utterance).
TEXT_CACHE_STRINGS = 200_000
_NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_\-]*$")
# Elements of the (rows x combinations x k) tensor built at once when enumerating missing values.
_ENUM_CHUNK_ELEMENTS = 1 << 22

ContextBatch = dict[str, Tensor]


@dataclass(frozen=True)
class ContextVariable:
    """One named context field, as a checkpoint declares it.

    Build one with :meth:`categorical`, :meth:`numerical` or :meth:`text`, or directly with
    keyword arguments.
    """

    name: str  # field name in context records; letters, digits, "_" and "-"
    kind: str  # "categorical" | "numerical" | "text"
    values: tuple[str, ...] = ()  # categorical: the value set, in id order
    counts: tuple[int, ...] = ()  # categorical: training frequency of each value; () = uniform
    embed_dim: int = 0  # categorical: size of the value embedding
    dim: int = 0  # numerical: how many numbers (e.g. 2 for latitude/longitude); text: vector width
    mean: tuple[float, ...] = ()  # numerical, text: training mean of each number; () = zeros
    one_hot_bias: bool = False  # categorical: learn a direct softmax bias per value (sec. 2.3)
    # text: the frozen string encoder's spec (rescorer.lm_models.text_encoders.make_embedder), e.g.
    # "hash:256" or "minilm"; its vectors are `dim` wide.
    encoder: str = ""

    def __post_init__(self) -> None:
        def bad(what: str) -> ValueError:
            return ValueError(f"context variable {self.name!r}: {what}")

        if not isinstance(self.name, str) or not _NAME_RE.match(self.name):
            raise ValueError(
                f"context variable name must be letters, digits, '_' or '-' (got {self.name!r})"
            )
        if self.kind not in KINDS:
            raise bad(f"kind must be one of {KINDS}, got {self.kind!r}")
        # Normalise sequences (JSON gives lists) to tuples of the declared element types.
        object.__setattr__(self, "values", tuple(self.values))
        object.__setattr__(self, "counts", tuple(self.counts))
        object.__setattr__(self, "mean", tuple(float(x) for x in self.mean))
        if self.kind == "categorical":
            if not self.values:
                raise bad("a categorical variable needs at least one value")
            if not all(isinstance(v, str) and v for v in self.values):
                raise bad(f"values must be non-empty strings, got {self.values!r}")
            if len(set(self.values)) != len(self.values):
                dup = sorted({v for v in self.values if self.values.count(v) > 1})
                raise bad(f"values must be distinct, repeated: {dup}")
            if self.counts:
                if len(self.counts) != len(self.values):
                    raise bad(
                        f"expected one count per value ({len(self.values)}), got {len(self.counts)}"
                    )
                if not all(isinstance(c, int) and not isinstance(c, bool) for c in self.counts):
                    raise bad(f"counts must be integers, got {self.counts!r}")
                if any(c < 0 for c in self.counts) or sum(self.counts) <= 0:
                    raise bad("counts must be >= 0 with a positive total")
            if not isinstance(self.embed_dim, int) or self.embed_dim < 1:
                raise bad(f"embed_dim must be a positive integer, got {self.embed_dim!r}")
            if self.dim != 0 or self.mean:
                raise bad("dim and mean are for numerical and text variables only")
            if self.encoder:
                raise bad("encoder is for text variables only")
        else:
            if not isinstance(self.dim, int) or self.dim < 1:
                raise bad(f"dim must be a positive integer, got {self.dim!r}")
            if not self.mean:
                object.__setattr__(self, "mean", (0.0,) * self.dim)
            if len(self.mean) != self.dim:
                raise bad(f"expected {self.dim} mean values, got {len(self.mean)}")
            if not all(math.isfinite(x) for x in self.mean):
                raise bad(f"mean must be finite, got {self.mean!r}")
            if self.values or self.counts or self.embed_dim or self.one_hot_bias:
                raise bad("values, counts, embed_dim and one_hot_bias are for categorical only")
            if self.kind == "text" and (not isinstance(self.encoder, str) or not self.encoder):
                raise bad(
                    "a text variable needs its string encoder's spec, e.g. encoder='hash:256' "
                    "or 'minilm'"
                )
            if self.kind == "numerical" and self.encoder:
                raise bad("encoder is for text variables only")

    @classmethod
    def categorical(
        cls,
        name: str,
        values: Sequence[str],
        counts: Sequence[int] | None = None,
        *,
        embed_dim: int,
        one_hot_bias: bool = False,
    ) -> ContextVariable:
        return cls(
            name=name,
            kind="categorical",
            values=tuple(values),
            counts=tuple(counts or ()),
            embed_dim=embed_dim,
            one_hot_bias=one_hot_bias,
        )

    @classmethod
    def numerical(
        cls, name: str, dim: int = 1, mean: Sequence[float] | None = None
    ) -> ContextVariable:
        return cls(name=name, kind="numerical", dim=dim, mean=tuple(mean or ()))

    @classmethod
    def text(
        cls, name: str, encoder: str, dim: int, mean: Sequence[float] | None = None
    ) -> ContextVariable:
        """A string field embedded by the frozen encoder ``encoder`` into ``dim`` numbers."""
        return cls(name=name, kind="text", dim=dim, mean=tuple(mean or ()), encoder=encoder)

    @property
    def input_dim(self) -> int:
        """Width of this variable's block in the concatenated encoder input."""
        return self.embed_dim if self.kind == "categorical" else self.dim

    @property
    def probabilities(self) -> tuple[float, ...]:
        """Training distribution over values: counts normalised, or uniform without counts."""
        if self.kind != "categorical":
            raise ValueError(f"context variable {self.name!r} is {self.kind}: no distribution")
        if not self.counts:
            return (1.0 / len(self.values),) * len(self.values)
        total = sum(self.counts)
        return tuple(c / total for c in self.counts)

    def value_id(self, value: object) -> int:
        """Id of a categorical value; ValueError naming the variable and its values if unknown."""
        key = str(value) if isinstance(value, int) and not isinstance(value, bool) else value
        ids = _value_index(self.values)
        if not isinstance(key, str) or key not in ids:
            shown = ", ".join(repr(v) for v in self.values[:20])
            more = f", ... ({len(self.values)} in all)" if len(self.values) > 20 else ""
            raise ValueError(
                f"context variable {self.name!r}: unknown value {value!r}; "
                f"known values: {shown}{more}"
            )
        return ids[key]

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "kind": self.kind}
        if self.kind == "categorical":
            out.update(
                values=list(self.values),
                counts=list(self.counts),
                embed_dim=self.embed_dim,
                one_hot_bias=self.one_hot_bias,
            )
        else:
            out.update(dim=self.dim, mean=list(self.mean))
            if self.kind == "text":
                out.update(encoder=self.encoder)
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ContextVariable:
        return cls(**json_fields(cls, data, "context variable"))


@lru_cache(maxsize=1024)
def _value_index(values: tuple[str, ...]) -> dict[str, int]:
    """Value name -> id of a categorical value set (cached per value tuple)."""
    return {v: i for i, v in enumerate(values)}


_TEXT_CACHES: dict[tuple[str, str], VectorCache] = {}


def text_encoder(spec: str, device: str = "cpu") -> VectorCache:
    """The process's vector cache of the frozen string encoder ``spec`` on ``device`` (built on
    first use, :func:`rescorer.lm_models.text_encoders.make_embedder`)."""
    key = (spec, device)
    cache = _TEXT_CACHES.get(key)
    if cache is None:
        cache = _TEXT_CACHES[key] = VectorCache(make_embedder(spec, device))
    return cache


def clear_text_caches() -> None:
    """Forget every text encoder and cached vector of the process (benchmarks: a cold start)."""
    _TEXT_CACHES.clear()


def text_vectors(var: ContextVariable, texts: Sequence[str], device: str = "cpu") -> np.ndarray:
    """(len(texts), dim) float32: the text variable's frozen encoder applied to ``texts``.

    One encoder and vector cache per (spec, device) in the process, shared by every model that
    names the spec; a cache past :data:`TEXT_CACHE_STRINGS` strings is emptied and starts again.
    The encoder is built on first use; a width other than the variable's ``dim`` is a
    ValueError (a checkpoint trained with another encoder).
    """
    if var.kind != "text":
        raise ValueError(f"context variable {var.name!r} is {var.kind}, not text")
    cache = text_encoder(var.encoder, device)
    if cache.embedder.dim != var.dim:
        raise ValueError(
            f"context variable {var.name!r}: encoder {var.encoder!r} gives "
            f"{cache.embedder.dim}-dim vectors, the variable declares dim={var.dim}"
        )
    if len(cache) + len(texts) > TEXT_CACHE_STRINGS:
        cache.clear()
    return cache.vectors(texts)


def encode_records(
    variables: Sequence[ContextVariable],
    records: Sequence[Mapping[str, object] | None],
    *,
    ignore_unknown_fields: bool = False,
    text_device: str = "cpu",
) -> ContextBatch:
    """Turn context records into the tensor batch that :class:`ContextEncoder` reads.

    Returns ``{name: LongTensor (N,)}`` for categorical variables (``-1`` = missing) and
    ``{name: FloatTensor (N, dim)}`` for numerical and text ones (``NaN`` = missing). A record
    that is ``None``, a field that is absent, ``None`` or ``""`` (or, for text, only spaces) is
    missing. Categorical values are value names (ints are accepted as their decimal string);
    numerical values are a number or a sequence of ``dim`` numbers (strings are parsed); text
    values are strings, embedded by the variable's encoder (:func:`text_vectors`, on
    ``text_device``). An unknown value raises ValueError naming the variable and its known
    values; so does a field the model does not know, unless ``ignore_unknown_fields``.
    """
    known = {v.name for v in variables}
    n = len(records)
    batch: ContextBatch = {}
    texts: dict[str, tuple[list[int], list[str]]] = {}  # text variable -> (rows, strings)
    for var in variables:
        if var.kind == "categorical":
            batch[var.name] = torch.full((n,), MISSING_ID, dtype=torch.long)
        else:
            batch[var.name] = torch.full((n, var.dim), float("nan"), dtype=torch.float32)
        if var.kind == "text":
            texts[var.name] = ([], [])
    for row, record in enumerate(records):
        if record is None:
            continue
        if not isinstance(record, Mapping):
            raise ValueError(
                f"context record {row}: expected a mapping of field -> value or None, "
                f"got {type(record).__name__}"
            )
        if not ignore_unknown_fields:
            unknown = sorted(str(k) for k in record if k not in known)
            if unknown:
                raise ValueError(
                    f"context record {row}: unknown fields {unknown}; "
                    f"the model's context variables are {sorted(known)}"
                )
        for var in variables:
            value = record.get(var.name)
            if value is None or (isinstance(value, str) and value == ""):
                continue
            if var.kind == "categorical":
                batch[var.name][row] = var.value_id(value)
            elif var.kind == "text":
                if not isinstance(value, str):
                    raise ValueError(
                        f"context variable {var.name!r}: expected a string, got "
                        f"{type(value).__name__} {value!r:.40}"
                    )
                if value.strip():
                    texts[var.name][0].append(row)
                    texts[var.name][1].append(value)
            else:
                batch[var.name][row] = torch.tensor(_numbers(var, value), dtype=torch.float32)
    for var in variables:
        rows, strings = texts.get(var.name, ((), ()))
        if rows:
            vectors = torch.from_numpy(text_vectors(var, strings, text_device))
            batch[var.name][torch.tensor(rows, dtype=torch.long)] = vectors
    return batch


def _numbers(var: ContextVariable, value: object) -> list[float]:
    items = list(value) if isinstance(value, (list, tuple)) else [value]
    if len(items) != var.dim:
        raise ValueError(
            f"context variable {var.name!r}: expected {var.dim} number(s), got {value!r}"
        )
    out = []
    for item in items:
        if item is None or item == "":
            out.append(float("nan"))
            continue
        try:
            out.append(float(item))  # type: ignore[arg-type]
        except (TypeError, ValueError):
            raise ValueError(
                f"context variable {var.name!r}: expected a number, got {item!r}"
            ) from None
    return out


class ContextEncoder(nn.Module):
    """Context variables -> context embedding ``c in R^k`` (section 2.1), missing values handled.

    Parameters: one embedding table per categorical variable (``embeddings.<i>``, in the order the
    categorical variables are declared) and the feed-forward layer ``proj`` (k x sum of block
    widths).
    """

    def __init__(
        self, variables: Sequence[ContextVariable], context_dim: int, activation: str = "relu"
    ) -> None:
        super().__init__()
        if activation not in ("relu", "none"):
            raise ValueError(f"context activation must be 'relu' or 'none', got {activation!r}")
        self.activation = activation
        if not variables:
            raise ValueError("a context encoder needs at least one context variable")
        names = [v.name for v in variables]
        if len(set(names)) != len(names):
            raise ValueError(f"context variable names must be distinct, got {names}")
        if context_dim < 1:
            raise ValueError(f"context_dim must be positive, got {context_dim}")
        self.variables: tuple[ContextVariable, ...] = tuple(variables)
        self.context_dim = context_dim
        cats = [v for v in self.variables if v.kind == "categorical"]
        self.embeddings = nn.ModuleList(nn.Embedding(len(v.values), v.embed_dim) for v in cats)
        self._cat_index = {v.name: i for i, v in enumerate(cats)}
        self.input_dim = sum(v.input_dim for v in self.variables)
        self.proj = nn.Linear(self.input_dim, context_dim)
        # Column slice of proj.weight that each variable's block multiplies.
        offsets, start = {}, 0
        for v in self.variables:
            offsets[v.name] = (start, start + v.input_dim)
            start += v.input_dim
        self._offsets = offsets
        for v in self.variables:
            if v.kind != "categorical":  # numerical and text: the training mean
                self.register_buffer(f"_mean_{v.name}", torch.tensor(v.mean), persistent=False)
        with torch.no_grad():
            for emb in self.embeddings:
                nn.init.normal_(emb.weight, std=1.0)

    def encode_records(
        self,
        records: Sequence[Mapping[str, object] | None],
        *,
        ignore_unknown_fields: bool = False,
    ) -> ContextBatch:
        """See the module-level :func:`encode_records` (text embedded on this encoder's device
        when it is a GPU)."""
        device = self.proj.weight.device
        return encode_records(
            self.variables,
            records,
            ignore_unknown_fields=ignore_unknown_fields,
            text_device="cpu" if device.type == "cpu" else str(device),
        )

    def batch_size(self, batch: Mapping[str, Tensor] | None, default: int | None = None) -> int:
        """Rows in an encoded batch (``default`` when it is None or empty)."""
        if batch:
            known = {v.name for v in self.variables}
            unknown = sorted(set(batch) - known)
            if unknown:
                raise ValueError(
                    f"context batch: unknown variables {unknown}; expected some of {sorted(known)}"
                )
            sizes = {int(t.shape[0]) for t in batch.values()}
            if len(sizes) != 1:
                raise ValueError(f"context batch: variables have different row counts {sizes}")
            return sizes.pop()
        if default is None:
            raise ValueError("context batch is empty and no batch size was given")
        return default

    def forward(self, batch: Mapping[str, Tensor] | None, batch_size: int | None = None) -> Tensor:
        """Encoded batch (see :func:`encode_records`) -> c, shape (N, k).

        A variable absent from ``batch`` (or ``batch`` None) is missing in every row.
        """
        batch = dict(batch or {})
        n = self.batch_size(batch, batch_size)
        weight = self.proj.weight  # (k, D)
        device, dtype = weight.device, weight.dtype
        blocks: list[Tensor] = []
        missing: list[Tensor] = []  # per categorical variable, (N,) bool
        for var in self.variables:
            value = batch.get(var.name)
            if var.kind == "categorical":
                ids = self._check_ids(var, value, n, device)  # (N,)
                miss = ids < 0
                emb = self.embeddings[self._cat_index[var.name]](ids.clamp(min=0))  # (N, e_j)
                # A missing value leaves its block at zero; its expectation is added below.
                blocks.append(emb * (~miss).unsqueeze(1).to(dtype))
                missing.append(miss)
            else:
                x = self._check_numbers(var, value, n, device, dtype)  # (N, dim)
                mean = getattr(self, f"_mean_{var.name}").to(dtype)  # (dim,)
                blocks.append(torch.where(torch.isnan(x), mean.expand_as(x), x))
        pre = self.proj(torch.cat(blocks, dim=1))  # (N, k), missing categorical blocks = 0
        c = self._act(pre)
        if not missing:
            return c
        miss = torch.stack(missing, dim=1)  # (N, n_cat)
        if not bool(miss.any()):
            return c
        patterns, inverse = torch.unique(miss, dim=0, return_inverse=True)
        cats = [v for v in self.variables if v.kind == "categorical"]
        for p, pattern in enumerate(patterns):
            if not bool(pattern.any()):
                continue
            rows = (inverse == p).nonzero(as_tuple=True)[0]  # (R,)
            absent = [cats[j] for j in pattern.nonzero(as_tuple=True)[0].tolist()]
            c = c.index_copy(0, rows, self._expected(pre.index_select(0, rows), absent))
        return c

    def _act(self, pre: Tensor) -> Tensor:
        """The embedding's nonlinearity: ReLU (section 2.1) or none."""
        return F.relu(pre) if self.activation == "relu" else pre

    def _expected(self, pre: Tensor, absent: Sequence[ContextVariable]) -> Tensor:
        """E[act(pre + sum_j P_j emb_j(v_j))] over the absent variables' training values.

        pre: (R, k) pre-activation without the absent blocks; returns (R, k).
        """
        contribs, probs = [], []
        for var in absent:
            lo, hi = self._offsets[var.name]
            table = self.embeddings[self._cat_index[var.name]].weight  # (n_j, e_j)
            p = torch.tensor(var.probabilities, dtype=pre.dtype, device=pre.device)  # (n_j,)
            keep = (p > 0).nonzero(as_tuple=True)[0]
            # Each value's contribution to the pre-activation: P[:, lo:hi] emb_j(v).
            contribs.append(table[keep] @ self.proj.weight[:, lo:hi].T)  # (n_j', k)
            probs.append(p[keep])
        sizes = [int(t.shape[0]) for t in probs]
        total = math.prod(sizes)
        if total > 100_000:
            logger.debug("expected context embedding: enumerating %d value combinations", total)
        r, k = pre.shape
        chunk = max(1, _ENUM_CHUNK_ELEMENTS // max(1, r * k))
        out = pre.new_zeros(r, k)
        for start in range(0, total, chunk):
            flat = torch.arange(start, min(total, start + chunk), device=pre.device)  # (C,)
            z = pre.new_zeros(flat.shape[0], k)  # (C, k) summed contributions of a combination
            w = pre.new_ones(flat.shape[0])  # (C,) probability of a combination
            rest = flat
            for contrib, prob, size in zip(
                reversed(contribs), reversed(probs), reversed(sizes), strict=True
            ):
                idx = rest % size
                rest = rest // size
                z = z + contrib[idx]
                w = w * prob[idx]
            act = self._act(pre.unsqueeze(1) + z.unsqueeze(0))  # (R, C, k)
            out = out + torch.einsum("c,rck->rk", w, act)
        return out

    @staticmethod
    def _check_ids(var: ContextVariable, value: Tensor | None, n: int, device: Any) -> Tensor:
        if value is None:
            return torch.full((n,), MISSING_ID, dtype=torch.long, device=device)
        if not isinstance(value, Tensor) or value.dtype not in (torch.long, torch.int32):
            raise ValueError(
                f"context variable {var.name!r}: expected a LongTensor of value ids, got "
                f"{getattr(value, 'dtype', type(value).__name__)}"
            )
        if value.shape != (n,):
            raise ValueError(
                f"context variable {var.name!r}: expected shape ({n},), got {tuple(value.shape)}"
            )
        if n and (int(value.min()) < MISSING_ID or int(value.max()) >= len(var.values)):
            raise ValueError(
                f"context variable {var.name!r}: value ids must be in [-1, {len(var.values)})"
            )
        return value.to(device=device, dtype=torch.long)

    @staticmethod
    def _check_numbers(
        var: ContextVariable, value: Tensor | None, n: int, device: Any, dtype: torch.dtype
    ) -> Tensor:
        if value is None:
            return torch.full((n, var.dim), float("nan"), dtype=dtype, device=device)
        if not isinstance(value, Tensor) or not value.is_floating_point():
            raise ValueError(f"context variable {var.name!r}: expected a float tensor")
        if value.dim() == 1 and var.dim == 1:
            value = value.unsqueeze(1)
        if value.shape != (n, var.dim):
            raise ValueError(
                f"context variable {var.name!r}: expected shape ({n}, {var.dim}), "
                f"got {tuple(value.shape)}"
            )
        return value.to(device=device, dtype=dtype)
