"""Output layers shared by the model families: full softmax and an exact class-factored softmax.

A family computes an output vector ``z`` per position (the LSTM family: ``L h_t``, e wide; the
FNLM: its hidden layer) and owns the word weights ``W`` (V, in) and bias ``b`` (V,) -- tied to
the input embeddings or not. The output layer turns them into normalised natural-log
probabilities.

:class:`FullSoftmax`: ``log P(w|h) = log_softmax(W z + b)_w``, cost O(V in) per position.

:class:`ClassFactoredSoftmax` (Goodman 2001; the factored NLM paper's class-based output,
Alexandrescu & Kirchhoff 2006 section 5; Mikolov et al. 2011 frequency binning, see
:mod:`rescorer.lm_models.word_classes`): every word w belongs to one class c(w) and

    P(w | h) = P(c(w) | h) P(w | c(w), h)
    P(c | h) = softmax(U z + u)_c                              (C classes, own weights U, u)
    P(w | c, h) = exp(W_w z + b_w) / sum_{v in c} exp(W_v z + b_v)

It is exact and normalised: the probabilities of all words sum to 1 (a sum over classes of
within-class distributions that each sum to 1). Training needs only the target's class: the cost
per position is O((C + |c(w)|) in) instead of O(V in), e.g. C = 200 classes of a 50k vocabulary
(``sqrt`` frequency binning) touch a few hundred rows instead of 50,000. Scoring uses the same
exact probabilities (:meth:`ClassFactoredSoftmax.log_probs` gives the full distribution,
:meth:`ClassFactoredSoftmax.log_prob` the targets' values; they agree to float precision).

A class of one unit needs no normalisation within it: P(w|h) = P(c(w)|h). Its class logit is
the word's own logit ``W_w z + b_w`` (so the word keeps its tied output embedding) instead of a
row of U. Many singleton classes of the most frequent words plus a few clusters of the rest
(:func:`rescorer.lm_models.word_classes.shortlist_classes`) is the adaptive softmax layout (Grave et
al. 2017, with full-width tails): most tokens cost one softmax over the shortlist and the clusters,
and only the tokens of a cluster pay for its words.

Units that are never predicted (``<s>``) can be excluded: their probability is 0 (log -inf) and
the rest of their class is normalised without them (they may not form a class alone).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterator, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def _wide(x: Tensor) -> Tensor:
    """``x`` in float32 when autocast made it narrower (bf16); float32/64 unchanged."""
    return x if x.dtype in (torch.float32, torch.float64) else x.float()


# Index tensors derived from the word classes are built on the CPU explicitly, so that the layer
# can also be built on the meta device (checkpoint loading checks shapes before allocating).
_CPU = torch.device("cpu")

# Bytes of one (rows, V) block of logits in :func:`target_log_softmax`: small enough that the
# block, its log-softmax and the output weights stay in the last-level cache (32 MiB here), large
# enough that the block's matmul runs at full speed. Measured in bench/bench_lstm.py.
BLOCK_BYTES = 16 << 20
# Rows per block are kept between these bounds whatever the vocabulary size.
MIN_BLOCK_ROWS, MAX_BLOCK_ROWS = 16, 512
# Rows of the word weights :class:`ClassFactoredSoftmax` compares before reusing its gathered copy.
PROBE_ROWS = 64


def _version(t: Tensor) -> int:
    """``t``'s in-place version counter; -1 for an inference tensor (which keeps none)."""
    return -1 if t.is_inference() else t._version


def block_rows(vocab_size: int, itemsize: int = 4) -> int:
    """Rows of z per block of :func:`target_log_softmax` at this vocabulary size."""
    rows = BLOCK_BYTES // max(1, vocab_size * itemsize)
    return int(min(MAX_BLOCK_ROWS, max(MIN_BLOCK_ROWS, rows - rows % 16)))


def uses_blocks(z: Tensor, bias: Tensor, table: bool = False) -> bool:
    """Whether :func:`target_log_softmax` applies: a CPU tensor, no autocast, one shared bias
    (or, with ``table``, a bias table (C, V) whose rows the positions name by ``bias_of``)."""
    shape_ok = bias.dim() == (2 if table else 1)
    return z.device.type == "cpu" and shape_ok and not torch.is_autocast_enabled("cpu")


