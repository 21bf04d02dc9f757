"""Model commands: ``ppl``, ``ngram build``, ``train``, ``classify``, ``inspect``, ``export``."""

from __future__ import annotations

import logging
import math
import os
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from rescorer.cli.options import (
    EXISTING_FILE,
    MODEL_DIR,
    OUT_DIR,
    OUT_FILE,
    InputFailure,
    LMSpecType,
    NumberList,
    context_options,
    device_option,
    handle_errors,
    lm_case_option,
    load_contexts,
    normalize_option,
    progress_bars,
    read_text_sentences,
    show_epochs,
    text_format_option,
)
from rescorer.core.errors import InputError
from rescorer.core.io import read_lines
from rescorer.core.output import atomic_write
from rescorer.export.format import KINDS as EXPORT_KINDS
from rescorer.export.format import VECTOR_KINDS
from rescorer.lms import load_lm
from rescorer.lms.contract import LMSpec
from rescorer.lms.kenlm import kenlm_words
from rescorer.ngram import (
    BINARY_TYPES,
    SPECIAL_WORDS,
    TRAINING_TEXT_FORMATS,
    NgramOptions,
    build_ngram,
    model_format,
)
from rescorer.normalize import Normalizer

if TYPE_CHECKING:
    from rescorer.lm_models.lstm.model import ContextLSTM

logger = logging.getLogger(__name__)

# ppl's per-value lines stop at fields of this many values (a text field: present or missing)
PPL_BREAKDOWN_VALUES = 50


# -- ppl ----------------------------------------------------------------------------------------


@click.command()
@click.option("--lm", "lm_spec", type=LMSpecType(), required=True, help="Model [NAME=]KIND:PATH.")
@click.option(
    "--text",
    "text_path",
    type=EXISTING_FILE,
    required=True,
    help="Text to evaluate, one sentence per line.",
)
@text_format_option
@lm_case_option()
@context_options
@handle_errors
def ppl(
    lm_spec: LMSpec,
    text_path: Path,
    text_format: str,
    lm_case: str,
    context_path: Path | None = None,
    device: str | None = None,
) -> None:
    """Perplexity of a language model on text.

    Totals are natural-log; OOV words are scored with the model's <unk>, and a second figure
    leaves them out (SRILM's convention).

    \b
    Example:
      rescorer ppl --lm kenlm:4gram.bin --text DEV/references/ref_wer.trn --text-format trn
    """
    if context_path is not None and text_format == "plain":
        raise click.UsageError(
            "--context needs utterance ids: use --text-format kaldi or trn (plain has none)"
        )
    texts = read_text_sentences(text_path, text_format)
    sentences = list(texts.values())
    by_utt = None if text_format == "plain" else load_contexts(context_path, list(texts), text_path)
    contexts = None if by_utt is None else [by_utt[utt] for utt in texts]
    lm = load_lm(lm_spec, case=lm_case, **({} if device is None else {"device": device}))
    logps = lm.token_logprobs(sentences, contexts)
    flags = lm.oov_flags(sentences)
    oov = int(sum(f.sum() for f in flags))
    words = int(sum(len(f) for f in flags))
    total = float(sum(lp.sum() for lp in logps))
    tokens = int(sum(len(lp) for lp in logps))
    if not math.isfinite(total):
        raise InputError(
            f"expected finite log-probabilities from the model, got {total} (NaN or infinite "
            "weights in it?)",
            lm_spec.path,
        )
    click.echo(
        f"{len(sentences)} sentences, {words} words, {oov} OOVs ({100 * oov / max(words, 1):.2f}%)"
    )
    click.echo(f"logprob (ln) {total:.2f} over {tokens} tokens incl. </s>, OOVs scored as <unk>")
    click.echo(f"ppl {math.exp(-total / tokens):.2f}")
    if lm.units == "word":
        # SRILM's convention: OOV words are left out of both the total and the count.
        known_total = float(
            sum(lp[:-1][~f].sum() + lp[-1] for lp, f in zip(logps, flags, strict=True))
        )
        known_tokens = tokens - oov
        click.echo(
            f"ppl excluding OOVs {math.exp(-known_total / known_tokens):.2f} "
            f"over {known_tokens} tokens"
        )
    if contexts is not None:
        _ppl_by_context(contexts, logps)


