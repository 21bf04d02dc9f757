"""Context-aware LSTM language models of Jaech & Ostendorf (2018): Unadapted, SoftmaxBias,
ConcatCell and FactorCell, in one readable module.

Notation follows the paper: e word embedding size, d LSTM size, k context embedding size, r rank,
V vocabulary size, N batch, T time steps. For layer 0 the cell input is the word embedding w_t
(size e); higher layers read the layer below's h_t (size d). Below ``a = in + d`` is the width of
the cell input ``[x_t, h_{t-1}]``.

    c        = ContextEncoder(f_1..f_n)                                       (sec. 2.1)
    A        = [(c x_1 Z_L)(Z_R x_3 c)]^T                                     (eq. 3)
    W'       = W + A,   b' = V c + b                                          (eq. 2, 4)
    [i,f,o]  = W' [x_t, h_{t-1}] + b'                                         (eq. 8)
    f        = sigmoid(f + 1);  m_t = m_{t-1} f + (1 - f) tanh(i)
    h_t      = tanh(m_t) sigmoid(o)                                           (eq. 9)
    log p    = log_softmax(E L h_t + b_out + Q c + sum_j B_j[f_j])            (eq. 5, 6)

The softmax runs over every unit but ``<s>``, which is never predicted (log p = -inf), in the
full softmax as in the class-factored output (:mod:`rescorer.lm_models.output`).

Modes decide which parameters exist: ``unadapted`` (none of the context ones), ``softmax_bias``
(Q and one-hot bias tables B_j, eq. 6), ``concat`` (also V, eq. 2), ``factor`` (also Z_L, Z_R,
eq. 3-4). Adaptation applies to every layer, each with its own V, Z_L, Z_R.

Layout choices (documented deviations from the paper's text):

* The paper writes W as d x (e+d) while ``(c x_1 Z_L)(Z_R x_3 c)`` is (e+d) x d (it uses the
  row-vector convention). We keep Z_L (k, e+d, r) and Z_R (r, 3d, k) exactly as in the paper
  and store W as (3d, e+d) (PyTorch's column convention), so A is the transpose of that product.
* Eq. 8 writes ``+ b``; with ConcatCell/FactorCell this is the context-dependent ``b'`` of eq. 2
  (Appendix A's last paragraph says so).
* Layer normalisation (optional, sec. 4.4) is applied to the gate pre-activations
  ``W'[x_t, h_{t-1}] + b'``, separately for each of i, f and o (each over its d units, with its
  own gain and shift), before the ``+1`` forget shift and the nonlinearities.
* ``dropout`` is recurrent dropout (Semeniuta et al. 2016): it drops units of the candidate
  tanh(i) before it is written into m_t, with a fresh mask at every time step, training only.
  Table 2's "Dropout" figures are keep probabilities (TensorFlow); ours is a drop probability.
  ``io_dropout`` (not in the paper, default 0) drops input embeddings and top-layer outputs.
* A missing context value uses the expected context embedding (see
  :mod:`rescorer.lm_models.lstm.context`); A, Vc and Qc are then computed from that expected c.
  Since A is quadratic in c this is not exactly the expectation of A (the paper's conclusion calls
  the two equivalent; they are when the embedding of a variable enters linearly). A one-hot softmax
  bias of a missing variable is the frequency-weighted mean of its rows (exactly the expected bias
  vector).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from rescorer.core.json_input import json_fields
from rescorer.lm_models.checkpoint import register_model_type
from rescorer.lm_models.lstm.context import ContextEncoder, ContextVariable
from rescorer.lm_models.output import (
    ClassFactoredSoftmax,
    table_log_softmax,
    target_log_softmax,
    uses_blocks,
)
from rescorer.lm_models.vocab import BOS_ID

logger = logging.getLogger(__name__)

MODES = ("unadapted", "softmax_bias", "concat", "factor")
CONTEXT_ACTIVATIONS = ("relu", "none")
FORGET_BIAS = 1.0  # the "+ 1.0" in f <- sigmoid(f + 1.0), Appendix A eq. 9
FACTOR_INIT_STD = 0.02  # initial std of the FactorCell bases Z_L and Z_R
# Z_L and Z_R are drawn from their own generator, seeded with the global seed plus this offset,
# so that the global stream (every other weight) is the ConcatCell's of the same seed.
FACTOR_SEED_OFFSET = 104_729
LAYER_NORM_EPS = 1e-5

# What the model accepts as context: an encoded batch ({name: tensor}, see encode_records), a
# list of records ({"genre": "news"} or None), or None (every variable missing).
ContextLike = Mapping[str, Tensor] | Sequence[Mapping[str, object] | None] | None
State = tuple[Tensor, Tensor]  # (h, m), each (layers, N, d)


def _check_int(name: str, value: object, minimum: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ValueError(f"LSTMConfig.{name} must be an integer >= {minimum}, got {value!r}")


@dataclass(frozen=True)
class LSTMConfig:
    """Architecture of a :class:`ContextLSTM`; everything a checkpoint needs to rebuild it."""

    vocab_size: int  # V, output and input vocabulary size (ids 0..V-1)
    embed_dim: int = 64  # e, word embedding size (tied input/output embeddings E)
    hidden_dim: int = 64  # d, LSTM state size
    num_layers: int = 1  # stacked LSTM layers; adaptation applies to every layer
    mode: str = "unadapted"  # "unadapted" | "softmax_bias" | "concat" | "factor"
    context_dim: int = 0  # k, context embedding size (0 iff mode == "unadapted")
    rank: int = 0  # r, rank of the FactorCell adaptation (> 0 iff mode == "factor")
    context_vars: tuple[ContextVariable, ...] = ()  # context fields (empty iff unadapted)
    layer_norm: bool = False  # layer-normalise each gate's pre-activation (sec. 4.4)
    dropout: float = 0.0  # recurrent dropout probability on tanh(i) (Semeniuta et al. 2016)
    io_dropout: float = 0.0  # dropout on input embeddings and top-layer outputs (not in paper)
    tie_embeddings: bool = True  # output embedding E shared with the input one (sec. 2.3)
    # Class of each word for the class-factored output P(c(w)|h) P(w|c(w),h)
    # (rescorer.lm_models.output); empty: the full softmax over V (the paper's output layer).
    word_classes: tuple[int, ...] = ()
    # Nonlinearity of the context embedding c = act(P x + p): "relu" (section 2.1) or "none"
    # (the authors' code for a single variable; a ReLU can switch a context's c off entirely).
    context_activation: str = "relu"
    # A history model (data.history): the context field whose text the LSTM reads before each
    # sentence, one ``<s> w1 .. wn`` per line, its state carried into the sentence ("": none).
    history: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "context_vars", tuple(self.context_vars))
        if not isinstance(self.history, str):
            raise ValueError(
                f"LSTMConfig.history: expected a field name or '', got {self.history!r}"
            )
        if self.history and self.history in {v.name for v in self.context_vars}:
            raise ValueError(
                f"LSTMConfig.history {self.history!r} is also a context variable's name"
            )
        if self.context_activation not in CONTEXT_ACTIVATIONS:
            raise ValueError(
                f"LSTMConfig.context_activation must be one of {CONTEXT_ACTIVATIONS}, got "
                f"{self.context_activation!r}"
            )
        object.__setattr__(self, "word_classes", tuple(self.word_classes))
        if self.word_classes and len(self.word_classes) != self.vocab_size:
            raise ValueError(
                f"LSTMConfig.word_classes: expected one class per word ({self.vocab_size}), "
                f"got {len(self.word_classes)}"
            )
        if not all(isinstance(c, int) and not isinstance(c, bool) for c in self.word_classes):
            raise ValueError("LSTMConfig.word_classes must be integers")
        _check_int("vocab_size", self.vocab_size, 1)
        _check_int("embed_dim", self.embed_dim, 1)
        _check_int("hidden_dim", self.hidden_dim, 1)
        _check_int("num_layers", self.num_layers, 1)
        _check_int("context_dim", self.context_dim, 0)
        _check_int("rank", self.rank, 0)
        if self.mode not in MODES:
            raise ValueError(f"LSTMConfig.mode must be one of {MODES}, got {self.mode!r}")
        for name in ("dropout", "io_dropout"):
            p = getattr(self, name)
            if not isinstance(p, (int, float)) or not 0.0 <= p < 1.0:
                raise ValueError(f"LSTMConfig.{name} must be in [0, 1), got {p!r}")
        for name in ("layer_norm", "tie_embeddings"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"LSTMConfig.{name} must be true or false")
        if not all(isinstance(v, ContextVariable) for v in self.context_vars):
            raise ValueError("LSTMConfig.context_vars must hold ContextVariable objects")
        names = [v.name for v in self.context_vars]
        if len(set(names)) != len(names):
            raise ValueError(f"LSTMConfig.context_vars: names must be distinct, got {names}")
        if self.mode == "unadapted":
            if self.context_vars or self.context_dim or self.rank:
                raise ValueError(
                    "LSTMConfig: mode 'unadapted' takes no context: expected context_vars=(), "
                    f"context_dim=0, rank=0 (got {len(self.context_vars)} variables, "
                    f"context_dim={self.context_dim}, rank={self.rank})"
                )
        else:
            if not self.context_vars:
                raise ValueError(f"LSTMConfig: mode {self.mode!r} needs at least one context var")
            if self.context_dim < 1:
                raise ValueError(f"LSTMConfig: mode {self.mode!r} needs context_dim >= 1")
        if self.mode == "factor" and self.rank < 1:
            raise ValueError("LSTMConfig: mode 'factor' needs rank >= 1")
        if self.mode != "factor" and self.rank != 0:
            raise ValueError(
                f"LSTMConfig: rank must be 0 unless mode == 'factor' (got {self.rank})"
            )

    def to_json(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["context_vars"] = [v.to_json() for v in self.context_vars]
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> LSTMConfig:
        kwargs = json_fields(cls, data, "LSTM config")
        kwargs["context_vars"] = tuple(
            ContextVariable.from_json(v) for v in kwargs.get("context_vars", ())
        )
        return cls(**kwargs)


@dataclass(frozen=True)
class AdaptedWeights:
    """Context-dependent weights computed once per sequence (:meth:`ContextLSTM.adapt`).

    ``rows`` is the number of contexts they were computed for (tensors carry a leading N axis),
    or None when they are shared by every sequence (no context, or a single context).
    """

    # per layer: W' (3d, a) | (N, 3d, a) | LowRankWeight, b' (3d,) | (N, 3d)
    layers: tuple[tuple[Any, Tensor], ...]
    output_bias: Tensor  # b_out + Q c + one-hot biases: (V,) | (N, V)
    context: Tensor | None  # c: (1, k) | (N, k), None for an unadapted model
    rows: int | None

    def take(self, index: Tensor) -> AdaptedWeights:
        """The layers' weights of sequences ``index`` (M,) (rows of these N); shared ones stay
        shared. The output bias and c are kept whole: the scorer indexes them itself."""
        if self.rows is None:
            return self
        layers = tuple(
            (
                weight.take(index)
                if isinstance(weight, LowRankWeight)
                else (weight[index] if weight.dim() == 3 else weight),
                bias[index] if bias.dim() == 2 else bias,
            )
            for weight, bias in self.layers
        )
        return AdaptedWeights(layers, self.output_bias, self.context, len(index))


@dataclass(frozen=True)
class LowRankWeight:
    """W' = W + A per sequence with the adaptation kept factored (eq. 3).

    A^T = left @ right, left = c x_1 Z_L (N, a, r), right = Z_R x_3 c (N, r, 3d); W (3d, a) is
    shared. Multiplying by it costs a*r + r*3d per sequence on top of the shared W, instead of
    building an (N, 3d, a) tensor and a batched matmul: the training path for a batch of
    sequences with different contexts. A single context is folded into W' instead.
    """

    W: Tensor  # (3d, a)
    left: Tensor  # (N, a, r)
    right: Tensor  # (N, r, 3d)

    @property
    def shape(self) -> tuple[int, int, int]:
        return (self.left.shape[0], self.W.shape[0], self.W.shape[1])  # (N, 3d, a)

    def split(self, i: int) -> tuple[LowRankWeight, LowRankWeight]:
        """The weights of input columns [:i] and [i:] (the x and h halves of [x_t, h_{t-1}])."""
        return (
            LowRankWeight(self.W[:, :i], self.left[:, :i], self.right),
            LowRankWeight(self.W[:, i:], self.left[:, i:], self.right),
        )

    def materialize(self) -> Tensor:
        return self.W + torch.bmm(self.left, self.right).transpose(1, 2)  # (N, 3d, a)

    def take(self, index: Tensor) -> LowRankWeight:
        """The weights of sequences ``index`` (M,): (M, 3d, a), W still shared."""
        return LowRankWeight(self.W, self.left[index], self.right[index])


def _times(x: Tensor, weight: Tensor | LowRankWeight) -> Tensor:
    """x W^T for a shared W (out, in), one W per sequence (N, out, in), or a LowRankWeight.

    x: (N, in) -> (N, out), or (N, T, in) -> (N, T, out).
    """
    if isinstance(weight, LowRankWeight):
        shared = F.linear(x, weight.W)
        if x.dim() == 2:
            low = torch.bmm(torch.bmm(x.unsqueeze(1), weight.left), weight.right)  # (N, 1, 3d)
            return shared + low.squeeze(1)
        return shared + torch.bmm(torch.bmm(x, weight.left), weight.right)  # (N, T, 3d)
    if weight.dim() == 2:
        return F.linear(x, weight)
    if x.dim() == 2:
        return torch.bmm(weight, x.unsqueeze(2)).squeeze(2)  # (N, out, in) @ (N, in, 1)
    return torch.bmm(x, weight.transpose(1, 2))  # (N, T, in) @ (N, in, out)


class ContextLSTMCell(nn.Module):
    """One coupled input-forget-gate LSTM layer (Appendix A); ``mode`` decides its parameters.

    W (3d, a), b (3d,)               every mode                    eq. 1, 8
    V (3d, k)                        concat, factor                eq. 2
    Z_L (k, a, r), Z_R (r, 3d, k)    factor                        eq. 3
    ln_gain, ln_shift (3, d)         layer_norm                    per-gate layer norm
    """

    def __init__(
        self,
        input_dim: int,
        hidden_dim: int,
        mode: str = "unadapted",
        context_dim: int = 0,
        rank: int = 0,
        layer_norm: bool = False,
        dropout: float = 0.0,
        generator: torch.Generator | None = None,
    ) -> None:
        """``generator``: where Z_L and Z_R are drawn from (the FactorCell; default: the global
        generator). Every other weight is drawn from the global one."""
        super().__init__()
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        self.input_dim, self.hidden_dim, self.mode = input_dim, hidden_dim, mode
        self.dropout = dropout
        a, g = input_dim + hidden_dim, 3 * hidden_dim
        self.W = nn.Parameter(torch.empty(g, a))
        self.b = nn.Parameter(torch.zeros(g))
        self.V = nn.Parameter(torch.empty(g, context_dim)) if mode in ("concat", "factor") else None
        if mode == "factor":
            self.Z_L = nn.Parameter(torch.empty(context_dim, a, rank))
            self.Z_R = nn.Parameter(torch.empty(rank, g, context_dim))
        else:
            self.Z_L = self.Z_R = None
        if layer_norm:
            self.ln_gain = nn.Parameter(torch.ones(3, hidden_dim))
            self.ln_shift = nn.Parameter(torch.zeros(3, hidden_dim))
        else:
            self.ln_gain = self.ln_shift = None
        self.reset_parameters(generator)

    @torch.no_grad()
    def reset_parameters(self, generator: torch.Generator | None = None) -> None:
        bound = 1.0 / math.sqrt(self.hidden_dim)
        nn.init.uniform_(self.W, -bound, bound)
        nn.init.zeros_(self.b)
        if self.V is not None:
            nn.init.uniform_(self.V, -bound, bound)
        if self.Z_L is not None and self.Z_R is not None:
            # Both small and random: zero in one would zero the other's gradient (A = Z_L Z_R).
            # Small enough that A starts well below W (|A| ~ std^2 * k * sqrt(r) * |c|^2):
            # with std 0.1 the adaptation swamped W at k=16 and training diverged.
            nn.init.normal_(self.Z_L, std=FACTOR_INIT_STD, generator=generator)
            nn.init.normal_(self.Z_R, std=FACTOR_INIT_STD, generator=generator)

    def adapted(self, c: Tensor | None) -> tuple[Tensor, Tensor]:
        """W' and b' for contexts c (N, k): eq. 2-4.

        Returns W' (3d, a) or (N, 3d, a) and b' (3d,) or (N, 3d); shared ones when the mode does
        not adapt that part (or c is None).
        """
        weight, bias = self.W, self.b
        if c is None:
            return weight, bias
        if self.V is not None:
            bias = bias + c @ self.V.T  # eq. 2: b' = V c + b                      (N, 3d)
        if self.Z_L is not None and self.Z_R is not None:
            left = torch.einsum("nk,kar->nar", c, self.Z_L)  # c x_1 Z_L           (N, a, r)
            right = torch.einsum("rgk,nk->nrg", self.Z_R, c)  # Z_R x_3 c          (N, r, 3d)
            adaptation = torch.bmm(left, right).transpose(1, 2)  # eq. 3: A        (N, 3d, a)
            weight = weight + adaptation  # eq. 4: W' = W + A                      (N, 3d, a)
        return weight, bias

    def adapted_low_rank(self, c: Tensor) -> tuple[Tensor | LowRankWeight, Tensor]:
        """As :meth:`adapted`, with the FactorCell's A kept factored (:class:`LowRankWeight`)."""
        if self.Z_L is None or self.Z_R is None or self.V is None:
            return self.adapted(c)
        bias = self.b + c @ self.V.T  # eq. 2: b' = V c + b                          (N, 3d)
        left = torch.einsum("nk,kar->nar", c, self.Z_L)  # c x_1 Z_L                   (N, a, r)
        right = torch.einsum("rgk,nk->nrg", self.Z_R, c)  # Z_R x_3 c                  (N, r, 3d)
        return LowRankWeight(self.W, left, right), bias

    def step(self, gates: Tensor, m_prev: Tensor) -> State:
        """Eq. 9 on pre-activations gates = W'[x_t, h_{t-1}] + b' (N, 3d); returns (h_t, m_t)."""
        if self.ln_gain is not None and self.ln_shift is not None:
            n = gates.shape[0]
            per_gate = gates.view(n, 3, self.hidden_dim)  # (N, 3, d)
            per_gate = F.layer_norm(per_gate, (self.hidden_dim,), eps=LAYER_NORM_EPS)
            gates = (per_gate * self.ln_gain + self.ln_shift).view(n, 3 * self.hidden_dim)
        i, f, o = gates.chunk(3, dim=1)  # eq. 8: [i_t, f_t, o_t], each (N, d)
        f = torch.sigmoid(f + FORGET_BIAS)
        candidate = torch.tanh(i)
        if self.training and self.dropout > 0:
            candidate = F.dropout(candidate, p=self.dropout, training=True)
        m = m_prev * f + (1.0 - f) * candidate  # coupled input/forget gates
        h = torch.tanh(m) * torch.sigmoid(o)
        return h, m

    def forward(
        self, x: Tensor, weight: Tensor | LowRankWeight, bias: Tensor, state: State
    ) -> tuple[Tensor, State]:
        """Run the layer over a sequence. x (N, T, in), state (h0, m0) each (N, d).

        The input half of W'[x_t, h_{t-1}] is one batched matmul for all time steps; only the
        recurrent half runs in the time loop. Returns outputs (N, T, d) and (h_T, m_T).
        """
        if isinstance(weight, LowRankWeight):
            w_x, w_h = weight.split(self.input_dim)
        else:
            w_x = weight[..., : self.input_dim]  # (3d, in) | (N, 3d, in)
            w_h = weight[..., self.input_dim :].contiguous()  # (3d, d) | (N, 3d, d)
        if bias.dim() == 2:
            bias = bias.unsqueeze(1)  # (N, 1, 3d)
        gates_x = _times(x, w_x) + bias  # W'_x x_t + b' for every t              (N, T, 3d)
        h, m = state
        outputs = []
        # unbind, not gates_x[:, t]: the backward of T selects built T zero-filled (N, T, 3d)
        # gradients (a fifth of a training step); unbind's builds one.
        for gates_t in gates_x.unbind(1):
            gates = gates_t + _times(h, w_h)  # eq. 8                              (N, 3d)
            h, m = self.step(gates, m)
            outputs.append(h)
        return torch.stack(outputs, dim=1), (h, m)  # (N, T, d)