def table_log_softmax(
    z: Tensor,
    weight: Tensor,
    table: Tensor,
    bias_of: Tensor,
    rows: Tensor,
    targets: Tensor,
    never: Tensor | None = None,
) -> Tensor:
    """``log_softmax(z W^T + table[bias_of])[rows[j], targets[j]]`` without gradients.

    z (N, in), a bias per row taken from ``table`` (C, V) by ``bias_of`` (N,): a scorer's rows
    under C different contexts. Rows are taken a block at a time as in
    :func:`target_log_softmax`; each block's biases are gathered into the reused buffer and the
    matmul adds onto them, so no (N, V) tensor is built. ``never`` units get -inf logits.
    """
    if table.dim() != 2 or bias_of.shape != z.shape[:1]:
        raise ValueError(
            f"table_log_softmax: expected a table (C, V) and bias_of (N,), got "
            f"{tuple(table.shape)} and {tuple(bias_of.shape)} for z {tuple(z.shape)}"
        )
    order = torch.argsort(rows, stable=True)
    rows_s, targets_s = rows[order], targets[order]
    out = z.new_empty(len(rows))
    with torch.no_grad():
        for a, _, lo, hi, lsm in _blocks(z, weight, table, rows_s, never, bias_of):
            out[lo:hi] = lsm[rows_s[lo:hi] - a, targets_s[lo:hi]]
    return torch.empty_like(out).index_copy_(0, order, out)


def target_log_softmax(
    z: Tensor,
    weight: Tensor,
    bias: Tensor,
    rows: Tensor,
    targets: Tensor,
    never: Tensor | None = None,
    bias_of: Tensor | None = None,
) -> Tensor:
    """``log_softmax(z W^T + b)[rows[j], targets[j]]``: z (N, in), rows and targets (M,) -> (M,).

    The same values as materialising the (N, V) log-softmax and gathering, without it: z is
    taken :func:`block_rows` rows at a time, each block's logits written by one matmul with the
    bias inside (``addmm``) into a buffer reused for every block and normalised in place, and
    only the targets read out. The blocks stay in cache and no (N, V) tensor is
    allocated (a fresh one per step cost as much as the arithmetic: page faults and zero-fill).
    A row's distribution is computed once however many of ``rows`` name it. ``never`` units
    get -inf logits. Differentiable in z, weight and bias when each row has one target (the
    training case; see :class:`_TargetLogSoftmax`). With ``bias_of`` (N,), ``bias`` is a table
    (C, V) and row i's bias is ``bias[bias_of[i]]`` (a bias per sequence: each block's biases
    are gathered into the buffer, no (N, V) bias is built).
    """
    want = 1 if bias_of is None else 2
    if z.dim() != 2 or weight.dim() != 2 or bias.dim() != want or z.shape[1] != weight.shape[1]:
        raise ValueError(
            f"target_log_softmax: expected z (N, in), weight (V, in), bias "
            f"{'(V,)' if bias_of is None else '(C, V) with bias_of (N,)'}; got "
            f"{tuple(z.shape)}, {tuple(weight.shape)}, {tuple(bias.shape)}"
        )
    if bias_of is not None and bias_of.shape != z.shape[:1]:
        raise ValueError(
            f"target_log_softmax: bias_of must name a table row per row of z, got "
            f"{tuple(bias_of.shape)} for z {tuple(z.shape)}"
        )
    if rows.shape != targets.shape or rows.dim() != 1:
        raise ValueError(
            f"target_log_softmax: expected rows and targets (M,), got {tuple(rows.shape)} and "
            f"{tuple(targets.shape)}"
        )
    never = never if never is not None else torch.empty(0, dtype=torch.long, device=z.device)
    order = None
    if len(rows) > 1 and not bool((rows[1:] >= rows[:-1]).all()):
        order = torch.argsort(rows, stable=True)  # blocks take contiguous slices of rows
        rows, targets = rows[order], targets[order]
    train = torch.is_grad_enabled() and any(t.requires_grad for t in (z, weight, bias))
    if train and not torch.equal(rows, torch.arange(z.shape[0], device=rows.device)):
        raise ValueError("target_log_softmax: gradients need exactly one target per row")
    out = _TargetLogSoftmax.apply(z, weight, bias, rows, targets, never, train, bias_of)
    if order is None:
        return out
    return torch.empty_like(out).index_copy_(0, order, out)


