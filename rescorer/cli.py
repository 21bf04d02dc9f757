"""The ``rescorer`` command line: thin click commands over the library.

Bad input data gets one line naming the file and line, and exit status 2; bad options get click's
usage error (also status 2). Progress bars go to stderr and ``--quiet`` silences them.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import click
from tqdm import tqdm

from rescorer.combine import Weights, one_best, rerank
from rescorer.contexts import check_context_ids, read_contexts
from rescorer.errors import InputError, check_same_ids
from rescorer.features import LMFeatureReport, add_lm_scores
from rescorer.formats import READERS, WRITERS, detect_format, read_nbest, write_nbest
from rescorer.io import atomic_write, read_lines
from rescorer.keyboard import (
    TEXT_FORMATS,
    KeyboardOptions,
    LatencyStats,
    compare_systems,
    evaluate,
    read_sentence_results,
    read_sentences,
    write_sentence_results,
)
from rescorer.lm import LOADERS, LanguageModel, LMSpec, load_lm
from rescorer.nbest import NBest
from rescorer.ngram import BINARY_TYPES, KenLMToolError, NgramOptions, build_ngram
from rescorer.predict import (
    CONSOLE_HELP,
    Predictor,
    TypingConsole,
    build_predictor,
    predict_stream,
    read_requests,
    read_word_list,
)
from rescorer.refs import read_references, read_utt2spk, write_kaldi_text
from rescorer.significance import compare
from rescorer.text import CASE_MODES
from rescorer.tune import TuneOptions, tune
from rescorer.wer import WerReport, oracle, score_corpus

logger = logging.getLogger(__name__)
F = TypeVar("F", bound=Callable[..., Any])


class InputFailure(click.ClickException):
    """Bad input data: one line, exit status 2."""

    exit_code = 2


def handle_errors(fn: F) -> F:
    """Turn library errors into one-line CLI errors."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except InputError as err:
            raise InputFailure(str(err)) from None
        except KenLMToolError as err:
            raise click.ClickException(str(err)) from None
        except ValueError as err:
            raise click.UsageError(str(err)) from None

    return wrapper  # type: ignore[return-value]


def _quiet() -> bool:
    ctx = click.get_current_context()
    return bool(ctx.find_root().params.get("quiet"))


# -- shared option types ------------------------------------------------------------------------


class LMSpecType(click.ParamType):
    """``[NAME=]KIND:PATH`` with an existing path."""

    name = "SPEC"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, LMSpec):
            return value
        try:
            spec = LMSpec.parse(value)
        except ValueError as err:
            self.fail(str(err), param, ctx)
        if not spec.path.exists():
            self.fail(f"model file {str(spec.path)!r} does not exist", param, ctx)
        return spec


class CommaList(click.ParamType):
    """A comma-separated list of names."""

    name = "A,B,..."

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, tuple):
            return value
        items = tuple(v.strip() for v in str(value).split(",") if v.strip())
        if not items:
            self.fail(f"expected a comma-separated list of names, got {value!r}", param, ctx)
        return items


class NumberList(click.ParamType):
    """A comma-separated list of integers >= 0 (``kind=int``) or finite numbers > 0 (``float``)."""

    def __init__(self, kind: type[int] | type[float]) -> None:
        self.kind = kind
        self.name = "N,N,..." if kind is int else "X,Y,..."
        self._what = "integers >= 0" if kind is int else "numbers > 0"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, tuple):
            return value
        try:
            items = tuple(self.kind(v) for v in str(value).split(","))
        except ValueError:
            self.fail(f"expected comma-separated {self._what}, got {value!r}", param, ctx)
        if self.kind is int:
            valid = all(x >= 0 for x in items)
        else:
            valid = all(math.isfinite(x) and x > 0 for x in items)
        if not valid:
            self.fail(f"expected comma-separated {self._what}, got {value!r}", param, ctx)
        return items


FORMAT_CHOICE = click.Choice(["auto", *sorted(READERS)])
EXISTING = click.Path(exists=True, path_type=Path)
EXISTING_FILE = click.Path(exists=True, dir_okay=False, path_type=Path)


def nbest_options(fn: F) -> F:
    fn = click.option(
        "--format",
        "fmt",
        type=FORMAT_CHOICE,
        default="auto",
        show_default=True,
        help="N-best format (detected from the path when auto).",
    )(fn)
    return click.option(
        "--nbest",
        "nbest_path",
        type=EXISTING,
        required=True,
        help="N-best lists: an ESPnet set folder, SRILM file/folder/list, Kaldi folder, "
        "JSON or JSONL file.",
    )(fn)


def ref_options(required: bool) -> Callable[[F], F]:
    def deco(fn: F) -> F:
        fn = click.option(
            "--ref-format",
            type=click.Choice(["auto", "trn", "kaldi"]),
            default="auto",
            show_default=True,
            help="Reference format.",
        )(fn)
        return click.option(
            "--ref",
            "ref_path",
            type=EXISTING_FILE,
            required=required,
            help="References: sclite trn (id in parentheses) or Kaldi 'uttid words' text.",
        )(fn)

    return deco


def config_trainer_options(spec_kind: str) -> Callable[[F], F]:
    """CONFIG, --out, --data-dir, --seed and --device of the trainers that read a sectioned JSON
    config (fnlm-train, lbl-train); ``spec_kind`` names the --lm kind the checkpoint is for."""

    def deco(fn: F) -> F:
        fn = click.option("--device", default=None, help="Override the config's train.device.")(fn)
        fn = click.option(
            "--seed", type=int, default=None, help="Override the config's train.seed."
        )(fn)
        fn = click.option(
            "--data-dir",
            type=click.Path(exists=True, file_okay=False, path_type=Path),
            default=None,
            help="Where the config's relative paths start (default: $RESCORER_DATA or "
            "../shared/data).",
        )(fn)
        fn = click.option(
            "--out",
            "out_dir",
            type=click.Path(file_okay=False, path_type=Path),
            required=True,
            help=f"Checkpoint folder to write (the best epoch), usable as --lm {spec_kind}:OUT.",
        )(fn)
        return click.argument("config_path", metavar="CONFIG", type=EXISTING_FILE)(fn)

    return deco


