"""Tokenizer commands: ``tokenizer train`` (a sentencepiece model over a text, for training
configs' ``data.tokenizer.model``)."""

from __future__ import annotations

from pathlib import Path

import click

from rescorer.cli.options import EXISTING_FILE, OUT_FILE, SEED, handle_errors

# rescorer.lm_models.tokenizer.TOKENIZER_KINDS (not imported: no torch here)
KINDS = ("unigram", "bpe")


@click.group()
def tokenizer() -> None:
    """Subword tokenizers (sentencepiece) for models over pieces."""


@tokenizer.command(name="train")
@click.option(
    "--text",
    type=EXISTING_FILE,
    required=True,
    help="Training text: one sentence per line, words split on whitespace (blank lines skipped).",
)
@click.option("--kind", type=click.Choice(KINDS), default="unigram", show_default=True)
@click.option(
    "--vocab-size",
    type=click.IntRange(min=300),
    default=8000,
    show_default=True,
    help="Pieces in all, the 3 special units and the 256 byte pieces included.",
)
@click.option(
    "--max-sentences",
    type=click.IntRange(min=0),
    default=2_000_000,
    show_default=True,
    help="Sentences sampled from the text to learn the pieces (0: all).",
)
@click.option("--seed", type=SEED, default=0, show_default=True, help="Seed of the sampling.")
@click.option("--out", "out", type=OUT_FILE, required=True, help="The model file to write.")
@handle_errors
def tokenizer_train(
    text: Path, kind: str, vocab_size: int, max_sentences: int, seed: int, out: Path
) -> None:
    """Learn a sentencepiece tokenizer from a text and write its model file.

    The same as a training config's "data": {"tokenizer": {"kind": ..., "vocab_size": ...}}
    learns inside `rescorer train`, made once ahead: give the file as "tokenizer": {"model":
    FILE} and training starts at once (a GPU lease need not spend minutes on it), and models
    trained apart share the same pieces. Words are spelt exactly by their pieces (byte pieces
    for unseen characters), so a model over them scores any word.

    \b
    Example:
      rescorer tokenizer train --text books.txt --vocab-size 16000 --out books16k.model
    """
    from rescorer.core.errors import FileError
    from rescorer.core.io import read_lines
    from rescorer.core.output import atomic_write
    from rescorer.lm_models.tokenizer import SubwordTokenizer, TokenizerOptions

    options = TokenizerOptions(
        kind=kind, vocab_size=vocab_size, max_sentences=max_sentences, seed=seed
    )
    counted = [0, 0]

    def sentences():
        for _, line in read_lines(text):
            words = line.split()
            if words:
                counted[0] += 1
                counted[1] += len(words)
                yield words

    try:
        tok = SubwordTokenizer.train(sentences(), options)
    except FileError:
        raise  # the text's own fault, named with its line by read_lines
    except ValueError:
        if counted[0] == 0:
            raise ValueError(f"{text}: no words (expected one sentence per line)") from None
        raise
    with atomic_write(out, "wb") as f:
        f.write(tok.model_proto)
    click.echo(
        f"wrote {out}: {kind} tokenizer of {len(tok)} pieces, from {counted[0]} sentences "
        f"({counted[1]} words) of {text}"
    )
