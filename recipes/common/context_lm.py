"""Shared driver of the context-aware LSTM recipes (brown_genre, agnews_topic).

For each mode (Unadapted, SoftmaxBias, ConcatCell, FactorCell) and seed it trains a model of the
same LSTM size (skipping runs already finished), then evaluates the best checkpoint on the test
documents: perplexity, and generative classification of the context field (eq. 7) on whole
documents and on chunks of a few sentences. Writes RESULTS.md in the recipe folder.

    python recipes/common/context_lm.py recipes/brown_genre [--seeds 0 1] [--modes factor ...]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import os
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from lm_models.checkpoint import load_checkpoint
from lm_models.corpora import Document, split_documents
from lm_models.lstm.evaluate import perplexity, report_from_scores, value_scores
from lm_models.lstm.inspect import context_pca, plot_pca, top_boosted_words
from lm_models.lstm.train import CORPUS_READERS, TrainConfig, train
from lm_models.vocab import Vocabulary
from rescorer.core.data import default_data_dir
from rescorer.core.device import resolve_device
from rescorer.core.machine import cpu_name
from rescorer.core.output import atomic_write

MODES = ("unadapted", "softmax_bias", "concat", "factor")
LABELS = {
    "unadapted": "Unadapted",
    "softmax_bias": "SoftmaxBias",
    "concat": "ConcatCell",
    "factor": "FactorCell",
}
log = logging.getLogger("context_lm")


def run_one(recipe: Path, spec: dict[str, Any], mode: str, seed: int, data_dir: Path) -> dict:
    out = recipe / "exp" / f"{mode}_seed{seed}"
    done = out / "done.json"
    if done.exists():
        return json.loads(done.read_text())
    base = TrainConfig.from_json(spec["train_config"])
    cfg = replace(base, model=replace(base.model, mode=mode), train=replace(base.train, seed=seed))
    t0 = time.perf_counter()
    result = train(cfg, data_dir, out, progress=False)
    wall = time.perf_counter() - t0
    tokens = sum(e.tokens for e in result.epochs)
    info = {
        "mode": mode,
        "seed": seed,
        "best_dev_ppl": result.best_dev_ppl,
        "best_epoch": result.best_epoch,
        "epochs": len(result.epochs),
        "wall_s": wall,
        "train_tokens_per_s": tokens / sum(e.seconds for e in result.epochs),
        "device": result.device,
    }
    done.write_text(json.dumps(info, indent=2) + "\n")
    return info


def evaluate_run(recipe: Path, spec: dict[str, Any], info: dict, data_dir: Path) -> dict:
    out = recipe / "exp" / f"{info['mode']}_seed{info['seed']}"
    cached = out / "eval.json"
    if cached.exists():
        return json.loads(cached.read_text())
    cfg = TrainConfig.from_json(spec["train_config"])
    dc = cfg.data
    path = Path(dc.path) if Path(dc.path).is_absolute() else data_dir / dc.path
    docs = CORPUS_READERS[dc.corpus](path, dc)
    _, _, test = split_documents(docs, dc.split, dc.stratify_by, dc.split_seed)
    device = resolve_device(cfg.train.device)
    model, tokens, _ = load_checkpoint(out / "best", device=device)
    vocab = Vocabulary(tokens)
    field = spec["field"]
    t0 = time.perf_counter()
    ppl = perplexity(model, vocab, test, field, device)
    res: dict[str, Any] = {
        "test_ppl": ppl.perplexity,
        "test_tokens": ppl.tokens,
        "params": model.num_parameters(),
    }
    if model.adaptive:
        values = list(next(v for v in model.config.context_vars if v.name == field).values)
        # Score every test sentence under every value once; documents and chunks are sums.
        sentences = [
            Document(f"{d.doc_id}#{i}", (sent,), d.fields)
            for d in test
            for i, sent in enumerate(d.sentences)
        ]
        per_sentence = value_scores(model, vocab, sentences, field, values, device)
        owner = np.repeat(np.arange(len(test)), [len(d.sentences) for d in test])
        doc_scores = np.zeros((len(test), len(values)))
        np.add.at(doc_scores, owner, per_sentence)
        truths = [d.fields.get(field) for d in test]
        docs_rep = report_from_scores(doc_scores, truths, values)
        res["acc_docs"] = docs_rep.accuracy
        res["confusion_docs"] = docs_rep.table()
        n_chunk = spec.get("chunk_sentences")
        if n_chunk:
            rows, chunk_truths, start = [], [], 0
            for d in test:  # consecutive n_chunk-sentence chunks; a shorter tail is dropped
                for k in range(len(d.sentences) // n_chunk):
                    a = start + k * n_chunk
                    rows.append(per_sentence[a : a + n_chunk].sum(axis=0))
                    chunk_truths.append(d.fields.get(field))
                start += len(d.sentences)
            chunk_rep = report_from_scores(np.array(rows), chunk_truths, values)
            res["acc_chunks"] = chunk_rep.accuracy
            res["n_chunks"] = len(rows)
    res["eval_s"] = time.perf_counter() - t0
    res["n_test_docs"] = len(test)
    cached.write_text(json.dumps(res, indent=2) + "\n")
    return res


def fmt(values: list[float], pct: bool = False) -> str:
    if not values:
        return "—"
    scale = 100 if pct else 1
    mean = float(np.mean(values)) * scale
    if len(values) == 1:
        return f"{mean:.2f}"
    spread = (max(values) - min(values)) * scale / 2
    return f"{mean:.2f} ± {spread:.2f}"


def write_results(
    recipe: Path, spec: dict[str, Any], rows: list[tuple[dict, dict]], command: str, started: float
) -> str:
    cfg = spec["train_config"]
    lines = [
        f"# {spec['title']}: results",
        "",
        f"- Command: `{command}`",
        f"- Date: {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M UTC}",
        f"- Device: {rows[0][0]['device']} ({cpu_name()}, {os.cpu_count()} cores)",
        f"- Wall time of this invocation: {time.perf_counter() - started:.0f} s; training "
        f"wall time per run is in the last table.",
        f"- Data: `{cfg['data']['path']}`, split by document ({cfg['data']['split']}, "
        f"stratified by `{cfg['data'].get('stratify_by')}`), context field `{spec['field']}`.",
        f"- Model (all modes): {json.dumps(cfg['model'])}",
        f"- Training: {json.dumps(cfg['train'])}",
        "- Mean over seeds ± half the range (run-to-run spread).",
        "",
        "| model | test perplexity | accuracy, whole documents % | accuracy, "
        + (
            f"{spec['chunk_sentences']}-sentence chunks %"
            if spec.get("chunk_sentences")
            else "chunks % (documents are one sentence)"
        )
        + " | parameters |",
        "|---|---|---|---|---|",
    ]
    for mode in MODES:
        sel = [(i, e) for i, e in rows if i["mode"] == mode]
        if not sel:
            continue
        lines.append(
            f"| {LABELS[mode]} | {fmt([e['test_ppl'] for _, e in sel])} | "
            f"{fmt([e['acc_docs'] for _, e in sel if 'acc_docs' in e], pct=True)} | "
            f"{fmt([e['acc_chunks'] for _, e in sel if 'acc_chunks' in e], pct=True)} | "
            f"{sel[0][1]['params']:,} |"
        )
    lines += [
        "",
        "## Runs",
        "",
        "| model | seed | best dev ppl (epoch) | test ppl | train tokens/s | train wall s | "
        "||A||/||W||, last epoch |",
        "|---|---|---|---|---|---|---|",
    ]
    curves = {}
    for info, ev in rows:
        log_rows = epoch_log(recipe, info)
        curves[f"{LABELS[info['mode']]} {info['seed']}"] = [e["dev_ppl"] for e in log_rows]
        ratio = (log_rows[-1].get("extra") or {}).get("adapt_ratio") if log_rows else None
        lines.append(
            f"| {LABELS[info['mode']]} | {info['seed']} | {info['best_dev_ppl']:.2f} "
            f"({info['best_epoch']}/{info['epochs']}) | {ev['test_ppl']:.2f} | "
            f"{info['train_tokens_per_s']:,.0f} | {info['wall_s']:.0f} | "
            f"{'—' if ratio is None else f'{ratio:.2f}'} |"
        )
    png = plot_curves(curves, recipe / "training_curves.png", spec["title"].split(",")[0])
    lines += ["", f"![dev perplexity per epoch, every run]({png.name})"]
    best_factor = [ev for info, ev in rows if info["mode"] == "factor" and "confusion_docs" in ev]
    if best_factor:
        lines += [
            "",
            "## FactorCell confusion matrix (test documents, first seed)",
            "",
            "```",
            best_factor[0]["confusion_docs"],
            "```",
        ]
    lines += inspection(recipe, spec)
    text = "\n".join(lines) + "\n"
    with atomic_write(recipe / "RESULTS.md") as f:
        f.write(text)
    return text


def epoch_log(recipe: Path, info: dict) -> list[dict[str, Any]]:
    """The run's per-epoch log (dev ppl, tokens, the FactorCell's adapt_ratio)."""
    trainer = recipe / "exp" / f"{info['mode']}_seed{info['seed']}" / "last" / "trainer.json"
    if not trainer.exists():
        return []
    return list(json.loads(trainer.read_text(encoding="utf-8")).get("log", []))


def plot_curves(curves: dict[str, list[float]], path: Path, title: str) -> Path:
    """Dev perplexity per epoch of every run, one line each (a PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=120)
    styles = dict(zip(LABELS.values(), ("-", "--", "-.", ":"), strict=True))
    for name, values in curves.items():
        label = name.rsplit(" ", 1)[0]
        ax.plot(range(1, len(values) + 1), values, styles.get(label, "-"), label=name, lw=1.2)
    ax.set_xlabel("epoch")
    ax.set_ylabel("dev perplexity")
    ax.set_yscale("log")
    ax.set_title(f"{title}: dev perplexity per epoch")
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    tmp = path.with_name(f".{path.name}.tmp.png")
    fig.savefig(tmp)
    plt.close(fig)
    tmp.replace(path)
    return path


