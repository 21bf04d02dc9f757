"""Boosted words per context value (Table 5) and the PCA of context embeddings (Figure 6)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from rescorer.lm_models.lstm.context import ContextVariable
from rescorer.lm_models.lstm.inspect import (
    adaptation_norms,
    context_pca,
    plot_pca,
    top_boosted_words,
)
from rescorer.lm_models.lstm.model import ContextLSTM, LSTMConfig

GENRE = ContextVariable.categorical(
    "genre", ["news", "sport", "chat"], [5, 3, 2], embed_dim=3, one_hot_bias=True
)
WORDS = ["<unk>", "<s>", "</s>", "vote", "goal", "lol", "the", "a"]


def model(mode: str = "softmax_bias") -> ContextLSTM:
    torch.manual_seed(0)
    cfg = LSTMConfig(
        vocab_size=len(WORDS),
        embed_dim=4,
        hidden_dim=4,
        mode=mode,
        context_dim=3,
        context_vars=(GENRE,),
        rank=2 if mode == "factor" else 0,
    )
    return ContextLSTM(cfg).eval()


def test_boosted_words_follow_the_one_hot_bias() -> None:
    m = model()
    with torch.no_grad():
        table = m.one_hot_bias[0].weight  # (values, V)
        table.zero_()
        table[0, 3] = 2.0  # news -> vote
        table[1, 4] = 3.0  # sport -> goal
        table[2, 5] = 1.0  # chat -> lol
        table[:, 1] = 9.0  # <s> is boosted everywhere: not a boost relative to the mean
    top = top_boosted_words(m, WORDS, "genre", k=2)
    assert [w for w, _ in top["news"]][0] == "vote"
    assert top["sport"][0] == ("goal", pytest.approx(3.0 - 1.0))  # minus the mean over values
    assert top["chat"][0][0] == "lol"
    assert all(w not in ("<s>", "</s>", "<unk>") for v in top.values() for w, _ in v)
    with pytest.raises(ValueError, match="no context variable 'topic'"):
        top_boosted_words(m, WORDS, "topic")


def test_pca_keeps_distances_of_planar_embeddings(tmp_path: Path) -> None:
    m = model("factor")
    pca = context_pca(m, "genre")
    c = m.context_embedding([{"genre": v} for v in GENRE.values]).detach().double().numpy()
    # Three points always lie in a plane: the 2-D projection keeps every pairwise distance.
    for i in range(3):
        for j in range(3):
            assert np.linalg.norm(pca.coords[i] - pca.coords[j]) == pytest.approx(
                np.linalg.norm(c[i] - c[j]), abs=1e-9
            )
    assert sum(pca.explained) == pytest.approx(1.0)
    out = plot_pca(pca, tmp_path / "pca.png", "genres")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_adaptation_norms_scale_with_the_bases() -> None:
    m = model("factor")
    with torch.no_grad():
        for cell in m.cells:
            cell.Z_L.zero_()
    zero = adaptation_norms(m, "genre")
    assert all(r.weight_ratio == (0.0,) for r in zero)  # Z_L = 0: W' = W (ConcatCell)
    assert all(r.bias_ratio[0] > 0 for r in zero)  # V c still moves the bias
    torch.manual_seed(0)
    with torch.no_grad():
        for cell in m.cells:
            cell.Z_L.normal_(std=0.1)
    once = adaptation_norms(m, "genre")
    with torch.no_grad():
        for cell in m.cells:
            cell.Z_L.mul_(3.0)  # A is linear in Z_L (eq. 3)
    thrice = adaptation_norms(m, "genre")
    for a, b in zip(once, thrice, strict=True):
        assert a.weight_ratio[0] > 0
        assert b.weight_ratio[0] == pytest.approx(3.0 * a.weight_ratio[0], rel=1e-5)
        assert b.bias_ratio == a.bias_ratio
    with pytest.raises(ValueError, match="unadapted"):
        adaptation_norms(model("unadapted"), "genre")