def _ppl_by_context(contexts: Sequence[Mapping[str, Any] | None], logps: Sequence[Any]) -> None:
    """Perplexity per context value, for every field of the context records; a field of more
    than PPL_BREAKDOWN_VALUES values (text such as the previous utterances: a value per
    sentence) is split into the sentences that have it and those that do not."""
    groups: dict[tuple[str, str], list[int]] = {}
    for i, record in enumerate(contexts):
        for field, value in (record or {}).items():
            groups.setdefault((field, str(value)), []).append(i)
    per_field = Counter(field for field, _ in groups)
    lines: dict[tuple[str, str], list[int]] = {}
    for (field, value), idx in groups.items():
        if per_field[field] <= PPL_BREAKDOWN_VALUES:
            lines[(field, value)] = idx
        else:
            lines.setdefault((field, f"<any of {per_field[field]} values>"), []).extend(idx)
    for field, n in per_field.items():
        if n > PPL_BREAKDOWN_VALUES:
            absent = [i for i, r in enumerate(contexts) if field not in (r or {})]
            if absent:
                lines[(field, "<missing>")] = absent
    for (field, value), idx in sorted(lines.items()):
        g_total = float(sum(logps[i].sum() for i in idx))
        g_tokens = int(sum(len(logps[i]) for i in idx))
        click.echo(
            f"  {field}={value}: ppl {math.exp(-g_total / g_tokens):.2f} over {g_tokens} "
            f"tokens, {len(idx)} sentences"
        )


# -- ngram --------------------------------------------------------------------------------------


@click.group()
def ngram() -> None:
    """N-gram models with KenLM."""


@ngram.command(name="build")
@click.option(
    "--text",
    "texts",
    type=EXISTING_FILE,
    multiple=True,
    required=True,
    help="Training text, one sentence per line (repeatable).",
)
@click.option(
    "--text-format",
    type=click.Choice(TRAINING_TEXT_FORMATS),
    default="plain",
    show_default=True,
    help="plain: words only; kaldi: 'id words' (a Kaldi text file); tsv: 'id<TAB>sentence' "
    "(Enron Mobile); trn: sclite 'words (id)'. The ids are dropped.",
)
@normalize_option(applies_to="the training text (as wer, rescore and keyboard-eval will)")
@click.option("--order", type=click.IntRange(1, 6), default=4, show_default=True)
@click.option(
    "--prune",
    type=NumberList(int),
    default=None,
    help="Count thresholds per order, e.g. 0,0,1 (unigrams cannot be pruned).",
)
@click.option("--memory", default="2G", show_default=True, help="lmplz sort memory (-S).")
@click.option(
    "--arpa",
    "arpa",
    is_flag=True,
    help="Write ARPA text whatever the --out name (a binary's name is refused); an .arpa or "
    ".arpa.gz name needs no flag.",
)
@click.option(
    "--binary-type",
    type=click.Choice(BINARY_TYPES),
    default="trie",
    show_default=True,
    help="build_binary's data structure of a binary model: trie (smaller) or probing (faster).",
)
@click.option("--discount-fallback", is_flag=True, help="Fallback discounts for tiny corpora.")
@click.option("--skip-symbols", is_flag=True, help="Treat <s>, </s>, <unk> in text as spaces.")
@click.option(
    "--out",
    "out_path",
    type=OUT_FILE,
    required=True,
    help="The model; its name says the format: .arpa (ARPA text), .arpa.gz (gzipped ARPA), "
    ".bin, .binary, .klm or .mmap (KenLM binary). Other names need --arpa.",
)
@handle_errors
def ngram_build(
    texts: tuple[Path, ...],
    text_format: str,
    normalizer: Normalizer,
    order: int,
    prune: tuple[int, ...] | None,
    memory: str,
    arpa: bool,
    binary_type: str,
    discount_fallback: bool,
    skip_symbols: bool,
    out_path: Path,
) -> None:
    """Build an n-gram model with lmplz (and build_binary for a binary --out name).

    \b
    Examples:
      rescorer ngram build --text books.txt --order 4 --prune 0,0,1,1 --out 4gram.bin
      rescorer ngram build --text mobile.tsv --text-format tsv --normalize english \\
          --order 3 --out 3gram.arpa
    """
    try:
        fmt = model_format(out_path, arpa)
    except ValueError as err:
        raise InputFailure(str(err)) from None
    options = NgramOptions(
        order=order,
        prune=prune or (),
        memory=memory,
        binary=None if fmt != "binary" else binary_type,
        discount_fallback=discount_fallback,
        skip_symbols=skip_symbols,
        text_format=text_format,
        normalize=normalizer.name,
    )
    build_ngram(texts, out_path, options)
    click.echo(f"wrote {out_path} ({out_path.stat().st_size / 2**20:.1f} MiB)")


