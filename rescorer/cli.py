"""The ``rescorer`` command line: thin click commands over the library.

Bad input data gets one line naming the file and line, and exit status 2; bad options get click's
usage error (also status 2). Progress bars go to stderr and ``--quiet`` silences them.
"""

from __future__ import annotations

import functools
import logging
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import click

from rescorer.combine import Weights, one_best, rerank
from rescorer.contexts import check_context_ids, read_contexts
from rescorer.errors import InputError, check_same_ids
from rescorer.features import LMFeatureReport, add_lm_scores
from rescorer.formats import READERS, WRITERS, detect_format, read_nbest, write_nbest
from rescorer.io import atomic_write, read_lines
from rescorer.lm import LOADERS, LanguageModel, LMSpec, load_lm
from rescorer.nbest import NBest
from rescorer.ngram import BINARY_TYPES, KenLMToolError, NgramOptions, build_ngram
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


class IntList(click.ParamType):
    """A comma-separated list of non-negative integers."""

    name = "N,N,..."

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, tuple):
            return value
        try:
            items = tuple(int(v) for v in str(value).split(","))
        except ValueError:
            self.fail(f"expected comma-separated integers, got {value!r}", param, ctx)
        if any(i < 0 for i in items):
            self.fail(f"thresholds must be >= 0, got {value!r}", param, ctx)
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
        help="Device of torch models: cpu, cuda, cuda:1, ... (default: CUDA when available).",
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
    type=IntList(),
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
    from lm_models.inspect_context import context_pca, plot_pca, top_boosted_words

    model, tokens, _ = load_checkpoint(model_dir)
    for value, words in top_boosted_words(model, tokens, field, top).items():
        click.echo(f"{value}: " + " ".join(w for w, _ in words))
    if pca_path is not None:
        plot_pca(context_pca(model, field), pca_path, f"context embeddings: {field}")
        click.echo(f"wrote {pca_path}")


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


if __name__ == "__main__":  # pragma: no cover
    main()
