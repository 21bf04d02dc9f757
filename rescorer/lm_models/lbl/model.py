"""Log-bilinear LMs with an attribute-gated factored word tensor (Kiros, Zemel & Salakhutdinov
2014, "A Multiplicative Model for Learning Distributed Text-Based Attribute Representations").

Notation of the paper: V words, K-dimensional word vectors, n-1 history words, F factors,
D-dimensional attribute vector x. All log-probabilities are natural logs.

**Plain LBL** (section 2.1, Mnih & Hinton 2007), ``factors == 0``:

- eq. 1: r_hat = sum_{i=1}^{n-1} C(i) r_{w_i}, with C(i) a K x K matrix per history position
  (position 1 = the most recent word) and r_w the row of the V x K matrix R;
- eq. 2: P(w_n = i | w_1:n-1) = softmax_i(r_hat^T r_i + b_i).

**Attribute-gated factored tensor** (sections 2.2-2.3), ``factors > 0``: words are a tensor
T in R^{V x K x D}; for an attribute vector x the word matrix is T^x = sum_d x_d T^(d), factored
(eq. 3) as

    T^x = (W^fv)^T diag(W^fd x) W^fk,       W^fk: F x K, W^fd: F x D, W^fv: F x V.

History words use the *folded* embeddings E = (W^fk)^T W^fv (K x V, no attribute):
r_hat = sum_i C(i) E(:, w_i) (eq. 4); the factor outputs are f = (W^fk r_hat) * (W^fd x) (eq. 5,
``*`` componentwise) and P(w_n = i | w_1:n-1, x) = softmax_i(W^fv(:, i)^T f + b_i). Since
W^fv(:, i)^T f = (T^x r_hat)_i, the output layer is the word matrix T^x: an LBL whose predicted
words are gated by the attribute. With no attributes declared the gate W^fd x is the constant
1, and the model is exactly an LBL with R = E^T (:meth:`LBL.word_vectors`).

**Attributes** (section 2.5): each declared attribute (genre, document, author ...) has a lookup
table L_a (values x dim_a); x for a text is the concatenation of f(L_a(:, value_a)) over the
attributes, f the optional rectifier (``relu``), so D = sum_a dim_a and W^fd x = sum_a
W^fd_a x_a: several attributes gate the factors jointly. A missing or unseen value uses the
*expected* vector of its attribute, the mean of f(L_a) over its training values (the project's
rule for missing context). An unseen attribute value can instead be *inferred*: all weights
frozen, gradient descent on its vector (:func:`rescorer.lm_models.lbl.train.infer_attributes`).

**Unshared vocabularies** (section 2.4, eq. 6), ``vocab_attribute``: one categorical attribute
(a language) selects the output vocabulary. Each output word belongs to one value of it
(``word_blocks``, -1 for the special tokens every value shares); T^l = (W^fv_l)^T diag(W^fd x)
W^fk, where W^fv_l holds the columns of the words of value l: here the column blocks of one
W^fv, so the softmax for a text of value l runs over l's words (and the shared specials) only.
W^fk and W^fd are shared by every value, as in the paper.

``<s>`` is an input only: its output logit is -inf.

Initialisation (the paper says only that L starts random): the entries of L are 1 + N(0, 0.1^2)
and W^fd = 1/D + N(0, 0.1^2/D), so the gate W^fd x starts near 1 and training starts from the
folded LBL; C(i) starts near I/(n-1); W^fk and W^fv are scaled so that E starts with entries of
about 0.1.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from rescorer.core.json_input import json_fields
from rescorer.lm_models.checkpoint import load_checkpoint, register_model_type, save_checkpoint
from rescorer.lm_models.output import FullSoftmax
from rescorer.lm_models.vocab import BOS_ID, UNK_ID, Vocabulary

logger = logging.getLogger(__name__)

MIN_ORDER, MAX_ORDER = 2, 10
WORD_INIT_STD = 0.1
ATTR_INIT_STD = 0.1
MISSING = -1  # attribute value id of a missing / unseen value (uses the expected vector)


@dataclass(frozen=True)
class AttributeSpec:
    """One attribute variable and its lookup table L_a."""

    # Field name in context records ("genre", "doc").
    name: str
    # The values seen in training, in id order (rows of L_a).
    values: tuple[str, ...]
    # Width of this attribute's vector x_a (its slice of x).
    dim: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "values", tuple(str(v) for v in self.values))
        if not self.name:
            raise ValueError("attribute name must be non-empty")
        if not self.values:
            raise ValueError(f"attribute {self.name!r}: expected at least one value")
        if len(set(self.values)) != len(self.values):
            raise ValueError(f"attribute {self.name!r}: values must be distinct")
        if self.dim < 1:
            raise ValueError(f"attribute {self.name!r}: dim must be >= 1, got {self.dim}")

    def value_id(self, value: str | None) -> int:
        """Row of ``value`` in L_a, :data:`MISSING` for None or a value not seen in training."""
        if value is None:
            return MISSING
        try:
            return self.values.index(value)
        except ValueError:
            return MISSING


@dataclass(frozen=True)
class LBLConfig:
    """Architecture of an LBL / multiplicative (attribute-gated) LBL."""

    # Output and input units: <unk>, <s>, </s> and the vocabulary words.
    vocab_size: int
    # n of the n-gram: the history is the n-1 previous words.
    order: int = 5
    # K: width of the word vectors and of r_hat.
    embed_dim: int = 64
    # F: number of factors of the word tensor; 0 = plain LBL with its own V x K matrix R.
    factors: int = 64
    # Attribute variables gating the factors (need factors > 0); () = no gating (gate = 1).
    attributes: tuple[AttributeSpec, ...] = ()
    # Rectifier on the looked-up attribute vectors, x = max(0, L(:, value)) (section 2.5).
    relu: bool = True
    # Section 2.4: name of the attribute whose value selects the output vocabulary ("" = shared).
    vocab_attribute: str = ""
    # Unshared vocabularies: per output unit, the vocab_attribute value id it belongs to
    # (-1: shared by every value, e.g. </s> and <unk>); () when vocabularies are shared.
    word_blocks: tuple[int, ...] = ()
    # Words were lower-cased in training (how the adapter maps words into the vocabulary).
    lower: bool = True

    def __post_init__(self) -> None:
        attrs = tuple(
            a if isinstance(a, AttributeSpec) else AttributeSpec(**a) for a in self.attributes
        )
        object.__setattr__(self, "attributes", attrs)
        object.__setattr__(self, "word_blocks", tuple(int(b) for b in self.word_blocks))
        if self.vocab_size < 4:
            raise ValueError(
                f"vocab_size must be >= 4 (3 specials + a word), got {self.vocab_size}"
            )
        if not MIN_ORDER <= self.order <= MAX_ORDER:
            raise ValueError(f"order must be in [{MIN_ORDER}, {MAX_ORDER}], got {self.order}")
        if self.embed_dim < 1 or self.factors < 0:
            raise ValueError(
                f"need embed_dim >= 1 and factors >= 0, got {self.embed_dim}, {self.factors}"
            )
        if self.factors == 0 and attrs:
            raise ValueError("attributes gate the factors: they need factors > 0")
        names = [a.name for a in attrs]
        if len(set(names)) != len(names):
            raise ValueError(f"attribute names must be distinct, got {names}")
        if self.vocab_attribute:
            if self.vocab_attribute not in names:
                raise ValueError(
                    f"vocab_attribute {self.vocab_attribute!r} is not an attribute ({names})"
                )
            if len(self.word_blocks) != self.vocab_size:
                raise ValueError(
                    f"word_blocks needs one entry per output unit ({self.vocab_size}), "
                    f"got {len(self.word_blocks)}"
                )
            n_values = len(attrs[names.index(self.vocab_attribute)].values)
            if any(not -1 <= b < n_values for b in self.word_blocks):
                raise ValueError(f"word_blocks entries must be in [-1, {n_values})")
        elif self.word_blocks:
            raise ValueError("word_blocks is only for unshared vocabularies (vocab_attribute)")

    @property
    def attr_dim(self) -> int:
        """D: width of the whole attribute vector x."""
        return sum(a.dim for a in self.attributes)

    def attribute_index(self, name: str) -> int:
        for i, a in enumerate(self.attributes):
            if a.name == name:
                return i
        raise ValueError(
            f"unknown attribute {name!r}; the model has {[a.name for a in self.attributes]}"
        )

    def slices(self) -> list[slice]:
        """Where each attribute's vector sits in x."""
        out, start = [], 0
        for a in self.attributes:
            out.append(slice(start, start + a.dim))
            start += a.dim
        return out

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["attributes"] = [
            {"name": a.name, "values": list(a.values), "dim": a.dim} for a in self.attributes
        ]
        out["word_blocks"] = list(self.word_blocks)
        return out

    @classmethod
    def from_json(cls, data: Any) -> LBLConfig:
        values = json_fields(cls, data, "LBL config")
        attrs = []
        for a in values.get("attributes", ()):
            if not isinstance(a, Mapping) or set(a) != {"name", "values", "dim"}:
                raise ValueError(f"attribute: expected {{name, values, dim}}, got {a!r}")
            attrs.append(AttributeSpec(str(a["name"]), tuple(a["values"]), int(a["dim"])))
        values["attributes"] = tuple(attrs)
        return cls(**values)


