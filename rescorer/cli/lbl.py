"""Commands for multiplicative attribute LBLs (Kiros et al. 2014): ``lbl-train``, ``lbl-infer``,
``lbl-similar``, ``lbl-sample``, ``lbl-export``. Registered on the ``rescorer`` group by
:mod:`rescorer.cli`. The trained model itself is ``--lm lbl:DIR`` in ``ppl``, ``score``,
``rescore`` (its attributes come from ``--context``)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click
import numpy as np

from rescorer.cli.options import (
    EXISTING_FILE,
    MODEL_DIR,
    OUT_FILE,
    POSITIVE,
    SEED,
    InputFailure,
    config_trainer_options,
    device_option,
    handle_errors,
    out_option,
    run_config_trainer,
)
from rescorer.core.errors import InputError
from rescorer.core.io import read_lines
from rescorer.core.output import atomic_write


def _record(text: str, option: str) -> dict[str, str]:
    """``FIELD=VALUE[,FIELD=VALUE...]`` -> a context record."""
    record: dict[str, str] = {}
    for pair in text.split(","):
        field, sep, value = pair.partition("=")
        field, value = field.strip(), value.strip()
        if not sep or not field or not value:
            raise click.BadParameter(
                f"expected FIELD=VALUE[,FIELD=VALUE], got {text!r}", param_hint=option
            )
        if field in record:
            raise click.BadParameter(f"field {field!r} given twice in {text!r}", param_hint=option)
        record[field] = value
    return record


def _check_record(model: Any, record: dict[str, str], option: str) -> None:
    """Every field must be an attribute of the model and every value one seen in training."""
    names = [a.name for a in model.config.attributes]
    for field, value in record.items():
        if field not in names:
            raise click.BadParameter(
                f"{field!r} is not an attribute of the model (it has {names})", param_hint=option
            )
        spec = model.config.attributes[names.index(field)]
        if value not in spec.values:
            shown = ", ".join(spec.values[:10]) + (" ..." if len(spec.values) > 10 else "")
            raise click.BadParameter(
                f"{field}={value!r} was not seen in training (values: {shown})", param_hint=option
            )


def _vector(model: Any, records: Sequence[dict[str, str]], option: str) -> Any:
    """The attribute vector of one record, or the average of several (Table 2)."""
    import torch

    from rescorer.lm_models.lbl.train import attribute_vector

    if not model.config.attributes:
        if records:
            raise click.UsageError(f"{option}: the model has no attributes")
        return None
    for r in records:
        _check_record(model, r, option)
    vectors = [attribute_vector(model, r) for r in records] or [attribute_vector(model, None)]
    return torch.stack(vectors).mean(0)


# -- lbl-train ------------------------------------------------------------------------------------


@click.command(name="lbl-train")
@config_trainer_options("lbl")
@handle_errors
def lbl_train(
    config_path: Path,
    out_dir: Path,
    data_dir: Path | None,
    seed: int | None,
    device: str | None,
    train_shards: Path | None,
) -> None:
    """Train a (multiplicative attribute) log-bilinear LM from a JSON config.

    The config has "data", "model" and "train" sections (see rescorer.lm_models.lbl.train): corpus
    (brown, jsonl), attribute fields ("genre", "doc" = the document id), order, K, factors F,
    attribute widths, "vocab_attribute" for unshared vocabularies (section 2.4); "factors": 0
    with no attributes is the plain LBL.

    \b
    Examples:
      rescorer lbl-train conf/atd.json --out exp/atd_seed0 --seed 0
      rescorer lbl-train conf/big.json --train-shards shards/ --out exp/big  # jsonl
    """
    from rescorer.lm_models.lbl.train import LBLTrainConfig, train_lbl  # torch: imported here

    run_config_trainer(
        LBLTrainConfig, train_lbl, config_path, out_dir, data_dir, seed, device, train_shards
    )


# -- lbl-infer ------------------------------------------------------------------------------------


@click.command(name="lbl-infer")
@click.option("--model", "model_dir", type=MODEL_DIR, required=True, help="LBL checkpoint.")
@click.option(
    "--text",
    "text_path",
    type=EXISTING_FILE,
    required=True,
    help='Texts, JSONL: {"id": ..., "text": "tokenised sentences, one per line", '
    '"fields": {...}} (fields: the other attributes; missing ones use the expected vector).',
)
@click.option("--attribute", required=True, help="The attribute whose vector is inferred.")
@click.option("--steps", type=click.IntRange(min=0), default=50, show_default=True)
@click.option("--lr", type=POSITIVE, default=0.05, show_default=True)
@click.option(
    "--max-tokens",
    type=click.IntRange(min=1),
    default=None,
    help="Use at most this many tokens of each text (its first ones).",
)
@out_option("Write one JSON line per text: id, vector, loss curve, nearest training values.")
@device_option()
@handle_errors
def lbl_infer(
    model_dir: Path,
    text_path: Path,
    attribute: str,
    steps: int,
    lr: float,
    max_tokens: int | None,
    out_path: Path | None,
    device: str,
) -> None:
    """Infer an unseen attribute vector per text, every network weight frozen (section 2.5).

    Prints, per text, the per-token loss before and after, the step from which the loss is
    within 0.01 nats of its final value, and the training values whose vectors are nearest.

    \b
    Example:
      rescorer lbl-infer --model exp/atd_seed0 --text docs.jsonl --attribute genre
    """
    import torch

    from rescorer.lm_models.corpora import read_jsonl
    from rescorer.lm_models.lbl.model import load_lbl
    from rescorer.lm_models.lbl.train import (
        InferenceDiverged,
        InferenceOptions,
        encode_documents,
        infer_attributes,
        limit_rows,
    )

    model, vocab = load_lbl(model_dir, device)
    cfg = model.config
    try:
        a = cfg.attribute_index(attribute)
    except ValueError as err:
        raise click.BadParameter(str(err), param_hint="--attribute") from None
    docs = read_jsonl(text_path, tokenizer=str.split)
    if cfg.lower:
        from rescorer.lm_models.corpora import Document

        docs = [
            Document(d.doc_id, [[w.lower() for w in s] for s in d.sentences], d.fields)
            for d in docs
        ]
    for d in docs:
        if not d.sentences:
            raise InputError(f"document {d.doc_id!r} has no words", text_path)
    if not docs:
        raise InputFailure(f"{text_path}: no documents")
    rows = limit_rows(encode_documents(cfg, vocab, docs, {attribute: None}), max_tokens)
    try:
        result = infer_attributes(model, rows, attribute, InferenceOptions(steps=steps, lr=lr))
    except InferenceDiverged as err:
        raise InputFailure(f"--lr {lr:g}: {err}; give a smaller --lr") from None
    table = model.attribute_table(a).detach().cpu()
    vecs = torch.from_numpy(result.vectors).float()
    cos = torch.nn.functional.normalize(vecs, dim=1) @ torch.nn.functional.normalize(table, dim=1).T
    converge = result.steps_to_converge()
    lines = []
    for i, d in enumerate(docs):
        best = torch.topk(cos[i], min(3, len(table)))
        nearest = [
            (cfg.attributes[a].values[int(j)], float(s))
            for s, j in zip(best.values, best.indices, strict=True)
        ]
        curve = result.losses[:, i]
        click.echo(
            f"{d.doc_id}: {int(result.tokens[i])} tokens, loss {curve[0]:.3f} -> {curve[-1]:.3f} "
            f"nats (within 0.01 from step {int(converge[i])}); nearest "
            + ", ".join(f"{v} ({s:.2f})" for v, s in nearest)
        )
        lines.append(
            {
                "id": d.doc_id,
                "attribute": attribute,
                "vector": [round(float(v), 6) for v in result.vectors[i]],
                "losses": [round(float(v), 6) for v in curve],
                "nearest": [{"value": v, "cosine": round(s, 6)} for v, s in nearest],
            }
        )
    click.echo(f"{len(docs)} texts, {steps} steps, {result.seconds:.1f} s")
    if out_path is not None:
        with atomic_write(out_path) as f:
            for line in lines:
                f.write(json.dumps(line) + "\n")
        click.echo(f"wrote {out_path}")


# -- lbl-similar ----------------------------------------------------------------------------------


def _read_queries(path: Path) -> list[tuple[str, int]]:
    """The query words of ``path`` with their line numbers."""
    words = []
    for lineno, line in read_lines(path):
        parts = line.split()
        if not parts:
            continue
        if len(parts) != 1:
            raise InputError(f"expected one word per line, got {line.strip()!r}", path, lineno)
        words.append((parts[0], lineno))
    if not words:
        raise InputError("no query words", path)
    return words


@click.command(name="lbl-similar")
@click.option("--model", "model_dir", type=MODEL_DIR, required=True, help="LBL checkpoint.")
@click.option("--word", "words", multiple=True, help="A query word (repeatable).")
@click.option("--queries", "queries_path", type=EXISTING_FILE, help="Query words, one a line.")
@click.option("--a", "a_text", required=True, help="Attribute A: FIELD=VALUE[,FIELD=VALUE].")
@click.option("--b", "b_text", required=True, help="Attribute B: FIELD=VALUE[,FIELD=VALUE].")
@click.option("--top", type=click.IntRange(min=1), default=15, show_default=True)
@click.option("--show", type=click.IntRange(min=1), default=3, show_default=True)
@handle_errors
def lbl_similar(
    model_dir: Path,
    words: tuple[str, ...],
    queries_path: Path | None,
    a_text: str,
    b_text: str,
    top: int,
    show: int,
) -> None:
    """Conditional word similarity (section 3.4, Table 5): a word's nearest neighbours under two
    attributes, by cosine among the attribute-gated word vectors (rows of T^x).

    Prints a tab-separated table: query, common neighbours, unique to A, unique to B (the top
    SHOW of each among the TOP neighbours under A and under B).

    \b
    Example:
      rescorer lbl-similar --model exp/atd_seed0 --word church --a genre=religion --b genre=news
    """
    from rescorer.lm_models.lbl.model import load_lbl
    from rescorer.lm_models.lbl.train import conditional_neighbours

    model, vocab = load_lbl(model_dir)
    # (word, line of --queries or None for --word)
    queries: list[tuple[str, int | None]] = [(w, None) for w in words]
    queries += _read_queries(queries_path) if queries_path else []
    if not queries:
        raise click.UsageError("give --word or --queries")
    x_a = _vector(model, [_record(a_text, "--a")], "--a")
    x_b = _vector(model, [_record(b_text, "--b")], "--b")
    if model.config.lower:
        queries = [(q.lower(), line) for q, line in queries]
    rows = []  # every query is checked before the table is printed
    for q, line in queries:
        try:
            rows.append((q, conditional_neighbours(model, vocab, q, x_a, x_b, top, show)))
        except ValueError as err:
            if line is None:  # an option's value
                raise click.BadParameter(str(err), param_hint="--word") from None
            raise InputError(str(err), queries_path, line) from None
    click.echo(f"query\tcommon\tunique to {a_text}\tunique to {b_text}")
    for q, nb in rows:
        click.echo(
            f"{q}\t{' '.join(nb.common) or '-'}\t{' '.join(nb.unique_a) or '-'}\t"
            f"{' '.join(nb.unique_b) or '-'}"
        )


# -- lbl-sample -----------------------------------------------------------------------------------


@click.command(name="lbl-sample")
@click.option("--model", "model_dir", type=MODEL_DIR, required=True, help="LBL checkpoint.")
@click.option(
    "--context",
    "contexts",
    multiple=True,
    help="FIELD=VALUE[,FIELD=VALUE]: condition on this record's attribute vector; given "
    "twice or more, on the average of their vectors (Table 2). None: the expected vector.",
)
@click.option("-n", "num", type=click.IntRange(min=1), default=3, show_default=True)
@click.option("--max-words", type=click.IntRange(min=1), default=40, show_default=True)
@click.option("--temperature", type=POSITIVE, default=1.0)
@click.option("--seed", type=SEED, default=0, show_default=True)
@handle_errors
def lbl_sample(
    model_dir: Path,
    contexts: tuple[str, ...],
    num: int,
    max_words: int,
    temperature: float,
    seed: int,
) -> None:
    """Sample sentences conditioned on attributes (Table 2).

    \b
    Example:
      rescorer lbl-sample --model exp/atd_seed0 --context genre=religion --context genre=news
    """
    from rescorer.lm_models.lbl.model import load_lbl
    from rescorer.lm_models.lbl.train import sample_sentences

    model, vocab = load_lbl(model_dir)
    x = _vector(model, [_record(c, "--context") for c in contexts], "--context")
    for words in sample_sentences(model, vocab, x, num, max_words, seed, temperature):
        click.echo(" ".join(words))


# -- lbl-export -----------------------------------------------------------------------------------


@click.command(name="lbl-export")
@click.argument("model_dir", metavar="CHECKPOINT", type=MODEL_DIR)
@click.argument("out_path", type=OUT_FILE, metavar="OUT.onnx")
@click.option(
    "--context",
    "context_text",
    default=None,
    help="FIELD=VALUE[,FIELD=VALUE]: the attributes folded in (fields left out: expected vector).",
)
@handle_errors
def lbl_export(model_dir: Path, out_path: Path, context_text: str | None) -> None:
    """Export an LBL to ONNX with one attribute vector folded into its word matrix, and check
    the export against PyTorch in ONNX Runtime.

    \b
    Example:
      rescorer lbl-export exp/atd_seed0 atd_news.onnx --context genre=news
    """
    from rescorer.export.lbl_graph import TOLERANCE, export_lbl, lbl_parity
    from rescorer.lm_models.lbl.model import load_lbl

    model, _ = load_lbl(model_dir)
    record = _record(context_text, "--context") if context_text else {}
    _check_record(model, record, "--context")
    result = export_lbl(model_dir, out_path, record)
    diff = lbl_parity(model, out_path, record)
    verdict = "ok" if diff <= TOLERANCE else "FAILED"
    click.echo(
        f"wrote {out_path} ({result.bytes / 2**20:.1f} MiB) and {result.vocab_path.name}; "
        f"context {result.context or 'expected'}; parity with PyTorch {verdict}: "
        f"max abs difference {diff:.2e}"
    )
    if not np.isfinite(diff) or diff > TOLERANCE:
        raise click.ClickException("the export does not match PyTorch")
