"""A small causal Transformer word LM, trained and scored like the unadapted LSTM.

Issue 15 asks for the LibriSpeech LM's architecture to be chosen from measurements: "an LSTM,
or a small causal Transformer if it is better per CPU-hour". This is that Transformer: a GPT-style
decoder (Radford et al. 2018; pre-norm blocks as in GPT-2) over the same units, with the same
tied input/output embedding E (V, e) and the same output layers (full softmax, or the exact
class-factored softmax of :mod:`rescorer.lm_models.output`) as
:class:`rescorer.lm_models.lstm.model.ContextLSTM`, so that the two differ by their body alone. It
takes no context (the LSTM family's ``unadapted`` mode) and is trained by the same loop (``rescorer
train`` with ``model.arch: "transformer"``).

Notation: e embedding size, d model width, H heads, T time steps, N batch.

    x_0   = P_in E[w_t] + pos(t)                     (sinusoids, Vaswani et al. 2017 sec. 3.5)
    x_l+1 = x_l + Attn(LN(x_l)); x_l+1 += FFN(LN(x_l+1))   (pre-norm, causal self-attention)
    log p = log_softmax(E P_out LN(x_L) + b_out)     (tied embedding, as the LSTM's eq. 5)

As for the LSTM, ``<s>`` is never predicted: log p(<s>) = -inf, the rest normalised without it.

Scoring runs one position at a time over a prefix tree (:class:`rescorer.lms.torch.TorchLM`),
as for the LSTM; the state is the key/value cache of every layer, ``(k, v)`` each
``(layers, N, H, t, d / H)`` after t positions, so that the scorer's gathers and concatenations
along axis 1 (the tree's nodes) work on it as on the LSTM's ``(h, m)``.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from rescorer.core.json_input import json_fields
from rescorer.lm_models.checkpoint import register_model_type
from rescorer.lm_models.lstm.model import AdaptedWeights, valid_positions
from rescorer.lm_models.output import ClassFactoredSoftmax, target_log_softmax, uses_blocks
from rescorer.lm_models.positions import sinusoids
from rescorer.lm_models.vocab import BOS_ID

State = tuple[Tensor, Tensor]  # (k, v), each (layers, N, H, t, d / H)


@dataclass(frozen=True)
class TransformerConfig:
    """Architecture of a :class:`CausalTransformerLM`; everything a checkpoint needs."""

    vocab_size: int  # V, input and output units (ids 0..V-1)
    embed_dim: int = 128  # e, the tied embedding E's width (projected to and from d)
    hidden_dim: int = 256  # d, the blocks' width
    num_layers: int = 4  # blocks
    heads: int = 4  # H, attention heads (d must be a multiple)
    ffn_dim: int = 1024  # feed-forward width of each block
    # Positions of the precomputed table; a longer input (an N-best hypothesis longer than any
    # training sentence) computes its sinusoids on the fly, so there is no length limit.
    max_positions: int = 256
    dropout: float = 0.0  # on attention weights, residual branches and the input embeddings
    # Class of each unit for the class-factored output (rescorer.lm_models.output); empty: full
    # softmax.
    word_classes: tuple[int, ...] = ()

    # What the LSTM family's trainer and scorer read of a config; fixed for this model.
    mode = "unadapted"  # no context variables
    history = ""  # reads no history text
    context_vars = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "word_classes", tuple(self.word_classes))
        for name in ("vocab_size", "embed_dim", "hidden_dim", "num_layers", "heads", "ffn_dim"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(
                    f"TransformerConfig.{name}: expected an integer >= 1, got {value!r}"
                )
        if self.hidden_dim % self.heads:
            raise ValueError(
                f"TransformerConfig: hidden_dim ({self.hidden_dim}) must be a multiple of heads "
                f"({self.heads})"
            )
        if self.max_positions < 2:
            raise ValueError(
                f"TransformerConfig.max_positions: expected >= 2, got {self.max_positions}"
            )
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"TransformerConfig.dropout: expected [0, 1), got {self.dropout!r}")
        if self.word_classes and len(self.word_classes) != self.vocab_size:
            raise ValueError(
                f"TransformerConfig.word_classes: expected {self.vocab_size} classes (one per "
                f"unit), got {len(self.word_classes)}"
            )

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["word_classes"] = list(self.word_classes)
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TransformerConfig:
        return cls(**json_fields(cls, data, "transformer config"))


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention with an optional key/value cache of earlier positions."""

    def __init__(self, dim: int, heads: int, dropout: float) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)
        self.dropout = dropout

    def forward(self, x: Tensor, past: State | None = None) -> tuple[Tensor, State]:
        """x (N, T, d) -> (N, T, d), and the keys/values of the past and these T positions.

        Without ``past`` the T positions attend causally among themselves; with it (k, v each
        (N, H, t, d/H)) they come after the t cached ones (T is 1 when scoring).
        """
        n, t, d = x.shape
        if past is not None and t > 1:
            raise ValueError("CausalSelfAttention: with a cache, one position at a time")
        q, k, v = self.qkv(x).reshape(n, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        if past is not None:
            k, v = torch.cat([past[0], k], dim=2), torch.cat([past[1], v], dim=2)
        y = F.scaled_dot_product_attention(  # after a cache, the one query sees every key
            q, k, v, dropout_p=self.dropout if self.training else 0.0, is_causal=past is None
        )  # (N, H, T, d/H)
        return self.out(y.transpose(1, 2).reshape(n, t, d)), (k, v)


class Block(nn.Module):
    """Pre-norm block: x + Attn(LN(x)), then + FFN(LN(x)) (GPT-2's layout)."""

    def __init__(self, dim: int, heads: int, ffn_dim: int, dropout: float) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = CausalSelfAttention(dim, heads, dropout)
        self.norm2 = nn.LayerNorm(dim)
        self.ffn = nn.Sequential(nn.Linear(dim, ffn_dim), nn.GELU(), nn.Linear(ffn_dim, dim))
        self.drop = nn.Dropout(dropout)

    def forward(self, x: Tensor, past: State | None = None) -> tuple[Tensor, State]:
        a, cache = self.attn(self.norm1(x), past)
        x = x + self.drop(a)
        return x + self.drop(self.ffn(self.norm2(x))), cache


class CausalTransformerLM(nn.Module):
    """The Transformer LM; the methods the LSTM's trainer and scorer call, with its meanings."""

    adaptive = False  # takes no context
    never: Tensor  # (1,) the units never predicted: <s> (a buffer, not saved)

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        self.config = c = config
        self.embedding = nn.Embedding(c.vocab_size, c.embed_dim)  # E (V, e), tied
        self.P_in = nn.Linear(c.embed_dim, c.hidden_dim, bias=False)  # e -> d
        self.register_buffer(
            "positions", sinusoids(c.max_positions, c.hidden_dim), persistent=False
        )
        self.drop = nn.Dropout(c.dropout)
        self.blocks = nn.ModuleList(
            Block(c.hidden_dim, c.heads, c.ffn_dim, c.dropout) for _ in range(c.num_layers)
        )
        self.norm = nn.LayerNorm(c.hidden_dim)
        self.L = nn.Linear(c.hidden_dim, c.embed_dim, bias=False)  # d -> e, as the LSTM's L
        self.b_out = nn.Parameter(torch.zeros(c.vocab_size))
        self.class_output = (
            ClassFactoredSoftmax(c.word_classes, c.embed_dim, never=(BOS_ID,))
            if c.word_classes
            else None
        )
        # Units the full softmax never predicts (as the LSTM's): derived, not saved.
        self.register_buffer("never", torch.tensor([BOS_ID], dtype=torch.long), persistent=False)
        self._reset_parameters()

    @torch.no_grad()
    def _reset_parameters(self) -> None:
        nn.init.uniform_(self.embedding.weight, -0.1, 0.1)  # as the LSTM's E
        for block in self.blocks:  # GPT-2: residual projections scaled by 1/sqrt(2 layers)
            for proj in (block.attn.out, block.ffn[2]):
                nn.init.normal_(proj.weight, std=0.02 / math.sqrt(2 * self.config.num_layers))
                nn.init.zeros_(proj.bias)

    # -- the body -------------------------------------------------------------------------------

    def init_state(self, batch_size: int) -> State:
        """The empty cache: no earlier positions."""
        c = self.config
        shape = (c.num_layers, batch_size, c.heads, 0, c.hidden_dim // c.heads)
        empty = torch.zeros(shape, dtype=self.b_out.dtype, device=self.b_out.device)
        return empty, empty.clone()

    def _run(
        self, tokens: Tensor, state: State | None, keep: bool = True
    ) -> tuple[Tensor, State | None]:
        """tokens (N, T) -> top states LN(x_L) (N, T, d) and the caches after them (None unless
        ``keep``: training and whole-sentence scoring need no cache)."""
        if not isinstance(tokens, Tensor) or tokens.dim() != 2 or tokens.dtype != torch.long:
            raise ValueError(
                f"tokens: expected a LongTensor (N, T), got "
                f"{getattr(tokens, 'dtype', type(tokens))} {tuple(getattr(tokens, 'shape', ()))}"
            )
        n, t = tokens.shape
        start = 0 if state is None else state[0].shape[3]
        pos = self.positions
        if start + t > len(pos):  # past the table: the same sinusoids, computed for this input
            pos = sinusoids(start + t, self.config.hidden_dim).to(pos)
        x = self.P_in(self.drop(self.embedding(tokens))) + pos[start : start + t]
        keys, values = [], []
        for layer, block in enumerate(self.blocks):
            past = None if state is None else (state[0][layer], state[1][layer])
            x, (k, v) = block(x, past)
            if keep:
                keys.append(k)
                values.append(v)
        return self.norm(x), (torch.stack(keys), torch.stack(values)) if keep else None

    def hidden(
        self, tokens: Tensor, context: Any = None, state: State | None = None, **_: Any
    ) -> Tensor:
        """Top states (N, T, d) of ``tokens`` after ``state`` (none: the sentence's start)."""
        return self._run(tokens, state, keep=False)[0]

    # -- the output layer (the LSTM's, eq. 5 with the class-factored option) ---------------------

    def adapt(self, context: Any = None, batch_size: int | None = None) -> AdaptedWeights:
        """No context: the shared output bias only (what the scorer passes back to us)."""
        return AdaptedWeights((), self.b_out, None, None)

    def adaptation_ratio(self, records: Any) -> None:
        return None

    def adaptation_parameters(self) -> list[nn.Parameter]:
        return []

    def context_bias_parameters(self) -> list[nn.Parameter]:
        return []

    def output_logits(
        self, h: Tensor, context: Any = None, vocab_ids: Tensor | None = None
    ) -> Tensor:
        """Unnormalised E L h + b_out: (N, T, V), or (N, T, S) for ``vocab_ids`` (S,)."""
        weight, bias = self.embedding.weight, self.b_out
        if vocab_ids is not None:
            weight, bias = weight[vocab_ids], bias[vocab_ids]
        return F.linear(self.L(h), weight, bias)

    def log_probs(self, tokens: Tensor) -> Tensor:
        """(N, T) -> (N, T, V) natural-log next-unit distributions."""
        z = self.L(self.hidden(tokens))
        if self.class_output is None:
            logits = F.linear(z, self.embedding.weight, self.b_out)
            return F.log_softmax(logits.index_fill(-1, self.never, -math.inf), dim=-1)
        return self.class_output.log_probs(z, self.embedding.weight, self.b_out)

    def _target_values(self, z: Tensor, rows: Tensor, targets: Tensor) -> Tensor:
        """ln P(targets[j] | z[rows[j]]): z (M, e) projected states -> (M,)."""
        weight, bias = self.embedding.weight, self.b_out
        if self.class_output is not None:
            return self.class_output.log_prob(z[rows], targets, weight, bias)
        if uses_blocks(z, bias):  # the CPU path: cache-sized blocks, no (M, V) tensor
            return target_log_softmax(z, weight, bias, rows, targets, self.never)
        logits = F.linear(z, weight, bias).index_fill(-1, self.never, -math.inf)
        return F.log_softmax(logits, dim=-1)[rows, targets]

    def target_log_probs(
        self, inputs: Tensor, targets: Tensor, context: Any = None, mask: Tensor | None = None
    ) -> Tensor:
        """ln P(targets (N, T) | inputs (N, T)): (N, T), 0 outside ``mask``."""
        h = self.hidden(inputs)
        if mask is None:
            mask = torch.ones_like(targets, dtype=torch.bool)
        rows = mask.nonzero(as_tuple=True)
        z = self.L(h[rows])  # (M, e)
        picked = self._target_values(z, torch.arange(z.shape[0], device=z.device), targets[rows])
        out = picked.new_zeros(targets.shape)
        out[rows] = picked
        return out

    def score(
        self, inputs: Tensor, targets: Tensor, lengths: Tensor, context: Any = None
    ) -> Tensor:
        """Natural-log probabilities of targets (N, T) given inputs (N, T); 0 at t >= length."""
        valid = valid_positions(inputs, targets, lengths)
        return self.target_log_probs(inputs, targets.masked_fill(~valid, 0), None, valid)

    # -- the scorer's step ----------------------------------------------------------------------

    def step(
        self, tokens: Tensor, state: State, adapted: AdaptedWeights, contexts: Tensor | None = None
    ) -> tuple[Tensor, State]:
        """tokens (N, 1) after the caches ``state`` -> top states (N, d) and the longer caches."""
        if contexts is not None:
            raise ValueError("a CausalTransformerLM takes no context")
        h, cache = self._run(tokens, state)
        assert cache is not None
        return h[:, -1], cache

    def log_probs_at(
        self,
        h: Tensor,
        rows: Tensor,
        targets: Tensor,
        adapted: AdaptedWeights,
        contexts: Tensor | None = None,
    ) -> Tensor:
        """ln P(targets[j] | h[rows[j]]): h (N, d), rows and targets (M,) -> (M,)."""
        return self._target_values(self.L(h), rows, targets)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())


register_model_type("causal_transformer", TransformerConfig, CausalTransformerLM)