def _blocks(
    z: Tensor,
    weight: Tensor,
    bias: Tensor,
    rows: Tensor,
    never: Tensor | None,
    bias_of: Tensor | None = None,
) -> Iterator[tuple[int, int, int, int, Tensor]]:
    """Per block of z's rows [a, b): a, b, the slice [lo, hi) of ``rows`` in it, and the
    block's log-softmax (a reused buffer, valid until the next block). ``bias`` is (V,), or a
    table (C, V) whose row ``bias_of[i]`` is z row i's."""
    n, vocab = z.shape[0], weight.shape[0]
    step = block_rows(vocab, z.element_size())
    logits = z.new_empty(min(step, n), vocab)
    bounds = torch.searchsorted(rows, torch.arange(0, n + step, step, device=rows.device))
    bounds = bounds.tolist()
    w_t = weight.t()
    for k, a in enumerate(range(0, n, step)):
        b = min(n, a + step)
        block = logits[: b - a]
        if bias_of is None:
            torch.addmm(bias, z[a:b], w_t, out=block)  # the bias inside the matmul
        else:  # each row's bias gathered into the buffer, the matmul added onto it
            torch.index_select(bias, 0, bias_of[a:b], out=block)
            block.addmm_(z[a:b], w_t)
        if never is not None and len(never):
            block.index_fill_(1, never, -math.inf)
        # in place, by the native out= kernel (torch.log_softmax(out=) computes a fresh tensor
        # and copies it); each element is read before it is written (exactness is tested)
        lsm = torch._log_softmax(block, 1, False, out=block)
        yield a, b, bounds[k], bounds[k + 1], lsm


class _TargetLogSoftmax(torch.autograd.Function):
    """:func:`target_log_softmax` with ``rows`` sorted.

    With gradients (training: one target per row), each block's ``d out_i / d logits_i =
    onehot(t_i) - softmax_i`` is formed in place while the block is in cache and kept in one
    (N, V) tensor G, and ``G W`` is taken there too; the backward pass scales rows by the
    incoming gradient g: grad z = g * (G W), grad W = G^T (g * z), grad b = G^T g. Three
    matmuls as for an unfused layer, but one pass over (N, V) memory instead of several.
    """

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any,
        z: Tensor,
        weight: Tensor,
        bias: Tensor,
        rows: Tensor,
        targets: Tensor,
        never: Tensor,
        train: bool,
        bias_of: Tensor | None = None,
    ) -> Tensor:
        out = z.new_empty(len(rows))
        unit = z.new_empty(z.shape[0], weight.shape[0]) if train else None  # G (N, V)
        unit_z = torch.empty_like(z) if train else None  # G W (N, in)
        with torch.no_grad():
            for a, b, lo, hi, lsm in _blocks(z, weight, bias, rows, never, bias_of):
                out[lo:hi] = lsm[rows[lo:hi] - a, targets[lo:hi]]
                if unit is not None and unit_z is not None:
                    g = torch.exp(lsm, out=unit[a:b]).neg_()  # -softmax
                    g[rows[lo:hi] - a, targets[lo:hi]] += 1.0  # + onehot(target)
                    torch.mm(g, weight, out=unit_z[a:b])
        if train:
            ctx.save_for_backward(z, unit, unit_z, bias_of)
            ctx.table_rows = bias.shape[0] if bias_of is not None else 0
        return out

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:  # type: ignore[override]
        z, unit, unit_z, bias_of = ctx.saved_tensors
        need_z, need_w, need_b = ctx.needs_input_grad[:3]
        grad_z = unit_z * grad[:, None] if need_z else None
        grad_w = unit.t() @ (z * grad[:, None]) if need_w else None
        grad_b = None
        if need_b and bias_of is None:
            grad_b = unit.t() @ grad
        elif need_b:  # each table row: the sum of its rows' g_i G_i
            grad_b = unit.new_zeros(ctx.table_rows, unit.shape[1])
            grad_b.index_add_(0, bias_of, unit * grad[:, None])
        return grad_z, grad_w, grad_b, None, None, None, None, None


