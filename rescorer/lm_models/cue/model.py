"""CUE: contextual universal embeddings (Novotney, Mukherjee, Ahmed & Stolcke 2022).

A modular context-aware LM in three parts (Figure 1 of the paper):

- **Sentence encoder** (section 3.2): an auto-regressive LM over the sentence alone
  (:class:`SentenceLM`, a causal transformer, or an LSTM as in Table 6), pretrained without
  context and then frozen. Its hidden states, before its own softmax, are the decoder's inputs.
- **Context encoder** (section 3.1, :class:`ContextEncoder`): each contextual signal is an English
  string ("genre: news", "previous sentence: ..."), embedded by a frozen pretrained encoder
  (:mod:`rescorer.lm_models.text_encoders`; the vectors come in precomputed), then

      g_k = FFN(enc(c_k))                         (eq. 2)
      E = TransformerEncoder(G)                   (eq. 3, no positional encoding: order-invariant)
      e_cue = 1/K sum_k e_k                       (eq. 4)

  An empty context set (K = 0) gets a learned vector ``empty``, so a missing context never
  crashes. With ``context_transformer=False`` (Table 4's ablation) e_cue is the mean of the g_k.
- **Decoder** (section 3.3, :class:`CUEDecoder`): a masked (causal) transformer decoder whose
  inputs are the sentence encoder's hidden states and whose cross-attention attends to the CUE
  vector (one memory slot). ``decoder="concat"`` is the ablation without a decoder transformer:
  the CUE vector is concatenated with each hidden state before the logits. ``sentence_inputs=
  False`` is the ablation that predicts every word from the context alone (a constant input).

**Proxy embeddings** (section 4.2, :class:`ProxyAutoEncoder`): a unigram auto-encoder
V x h x z x h x V (the paper: 28996 x 128 x 16 x 128 x 28996, ReLU, softmax output) fitted to each
sentence's bag of words P~ by KL(P~ || F(P~)) (the paper writes eq. 6 with the arguments the other
way round, which is infinite wherever P~ is 0). Its z-dimensional code, scaled to unit length, plus
N(0, sigma^2) per dimension, renormalised (eqs. 7-8; eq. 8's squared norm read as the norm), and
projected by ``proxy_proj`` (z -> dim) stands in for e_cue while the decoder is trained with no
real context.

Which parameters are trained when is the business of :mod:`rescorer.lm_models.cue.train`
(:func:`set_trainable`); this module only builds and runs the network. All log-probabilities are
natural logs. Token ids follow :mod:`rescorer.lm_models.vocab` (<unk>=0, <s>=1, </s>=2).
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
from rescorer.lm_models.positions import sinusoids
from rescorer.lm_models.tokenizer import TOKENIZER_FILE, SubwordTokenizer
from rescorer.lm_models.vocab import BOS_ID, EOS_ID, UNK_ID, Vocabulary

logger = logging.getLogger(__name__)

SENTENCE_KINDS = ("transformer", "lstm")
DECODER_KINDS = ("transformer", "concat")
PAD_ID = EOS_ID  # padding id of input batches (padding is masked or comes after the real tokens)


@dataclass(frozen=True)
class SentenceLMConfig:
    """The sentence encoder: an LM over one sentence, no context (section 3.2)."""

    # Word units: <unk>, <s>, </s> and the vocabulary words.
    vocab_size: int
    # "transformer" (causal self-attention) or "lstm" (Table 6's alternative).
    kind: str = "transformer"
    # Width of the embeddings and hidden states.
    dim: int = 128
    # Transformer blocks or LSTM layers.
    layers: int = 2
    # Attention heads (transformer).
    heads: int = 4
    # Feed-forward width of each block (transformer).
    ffn_dim: int = 512
    # Longest input (positions of the sinusoidal table; <s> + words).
    max_positions: int = 512
    # Dropout in training.
    dropout: float = 0.1

    def __post_init__(self) -> None:
        if self.kind not in SENTENCE_KINDS:
            raise ValueError(
                f"sentence encoder kind must be one of {SENTENCE_KINDS}, got {self.kind!r}"
            )
        if self.vocab_size < 3 or self.dim < 1 or self.layers < 1 or self.max_positions < 2:
            raise ValueError(
                "need vocab_size >= 3, dim >= 1, layers >= 1, max_positions >= 2; got "
                f"{self.vocab_size}, {self.dim}, {self.layers}, {self.max_positions}"
            )
        if self.kind == "transformer" and (self.heads < 1 or self.dim % self.heads):
            raise ValueError(f"dim ({self.dim}) must be a multiple of heads ({self.heads})")
        if not 0 <= self.dropout < 1:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SentenceLMConfig:
        return cls(**json_fields(cls, data, "sentence LM config"))


@dataclass(frozen=True)
class CUEConfig:
    """A whole CUE model: sentence encoder, context encoder, decoder, proxy auto-encoder."""

    # Word units (the sentence encoder's vocabulary).
    vocab_size: int
    # The frozen sentence encoder (a JSON object in config.json).
    sentence: SentenceLMConfig
    # Width of the CUE vector and of the decoder.
    dim: int = 128
    # Decoder blocks, heads, feed-forward width.
    decoder_layers: int = 2
    decoder_heads: int = 4
    decoder_ffn_dim: int = 512
    # "transformer" (section 3.3) or "concat" (Table 4: CUE concatenated before the logits).
    decoder: str = "transformer"
    # False: the decoder sees no sentence-encoder states, only a constant (Table 4's last row).
    sentence_inputs: bool = True
    # Spec of the frozen string encoder (rescorer.lm_models.text_encoders.make_embedder) and its
    # width.
    embedder: str = "minilm"
    context_dim: int = 384
    # Context transformer blocks and heads (eq. 3); False = plain mean of the g_k (Table 4).
    context_transformer: bool = True
    context_layers: int = 1
    context_heads: int = 4
    # Context fields the model reads, each with the English label its string starts with:
    # pairs [field, label]; a record's field f with value v becomes the string "label: v".
    context_fields: tuple[tuple[str, str], ...] = ()
    # Proxy auto-encoder hidden width and code width (the paper: 128 and 16); 0 = no proxy.
    proxy_hidden: int = 128
    proxy_dim: int = 16
    # Dropout in training (decoder and context encoder).
    dropout: float = 0.1

    def __post_init__(self) -> None:
        if isinstance(self.sentence, Mapping):
            object.__setattr__(self, "sentence", SentenceLMConfig.from_json(self.sentence))
        pairs = tuple(tuple(p) for p in self.context_fields)
        if any(len(p) != 2 or not all(isinstance(s, str) and s for s in p) for p in pairs):
            raise ValueError(f"context_fields: expected [field, label] string pairs, got {pairs}")
        if len({p[0] for p in pairs}) != len(pairs):
            raise ValueError(f"context_fields: a field is listed twice in {pairs}")
        object.__setattr__(self, "context_fields", pairs)
        if self.sentence.vocab_size != self.vocab_size:
            raise ValueError(
                f"sentence encoder vocab_size {self.sentence.vocab_size} != {self.vocab_size}"
            )
        if self.decoder not in DECODER_KINDS:
            raise ValueError(f"decoder must be one of {DECODER_KINDS}, got {self.decoder!r}")
        for name, heads in (("decoder", self.decoder_heads), ("context", self.context_heads)):
            if heads < 1 or self.dim % heads:
                raise ValueError(f"dim ({self.dim}) must be a multiple of {name}_heads ({heads})")
        if min(self.dim, self.decoder_layers, self.context_dim, self.context_layers) < 1:
            raise ValueError("dim, decoder_layers, context_dim and context_layers must be >= 1")
        if self.proxy_dim < 0 or (self.proxy_dim and self.proxy_hidden < 1):
            raise ValueError(f"bad proxy sizes {self.proxy_hidden}, {self.proxy_dim}")
        if not 0 <= self.dropout < 1:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["sentence"] = self.sentence.to_json()
        out["context_fields"] = [list(p) for p in self.context_fields]
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> CUEConfig:
        return cls(**json_fields(cls, data, "CUE config"))


# -- building blocks ------------------------------------------------------------------------------


class Attention(nn.Module):
    """Multi-head attention of ``x`` over ``memory`` (itself when None), plain ops (exportable).

    ``mask`` is additive, broadcastable to (B, heads, T, S).
    """

    def __init__(self, dim: int, heads: int, dropout: float) -> None:
        super().__init__()
        self.heads = heads
        self.q = nn.Linear(dim, dim)
        self.kv = nn.Linear(dim, 2 * dim)
        self.o = nn.Linear(dim, dim)
        self.drop = nn.Dropout(dropout)

    def forward(
        self, x: Tensor, memory: Tensor | None = None, mask: Tensor | None = None
    ) -> Tensor:
        b, t, d = x.shape
        mem = x if memory is None else memory
        s = mem.shape[1]
        h = self.heads
        q = self.q(x).reshape(b, t, h, d // h).transpose(1, 2)
        k, v = self.kv(mem).reshape(b, s, 2, h, d // h).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-1, -2) / math.sqrt(d // h)
        if mask is not None:
            scores = scores + mask
        att = self.drop(torch.softmax(scores, dim=-1))
        return self.o((att @ v).transpose(1, 2).reshape(b, t, d))


class Block(nn.Module):
    """Pre-norm transformer block: self-attention, optional cross-attention, feed-forward."""

    def __init__(self, dim: int, heads: int, ffn_dim: int, dropout: float, cross: bool) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.self_att = Attention(dim, heads, dropout)
        self.norm2: nn.LayerNorm | None = nn.LayerNorm(dim) if cross else None
        self.cross_att: Attention | None = Attention(dim, heads, dropout) if cross else None
        self.norm3 = nn.LayerNorm(dim)
        self.ffn = nn.Sequential(
            nn.Linear(dim, ffn_dim), nn.GELU(), nn.Dropout(dropout), nn.Linear(ffn_dim, dim)
        )
        self.drop = nn.Dropout(dropout)

    def forward(
        self, x: Tensor, mask: Tensor | None = None, memory: Tensor | None = None
    ) -> Tensor:
        x = x + self.drop(self.self_att(self.norm1(x), mask=mask))
        if self.cross_att is not None and self.norm2 is not None:
            if memory is None:
                raise ValueError("this block attends to a memory; none given")
            x = x + self.drop(self.cross_att(self.norm2(x), memory))
        return x + self.drop(self.ffn(self.norm3(x)))


def causal_mask(t: int, device: torch.device) -> Tensor:
    """(T, T) additive mask: 0 on and below the diagonal, -inf above."""
    return torch.full((t, t), -math.inf, device=device).triu(1)


# -- sentence encoder -----------------------------------------------------------------------------


class SentenceLM(nn.Module):
    """The sentence encoder with its own softmax (section 3.2); ``SentenceLM(config)``."""

    def __init__(self, config: SentenceLMConfig) -> None:
        super().__init__()
        self.config = config
        c = config
        self.embed = nn.Embedding(c.vocab_size, c.dim)
        nn.init.normal_(self.embed.weight, std=0.05)
        self.drop = nn.Dropout(c.dropout)
        self.blocks = nn.ModuleList()
        self.lstm: nn.LSTM | None = None
        if c.kind == "transformer":
            self.register_buffer("positions", sinusoids(c.max_positions, c.dim), persistent=False)
            self.blocks.extend(
                Block(c.dim, c.heads, c.ffn_dim, c.dropout, cross=False) for _ in range(c.layers)
            )
        else:
            self.lstm = nn.LSTM(
                c.dim, c.dim, c.layers, batch_first=True, dropout=c.dropout if c.layers > 1 else 0
            )
        self.norm = nn.LayerNorm(c.dim)
        self.out = nn.Linear(c.dim, c.vocab_size)
        self.output = FullSoftmax(c.vocab_size, never=(BOS_ID,))  # <s> is never predicted

    def hidden(self, ids: Tensor) -> Tensor:
        """(B, T) input ids (<s> w1 .. ) -> (B, T, dim) states; state t has seen ids[:, :t+1]."""
        t = ids.shape[1]
        if t > self.config.max_positions:
            raise ValueError(f"input of {t} tokens; the model takes {self.config.max_positions}")
        x = self.embed(ids)
        if self.lstm is not None:
            x, _ = self.lstm(self.drop(x))
        else:
            x = self.drop(x * math.sqrt(self.config.dim) + self.positions[:t])
            mask = causal_mask(t, ids.device)
            for block in self.blocks:
                x = block(x, mask=mask)
        return self.norm(x)

    def log_probs(self, hidden: Tensor) -> Tensor:
        """(B, T, dim) -> (B, T, V) natural-log next-word distributions (<s> gets -inf)."""
        return self.output.log_probs(self.drop(hidden), self.out.weight, self.out.bias)

    def forward(self, ids: Tensor) -> Tensor:
        return self.log_probs(self.hidden(ids))

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())


# -- context encoder ------------------------------------------------------------------------------


class ContextEncoder(nn.Module):
    """eqs. 2-4: K string vectors (B, K, context_dim) with a presence mask -> (B, dim)."""

    def __init__(self, config: CUEConfig) -> None:
        super().__init__()
        c = config
        self.ffn = nn.Sequential(
            nn.Linear(c.context_dim, c.dim), nn.ReLU(), nn.Linear(c.dim, c.dim)
        )
        self.blocks = nn.ModuleList()
        if c.context_transformer:
            self.blocks.extend(
                Block(c.dim, c.context_heads, 2 * c.dim, c.dropout, cross=False)
                for _ in range(c.context_layers)
            )
        self.norm = nn.LayerNorm(c.dim)
        # e_cue of an empty context set (every field missing).
        self.empty = nn.Parameter(torch.zeros(c.dim))

    def forward(self, vectors: Tensor, present: Tensor) -> Tensor:
        """``vectors`` (B, K, context_dim), ``present`` (B, K) bool -> e_cue (B, dim)."""
        g = self.ffn(vectors)  # eq. 2
        if self.blocks:
            # Absent slots are never attended to (a row with none present attends to nothing
            # useful but stays finite; its output is replaced by `empty` below).
            any_present = present.any(dim=1, keepdim=True)
            keys = present | ~any_present
            mask = torch.zeros(keys.shape, dtype=g.dtype, device=g.device)
            mask = mask.masked_fill(~keys, -math.inf)[:, None, None, :]
            for block in self.blocks:  # eq. 3, no positions: permutation-equivariant
                g = block(g, mask=mask)
        e = self.norm(g)
        w = present.to(e.dtype)[..., None]
        n = w.sum(dim=1)
        mean = (e * w).sum(dim=1) / n.clamp(min=1)  # eq. 4
        return torch.where(n > 0, mean, self.empty.expand_as(mean))


# -- proxy auto-encoder ---------------------------------------------------------------------------


class ProxyAutoEncoder(nn.Module):
    """Unigram auto-encoder of section 4.2.1: P~ (B, V) -> code (B, z) -> ln F(P~) (B, V).

    V x hidden x z x hidden x V with ReLU after every hidden layer, the code included (the
    paper's 28996x128x16x128x28996 "with ReLU non-linearities"). The proxy (eqs. 7-8) is built
    from the same code the decoder reconstructs from (:meth:`encode`, after its ReLU).
    """

    def __init__(self, vocab_size: int, hidden: int, dim: int) -> None:
        super().__init__()
        self.encoder = nn.Sequential(
            nn.Linear(vocab_size, hidden), nn.ReLU(), nn.Linear(hidden, dim), nn.ReLU()
        )
        self.decoder = nn.Sequential(
            nn.Linear(dim, hidden), nn.ReLU(), nn.Linear(hidden, vocab_size)
        )

    def encode(self, p: Tensor) -> Tensor:
        """(B, V) bags of words -> (B, z) codes, >= 0: what the decoder reconstructs from."""
        return self.encoder(p)

    def forward(self, p: Tensor) -> Tensor:
        """ln of the reconstructed distribution."""
        return F.log_softmax(self.decoder(self.encode(p)), dim=-1)

    @staticmethod
    def kl(p: Tensor, log_q: Tensor) -> Tensor:
        """KL(p || q) per row (nats): sum_w p(w) (ln p(w) - ln q(w)), 0 ln 0 = 0."""
        log_p = torch.where(p > 0, p.clamp(min=1e-30).log(), torch.zeros_like(p))
        return (p * (log_p - log_q)).sum(dim=-1)

    def proxy(self, p: Tensor, sigma: float, generator: torch.Generator | None = None) -> Tensor:
        """eqs. 7-8: unit-length code + N(0, sigma^2) noise, renormalised (B, z)."""
        z = F.normalize(self.encode(p), dim=-1)
        if sigma > 0:
            noise = torch.randn(z.shape, generator=generator, device=z.device, dtype=z.dtype)
            z = z + sigma * noise
        return F.normalize(z, dim=-1)


def unigram_distributions(ids: Tensor, vocab_size: int) -> Tensor:
    """eq. 5: (B, T) target ids (PAD-free rows as given; -1 = skip) -> (B, V) bags of words."""
    valid = ids >= 0
    counts = torch.zeros(ids.shape[0], vocab_size, device=ids.device)
    counts.scatter_add_(1, ids.clamp(min=0), valid.float())
    return counts / counts.sum(dim=1, keepdim=True).clamp(min=1)


# -- decoder and the whole model ------------------------------------------------------------------


class CUEDecoder(nn.Module):
    """Section 3.3: masked decoder over sentence states, cross-attending to e_cue."""

    def __init__(self, config: CUEConfig) -> None:
        super().__init__()
        c = config
        self.config = c
        self.kind = c.decoder
        self.blocks = nn.ModuleList()
        if c.decoder == "transformer":
            self.inp = nn.Linear(c.sentence.dim, c.dim)
            self.start = nn.Parameter(torch.zeros(c.dim))  # the constant input without sentences
            self.blocks.extend(
                Block(c.dim, c.decoder_heads, c.decoder_ffn_dim, c.dropout, cross=True)
                for _ in range(c.decoder_layers)
            )
            self.norm = nn.LayerNorm(c.dim)
            self.out = nn.Linear(c.dim, c.vocab_size)
        else:
            self.out = nn.Linear(c.sentence.dim + c.dim, c.vocab_size)
        self.output = FullSoftmax(c.vocab_size, never=(BOS_ID,))  # <s> is never predicted
        self.drop = nn.Dropout(c.dropout)

    def forward(self, states: Tensor, cue: Tensor) -> Tensor:
        """(B, T, sentence dim) states and (B, dim) e_cue -> (B, T, V) natural-log probs."""
        b, t, _ = states.shape
        if self.kind == "concat":
            joint = torch.cat([states, cue[:, None, :].expand(b, t, cue.shape[-1])], dim=-1)
            return self.output.log_probs(self.drop(joint), self.out.weight, self.out.bias)
        if self.config.sentence_inputs:
            x = self.drop(self.inp(states))
        else:
            x = self.start.expand(b, t, self.start.shape[0])
        mask = causal_mask(t, states.device)
        memory = cue[:, None, :]
        for block in self.blocks:
            x = block(x, mask=mask, memory=memory)
        z = self.drop(self.norm(x))
        return self.output.log_probs(z, self.out.weight, self.out.bias)


class CUEModel(nn.Module):
    """Sentence encoder + context encoder + decoder (+ proxy auto-encoder); ``CUEModel(config)``."""

    def __init__(self, config: CUEConfig) -> None:
        super().__init__()
        self.config = config
        self.sentence = SentenceLM(config.sentence)
        self.context = ContextEncoder(config)
        self.decoder = CUEDecoder(config)
        self.proxy: ProxyAutoEncoder | None = None
        self.proxy_proj: nn.Linear | None = None
        if config.proxy_dim:
            self.proxy = ProxyAutoEncoder(config.vocab_size, config.proxy_hidden, config.proxy_dim)
            self.proxy_proj = nn.Linear(config.proxy_dim, config.dim)

    def cue(self, vectors: Tensor, present: Tensor) -> Tensor:
        """e_cue (B, dim) of precomputed string vectors (B, K, context_dim) and mask (B, K)."""
        return self.context(vectors, present)

    def proxy_cue(
        self, targets: Tensor, sigma: float, generator: torch.Generator | None = None
    ) -> Tensor:
        """The proxy stand-in for e_cue from the target ids (B, T; -1 = padding)."""
        if self.proxy is None or self.proxy_proj is None:
            raise ValueError("this CUE model has no proxy auto-encoder (proxy_dim = 0)")
        p = unigram_distributions(targets, self.config.vocab_size)
        return self.proxy_proj(self.proxy.proxy(p, sigma, generator))

    def forward(self, ids: Tensor, cue: Tensor) -> Tensor:
        """(B, T) inputs <s> w1 .. and (B, dim) e_cue -> (B, T, V) ln P(next word)."""
        return self.decoder(self.sentence.hidden(ids), cue)

    def num_parameters(self) -> dict[str, int]:
        """Parameters per module (the paper's Table 1)."""
        parts: dict[str, nn.Module | None] = {
            "sentence_encoder": self.sentence,
            "context_encoder": self.context,
            "decoder": self.decoder,
            "proxy": self.proxy,
            "proxy_proj": self.proxy_proj,
        }
        return {
            k: sum(p.numel() for p in m.parameters()) for k, m in parts.items() if m is not None
        }


# -- batching words -------------------------------------------------------------------------------


def encode_batch(
    sentences: Sequence[Sequence[int]], device: torch.device | str = "cpu"
) -> tuple[Tensor, Tensor]:
    """Word-id sentences -> inputs (B, T) ``<s> w1 .. wn`` and targets (B, T) ``w1 .. wn </s>``.

    T is the longest sentence + 1; inputs are padded with PAD_ID, targets with -1.
    """
    t = max(len(s) for s in sentences) + 1
    inputs = torch.full((len(sentences), t), PAD_ID, dtype=torch.long)
    targets = torch.full((len(sentences), t), -1, dtype=torch.long)
    for i, s in enumerate(sentences):
        row = torch.as_tensor(list(s), dtype=torch.long)
        inputs[i, 0] = BOS_ID
        inputs[i, 1 : len(s) + 1] = row
        targets[i, : len(s)] = row
        targets[i, len(s)] = EOS_ID
    return inputs.to(device), targets.to(device)


def gather_targets(log_probs: Tensor, targets: Tensor) -> Tensor:
    """(B, T, V), (B, T) with -1 padding -> (B, T) ln P(target), 0 at padding."""
    lp = log_probs.gather(2, targets.clamp(min=0)[..., None])[..., 0]
    return lp.masked_fill(targets < 0, 0.0)


# -- the model with its vocabulary and context strings --------------------------------------------


def render_context(
    record: Mapping[str, Any] | None, context_fields: Sequence[tuple[str, str]]
) -> list[str]:
    """The context strings of a record: ``"label: value"`` per field present, in config order.

    Missing, None or empty values are left out (the set may be empty).
    """
    if record is None:
        return []
    out = []
    for name, label in context_fields:
        value = record.get(name)
        if value is None:
            continue
        text = str(value).strip()
        if text:
            out.append(f"{label}: {text}")
    return out


class CUELM:
    """A CUE model with its vocabulary, its string encoder and a cache of string vectors.

    The string encoder (``config.embedder``) is built on first use, or given (tests).
    With a ``tokenizer`` (:class:`rescorer.lm_models.tokenizer.SubwordTokenizer`, saved in the
    checkpoint as ``tokenizer.model``) the units are its pieces: a word's log-probability is the sum
    of its pieces' (each given the pieces before it), so no word is out of vocabulary.
    """

    def __init__(
        self,
        model: CUEModel,
        vocab: Vocabulary,
        embedder: Any = None,
        tokenizer: SubwordTokenizer | None = None,
    ) -> None:
        if len(vocab) != model.config.vocab_size:
            raise ValueError(
                f"vocabulary has {len(vocab)} words, config says {model.config.vocab_size}"
            )
        if tokenizer is not None and tuple(tokenizer.pieces) != tuple(vocab.tokens):
            raise ValueError(
                f"the tokenizer's {len(tokenizer)} pieces are not the vocabulary's "
                f"{len(vocab)} units (id for id)"
            )
        self.model = model
        self.vocab = vocab
        self.tokenizer = tokenizer
        self._embedder = embedder
        self._cache: Any = None

    @property
    def config(self) -> CUEConfig:
        return self.model.config

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def cache(self) -> Any:
        """The :class:`rescorer.lm_models.text_encoders.VectorCache` of context strings."""
        from rescorer.lm_models.text_encoders import VectorCache, make_embedder

        if self._cache is None:
            if self._embedder is None:
                self._embedder = make_embedder(self.config.embedder)
            if self._embedder.dim != self.config.context_dim:
                raise ValueError(
                    f"embedder {self._embedder.name} gives {self._embedder.dim} dims, the "
                    f"model takes {self.config.context_dim}"
                )
            self._cache = VectorCache(self._embedder)
        return self._cache

    def encode_words(self, words: Sequence[str]) -> list[int]:
        """Unit ids of a sentence's words (pieces, word after word, with a tokenizer)."""
        if self.tokenizer is None:
            return self.vocab.encode(words)
        return [i for w in words for i in self.tokenizer.word_ids(w)]

    def word_lengths(self, words: Sequence[str]) -> list[int]:
        """Units per word (all 1 without a tokenizer)."""
        if self.tokenizer is None:
            return [1] * len(words)
        return [len(self.tokenizer.word_ids(w)) for w in words]

    def context_strings(self, record: Mapping[str, Any] | None) -> list[str]:
        return render_context(record, self.config.context_fields)

    @torch.no_grad()
    def cue_vectors(self, records: Sequence[Mapping[str, Any] | None]) -> np.ndarray:
        """Precomputed e_cue of each context record: (N, dim) float32 (computed once each)."""
        model = self.model
        was_training = model.training
        model.eval()
        strings = [self.context_strings(r) for r in records]
        k = max((len(s) for s in strings), default=0)
        cd = self.config.context_dim
        vecs = np.zeros((len(records), max(k, 1), cd), dtype=np.float32)
        present = np.zeros((len(records), max(k, 1)), dtype=bool)
        self.cache.add(t for s in strings for t in s)  # every new string in one batched pass
        table = self.cache.table()
        for i, s in enumerate(strings):
            if s:
                vecs[i, : len(s)] = table[self.cache.index(s)]
                present[i, : len(s)] = True
        out = model.cue(
            torch.from_numpy(vecs).to(self.device), torch.from_numpy(present).to(self.device)
        )
        model.train(was_training)
        return out.float().cpu().numpy()

    @torch.no_grad()
    def token_logprobs(
        self,
        sentences: Sequence[Sequence[str]],
        contexts: Sequence[Mapping[str, Any] | None] | None = None,
        cue: np.ndarray | None = None,
        batch_size: int = 64,
    ) -> list[np.ndarray]:
        """ln P of each word and of ``</s>`` per sentence (unknown words scored as <unk>; with
        a tokenizer, a word's pieces summed).

        The CUE vectors are ``cue`` (N, dim) when given (precomputed), else computed from
        ``contexts`` (None: every context missing).
        """
        if cue is None:
            cue = self.cue_vectors(contexts if contexts is not None else [None] * len(sentences))
        if len(cue) != len(sentences):
            raise ValueError(f"{len(cue)} CUE vectors for {len(sentences)} sentences")
        model = self.model
        was_training = model.training
        model.eval()
        ids = [self.encode_words(s) for s in sentences]
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
        out: list[np.ndarray] = [np.zeros(0)] * len(ids)
        for lo in range(0, len(order), batch_size):
            chunk = order[lo : lo + batch_size]
            inputs, targets = encode_batch([ids[i] for i in chunk], self.device)
            c = torch.from_numpy(np.asarray(cue[chunk], dtype=np.float32)).to(self.device)
            lp = gather_targets(model(inputs, c), targets).double().cpu().numpy()
            for row, i in enumerate(chunk):
                out[i] = lp[row, : len(ids[i]) + 1]
        model.train(was_training)
        if self.tokenizer is not None:  # the pieces of each word summed; </s> its own
            for i, words in enumerate(sentences):
                starts = np.cumsum([0, *self.word_lengths(words)])[:-1]
                word_lp = np.add.reduceat(out[i][:-1], starts) if len(words) else np.zeros(0)
                out[i] = np.append(word_lp, out[i][-1])
        return out

    def save(self, path: str | Path, training_meta: Mapping[str, Any] | None = None) -> Path:
        """A checkpoint folder (rescorer.lm_models.checkpoint), model type ``cue`` (with
        ``tokenizer.model`` for a subword model)."""
        extra = {} if self.tokenizer is None else {TOKENIZER_FILE: self.tokenizer.model_proto}
        return save_checkpoint(path, self.model, self.vocab.tokens, training_meta, extra)


def load_cue(path: str | Path, device: str | torch.device = "cpu", embedder: Any = None) -> CUELM:
    """Read a ``cue`` checkpoint folder (strict: every tensor must match the config; its
    tokenizer too, when it has one)."""

    model, tokens, _ = load_checkpoint(path, device=device)
    if not isinstance(model, CUEModel):
        raise ValueError(f"{path}: a {type(model).__name__} checkpoint, expected a CUE model")
    tokenizer = SubwordTokenizer.load(path) if SubwordTokenizer.present(path) else None
    try:
        return CUELM(model, Vocabulary(tokens), embedder, tokenizer)
    except ValueError as err:
        raise ValueError(f"{path}: {err}") from None


def load_sentence_lm(
    path: str | Path, device: str | torch.device = "cpu"
) -> tuple[SentenceLM, Vocabulary]:
    """Read a ``cue_sentence_lm`` checkpoint folder (a pretrained sentence encoder)."""

    model, tokens, _ = load_checkpoint(path, device=device)
    if not isinstance(model, SentenceLM):
        raise ValueError(f"{path}: a {type(model).__name__} checkpoint, expected a sentence LM")
    return model, Vocabulary(tokens)


__all__ = [
    "CUEConfig",
    "CUELM",
    "CUEModel",
    "ContextEncoder",
    "ProxyAutoEncoder",
    "SentenceLM",
    "SentenceLMConfig",
    "UNK_ID",
    "encode_batch",
    "gather_targets",
    "load_cue",
    "load_sentence_lm",
    "render_context",
    "unigram_distributions",
]


register_model_type("cue", CUEConfig, CUEModel)
register_model_type("cue_sentence_lm", SentenceLMConfig, SentenceLM)