def run_config_trainer(
    config_type: Any,
    train_fn: Callable[..., Any],
    config_path: Path,
    out_dir: Path,
    data_dir: Path | None,
    seed: int | None,
    device: str | None,
) -> None:
    """Load ``config_type`` from CONFIG, apply --seed/--device, train, report the best epoch."""
    from dataclasses import replace

    from rescorer.data import default_data_dir

    cfg = config_type.load(config_path)
    overrides = {k: v for k, v in (("seed", seed), ("device", device)) if v is not None}
    if overrides:
        cfg = replace(cfg, train=replace(cfg.train, **overrides))
    result = train_fn(cfg, data_dir or default_data_dir(), out_dir, progress=not _quiet())
    click.echo(
        f"best dev perplexity {result.best_dev_ppl:.2f} at epoch {result.best_epoch} "
        f"({result.parameters:,} parameters, {result.seconds:.0f} s); checkpoint {out_dir}"
    )


def lm_options(fn: F) -> F:
    fn = click.option(
        "--lm-oov/--no-lm-oov",
        "lm_oov",
        default=True,
        show_default=True,
        help="Add each LM's OOV word count as a feature NAME_oov beside its score.",
    )(fn)
    fn = click.option(
        "--lm-case",
        type=click.Choice(CASE_MODES),
        default="auto",
        show_default=True,
        help="Case mapping of words into the LMs' vocabularies (auto: whichever finds more words).",
    )(fn)
    return click.option(
        "--lm",
        "lm_specs",
        type=LMSpecType(),
        multiple=True,
        help=f"Language model feature [NAME=]KIND:PATH, kinds: {', '.join(sorted(LOADERS))}. "
        "Repeatable. NAME defaults to the file name before its first dot.",
    )(fn)


def context_options(fn: F) -> F:
    fn = click.option(
        "--device",
        default=None,
        help="Device of torch and onnx models: auto, cpu, cuda, cuda:1, ... "
        "(default auto: CUDA when available, else the CPU).",
    )(fn)
    return click.option(
        "--context",
        "context_path",
        type=EXISTING_FILE,
        default=None,
        help="Context of each utterance for context-aware models: JSONL "
        '{"utt": ID, "fields": {"genre": ...}} or TSV with a header utt<TAB>field...; '
        "its ids must be exactly the utterances'. KenLM models ignore it.",
    )(fn)


def _load_contexts(path: Path | None, ids: Sequence[str]) -> dict[str, dict[str, str]] | None:
    if path is None:
        return None
    contexts = read_contexts(path)
    check_context_ids(ids, contexts, path)
    return contexts


def _load_nbest(path: Path, fmt: str) -> NBest:
    fmt = detect_format(path) if fmt == "auto" else fmt
    nbest = read_nbest(path, fmt)
    if len(nbest) == 0:
        raise InputError("no N-best lists in it", path)
    logger.info("read %r from %s (%s)", nbest, path, fmt)
    return nbest


def _load_refs(path: Path | None, fmt: str, ids: Sequence[str]) -> dict[str, tuple[str, ...]]:
    if path is None:
        raise click.UsageError("--ref is required here")
    refs = read_references(path, None if fmt == "auto" else fmt)
    check_same_ids(set(ids), set(refs), "reference", path)
    return refs


def _load_speakers(path: Path | None, ids: Sequence[str]) -> dict[str, str] | None:
    if path is None:
        return None
    spk = read_utt2spk(path)
    missing = set(ids) - set(spk)
    if missing:  # a map of a larger corpus is fine; every utterance here needs a speaker
        check_same_ids(set(ids), set(spk) & set(ids), "utt2spk", path)
    return spk


def _score_with_lms(
    nbest: NBest,
    specs: Sequence[LMSpec],
    case: str,
    oov_feature: bool,
    contexts: dict[str, dict[str, str]] | None = None,
    device: str | None = None,
) -> tuple[NBest, list[LMFeatureReport]]:
    reports = []
    options = {} if device is None else {"device": device}
    for spec in specs:
        lm: LanguageModel = load_lm(spec, case=case, **options)
        nbest, report = add_lm_scores(
            nbest,
            lm,
            spec.name,
            contexts=contexts,
            progress=not _quiet(),
            oov_feature=oov_feature,
        )
        reports.append(report)
        click.echo(report.describe(), err=True)
        stats = getattr(lm, "stats", None)  # prefix sharing of torch models
        if stats is not None and hasattr(stats, "describe"):
            click.echo(f"{spec.name}: {stats.describe()}", err=True)
    return nbest, reports


def _echo_report(label: str, report: WerReport) -> None:
    click.echo(f"{report.kaldi_line()} {label}")


# -- the group --------------------------------------------------------------------------------


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-v", "--verbose", count=True, help="More log output (-v info, -vv debug).")
@click.option("-q", "--quiet", is_flag=True, help="No progress bars or info messages.")
def main(verbose: int, quiet: bool) -> None:
    """N-best rescoring with n-gram and neural language models."""
    level = logging.WARNING if quiet or verbose == 0 else logging.INFO
    if verbose >= 2:
        level = logging.DEBUG
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s", force=True)