@ngram.command(name="vocab")
@click.argument("model_path", metavar="MODEL", type=EXISTING_FILE)
@click.option(
    "--out",
    "out_path",
    type=OUT_FILE,
    required=True,
    help="The word list: one word per line, in the model's order, without <s>, </s>, <unk>.",
)
@handle_errors
def ngram_vocab(model_path: Path, out_path: Path) -> None:
    """Write the words of a KenLM model (ARPA, .arpa.gz or binary), one per line.

    The list is what predict and keyboard-eval take as --vocab. An ARPA model's words are its
    unigrams; a binary's are the strings KenLM stores at its end (every binary that
    build_binary writes without -v, so every one of `ngram build`).

    \b
    Example:
      rescorer ngram vocab 4gram.bin --out words.txt
    """
    words = [w for w in kenlm_words(model_path) if w not in SPECIAL_WORDS]
    if not words:
        raise InputError(
            "expected a model with words besides <s>, </s>, <unk>, got none", model_path
        )
    with atomic_write(out_path) as f:
        f.write("".join(w + "\n" for w in words))
    click.echo(f"wrote {len(words)} words to {out_path}")


@ngram.command(name="setup")
@handle_errors
def ngram_setup() -> None:
    """Find KenLM's lmplz and build_binary, building them once into the user cache if needed.

    `ngram build` does the same on first use; this command does it ahead of time (e.g. in a
    Docker image) and prints where the programs are. The build needs cmake, a C++ compiler,
    Boost and zlib (docs/install.md).

    \b
    Example:
      rescorer ngram setup
    """
    from rescorer.kenlm_tools import PROGRAMS, find_program

    for name in PROGRAMS:
        click.echo(f"{name}: {find_program(name, build=True)}")


# -- train --------------------------------------------------------------------------------------