class LBL(nn.Module):
    """The (multiplicative) log-bilinear LM of the module docstring.

    Inputs: ``history`` (B, n-1) word ids, most recent word first (``<s>`` = 1 pads the start);
    ``attrs`` (B, A) attribute value ids (:data:`MISSING` = expected vector), or an explicit
    attribute vector ``x`` (B, D).
    """

    def __init__(self, config: LBLConfig) -> None:
        super().__init__()
        self.config = config
        v, k, n1, nf = config.vocab_size, config.embed_dim, config.order - 1, config.factors
        # C(i), i = 1..n-1: one K x K matrix per history position (eq. 1 / eq. 4).
        self.context = nn.Parameter(
            torch.eye(k).repeat(n1, 1, 1) / n1 + torch.randn(n1, k, k) / math.sqrt(k) * 0.1
        )
        self.bias = nn.Parameter(torch.zeros(v))  # b (eq. 2)
        if nf == 0:
            self.R = nn.Parameter(torch.randn(v, k) * WORD_INIT_STD)  # eq. 1-2
        else:
            # Scaled so that E = W^fk^T W^fv has entries of about WORD_INIT_STD.
            s = math.sqrt(WORD_INIT_STD) / nf**0.25
            self.W_fk = nn.Parameter(torch.randn(nf, k) * s)
            self.W_fv = nn.Parameter(torch.randn(nf, v) * s)
        d = config.attr_dim
        if config.attributes:
            # Initialised so that the gate W^fd x starts near 1 (x near 1): the model starts as
            # the folded LBL and learns how attributes move away from it.
            self.W_fd = nn.Parameter(1.0 / d + torch.randn(nf, d) * ATTR_INIT_STD / math.sqrt(d))
            self.lookups = nn.ParameterList(
                nn.Parameter(1.0 + torch.randn(len(a.values), a.dim) * ATTR_INIT_STD)
                for a in config.attributes
            )
        self.output = FullSoftmax(v, never=(BOS_ID,))  # <s> is never predicted
        if config.vocab_attribute:
            blocks = torch.tensor(config.word_blocks, dtype=torch.long)
            n_values = len(config.attributes[config.attribute_index(config.vocab_attribute)].values)
            allowed = (blocks[None, :] == torch.arange(n_values)[:, None]) | (blocks[None, :] < 0)
            self.register_buffer("_allowed", allowed, persistent=False)  # (values, V)

    # -- words -------------------------------------------------------------------------------
    def word_vectors(self) -> Tensor:
        """(V, K): R (plain LBL) or the folded history embeddings E^T = W^fv^T W^fk (eq. 4)."""
        if self.config.factors == 0:
            return self.R
        return self.W_fv.T @ self.W_fk

    def predict(self, history: Tensor) -> Tensor:
        """r_hat = sum_i C(i) r_{w_i} (eqs. 1, 4): (B, n-1) ids -> (B, K)."""
        n1 = self.config.order - 1
        if history.dim() != 2 or history.shape[1] != n1:
            raise ValueError(f"history must be (batch, {n1}), got {tuple(history.shape)}")
        r = self.word_vectors()[history]  # (B, n-1, K)
        # C (n-1, K_out, K_in) applied per position, summed over positions.
        return torch.einsum("ijk,bik->bj", self.context, r)

    # -- attributes --------------------------------------------------------------------------
    def _f(self, table: Tensor) -> Tensor:
        return F.relu(table) if self.config.relu else table

    def attribute_table(self, a: int) -> Tensor:
        """f(L_a): (values_a, dim_a), the attribute vectors of attribute ``a``'s values."""
        return self._f(self.lookups[a])

    def expected_attribute(self, a: int) -> Tensor:
        """(dim_a,): the mean of f(L_a) over the training values (used for missing values)."""
        return self.attribute_table(a).mean(0)

    def attribute_vector(self, attrs: Tensor) -> Tensor:
        """x = [f(L_1(:, a_1)); ...; f(L_A(:, a_A))]: (B, A) value ids -> (B, D).

        A :data:`MISSING` (negative) id takes its attribute's expected vector.
        """
        n_attr = len(self.config.attributes)
        if attrs.dim() != 2 or attrs.shape[1] != n_attr:
            raise ValueError(f"attrs must be (batch, {n_attr}), got {tuple(attrs.shape)}")
        parts = []
        for a in range(n_attr):
            ids = attrs[:, a]
            table = self.attribute_table(a)
            vec = table[ids.clamp(min=0)]  # (B, dim_a)
            missing = (ids < 0).unsqueeze(1)
            parts.append(torch.where(missing, self.expected_attribute(a).expand_as(vec), vec))
        return torch.cat(parts, dim=1)

    def gate(self, x: Tensor | None, batch: int) -> Tensor:
        """W^fd x: (B, D) -> (B, F); the constant 1 when the model has no attributes."""
        if not self.config.attributes:
            return self.W_fk.new_ones(batch, self.config.factors)
        if x is None:
            raise ValueError("this model has attributes: give attrs or x")
        return x @ self.W_fd.T

    # -- the tensor (eq. 3) ------------------------------------------------------------------
    def word_matrix(self, x: Tensor | None = None) -> Tensor:
        """T^x = (W^fv)^T diag(W^fd x) W^fk: (D,) -> (V, K); R for a plain LBL."""
        if self.config.factors == 0:
            return self.R
        g = self.gate(None if x is None else x[None, :], 1)[0]  # (F,)
        return (self.W_fv.T * g) @ self.W_fk

    def full_tensor(self) -> Tensor:
        """T (V, K, D) unfactored: T[v, k, d] = sum_f W^fv[f, v] W^fk[f, k] W^fd[f, d]."""
        if not self.config.attributes:
            raise ValueError("the unfactored tensor needs attributes (D > 0)")
        return torch.einsum("fv,fk,fd->vkd", self.W_fv, self.W_fk, self.W_fd)

    # -- outputs -----------------------------------------------------------------------------
    def _output(
        self, r_hat: Tensor, x: Tensor | None, attrs: Tensor | None
    ) -> tuple[Tensor, Tensor, Tensor]:
        """The output layer's inputs: z (B, in), word weights (V, in), bias (V,) | (B, V).

        z = r_hat with weights R (no factors), or z = f of eq. 5 with weights W^fv^T; the
        bias is b, plus -inf outside the row's vocabulary under section 2.4.
        """
        if self.config.factors == 0:
            z, weight = r_hat, self.R
        else:
            if x is None and attrs is not None and self.config.attributes:
                x = self.attribute_vector(attrs)
            z = (r_hat @ self.W_fk.T) * self.gate(x, r_hat.shape[0])  # eq. 5, f (B, F)
            weight = self.W_fv.T
        bias = self.bias
        if self.config.vocab_attribute and attrs is not None:
            bias = self._restrict(bias.expand(r_hat.shape[0], -1), attrs)
        return z, weight, bias

    def logits(self, r_hat: Tensor, x: Tensor | None = None, attrs: Tensor | None = None) -> Tensor:
        """Unnormalised scores (B, V): r_hat^T R + b, or W^fv^T f + b with f of eq. 5."""
        z, weight, bias = self._output(r_hat, x, attrs)
        return self.output.logits(z, weight, bias)

    def _restrict(self, logits: Tensor, attrs: Tensor | None) -> Tensor:
        """Section 2.4: only the words of the text's vocab_attribute value (and specials)."""
        if attrs is None:
            return logits
        a = self.config.attribute_index(self.config.vocab_attribute)
        ids = attrs[:, a]
        allowed = self._allowed[ids.clamp(min=0)]  # (B, V)
        allowed = allowed | (ids < 0).unsqueeze(1)  # value unknown: every word
        return logits.masked_fill(~allowed, -math.inf)

    def log_probs(
        self, history: Tensor, attrs: Tensor | None = None, x: Tensor | None = None
    ) -> Tensor:
        """ln P(w | history, x) for every output unit: (B, V) (the shared output layer)."""
        return self.output.log_probs(*self._output(self.predict(history), x, attrs))

    def forward(
        self,
        history: Tensor,
        targets: Tensor,
        attrs: Tensor | None = None,
        x: Tensor | None = None,
    ) -> Tensor:
        """ln P(target | history, attributes) per row: (B,).

        With unshared vocabularies (section 2.4) a target outside its text's vocabulary (a
        word seen in training under other values only) is that vocabulary's ``<unk>``.
        """
        if self.config.vocab_attribute and attrs is not None:
            targets = self.in_vocabulary(targets, attrs)
        # The output layer's log_prob: on the CPU with one shared bias it reads only the targets
        # out of blocks of the softmax (no (B, V) tensor; the same values as log_probs).
        z, weight, bias = self._output(self.predict(history), x, attrs)
        return self.output.log_prob(z, targets, weight, bias)

    def in_vocabulary(self, targets: Tensor, attrs: Tensor) -> Tensor:
        """(B,) target ids with the words outside the row's vocab_attribute block as <unk>."""
        a = self.config.attribute_index(self.config.vocab_attribute)
        ids = attrs[:, a]
        ok = self._allowed[ids.clamp(min=0), targets] | (ids < 0)
        return torch.where(ok, targets, torch.full_like(targets, UNK_ID))

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())