# -- wer ----------------------------------------------------------------------------------------


@main.command()
@ref_options(required=True)
@click.option("--hyp", "hyp_path", type=EXISTING_FILE, help="Hypotheses as 'uttid words' text.")
@click.option("--nbest", "nbest_path", type=EXISTING, help="Score the first hypothesis of lists.")
@click.option("--format", "fmt", type=FORMAT_CHOICE, default="auto", show_default=True)
@click.option("--oracle", "with_oracle", is_flag=True, help="Also the oracle WER of the lists.")
@click.option(
    "--compare",
    "compare_path",
    type=EXISTING_FILE,
    help="A second system ('uttid words' text): test the difference for significance.",
)
@click.option("--utt2spk", type=EXISTING_FILE, help="Speaker of each utterance (per-speaker rows).")
@click.option("--cer", is_flag=True, help="Character error rate instead of word error rate.")
@click.option(
    "--per-utt",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write a per-utterance error table here.",
)
@click.option(
    "--summary/--no-summary",
    default=True,
    show_default=True,
    help="Print the sclite-style summary table.",
)
@handle_errors
def wer(
    ref_path: Path,
    ref_format: str,
    hyp_path: Path | None,
    nbest_path: Path | None,
    fmt: str,
    with_oracle: bool,
    compare_path: Path | None,
    utt2spk: Path | None,
    cer: bool,
    per_utt: Path | None,
    summary: bool,
) -> None:
    """Word error rate against references.

    Scores a hypothesis text, or the first hypotheses of N-best lists (--oracle adds the best
    achievable choice from the lists).

    \b
    Examples:
      rescorer wer --ref DEV/references/ref_wer.trn --hyp DEV/raw_hypotheses/1best_recog/text
      rescorer wer --ref DEV/references/ref_wer.trn --nbest DEV --oracle
      rescorer wer --ref REF.trn --hyp A.txt --compare B.txt
    """
    if (hyp_path is None) == (nbest_path is None):
        raise click.UsageError("give exactly one of --hyp or --nbest")
    if with_oracle and nbest_path is None:
        raise click.UsageError("--oracle needs --nbest")
    if with_oracle and cer:
        raise click.UsageError("--oracle is computed on words; drop --cer")
    unit = "char" if cer else "word"
    nbest = None
    if hyp_path is not None:
        hyps = read_references(hyp_path, "kaldi")
        label = str(hyp_path)
    else:
        assert nbest_path is not None
        nbest = _load_nbest(nbest_path, fmt)
        hyps = one_best(nbest)
        label = f"{nbest_path} (first hypotheses)"
    refs = _load_refs(ref_path, ref_format, list(hyps))
    speakers = _load_speakers(utt2spk, list(hyps))
    report = score_corpus(refs, hyps, speakers, unit=unit)
    if summary:
        click.echo(report.summary())
    _echo_report(label, report)
    if per_utt is not None:
        with atomic_write(per_utt) as f:
            f.write(report.utterance_table() + "\n")
    if with_oracle:
        assert nbest is not None
        orc = oracle(nbest, refs)
        _echo_report(f"oracle over {max(len(nb) for nb in nbest.values())}-best", orc.report)
    if compare_path is not None:
        other = read_references(compare_path, "kaldi")
        check_same_ids(set(hyps), set(other), "compared hypothesis", compare_path)
        report_b = score_corpus(refs, other, speakers, unit=unit)
        _echo_report(str(compare_path), report_b)
        click.echo(compare(report, report_b).summary())


# -- tune ---------------------------------------------------------------------------------------


