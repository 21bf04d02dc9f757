"""Evaluation commands: ``wer``."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

import click

from rescorer.cli.options import (
    EXISTING,
    EXISTING_FILE,
    FORMAT_CHOICE,
    OUT_FILE,
    echo_report,
    handle_errors,
    load_noise_words,
    load_refs,
    load_speakers,
    max_nbest_option,
    noise_words_option,
    normalize_option,
    normalized_label,
    open_source,
    ref_options,
    resolve_refs,
)
from rescorer.core.errors import InputError, check_same_ids
from rescorer.core.output import atomic_write
from rescorer.normalize import NoiseWords, Normalizer
from rescorer.refs import (
    HYP_FORMATS,
    read_hypothesis_text,
    read_references,
    transcript_format,
)
from rescorer.wer import score_corpus

if TYPE_CHECKING:  # sclite's stm/ctm reader is imported where used (start-up of `wer`)
    from rescorer.formats.sclite import SegmentedText
    from rescorer.formats.source import NBestSource
    from rescorer.wer import WerReport

logger = logging.getLogger(__name__)


# -- wer ----------------------------------------------------------------------------------------


def read_hyp_text(path: Path, fmt: str, id_key: str | None = None) -> dict[str, tuple[str, ...]]:
    """A hypothesis text (``--hyp``, ``--compare``): Kaldi ``uttid words``, sclite trn or a
    NeMo manifest's ``pred_text``."""
    return read_hypothesis_text(path, None if fmt == "auto" else fmt, id_key)


def read_stm_ctm_inputs(
    ref_path: Path | None,
    ref_format: str,
    hyp_path: Path,
    hyp_format: str,
    compare_path: Path | None,
) -> tuple[SegmentedText, SegmentedText | None] | None:
    """An stm ``--ref`` with a ctm ``--hyp`` and ``--compare`` (None without it), each cut into
    the stm's segments (:mod:`rescorer.formats.sclite`); None when neither is an stm or a ctm; an
    :class:`InputError` (one line) for an stm or a ctm with a text of another kind."""
    hyp_fmt = transcript_format(hyp_path, hyp_format)
    ref_fmt = None if ref_path is None else transcript_format(ref_path, ref_format)
    if ref_fmt != "stm" and hyp_fmt != "ctm":
        return None
    if ref_path is None:
        raise click.UsageError("a ctm --hyp is scored against an stm --ref: give --ref")
    if ref_fmt != "stm":
        read_references(ref_path, ref_fmt)  # refuses with the candidates what looks like stm
        raise InputError(
            f"a ctm hypothesis is scored against an sclite stm reference (--ref-format stm), "
            f"not {ref_fmt}: its words have times, not utterance ids",
            ref_path,
        )
    texts = [(hyp_path, hyp_fmt)]
    if compare_path is not None:
        texts.append((compare_path, transcript_format(compare_path, hyp_format)))
    for path, fmt in texts:
        if fmt != "ctm":
            read_hyp_text(path, fmt)  # refuses with the candidates what looks like a ctm
            raise InputError(
                f"an stm reference is scored against an sclite ctm hypothesis (--hyp-format "
                f"ctm: 'file channel begin duration word'), not {fmt}: a {fmt} text has no word "
                "times to place its words in the stm's segments",
                path,
            )
    from rescorer.formats.sclite import read_ctm, read_stm, segment_ctm

    segments = read_stm(ref_path)
    cut = [segment_ctm(segments, read_ctm(path), ref_path, path) for path, _ in texts]
    return cut[0], (cut[1] if len(cut) > 1 else None)