def attribute_ids(config: LBLConfig, record: Mapping[str, Any] | None) -> tuple[int, ...]:
    """A context record's value id for each attribute of ``config`` (MISSING when absent)."""
    record = record or {}
    out = []
    for a in config.attributes:
        value = record.get(a.name)
        out.append(a.value_id(None if value is None else str(value)))
    return tuple(out)


# -- word id windows ----------------------------------------------------------------------------


def history_windows(ids: Sequence[int], order: int) -> np.ndarray:
    """Word ids of a sentence -> (T+1, n-1) histories of its T words and ``</s>``.

    Row t holds the words before target t, most recent first; positions before the start of
    the sentence hold ``<s>`` (id 1).
    """
    n1 = order - 1
    padded = np.concatenate([np.full(n1, BOS_ID, dtype=np.int64), np.asarray(ids, np.int64)])
    rows = np.arange(len(ids) + 1)[:, None] + np.arange(n1 - 1, -1, -1)[None, :]
    return padded[rows]


# -- checkpoints --------------------------------------------------------------------------------


def save_lbl(
    path: str | Path,
    model: LBL,
    vocab: Vocabulary,
    training_meta: Mapping[str, Any] | None = None,
) -> Path:
    """A checkpoint folder (:mod:`rescorer.lm_models.checkpoint`) of an LBL and its vocabulary."""

    return save_checkpoint(path, model, vocab.tokens, training_meta)


def load_lbl(path: str | Path, device: str | torch.device = "cpu") -> tuple[LBL, Vocabulary]:
    """Read a checkpoint written by :func:`save_lbl` (strict: every tensor must match)."""

    model, tokens, _ = load_checkpoint(path, device=device)
    if not isinstance(model, LBL):
        raise ValueError(f"{path}: a {type(model).__name__} checkpoint, expected an LBL")
    return model, Vocabulary(tokens)


register_model_type("lbl", LBLConfig, LBL)