@main.command(name="tune")
@nbest_options
@ref_options(required=True)
@lm_options
@context_options
@click.option(
    "--features",
    type=CommaList(),
    default=None,
    help="Score columns and LM names to combine (default: all of them).",
)
@click.option(
    "--length/--no-length", default=True, show_default=True, help="Tune a word-count weight."
)
@click.option("--anchor", default=None, help="Feature held at weight 1 (default: the first).")
@click.option("--init", "init_path", type=EXISTING_FILE, help="Start from these weights (JSON).")
@click.option("--restarts", type=click.IntRange(min=0), default=10, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option(
    "--out",
    "out_path",
    type=click.Path(dir_okay=False, path_type=Path),
    required=True,
    help="Where to write the tuned weights (JSON).",
)
@handle_errors
def tune_cmd(
    nbest_path: Path,
    fmt: str,
    ref_path: Path,
    ref_format: str,
    lm_specs: tuple[LMSpec, ...],
    lm_case: str,
    lm_oov: bool,
    features: tuple[str, ...] | None,
    length: bool,
    anchor: str | None,
    init_path: Path | None,
    restarts: int,
    seed: int,
    out_path: Path,
    context_path: Path | None = None,
    device: str | None = None,
) -> None:
    """Tune combination weights on a dev set.

    Finds log-linear weights of the chosen features (and the word count) that minimise the
    corpus word errors of the selected hypotheses; -v logs the search trace.

    \b
    Example:
      rescorer tune --nbest DEV --ref DEV/references/ref_wer.trn \\
          --lm kenlm:4gram.bin --features decoder,ctc,4gram --out weights.json
    """
    nbest = _load_nbest(nbest_path, fmt)
    refs = _load_refs(ref_path, ref_format, list(nbest))
    contexts = _load_contexts(context_path, list(nbest))
    nbest, _ = _score_with_lms(nbest, lm_specs, lm_case, lm_oov, contexts, device)
    names = features or nbest.score_names()
    initial = Weights.load(init_path) if init_path else None
    if initial is not None and not length and initial.length != 0:
        raise click.UsageError("--no-length with initial weights that have a length weight")
    result = tune(
        nbest,
        refs,
        names,
        TuneOptions(restarts=restarts, seed=seed, anchor=anchor, tune_length=length),
        initial=initial,
    )
    meta = {
        **result.weights.meta,
        "nbest": str(nbest_path),
        "ref": str(ref_path),
        "lms": {s.name: f"{s.kind}:{s.path}" for s in lm_specs},
    }
    weights = Weights(result.weights.features, result.weights.length, meta)
    weights.save(out_path)
    click.echo(
        f"initial %WER {100 * result.initial_errors / max(result.ref_words, 1):.2f} "
        f"[ {result.initial_errors} / {result.ref_words} ]"
    )
    click.echo(
        f"tuned   %WER {100 * result.wer:.2f} [ {result.errors} / {result.ref_words} ] "
        f"({len(result.start_errors)} starts, best errors per start {list(result.start_errors)}, "
        f"{result.seconds:.1f}s)"
    )
    for name, w in weights.features.items():
        click.echo(f"  {name:>12s} {w:+.6g}")
    click.echo(f"  {'length':>12s} {weights.length:+.6g}")
    click.echo(f"wrote {out_path}")


# -- rescore ------------------------------------------------------------------------------------


@main.command()
@nbest_options
@ref_options(required=False)
@lm_options
@context_options
@click.option(
    "--weights",
    "weights_path",
    type=EXISTING_FILE,
    required=True,
    help="Weights from `rescorer tune` (JSON).",
)
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    required=True,
    help="Output folder: nbest.jsonl (reranked, all features), 1best.txt, wer.txt.",
)
@click.option("--utt2spk", type=EXISTING_FILE, help="Speaker of each utterance.")
@handle_errors
def rescore(
    nbest_path: Path,
    fmt: str,
    ref_path: Path | None,
    ref_format: str,
    lm_specs: tuple[LMSpec, ...],
    lm_case: str,
    lm_oov: bool,
    weights_path: Path,
    out_dir: Path,
    utt2spk: Path | None,
    context_path: Path | None = None,
    device: str | None = None,
) -> None:
    """Rerank N-best lists with tuned weights.

    Writes the reranked lists and the new 1-best.

    With --ref, prints the WER of the first-pass 1-best and of the rescored 1-best, and tests
    the difference for significance.

    \b
    Example:
      rescorer rescore --nbest DEV --ref DEV/references/ref_wer.trn \\
          --lm kenlm:4gram.bin --weights weights.json --out OUTDIR
    """
    weights = Weights.load(weights_path)
    nbest = _load_nbest(nbest_path, fmt)
    refs = _load_refs(ref_path, ref_format, list(nbest)) if ref_path else None
    # Read before anything is written, so a bad speaker map leaves earlier outputs in place.
    if utt2spk is not None and refs is None:
        raise click.UsageError("--utt2spk is only used with --ref")
    speakers = _load_speakers(utt2spk, list(nbest)) if refs is not None else None
    contexts = _load_contexts(context_path, list(nbest))
    nbest, _ = _score_with_lms(nbest, lm_specs, lm_case, lm_oov, contexts, device)
    missing = [n for n in weights.names if n not in nbest.score_names()]
    if missing:
        raise click.UsageError(
            f"weights name feature(s) {missing} that neither the N-best lists nor the --lm "
            f"models provide (have: {list(nbest.score_names())})"
        )
    reranked = rerank(nbest, weights)
    best = one_best(reranked)  # the reranked lists' first hypotheses
    out_dir.mkdir(parents=True, exist_ok=True)
    write_nbest(NBest(list(reranked.values()), refs), out_dir / "nbest.jsonl", "jsonl")
    write_kaldi_text(out_dir / "1best.txt", best)
    click.echo(f"wrote {out_dir / 'nbest.jsonl'} and {out_dir / '1best.txt'}")
    if refs is None:
        # A WER report from an earlier run with references would no longer describe the output.
        (out_dir / "wer.txt").unlink(missing_ok=True)
        return
    base = score_corpus(refs, one_best(nbest), speakers)
    new = score_corpus(refs, best, speakers)
    lines = [
        f"{base.kaldi_line()} first pass",
        f"{new.kaldi_line()} rescored",
        compare(base, new).summary(),
    ]
    with atomic_write(out_dir / "wer.txt") as f:
        f.write(new.summary() + "\n" + "\n".join(lines) + "\n")
    click.echo("\n".join(lines))


# -- score --------------------------------------------------------------------------------------


@main.command()
@nbest_options
@lm_options
@context_options
@ref_options(required=False)
@click.option(
    "--out",
    "out_path",
    type=click.Path(dir_okay=False, path_type=Path),
    required=True,
    help="Where to write the lists with the new features (JSONL).",
)
@handle_errors
def score(
    nbest_path: Path,
    fmt: str,
    lm_specs: tuple[LMSpec, ...],
    lm_case: str,
    lm_oov: bool,
    context_path: Path | None,
    device: str | None,
    ref_path: Path | None,
    ref_format: str,
    out_path: Path,
) -> None:
    """Add LM scores to N-best lists as features, in the lists' own order.

    Slow models are then run once: `tune` and `rescore` read the JSONL with the features in it
    and need no --lm.

    \b
    Example:
      rescorer score --nbest DEV --lm 4gram=kenlm:4gram.bin --lm lstm=torch:exp/lstm/best \\
          --out dev.scored.jsonl
    """
    if not lm_specs:
        raise click.UsageError("give at least one --lm to score with")
    nbest = _load_nbest(nbest_path, fmt)
    refs = _load_refs(ref_path, ref_format, list(nbest)) if ref_path else nbest.references
    contexts = _load_contexts(context_path, list(nbest))
    nbest, _ = _score_with_lms(nbest, lm_specs, lm_case, lm_oov, contexts, device)
    write_nbest(NBest(list(nbest.values()), refs), out_path, "jsonl")
    click.echo(f"wrote {len(nbest)} lists with features {list(nbest.score_names())} to {out_path}")