@click.command(name="train")
@click.argument("config_path", metavar="CONFIG", type=EXISTING_FILE)
@click.option(
    "--out",
    "out_dir",
    type=OUT_DIR,
    required=True,
    help="Output folder: best/ and last/ checkpoints, split.json.",
)
@click.option(
    "--data-dir",
    type=MODEL_DIR,
    default=None,
    help="Where corpus paths in the config are relative to (default: $RESCORER_DATA or "
    "../shared/data).",
)
@click.option(
    "--resume/--no-resume",
    default=True,
    show_default=True,
    help="Continue from OUT/last when it exists.",
)
@click.option(
    "--init",
    "init_dir",
    type=MODEL_DIR,
    default=None,
    help="Start from this checkpoint's weights (fine-tuning; a history model from its twin): "
    "the config's model section and the data's units must be the checkpoint's (a subword "
    "checkpoint's tokenizer is kept, as on resuming); a fresh optimizer and epoch count. "
    "Ignored when resuming from OUT/last.",
)
@click.option(
    "--tokens",
    "tokens_path",
    type=EXISTING_FILE,
    default=None,
    help="An ASR model's tokens.txt ('TOKEN ID' lines, sherpa-onnx/icefall): its tokens are the "
    "LM's units, so that `export --kind score-token|nll` speaks the ASR's ids (config: "
    "data.tokens). Without --bpe-model the text's items are the tokens.",
)
@click.option(
    "--bpe-model",
    "bpe_model",
    type=EXISTING_FILE,
    default=None,
    help="The ASR model's sentencepiece model (bpe.model): it cuts the text into the tokens "
    "(config: data.bpe_model); with --tokens both must list the same tokens.",
)
@click.option(
    "--train-shards",
    type=MODEL_DIR,
    default=None,
    help="Train on this shard folder (`rescorer corpus shard`), streamed one shard at a time, "
    "instead of the config's data path; the config names its dev corpus (data.dev).",
)
@handle_errors
def train_cmd(
    config_path: Path,
    out_dir: Path,
    data_dir: Path | None,
    resume: bool,
    init_dir: Path | None,
    tokens_path: Path | None,
    bpe_model: Path | None,
    train_shards: Path | None,
) -> None:
    """Train a context-aware LSTM language model from a JSON config.

    The config has "data", "model" and "train" sections (see rescorer.lm_models.lstm.train). The
    best checkpoint (by dev perplexity) is OUT/best, usable as --lm torch:OUT/best. Under torchrun
    (`torchrun --nproc_per_node 8 -m rescorer train ...`) every process trains on its share of
    the data.

    \b
    Examples:
      rescorer train brown_factor.json --out models/brown_factor
      rescorer train lm.json --out exp/lm --tokens asr/tokens.txt --bpe-model asr/bpe.model
      rescorer corpus shard train.jsonl shards/ --shards 8
      rescorer train big.json --train-shards shards/ --out models/big
      rescorer train history.json --init models/word/best --out models/history
    """
    from dataclasses import replace

    from rescorer.core.data import default_data_dir
    from rescorer.lm_models.distributed import close_world, end_process
    from rescorer.lm_models.lstm.train import (  # torch is heavy
        TrainConfig,
        train,
        with_train_shards,
    )

    show_epochs()
    cfg = TrainConfig.load(config_path)
    if tokens_path is not None or bpe_model is not None:
        data = cfg.data
        if tokens_path is not None:
            data = replace(data, tokens=str(tokens_path.resolve()))
        if bpe_model is not None:
            data = replace(data, bpe_model=str(bpe_model.resolve()))
        cfg = replace(cfg, data=data)  # a ValueError with data.tokenizer (learns another set)
    if train_shards is not None:
        try:
            cfg = with_train_shards(cfg, train_shards.resolve())  # here, not under --data-dir
        except ValueError as err:
            raise InputError(f"--train-shards: {err}", config_path) from None
    result = train(
        cfg,
        data_dir or default_data_dir(),
        out_dir,
        resume,
        progress=progress_bars(),
        init=init_dir,
    )
    closed = close_world()  # under torchrun: every process leaves the group together
    if os.environ.get("RANK", "0") != "0":  # under torchrun, the first process reports
        end_process(closed)
        return
    click.echo(
        f"best dev perplexity {result.best_dev_ppl:.2f} at epoch {result.best_epoch}; "
        f"checkpoint {out_dir / 'best'}"
    )
    if cfg.data.asr_units:
        from rescorer.lm_models.asr_tokens import checkpoint_asr_tokens

        asr = checkpoint_asr_tokens(out_dir / "best")
        if asr is not None:
            click.echo(f"units: the ASR model's, {asr.describe()}")
    end_process(closed)


# -- classify and inspect (context-aware neural models) ------------------------------------------

# The commands of the other families' checkpoints, for the one line that refuses them here.
_FAMILY_COMMANDS = {"LBL": "lbl-", "FNLM": "fnlm-", "CUEModel": "cue-", "SentenceLM": "cue-"}


def _require_context_lstm(model: object, path: Path, command: str) -> ContextLSTM:
    """``model`` when it is a context LSTM, else InputError (one line, naming ``path``)."""
    from rescorer.lm_models.lstm.model import ContextLSTM

    if isinstance(model, ContextLSTM):
        return model
    kind = type(model).__name__
    theirs = _FAMILY_COMMANDS.get(kind)
    hint = f"; its family's commands are rescorer {theirs}*" if theirs else ""
    raise InputError(
        f"a {kind} checkpoint: `{command}` takes a context LSTM's (rescorer train, model.arch "
        f"lstm){hint}",
        path,
    )


