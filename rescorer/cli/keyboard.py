"""Keyboard commands: ``predict``, ``keyboard-eval``, ``keyboard-compare``."""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

import click
from tqdm import tqdm

from rescorer.cli.options import (
    EXISTING_FILE,
    OUT_FILE,
    SEED,
    F,
    InputFailure,
    LMSpecType,
    NumberList,
    handle_errors,
    lm_case_option,
    load_contexts,
    normalize_option,
    out_option,
    progress_bars,
)
from rescorer.core.errors import check_same_ids
from rescorer.core.output import atomic_write
from rescorer.keyboard import (
    TEXT_FORMATS,
    KeyboardOptions,
    LatencyStats,
    PositionGain,
    compare_systems,
    evaluate,
    keystrokes_by_position,
    read_sentence_results,
    read_sentences,
    write_sentence_results,
)
from rescorer.lms import load_lm
from rescorer.lms.contract import LMSpec
from rescorer.normalize import Normalizer
from rescorer.predict import (
    CONSOLE_HELP,
    Predictor,
    TypingConsole,
    build_predictor,
    predict_stream,
    read_requests,
    read_word_list,
)

logger = logging.getLogger(__name__)

# keyboard-eval warns when more of the test words than this are outside the vocabulary.
OOV_WARNING_RATE = 0.05


# -- keyboard prediction ------------------------------------------------------------------------


def prediction_options(fn: F) -> F:
    fn = click.option(
        "--device",
        default=None,
        help="Device of torch models: cpu, cuda, ... (default: CUDA when available).",
    )(fn)
    fn = lm_case_option(
        help="Case mapping of typed words into the vocabulary (auto: from the vocabulary)."
    )(fn)
    fn = click.option(
        "--vocab",
        "vocab_path",
        type=EXISTING_FILE,
        default=None,
        help="Word list to predict from (first field per line). Default: the union of the "
        "models' vocabularies (a KenLM model's: its ARPA unigrams or the words its binary "
        "stores; `rescorer ngram vocab MODEL --out words.txt` writes them to edit).",
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


def oov_warning(rate: float, vocabulary: int, normalizer: Normalizer) -> str:
    """The warning of keyboard-eval for a test text with many words outside the vocabulary:
    advice to normalise raw text, or, when --normalize was given, to build the model from text
    normalised the same way."""
    head = (
        f"warning: {100 * rate:.1f}% of the test words are outside the {vocabulary}-word "
        "vocabulary and can never be suggested; "
    )
    if normalizer.is_identity:
        return head + (
            "raw text (case, punctuation) is the usual cause: normalise it as the training "
            "text was, e.g. --normalize english"
        )
    return head + (
        f"the test text was normalised (--normalize {normalizer.name}): were the model's "
        f"training text and --vocab normalised alike (e.g. rescorer ngram build --normalize "
        f"{normalizer.name})?"
    )


def _context_fields(items: Sequence[str]) -> dict[str, str] | None:
    record = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise click.BadParameter(f"expected FIELD=VALUE, got {item!r}", param_hint="--field")
        record[name.strip()] = value.strip()
    return record or None


@click.command(name="predict")
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
    help="Batch mode: lines 'history words[<TAB>partial word[<TAB>{context JSON}]]'; an "
    "empty history (a blank line, or '<TAB>th') asks at a sentence start.",
)
@out_option("Batch mode: write the JSONL suggestions here (default: stdout).")
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