class FullSoftmax(nn.Module):
    """log_softmax(W z + b) over the whole vocabulary (no parameters of its own)."""

    def __init__(self, vocab_size: int, never: Sequence[int] = ()) -> None:
        super().__init__()
        self.vocab_size = vocab_size
        self.register_buffer("never", torch.tensor(sorted(set(never)), dtype=torch.long), False)

    def logits(self, z: Tensor, weight: Tensor, bias: Tensor) -> Tensor:
        """(..., in) -> (..., V): W z + b, ``never`` units at -inf. ``bias`` (V,) or (..., V)."""
        logits = F.linear(z, weight, bias if bias.dim() == 1 else None)
        if bias.dim() > 1:
            logits = logits + bias
        if len(self.never):
            logits = logits.index_fill(-1, self.never, -math.inf)
        return logits

    def log_probs(self, z: Tensor, weight: Tensor, bias: Tensor) -> Tensor:
        """(..., in) -> (..., V) natural-log probabilities of every word."""
        return F.log_softmax(self.logits(z, weight, bias), dim=-1)

    def log_prob(self, z: Tensor, targets: Tensor, weight: Tensor, bias: Tensor) -> Tensor:
        """(N, in), (N,) -> (N,) natural-log probability of each target.

        On the CPU with one shared bias: :func:`target_log_softmax` (blocks in cache, no (N, V)
        tensor); elsewhere the full distribution gathered at the targets.
        """
        if z.dim() == 2 and uses_blocks(z, bias):
            rows = torch.arange(z.shape[0], device=z.device)
            return target_log_softmax(z, weight, bias, rows, targets, self.never)
        return self.log_probs(z, weight, bias).gather(-1, targets.unsqueeze(-1)).squeeze(-1)


