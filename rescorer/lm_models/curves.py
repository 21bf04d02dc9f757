"""Training curves: the dev value per epoch of every run, one line each, drawn to a PNG.

Every recipe's RESULTS.md shows one (issue 17: "training curves (dev ppl per epoch) in a PNG
per recipe"). matplotlib is imported when a figure is drawn, not with this module.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

# Line styles in the order a caller's groups take them.
LINE_STYLES = ("-", "--", "-.", ":")


def plot_dev_curves(
    panels: Mapping[str, Mapping[str, Sequence[float]]],
    path: Path,
    *,
    ylabel: str = "dev perplexity",
    style_of: Callable[[str], Mapping[str, Any]] | None = None,
    mark_best: bool = True,
    log_y: bool = False,
) -> Path:
    """Draw ``panels`` (panel title -> run name -> dev value per epoch, epoch 1 first) side by
    side and write the PNG to ``path`` (through a temporary file, renamed).

    ``style_of(run name)`` gives matplotlib keyword arguments for the run's line (colour, line
    style, marker); ``mark_best`` puts a star on each run's lowest value (the epoch kept).
    Runs without values are left out; a panel without runs is drawn empty.
    """
    if not panels:
        raise ValueError("plot_dev_curves needs at least one panel")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    n = len(panels)
    fig, axes = plt.subplots(1, n, figsize=(7 if n == 1 else 4.6 * n, 4.5), dpi=120)
    for ax, (title, curves) in zip([axes] if n == 1 else list(axes), panels.items(), strict=True):
        drawn = 0
        for name, values in curves.items():
            if not values:
                continue
            drawn += 1
            style = dict(style_of(name)) if style_of else {}
            line = ax.plot(range(1, len(values) + 1), values, label=name, lw=1.2, **style)[0]
            if mark_best:
                best = min(range(len(values)), key=values.__getitem__)
                ax.plot(best + 1, values[best], "*", color=line.get_color(), ms=9)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("epoch" + (" (star: the epoch kept)" if mark_best else ""))
        ax.set_ylabel(ylabel)
        if log_y:
            ax.set_yscale("log")
        ax.set_title(title, fontsize=9)
        if drawn:  # an empty panel has no legend
            ax.legend(fontsize=6 if n > 1 else 7, ncol=2)
    fig.tight_layout()
    tmp = path.with_name(f".{path.name}.tmp.png")
    fig.savefig(tmp)
    plt.close(fig)
    tmp.replace(path)
    return path