lstm_model_option = click.option(
    "--model",
    "model_dir",
    type=MODEL_DIR,
    required=True,
    help="A checkpoint folder of `rescorer train`.",
)


@click.command()
@lstm_model_option
@click.option(
    "--docs",
    "docs_path",
    type=EXISTING_FILE,
    required=True,
    help='Documents as JSONL: {"id": ..., "text": ..., "fields": {FIELD: value}}.',
)
@click.option("--field", required=True, help="The context field to classify by (e.g. genre).")
@device_option(help="torch device.")
@handle_errors
def classify(model_dir: Path, docs_path: Path, field: str, device: str) -> None:
    """Classify documents by a context field with the LM (generative, uniform prior).

    Each document goes to the field value under which the model gives it the highest
    probability (Jaech & Ostendorf 2018, eq. 7). Prints accuracy and the confusion matrix.

    \b
    Example:
      rescorer classify --model exp/factor/best --docs test.jsonl --field genre
    """
    import torch

    from rescorer.lm_models.checkpoint import load_checkpoint
    from rescorer.lm_models.corpora import read_jsonl
    from rescorer.lm_models.lstm.evaluate import classify as classify_docs
    from rescorer.lm_models.lstm.inspect import context_values
    from rescorer.lm_models.vocab import Vocabulary

    loaded, tokens, _ = load_checkpoint(model_dir, device=device)
    model = _require_context_lstm(loaded, model_dir, "classify")
    values = context_values(model, field)
    docs = read_jsonl(docs_path)
    if not docs:
        raise InputError("no documents in it", docs_path)
    report = classify_docs(model, Vocabulary(tokens), docs, field, values, torch.device(device))
    click.echo(f"accuracy {100 * report.accuracy:.2f} % over {len(docs)} documents")
    click.echo(report.table())


@click.command(name="inspect")
@lstm_model_option
@click.option("--field", required=True, help="Context field to inspect (e.g. genre).")
@click.option(
    "--top",
    type=click.IntRange(min=1),
    default=10,
    show_default=True,
    help="Boosted words to list per value.",
)
@click.option(
    "--pca",
    "pca_path",
    type=OUT_FILE,
    help="Write a 2-D PCA plot of the context embeddings here (PNG).",
)
@handle_errors
def inspect_cmd(model_dir: Path, field: str, top: int, pca_path: Path | None) -> None:
    """Words each context value boosts most, and a PCA plot of the context embeddings.

    \b
    Example:
      rescorer inspect --model exp/factor/best --field genre --top 8 --pca genres.png
    """
    from rescorer.lm_models.checkpoint import load_checkpoint
    from rescorer.lm_models.lstm.inspect import (
        adaptation_norms,
        context_pca,
        plot_pca,
        top_boosted_words,
    )

    loaded, tokens, _ = load_checkpoint(model_dir)
    model = _require_context_lstm(loaded, model_dir, "inspect")
    for value, words in top_boosted_words(model, tokens, field, top).items():
        click.echo(f"{value}: " + " ".join(w for w, _ in words))
    if model.config.mode in ("concat", "factor"):
        click.echo("recurrent-layer adaptation per layer: ||A||/||W|| (FactorCell), ||Vc||/||b||")
        for row in adaptation_norms(model, field):
            ratios = "  ".join(
                f"{w:.3f} {b:.3f}" for w, b in zip(row.weight_ratio, row.bias_ratio, strict=True)
            )
            click.echo(f"{row.value}: {ratios}")
    if pca_path is not None:
        plot_pca(context_pca(model, field), pca_path, f"context embeddings: {field}")
        click.echo(f"wrote {pca_path}")


# -- export -------------------------------------------------------------------------------------


def _context_pairs(pairs: Sequence[str]) -> dict[str, str] | None:
    record: dict[str, str] = {}
    for pair in pairs:
        field, sep, value = pair.partition("=")
        if not sep or not field.strip() or not value.strip():
            raise click.BadParameter(f"expected FIELD=VALUE, got {pair!r}", param_hint="--context")
        if field.strip() in record:
            raise click.BadParameter(f"field {field.strip()!r} given twice", param_hint="--context")
        record[field.strip()] = value.strip()
    return record or None