def valid_positions(inputs: Tensor, targets: Tensor, lengths: Tensor) -> Tensor:
    """(N, T) bool: position t of sequence i is within ``lengths[i]``; the shapes checked (the
    ``score`` of this family's models)."""
    if targets.shape != inputs.shape:
        raise ValueError(f"targets {tuple(targets.shape)} != inputs {tuple(inputs.shape)}")
    n, t = inputs.shape
    lengths = torch.as_tensor(lengths, device=inputs.device)
    if lengths.shape != (n,):
        raise ValueError(f"lengths: expected shape ({n},), got {tuple(lengths.shape)}")
    return torch.arange(t, device=inputs.device).unsqueeze(0) < lengths.unsqueeze(1)


class ContextLSTM(nn.Module):
    """The context-aware LSTM language model; ``config.mode`` selects the variant."""

    never: Tensor  # (1,) the units never predicted: <s> (a buffer, not saved)

    def __init__(self, config: LSTMConfig) -> None:
        super().__init__()
        self.config = config
        cfg = config
        vocab, e, d, k = cfg.vocab_size, cfg.embed_dim, cfg.hidden_dim, cfg.context_dim
        self.adaptive = cfg.mode != "unadapted"
        self.embedding = nn.Embedding(vocab, e)  # E (V, e), input side (and output when tied)
        self.context_encoder = (
            ContextEncoder(cfg.context_vars, k, cfg.context_activation) if self.adaptive else None
        )
        # Paired seeds: the FactorCell's own tensors come from a generator of their own, so a
        # FactorCell starts as the ConcatCell of the same seed plus a small A (every shared
        # weight equal) and the two differ by the adaptation, not by their draws.
        factor_gen = (
            torch.Generator().manual_seed((torch.initial_seed() + FACTOR_SEED_OFFSET) % 2**64)
            if cfg.mode == "factor"
            else None
        )
        self.cells = nn.ModuleList(
            ContextLSTMCell(
                e if layer == 0 else d,
                d,
                cfg.mode,
                k,
                cfg.rank,
                cfg.layer_norm,
                cfg.dropout,
                generator=factor_gen,
            )
            for layer in range(cfg.num_layers)
        )
        self.L = nn.Linear(d, e, bias=False) if e != d else None  # eq. 5 projection (e, d)
        self.output_embedding = None if cfg.tie_embeddings else nn.Parameter(torch.empty(vocab, e))
        self.b_out = nn.Parameter(torch.zeros(vocab))  # eq. 5
        # Class-factored output (exact; only the target's class is normalised in training).
        self.class_output = (
            ClassFactoredSoftmax(cfg.word_classes, e, never=(BOS_ID,)) if cfg.word_classes else None
        )
        # Units the full softmax never predicts (<s>: log 0, left out of the normaliser, as in
        # the class-factored output and the other families). Derived, not saved.
        self.register_buffer("never", torch.tensor([BOS_ID], dtype=torch.long), persistent=False)
        self.Q = nn.Parameter(torch.zeros(vocab, k)) if self.adaptive else None  # eq. 6
        # Sec. 2.3: a direct softmax bias per value (a one-hot c) for low-cardinality variables.
        self.one_hot_vars = tuple(v for v in cfg.context_vars if v.one_hot_bias)
        self.one_hot_bias = nn.ModuleList(
            nn.Embedding(len(v.values), vocab) for v in self.one_hot_vars
        )
        self.io_drop = nn.Dropout(cfg.io_dropout)
        self._reset_parameters()

    @torch.no_grad()
    def _reset_parameters(self) -> None:
        nn.init.uniform_(self.embedding.weight, -0.1, 0.1)
        if self.output_embedding is not None:
            nn.init.uniform_(self.output_embedding, -0.1, 0.1)
        for table in self.one_hot_bias:
            nn.init.zeros_(table.weight)

    # ----------------------------------------------------------------------------- context

    def _context_batch(self, context: ContextLike) -> dict[str, Tensor] | None:
        if context is None or not self.adaptive:
            return None  # an unadapted model ignores any context
        assert self.context_encoder is not None
        if isinstance(context, Mapping):
            if all(isinstance(v, Tensor) for v in context.values()):
                return dict(context)
            raise ValueError(
                "context must be an encoded batch {name: tensor} (see encode_records), "
                "a list of records, or None; got a mapping of non-tensors "
                "(wrap a single record in a list)"
            )
        if isinstance(context, (str, bytes)) or not isinstance(context, Sequence):
            raise ValueError(f"context: expected a batch, records or None, got {type(context)}")
        return self.context_encoder.encode_records(context)

    def encode_records(self, records: Sequence[Mapping[str, object] | None]) -> dict[str, Tensor]:
        """Records like ``{"genre": "news"}`` -> encoded batch (empty for unadapted models)."""
        if self.context_encoder is None:
            return {}
        return self.context_encoder.encode_records(records)

    def context_embedding(self, context: ContextLike, batch_size: int | None = None) -> Tensor:
        """c, shape (N, k) (sec. 2.1); missing values give the expected embedding."""
        if self.context_encoder is None:
            raise ValueError("an unadapted model has no context embedding")
        batch = self._context_batch(context)
        return self.context_encoder(batch, self.context_encoder.batch_size(batch, batch_size))

    def _output_bias(self, batch: Mapping[str, Tensor] | None, c: Tensor | None) -> Tensor:
        """b_out + Q c + sum_j B_j[f_j] (eq. 6 and sec. 2.3): (V,) or (N, V)."""
        if c is None or self.Q is None:
            return self.b_out
        bias = self.b_out + c @ self.Q.T  # (N, V)
        for var, table in zip(self.one_hot_vars, self.one_hot_bias, strict=True):
            ids = (batch or {}).get(var.name)
            if ids is None:
                ids = torch.full((c.shape[0],), -1, dtype=torch.long)
            ids = ids.to(c.device)
            p = torch.tensor(var.probabilities, dtype=c.dtype, device=c.device)  # (n_values,)
            expected = p @ table.weight  # bias of a missing value: E_v[B_j[v]]   (V,)
            rows = table(ids.clamp(min=0))  # (N, V)
            bias = bias + torch.where((ids < 0).unsqueeze(1), expected, rows)
        return bias

    def adapt(self, context: ContextLike = None, batch_size: int | None = None) -> AdaptedWeights:
        """Compute the context-dependent weights once (W', b' per layer, output bias).

        With one context (one row) the weights are shared by any batch, as for a plain LSTM.
        """
        batch = self._context_batch(context)
        if self.context_encoder is None:
            layers = tuple(cell.adapted(None) for cell in self.cells)
            return AdaptedWeights(layers, self._output_bias(None, None), None, None)
        # No context at all: the expected embedding is the same for every row, compute it once.
        n = self.context_encoder.batch_size(batch, batch_size) if batch else 1
        c = self.context_encoder(batch, n)  # (N, k)
        return self._adapted_from(c, self._output_bias(batch, c))

    def check_vector_form(self) -> None:
        """ValueError unless the context embedding alone adapts the model (the vector form:
        :meth:`adapt_embedding`, the ONNX vector exports): an unadapted model has none, and
        one-hot softmax biases (sec. 2.3) need the categorical values themselves."""
        if self.context_encoder is None:
            raise ValueError("an unadapted model has no context embedding")
        if self.one_hot_vars:
            names = [v.name for v in self.one_hot_vars]
            raise ValueError(
                f"context variable(s) {names} have one-hot softmax biases, which the context "
                "embedding does not carry: adapt to the records, or train with one_hot_bias "
                "false"
            )

    def adapt_embedding(self, c: Tensor) -> AdaptedWeights:
        """The weights of context embeddings ``c`` (N, k) given as such, one row each: what a
        decoder does with a context vector it computed once per utterance (the ONNX vector
        form). A model with one-hot softmax biases (sec. 2.3) needs the categorical values
        themselves: a ValueError."""
        self.check_vector_form()
        k = self.config.context_dim
        if not isinstance(c, Tensor) or c.dim() != 2 or c.shape[1] != k:
            raise ValueError(
                f"context embedding: expected a (N, {k}) tensor, got shape "
                f"{tuple(getattr(c, 'shape', ()))}"
            )
        c = c.to(device=self.b_out.device, dtype=self.b_out.dtype)
        return self._adapted_from(c, self._output_bias(None, c))

    def _adapted_from(self, c: Tensor, bias: Tensor) -> AdaptedWeights:
        """The weights of context embeddings c (N, k) and output biases (N, V)."""
        n = c.shape[0]
        if n != 1:  # a context per sequence: keep the FactorCell's A factored (cheaper)
            rows = tuple(cell.adapted_low_rank(c) for cell in self.cells)
            return AdaptedWeights(rows, bias, c, n)
        layers = tuple(cell.adapted(c) for cell in self.cells)
        # A single context: drop the leading axis so any batch size can share the weights.
        layers = tuple(
            (w.squeeze(0) if w.dim() == 3 else w, b.squeeze(0) if b.dim() == 2 else b)
            for w, b in layers
        )
        return AdaptedWeights(layers, bias.squeeze(0), c, None)

    @torch.no_grad()
    def adaptation_ratio(self, records: Sequence[Mapping[str, object] | None]) -> float | None:
        """||A||_F / ||W||_F of the FactorCell (eq. 3-4), mean over ``records``, worst layer.

        The adaptation should stay a correction of W: a ratio far above 1 means W' is mostly
        the product of the four context factors (measured 16-31 on AG News when Z_L and Z_R
        trained at W's learning rate; see ``TrainOptions.adapt_lr_scale``). None unless the
        mode is "factor".
        """
        if self.config.mode != "factor" or self.context_encoder is None or not records:
            return None
        batch = self._context_batch(list(records))
        c = self.context_encoder(batch, self.context_encoder.batch_size(batch, len(records)))
        worst = 0.0
        for cell in self.cells:
            assert cell.Z_L is not None and cell.Z_R is not None
            left = torch.einsum("nk,kar->nar", c, cell.Z_L)  # (N, a, r)
            right = torch.einsum("rgk,nk->nrg", cell.Z_R, c)  # (N, r, 3d)
            norms = torch.bmm(left, right).flatten(1).norm(dim=1)  # ||A|| per context (N,)
            worst = max(worst, float(norms.mean() / cell.W.norm()))
        return worst

    def adaptation_parameters(self) -> list[nn.Parameter]:
        """The FactorCell's adaptation tensors Z_L, Z_R of every layer (empty for other modes)."""
        return [
            p for cell in self.cells for p in (cell.Z_L, cell.Z_R) if isinstance(p, nn.Parameter)
        ]

    def context_bias_parameters(self) -> list[nn.Parameter]:
        """The context's softmax-bias parameters: Q (eq. 6) and the per-value bias tables
        (sec. 2.3); empty for an unadapted model."""
        params = [self.Q] if isinstance(self.Q, nn.Parameter) else []
        return params + [table.weight for table in self.one_hot_bias]

    # ------------------------------------------------------------------------------ model

    def init_state(self, batch_size: int) -> State:
        ref = self.b_out
        shape = (self.config.num_layers, batch_size, self.config.hidden_dim)
        zeros = torch.zeros(shape, dtype=ref.dtype, device=ref.device)
        return zeros, zeros.clone()

    def _check_tokens(self, tokens: Tensor) -> None:
        if not isinstance(tokens, Tensor) or tokens.dim() != 2 or tokens.dtype != torch.long:
            raise ValueError(
                f"tokens: expected a LongTensor (N, T), got "
                f"{getattr(tokens, 'dtype', type(tokens))} {tuple(getattr(tokens, 'shape', ()))}"
            )
        if tokens.numel() and (
            int(tokens.min()) < 0 or int(tokens.max()) >= self.config.vocab_size
        ):
            raise ValueError(f"tokens: ids must be in [0, {self.config.vocab_size})")

    def _run(
        self,
        tokens: Tensor,
        context: ContextLike,
        state: State | None,
        adapted: AdaptedWeights | None,
    ) -> tuple[Tensor, State, AdaptedWeights]:
        """Top-layer outputs (N, T, d), final state, and the weights used."""
        self._check_tokens(tokens)
        n = tokens.shape[0]
        if adapted is None:
            adapted = self.adapt(context, batch_size=n)
        if adapted.rows is not None and adapted.rows != n:
            raise ValueError(f"context has {adapted.rows} rows but tokens have {n} sequences")
        if state is None:
            state = self.init_state(n)
        h0, m0 = state
        expected = (self.config.num_layers, n, self.config.hidden_dim)
        if tuple(h0.shape) != expected or tuple(m0.shape) != expected:
            raise ValueError(f"state: expected (h, m) each of shape {expected}")
        x = self.io_drop(self.embedding(tokens))  # w_t                               (N, T, e)
        h_last, m_last = [], []
        for layer, (cell, (weight, bias)) in enumerate(
            zip(self.cells, adapted.layers, strict=True)
        ):
            x, (h, m) = cell(x, weight, bias, (h0[layer], m0[layer]))  # (N, T, d)
            h_last.append(h)
            m_last.append(m)
        x = self.io_drop(x)
        return x, (torch.stack(h_last), torch.stack(m_last)), adapted  # state (layers, N, d)

    def _logits(self, h: Tensor, bias: Tensor, vocab_ids: Tensor | None = None) -> Tensor:
        """Eq. 5/6: E L h + bias. h (N, T, d), bias (V,) | (N, V) -> (N, T, V or S)."""
        out_emb = self._output_embedding()
        if vocab_ids is not None:
            out_emb = out_emb[vocab_ids]  # (S, e)
            bias = bias[..., vocab_ids]  # (S,) | (N, S)
        projected = self.L(h) if self.L is not None else h  # L h_t                    (N, T, e)
        if bias.dim() == 1:
            return F.linear(projected, out_emb, bias)  # the bias inside the matmul  (N, T, V)
        return F.linear(projected, out_emb) + bias.unsqueeze(1)  # (N, 1, V) per sequence

    def forward(
        self,
        tokens: Tensor,
        context: ContextLike = None,
        state: State | None = None,
        *,
        adapted: AdaptedWeights | None = None,
    ) -> tuple[Tensor, State]:
        """Natural-log next-token distributions.

        tokens (N, T) long; context: encoded batch, list of records, or None (all missing);
        state: (h, m) each (layers, N, d), zeros when None. ``adapted`` (from :meth:`adapt`)
        skips recomputing the context-dependent weights, e.g. when streaming token by token.
        Returns log_probs (N, T, V) (log p of the token after each position) and the new state.
        """
        h, state, adapted = self._run(tokens, context, state, adapted)
        return self._log_probs(h, adapted.output_bias), state

    def _never_filled(self, logits: Tensor) -> Tensor:
        """``logits`` (..., V) with the units never predicted (<s>) at -inf."""
        return logits.index_fill(-1, self.never, -math.inf)

    def _output_embedding(self) -> Tensor:
        return self.embedding.weight if self.output_embedding is None else self.output_embedding

    def _log_probs(self, h: Tensor, bias: Tensor) -> Tensor:
        """Eq. 5/6 normalised: h (N, T, d), bias (V,) | (N, V) -> log p (N, T, V)."""
        if self.class_output is None:
            return F.log_softmax(self._never_filled(self._logits(h, bias)), dim=-1)
        projected = self.L(h) if self.L is not None else h  # (N, T, e)
        if bias.dim() == 2:
            bias = bias.unsqueeze(1)  # (N, 1, V)
        return self.class_output.log_probs(projected, self._output_embedding(), bias)

    def target_log_probs(
        self,
        inputs: Tensor,
        targets: Tensor,
        context: ContextLike = None,
        mask: Tensor | None = None,
    ) -> Tensor:
        """Natural-log probability of ``targets`` (N, T) after ``inputs`` (N, T): (N, T).

        Positions outside ``mask`` (N, T) bool are 0. With the full softmax this is the
        distribution of :meth:`forward` gathered at the targets; with the class-factored output
        only the targets' classes are computed (the cheap training path, same values).
        """
        h, _, adapted = self._run(inputs, context, None, None)
        bias = adapted.output_bias
        per_sequence = bias.dim() == 2  # an adapted model: a bias per sequence (N, V)
        if self.class_output is None and not uses_blocks(h, bias, table=per_sequence):
            picked = self._log_probs(h, bias).gather(2, targets.unsqueeze(2)).squeeze(2)
            return picked if mask is None else torch.where(mask, picked, torch.zeros_like(picked))
        projected = self.L(h) if self.L is not None else h  # (N, T, e)
        if mask is None:
            mask = torch.ones_like(targets, dtype=torch.bool)
        rows = mask.nonzero(as_tuple=True)
        if self.class_output is None:  # the full softmax by blocks of positions (CPU)
            z = projected[rows]  # (n, e)
            idx = torch.arange(z.shape[0], device=z.device)
            picked = target_log_softmax(
                z,
                self._output_embedding(),
                bias,
                idx,
                targets[rows],
                self.never,
                bias_of=rows[0] if per_sequence else None,
            )
        else:  # a bias per sequence (N, V) stays one: each position reads the columns it needs
            picked = self.class_output.log_prob(
                projected[rows],
                targets[rows],
                self._output_embedding(),
                bias,
                bias_rows=rows[0] if per_sequence else None,
            )
        out = picked.new_zeros(targets.shape)  # picked's dtype: float32 under bf16 autocast
        out[rows] = picked
        return out

    def step(
        self,
        tokens: Tensor,
        state: State,
        adapted: AdaptedWeights,
        contexts: Tensor | None = None,
    ) -> tuple[Tensor, State]:
        """The scorers' step: tokens (N, 1) -> top-layer outputs h (N, d) and the new state.

        ``adapted`` holds shared weights, or with ``contexts`` (N,) the weights of C contexts
        (``adapt`` of C records) of which row i takes number ``contexts[i]``: one batch of
        prefix-tree nodes under many contexts (the FactorCell's A stays factored).
        """
        if contexts is not None:
            adapted = adapted.take(contexts)
        h, state, _ = self._run(tokens, None, state, adapted)
        return h[:, -1], state

    def log_probs_at(
        self,
        h: Tensor,
        rows: Tensor,
        targets: Tensor,
        adapted: AdaptedWeights,
        contexts: Tensor | None = None,
    ) -> Tensor:
        """ln P(targets[j] | h[rows[j]]): h (N, d), rows and targets (M,) -> (M,).

        ``adapted`` holds weights shared by every row (one context), or with ``contexts`` (N,)
        those of C contexts, row i under context ``contexts[i]`` (as in :meth:`step`). With the
        class-factored output only the targets' classes are computed (the class softmax and one
        class's words per target instead of all V words: the scorer's cost at large V); with
        the full softmax each row's distribution is computed once however many targets it
        scores.
        """
        bias = adapted.output_bias
        if bias.dim() != 1:
            if contexts is None or bias.shape[0] != adapted.rows:
                raise ValueError(
                    "log_probs_at: expected weights shared by every row (one context), or "
                    "contexts (N,) naming rows of weights adapted to several"
                )
            return self._log_probs_by_context(h, rows, targets, bias, contexts)
        projected = self.L(h) if self.L is not None else h  # (N, e)
        if self.class_output is None:
            if uses_blocks(h, bias):  # each row's distribution once, in cache-sized blocks
                weight = self._output_embedding()
                return target_log_softmax(projected, weight, bias, rows, targets, self.never)
            log_probs = F.log_softmax(self._never_filled(self._logits(h, bias)), dim=-1)  # (N, V)
            return log_probs[rows, targets]
        return self.class_output.log_prob(projected[rows], targets, self._output_embedding(), bias)

    def _log_probs_by_context(
        self, h: Tensor, rows: Tensor, targets: Tensor, table: Tensor, contexts: Tensor
    ) -> Tensor:
        """:meth:`log_probs_at` with an output bias per context: ``table`` (C, V)."""
        projected = self.L(h) if self.L is not None else h  # (N, e)
        weight = self._output_embedding()
        if self.class_output is None:
            if projected.device.type == "cpu":  # blocks, the biases gathered into the buffer
                return table_log_softmax(
                    projected, weight, table, contexts, rows, targets, self.never
                )
            logits = self._never_filled(F.linear(projected, weight) + table[contexts])  # (N, V)
            log_probs = F.log_softmax(logits, dim=-1)
            return log_probs[rows, targets]
        # one call: each target reads its own context's bias columns from the table
        return self.class_output.log_prob(
            projected[rows], targets, weight, table, bias_rows=contexts[rows]
        )

    def hidden(
        self,
        tokens: Tensor,
        context: ContextLike = None,
        state: State | None = None,
        *,
        adapted: AdaptedWeights | None = None,
    ) -> Tensor:
        """Top-layer LSTM outputs h_t, (N, T, d), for a trainer's own (e.g. sampled) softmax or a
        scorer's cache; ``adapted`` (from :meth:`adapt`) as in :meth:`forward`."""
        return self._run(tokens, context, state, adapted)[0]

    def output_logits(
        self,
        h: Tensor,
        context: ContextLike = None,
        vocab_ids: Tensor | None = None,
    ) -> Tensor:
        """Unnormalised eq. 6 scores for h (N, T, d): (N, T, V), or (N, T, S) for vocab_ids (S,)."""
        batch = self._context_batch(context)
        c = None
        if self.context_encoder is not None:
            c = self.context_encoder(batch, self.context_encoder.batch_size(batch, h.shape[0]))
        return self._logits(h, self._output_bias(batch, c), vocab_ids)

    def score(
        self,
        inputs: Tensor,
        targets: Tensor,
        lengths: Tensor,
        context: ContextLike = None,
    ) -> Tensor:
        """Natural-log probabilities of targets (N, T) given inputs (N, T); 0 at t >= length."""
        valid = valid_positions(inputs, targets, lengths)
        return self.target_log_probs(inputs, targets.masked_fill(~valid, 0), context, valid)

    @torch.no_grad()
    def lock(self, record: Mapping[str, object] | None = None) -> ContextLSTM:
        """Fold one context into the weights; returns an unadapted model (a plain LSTM).

        Its log-probs equal this model's for ``record`` (None: every variable missing), and its
        cost per token is the unadapted model's: W' and b' of every layer and the output bias
        b_out + Q c + one-hot biases become its plain W, b and b_out.
        """
        adapted = self.adapt([record] if self.adaptive else None)
        cfg = replace(self.config, mode="unadapted", context_dim=0, rank=0, context_vars=())
        locked = ContextLSTM(cfg).to(device=self.b_out.device, dtype=self.b_out.dtype)
        own = self.state_dict()
        state = {name: own[name] for name in locked.state_dict()}  # shared: E, L, LN, ...
        for layer, (weight, bias) in enumerate(adapted.layers):
            state[f"cells.{layer}.W"] = weight  # W' = W + A                      (3d, a)
            state[f"cells.{layer}.b"] = bias  # b' = V c + b                      (3d,)
        state["b_out"] = adapted.output_bias  # b_out + Q c + one-hot            (V,)
        locked.load_state_dict(state, strict=True)
        locked.train(self.training)
        logger.debug("locked a %s model to context %r", self.config.mode, record)
        return locked

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())


register_model_type("context_lstm", LSTMConfig, ContextLSTM)
