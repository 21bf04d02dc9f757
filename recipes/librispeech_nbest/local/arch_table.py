"""The LSTM against small causal Transformers, trained the same way on the novels (a table).

Each run is a ``rescorer train`` output folder; its ``last/trainer.json`` holds every epoch's
tokens, seconds and dev perplexity (on the same held-out books: the configs share the data
section). The table gives each run's curve and, for comparison, each run's dev perplexity at a
common budget of wall time and of tokens (linear in log-perplexity between the epochs around
it; "-" where a run did not get that far).

    python local/arch_table.py --run "LSTM 1x256=exp/bwd/forward_seed1" \
        --run "Transformer 2x256=exp/arch/transformer_2l" [--out exp/arch_cpu.md] [--publish]

The table goes to --out (default exp/arch_cpu.md in the recipe folder); --publish also merges it
into the experiment page docs/experiments/librispeech_arch_cpu.md (recipes/common/publish.py:
the runs in the table replace theirs, the others stay).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[3]
RECIPE = REPO / "recipes" / "librispeech_nbest"
PAGE = REPO / "docs" / "experiments" / "librispeech_arch_cpu.md"
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "recipes" / "common"))

from publish import publish  # noqa: E402

from rescorer.core.output import atomic_write  # noqa: E402


@dataclass(frozen=True)
class Point:
    epoch: int
    tokens: int  # seen so far
    seconds: float  # of training so far (dev evaluation included, data preparation not)
    dev_ppl: float


@dataclass(frozen=True)
class Run:
    label: str
    folder: Path
    model: dict
    params: int | None
    points: tuple[Point, ...]


def fail(message: str) -> None:
    """Bad input: one line on stderr, exit status 2."""
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(2)


def read_json(path: Path) -> Any:
    if not path.is_file():
        fail(f"{path}: not found (--run names a rescorer train output folder)")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        fail(f"{path}:{getattr(err, 'lineno', 1)}: not valid JSON")


def read_run(label: str, folder: Path) -> Run:
    state = read_json(folder / "last" / "trainer.json")
    config = read_json(folder / "config.json")
    tokens = seconds = 0.0
    points = []
    for e in state["log"]:
        tokens += e["tokens"]
        seconds += e["seconds"]
        points.append(Point(e["epoch"], int(tokens), seconds, e["dev_ppl"]))
    return Run(label, folder, config["model"], parameters(folder), tuple(points))


def parameters(folder: Path) -> int | None:
    """Parameter count from the best checkpoint's safetensors header (no torch needed)."""
    path = folder / "best" / "model.safetensors"
    if not path.is_file():
        return None
    with open(path, "rb") as fh:
        size = int.from_bytes(fh.read(8), "little")
        header = json.loads(fh.read(size))
    return sum(math.prod(v["shape"]) for k, v in header.items() if k != "__metadata__")


def at(points: tuple[Point, ...], field: str, budget: float) -> float | None:
    """Dev perplexity at ``budget`` of ``field`` (tokens or seconds), log-linear between epochs."""
    prev = None
    for p in points:
        x = getattr(p, field)
        if x >= budget:
            if prev is None:
                return None
            x0 = getattr(prev, field)
            w = (budget - x0) / (x - x0)
            return math.exp((1 - w) * math.log(prev.dev_ppl) + w * math.log(p.dev_ppl))
        prev = p
    return None


def describe(model: dict) -> str:
    if model.get("arch", "lstm") == "transformer":
        return (
            f"causal Transformer, {model['num_layers']} blocks of d={model['hidden_dim']}, "
            f"{model['heads']} heads, feed-forward {model['ffn_dim']}, e={model['embed_dim']}"
        )
    return (
        f"LSTM, {model['num_layers']} layer(s) of d={model['hidden_dim']}, e={model['embed_dim']}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--run", action="append", required=True, help="LABEL=FOLDER (repeatable)")
    ap.add_argument("--seconds", type=float, nargs="+", default=[600, 1200, 1700])
    ap.add_argument("--tokens", type=float, nargs="+", default=[4e6, 8e6, 12e6])
    ap.add_argument("--out", type=Path, default=RECIPE / "exp" / "arch_cpu.md")
    ap.add_argument("--publish", action="store_true", help=f"merge the table into {PAGE.name}")
    args = ap.parse_args()
    runs = []
    for spec in args.run:
        label, sep, folder = spec.partition("=")
        if not sep or not label or not folder:
            fail(f"--run: expected LABEL=FOLDER, got {spec!r}")
        runs.append(read_run(label, Path(folder)))
    lines = [
        "# LSTM or causal Transformer: dev perplexity per CPU-second on the novels",
        "",
        "- Command: `python local/arch_table.py "
        + " ".join(f'--run "{r.label}={r.folder}"' for r in runs)
        + f" --out {args.out.name}`",
        "- Data: the 96 novels (`exp/lm/books_by_book.txt`), 2 % of the books held out for dev "
        "(the same split for every run), V = 50,000, class-factored output (2,000 words each a "
        "class, 8 clusters of the rest), batches of 4,096 tokens; one thread per run on the "
        "2-core machine, two runs at a time.",
        "",
        "| run | model | parameters | epochs | tokens | seconds | tokens/s | best dev ppl |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        last = r.points[-1]
        params = f"{r.params / 1e6:.1f} M" if r.params else "-"
        lines.append(
            f"| {r.label} | {describe(r.model)} | {params} | {last.epoch} | {last.tokens:,} | "
            f"{last.seconds:,.0f} | {last.tokens / last.seconds:,.0f} | "
            f"{min(p.dev_ppl for p in r.points):.1f} |"
        )
    heads = [f"{s:,.0f} s" for s in args.seconds] + [f"{t / 1e6:g} M tokens" for t in args.tokens]
    lines += [
        "",
        "Dev perplexity at the same budget (log-linear between the epochs around it):",
        "",
        "| run | " + " | ".join(heads) + " |",
        "|---|" + "---|" * len(heads),
    ]
    for r in runs:
        cells = [at(r.points, "seconds", s) for s in args.seconds]
        cells += [at(r.points, "tokens", t) for t in args.tokens]
        lines.append(
            f"| {r.label} | " + " | ".join("-" if c is None else f"{c:.1f}" for c in cells) + " |"
        )
    lines += ["", "Each run's curve (cumulative tokens and seconds at the end of each epoch):", ""]
    for r in runs:
        lines += [
            f"### {r.label}",
            "",
            "| epoch | tokens | seconds | dev ppl |",
            "|---|---|---|---|",
        ]
        lines += [
            f"| {p.epoch} | {p.tokens:,} | {p.seconds:,.0f} | {p.dev_ppl:.1f} |" for p in r.points
        ]
        lines.append("")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with atomic_write(args.out) as fh:
        fh.write("\n".join(lines))
    print(f"wrote {args.out}")
    if args.publish:
        publish(args.out, PAGE)
        print(f"merged it into {PAGE}")


if __name__ == "__main__":
    main()