# -- ppl ----------------------------------------------------------------------------------------


@main.command()
@click.option("--lm", "lm_spec", type=LMSpecType(), required=True, help="Model [NAME=]KIND:PATH.")
@click.option(
    "--text",
    "text_path",
    type=EXISTING_FILE,
    required=True,
    help="Text to evaluate, one sentence per line.",
)
@click.option(
    "--text-format",
    type=click.Choice(["plain", "kaldi", "trn"]),
    default="plain",
    show_default=True,
    help="plain: words only; kaldi: 'uttid words'; trn: sclite.",
)
@click.option("--lm-case", type=click.Choice(CASE_MODES), default="auto", show_default=True)
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
    contexts = None
    if text_format == "plain":
        sentences = [tuple(line.split()) for _, line in read_lines(text_path) if line.strip()]
    else:
        texts = read_references(text_path, text_format)
        sentences = list(texts.values())
        by_utt = _load_contexts(context_path, list(texts))
        contexts = None if by_utt is None else [by_utt[utt] for utt in texts]
    if not sentences:
        raise InputFailure(f"{text_path}: no sentences")
    lm = load_lm(lm_spec, case=lm_case, **({} if device is None else {"device": device}))
    logps = lm.token_logprobs(sentences, contexts)
    flags = lm.oov_flags(sentences)
    oov = int(sum(f.sum() for f in flags))
    words = int(sum(len(f) for f in flags))
    total = float(sum(lp.sum() for lp in logps))
    tokens = int(sum(len(lp) for lp in logps))
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
        # Perplexity per context value, for every field of the context records.
        groups: dict[tuple[str, str], list[int]] = {}
        for i, record in enumerate(contexts):
            for field, value in (record or {}).items():
                groups.setdefault((field, str(value)), []).append(i)
        for (field, value), idx in sorted(groups.items()):
            g_total = float(sum(logps[i].sum() for i in idx))
            g_tokens = int(sum(len(logps[i]) for i in idx))
            click.echo(
                f"  {field}={value}: ppl {math.exp(-g_total / g_tokens):.2f} over {g_tokens} "
                f"tokens, {len(idx)} sentences"
            )


# -- ngram --------------------------------------------------------------------------------------


@main.group()
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
@click.option("--order", type=click.IntRange(1, 6), default=4, show_default=True)
@click.option(
    "--prune",
    type=NumberList(int),
    default=None,
    help="Count thresholds per order, e.g. 0,0,1 (unigrams cannot be pruned).",
)
@click.option("--memory", default="2G", show_default=True, help="lmplz sort memory (-S).")
@click.option("--arpa", "arpa", is_flag=True, help="Keep ARPA text instead of a binary.")
@click.option("--binary-type", type=click.Choice(BINARY_TYPES), default="trie", show_default=True)
@click.option("--discount-fallback", is_flag=True, help="Fallback discounts for tiny corpora.")
@click.option("--skip-symbols", is_flag=True, help="Treat <s>, </s>, <unk> in text as spaces.")
@click.option("--out", "out_path", type=click.Path(dir_okay=False, path_type=Path), required=True)
@handle_errors
def ngram_build(
    texts: tuple[Path, ...],
    order: int,
    prune: tuple[int, ...] | None,
    memory: str,
    arpa: bool,
    binary_type: str,
    discount_fallback: bool,
    skip_symbols: bool,
    out_path: Path,
) -> None:
    """Build an n-gram model with lmplz (and build_binary).

    \b
    Example:
      rescorer ngram build --text books.txt --order 4 --prune 0,0,1,1 --out 4gram.bin
    """
    options = NgramOptions(
        order=order,
        prune=prune or (),
        memory=memory,
        binary=None if arpa else binary_type,
        discount_fallback=discount_fallback,
        skip_symbols=skip_symbols,
    )
    build_ngram(texts, out_path, options)
    click.echo(f"wrote {out_path} ({out_path.stat().st_size / 2**20:.1f} MiB)")


# -- train --------------------------------------------------------------------------------------


