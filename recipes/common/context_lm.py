"""Shared driver of the context-aware LSTM recipes (brown_genre, agnews_topic).

For each mode (Unadapted, SoftmaxBias, ConcatCell, FactorCell) and seed it trains a model of the
same LSTM size (skipping runs already finished), then evaluates the best checkpoint on the test
documents: perplexity, and generative classification of the context field (eq. 7) on whole
documents and on chunks of a few sentences. Writes RESULTS.md and its plots under the recipe's
exp/ folder; ``--publish`` writes them into the recipe folder (the committed page).

Each finished run leaves a small record, ``exp/runs/<mode>_seed<k>.json``: its training summary,
test evaluation and per-epoch log, stamped with a hash of the recipe's ``train_config``;
``--publish`` copies the records into the recipe's ``runs/`` (tracked in git). RESULTS.md is
built from every record that matches the current config, the committed ones and this
checkout's (which replace a committed one of the same run), so seeds can be trained on
different days or machines (``--seeds 2`` adds seed 2 to the table) and a publishing run with
fewer runs deletes none; a record from a changed config is ignored with a warning and its run
trained again.

    python recipes/common/context_lm.py recipes/brown_genre [--seeds 0 1] [--modes factor ...]
        [--publish]
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import logging
import os
import shutil
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rescorer.core.data import default_data_dir
from rescorer.core.device import resolve_device
from rescorer.core.machine import cpu_name
from rescorer.core.output import atomic_write
from rescorer.lm_models.checkpoint import load_checkpoint
from rescorer.lm_models.corpora import Document, split_documents
from rescorer.lm_models.curves import LINE_STYLES, plot_dev_curves
from rescorer.lm_models.lstm.evaluate import perplexity, report_from_scores, value_scores
from rescorer.lm_models.lstm.inspect import context_pca, plot_pca, top_boosted_words
from rescorer.lm_models.lstm.train import CORPUS_READERS, TrainConfig, train
from rescorer.lm_models.vocab import Vocabulary

sys.path.insert(0, str(Path(__file__).resolve().parent))  # publish.py, beside this file
from publish import copy_tables  # noqa: E402

MODES = ("unadapted", "softmax_bias", "concat", "factor")
LABELS = {
    "unadapted": "Unadapted",
    "softmax_bias": "SoftmaxBias",
    "concat": "ConcatCell",
    "factor": "FactorCell",
}
log = logging.getLogger("context_lm")


def run_dir(recipe: Path, spec: dict[str, Any], mode: str, seed: int) -> Path:
    """The run's folder under exp/, stamped with the config hash. A folder from another
    train_config (or one from before the stamps) is set aside, not resumed: its checkpoints,
    done.json and eval.json belong to another model."""
    out = recipe / "exp" / f"{mode}_seed{seed}"
    stamp = out / "config_hash"
    want = config_hash(spec, mode)
    if out.exists():
        got = stamp.read_text().strip() if stamp.exists() else "unstamped"
        if got != want:
            aside = out.with_name(f"{out.name}.{got}")
            shutil.rmtree(aside, ignore_errors=True)
            out.rename(aside)
            log.warning("%s was made under another train_config (%s): set aside as %s",
                        out, got, aside.name)  # fmt: skip
    out.mkdir(parents=True, exist_ok=True)
    stamp.write_text(want + "\n")
    return out


def run_one(recipe: Path, spec: dict[str, Any], mode: str, seed: int, data_dir: Path) -> dict:
    out = run_dir(recipe, spec, mode, seed)
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


# Training settings only the FactorCell reads, added after the other modes' records were made:
# left out of their hash, so setting one does not send Unadapted, SoftmaxBias and ConcatCell
# to be trained again (their runs do not change).
FACTOR_ONLY_TRAIN_KEYS = ("adapt_weight_decay",)


def config_hash(spec: dict[str, Any], mode: str) -> str:
    """Short hash of the recipe's train_config as ``mode`` reads it: records made under another
    config do not mix."""
    config = spec["train_config"]
    train = config.get("train", {})
    if mode != "factor" and any(key in train for key in FACTOR_ONLY_TRAIN_KEYS):
        kept = {k: v for k, v in train.items() if k not in FACTOR_ONLY_TRAIN_KEYS}
        config = {**config, "train": kept}
    text = json.dumps(config, sort_keys=True)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def record_path(recipe: Path, mode: str, seed: int, published: bool = False) -> Path:
    """A run's record: this checkout's, under exp/runs/, or (``published``) the committed one
    under runs/."""
    return recipe / ("runs" if published else "exp/runs") / f"{mode}_seed{seed}.json"


def find_record(recipe: Path, spec: dict[str, Any], mode: str, seed: int) -> dict | None:
    """The run's current-config record: this checkout's, else the committed one."""
    for published in (False, True):
        rec = load_record(record_path(recipe, mode, seed, published), spec)
        if rec is not None:
            return rec
    return None


def load_record(path: Path, spec: dict[str, Any]) -> dict[str, Any] | None:
    """The run record at ``path`` if it exists and was made under the current config."""
    if not path.exists():
        return None
    try:
        rec = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(
            f"{path}: not a run record (invalid JSON: {exc.msg}, line {exc.lineno})"
        ) from None
    for key in ("config_hash", "info", "eval", "log"):
        if key not in rec:
            raise ValueError(f"{path}: not a run record (expected key {key!r})")
    if rec["config_hash"] != config_hash(spec, rec["info"].get("mode", "")):
        log.warning("%s: made under another train_config; ignored (the run is trained again)", path)
        return None
    return rec


def save_record(recipe: Path, spec: dict[str, Any], info: dict, ev: dict) -> dict[str, Any]:
    """Makes the run's record, writes it and returns it."""
    rec = {
        "config_hash": config_hash(spec, info["mode"]),
        "machine": f"{info['device']} ({cpu_name()}, {os.cpu_count()} cores)",
        "info": info,
        "eval": ev,
        "log": epoch_log(recipe, info),
    }
    write_record(recipe, rec)
    return rec


