"""Corpus commands: ``corpus shard`` (a training corpus cut into shards for training that
streams it, one process per device) and ``corpus check`` (the shards against their index)."""

from __future__ import annotations

from pathlib import Path

import click

from rescorer.cli.options import EXISTING_FILE, MODEL_DIR, OUT_DIR, handle_errors


@click.group()
def corpus() -> None:
    """Training corpora on disk."""


@corpus.command(name="shard")
@click.argument("source", metavar="IN", type=EXISTING_FILE)
@click.argument("out_dir", metavar="OUT", type=OUT_DIR)
@click.option(
    "--shards",
    "n_shards",
    type=click.IntRange(min=1),
    required=True,
    help="How many shards: at least, and best a multiple of, the training processes.",
)
@click.option(
    "--format",
    "kind",
    type=click.Choice(["auto", "text", "jsonl", "conllu"]),
    default="auto",
    show_default=True,
    help="text: one sentence per line; jsonl: one document per line (each checked); conllu: "
    "one CoNLL-U sentence block per unit; auto: jsonl for a .jsonl or .jsonl.gz name, conllu "
    "for .conllu or .conllu.gz, else text.",
)
@handle_errors
def corpus_shard(source: Path, out_dir: Path, n_shards: int, kind: str) -> None:
    """Cut a training corpus into shards with an index (OUT/index.json).

    Line k of IN (blank lines left out; CoNLL-U: sentence k) goes to shard k mod N, in order:
    the shards partition the lines and the same input gives the same shards. `rescorer train
    CONFIG --train-shards OUT` (LSTM family; fnlm-train and lbl-train take the same option, or
    "train_shards" in the config's data section) then streams them, one shard in memory at a
    time; under torchrun process r reads shards r, r + P, ...

    \b
    Examples:
      rescorer corpus shard train.jsonl shards/ --shards 64
      rescorer corpus shard tr_imst-ud-train.conllu shards/ --shards 8
    """
    from rescorer.lm_models.corpus_shards import write_shards  # no torch: the shard module is plain

    index = write_shards(source, out_dir, n_shards, None if kind == "auto" else kind)
    click.echo(
        f"wrote {len(index.shards)} {index.kind} shards to {out_dir}: {index.lines} "
        f"{'sentences' if index.kind == 'conllu' else 'lines'}, {index.words} words"
    )


@corpus.command(name="check")
@click.argument("shard_dir", metavar="DIR", type=MODEL_DIR)
@handle_errors
def corpus_check(shard_dir: Path) -> None:
    """Check every shard of DIR against its index (size and SHA-256), e.g. after a copy.

    \b
    Example:
      rescorer corpus check shards/
    """
    from rescorer.lm_models.corpus_shards import ShardIndex, check_all

    index = ShardIndex.load(shard_dir)
    check_all(index)
    click.echo(
        f"{shard_dir}: {len(index.shards)} {index.kind} shards, {index.lines} lines, "
        f"{index.words} words: ok"
    )