@main.command(name="train")
@click.argument("config_path", metavar="CONFIG", type=EXISTING_FILE)
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    required=True,
    help="Output folder: best/ and last/ checkpoints, split.json.",
)
@click.option(
    "--data-dir",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
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
@handle_errors
def train_cmd(config_path: Path, out_dir: Path, data_dir: Path | None, resume: bool) -> None:
    """Train a context-aware LSTM language model from a JSON config.

    The config has "data", "model" and "train" sections (see lm_models.train). The best
    checkpoint (by dev perplexity) is OUT/best, usable as --lm torch:OUT/best.

    \b
    Example:
      rescorer train brown_factor.json --out models/brown_factor
    """
    from lm_models.train import TrainConfig, train  # imported here: torch is heavy
    from rescorer.data import default_data_dir

    cfg = TrainConfig.load(config_path)
    result = train(cfg, data_dir or default_data_dir(), out_dir, resume, progress=not _quiet())
    click.echo(
        f"best dev perplexity {result.best_dev_ppl:.2f} at epoch {result.best_epoch}; "
        f"checkpoint {out_dir / 'best'}"
    )


# -- classify and inspect (context-aware neural models) ------------------------------------------


@main.command()
@click.option(
    "--model",
    "model_dir",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    required=True,
    help="A checkpoint folder of `rescorer train`.",
)
@click.option(
    "--docs",
    "docs_path",
    type=EXISTING_FILE,
    required=True,
    help='Documents as JSONL: {"id": ..., "text": ..., "fields": {FIELD: value}}.',
)
@click.option("--field", required=True, help="The context field to classify by (e.g. genre).")
@click.option("--device", default="cpu", show_default=True, help="torch device.")
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

    from lm_models.checkpoint import load_checkpoint
    from lm_models.corpora import read_jsonl
    from lm_models.evaluate import classify as classify_docs
    from lm_models.inspect_context import context_values
    from lm_models.vocab import Vocabulary

    model, tokens, _ = load_checkpoint(model_dir, device=device)
    values = context_values(model, field)
    docs = read_jsonl(docs_path)
    if not docs:
        raise InputError("no documents in it", docs_path)
    report = classify_docs(model, Vocabulary(tokens), docs, field, values, torch.device(device))
    click.echo(f"accuracy {100 * report.accuracy:.2f} % over {len(docs)} documents")
    click.echo(report.table())


@main.command(name="inspect")
@click.option(
    "--model",
    "model_dir",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    required=True,
    help="A checkpoint folder of `rescorer train`.",
)
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
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write a 2-D PCA plot of the context embeddings here (PNG).",
)
@handle_errors
def inspect_cmd(model_dir: Path, field: str, top: int, pca_path: Path | None) -> None:
    """Words each context value boosts most, and a PCA plot of the context embeddings.

    \b
    Example:
      rescorer inspect --model exp/factor/best --field genre --top 8 --pca genres.png
    """
    from lm_models.checkpoint import load_checkpoint
    from lm_models.inspect_context import (
        adaptation_norms,
        context_pca,
        plot_pca,
        top_boosted_words,
    )

    model, tokens, _ = load_checkpoint(model_dir)
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

EXPORT_KINDS = ("step", "multi", "scorer", "multi-scorer")  # = rescorer.onnx_lm.KINDS


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


@main.command(name="export")
@click.argument("checkpoint", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.argument("out_path", type=click.Path(dir_okay=False, path_type=Path), metavar="OUT.onnx")
@click.option(
    "--kind",
    type=click.Choice(EXPORT_KINDS),
    default="step",
    show_default=True,
    help="step: x, h0, c0 -> log_softmax, next_h0, next_c0 with one context folded in; "
    "multi: the same with a context_id input over many contexts; scorer: x, x_lens -> "
    "token_logprobs, sentence_logprob; multi-scorer: the scorer with context_id.",
)
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
) -> None:
    """Export a checkpoint to ONNX with its context(s) folded into the weights.

    The architecture is read from the checkpoint. The vocabulary is written beside OUT
    (OUT stem + .vocab.txt); the two files are all `--lm onnx:OUT` or ONNX Runtime needs.

    \b
    Examples:
      rescorer export exp/factor/best lm.onnx --kind step --context genre=news
      rescorer export exp/factor/best lm_all.onnx --kind multi --quantize int8 --ppl-text dev.txt
      rescorer export exp/factor/best scorer.onnx --kind multi-scorer --contexts ctx.jsonl
    """
    from export.exporter import (  # imported here: torch is heavy
        ExportOptions,
        export_model,
        normalise_record,
        read_context_records,
    )
    from lm_models.checkpoint import load_checkpoint
    from lm_models.lstm import ContextLSTM

    multi = kind.startswith("multi")
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
    record = _context_pairs(context_pairs)
    model, tokens, _ = load_checkpoint(checkpoint)
    if not isinstance(model, ContextLSTM):
        raise click.UsageError(f"{checkpoint}: a {type(model).__name__}; export takes ContextLSTM")
    if record is not None:
        try:
            record = normalise_record(model, record)
        except ValueError as err:
            raise click.BadParameter(str(err), param_hint="--context") from None
    records = None
    if contexts_path is not None:
        records = tuple(read_context_records(contexts_path, model))
    options = ExportOptions(kind=kind, context=record, contexts=records)
    result = export_model(model, tokens, out_path, options)
    n = len(result.contexts)
    click.echo(
        f"wrote {result.path} ({kind}, {n} context{'s' if n != 1 else ''}, "
        f"{result.size_bytes / 2**20:.2f} MiB) and {result.vocab_path}"
    )
    if check:
        from export.parity import check_parity

        report = check_parity(model, result.path)
        click.echo(report.describe())
        if not report.ok:
            raise click.ClickException(f"{result.path}: {report.describe()}")
    if quantize == "int8":
        from export.quantize import perplexity_change, quantize_int8

        q_path = quantize_int8(result.path)
        click.echo(f"wrote {q_path} (dynamic int8, {q_path.stat().st_size / 2**20:.2f} MiB)")
        if ppl_text is not None:
            sentences = [tuple(line.split()) for _, line in read_lines(ppl_text) if line.strip()]
            if not sentences:
                raise InputFailure(f"{ppl_text}: no sentences")
            change = perplexity_change(result.path, q_path, sentences)
            click.echo(f"int8 on {ppl_text}: {change.describe()}")


# -- convert ------------------------------------------------------------------------------------


@main.command()
@nbest_options
@click.option("--to", "to_fmt", type=click.Choice(sorted(WRITERS)), required=True)
@click.option("--out", "out_path", type=click.Path(path_type=Path), required=True)
@handle_errors
def convert(nbest_path: Path, fmt: str, to_fmt: str, out_path: Path) -> None:
    """Convert N-best lists between formats.

    Scores are converted to the target format's log base or cost convention.

    \b
    Example:
      rescorer convert --nbest DEV --to jsonl --out dev.jsonl
    """
    nbest = _load_nbest(nbest_path, fmt)
    write_nbest(nbest, out_path, to_fmt)
    click.echo(f"wrote {len(nbest)} lists to {out_path} ({to_fmt})")