@click.command(name="export")
@click.argument("checkpoint", type=MODEL_DIR)
@click.argument("out_path", type=OUT_FILE, metavar="OUT.onnx")
@click.option(
    "--kind",
    type=click.Choice(EXPORT_KINDS),
    default="step",
    show_default=True,
    help="step: x, h0, c0 -> log_softmax, next_h0, next_c0 with one context folded in; "
    "multi: the same with a context_id input over many contexts; scorer: x, x_lens -> "
    "token_logprobs, sentence_logprob; multi-scorer: the scorer with context_id; nll: "
    "icefall's state-less form for sherpa-onnx's offline LM rescoring (x = tokens without "
    "<s>/</s>, 0-padded, x_lens -> nll = -log P(<s> tokens </s>)); score-token: icefall's "
    "score_token_onnx form for sherpa-onnx's online LM (x, h0, c0 -> log_softmax (N, V) of the "
    "next token, next_h0, next_c0); vector-step, vector-scorer: step and scorer with the context "
    "embedding as an input, context_vector (N, k), a row's own (`context vectors` computes it "
    "once per utterance).",
)
@click.option(
    "--tokens",
    "tokens_path",
    type=EXISTING_FILE,
    default=None,
    help="score-token and nll: the ASR model's tokens.txt the export must speak; refused (exit 2, "
    "file:line) unless the checkpoint was trained over exactly these tokens. Default: the "
    "checkpoint's own asr_tokens.txt when it has one (train --tokens), else the toolkit's ids.",
)
@click.option("--author", default="rescorer", show_default=True, help="Metadata model_author.")
@click.option("--url", default="", help="Metadata url: where the model is described.")
@click.option(
    "--context",
    "context_pairs",
    multiple=True,
    metavar="FIELD=VALUE",
    help="The context folded into a step or scorer export (repeatable; default: the expected "
    "context, every field missing).",
)
@click.option(
    "--contexts",
    "contexts_path",
    type=EXISTING_FILE,
    default=None,
    help="Multi kinds: JSONL file of context records {field: value}, one per line (default: "
    "every combination of the categorical values). The expected context is always id 0.",
)
@click.option(
    "--quantize",
    type=click.Choice(["int8"]),
    default=None,
    help="Also write a dynamic int8 model beside OUT (OUT stem + .int8.onnx).",
)
@click.option(
    "--check/--no-check",
    default=True,
    show_default=True,
    help="Compare the export with the PyTorch model on random batches (max abs diff <= 1e-4).",
)
@click.option(
    "--ppl-text",
    type=EXISTING_FILE,
    default=None,
    help="With --quantize: report the perplexity change of int8 on this text (one sentence per "
    "line, scored with context 0).",
)
@handle_errors
def export_cmd(
    checkpoint: Path,
    out_path: Path,
    kind: str,
    context_pairs: tuple[str, ...],
    contexts_path: Path | None,
    quantize: str | None,
    check: bool,
    ppl_text: Path | None,
    author: str,
    url: str,
    tokens_path: Path | None = None,
) -> None:
    """Export a checkpoint to ONNX with its context(s) folded into the weights.

    The architecture is read from the checkpoint. The vocabulary is written beside OUT
    (OUT stem + .vocab.txt); the two files are all `--lm onnx:OUT` or ONNX Runtime needs.

    \b
    Examples:
      rescorer export exp/factor/best lm.onnx --kind step --context genre=news
      rescorer export exp/factor/best lm_all.onnx --kind multi --quantize int8 --ppl-text dev.txt
      rescorer export exp/factor/best scorer.onnx --kind multi-scorer --contexts ctx.jsonl
      rescorer export exp/lstm/best lm_nll.onnx --kind nll     # sherpa-onnx offline --lm
      rescorer export exp/lm/best lm.onnx --kind score-token --tokens asr/tokens.txt  # online --lm
      rescorer export exp/prev/best prev.onnx --kind vector-scorer  # context_vector input
    """
    from rescorer.export.exporter import (  # imported here: torch is heavy
        ExportOptions,
        export_model,
        normalise_record,
        read_context_records,
    )
    from rescorer.export.format import DECODER_KINDS
    from rescorer.lm_models.asr_tokens import checkpoint_asr_tokens, read_tokens_txt
    from rescorer.lm_models.checkpoint import load_checkpoint
    from rescorer.lm_models.lstm.model import ContextLSTM

    multi = kind.startswith("multi")
    if context_pairs and kind in VECTOR_KINDS:
        raise click.UsageError(
            f"--kind {kind} takes the context embedding as an input (context_vector): it folds "
            "no context; drop --context"
        )
    if context_pairs and multi:
        raise click.UsageError(
            f"--context folds one context into a step or scorer export; --kind {kind} takes "
            f"--contexts FILE.jsonl (or none: every combination)"
        )
    if contexts_path is not None and not multi:
        raise click.UsageError(
            f"--contexts is for --kind multi or multi-scorer; --kind {kind} folds one context "
            f"(--context FIELD=VALUE)"
        )
    if ppl_text is not None and quantize is None:
        raise click.UsageError("--ppl-text reports what --quantize costs: give --quantize int8")
    if tokens_path is not None and kind not in DECODER_KINDS:
        raise click.UsageError(
            f"--tokens is for the kinds a decoder loads ({', '.join(DECODER_KINDS)}); --kind "
            f"{kind} keeps the checkpoint's own ids (for onnx: models)"
        )
    record = _context_pairs(context_pairs)
    model, tokens, _ = load_checkpoint(checkpoint)
    if not isinstance(model, ContextLSTM):
        other = {"LBL": "lbl-export", "CUEModel": "cue-export"}.get(type(model).__name__)
        raise InputError(
            f"a {type(model).__name__} checkpoint: `export` takes a context LSTM's (rescorer "
            "train)" + (f"; export this one with rescorer {other}" if other else ""),
            checkpoint,
        )
    asr = checkpoint_asr_tokens(checkpoint) if kind in DECODER_KINDS else None
    if tokens_path is not None:
        given = read_tokens_txt(tokens_path)
        if asr is not None:
            asr.check_same(given)  # the checkpoint's token set; an error names tokens_path:line
        else:
            given.check_vocabulary(tokens, f"the checkpoint {checkpoint}")
        asr = given
    if record is not None:
        try:
            record = normalise_record(model, record)
        except ValueError as err:
            raise click.BadParameter(str(err), param_hint="--context") from None
    records = None
    if contexts_path is not None:
        records = tuple(read_context_records(contexts_path, model))
    options = ExportOptions(
        kind=kind, context=record, contexts=records, author=author, url=url, asr_tokens=asr
    )
    result = export_model(model, tokens, out_path, options)
    n = len(result.contexts)
    held = (
        f"context_vector input of {result.metadata.get('context_dim')} numbers"
        if kind in VECTOR_KINDS
        else f"{n} context{'s' if n != 1 else ''}"
    )
    click.echo(
        f"wrote {result.path} ({kind}, {held}, {result.size_bytes / 2**20:.2f} MiB) and "
        f"{result.vocab_path}"
    )
    if asr is not None:
        click.echo(f"token ids: the ASR model's, {asr.describe()}")
    elif kind in DECODER_KINDS:
        click.echo(
            "token ids: the checkpoint's own (<unk> 0, <s> 1, </s> 2); for an ASR model's ids "
            "train with --tokens (and export with --tokens)"
        )
    if check:
        from rescorer.export.parity import check_parity

        report = check_parity(model, result.path)
        click.echo(report.describe())
        if not report.ok:
            raise click.ClickException(f"{result.path}: {report.describe()}")
    if quantize == "int8":
        from rescorer.export.quantize import quantize_int8
        from rescorer.lms.onnx import perplexity_change

        q_path = quantize_int8(result.path)
        click.echo(f"wrote {q_path} (dynamic int8, {q_path.stat().st_size / 2**20:.2f} MiB)")
        if ppl_text is not None:
            sentences = [tuple(line.split()) for _, line in read_lines(ppl_text) if line.strip()]
            if not sentences:
                raise InputFailure(f"{ppl_text}: no sentences")
            change = perplexity_change(result.path, q_path, sentences)
            click.echo(f"int8 on {ppl_text}: {change.describe()}")
