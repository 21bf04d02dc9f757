"""Tiny context LSTMs for the ONNX export and runtime tests (V = 50, d = 16)."""

from __future__ import annotations

import torch

from rescorer.lm_models.lstm.context import ContextVariable
from rescorer.lm_models.lstm.model import ContextLSTM, LSTMConfig

WORDS = [
    "the", "a", "cat", "dog", "sat", "ran", "on", "mat", "news", "ball", "goal", "price",
    "market", "team", "won", "lost", "today", "said", "he", "she", "it", "was", "is", "in",
    "of", "to", "and", "match", "shares", "fell", "rose", "game", "play", "bank", "rate",
    "city", "club", "year", "week", "new", "old", "big", "small", "up", "down", "off", "at",
]  # fmt: skip
VOCAB = ["<unk>", "<s>", "</s>", *WORDS]  # V = 50
GENRE = ContextVariable.categorical(
    "genre", ["news", "sport", "chat"], [5, 3, 2], embed_dim=3, one_hot_bias=True
)
TOPIC = ContextVariable.categorical("topic", ["money", "games"], [1, 2], embed_dim=2)
GEO = ContextVariable.numerical("geo", 2, [0.5, -1.0])


def make_model(
    mode: str = "factor",
    *,
    embed_dim: int = 12,
    hidden_dim: int = 16,
    num_layers: int = 2,
    layer_norm: bool = True,
    variables: tuple[ContextVariable, ...] = (GENRE, TOPIC),
    tie_embeddings: bool = True,
    seed: int = 0,
    scale: float = 0.4,
    vocab_size: int = len(VOCAB),
) -> ContextLSTM:
    """A ContextLSTM with random values in every parameter (zero-initialised ones too)."""
    kwargs: dict = dict(
        vocab_size=vocab_size,
        embed_dim=embed_dim,
        hidden_dim=hidden_dim,
        num_layers=num_layers,
        mode=mode,
        layer_norm=layer_norm,
        tie_embeddings=tie_embeddings,
    )
    if mode != "unadapted":
        kwargs.update(context_dim=4, context_vars=variables, rank=2 if mode == "factor" else 0)
    torch.manual_seed(seed)
    model = ContextLSTM(LSTMConfig(**kwargs))
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * scale)
    return model.eval()
