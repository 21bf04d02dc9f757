"""Context commands: ``context build`` (the previous utterances' own text as context) and
``context vectors`` (each utterance's context embedding, for an ONNX vector export)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from rescorer.cli.options import (
    EXISTING_FILE,
    MODEL_DIR,
    InputFailure,
    InputOrKeyword,
    device_option,
    handle_errors,
    load_nbest,
    nbest_options,
    out_option,
)
from rescorer.context_build import (
    CACHE_FIELD,
    GROUP_BY,
    PREVIOUS_FIELD,
    ContextBuildOptions,
    build_contexts,
    write_contexts,
)
from rescorer.contexts import read_contexts
from rescorer.core.errors import InputError, check_same_ids
from rescorer.core.io import check_input_file
from rescorer.core.output import atomic_write
from rescorer.export.format import VECTOR_FIELD
from rescorer.refs import read_kaldi_text

FIRST_PASS = "first-pass"


@click.group()
def context() -> None:
    """Per-utterance context files."""


@context.command(name="build")
@nbest_options
@click.option(
    "--previous",
    type=click.IntRange(min=1),
    default=3,
    show_default=True,
    help="How many earlier utterances of the same group to include.",
)
@click.option(
    "--group-by",
    type=click.Choice([*GROUP_BY, "chapter"]),
    default="recording",
    show_default=True,
    help="recording: the id minus its last part (LibriSpeech's chapter); speaker: its first part.",
)
@click.option(
    "--from",
    "source",
    type=InputOrKeyword(FIRST_PASS),
    default=FIRST_PASS,
    show_default=True,
    help="first-pass: each list's first hypothesis; or a rescored 1-best (`uttid words`, the "
    "1best.txt of `rescorer rescore`, or its folder) for a second pass. Never the references.",
)
@click.option("--field", default=PREVIOUS_FIELD, show_default=True, help="Name of the text field.")
@click.option(
    "--cache",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Also a second text field of the same form over this many utterances before (e.g. "
    "100: the chapter so far, for a cache: model beside a context LM); 0: none.",
)
@click.option(
    "--cache-field", default=CACHE_FIELD, show_default=True, help="Name of that second field."
)
@click.option(
    "--metadata/--no-metadata",
    default=True,
    show_default=True,
    help="Also write the speaker and recording read from the ids.",
)
@out_option("Where to write the context file (JSONL).", required=True)
@handle_errors
def context_build(
    nbest_path: Path,
    fmt: str,
    max_nbest: int | None,
    previous: int,
    group_by: str,
    source: str,
    field: str,
    cache: int,
    cache_field: str,
    metadata: bool,
    out_path: Path,
) -> None:
    """Context of each utterance from the system's own text of the utterances before it.

    For each utterance: the 1-best of the --previous utterances before it in its group, oldest
    first, as the field `previous` (left out for a group's first utterance), and its `speaker`
    and `recording`. `--context` of score, tune, rescore and ppl reads the file.

    \b
    Example:
      rescorer context build --nbest DEV --previous 3 --out dev.ctx.jsonl
      rescorer context build --nbest DEV --from rescored/1best.txt --out dev.ctx2.jsonl
      rescorer context build --nbest DEV --previous 3 --cache 100 --out dev.both.jsonl
    """
    nbest = load_nbest(nbest_path, fmt, max_nbest=max_nbest)
    if source == FIRST_PASS:
        texts = {u: nb[0].words if len(nb) else () for u, nb in nbest.items()}
        text_path = nbest_path
    else:
        path = Path(source)
        if path.is_dir():
            path = path / "1best.txt"
        texts = read_kaldi_text(check_input_file(path))
        check_same_ids(set(nbest), set(texts), "1-best", path, against=nbest_path)
        text_path = path
    options = ContextBuildOptions(
        previous=previous,
        group_by=group_by,
        field=field,
        metadata=metadata,
        cache=cache,
        cache_field=cache_field,
    )
    try:
        contexts = build_contexts(texts, options)
    except ValueError as err:  # an id without speaker-recording-position: name the file
        raise InputError(str(err), text_path) from None
    write_contexts(out_path, contexts)
    with_text = sum(1 for r in contexts.values() if options.field in r)
    groups = len({r.get("recording") for r in contexts.values()}) if metadata else None
    click.echo(
        f"wrote {out_path}: {len(contexts)} utterances, {with_text} with previous text"
        + (f", {groups} recording(s)" if groups is not None else "")
    )


@context.command(name="vectors")
@click.option(
    "--model", "model_dir", type=MODEL_DIR, required=True, help="A context LSTM checkpoint."
)
@click.option(
    "--context",
    "context_path",
    type=EXISTING_FILE,
    required=True,
    help="Per-utterance context records (JSONL or TSV), e.g. from `context build`.",
)
@click.option(
    "--field",
    default=VECTOR_FIELD,
    show_default=True,
    help="The field to write each vector to (what vector exports read).",
)
@out_option("The context file of vectors to write (JSONL).", required=True)
@device_option()
@handle_errors
def context_vectors(
    model_dir: Path, context_path: Path, field: str, out_path: Path, device: str
) -> None:
    """Each utterance's context embedding c, computed once: the input of a vector export.

    The model reduces each record to its own context variables (a text field embedded by its
    frozen encoder, unknown fields ignored, missing ones expected) and writes c as a list of
    numbers in the field --field of a context file, which `onnx:` models of kind vector-step or
    vector-scorer read through --context.

    \b
    Example:
      rescorer context build --nbest DEV --previous 3 --out dev.ctx.jsonl
      rescorer context vectors --model exp/prev/best --context dev.ctx.jsonl --out dev.vec.jsonl
      rescorer export exp/prev/best prev.onnx --kind vector-scorer
      rescorer score --nbest DEV --lm prev=onnx:prev.onnx --context dev.vec.jsonl --out s.jsonl
    """
    from rescorer.lms.torch import TorchLM  # torch: imported here

    if not field.strip():
        raise click.BadParameter(
            f"expected a field name, got an empty one ({field!r})", param_hint="--field"
        )
    contexts = read_contexts(context_path)
    if not contexts:
        raise InputFailure(f"{context_path}: no context records")
    lm = TorchLM(model_dir, device=device)
    # The vectors' field must be a new name: one the model reads (or the records hold) would
    # be read as that field by the models given this file as --context.
    config = lm.model.config
    variables = {v.name for v in getattr(config, "context_vars", ())}
    variables |= {config.history} if getattr(config, "history", "") else set()
    if field in variables:
        raise InputFailure(
            f"--field {field}: the name of a context variable of {model_dir}; expected a new "
            f"field name for the vectors (default {VECTOR_FIELD})"
        )
    holder = next((utt for utt, record in contexts.items() if field in record), None)
    if holder is not None:
        raise InputError(
            f"--field {field}: the records already have a field {field!r} (utterance {holder}); "
            f"expected a new field name for the vectors (default {VECTOR_FIELD})",
            context_path,
        )
    ids = list(contexts)
    vectors = lm.context_vectors([contexts[u] for u in ids])
    with atomic_write(out_path) as f:
        for utt, vec in zip(ids, vectors, strict=True):
            row = {"utt": utt, "fields": {field: [float(x) for x in vec]}}
            f.write(json.dumps(row) + "\n")
    click.echo(f"wrote {out_path}: {len(ids)} context vectors of {vectors.shape[1]} numbers")