class ClassFactoredSoftmax(nn.Module):
    """Exact P(w|h) = P(c(w)|h) P(w|c(w),h) with C classes (see the module docstring).

    ``word_classes[w]`` is the class of unit w (ids 0..C-1, every class non-empty); ``in_dim``
    the width of z; ``never`` the units never predicted. The class layer (U, u) is this module's
    own; word weights and biases are passed in (the family owns, and may tie, them). With
    ``tie_singletons`` False a class of one word gets a row of U like any other class.
    """

    probe: Tensor  # (<= PROBE_ROWS,) rows compared before the gathered copy is reused (buffer)

    def __init__(
        self,
        word_classes: Sequence[int],
        in_dim: int,
        never: Sequence[int] = (),
        tie_singletons: bool = True,
    ) -> None:
        super().__init__()
        cls = torch.as_tensor(list(word_classes), dtype=torch.long, device=_CPU)
        if cls.dim() != 1 or len(cls) == 0 or int(cls.min()) < 0:
            raise ValueError("word_classes: expected a non-empty list of class ids >= 0")
        num_classes = int(cls.max()) + 1
        sizes = torch.bincount(cls, minlength=num_classes)
        if bool((sizes == 0).any()):
            empty = torch.nonzero(sizes == 0).flatten().tolist()
            raise ValueError(
                f"word_classes: classes {empty[:10]} have no word (ids must be 0..C-1)"
            )
        never_t = torch.tensor(sorted(set(never)), dtype=torch.long, device=_CPU)
        predictable = torch.ones(len(cls), dtype=torch.bool, device=_CPU)
        predictable[never_t] = False
        if bool((torch.bincount(cls[predictable], minlength=num_classes) == 0).any()):
            raise ValueError("word_classes: a class holds only units that are never predicted")
        self.vocab_size = len(cls)
        self.num_classes = num_classes
        # Singleton classes take their word's logit; the other classes ("clusters") a row of U.
        # tie_singletons=False gives every class its own row of U (the factored NLM's layer)
        single = (sizes == 1) if tie_singletons else torch.zeros_like(sizes, dtype=torch.bool)
        cluster_ids = torch.nonzero(~single).flatten()
        single_ids = torch.nonzero(single).flatten()
        first = torch.full((num_classes,), -1, dtype=torch.long, device=_CPU)
        first[cls.flip(0)] = torch.arange(len(cls) - 1, -1, -1, device=_CPU)  # a word of each class
        with warnings.catch_warnings():  # no clusters: an empty U (init warns about it)
            warnings.simplefilter("ignore", UserWarning)
            self.class_layer = nn.Linear(in_dim, len(cluster_ids))  # U, u (a row per cluster)
        # class logits are cat([word logits of the singletons, U z + u]) put in class-id order
        slot = torch.empty(num_classes, dtype=torch.long, device=_CPU)
        slot[single_ids] = torch.arange(len(single_ids), device=_CPU)
        slot[cluster_ids] = len(single_ids) + torch.arange(len(cluster_ids), device=_CPU)
        self.register_buffer("single_words", first[single_ids], persistent=False)
        self.register_buffer("class_slot", slot, persistent=False)
        self.clusters = cluster_ids.tolist()
        # Words sorted by class: class k's words are order[start[k] : start[k] + sizes[k]].
        order = torch.argsort(cls, stable=True)
        start = torch.cumsum(sizes, 0) - sizes
        position = torch.empty_like(cls)
        position[order] = torch.arange(len(cls), device=_CPU) - start[cls[order]]
        # Derived from the word classes (which the family's config holds): not saved weights.
        self.register_buffer("class_of", cls, persistent=False)  # (V,)
        self.register_buffer("order", order, persistent=False)  # (V,)
        self.register_buffer("position", position, persistent=False)  # (V,) index in class
        self.register_buffer("never", never_t, persistent=False)
        self.starts = start.tolist()
        self.sizes = sizes.tolist()
        # Training reads the word rows as segments: the singletons' words (in slot order), then
        # each cluster's words. One index_select and one split per step, so the backward pass
        # builds a single (V, in) gradient; indexing the weight once per cluster built one per
        # cluster (a 50k x 256 zero-fill each, a third of a training step at V = 50k).
        segments = [first[single_ids]]
        segments += [order[start[k] : start[k] + sizes[k]] for k in cluster_ids.tolist()]
        grouped = torch.cat(segments)
        self.register_buffer("grouped", grouped, persistent=False)  # (V,) words by segment
        self.grouped_is_identity = bool(torch.equal(grouped, torch.arange(len(cls), device=_CPU)))
        self.segment_sizes = [len(seg) for seg in segments]
        self.segment_of_cluster = {k: i + 1 for i, k in enumerate(cluster_ids.tolist())}
        # Rows of the weight compared on every use of the gathered copy (see _grouped): up to
        # PROBE_ROWS spread over the vocabulary.
        probe = torch.linspace(0, len(cls) - 1, min(len(cls), PROBE_ROWS), device=_CPU)
        self.register_buffer("probe", probe.round().long().unique(), persistent=False)
        # (the weight's data, its key, its probed rows, its rows in segment order): see _grouped
        self._grouped_cache: tuple[Tensor, tuple[Any, ...], Tensor, Tensor] | None = None

    def class_log_probs(self, z: Tensor, weight: Tensor, bias: Tensor) -> Tensor:
        """(..., in) -> (..., C): log P(c | h). ``bias`` (V,) or per row (..., V)."""
        words = self.single_words
        return self._class_log_probs(z, weight[words], bias[..., words])

    def _class_log_probs(self, z: Tensor, single_w: Tensor, single_b: Tensor) -> Tensor:
        """log P(c | h) from the singletons' word rows (S, in) and biases (S,) | (..., S)."""
        if single_b.dim() == 1:
            single = F.linear(z, single_w, single_b)
        else:
            single = F.linear(z, single_w) + single_b
        logits = torch.cat([single, self.class_layer(z).expand(*single.shape[:-1], -1)], -1)
        return F.log_softmax(logits.index_select(-1, self.class_slot), dim=-1)

    def log_probs(self, z: Tensor, weight: Tensor, bias: Tensor) -> Tensor:
        """(..., in) -> (..., V): log P(w | h) of every unit (``never`` ones: -inf)."""
        logits = F.linear(z, weight, bias if bias.dim() == 1 else None)
        if bias.dim() > 1:
            logits = logits + bias
        if len(self.never):
            logits = logits.index_fill(-1, self.never, -math.inf)
        lead = logits.shape[:-1]
        flat = logits.reshape(-1, self.vocab_size)  # (N, V)
        cls = self.class_of.expand(flat.shape[0], -1)
        # log-sum-exp of the logits within each class, by scatter (classes need not be ranges)
        peak = flat.new_full((flat.shape[0], self.num_classes), -math.inf).scatter_reduce(
            1, cls, flat, reduce="amax", include_self=True
        )
        shifted = (flat - peak.gather(1, cls)).exp()
        lse = peak + flat.new_zeros(peak.shape).scatter_add(1, cls, shifted).log()  # (N, C)
        class_lp = self.class_log_probs(z, weight, bias).reshape(-1, self.num_classes)
        out = class_lp.gather(1, cls) + flat - lse.gather(1, cls)
        return out.reshape(*lead, self.vocab_size)

    def log_prob(
        self,
        z: Tensor,
        targets: Tensor,
        weight: Tensor,
        bias: Tensor,
        bias_rows: Tensor | None = None,
    ) -> Tensor:
        """(N, in), (N,) -> (N,): log P(target | h), computing only the targets' classes.

        ``bias`` is (V,), per row (N, V), or with ``bias_rows`` (N,) a table (S, V) of which row
        i takes row ``bias_rows[i]`` (e.g. one bias per sequence, S << N positions: no (N, V)
        tensor is built, only the columns each row needs). Rows are grouped by their target's
        class and each group is normalised over that class's words alone: O((C + |class|) in)
        per row.
        """
        if z.dim() != 2 or targets.shape != z.shape[:1]:
            raise ValueError(
                f"log_prob: expected z (N, in) and targets (N,), got {tuple(z.shape)} and "
                f"{tuple(targets.shape)}"
            )
        if bias_rows is not None and (bias.dim() != 2 or bias_rows.shape != targets.shape):
            raise ValueError(
                f"log_prob: bias_rows (N,) needs a bias table (S, V), got {tuple(bias.shape)} "
                f"and bias_rows {tuple(bias_rows.shape)}"
            )
        cls = self.class_of[targets]  # (N,)
        if not self.grouped_is_identity:  # one gather of the rows, in segment order
            weight, bias = self._grouped(weight, bias)
        w_seg = weight.split(self.segment_sizes)  # singletons' rows, then each cluster's
        b_seg = bias.split(self.segment_sizes, dim=-1)
        single_b = b_seg[0] if bias_rows is None else b_seg[0][bias_rows]
        class_lp = self._class_log_probs(z, w_seg[0], single_b)  # (N, C)
        # log-probs in float32 whatever the autocast dtype of the logits (bf16 on CUDA)
        out = _wide(class_lp).gather(1, cls.unsqueeze(1)).squeeze(1)  # log P(c(w)|h)
        within = torch.zeros_like(out)  # a singleton class: log P(w|c(w),h) = 0
        never = self.never
        present = torch.zeros(self.num_classes, dtype=torch.bool, device=cls.device)
        present[cls] = True
        for k in self.clusters:
            if not bool(present[k]):
                continue
            rows = torch.nonzero(cls == k).squeeze(1)  # (n_k,)
            seg = self.segment_of_cluster[k]
            words = self.order[self.starts[k] : self.starts[k] + self.sizes[k]]  # (s_k,)
            if b_seg[seg].dim() == 1:
                b = b_seg[seg]
            else:
                b = b_seg[seg][rows if bias_rows is None else bias_rows[rows]]
            logits = F.linear(z[rows], w_seg[seg]) + b  # (n_k, s_k)
            if len(never):
                logits = logits.masked_fill(torch.isin(words, never), -math.inf)
            lp = F.log_softmax(_wide(logits), dim=-1)
            within[rows] = lp.gather(1, self.position[targets[rows]].unsqueeze(1)).squeeze(1)
        return out + within

    def _grouped(self, weight: Tensor, bias: Tensor) -> tuple[Tensor, Tensor]:
        """``weight`` (V, in) and ``bias`` (V,) | (N, V) with the words in segment order.

        In eval mode without gradients (scoring) the gathered copy of the weight is kept and
        reused while the weight is unchanged: the same data (its storage address, dtype,
        device, shape and strides: ``Module.to``, ``.double()``, ``.half()`` and assignments
        to ``.data`` replace the data of the same Parameter at the same version; the data is
        kept referenced so that its memory is not reused) at the same in-place version, the
        same values in the probed rows (writes through ``.data``, e.g. ``.data.copy_`` of other
        weights, and writes to an inference tensor bump no version), and no switch to train
        mode since (a fused optimizer step changes weights without bumping their version;
        :meth:`train` drops the copy). An in-place edit through ``.data`` of rows that are not
        probed goes unseen: call :meth:`train` (or ``eval``'s ``train(False)``) after one.
        Gathering a 50k x 384 matrix on every call cost a quarter of the scorer's time; the
        probe reads 64 rows. The bias (V values per row) is gathered on every call.
        """
        grouped_bias = bias.index_select(-1, self.grouped)  # V values per row: cheap
        if torch.is_grad_enabled() or self.training:
            return weight.index_select(0, self.grouped), grouped_bias
        key = (
            weight.data_ptr(), weight.dtype, weight.device, tuple(weight.shape), weight.stride(),
            _version(weight),
        )  # fmt: skip
        probed = weight.index_select(0, self.probe)
        cached = self._grouped_cache
        if cached is None or cached[1] != key or not torch.equal(cached[2], probed):
            grouped = weight.index_select(0, self.grouped)
            cached = self._grouped_cache = (weight.detach(), key, probed, grouped)
        return cached[3], grouped_bias

    def train(self, mode: bool = True) -> ClassFactoredSoftmax:
        self._grouped_cache = None  # weights may change in training without a version bump
        return super().train(mode)

    def extra_repr(self) -> str:
        return f"vocab_size={self.vocab_size}, num_classes={self.num_classes}"
