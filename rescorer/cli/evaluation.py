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
    load_noise_words,
    load_refs,
    load_speakers,
    noise_words_option,
    normalize_option,
    normalized_label,
    ref_options,
    resolve_refs,
)
from rescorer.core.errors import check_same_ids
from rescorer.core.output import atomic_write
from rescorer.normalize import Normalizer
from rescorer.refs import read_references
from rescorer.wer import oracle, score_corpus

logger = logging.getLogger(__name__)


# -- wer ----------------------------------------------------------------------------------------


def read_hyp_text(path: Path, fmt: str) -> dict[str, tuple[str, ...]]:
    """A hypothesis text (``--hyp``, ``--compare``): Kaldi ``uttid words`` or sclite trn."""
    return read_references(path, None if fmt == "auto" else fmt)


def write_alignments(
    path: Path,
    refs: dict[str, tuple[str, ...]],
    hyps: dict[str, tuple[str, ...]],
    unit: str,
    header: list[str],
) -> None:
    """``--align``: per-utterance alignments and confusion tables, written atomically."""
    from rescorer.alignments import align_corpus  # numpy: only with --align

    report = align_corpus(refs, hyps, unit=unit)
    with atomic_write(path) as f:
        f.write(report.render(header))


@click.command()
@ref_options(required=False)
@click.option(
    "--hyp",
    "hyp_path",
    type=EXISTING_FILE,
    help="Hypotheses as Kaldi 'uttid words' text or sclite trn ('words (id)').",
)
@click.option(
    "--hyp-format",
    type=click.Choice(["auto", "trn", "kaldi"]),
    default="auto",
    show_default=True,
    help="Format of --hyp and --compare (auto: trn when named *.trn or the first line ends "
    "in '(id)').",
)
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
    help="Write a per-utterance error table here (after a '# normalize: SPEC' line when the "
    "text is normalised).",
)
@click.option(
    "--summary/--no-summary",
    default=True,
    show_default=True,
    help="Print the sclite-style summary table.",
)
@click.option(
    "--align",
    "align_path",
    type=OUT_FILE,
    help="Write each utterance's REF/HYP alignment with S/D/I marks (sclite .pra-like; the "
    "alignment the counts come from) and tables of confusion pairs, deletions and insertions.",
)
@normalize_option
@noise_words_option
@handle_errors
def wer(
    ref_path: Path | None,
    ref_format: str,
    allow_extra_refs: bool,
    hyp_path: Path | None,
    hyp_format: str,
    nbest_path: Path | None,
    fmt: str,
    with_oracle: bool,
    compare_path: Path | None,
    utt2spk: Path | None,
    cer: bool,
    per_utt: Path | None,
    summary: bool,
    align_path: Path | None,
    normalizer: Normalizer,
    noise_path: Path | None,
) -> None:
    """Word error rate against references.

    Scores a hypothesis text (Kaldi or trn), or the first hypotheses of N-best lists (--oracle
    adds the best achievable choice from the lists). N-best files that hold references (json,
    jsonl, hyporadise) need no --ref; --ref wins when given.

    \b
    Examples:
      rescorer wer --ref DEV/references/ref_wer.trn --hyp DEV/raw_hypotheses/1best_recog/text
      rescorer wer --ref DEV/references/ref_wer.trn --nbest DEV --oracle
      rescorer wer --nbest hyporadise_test.json --oracle --normalize english
      rescorer wer --ref REF.trn --hyp hyp.trn --align hyp.pra
      rescorer wer --ref REF.trn --hyp A.txt --compare B.txt
      rescorer wer --ref REF.trn --hyp hyp.txt --noise-words noise.txt
    """
    if (hyp_path is None) == (nbest_path is None):
        raise click.UsageError("give exactly one of --hyp or --nbest")
    if with_oracle and nbest_path is None:
        raise click.UsageError("--oracle needs --nbest")
    if with_oracle and cer:
        raise click.UsageError("--oracle is computed on words; drop --cer")
    unit = "char" if cer else "word"
    noise = load_noise_words(noise_path)
    nbest = None
    if hyp_path is not None:
        hyps = noise.mapping(normalizer.mapping(read_hyp_text(hyp_path, hyp_format)))
        refs = load_refs(ref_path, ref_format, list(hyps), hyp_path, allow_extra_refs)
        label = str(hyp_path)
    else:
        assert nbest_path is not None
        from rescorer.combine import one_best  # numpy: only for N-best input

        raw = load_nbest(nbest_path, fmt)
        refs = resolve_refs(ref_path, ref_format, raw, nbest_path, allow_extra=allow_extra_refs)
        nbest = noise.nbest(normalizer.nbest(raw))
        hyps = one_best(nbest)
        label = f"{nbest_path} (first hypotheses)"
    source = hyp_path or nbest_path
    refs = noise.mapping(normalizer.mapping(refs))
    tag = normalized_label(normalizer, noise)
    speakers = load_speakers(utt2spk, list(hyps), source)
    other = None
    if compare_path is not None:  # read before anything is written
        other = noise.mapping(normalizer.mapping(read_hyp_text(compare_path, hyp_format)))
        check_same_ids(set(hyps), set(other), "compared hypothesis", compare_path, against=source)
    report = score_corpus(refs, hyps, speakers, unit=unit)
    if summary:
        click.echo(report.summary())
    echo_report(label + tag, report)
    if per_utt is not None:
        with atomic_write(per_utt) as f:
            if not normalizer.is_identity:
                f.write(f"# normalize: {normalizer.name}\n")
            if not noise.is_empty:
                f.write(f"# noise words: {noise.source}\n")
            f.write(report.utterance_table() + "\n")
    if align_path is not None:
        header = [f"{report.kaldi_line()} {label}", f"normalize: {normalizer.name}"]
        if not noise.is_empty:
            header.append(f"noise words: {noise.source}")
        write_alignments(align_path, refs, hyps, unit, header)
    if with_oracle:
        assert nbest is not None
        orc = oracle(nbest, refs)
        echo_report(f"oracle over {max(len(nb) for nb in nbest.values())}-best{tag}", orc.report)
    if other is not None:
        assert compare_path is not None
        report_b = score_corpus(refs, other, speakers, unit=unit)
        echo_report(f"{compare_path}{tag}", report_b)
        from rescorer.significance import compare  # numpy: only for --compare

        click.echo(compare(report, report_b).summary())
