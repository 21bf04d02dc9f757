"""ONNX graphs of the coupled-gate context LSTM, built with ``onnx.helper`` from numpy weights.

The weights come in with the context already folded in (:class:`LSTMWeights`: W' and b' of every
layer, the output bias ``b_out + Q c + one-hot biases``), so each graph is a plain LSTM language
model. With a leading context axis C on some of them (``multi``), the graph has an extra
``context_id`` input (N,) that gathers one context's weights per row.

What one graph computes (notation of :mod:`rescorer.lm_models.lstm.model`; N batch, T steps, e
embedding size, d hidden size, a = in + d, V vocabulary)::

    w_t           = E[x_t]                                             Gather           (N, T, e)
    gx            = w W'_x0^T + b'_0        all steps at once          MatMul, Add      (N, T, 3d)
    Scan over t (state h, m: (layers, N, d)), per layer l:
      gates       = gx_t + h_0 W'_h0^T                        (l = 0)                   (N, 3d)
                  = [h_{l-1}, h_l] W'_l^T + b'_l              (l > 0)                   (N, 3d)
      gates       = LN(i) g_i + s_i | LN(f) g_f + s_f | LN(o) g_o + s_o  (layer norm only)
      f           = sigmoid(f + 1);  m_l = m_l f + (1 - f) tanh(i);  h_l = tanh(m_l) sigmoid(o)
    h_top         = the top layer's h_t for every t            Scan output             (N, T, d)
    log p         = log_softmax(E_out L h_top + bias)          MatMul(s), Add, LogSoftmax (N,T,V)
                    (units never predicted, <s>, at -inf: out of the normaliser)

which is :meth:`rescorer.lm_models.lstm.model.ContextLSTM.forward` step for step (same operations in
the same order, float32). Per-context weights are gathered by ``context_id``: b' (N, 3d) and the
output bias (N, V) per row; W' (FactorCell) per row as (N, a, 3d), so that every step is a batched
``h (N, 1, a) @ W' (N, a, 3d)``. That reads N copies of W' per step, so the graph has an If:
when every row of the batch has the same context_id, W' is gathered once and the matmuls are
the shared ones (the cost of a single-context export); ``rescorer.lms.onnx`` batches by context
to get that path.

The vector form (``LSTMWeights.adaptation``, :class:`ContextAdaptation`): the weights are the
unadapted W, b, b_out plus the context parts V, Z_L, Z_R, Q, and the graph takes the context
embedding c itself as an input ``context_vector`` (N, k), computed once per utterance outside
(from the previous utterances' text, say). Per row, eq. 2-4 and 6 in the graph::

    b'    = b + c V^T                                                        (N, 3d)
    left  = c x_1 Z_L (N, a, r),  right = Z_R x_3 c (N, r, 3d)
    x W'^T = x W^T + (x left) right                  the FactorCell's A kept factored
    bias  = b_out + c Q^T                                                    (N, V)

(``ContextLSTM.adapt_embedding``, the scorer's low-rank path): each row its own context at the
cost of two thin batched matmuls per step.

The graphs:

* :func:`step_graph` -- inputs ``x`` (N, L) int64, ``h0``, ``c0`` (layers, N, d) float32
  [, ``context_id`` (N,) int64]; outputs ``log_softmax`` (N, L, V) (log p of the token after each
  input position), ``next_h0``, ``next_c0`` (layers, N, d). ``c0`` is the LSTM memory cell m. The
  icefall / sherpa-onnx RNN LM inputs (bound by position: x, state0, state1), the sequence form.
* :func:`score_token_graph` -- the step model reduced to icefall's ``score_token_onnx``:
  ``log_softmax`` (N, V) after x's last position (optionally in a decoder's token ids).
* :func:`nll_graph` -- icefall's state-less form: ``x``, ``x_lens`` -> ``nll`` (N,).
* :func:`scorer_graph` -- inputs ``x`` (N, L) = ``<s> w1 .. wn </s>`` padded, ``x_lens`` (N,)
  = n + 2 [, ``context_id``]; outputs ``token_logprobs`` (N, L - 1) = log p(x[:, t+1] | x[:, :t+1])
  with zeros at and beyond ``x_lens - 1``, and ``sentence_logprob`` (N,) their sum. Padding may
  be any valid id (the toolkit pads with ``</s>``): padded positions are masked in the graph.

All logs are natural logs.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17  # LayerNormalization needs 17
IR_VERSION = 8  # the IR of opset 17; newer IRs are refused by older ONNX Runtime releases
FORGET_BIAS = 1.0  # f <- sigmoid(f + 1), as rescorer.lm_models.lstm.model.FORGET_BIAS
LAYER_NORM_EPS = 1e-5  # as rescorer.lm_models.lstm.model.LAYER_NORM_EPS

INT64_MAX = np.iinfo(np.int64).max
VECTOR_INPUT = "context_vector"  # the vector form's input: the context embedding c (N, k)


def _f32(name: str, array: np.ndarray | None) -> np.ndarray | None:
    if array is None:
        return None
    out = np.ascontiguousarray(np.asarray(array, dtype=np.float32))
    if not np.all(np.isfinite(out)):
        raise ValueError(f"{name}: expected finite weights, got NaN or infinity")
    return out


def _check_shape(name: str, array: np.ndarray, shapes: Sequence[tuple[int, ...]]) -> None:
    if array.shape not in shapes:
        want = " or ".join(str(s) for s in shapes)
        raise ValueError(f"{name}: expected shape {want}, got {array.shape}")


@dataclass(frozen=True)
class LayerWeights:
    """One layer with its context folded in. A leading axis C means one set per context."""

    # W' = W + A: (3d, a) | (C, 3d, a), columns [input | recurrent] as in ContextLSTMCell.W.
    weight: np.ndarray
    # b' = V c + b: (3d,) | (C, 3d).
    bias: np.ndarray
    # Per-gate layer-norm gain (rows i, f, o): (3, d), or None without layer norm.
    ln_gain: np.ndarray | None = None
    # Per-gate layer-norm shift: (3, d), or None without layer norm.
    ln_shift: np.ndarray | None = None

    def __post_init__(self) -> None:
        for field in ("weight", "bias", "ln_gain", "ln_shift"):
            object.__setattr__(self, field, _f32(field, getattr(self, field)))
        if (self.ln_gain is None) != (self.ln_shift is None):
            raise ValueError("layer norm: expected both ln_gain and ln_shift, or neither")

    @property
    def per_context_weight(self) -> bool:
        return self.weight.ndim == 3

    @property
    def per_context_bias(self) -> bool:
        return self.bias.ndim == 2


@dataclass(frozen=True)
class ClassOutputWeights:
    """A class-factored output layer (:class:`rescorer.lm_models.output.ClassFactoredSoftmax`) as
    arrays.

    The units are read in segment order (``grouped``): first the words that are a class of their
    own (their class log-probability is their log-probability), then each cluster's words
    (normalised within the cluster and given the cluster's class log-probability).
    """

    # (V,) int64: the units in segment order (a permutation of the vocabulary).
    grouped: np.ndarray
    # Units per segment: the singleton words, then each cluster's.
    segment_sizes: tuple[int, ...]
    # (S,) int64: the class of each singleton word; (K,) int64: the class of each cluster.
    single_classes: np.ndarray
    cluster_classes: np.ndarray
    # (C,) int64: class id -> slot in concat([singleton word logits, cluster logits]).
    class_slot: np.ndarray
    # U (K, e), u (K,): the cluster logits.
    class_weight: np.ndarray
    class_bias: np.ndarray
    # Units never predicted (log-probability -inf), e.g. <s>.
    never: np.ndarray

    def __post_init__(self) -> None:
        for name in ("grouped", "single_classes", "cluster_classes", "class_slot", "never"):
            object.__setattr__(self, name, np.asarray(getattr(self, name), dtype=np.int64))
        for name in ("class_weight", "class_bias"):
            object.__setattr__(self, name, np.asarray(getattr(self, name), dtype=np.float32))
        v = len(self.grouped)
        if sorted(self.grouped.tolist()) != list(range(v)):
            raise ValueError("class output: grouped must be a permutation of the vocabulary")
        if sum(self.segment_sizes) != v or len(self.segment_sizes) != 1 + len(self.cluster_classes):
            raise ValueError("class output: segment sizes do not cover the vocabulary")
        if len(self.single_classes) != self.segment_sizes[0]:
            raise ValueError("class output: expected a class per singleton word")
        k = len(self.cluster_classes)
        _check_shape("class_bias", self.class_bias, [(k,)])
        if self.class_weight.ndim != 2 or self.class_weight.shape[0] != k:
            raise ValueError(f"class_weight: expected ({k}, e), got {self.class_weight.shape}")


@dataclass(frozen=True)
class ContextAdaptation:
    """The context-dependent parameters of a ContextLSTM, for graphs that take the context
    embedding c (N, k) as an input (the vector form) instead of folded weights."""

    # Per layer: V (3d, k) of b' = b + V c (ConcatCell, FactorCell), or None (SoftmaxBias).
    V: tuple[np.ndarray | None, ...]
    # Per layer: Z_L (k, a, r) and Z_R (r, 3d, k) of the FactorCell's A, or None.
    Z_L: tuple[np.ndarray | None, ...]
    Z_R: tuple[np.ndarray | None, ...]
    # Q (V, k): the context's part of the output bias, b_out + Q c.
    Q: np.ndarray

    def __post_init__(self) -> None:
        for name in ("V", "Z_L", "Z_R"):
            arrays = tuple(_f32(name, a) for a in getattr(self, name))
            object.__setattr__(self, name, arrays)
        object.__setattr__(self, "Q", _f32("Q", self.Q))
        if not len(self.V) == len(self.Z_L) == len(self.Z_R):
            raise ValueError("context adaptation: expected V, Z_L and Z_R for every layer")
        if self.Q.ndim != 2:
            raise ValueError(f"Q: expected (V, k), got shape {self.Q.shape}")
        for i, (zl, zr) in enumerate(zip(self.Z_L, self.Z_R, strict=True)):
            if (zl is None) != (zr is None):
                raise ValueError(f"layer {i}: expected both Z_L and Z_R, or neither")

    @property
    def dim(self) -> int:
        """k, the width of the context embedding."""
        return int(self.Q.shape[1])


@dataclass(frozen=True)
class LSTMWeights:
    """Everything a graph needs: a plain (context-folded) ContextLSTM as numpy arrays, or the
    unadapted one with its :class:`ContextAdaptation` (the vector form)."""

    # E (V, e): the input embedding.
    embedding: np.ndarray
    # E_out (V, e): the output embedding (E itself when tied).
    output_embedding: np.ndarray
    # L (e, d): the projection of h before the output layer, None when e == d.
    projection: np.ndarray | None
    # The LSTM layers, bottom first.
    layers: tuple[LayerWeights, ...]
    # b_out + Q c + one-hot biases: (V,) | (C, V).
    output_bias: np.ndarray
    # The class-factored output layer, None for the full softmax.
    class_output: ClassOutputWeights | None = None
    # The vector form: the context parts, applied in the graph from an input c (N, k); the
    # layers and output_bias are then the unadapted W, b and b_out. None: contexts folded in.
    adaptation: ContextAdaptation | None = None
    # Units the full softmax never predicts (log-probability -inf, left out of the normaliser),
    # e.g. <s> (the class-factored output carries its own).
    never: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        for field in ("embedding", "output_embedding", "projection", "output_bias"):
            object.__setattr__(self, field, _f32(field, getattr(self, field)))
        object.__setattr__(self, "layers", tuple(self.layers))
        object.__setattr__(self, "never", tuple(sorted({int(i) for i in self.never})))
        if self.embedding.ndim != 2:
            raise ValueError(f"embedding: expected (V, e), got shape {self.embedding.shape}")
        if not self.layers:
            raise ValueError("expected at least one LSTM layer, got none")
        v, e = self.embedding.shape
        d = self.hidden_dim
        c = self.num_contexts
        _check_shape("output_embedding", self.output_embedding, [(v, e)])
        if self.projection is not None:
            _check_shape("projection", self.projection, [(e, d)])
        elif e != d:
            raise ValueError(f"projection: expected an (e, d) = ({e}, {d}) matrix since e != d")
        stacked = [(c,)] if c is not None else []
        _check_shape("output_bias", self.output_bias, [(v,), *[s + (v,) for s in stacked]])
        if any(not 0 <= i < v for i in self.never):
            raise ValueError(f"never: expected unit ids in [0, {v}), got {list(self.never)}")
        if self.class_output is not None:
            if len(self.class_output.grouped) != v:
                raise ValueError(
                    f"class output: expected {v} units, got {len(self.class_output.grouped)}"
                )
            _check_shape(
                "class_weight",
                self.class_output.class_weight,
                [(len(self.class_output.cluster_classes), e)],
            )
        for i, layer in enumerate(self.layers):
            a = (e if i == 0 else d) + d
            _check_shape(
                f"layer {i} weight", layer.weight, [(3 * d, a), *[s + (3 * d, a) for s in stacked]]
            )
            _check_shape(
                f"layer {i} bias", layer.bias, [(3 * d,), *[s + (3 * d,) for s in stacked]]
            )
            if layer.ln_gain is not None and layer.ln_shift is not None:
                _check_shape(f"layer {i} ln_gain", layer.ln_gain, [(3, d)])
                _check_shape(f"layer {i} ln_shift", layer.ln_shift, [(3, d)])
        if self.adaptation is not None:
            self._check_adaptation(self.adaptation, e, d, v)

    def _check_adaptation(self, ad: ContextAdaptation, e: int, d: int, v: int) -> None:
        if self.num_contexts is not None:
            raise ValueError("the vector form takes unadapted weights, not per-context ones")
        if len(ad.V) != len(self.layers):
            raise ValueError(f"context adaptation: {len(ad.V)} layers, the LSTM {len(self.layers)}")
        kd = ad.dim
        _check_shape("Q", ad.Q, [(v, kd)])
        for i, (vm, zl, zr) in enumerate(zip(ad.V, ad.Z_L, ad.Z_R, strict=True)):
            a = (e if i == 0 else d) + d
            if vm is not None:
                _check_shape(f"layer {i} V", vm, [(3 * d, kd)])
            if zl is not None and zr is not None:
                r = zl.shape[-1] if zl.ndim == 3 else -1
                _check_shape(f"layer {i} Z_L", zl, [(kd, a, r)])
                _check_shape(f"layer {i} Z_R", zr, [(r, 3 * d, kd)])

    @property
    def vocab_size(self) -> int:
        return int(self.embedding.shape[0])

    @property
    def embed_dim(self) -> int:
        return int(self.embedding.shape[1])

    @property
    def hidden_dim(self) -> int:
        return int(self.layers[0].weight.shape[-2]) // 3

    @property
    def num_layers(self) -> int:
        return len(self.layers)

    @property
    def num_contexts(self) -> int | None:
        """C when some weights carry a context axis, else None."""
        sizes = {self.output_bias.shape[0]} if self.output_bias.ndim == 2 else set()
        for layer in self.layers:
            if layer.per_context_weight:
                sizes.add(layer.weight.shape[0])
            if layer.per_context_bias:
                sizes.add(layer.bias.shape[0])
        if len(sizes) > 1:
            raise ValueError(f"per-context weights disagree on the number of contexts: {sizes}")
        return sizes.pop() if sizes else None


class _Builder:
    """Nodes of one graph (the main graph, an If branch or a Scan body).

    Initializers always go to the root (main) builder, once per name, so that subgraphs read
    them from the outer scope; names are unique across the main graph and all its subgraphs.
    """

    def __init__(
        self, counter: Iterator[int], prefix: str = "", root: _Builder | None = None
    ) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self._names: set[str] = set()
        self._counter = counter
        self._prefix = prefix
        self._root = root

    def sub(self, prefix: str) -> _Builder:
        """A builder for a subgraph of this one."""
        return _Builder(self._counter, self._prefix + prefix, self._root or self)

    def fresh(self, hint: str) -> str:
        return f"{self._prefix}{hint}_{next(self._counter)}"

    def const(self, name: str, array: np.ndarray) -> str:
        root = self._root or self
        if name not in root._names:
            root._names.add(name)
            root.initializers.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def op(self, op_type: str, inputs: Sequence[str], hint: str = "", **attrs: object) -> str:
        (out,) = self.ops(op_type, inputs, 1, hint, **attrs)
        return out

    def ops(
        self, op_type: str, inputs: Sequence[str], n_out: int, hint: str = "", **attrs: object
    ) -> list[str]:
        outs = [self.fresh(hint or op_type.lower()) for _ in range(n_out)]
        self.nodes.append(
            helper.make_node(
                op_type,
                list(inputs),
                outs,
                name=self.fresh(f"{hint or op_type.lower()}_node"),
                **attrs,
            )
        )
        return outs


class _Consts:
    """Small shared constants (initializers of the main graph)."""

    def __init__(self, b: _Builder) -> None:
        self._b = b

    @property
    def axis0(self) -> str:
        return self._b.const("axes_0", np.array([0], dtype=np.int64))

    @property
    def axis1(self) -> str:
        return self._b.const("axes_1", np.array([1], dtype=np.int64))

    @property
    def axis2(self) -> str:
        return self._b.const("axes_2", np.array([2], dtype=np.int64))

    @property
    def one(self) -> str:
        return self._b.const("one_f", np.array(1.0, dtype=np.float32))

    @property
    def zero(self) -> str:
        return self._b.const("zero_f", np.array(0.0, dtype=np.float32))


def _per_row(b: _Builder, table: str, context_id: str | None, hint: str) -> str:
    """Gather one context's slice per row: (C, ...) -> (N, ...)."""
    if context_id is None:
        raise ValueError(f"{hint}: per-context weights need a context_id input")
    return b.op("Gather", [table, context_id], hint, axis=0)


def _lstm(
    b: _Builder,
    w: LSTMWeights,
    k: _Consts,
    x: str,
    h0: str,
    m0: str,
    context_id: str | None,
) -> tuple[str, str, str]:
    """Embedding, input gates and the Scan over time: (h_top (N, T, d), h_T, m_T).

    With per-context W' (FactorCell, multi-context) the recurrence is built twice under an If:
    when every row has the same context_id, that context's W' is gathered once and the matmuls
    are the shared ones (as cheap as a single-context export); otherwise W' is gathered per row,
    (N, a, 3d), and every step is a batched matmul.
    """
    emb = b.op("Gather", [b.const("embedding", w.embedding), x], "emb", axis=0)  # (N, T, e)
    if w.adaptation is not None:  # the vector form: context_id is the context_vector input
        if context_id is None:
            raise ValueError("the vector form needs the context_vector input")
        rows = _row_adaptation(b, w, w.adaptation, context_id)

        def never(sub: _Builder, table: str, hint: str) -> str:
            raise ValueError(f"{hint}: the vector form has no per-context tables")

        return _recurrence(b, w, k, emb, h0, m0, never, per_row=False, vector=rows)
    if context_id is None or not any(layer.per_context_weight for layer in w.layers):

        def rows(sub: _Builder, table: str, hint: str) -> str:
            return _per_row(sub, table, context_id, hint)  # (C, ...) -> (N, ...)

        return _recurrence(b, w, k, emb, h0, m0, rows, per_row=True)
    # One context for the whole batch?                                       scalars, bool
    lo = b.op("ReduceMin", [context_id], "cid_min", keepdims=0)
    hi = b.op("ReduceMax", [context_id], "cid_max", keepdims=0)
    same = b.op("Equal", [lo, hi], "one_context")

    def uniform(sub: _Builder, table: str, hint: str) -> str:
        return sub.op("Gather", [table, lo], hint, axis=0)  # (C, ...) -> (...)

    def rows(sub: _Builder, table: str, hint: str) -> str:
        return sub.op("Gather", [table, context_id], hint, axis=0)  # (C, ...) -> (N, ...)

    branches = []
    for name, select, per_row in (("one", uniform, False), ("rows", rows, True)):
        sub = b.sub(f"{name}/")
        outs = _recurrence(sub, w, k, emb, h0, m0, select, per_row=per_row)
        d = w.hidden_dim
        shapes = (["N", "T", d], [w.num_layers, "N", d], [w.num_layers, "N", d])
        branches.append(
            helper.make_graph(
                sub.nodes,
                f"lstm_{name}_context",
                [],
                [
                    helper.make_tensor_value_info(o, TensorProto.FLOAT, shape)
                    for o, shape in zip(outs, shapes, strict=True)
                ],
            )
        )
    h_all, h_T, m_T = b.ops(
        "If", [same], 3, "lstm", then_branch=branches[0], else_branch=branches[1]
    )
    return h_all, h_T, m_T


Select = Callable[[_Builder, str, str], str]


@dataclass(frozen=True)
class _RowAdaptation:
    """One layer's weights from the context embedding, per row (graph value names)."""

    bias: str | None  # b' = b + c V^T (N, 3d); None: the shared b
    left: str | None  # c x_1 Z_L (N, a, r); None: no FactorCell
    right: str | None  # Z_R x_3 c (N, r, 3d)


def _row_adaptation(
    b: _Builder, w: LSTMWeights, ad: ContextAdaptation, c: str
) -> list[_RowAdaptation]:
    """Eq. 2-3 for every row's c (N, k): each layer's b', and A's factors (kept factored)."""
    kd, d = ad.dim, w.hidden_dim
    out = []
    for i, (layer, vm, zl, zr) in enumerate(zip(w.layers, ad.V, ad.Z_L, ad.Z_R, strict=True)):
        bias = left = right = None
        if vm is not None:  # b' = b + c V^T                                             (N, 3d)
            cv = b.op("MatMul", [c, b.const(f"l{i}_V_t", vm.T.copy())], f"l{i}_cV")
            bias = b.op("Add", [cv, b.const(f"l{i}_b", layer.bias)], f"l{i}_b_rows")
        if zl is not None and zr is not None:
            a, r = zl.shape[1], zl.shape[2]
            zl_flat = b.const(f"l{i}_Z_L", zl.reshape(kd, a * r))  # (k, a r)
            zr_flat = b.const(
                f"l{i}_Z_R", np.ascontiguousarray(zr.transpose(2, 0, 1)).reshape(kd, r * 3 * d)
            )
            left = b.op(
                "Reshape",
                [b.op("MatMul", [c, zl_flat]), b.const(f"l{i}_shape_nar", np.array([0, a, r]))],
                f"l{i}_left",
            )  # c x_1 Z_L                                                               (N, a, r)
            right = b.op(
                "Reshape",
                [b.op("MatMul", [c, zr_flat]), b.const(f"l{i}_shape_nrg", np.array([0, r, 3 * d]))],
                f"l{i}_right",
            )  # Z_R x_3 c                                                              (N, r, 3d)
        out.append(_RowAdaptation(bias, left, right))
    return out


def _cols(b: _Builder, x: str, lo: int, hi: int, axis: str, hint: str) -> str:
    """x[..., lo:hi, ...] along ``axis`` (a 1-element int64 initializer name)."""
    start = b.const(f"slice_{lo}", np.array([lo], dtype=np.int64))
    end = b.const(f"slice_{hi}", np.array([hi], dtype=np.int64))
    return b.op("Slice", [x, start, end, axis], hint)


def _low_rank(b: _Builder, x: str, left: str, right: str, k: _Consts, hint: str) -> str:
    """(x left) right for x (N, in), left (N, in, r), right (N, r, out): (N, out)."""
    x3 = b.op("Unsqueeze", [x, k.axis1], f"{hint}_x")  # (N, 1, in)
    low = b.op("MatMul", [b.op("MatMul", [x3, left], f"{hint}_l"), right], f"{hint}_lr")
    return b.op("Squeeze", [low, k.axis1], hint)  # (N, out)


def _recurrence(
    b: _Builder,
    w: LSTMWeights,
    k: _Consts,
    emb: str,
    h0: str,
    m0: str,
    select: Select,
    per_row: bool,
    vector: Sequence[_RowAdaptation] | None = None,
) -> tuple[str, str, str]:
    """Input gates of layer 0 and the Scan over time: (h_top (N, T, d), h_T, m_T).

    ``select(builder, table, hint)`` picks the context's slice of a per-context table (C, ...);
    ``per_row`` says whether it keeps a row axis (N, ...) or gives one slice for every row.
    ``vector`` (the vector form): each layer's b' and A's factors per row, the weights shared.
    """
    rows = (
        list(vector) if vector is not None else [_RowAdaptation(None, None, None)] * len(w.layers)
    )
    d, n_layers = w.hidden_dim, w.num_layers
    e = w.embed_dim

    # Layer 0's input half for every step at once: w W'_x^T + b'                      (N, T, 3d)
    first = w.layers[0]
    w_t = np.swapaxes(first.weight, -1, -2)  # W'^T: (a, 3d) | (C, a, 3d)
    w_x = b.const("l0_w_x_t", np.ascontiguousarray(w_t[..., :e, :]))  # (e, 3d) | (C, e, 3d)
    w_h = b.const("l0_w_h_t", np.ascontiguousarray(w_t[..., e:, :]))  # (d, 3d) | (C, d, 3d)
    if first.per_context_weight:
        w_x = select(b, w_x, "l0_w_x_c")  # (e, 3d) | (N, e, 3d)
        w_h = select(b, w_h, "l0_w_h_c")  # (d, 3d) | (N, d, 3d)
    gx = b.op("MatMul", [emb, w_x], "l0_gx")  # (N, T, 3d), batched when per row
    left_h = None  # the vector form's factor of the recurrent half (N, d, r)
    if rows[0].left is not None and rows[0].right is not None:  # + (w left_x) right   (N, T, 3d)
        left_x = _cols(b, rows[0].left, 0, e, k.axis1, "l0_left_x")  # (N, e, r)
        left_h = _cols(b, rows[0].left, e, e + d, k.axis1, "l0_left_h")  # (N, d, r)
        low = b.op("MatMul", [b.op("MatMul", [emb, left_x]), rows[0].right], "l0_gx_low")
        gx = b.op("Add", [gx, low], "l0_gx_lr")
    bias0 = b.const("l0_b", first.bias)  # (3d,) | (C, 3d)
    if first.per_context_bias:
        bias0 = select(b, bias0, "l0_b_c")  # (3d,) | (N, 3d)
        if per_row:
            bias0 = b.op("Unsqueeze", [bias0, k.axis1], "l0_b_n13d")  # (N, 1, 3d)
    elif rows[0].bias is not None:
        bias0 = b.op("Unsqueeze", [rows[0].bias, k.axis1], "l0_b_n13d")  # (N, 1, 3d)
    gx = b.op("Add", [gx, bias0], "l0_gx_b")  # (N, T, 3d)

    # Weights of the upper layers, selected outside the loop when per context.
    upper: list[tuple[str, str, bool]] = []  # (W'^T (a, 3d) | (N, a, 3d), b', per-row W)
    for i, layer in enumerate(w.layers[1:], start=1):
        wt = b.const(f"l{i}_w_t", np.ascontiguousarray(np.swapaxes(layer.weight, -1, -2)))
        if layer.per_context_weight:
            wt = select(b, wt, f"l{i}_w_c")  # (a, 3d) | (N, a, 3d)
        bias = b.const(f"l{i}_b", layer.bias)
        if layer.per_context_bias:
            bias = select(b, bias, f"l{i}_b_c")  # (3d,) | (N, 3d)
        elif rows[i].bias is not None:
            bias = rows[i].bias  # (N, 3d)
        upper.append((wt, bias, layer.per_context_weight and per_row))

    # The time loop: one step of every layer.
    body = b.sub("s/")
    h_prev, m_prev, gx_t = body.fresh("h_prev"), body.fresh("m_prev"), body.fresh("gx_t")
    below = ""
    h_new: list[str] = []
    m_new: list[str] = []
    for i, layer in enumerate(w.layers):
        idx = b.const(f"layer_index_{i}", np.array(i, dtype=np.int64))
        h = body.op("Gather", [h_prev, idx], f"h{i}", axis=0)  # (N, d)
        m = body.op("Gather", [m_prev, idx], f"m{i}", axis=0)  # (N, d)
        if i == 0:
            batched = first.per_context_weight and per_row
            rec = _times(body, h, w_h, batched, k, "l0_hw")  # h W'_h^T                (N, 3d)
            if left_h is not None and rows[0].right is not None:  # + (h left_h) right
                low = _low_rank(body, h, left_h, rows[0].right, k, "l0_hw_low")
                rec = body.op("Add", [rec, low], "l0_hw_lr")
            gates = body.op("Add", [gx_t, rec], "l0_gates")  # (N, 3d)
        else:
            wt, bias, batched = upper[i - 1]
            xh = body.op("Concat", [below, h], f"l{i}_xh", axis=1)  # [h_{l-1}, h_l]  (N, 2d)
            gates = _times(body, xh, wt, batched, k, f"l{i}_xhw")  # (N, 3d)
            left, right = rows[i].left, rows[i].right
            if left is not None and right is not None:  # + (xh left) right
                low = _low_rank(body, xh, left, right, k, f"l{i}_xhw_low")
                gates = body.op("Add", [gates, low], f"l{i}_xhw_lr")
            gates = body.op("Add", [gates, bias], f"l{i}_gates")  # (N, 3d)
        if layer.ln_gain is not None and layer.ln_shift is not None:
            # Per-gate layer norm: (N, 3d) -> (N, 3, d), normalise each gate over its d units.
            shape3 = b.const(f"l{i}_shape_n3d", np.array([0, 3, d], dtype=np.int64))
            shape1 = b.const(f"l{i}_shape_n_3d", np.array([0, 3 * d], dtype=np.int64))
            ones = b.const(f"l{i}_ln_unit", np.ones(d, dtype=np.float32))
            per_gate = body.op("Reshape", [gates, shape3], f"l{i}_per_gate")  # (N, 3, d)
            normed = body.op(
                "LayerNormalization", [per_gate, ones], f"l{i}_ln", axis=-1, epsilon=LAYER_NORM_EPS
            )  # (N, 3, d)
            gain = b.const(f"l{i}_ln_gain", layer.ln_gain)  # (3, d)
            shift = b.const(f"l{i}_ln_shift", layer.ln_shift)  # (3, d)
            scaled = body.op("Mul", [normed, gain], f"l{i}_ln_g")
            shifted = body.op("Add", [scaled, shift], f"l{i}_ln_s")
            gates = body.op("Reshape", [shifted, shape1], f"l{i}_gates_ln")  # (N, 3d)
        gi, gf, go = body.ops("Split", [gates], 3, f"l{i}_gate", axis=1)  # each (N, d)
        fb = b.const(f"l{i}_forget_bias", np.array(FORGET_BIAS, dtype=np.float32))
        f = body.op("Sigmoid", [body.op("Add", [gf, fb])], f"l{i}_f")  # sigmoid(f + 1)
        keep = body.op("Mul", [m, f], f"l{i}_keep")  # m_{t-1} f
        write = body.op("Sub", [k.one, f], f"l{i}_1mf")  # 1 - f
        cand = body.op("Tanh", [gi], f"l{i}_cand")  # tanh(i)
        m_t = body.op("Add", [keep, body.op("Mul", [write, cand])], f"l{i}_m")  # (N, d)
        h_t = body.op(
            "Mul", [body.op("Tanh", [m_t]), body.op("Sigmoid", [go])], f"l{i}_h"
        )  # tanh(m) sigmoid(o)                                                          (N, d)
        h_new.append(body.op("Unsqueeze", [h_t, k.axis0], f"l{i}_h1"))  # (1, N, d)
        m_new.append(body.op("Unsqueeze", [m_t, k.axis0], f"l{i}_m1"))
        below = h_t
    h_next = body.op("Concat", h_new, "h_next", axis=0) if n_layers > 1 else h_new[0]
    m_next = body.op("Concat", m_new, "m_next", axis=0) if n_layers > 1 else m_new[0]
    h_out = body.op("Identity", [below], "h_top")  # (N, d), stacked over t by the Scan
    state = [n_layers, "N", d]
    body_graph = helper.make_graph(
        body.nodes,
        "lstm_step",
        [
            helper.make_tensor_value_info(h_prev, TensorProto.FLOAT, state),
            helper.make_tensor_value_info(m_prev, TensorProto.FLOAT, state),
            helper.make_tensor_value_info(gx_t, TensorProto.FLOAT, ["N", 3 * d]),
        ],
        [
            helper.make_tensor_value_info(h_next, TensorProto.FLOAT, state),
            helper.make_tensor_value_info(m_next, TensorProto.FLOAT, state),
            helper.make_tensor_value_info(h_out, TensorProto.FLOAT, ["N", d]),
        ],
    )
    h_T, m_T, h_all = b.ops(
        "Scan",
        [h0, m0, gx],
        3,
        "scan",
        body=body_graph,
        num_scan_inputs=1,
        scan_input_axes=[1],
        scan_output_axes=[1],
    )  # (layers, N, d), (layers, N, d), (N, T, d)
    return h_all, h_T, m_T


def _times(b: _Builder, x: str, wt: str, per_row: bool, k: _Consts, hint: str) -> str:
    """x W^T for x (N, in): W^T shared (in, out), or one per row (N, in, out) (batched)."""
    if not per_row:
        return b.op("MatMul", [x, wt], hint)  # (N, out)
    x3 = b.op("Unsqueeze", [x, k.axis1], f"{hint}_x")  # (N, 1, in)
    y3 = b.op("MatMul", [x3, wt], f"{hint}_bmm")  # (N, 1, in) @ (N, in, out) = (N, 1, out)
    return b.op("Squeeze", [y3, k.axis1], hint)  # (N, out)


def _log_softmax(
    b: _Builder, w: LSTMWeights, k: _Consts, h_all: str, context_id: str | None
) -> str:
    """Eq. 5/6 over every step: log_softmax(E_out L h + bias), (N, T, d) -> (N, T, V)."""
    h = h_all
    if w.projection is not None:
        h = b.op("MatMul", [h, b.const("projection_t", w.projection.T.copy())], "Lh")  # (N,T,e)
    out_t = b.const("output_embedding_t", w.output_embedding.T.copy())  # (e, V)
    logits = b.op("MatMul", [h, out_t], "logits")  # (N, T, V)
    bias = b.const("output_bias", w.output_bias)  # (V,) | (C, V)
    if w.adaptation is not None:  # the vector form: b_out + c Q^T per row            (N, V)
        if context_id is None:
            raise ValueError("the vector form needs the context_vector input")
        q_t = b.const("Q_t", w.adaptation.Q.T.copy())  # (k, V)
        rows = b.op("Add", [b.op("MatMul", [context_id, q_t], "cQ"), bias], "output_bias_rows")
        bias = b.op("Unsqueeze", [rows, k.axis1], "output_bias_n1v")  # (N, 1, V)
    elif w.output_bias.ndim == 2:
        rows = _per_row(b, bias, context_id, "output_bias_rows")  # (N, V)
        bias = b.op("Unsqueeze", [rows, k.axis1], "output_bias_n1v")  # (N, 1, V)
    logits = b.op("Add", [logits, bias], "logits_b")  # (N, T, V)
    if w.class_output is None:
        if w.never:  # never predicted (<s>): -inf, out of the normaliser
            mask = np.zeros(len(w.output_embedding), dtype=np.float32)
            mask[list(w.never)] = -np.inf
            logits = b.op("Add", [logits, b.const("never_mask", mask)], "logits_never")
        return b.op("LogSoftmax", [logits], "log_probs", axis=-1)  # (N, T, V)
    return _class_log_probs(b, w.class_output, h, logits)


def _class_log_probs(b: _Builder, co: ClassOutputWeights, z: str, logits: str) -> str:
    """ClassFactoredSoftmax.log_probs: log P(c(w)|h) + log P(w|c(w),h), (N, T, V).

    Singleton classes take their word's logit as class logit; each cluster is normalised over
    its own words (ReduceLogSumExp). Pieces are built in segment order and put back in
    vocabulary order by one Gather.
    """
    if len(co.never):
        mask = np.zeros(len(co.grouped), dtype=np.float32)
        mask[co.never] = -np.inf
        logits = b.op("Add", [logits, b.const("never_mask", mask)], "logits_never")  # (N, T, V)
    sizes = co.segment_sizes
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    single_words = co.grouped[: sizes[0]]
    single = b.op("Gather", [logits, b.const("single_words", single_words)], "single", axis=2)
    cluster_w = b.const("class_weight_t", co.class_weight.T.copy())  # (e, K)
    clusters = b.op("Add", [b.op("MatMul", [z, cluster_w]), b.const("class_bias", co.class_bias)])
    class_logits = b.op("Concat", [single, clusters], "class_logits_slots", axis=2)  # (N, T, C)
    class_logits = b.op(
        "Gather", [class_logits, b.const("class_slot", co.class_slot)], "class_logits", axis=2
    )
    class_lp = b.op("LogSoftmax", [class_logits], "class_log_probs", axis=-1)  # (N, T, C)
    pieces = [
        b.op(
            "Gather", [class_lp, b.const("single_classes", co.single_classes)], "lp_single", axis=2
        )
    ]
    for k, cls in enumerate(co.cluster_classes.tolist()):
        words = co.grouped[starts[k + 1] : starts[k + 1] + sizes[k + 1]]
        part = b.op("Gather", [logits, b.const(f"cluster{k}_words", words)], f"c{k}", axis=2)
        lse = b.op("ReduceLogSumExp", [part], f"c{k}_lse", axes=[2], keepdims=1)  # (N, T, 1)
        lp_class = b.op(
            "Gather", [class_lp, b.const(f"cluster{k}_class", np.array([cls]))], f"c{k}_cls", axis=2
        )  # (N, T, 1)
        pieces.append(b.op("Add", [b.op("Sub", [part, lse]), lp_class], f"lp_c{k}"))
    grouped = b.op("Concat", pieces, "log_probs_grouped", axis=2)  # (N, T, V) segment order
    inverse = np.empty_like(co.grouped)
    inverse[co.grouped] = np.arange(len(co.grouped))
    return b.op("Gather", [grouped, b.const("vocab_order", inverse)], "log_probs", axis=2)


def _inputs(w: LSTMWeights, with_context: bool) -> tuple[list[onnx.ValueInfoProto], str | None]:
    """The context input of a graph: context_id (N,) of a multi-context one, context_vector
    (N, k) of the vector form (``with_context`` is then implied), or none."""
    if w.adaptation is not None:
        shape = ["N", w.adaptation.dim]
        return [helper.make_tensor_value_info(VECTOR_INPUT, TensorProto.FLOAT, shape)], VECTOR_INPUT
    if w.num_contexts is not None and not with_context:
        raise ValueError(
            f"weights hold {w.num_contexts} contexts: build a multi-context graph (context_id)"
        )
    if not with_context:
        return [], None
    return [helper.make_tensor_value_info("context_id", TensorProto.INT64, ["N"])], "context_id"


def step_graph(w: LSTMWeights, with_context: bool = False) -> onnx.GraphProto:
    """The step model: (x, h0, c0 [, context_id | context_vector]) -> (log_softmax, next_h0,
    next_c0)."""
    extra, context_id = _inputs(w, with_context)
    b = _Builder(itertools.count())
    k = _Consts(b)
    v = w.vocab_size
    h_all, h_T, m_T = _lstm(b, w, k, "x", "h0", "c0", context_id)
    log_probs = _log_softmax(b, w, k, h_all, context_id)
    return _stateful_graph(b, "context_lstm_step", (log_probs, h_T, m_T), w, ["N", "L", v], extra)


def _stateful_graph(
    b: _Builder,
    name: str,
    outputs: tuple[str, str, str],
    w: LSTMWeights,
    log_probs_shape: list[int | str],
    extra: Sequence[onnx.ValueInfoProto] = (),
) -> onnx.GraphProto:
    """The graph of a stateful export: inputs x (N, L), h0, c0 (layers, N, d) (+ ``extra``),
    outputs log_softmax (``log_probs_shape``), next_h0, next_c0 from the nodes ``outputs``."""
    for node, out in zip(outputs, ("log_softmax", "next_h0", "next_c0"), strict=True):
        b.nodes.append(helper.make_node("Identity", [node], [out], name=f"out_{out}"))
    state = [w.num_layers, "N", w.hidden_dim]
    return helper.make_graph(
        b.nodes,
        name,
        [
            helper.make_tensor_value_info("x", TensorProto.INT64, ["N", "L"]),
            helper.make_tensor_value_info("h0", TensorProto.FLOAT, state),
            helper.make_tensor_value_info("c0", TensorProto.FLOAT, state),
            *extra,
        ],
        [
            helper.make_tensor_value_info("log_softmax", TensorProto.FLOAT, log_probs_shape),
            helper.make_tensor_value_info("next_h0", TensorProto.FLOAT, state),
            helper.make_tensor_value_info("next_c0", TensorProto.FLOAT, state),
        ],
        initializer=b.initializers,
    )


def _token_scores(
    b: _Builder, w: LSTMWeights, k: _Consts, x: str, x_lens: str, context_id: str | None
) -> str:
    """Log-probs of x[:, 1:] after x[:, :-1] from a zero state, 0 past each x_lens - 1: (N, L-1)."""
    d, layers = w.hidden_dim, w.num_layers
    # inputs = x[:, :-1], targets = x[:, 1:]                                          (N, L-1)
    start0 = b.const("start_0", np.array([0], dtype=np.int64))
    start1 = b.const("start_1", np.array([1], dtype=np.int64))
    end_m1 = b.const("end_m1", np.array([-1], dtype=np.int64))
    end_max = b.const("end_max", np.array([INT64_MAX], dtype=np.int64))
    inputs = b.op("Slice", [x, start0, end_m1, k.axis1], "inputs")
    targets = b.op("Slice", [x, start1, end_max, k.axis1], "targets")
    # Zero initial state (layers, N, d).
    n = b.op("Shape", [x], "n", start=0, end=1)  # (1,)
    state_shape = b.op(
        "Concat",
        [
            b.const("n_layers", np.array([layers], dtype=np.int64)),
            n,
            b.const("hidden", np.array([d], dtype=np.int64)),
        ],
        "state_shape",
        axis=0,
    )
    zeros = b.op(
        "ConstantOfShape",
        [state_shape],
        "zeros",
        value=numpy_helper.from_array(np.zeros(1, dtype=np.float32)),
    )
    h_all, _, _ = _lstm(b, w, k, inputs, zeros, zeros, context_id)
    log_probs = _log_softmax(b, w, k, h_all, context_id)  # (N, L-1, V)
    picked = b.op(
        "GatherElements", [log_probs, b.op("Unsqueeze", [targets, k.axis2])], "picked", axis=2
    )  # (N, L-1, 1)
    picked = b.op("Squeeze", [picked, k.axis2], "picked_nt")  # (N, L-1)
    # Mask positions t >= x_lens - 1 (the padding after </s>).
    steps = b.op("Squeeze", [b.op("Shape", [targets], "t", start=1, end=2), k.axis0], "steps")
    t_range = b.op(
        "Range",
        [
            b.const("zero_i", np.array(0, dtype=np.int64)),
            steps,
            b.const("one_i", np.array(1, dtype=np.int64)),
        ],
        "t_range",
    )  # (L-1,)
    n_scored = b.op("Sub", [x_lens, b.const("one_i64", np.array(1, dtype=np.int64))])  # (N,)
    valid = b.op(
        "Less",
        [b.op("Unsqueeze", [t_range, k.axis0]), b.op("Unsqueeze", [n_scored, k.axis1])],
        "valid",
    )  # (1, L-1) < (N, 1) -> (N, L-1)
    return b.op("Where", [valid, picked, k.zero], "token_scores")


def scorer_graph(w: LSTMWeights, with_context: bool = False) -> onnx.GraphProto:
    """The sentence scorer: (x, x_lens [, context_id | context_vector]) -> (token_logprobs,
    sentence_logprob)."""
    extra, context_id = _inputs(w, with_context)
    b = _Builder(itertools.count())
    k = _Consts(b)
    tokens = _token_scores(b, w, k, "x", "x_lens", context_id)
    b.nodes.append(helper.make_node("Identity", [tokens], ["token_logprobs"], name="out_tok"))
    b.nodes.append(
        helper.make_node(
            "ReduceSum",
            ["token_logprobs", k.axis1],
            ["sentence_logprob"],
            name="out_sum",
            keepdims=0,
        )
    )
    return helper.make_graph(
        b.nodes,
        "context_lstm_scorer",
        [
            helper.make_tensor_value_info("x", TensorProto.INT64, ["N", "L"]),
            helper.make_tensor_value_info("x_lens", TensorProto.INT64, ["N"]),
            *extra,
        ],
        [
            helper.make_tensor_value_info("token_logprobs", TensorProto.FLOAT, ["N", "T"]),
            helper.make_tensor_value_info("sentence_logprob", TensorProto.FLOAT, ["N"]),
        ],
        initializer=b.initializers,
    )


def _mapped_ids(b: _Builder, x: str, input_map: np.ndarray | None) -> str:
    """``x`` in the model's own ids: a decoder's token ids looked up in ``input_map`` (V_in,)."""
    if input_map is None:
        return x
    table = np.asarray(input_map, dtype=np.int64)
    if table.ndim != 1:
        raise ValueError(f"input_map: expected a (V_in,) table, got shape {table.shape}")
    return b.op("Gather", [b.const("input_id_map", table), x], "x_model_ids", axis=0)


def score_token_graph(
    w: LSTMWeights,
    input_map: np.ndarray | None = None,
    output_map: np.ndarray | None = None,
) -> onnx.GraphProto:
    """icefall's score_token_onnx form: (x, h0, c0) -> (log_softmax (N, V), next_h0, next_c0).

    ``log_softmax`` is log p of the token after x's last position (sherpa-onnx and icefall call it
    with L = 1, one token per hypothesis); the states are those after all of x. ``input_map``
    (V_out,) takes the decoder's ids to the model's, ``output_map`` (V_out,) gives for each of
    the decoder's ids the model id whose log-probability it reports, or -1 for -inf (never
    predicted). Without them the ids are the model's own.
    """
    _inputs(w, False)
    b = _Builder(itertools.count())
    k = _Consts(b)
    x = _mapped_ids(b, "x", input_map)  # (N, L)
    h_all, h_T, m_T = _lstm(b, w, k, x, "h0", "c0", None)  # (N, L, d)
    last = b.op(
        "Slice",
        [
            h_all,
            b.const("last_start", np.array([-1], dtype=np.int64)),
            b.const("last_end", np.array([INT64_MAX], dtype=np.int64)),
            k.axis1,
        ],
        "h_last",
    )  # (N, 1, d)
    log_probs = b.op("Squeeze", [_log_softmax(b, w, k, last, None), k.axis1], "lp_last")  # (N, V)
    v_out = w.vocab_size
    if output_map is not None:
        table = np.asarray(output_map, dtype=np.int64)
        if table.ndim != 1 or table.min() < -1 or table.max() >= w.vocab_size:
            raise ValueError(
                f"output_map: expected (V_out,) ids in [-1, {w.vocab_size}), got shape "
                f"{table.shape}, range [{table.min()}, {table.max()}]"
            )
        never = np.where(table < 0, -np.inf, 0.0).astype(np.float32)  # (V_out,)
        picked = b.op(
            "Gather",
            [log_probs, b.const("output_id_map", np.maximum(table, 0))],
            "lp_out_ids",
            axis=1,
        )  # (N, V_out)
        log_probs = b.op("Add", [picked, b.const("output_never", never)], "lp_out")  # (N, V_out)
        v_out = len(table)
    return _stateful_graph(b, "context_lstm_score_token", (log_probs, h_T, m_T), w, ["N", v_out])


def nll_graph(
    w: LSTMWeights, sos_id: int, eos_id: int, input_map: np.ndarray | None = None
) -> onnx.GraphProto:
    """icefall's state-less LM form: (x, x_lens) -> nll (N,), x without <s>/</s>, 0-padded.

    The graph adds <s> in front and </s> after token x_lens[i] of each row, scores the rows as
    the sentence scorer does, and returns minus each sentence's log-probability (sherpa-onnx's
    offline LM rescoring multiplies it by -scale). ``sos_id`` and ``eos_id`` are the model's;
    ``input_map`` (V_in,) takes a decoder's token ids in x to the model's first.
    """
    _inputs(w, False)
    b = _Builder(itertools.count())
    k = _Consts(b)
    x = _mapped_ids(b, "x", input_map)  # (N, L)
    n = b.op("Shape", [x], "n", start=0, end=1)  # (1,)
    column = b.op("Concat", [n, b.const("one_col", np.array([1], dtype=np.int64))], "col", axis=0)

    def filled(value: int, hint: str) -> str:  # (N, 1) int64 of `value`
        return b.op("Expand", [b.const(hint, np.array([[value]], dtype=np.int64)), column], hint)

    # [<s>, x, pad] then </s> written at column x_lens + 1                         (N, L+2)
    framed = b.op("Concat", [filled(sos_id, "sos"), x, filled(0, "pad")], "framed", axis=1)
    eos_at = b.op(
        "Unsqueeze",
        [b.op("Add", ["x_lens", b.const("one_at", np.array(1, dtype=np.int64))]), k.axis1],
        "eos_at",
    )  # (N, 1)
    full = b.op("ScatterElements", [framed, eos_at, filled(eos_id, "eos")], "full", axis=1)
    full_lens = b.op("Add", ["x_lens", b.const("two", np.array(2, dtype=np.int64))], "full_lens")
    tokens = _token_scores(b, w, k, full, full_lens, None)
    total = b.op("ReduceSum", [tokens, k.axis1], "total", keepdims=0)
    b.nodes.append(helper.make_node("Neg", [total], ["nll"], name="out_nll"))
    return helper.make_graph(
        b.nodes,
        "context_lstm_nll",
        [
            helper.make_tensor_value_info("x", TensorProto.INT64, ["N", "L"]),
            helper.make_tensor_value_info("x_lens", TensorProto.INT64, ["N"]),
        ],
        [helper.make_tensor_value_info("nll", TensorProto.FLOAT, ["N"])],
        initializer=b.initializers,
    )


def make_model(
    graph: onnx.GraphProto, metadata: dict[str, str], opset: int = OPSET, doc: str = ""
) -> onnx.ModelProto:
    """Wrap ``graph`` into a model with string metadata properties."""
    if opset < OPSET:
        raise ValueError(f"opset: expected {OPSET} or later (LayerNormalization), got {opset}")
    ir = max(IR_VERSION, helper.find_min_ir_version_for([helper.make_opsetid("", opset)]))
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", opset)],
        ir_version=ir,
        producer_name="rescorer",
        doc_string=doc,
    )
    helper.set_model_props(model, {str(k): str(v) for k, v in metadata.items()})
    return model