# -- keyboard prediction ------------------------------------------------------------------------


def prediction_options(fn: F) -> F:
    fn = click.option(
        "--device",
        default=None,
        help="Device of torch models: cpu, cuda, ... (default: CUDA when available).",
    )(fn)
    fn = click.option(
        "--lm-case",
        type=click.Choice(CASE_MODES),
        default="auto",
        show_default=True,
        help="Case mapping of typed words into the vocabulary (auto: from the vocabulary).",
    )(fn)
    fn = click.option(
        "--vocab",
        "vocab_path",
        type=EXISTING_FILE,
        default=None,
        help="Word list to predict from (first field per line). Default: the union of the "
        "models' vocabularies (a KenLM binary has none: give this, or an ARPA model).",
    )(fn)
    fn = click.option(
        "--weights",
        type=NumberList(float),
        default=None,
        help="Interpolation weights, one per --lm, normalised to sum 1 (default: equal).",
    )(fn)
    fn = click.option(
        "--mix",
        type=click.Choice(["linear", "loglinear"]),
        default="linear",
        show_default=True,
        help="How several --lm models combine: linear mixture of probabilities, or log-linear "
        "renormalised over the vocabulary.",
    )(fn)
    return click.option(
        "--lm",
        "lm_specs",
        type=LMSpecType(),
        multiple=True,
        required=True,
        help="Model [NAME=]KIND:PATH; repeat to interpolate several.",
    )(fn)


def _load_predictor(
    lm_specs: Sequence[LMSpec],
    mix: str,
    weights: tuple[float, ...] | None,
    vocab_path: Path | None,
    lm_case: str,
    device: str | None,
) -> Predictor:
    if weights is not None and len(weights) != len(lm_specs):
        raise click.BadParameter(
            f"expected {len(lm_specs)} weights (one per --lm), got {len(weights)}",
            param_hint="--weights",
        )
    options = {} if device is None else {"device": device}
    lms = [load_lm(spec, case=lm_case, **options) for spec in lm_specs]
    words = read_word_list(vocab_path) if vocab_path is not None else None
    return build_predictor(lms, weights, mix, words, lm_case)


def _context_fields(items: Sequence[str]) -> dict[str, str] | None:
    record = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise click.BadParameter(f"expected FIELD=VALUE, got {item!r}", param_hint="--field")
        record[name.strip()] = value.strip()
    return record or None


@main.command(name="predict")
@prediction_options
@click.option("-k", "--top", "k", type=click.IntRange(min=1), default=5, show_default=True)
@click.option(
    "--field",
    "fields",
    multiple=True,
    metavar="FIELD=VALUE",
    help="Context for context-aware models (repeatable), e.g. --field genre=news.",
)
@click.option(
    "--input",
    "input_path",
    type=EXISTING_FILE,
    default=None,
    help="Batch mode: lines 'history words[<TAB>partial word[<TAB>{context JSON}]]'.",
)
@click.option(
    "--out",
    "out_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Batch mode: write the JSONL suggestions here (default: stdout).",
)
@handle_errors
def predict_cmd(
    lm_specs: tuple[LMSpec, ...],
    mix: str,
    weights: tuple[float, ...] | None,
    vocab_path: Path | None,
    lm_case: str,
    device: str | None,
    k: int,
    fields: tuple[str, ...],
    input_path: Path | None,
    out_path: Path | None,
) -> None:
    """Next-word prediction and word completion (interactive, or a batch file).

    Without --input, an interactive loop: type words, see the k best next words; end a line
    with a partial word and '*' to complete it ("see you tom*"), '=N' accepts suggestion N, an
    empty line starts a new sentence, ':q' or end of input quits. With --input, one JSONL line
    of suggestions per input line; a line whose history extends the previous one's reuses its
    model state.

    \b
    Examples:
      rescorer predict --lm kenlm:3gram.arpa
      rescorer predict --lm kenlm:4gram.bin --lm torch:exp/lstm/best --vocab words.txt \\
          --weights 0.6,0.4 --input histories.tsv --out suggestions.jsonl
    """
    context = _context_fields(fields)
    if input_path is None and out_path is not None:
        raise click.UsageError("--out is for batch mode: give --input too")
    predictor = _load_predictor(lm_specs, mix, weights, vocab_path, lm_case, device)
    if input_path is None:
        console = TypingConsole(predictor, k, context)
        click.echo(f"{predictor.name}: {len(predictor.words)} words\n{CONSOLE_HELP}")
        while True:
            try:
                line = click.prompt(">", default="", show_default=False, prompt_suffix=" ")
            except click.Abort:  # end of input
                break
            shown = console.feed(line)
            if shown is None:
                break
            click.echo(shown)
        return
    requests = read_requests(input_path)
    seconds = []
    lines = []
    for req, suggestions, sec in predict_stream(predictor, requests, k, context):
        seconds.append(sec)
        record = {
            "line": req.line,
            "history": list(req.history),
            "prefix": req.prefix,
            "suggestions": [s.to_json() for s in suggestions],
            "ms": round(1000.0 * sec, 4),
        }
        lines.append(json.dumps(record))
    if out_path is None:
        for line in lines:
            click.echo(line)
    else:
        with atomic_write(out_path) as f:
            f.write("".join(line + "\n" for line in lines))
        click.echo(f"wrote {len(lines)} suggestion lists to {out_path}", err=True)
    click.echo(f"latency: {LatencyStats.from_seconds(seconds).describe()}", err=True)