def first_and_oracle(
    source: NBestSource,
    refs: dict[str, tuple[str, ...]],
    normalizer: Normalizer,
    noise: NoiseWords,
    with_oracle: bool,
) -> tuple[dict[str, tuple[str, ...]], tuple[WerReport, int] | None]:
    """The first hypothesis of every list and, ``with_oracle``, the oracle report and the
    longest list's size; the lists are read a chunk at a time (flat memory for JSONL)."""
    from rescorer.combine import one_best  # numpy: only for N-best input
    from rescorer.wer import WerReport, oracle

    if with_oracle:
        empty = [u for u, n in zip(source.ids, source.sizes, strict=True) if n == 0]
        if empty:
            raise InputError(
                f"{len(empty)} N-best list(s) without hypotheses: {', '.join(empty[:5])}",
                source.path,
            )
    hyps: dict[str, tuple[str, ...]] = {}
    best = {}
    for chunk in source.chunks():
        chunk = noise.nbest(normalizer.nbest(chunk))
        hyps.update(one_best(chunk))
        if with_oracle:
            part = oracle(chunk, {u: refs[u] for u in chunk})
            best.update((u.utt_id, u) for u in part.report.utterances)
    hyps = {u: hyps[u] for u in refs}  # reports list utterances in the references' order
    if not with_oracle:
        return hyps, None
    report = WerReport.from_utterances([best[u] for u in refs])
    return hyps, (report, source.max_size())


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
    help="Hypotheses as Kaldi 'uttid words' text, sclite trn ('words (id)'), a NeMo manifest "
    "('pred_text'), or an sclite ctm (time-marked words, against an stm --ref).",
)
@click.option(
    "--hyp-format",
    type=click.Choice(["auto", *HYP_FORMATS]),
    default="auto",
    show_default=True,
    help="Format of --hyp and --compare (auto: by name, *.trn, *.ctm, a *.json/*.jsonl NeMo "
    "manifest, or trn when the first line ends in '(id)', else Kaldi text; a file that looks "
    "like another format is refused).",
)
@click.option(
    "--id-key",
    metavar="KEY",
    default=None,
    help="NeMo manifests: the key holding the utterance id (default: the file name of "
    "'audio_filepath' without its extension).",
)
@click.option("--nbest", "nbest_path", type=EXISTING, help="Score the first hypothesis of lists.")
@click.option("--format", "fmt", type=FORMAT_CHOICE, default="auto", show_default=True)
@max_nbest_option
@click.option(
    "--oracle",
    "with_oracle",
    is_flag=True,
    help="Also the oracle WER of the lists: the fewest errors any choice from each list gives, "
    "labelled with the K of the K-best lists (the longest list, after --max-nbest).",
)
@click.option(
    "--compare",
    "compare_path",
    type=EXISTING_FILE,
    help="A second system ('uttid words' text): test the difference for significance.",
)
@click.option(
    "--utt2spk",
    type=EXISTING_FILE,
    help="Speaker of each utterance (per-speaker rows of --summary). Without it, a trn --ref "
    "groups by sclite's rule: the id up to its first '-'.",
)
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
    id_key: str | None,
    nbest_path: Path | None,
    fmt: str,
    max_nbest: int | None,
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

    Scores a hypothesis text (Kaldi, trn or a NeMo manifest), a ctm against an stm segment by
    segment as sclite does (speakers from the stm), or the first hypotheses of N-best lists
    (--oracle adds the best achievable choice from the lists). N-best files that hold
    references (json, jsonl, hyporadise) need no --ref; --ref wins when given.

    \b
    Examples:
      rescorer wer --ref DEV/references/ref_wer.trn --hyp DEV/raw_hypotheses/1best_recog/text
      rescorer wer --ref DEV/references/ref_wer.trn --nbest DEV --oracle
      rescorer wer --ref DEV/references/ref_wer.trn --nbest DEV --oracle --max-nbest 10
      rescorer wer --nbest hyporadise_test.json --oracle --normalize english
      rescorer wer --ref REF.trn --hyp hyp.trn --align hyp.pra
      rescorer wer --ref REF.trn --hyp A.txt --compare B.txt
      rescorer wer --ref REF.trn --hyp hyp.txt --noise-words noise.txt
      rescorer wer --ref REF.stm --hyp hyp.ctm
      rescorer wer --ref manifest.json --hyp manifest.json
    """
    if (hyp_path is None) == (nbest_path is None):
        raise click.UsageError("give exactly one of --hyp or --nbest")
    if with_oracle and nbest_path is None:
        raise click.UsageError("--oracle needs --nbest")
    if max_nbest is not None and nbest_path is None:
        raise click.UsageError("--max-nbest goes with --nbest")
    if with_oracle and cer:
        raise click.UsageError("--oracle is computed on words; drop --cer")
    unit = "char" if cer else "word"
    noise = load_noise_words(noise_path)
    oracle_report = None
    timed = None
    if hyp_path is not None:
        timed = read_stm_ctm_inputs(ref_path, ref_format, hyp_path, hyp_format, compare_path)
    if timed is not None:
        if utt2spk is not None:
            raise click.UsageError("the stm names the speakers: drop --utt2spk")
        cut = timed[0]
        hyps = noise.mapping(normalizer.mapping(cut.hyps))
        refs = noise.mapping(normalizer.mapping(cut.refs))
        speakers: dict[str, str] | None = cut.speakers
        label = str(hyp_path)
    elif hyp_path is not None:
        hyps = noise.mapping(normalizer.mapping(read_hyp_text(hyp_path, hyp_format, id_key)))
        refs = load_refs(ref_path, ref_format, list(hyps), hyp_path, allow_extra_refs, id_key)
        refs = noise.mapping(normalizer.mapping(refs))
        speakers = load_speakers(utt2spk, list(hyps), hyp_path, ref_path, ref_format)
        label = str(hyp_path)
    else:
        assert nbest_path is not None
        source = open_source(nbest_path, fmt, max_nbest=max_nbest)
        raw = resolve_refs(
            ref_path, ref_format, source, nbest_path, allow_extra=allow_extra_refs, id_key=id_key
        )
        assert raw is not None  # required
        refs = noise.mapping(normalizer.mapping(raw))
        speakers = load_speakers(utt2spk, list(source), nbest_path, ref_path, ref_format)
        hyps, oracle_report = first_and_oracle(source, refs, normalizer, noise, with_oracle)
        label = f"{nbest_path} (first hypotheses)"
    source_path = hyp_path or nbest_path
    tag = normalized_label(normalizer, noise)
    other = None
    if compare_path is not None:  # read before anything is written
        raw_other = (
            timed[1].hyps
            if timed is not None and timed[1] is not None
            else read_hyp_text(compare_path, hyp_format, id_key)
        )
        other = noise.mapping(normalizer.mapping(raw_other))
        check_same_ids(
            set(hyps), set(other), "compared hypothesis", compare_path, against=source_path
        )
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
    if oracle_report is not None:
        echo_report(f"oracle over {oracle_report[1]}-best{tag}", oracle_report[0])
    if other is not None:
        assert compare_path is not None
        report_b = score_corpus(refs, other, speakers, unit=unit)
        echo_report(f"{compare_path}{tag}", report_b)
        from rescorer.significance import compare  # numpy: only for --compare

        click.echo(compare(report, report_b).summary())
