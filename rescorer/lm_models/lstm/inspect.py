"""Looking inside a context-aware LM: boosted words per context value, and a PCA of contexts.

- Top boosted words (Jaech & Ostendorf 2018, Table 5): the words whose output bias rises most for
  a context value, i.e. the largest entries of (Q c_v + B[v]) minus their mean over the values --
  the part of eq. 6's bias that the value adds to the unigram distribution.
- PCA of the learned context embeddings c_v (Figure 6), projected to two dimensions.
- How far the context moves the recurrent layer: ||A||/||W|| (FactorCell, eq. 3-4) and
  ||Vc||/||b|| (ConcatCell and FactorCell, eq. 2) per value and layer. The paper's rank r "controls
  the extent to which the model relies on the generic weight matrix W"; a ratio far above 1 means
  W' is effectively a separate matrix per value (each trained on its share of the data only).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from rescorer.lm_models.lstm.model import ContextLSTM


def context_values(model: ContextLSTM, field: str) -> tuple[str, ...]:
    for var in model.config.context_vars:
        if var.name == field:
            if var.kind != "categorical":
                raise ValueError(f"context variable {field!r} is numerical: no values to list")
            return var.values
    names = [v.name for v in model.config.context_vars]
    raise ValueError(f"the model has no context variable {field!r}; it has {names}")


@torch.no_grad()
def output_biases(model: ContextLSTM, field: str) -> tuple[tuple[str, ...], np.ndarray]:
    """The values of ``field`` and the (values, V) output bias of each (other fields missing)."""
    if not model.adaptive:
        raise ValueError("an unadapted model has no context-dependent output bias")
    values = context_values(model, field)
    rows = [model.adapt([{field: v}]).output_bias.detach().double().cpu().numpy() for v in values]
    return values, np.stack(rows)


def top_boosted_words(
    model: ContextLSTM, vocab_tokens: Sequence[str], field: str, k: int = 10
) -> dict[str, list[tuple[str, float]]]:
    """Per value of ``field``, the ``k`` words its bias boosts most (boost in nats)."""
    values, bias = output_biases(model, field)
    boost = bias - bias.mean(axis=0, keepdims=True)  # (values, V)
    special = {"<unk>", "<s>", "</s>"}
    out: dict[str, list[tuple[str, float]]] = {}
    for i, value in enumerate(values):
        order = np.argsort(-boost[i], kind="stable")
        words = [
            (vocab_tokens[j], float(boost[i, j])) for j in order if vocab_tokens[j] not in special
        ]
        out[value] = words[:k]
    return out


@dataclass(frozen=True)
class AdaptationNorms:
    value: str
    # Per layer: Frobenius norm of the FactorCell's A over that of the generic W (0 otherwise).
    weight_ratio: tuple[float, ...]
    # Per layer: norm of the context bias V c over that of the generic bias b (0 if unadapted).
    bias_ratio: tuple[float, ...]


@torch.no_grad()
def adaptation_norms(model: ContextLSTM, field: str) -> list[AdaptationNorms]:
    """||A|| / ||W|| and ||Vc|| / ||b|| of each layer for each value of ``field``."""
    if not model.adaptive:
        raise ValueError("an unadapted model has no context-dependent recurrent weights")
    out = []
    for value in context_values(model, field):
        adapted = model.adapt([{field: value}])
        weight_ratio, bias_ratio = [], []
        for cell, (weight, bias) in zip(model.cells, adapted.layers, strict=True):
            w_norm = float(cell.W.norm())
            b_norm = float(cell.b.norm())
            weight_ratio.append(float((weight - cell.W).norm()) / w_norm if w_norm else 0.0)
            bias_ratio.append(float((bias - cell.b).norm()) / b_norm if b_norm else float("inf"))
        out.append(AdaptationNorms(value, tuple(weight_ratio), tuple(bias_ratio)))
    return out


@dataclass(frozen=True)
class ContextPCA:
    values: tuple[str, ...]
    # (values, 2) coordinates on the first two principal components.
    coords: np.ndarray
    # Fraction of the embeddings' variance each of the two components explains.
    explained: tuple[float, float]


@torch.no_grad()
def context_pca(model: ContextLSTM, field: str) -> ContextPCA:
    """PCA of the context embeddings c_v of every value of ``field``."""
    values = context_values(model, field)
    c = model.context_embedding([{field: v} for v in values]).detach().double().cpu().numpy()
    centred = c - c.mean(axis=0, keepdims=True)  # (values, k)
    _, s, vt = np.linalg.svd(centred, full_matrices=False)
    coords = centred @ vt[:2].T  # (values, 2)
    if coords.shape[1] < 2:
        coords = np.pad(coords, ((0, 0), (0, 2 - coords.shape[1])))
    var = s**2
    total = var.sum() or 1.0
    explained = tuple(float(x) for x in (list(var[:2] / total) + [0.0, 0.0])[:2])
    return ContextPCA(values, coords, explained)  # type: ignore[arg-type]


def plot_pca(pca: ContextPCA, path: str | Path, title: str) -> Path:
    """Scatter plot of the PCA as a PNG (needs matplotlib)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise ValueError("plotting needs matplotlib (pip install matplotlib)") from err
    fig, ax = plt.subplots(figsize=(6, 5), dpi=120)
    ax.scatter(pca.coords[:, 0], pca.coords[:, 1], s=30)
    for (x, y), label in zip(pca.coords, pca.values, strict=True):
        ax.annotate(label, (x, y), textcoords="offset points", xytext=(4, 3), fontsize=8)
    ax.set_xlabel(f"PC1 ({100 * pca.explained[0]:.0f}% of variance)")
    ax.set_ylabel(f"PC2 ({100 * pca.explained[1]:.0f}% of variance)")
    ax.set_title(title)
    fig.tight_layout()
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp.png")
    fig.savefig(tmp)
    plt.close(fig)
    tmp.replace(path)
    return path
