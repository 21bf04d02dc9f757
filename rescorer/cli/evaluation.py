"""Evaluation commands: ``wer``."""

from __future__ import annotations

import logging
from pathlib import Path

import click

from rescorer.cli.options import (
    EXISTING,
    EXISTING_FILE,
    FORMAT_CHOICE,
    OUT_FILE,
    echo_report,
    handle_errors,
    load_nbest,
    load_refs,
    load_speakers,
    ref_options,
)
from rescorer.combine import one_best
from rescorer.core.errors import check_same_ids
from rescorer.core.output import atomic_write
from rescorer.refs import read_references
from rescorer.significance import compare
from rescorer.wer import oracle, score_corpus

logger = logging.getLogger(__name__)


# -- wer ----------------------------------------------------------------------------------------


@click.command()
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
    type=OUT_FILE,
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
        nbest = load_nbest(nbest_path, fmt)
        hyps = one_best(nbest)
        label = f"{nbest_path} (first hypotheses)"
    source = hyp_path or nbest_path
    refs = load_refs(ref_path, ref_format, list(hyps), source)
    speakers = load_speakers(utt2spk, list(hyps), source)
    report = score_corpus(refs, hyps, speakers, unit=unit)
    if summary:
        click.echo(report.summary())
    echo_report(label, report)
    if per_utt is not None:
        with atomic_write(per_utt) as f:
            f.write(report.utterance_table() + "\n")
    if with_oracle:
        assert nbest is not None
        orc = oracle(nbest, refs)
        echo_report(f"oracle over {max(len(nb) for nb in nbest.values())}-best", orc.report)
    if compare_path is not None:
        other = read_references(compare_path, "kaldi")
        check_same_ids(set(hyps), set(other), "compared hypothesis", compare_path, against=source)
        report_b = score_corpus(refs, other, speakers, unit=unit)
        echo_report(str(compare_path), report_b)
        click.echo(compare(report, report_b).summary())