@click.command(name="keyboard-eval")
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
@click.option(
    "--final-space/--no-final-space",
    default=False,
    show_default=True,
    help="Count a space after the last word of each sentence (in the baseline and when typed).",
)
@click.option("--limit", type=click.IntRange(min=1), default=None, help="First N sentences only.")
@click.option(
    "--per-sentence",
    "per_sentence_path",
    type=OUT_FILE,
    default=None,
    help="Write per-sentence results (JSONL) here, for keyboard-compare.",
)
@click.option(
    "--report",
    "report_path",
    type=OUT_FILE,
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
@normalize_option(applies_to="the test text before typing it (as the training text was)")
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
    final_space: bool,
    limit: int | None,
    per_sentence_path: Path | None,
    report_path: Path | None,
    compare_path: Path | None,
    normalizer: Normalizer,
) -> None:
    """Simulated typing with prediction: keystroke savings, accuracy, MRR, latency.

    Each sentence is typed letter by letter with k suggestions shown; a suggestion equal to the
    intended word is tapped (one keystroke for the word and its space). KS = 1 - keystrokes
    used / keystrokes without prediction, where every word costs its letters and one space,
    the last word of a sentence no space unless --final-space (see rescorer.keyboard for the
    convention and a worked example).

    \b
    Example:
      rescorer keyboard-eval --lm kenlm:3gram.arpa --text enronmobile/mobile_nvp.txt \\
          --per-sentence 3gram.jsonl --report 3gram.json
    """
    options = KeyboardOptions(
        ks=ks, accuracy_ks=accuracy_ks, final_space=final_space, normalize=normalizer.name
    )
    sentences = read_sentences(text_path, text_format)
    if not normalizer.is_identity:  # the test text as the training text was normalised
        sentences = [(sid, normalizer.words(words)) for sid, words in sentences]
        sentences = [(sid, words) for sid, words in sentences if words]
    contexts = load_contexts(context_path, [sid for sid, _ in sentences], text_path)
    if limit is not None:
        sentences = sentences[:limit]
    others = read_sentence_results(compare_path) if compare_path is not None else None
    predictor = _load_predictor(lm_specs, mix, weights, vocab_path, lm_case, device)
    with tqdm(
        total=len(sentences),
        desc="typing",
        unit="sent",
        disable=not progress_bars(),
        file=sys.stderr,
    ) as bar:
        result = evaluate(predictor, sentences, contexts, options, progress=bar.update)
    if per_sentence_path is not None:
        write_sentence_results(per_sentence_path, result.sentences)
    if report_path is not None:
        with atomic_write(report_path) as f:
            json.dump(result.report.to_json(), f, indent=2)
            f.write("\n")
    click.echo(result.report.summary())
    if result.report.oov_rate > OOV_WARNING_RATE:
        click.echo(
            oov_warning(result.report.oov_rate, result.report.vocabulary, normalizer), err=True
        )
    if others is not None:
        ids = {r.id for r in result.sentences}
        check_same_ids(ids, {r.id for r in others}, f"sentence (as in {text_path})", compare_path)
        shared = [k for k in options.ks if k in others[0].keystrokes]
        if not shared:
            raise InputFailure(f"{compare_path}: has no keystroke counts for k in {options.ks}")
        for k in shared:
            comparison = compare_systems(
                others, result.sentences, k, names=(compare_path.name, predictor.name)
            )
            click.echo(comparison.summary())


@click.command(name="keyboard-compare")
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
@click.option("--seed", type=SEED, default=0, show_default=True, help="Bootstrap seed.")
@click.option(
    "--by-position",
    is_flag=True,
    help="Also a table of the KS of each system on the words at positions 1, 2, 3, 4-5, 6-10 "
    "and 11+ of their sentences, and each band's share of the difference (the shares sum to "
    "it): where in a sentence B saves.",
)
@handle_errors
def keyboard_compare(
    a_path: Path, b_path: Path, ks: tuple[int, ...] | None, seed: int, by_position: bool
) -> None:
    """Test whether system B saves more keystrokes than A (per-sentence results of both).

    Matched pairs, sign and Wilcoxon tests over sentences, and a bootstrap interval of the KS
    difference.

    \b
    Example:
      rescorer keyboard-compare exp/4gram.jsonl exp/interp.jsonl -k 3
      rescorer keyboard-compare exp/lstm.jsonl exp/topic.jsonl -k 3 --by-position
    """
    a = read_sentence_results(a_path)
    b = read_sentence_results(b_path)
    if by_position:
        for path, results in ((a_path, a), (b_path, b)):
            if any(r.word_keystrokes is None for r in results):
                raise InputFailure(
                    f"{path}: expected per-sentence results typed word by word for "
                    "--by-position (word_keystrokes; files written before they were recorded "
                    "lack them): run keyboard-eval --per-sentence again"
                )
    check_same_ids({r.id for r in a}, {r.id for r in b}, f"sentence (as in {a_path})", b_path)
    common = sorted(set(a[0].keystrokes) & set(b[0].keystrokes))
    chosen = ks or tuple(common)
    if not chosen:
        raise InputFailure(f"{b_path}: expected a number of suggestions also in {a_path}, got none")
    for k in chosen:
        if k not in common:
            raise click.BadParameter(f"k={k} is not in both files (have {common})")
        click.echo(compare_systems(a, b, k, names=(a_path.name, b_path.name), seed=seed).summary())
        if by_position:
            click.echo(position_table(keystrokes_by_position(a, b, k), k, a_path.name, b_path.name))


def position_table(bands: Sequence[PositionGain], k: int, name_a: str, name_b: str) -> str:
    """keyboard-compare --by-position's table."""
    rows = [
        f"KS by word position at k={k} ({name_a} -> {name_b}; last column: the band's share of "
        "the whole difference, points)",
        f"  {'position':<9}{'words':>8}{'keystrokes':>12}{'KS A':>9}{'KS B':>9}{'B - A':>8}"
        f"{'share':>8}",
    ]
    for g in bands:
        rows.append(
            f"  {g.label:<9}{g.words:>8}{g.baseline:>12}{100 * g.ks_a:>8.2f}%{100 * g.ks_b:>8.2f}%"
            f"{100 * (g.ks_b - g.ks_a):>+8.2f}{100 * g.contribution:>+8.2f}"
        )
    return "\n".join(rows)