def write_record(recipe: Path, rec: dict[str, Any], published: bool = False) -> None:
    """``rec`` into its file under exp/runs/ (``published``: runs/; temp file + rename)."""
    path = record_path(recipe, rec["info"]["mode"], rec["info"]["seed"], published)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_write(path) as f:
        f.write(json.dumps(rec, indent=1) + "\n")


def publish_records(recipe: Path, spec: dict[str, Any]) -> None:
    """This checkout's current-config records (exp/runs/) join the committed ones (runs/)."""
    for path in sorted((recipe / "exp" / "runs").glob("*_seed*.json")):
        if (rec := load_record(path, spec)) is not None:
            write_record(recipe, rec, published=True)


def all_records(recipe: Path, spec: dict[str, Any]) -> list[dict[str, Any]]:
    """The current-config records of the recipe's complete seeds, in table order (mode, then
    seed): the committed ones (runs/) and this checkout's (exp/runs/, in place of a committed
    record of the same run). A seed is complete once every mode recorded under any seed has a
    record for it, so that each row of the table averages the same seeds."""
    paths = {p.name: p for p in sorted((recipe / "runs").glob("*_seed*.json"))}
    paths |= {p.name: p for p in sorted((recipe / "exp" / "runs").glob("*_seed*.json"))}
    recs = [
        rec for _, path in sorted(paths.items()) if (rec := load_record(path, spec)) is not None
    ]
    modes = {r["info"]["mode"] for r in recs}
    have: dict[int, set[str]] = {}
    for r in recs:
        have.setdefault(r["info"]["seed"], set()).add(r["info"]["mode"])
    partial = sorted(seed for seed, got in have.items() if got != modes)
    if partial:
        log.info("seeds %s lack some modes' records: left out of the table until complete", partial)
    recs = [r for r in recs if r["info"]["seed"] not in partial]
    recs.sort(key=lambda r: (MODES.index(r["info"]["mode"]), r["info"]["seed"]))
    return recs


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
    recipe: Path,
    spec: dict[str, Any],
    records: list[dict[str, Any]],
    command: str,
    started: float,
    published: bool = False,
) -> str:
    """RESULTS.md and its plots from ``records``: under exp/, or (``published``) in the recipe
    folder, with README.md's marked results table copied from it."""
    out = recipe if published else recipe / "exp"
    out.mkdir(parents=True, exist_ok=True)
    cfg = spec["train_config"]
    rows = [(r["info"], r["eval"]) for r in records]
    seeds = sorted({info["seed"] for info, _ in rows})
    wanted = spec.get("seeds", seeds)
    missing = [s for s in wanted if s not in seeds]
    machines = sorted({r.get("machine", r["info"]["device"]) for r in records})
    lines = [
        f"# {spec['title']}: results",
        "",
        f"- Command: `{command}`",
        f"- Date: {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M UTC}",
        f"- Device: {'; '.join(machines)}",
        f"- Seeds: {', '.join(map(str, seeds))}"
        + (
            f" (conf/recipe.json lists {', '.join(map(str, wanted))}; not yet run: "
            f"{', '.join(map(str, missing))})"
            if missing
            else ""
        )
        + (
            "; one record per run in `runs/`."
            if published
            else "; one record per run in `runs/` and, not yet published, `exp/runs/`."
        ),
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
    for rec in records:
        info, ev, log_rows = rec["info"], rec["eval"], rec["log"]
        curves[f"{LABELS[info['mode']]} {info['seed']}"] = [e["dev_ppl"] for e in log_rows]
        ratio = (log_rows[-1].get("extra") or {}).get("adapt_ratio") if log_rows else None
        lines.append(
            f"| {LABELS[info['mode']]} | {info['seed']} | {info['best_dev_ppl']:.2f} "
            f"({info['best_epoch']}/{info['epochs']}) | {ev['test_ppl']:.2f} | "
            f"{info['train_tokens_per_s']:,.0f} | {info['wall_s']:.0f} | "
            f"{'—' if ratio is None else f'{ratio:.2f}'} |"
        )
    png = plot_curves(curves, out / "training_curves.png", spec["title"].split(",")[0])
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
    lines += inspection(recipe, spec, records, out, published)
    text = "\n".join(lines) + "\n"
    with atomic_write(out / "RESULTS.md") as f:
        f.write(text)
    readme = recipe / "README.md"
    if published and readme.exists():
        table = copy_tables(readme.read_text(encoding="utf-8"), {"RESULTS.md": text}, str(readme))
        with atomic_write(readme) as f:
            f.write(table)
    return text


def epoch_log(recipe: Path, info: dict) -> list[dict[str, Any]]:
    """The run's per-epoch log (dev ppl, tokens, the FactorCell's adapt_ratio)."""
    trainer = recipe / "exp" / f"{info['mode']}_seed{info['seed']}" / "last" / "trainer.json"
    if not trainer.exists():
        return []
    return list(json.loads(trainer.read_text(encoding="utf-8")).get("log", []))


def plot_curves(curves: dict[str, list[float]], path: Path, title: str) -> Path:
    """Dev perplexity per epoch of every run, one line each (a PNG), a line style per mode."""
    styles = dict(zip(LABELS.values(), LINE_STYLES, strict=True))
    return plot_dev_curves(
        {f"{title}: dev perplexity per epoch": curves},
        path,
        style_of=lambda name: {"linestyle": styles.get(name.rsplit(" ", 1)[0], "-")},
        mark_best=False,
        log_y=True,
    )


def inspection(
    recipe: Path, spec: dict[str, Any], records: list[dict[str, Any]], out: Path, published: bool
) -> list[str]:
    """Table 5 (top boosted words) and Figure 6 (PCA) for the first FactorCell run.

    Computed from the run's checkpoint when it is here, and kept in its record (under exp/runs/,
    or runs/ when ``published``; the PNG in ``out``), so a table rebuilt on a machine without
    the checkpoint still shows them.
    """
    factor = [r for r in records if r["info"]["mode"] == "factor"]
    if not factor:
        return []
    rec = factor[0]
    best = recipe / "exp" / f"factor_seed{rec['info']['seed']}" / "best"
    if not best.exists():
        return list(rec.get("inspection", []))
    lines = inspection_lines(out, spec, best)
    rec["inspection"] = lines
    write_record(recipe, rec, published)
    return lines


def inspection_lines(out: Path, spec: dict[str, Any], best: Path) -> list[str]:
    model, tokens, _ = load_checkpoint(best)
    field = spec["field"]
    lines = [
        "",
        f"## Top boosted words of the softmax bias ({best.parent.name}; Table 5)",
        "",
        f"| {field} | words with the largest bias increase over the mean of all values |",
        "|---|---|",
    ]
    for value, words in top_boosted_words(model, tokens, field, 8).items():
        lines.append(f"| {value} | {' '.join(w for w, _ in words)} |")
    png = out / "context_pca.png"
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
    ap.add_argument(
        "--publish",
        action="store_true",
        help="copy this checkout's run records into runs/ and write RESULTS.md, its plots and "
        "README.md's results table in the recipe folder (default: all under exp/)",
    )
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS") or os.cpu_count() or 1))
    started = time.perf_counter()
    spec = json.loads((args.recipe / "conf" / "recipe.json").read_text())
    data_dir = args.data_dir or default_data_dir()
    seeds = args.seeds or spec.get("seeds", [0, 1])
    for seed in seeds:
        for mode in args.modes:
            if find_record(args.recipe, spec, mode, seed) is not None:
                log.info("%s seed %d: recorded in runs/ or exp/runs/, skipped", mode, seed)
                continue
            log.info("training %s seed %d", mode, seed)
            info = run_one(args.recipe, spec, mode, seed, data_dir)
            log.info("evaluating %s seed %d", mode, seed)
            save_record(args.recipe, spec, info, evaluate_run(args.recipe, spec, info, data_dir))
    if args.publish:
        publish_records(args.recipe, spec)
    command = f"bash {args.recipe}/run.sh"
    records = all_records(args.recipe, spec)
    print(write_results(args.recipe, spec, records, command, started, args.publish))


if __name__ == "__main__":
    main()