def inspection(recipe: Path, spec: dict[str, Any]) -> list[str]:
    """Table 5 (top boosted words) and Figure 6 (PCA) for the first FactorCell run."""
    runs = sorted((recipe / "exp").glob("factor_seed*/best"))
    if not runs:
        return []
    model, tokens, _ = load_checkpoint(runs[0])
    field = spec["field"]
    lines = [
        "",
        f"## Top boosted words of the softmax bias ({runs[0].parent.name}; Table 5)",
        "",
        f"| {field} | words with the largest bias increase over the mean of all values |",
        "|---|---|",
    ]
    for value, words in top_boosted_words(model, tokens, field, 8).items():
        lines.append(f"| {value} | {' '.join(w for w, _ in words)} |")
    png = recipe / "context_pca.png"
    pca = context_pca(model, field)
    plot_pca(pca, png, f"{spec['title'].split(',')[0]}: {field} embeddings (PCA)")
    lines += [
        "",
        f"## PCA of the {field} embeddings (Figure 6)",
        "",
        f"![PCA of the context embeddings]({png.name}) "
        f"(first two components: {100 * pca.explained[0]:.0f}% and "
        f"{100 * pca.explained[1]:.0f}% of the variance)",
    ]
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("recipe", type=Path)
    ap.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
    ap.add_argument("--seeds", nargs="+", type=int, default=None)
    ap.add_argument("--data-dir", type=Path, default=None)
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    torch.set_num_threads(os.cpu_count() or 1)
    started = time.perf_counter()
    spec = json.loads((args.recipe / "recipe.json").read_text())
    data_dir = args.data_dir or default_data_dir()
    seeds = args.seeds or spec.get("seeds", [0, 1])
    rows = []
    for seed in seeds:
        for mode in args.modes:
            log.info("training %s seed %d", mode, seed)
            info = run_one(args.recipe, spec, mode, seed, data_dir)
            log.info("evaluating %s seed %d", mode, seed)
            rows.append((info, evaluate_run(args.recipe, spec, info, data_dir)))
    rows.sort(key=lambda r: (MODES.index(r[0]["mode"]), r[0]["seed"]))
    command = f"bash {args.recipe}/run.sh"
    print(write_results(args.recipe, spec, rows, command, started))


if __name__ == "__main__":
    main()
