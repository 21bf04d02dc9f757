"""Commands for CUE models (Novotney et al. 2022): ``cue-vectors``, ``cue-export``.

Registered on the ``rescorer`` group by :mod:`rescorer.cli.main`. Scoring and rescoring with a CUE
model go through the ordinary commands with ``--lm cue:DIR`` and a ``--contexts`` file.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from rescorer.cli.options import (
    EXISTING_FILE,
    MODEL_DIR,
    InputFailure,
    device_option,
    handle_errors,
    out_option,
)
from rescorer.contexts import read_contexts
from rescorer.core.output import atomic_write


@click.command(name="cue-vectors")
@click.option("--model", "model_dir", type=MODEL_DIR, required=True, help="A CUE checkpoint.")
@click.option(
    "--contexts",
    "contexts_path",
    type=EXISTING_FILE,
    required=True,
    help="Per-utterance context records (JSONL or TSV, as for rescore --contexts).",
)
@out_option(
    'JSONL to write: {"utt": ID, "strings": [...], "cue": [floats]} per utterance.', required=True
)
@device_option()
@handle_errors
def cue_vectors(model_dir: Path, contexts_path: Path, out_path: Path, device: str) -> None:
    """Precompute the CUE vector of each utterance's context, once (the input of an ONNX export).

    The fields the model declares are rendered as strings ("genre: news"), embedded by the
    model's frozen string encoder and folded by its context encoder into one vector.

    \b
    Example:
      rescorer cue-vectors --model exp/cue --contexts ctx.jsonl --out cue.jsonl
    """
    from rescorer.lm_models.cue.model import load_cue  # torch: imported here

    contexts = read_contexts(contexts_path)
    if not contexts:
        raise InputFailure(f"{contexts_path}: no context records")
    lm = load_cue(model_dir, device)
    ids = list(contexts)
    vectors = lm.cue_vectors([contexts[u] for u in ids])
    with atomic_write(out_path) as fh:
        for utt, vec in zip(ids, vectors, strict=True):
            strings = lm.context_strings(contexts[utt])
            row = {"utt": utt, "strings": strings, "cue": [round(float(x), 7) for x in vec]}
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
    known = sum(1 for u in ids if lm.context_strings(contexts[u]))
    click.echo(
        f"{len(ids)} CUE vectors ({lm.config.dim} dims; {len(ids) - known} with no known field) "
        f"-> {out_path}"
    )


@click.command(name="cue-export")
@click.option("--model", "model_dir", type=MODEL_DIR, required=True, help="A CUE checkpoint.")
@out_option("The .onnx file to write (its vocabulary goes beside it as .vocab.txt).", required=True)
@click.option("--check/--no-check", default=True, show_default=True, help="Parity with PyTorch.")
@handle_errors
def cue_export(model_dir: Path, out_path: Path, check: bool) -> None:
    """Export a CUE model's sentence encoder and decoder to ONNX; the CUE vector is an input.

    Inputs x (N, L) <s> w1..wn </s>, x_lens (N,), cue (N, D); outputs log_probs (N, L, V),
    token_logprobs (N, L-1), sentence_logprob (N,), natural logs.

    \b
    Example:
      rescorer cue-export --model exp/cue --out cue.onnx
    """
    from rescorer.export.cue_graph import check_cue_parity, export_cue  # torch, onnx: imported here
    from rescorer.lm_models.cue.model import load_cue

    lm = load_cue(model_dir, "cpu")
    result = export_cue(lm, out_path)
    click.echo(f"wrote {result.model_path} and {result.vocab_path}")
    if check:
        report = check_cue_parity(lm, result.model_path)
        click.echo(report.describe())
        if not report.ok:
            raise click.ClickException(report.describe())