@main.command(name="keyboard-eval")
@prediction_options
@click.option(
    "--text",
    "text_path",
    type=EXISTING_FILE,
    required=True,
    help="Test sentences: 'id<TAB>sentence' (Enron Mobile), 'id words' (kaldi) or plain.",
)
@click.option(
    "--text-format",
    type=click.Choice(TEXT_FORMATS),
    default="auto",
    show_default=True,
    help="auto: tsv when the first line has a tab, else plain (line numbers as ids).",
)
@click.option(
    "--context",
    "context_path",
    type=EXISTING_FILE,
    default=None,
    help="Context per sentence id (JSONL or TSV, as for `score`); its ids must be the text's.",
)
@click.option(
    "-k",
    "--suggestions",
    "ks",
    type=NumberList(int),
    default="1,3,5",
    show_default=True,
    help="Numbers of suggestions shown while typing.",
)
@click.option(
    "--accuracy",
    "accuracy_ks",
    type=NumberList(int),
    default="1,3",
    show_default=True,
    help="Top-k next-word accuracies (before the first letter).",
)
@click.option("--limit", type=click.IntRange(min=1), default=None, help="First N sentences only.")
@click.option(
    "--per-sentence",
    "per_sentence_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Write per-sentence results (JSONL) here, for keyboard-compare.",
)
@click.option(
    "--report",
    "report_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Write the totals (JSON) here.",
)
@click.option(
    "--compare",
    "compare_path",
    type=EXISTING_FILE,
    default=None,
    help="Per-sentence results of another system: test this one against it.",
)
@handle_errors
def keyboard_eval(
    lm_specs: tuple[LMSpec, ...],
    mix: str,
    weights: tuple[float, ...] | None,
    vocab_path: Path | None,
    lm_case: str,
    device: str | None,
    text_path: Path,
    text_format: str,
    context_path: Path | None,
    ks: tuple[int, ...],
    accuracy_ks: tuple[int, ...],
    limit: int | None,
    per_sentence_path: Path | None,
    report_path: Path | None,
    compare_path: Path | None,
) -> None:
    """Simulated typing with prediction: keystroke savings, accuracy, MRR, latency.

    Each sentence is typed letter by letter with k suggestions shown; a suggestion equal to the
    intended word is tapped (one keystroke for the word and its space). KS = 1 - keystrokes
    used / keystrokes without prediction, where every word costs its letters and one space
    (see rescorer.keyboard for the convention and a worked example).

    \b
    Example:
      rescorer keyboard-eval --lm kenlm:3gram.arpa --text enronmobile/mobile_nvp.txt \\
          --per-sentence 3gram.jsonl --report 3gram.json
    """
    options = KeyboardOptions(ks=ks, accuracy_ks=accuracy_ks)
    sentences = read_sentences(text_path, text_format)
    contexts = _load_contexts(context_path, [sid for sid, _ in sentences])
    if limit is not None:
        sentences = sentences[:limit]
    others = read_sentence_results(compare_path) if compare_path is not None else None
    predictor = _load_predictor(lm_specs, mix, weights, vocab_path, lm_case, device)
    with tqdm(
        total=len(sentences), desc="typing", unit="sent", disable=_quiet(), file=sys.stderr
    ) as bar:
        result = evaluate(predictor, sentences, contexts, options, progress=bar.update)
    if per_sentence_path is not None:
        write_sentence_results(per_sentence_path, result.sentences)
    if report_path is not None:
        with atomic_write(report_path) as f:
            json.dump(result.report.to_json(), f, indent=2)
            f.write("\n")
    click.echo(result.report.summary())
    if others is not None:
        shared = [k for k in options.ks if k in others[0].keystrokes]
        if not shared:
            raise InputFailure(f"{compare_path}: has no keystroke counts for k in {options.ks}")
        for k in shared:
            comparison = compare_systems(
                others, result.sentences, k, names=(compare_path.name, predictor.name)
            )
            click.echo(comparison.summary())


@main.command(name="keyboard-compare")
@click.argument("a_path", metavar="A.jsonl", type=EXISTING_FILE)
@click.argument("b_path", metavar="B.jsonl", type=EXISTING_FILE)
@click.option(
    "-k",
    "--suggestions",
    "ks",
    type=NumberList(int),
    default=None,
    help="Numbers of suggestions to compare at (default: every k both files have).",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Bootstrap seed.")
@handle_errors
def keyboard_compare(a_path: Path, b_path: Path, ks: tuple[int, ...] | None, seed: int) -> None:
    """Test whether system B saves more keystrokes than A (per-sentence results of both).

    Matched pairs, sign and Wilcoxon tests over sentences, and a bootstrap interval of the KS
    difference.

    \b
    Example:
      rescorer keyboard-compare exp/4gram.jsonl exp/interp.jsonl -k 3
    """
    a = read_sentence_results(a_path)
    b = read_sentence_results(b_path)
    common = sorted(set(a[0].keystrokes) & set(b[0].keystrokes))
    chosen = ks or tuple(common)
    if not chosen:
        raise click.UsageError(f"{a_path} and {b_path} share no number of suggestions")
    for k in chosen:
        if k not in common:
            raise click.BadParameter(f"k={k} is not in both files (have {common})")
        click.echo(compare_systems(a, b, k, names=(a_path.name, b_path.name), seed=seed).summary())


# fnlm-train, fnlm-eval, mix-weights: in their own module, registered on `main` when imported.
import rescorer.cli_cue  # noqa: E402, F401
import rescorer.cli_fnlm  # noqa: E402, F401
import rescorer.cli_lbl  # noqa: E402, F401

if __name__ == "__main__":  # pragma: no cover
    main()
