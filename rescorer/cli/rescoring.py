"""Rescoring commands: ``score``, ``tune``, ``rescore``, ``convert``."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path

import click

from rescorer.cli.options import (
    EXISTING_FILE,
    OUT_DIR,
    OUT_PATH,
    RANK_WHEN_UNSCORED,
    SEED,
    CommaList,
    InputFailure,
    ListOrder,
    NumberList,
    allow_extra_refs_option,
    check_feature_names,
    chunk_refs,
    context_options,
    echo_lm_report,
    extra_scores_option,
    handle_errors,
    lm_options,
    load_contexts,
    load_noise_words,
    load_refs,
    load_speakers,
    nbest_options,
    noise_words_option,
    normalize_option,
    normalized_label,
    open_source,
    out_option,
    progress_bars,
    rank_option,
    ref_options,
    resolve_refs,
)
from rescorer.combine import Weights, one_best, rerank
from rescorer.core.constants import RANK_DEFINITION, RANK_FEATURE
from rescorer.core.errors import InputError
from rescorer.core.output import atomic_dir, atomic_write, check_output_dir, check_output_file
from rescorer.formats import FILE_FORMATS, WRITERS, write_nbest
from rescorer.formats.json_formats import write_jsonl_lines
from rescorer.formats.srilm import ScoreDir
from rescorer.lms.contract import LMSpec
from rescorer.mbr import OBJECTIVES
from rescorer.nbest import NBest
from rescorer.normalize import Normalizer
from rescorer.refs import write_kaldi_lines, write_kaldi_text, write_trn, write_trn_lines
from rescorer.scale_out import Scorer, ScoringJob
from rescorer.shards import Shard
from rescorer.significance import compare
from rescorer.tune import METHODS, SELECTIONS, TuneOptions, TuningSet, tune_set
from rescorer.wer import score_corpus

logger = logging.getLogger(__name__)

RESCORE_FILES = frozenset({"nbest.jsonl", "1best.txt", "1best.trn", "wer.txt"})
"""What ``rescore --out DIR`` writes (one set); other files of DIR are kept."""


# -- tune ---------------------------------------------------------------------------------------


@click.command(name="tune")
@nbest_options
@extra_scores_option
@ref_options(required=False)
@lm_options
@context_options
@rank_option(
    f"{RANK_WHEN_UNSCORED} and no --features are named (it is then the first feature, the "
    "anchor), or when --features name it and the lists lack it"
)
@click.option(
    "--features",
    type=CommaList(),
    default=None,
    help="Score columns and LM names to combine (default: all of them, the lists' order "
    "'rank' first when it is added).",
)
@click.option(
    "--length/--no-length", default=True, show_default=True, help="Tune a word-count weight."
)
@click.option("--anchor", default=None, help="Feature held at weight 1 (default: the first).")
@click.option("--init", "init_path", type=EXISTING_FILE, help="Start from these weights (JSON).")
@click.option("--restarts", type=click.IntRange(min=0), default=10, show_default=True)
@click.option("--seed", type=SEED, default=0, show_default=True)
@click.option(
    "--bound",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="Largest |weight| of a feature relative to the anchor, in standardised units "
    "(default: unbounded).",
)
@click.option(
    "--selection",
    type=click.Choice(SELECTIONS),
    default="dev",
    show_default=True,
    help="Keep the start with the fewest tuning-set errors (dev), or search on 3 of every 4 "
    "utterances and keep the start with the fewest errors on the 4th (holdout).",
)
@click.option(
    "--method",
    type=click.Choice(METHODS),
    default="mert",
    show_default=True,
    help="mert: exact search of the error count, with restarts; risk: minimise the expected "
    "errors of a softmax over each list, annealed toward the hard choice (smooth, no restarts; "
    "generalised better from dev_clean to dev_other in recipes/librispeech_nbest).",
)
@click.option(
    "--objective",
    type=click.Choice(OBJECTIVES),
    default="top",
    show_default=True,
    help="top: weights for choosing the top combined score. posterior: the same weights, then "
    "the posterior scale S of minimum expected word error decoding (rescore --objective "
    "posterior) picked on this set by a grid search, and written with the weights; both dev "
    "errors are reported.",
)
@click.option(
    "--posterior-scales",
    type=NumberList(float),
    default=None,
    help="With --objective posterior: the scales to try (default: 29 scales 2^(k/2)/spread, "
    "k = -8..20, spread the median standard deviation of the combined scores in a list).",
)
@out_option("Where to write the tuned weights (JSON).", required=True)
@normalize_option
@noise_words_option
@handle_errors
def tune_cmd(
    nbest_path: Path,
    fmt: str,
    max_nbest: int | None,
    extra_scores: tuple[ScoreDir, ...],
    ref_path: Path | None,
    ref_format: str,
    allow_extra_refs: bool,
    lm_specs: tuple[LMSpec, ...],
    lm_case: str,
    lm_oov: bool,
    rank: bool | None,
    features: tuple[str, ...] | None,
    length: bool,
    anchor: str | None,
    init_path: Path | None,
    restarts: int,
    seed: int,
    bound: float | None,
    selection: str,
    method: str,
    objective: str,
    posterior_scales: tuple[float, ...] | None,
    out_path: Path,
    normalizer: Normalizer,
    noise_path: Path | None,
    context_path: Path | None = None,
    device: str | None = None,
) -> None:
    """Tune combination weights on a dev set.

    Finds log-linear weights of the chosen features (and the word count) that minimise the
    corpus word errors of the selected hypotheses; -v logs the search trace. References come
    from --ref, else from the N-best file itself (json, jsonl, hyporadise).

    "initial" is the errors of the lists' own order (their first hypotheses); tuned weights
    that make more errors than it on this set are a warning. Lists without any score get
    their order as the feature 'rank' (--rank/--no-rank), which is then the anchor: the search
    starts from the list order.

    \b
    Example:
      rescorer tune --nbest DEV --ref DEV/references/ref_wer.trn \\
          --lm kenlm:4gram.bin --features decoder,ctc,4gram --out weights.json
      rescorer tune --nbest DEV --ref DEV/references/ref_wer.trn \\
          --features decoder,ctc,lm --objective posterior --out weights.json
      rescorer tune --nbest NBEST_DIR --format srilm3 --ref refs.txt \\
          --extra-scores pron=PRON_DIR --features acoustic,lm,pron --out weights.json
      rescorer tune --nbest unscored.json --lm kenlm:4gram.bin --out weights.json
    """
    if posterior_scales is not None and objective != "posterior":
        raise click.UsageError("--posterior-scales goes with --objective posterior")
    check_feature_names(extra_scores, lm_specs, lm_oov)
    noise = load_noise_words(noise_path)
    source = open_source(nbest_path, fmt, extra_scores, max_nbest)
    refs = resolve_refs(ref_path, ref_format, source, nbest_path, allow_extra=allow_extra_refs)
    assert refs is not None  # required
    refs = normalizer.mapping(refs)
    contexts = load_contexts(context_path, list(source), nbest_path)
    initial = Weights.load(init_path) if init_path else None
    if initial is not None and not length and initial.length != 0:
        raise click.UsageError("--no-length with initial weights that have a length weight")
    # Tuning keeps a feature matrix per list, not the lists (TuningSet); the posterior scale's
    # search needs the lists themselves, so with --objective posterior they are kept too.
    kept: list[NBest] = []
    data: TuningSet | None = None
    order = ListOrder(rank, features, lm_specs, lm_oov)
    job = ScoringJob(tuple(lm_specs), lm_case, lm_oov, device) if lm_specs else None
    with (
        Scorer(job, progress_bars(), source.num_hyps(), echo_lm_report)
        if job is not None
        else contextlib.nullcontext() as scorer
    ):
        for chunk in source.chunks():
            chunk = order.apply(normalizer.nbest(chunk))
            if scorer is not None:
                chunk = scorer.score(chunk, contexts)
            if data is None:
                data = TuningSet(tuple(features or chunk.score_names()))
            data.add(chunk, refs, noise)
            if objective == "posterior":
                kept.append(chunk)
    assert data is not None  # a source has at least one list
    result = tune_set(
        data,
        TuneOptions(
            restarts=restarts,
            seed=seed,
            anchor=anchor,
            tune_length=length,
            bound=bound,
            selection=selection,
            method=method,
        ),
        initial=initial,
    )
    del data
    meta = {
        **result.weights.meta,
        "nbest": str(nbest_path),
        "ref": str(ref_path) if ref_path else f"{nbest_path} (embedded)",
        "normalize": normalizer.name,
        "lms": {s.name: f"{s.kind}:{s.path}" for s in lm_specs},
    }
    if extra_scores:
        meta["extra_scores"] = {d.name: str(d.folder) for d in extra_scores}
    if order.added and RANK_FEATURE in result.weights.features:
        meta["rank"] = RANK_DEFINITION  # rescore adds the same feature to the lists
    if max_nbest is not None:
        meta["max_nbest"] = max_nbest
    if not noise.is_empty:
        meta["noise_words"] = noise.source
    search = None
    if objective == "posterior":
        from rescorer.mbr import search_scale

        nbest = NBest([nb for chunk in kept for nb in chunk.values()])
        search = search_scale(nbest, refs, result.weights, posterior_scales, noise)
        meta["objective"] = "posterior"
        meta["posterior"] = {
            "scale": search.scale,
            "dev_errors": search.errors,
            "top_score_dev_errors": search.top_errors,
            "grid": [[scale, errors] for scale, errors in search.grid],
        }
    weights = Weights(
        result.weights.features,
        result.weights.length,
        meta,
        None if search is None else search.scale,
    )
    weights.save(out_path)
    tag = normalized_label(normalizer, noise)
    click.echo(  # the lists' own order, their first hypotheses
        f"initial %WER {100 * result.initial_errors / max(result.ref_words, 1):.2f} "
        f"[ {result.initial_errors} / {result.ref_words} ]{tag}"
    )
    click.echo(
        f"tuned   %WER {100 * result.wer:.2f} [ {result.errors} / {result.ref_words} ] "
        f"({len(result.start_errors)} starts, best errors per start {list(result.start_errors)}, "
        f"{result.seconds:.1f}s){tag}"
    )
    if search is not None:
        lo, hi = search.grid[0][0], search.grid[-1][0]
        click.echo(
            f"posterior %WER {100 * search.wer:.2f} [ {search.errors} / {search.ref_words} ] "
            f"at scale {search.scale:.6g} (fewest errors of {len(search.grid)} scales "
            f"{lo:.3g}..{hi:.3g}; top score: {search.top_errors} errors){tag}"
        )
    for name, w in weights.features.items():
        click.echo(f"  {name:>12s} {w:+.6g}")
    click.echo(f"  {'length':>12s} {weights.length:+.6g}")
    if search is not None:
        click.echo(f"  {'post. scale':>12s} {search.scale:.6g}")
    click.echo(f"wrote {out_path}")


# -- rescore ------------------------------------------------------------------------------------


@click.command()
@nbest_options
@extra_scores_option
@ref_options(required=False)
@lm_options
@context_options
@rank_option("when the weights name it and the lists lack it")
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
    type=OUT_DIR,
    required=True,
    help="Output folder: nbest.jsonl (reranked, all features), 1best.txt (Kaldi text), "
    "1best.trn (sclite trn, with the ids of a trn --ref), wer.txt.",
)
@click.option("--utt2spk", type=EXISTING_FILE, help="Speaker of each utterance.")
@click.option(
    "--objective",
    type=click.Choice(OBJECTIVES),
    default="top",
    show_default=True,
    help="top: the hypothesis with the highest combined score. posterior: the one with the "
    "fewest expected word errors against the others, weighted by the posteriors "
    "softmax(S * combined score) over the list (minimum Bayes risk, as SRILM's nbest-lattice).",
)
@click.option(
    "--posterior-scale",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="S of --objective posterior (default: the one `tune --objective posterior` wrote "
    "into the weights). It multiplies natural-log scores: S = 1/s for SRILM's "
    "-posterior-scale s.",
)
@normalize_option
@noise_words_option
@handle_errors
def rescore(
    nbest_path: Path,
    fmt: str,
    max_nbest: int | None,
    extra_scores: tuple[ScoreDir, ...],
    ref_path: Path | None,
    ref_format: str,
    allow_extra_refs: bool,
    lm_specs: tuple[LMSpec, ...],
    lm_case: str,
    lm_oov: bool,
    rank: bool | None,
    weights_path: Path,
    out_dir: Path,
    utt2spk: Path | None,
    objective: str,
    posterior_scale: float | None,
    normalizer: Normalizer,
    noise_path: Path | None,
    context_path: Path | None = None,
    device: str | None = None,
) -> None:
    """Rerank N-best lists with tuned weights.

    Writes the reranked lists and the new 1-best (in the normalised text with --normalize).

    With references (--ref, or those the N-best file holds; --ref wins), prints the WER of the
    first-pass 1-best and of the rescored 1-best, and tests the difference for significance.

    With --objective posterior the lists are sorted by expected word errors and hold the
    posterior and expected errors of every hypothesis (mbr_posterior, mbr_expected_errors);
    the WER of the top-score choice is printed beside the posterior one.

    The lists' order is the feature 'rank' when the weights name it, computed from the
    positions as read (--rank/--no-rank).

    \b
    Example:
      rescorer rescore --nbest DEV --ref DEV/references/ref_wer.trn \\
          --lm kenlm:4gram.bin --weights weights.json --out OUTDIR
      rescorer rescore --nbest DEV --weights weights.json --objective posterior --out OUTDIR
    """
    weights = Weights.load(weights_path)
    scale = None
    if objective == "posterior":
        scale = posterior_scale if posterior_scale is not None else weights.posterior_scale
        if scale is None:
            raise click.UsageError(
                f"--objective posterior needs --posterior-scale: {weights_path} holds no scale "
                "(tune --objective posterior writes one)"
            )
    elif posterior_scale is not None:
        raise click.UsageError("--posterior-scale goes with --objective posterior")
    tuned_with = weights.meta.get("normalize")
    if tuned_with is not None and tuned_with != normalizer.name:
        logger.warning(
            "%s was tuned with --normalize %s, this rescoring uses %s",
            weights_path,
            tuned_with,
            normalizer.name,
        )
    check_feature_names(extra_scores, lm_specs, lm_oov)
    noise = load_noise_words(noise_path)
    source = open_source(nbest_path, fmt, extra_scores, max_nbest)
    refs = resolve_refs(
        ref_path, ref_format, source, nbest_path, required=False, allow_extra=allow_extra_refs
    )
    refs = None if refs is None else normalizer.mapping(refs)
    if refs is None and not noise.is_empty and scale is None:
        raise click.UsageError(
            "--noise-words is only used with --ref (or embedded references) or --objective "
            "posterior"
        )
    # Read before anything is written, so a bad speaker map leaves earlier outputs in place.
    if utt2spk is not None and refs is None:
        raise click.UsageError(
            "--utt2spk is only used with --ref (or references in the N-best file)"
        )
    speakers = (
        load_speakers(utt2spk, list(source), nbest_path, ref_path, ref_format)
        if refs is not None
        else None
    )
    contexts = load_contexts(context_path, list(source), nbest_path)
    trn_ids = hypothesis_trn_ids(ref_path, ref_format, utt2spk, list(source))
    order = ListOrder(rank, weights.names, lm_specs, lm_oov)
    firsts: dict[str, tuple[str, ...]] = {}  # first-pass, rescored and top-score 1-best
    best: dict[str, tuple[str, ...]] = {}
    top: dict[str, tuple[str, ...]] = {}
    # One set: a killed run leaves the previous files; without --ref an earlier wer.txt, which
    # would no longer describe the output, is not part of the new set.
    with (
        atomic_dir(out_dir, owned=RESCORE_FILES.__contains__) as tmp,
        Scorer(ScoringJob(lm_specs, lm_case, lm_oov, device), progress_bars(), source.num_hyps(),
               echo_lm_report) if lm_specs else contextlib.nullcontext() as scorer,
        atomic_write(tmp / "nbest.jsonl") as lists_out,
        atomic_write(tmp / "1best.txt") as text_out,
        atomic_write(tmp / "1best.trn") as trn_out,
    ):  # fmt: skip
        for chunk in source.chunks():  # a chunk at a time: flat memory for a JSONL set
            chunk = order.apply(normalizer.nbest(chunk))
            if scorer is not None:
                chunk = scorer.score(chunk, contexts)
            missing = [n for n in weights.names if n not in chunk.score_names()]
            if missing:  # the weights and the lists disagree: a data error, not a usage one
                raise InputError(
                    f"the weights name feature(s) {missing} that neither the N-best lists, the "
                    f"--lm models nor --extra-scores provide (have: {list(chunk.score_names())})",
                    weights_path,
                )
            reranked = rerank(chunk, weights)
            firsts.update(one_best(chunk))
            if scale is not None:
                from rescorer.mbr import rerank_posterior

                top.update(one_best(reranked))
                reranked = rerank_posterior(chunk, weights, scale, noise)
            chosen = one_best(reranked)  # the reranked lists' first hypotheses
            best.update(chosen)
            write_jsonl_lines(NBest(list(reranked.values()), chunk_refs(refs, chunk)), lists_out)
            write_kaldi_lines(text_out, chosen)
            write_trn_lines(trn_out, chosen, ids=trn_ids)
        lines = []
        if refs is not None:
            scored = noise.mapping(refs)
            base = score_corpus(scored, noise.mapping(firsts), speakers)
            new = score_corpus(scored, noise.mapping(best), speakers)
            tag = normalized_label(normalizer, noise)
            lines = [f"{base.kaldi_line()} first pass{tag}"]
            if scale is not None:
                top_report = score_corpus(scored, noise.mapping(top), speakers)
                lines.append(f"{top_report.kaldi_line()} rescored (top score){tag}")
            label = "rescored" if scale is None else f"rescored (posterior, scale {scale:.6g})"
            lines += [f"{new.kaldi_line()} {label}{tag}", compare(base, new).summary()]
            with atomic_write(tmp / "wer.txt") as f:
                f.write(new.summary() + "\n" + "\n".join(lines) + "\n")
    click.echo(f"wrote {out_dir / 'nbest.jsonl'}, {out_dir / '1best.txt'} and 1best.trn")
    if lines:
        click.echo("\n".join(lines))


def hypothesis_trn_ids(
    ref_path: Path | None, ref_format: str, utt2spk: Path | None, ids: Sequence[str]
) -> dict[str, str]:
    """The ids of ``rescore``'s 1best.trn: a trn ``--ref``'s own ids (so sclite pairs the two
    files as written, ESPnet's ``(<speaker>-<uttid>)`` included); else, with ``--utt2spk``,
    ESPnet's ``<speaker>-<uttid>`` where every utterance id starts with its speaker; else the
    utterance ids."""
    from rescorer.refs import read_utt2spk, split_espnet_id, transcript_format, trn_ids

    if ref_path is not None and transcript_format(ref_path, ref_format) == "trn":
        written = trn_ids(ref_path)
        return {u: written.get(u, u) for u in ids}
    if utt2spk is not None:
        spk = read_utt2spk(utt2spk)
        styled = {u: f"{spk[u]}-{u}" for u in ids if u in spk}
        if len(styled) == len(ids) and all(
            split_espnet_id(t) == (spk[u], u) for u, t in styled.items()
        ):
            return styled
    return {u: u for u in ids}


# -- score --------------------------------------------------------------------------------------


class ShardType(click.ParamType):
    """``K/N``: shard K of N (1-based)."""

    name = "K/N"

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None):
        from rescorer.shards import Shard

        if isinstance(value, Shard):
            return value
        try:
            return Shard.parse(str(value))
        except ValueError as err:
            self.fail(str(err), param, ctx)


@click.command()
@nbest_options
@extra_scores_option
@lm_options
@context_options
@rank_option(RANK_WHEN_UNSCORED)
@ref_options(required=False)
@out_option("Where to write the lists with the new features (JSONL).", required=True)
@normalize_option
@click.option(
    "--shard",
    type=ShardType(),
    default=None,
    help="Score only shard K of N (1 <= K <= N; utterances split by a hash of their id, the "
    "same on every run) and write a manifest OUT.shard.json beside OUT; `rescorer merge` joins "
    "the N parts into the file one process would write.",
)
@click.option(
    "--ray",
    "ray_address",
    is_flag=False,
    flag_value="local",
    default=None,
    metavar="[ADDRESS]",
    help="Score the shards as Ray actors (pip install 'rescorer[ray]'): --ray alone starts a "
    "local Ray instance, --ray ADDRESS joins a cluster (auto, ray://HOST:10001). The output is "
    "the single-process one.",
)
@click.option(
    "--shards",
    type=click.IntRange(min=1),
    default=None,
    help="With --ray: how many shards (actors); default one per CPU of the Ray instance, or "
    "per GPU when the models run on CUDA.",
)
@handle_errors
def score(
    nbest_path: Path,
    fmt: str,
    max_nbest: int | None,
    extra_scores: tuple[ScoreDir, ...],
    lm_specs: tuple[LMSpec, ...],
    lm_case: str,
    lm_oov: bool,
    context_path: Path | None,
    device: str | None,
    rank: bool | None,
    ref_path: Path | None,
    ref_format: str,
    allow_extra_refs: bool,
    out_path: Path,
    normalizer: Normalizer,
    shard: Shard | None,
    ray_address: str | None,
    shards: int | None,
) -> None:
    """Add LM scores to N-best lists as features, in the lists' own order.

    Slow models are then run once: `tune` and `rescore` read the JSONL with the features in it
    and need no --lm (nor --ref: the references, --ref or the lists' own, are written into it).
    With --normalize the models score the normalised text, and the JSONL holds it. Lists
    without any score get their order as the feature 'rank' too (--rank/--no-rank).

    Large sets are scored in parts (docs/guide/scale.md): --shard K/N here and there and
    `rescorer merge`; --ray on a Ray cluster; or under torchrun, where each process scores its
    shard (on its own GPU when there are GPUs) and rank 0 writes OUT.

    \b
    Example:
      rescorer score --nbest DEV --lm 4gram=kenlm:4gram.bin --lm lstm=torch:exp/lstm/best \\
          --out dev.scored.jsonl
      rescorer score --nbest DEV --lm 4gram=kenlm:4gram.bin --shard 2/4 --out dev.2.jsonl
      rescorer score --nbest DEV --lm lstm=torch:exp/lstm/best --ray --out dev.scored.jsonl
    """
    from rescorer.scale_out import (
        score_on_ray,
        score_under_torchrun,
        under_torchrun,
    )

    if not lm_specs:
        raise click.UsageError("give at least one --lm to score with")
    torchrun = under_torchrun()
    chosen = [n for n, on in (("--shard", shard), ("--ray", ray_address), ("torchrun", torchrun))
              if on]  # fmt: skip
    if len(chosen) > 1:
        raise click.UsageError(f"{' and '.join(chosen)} do not go together: choose one")
    if shards is not None and ray_address is None:
        raise click.UsageError("--shards goes with --ray (--shard K/N scores one shard)")
    check_feature_names(extra_scores, lm_specs, lm_oov)
    source = open_source(nbest_path, fmt, extra_scores, max_nbest)
    refs = (
        load_refs(ref_path, ref_format, list(source), nbest_path, allow_extra_refs)
        if ref_path
        else source.references
    )
    refs = None if refs is None else normalizer.mapping(refs)
    contexts = load_contexts(context_path, list(source), nbest_path)
    job = ScoringJob(lm_specs, lm_case, lm_oov, device)
    order = ListOrder(rank, None, lm_specs, lm_oov)
    names: tuple[str, ...] = ()
    if ray_address is not None or torchrun:  # the whole set, cut into shards there
        nbest = order.apply(normalizer.nbest(source.load()))
        if ray_address is not None:
            address = None if ray_address == "local" else ray_address
            nbest, reports = score_on_ray(
                nbest, job, contexts, shards, address, progress=progress_bars()
            )
            for report in reports:
                click.echo(report.describe(), err=True)
        else:
            scored, _ = score_under_torchrun(
                nbest, job, contexts, progress=progress_bars(), on_report=echo_lm_report
            )
            if scored is None:  # not rank 0: rank 0 writes
                end_torchrun_process()
                return
            nbest = scored
        write_nbest(NBest(list(nbest.values()), refs), out_path, "jsonl")
        lists, names = len(nbest), nbest.score_names()
    else:  # in this process, a chunk at a time: flat memory for a JSONL set
        lists = 0
        total = (
            source.num_hyps()
            if shard is None
            else sum(n for u, n in zip(source.ids, source.sizes, strict=True) if shard.holds(u))
        )
        with (
            Scorer(job, progress_bars(), total, echo_lm_report) as scorer,
            atomic_write(out_path) as out,
        ):
            for chunk in source.chunks():
                if shard is not None:
                    chunk = chunk.subset([u for u in chunk if shard.holds(u)])
                    if not len(chunk):
                        continue
                scored = scorer.score(order.apply(normalizer.nbest(chunk)), contexts)
                write_jsonl_lines(NBest(list(scored.values()), chunk_refs(refs, scored)), out)
                lists += len(scored)
                names = scored.score_names()
    what = f"{lists} lists"
    if shard is not None:
        from rescorer.shards import write_manifest

        positions = [i for i, u in enumerate(source.ids) if shard.holds(u)]
        manifest = write_manifest(out_path, shard, source, positions)
        what = f"shard {shard} ({lists} of {len(source)} lists, manifest {manifest.name})"
        logger.info("shard %s: %d of %d lists", shard, lists, len(source))
    click.echo(
        f"wrote {what} with features {list(names)} to {out_path}" + normalized_label(normalizer)
    )
    if torchrun:
        end_torchrun_process()


def end_torchrun_process() -> None:
    """A torchrun scoring process has left its group (scale_out.score_under_torchrun): exit
    without the interpreter's teardown (rescorer.lm_models.distributed.end_process says why)."""
    from rescorer.lm_models.distributed import end_process

    end_process(True)


@click.command()
@click.argument("parts", nargs=-1, required=True, type=EXISTING_FILE)
@out_option("Where to write the merged lists (JSONL).", required=True)
@handle_errors
def merge(parts: tuple[Path, ...], out_path: Path) -> None:
    """Join the scored shards that `score --shard K/N` wrote into one JSONL.

    The parts must be all N shards of one N-best set, each once; their manifests (PART.shard.json)
    are checked, and the lists come out in the set's order: the file one `rescorer score`
    process would have written. Overlapping, missing or rewritten parts are refused.

    \b
    Example:
      rescorer merge dev.1.jsonl dev.2.jsonl dev.3.jsonl dev.4.jsonl --out dev.scored.jsonl
    """
    from rescorer.shards import merge_parts, read_part

    merged = merge_parts([read_part(p) for p in parts])
    write_nbest(merged, out_path, "jsonl")
    click.echo(
        f"merged {len(parts)} shards: {len(merged)} lists with features "
        f"{list(merged.score_names())} to {out_path}"
    )


# -- convert ------------------------------------------------------------------------------------


REF_TARGETS = {"text": "Kaldi text 'id words'", "trn": "sclite trn 'words (id)'"}
"""``convert --to`` targets that write the lists' references, not the lists."""
EMBEDS_REFS = ("json", "jsonl", "hyporadise")
"""N-best formats with a place for references."""


def parse_renames(pairs: tuple[str, ...]) -> dict[str, str]:
    """``--rename OLD=NEW`` values as a mapping; InputFailure (one line) for a malformed pair,
    an OLD given twice or two OLDs given one NEW."""
    renames: dict[str, str] = {}
    for pair in pairs:
        old, sep, new = (part.strip() for part in pair.partition("="))
        if not sep or not old or not new or "=" in new or any(c.isspace() for c in old + new):
            raise InputFailure(f"--rename: expected OLD=NEW (two score names), got {pair!r}")
        if old in renames:
            raise InputFailure(f"--rename: score {old!r} is renamed twice")
        if new in renames.values():
            raise InputFailure(f"--rename: two scores renamed to {new!r}")
        renames[old] = new
    return renames


@click.command()
@nbest_options
@extra_scores_option
@click.option(
    "--to",
    "to_fmt",
    type=click.Choice(sorted({*WRITERS, *REF_TARGETS})),
    required=True,
    help="N-best format to write; text or trn write the references the lists hold (or --ref) "
    "instead, as Kaldi text or sclite trn.",
)
@click.option("--out", "out_path", type=OUT_PATH, required=True)
@click.option(
    "--ref",
    "ref_path",
    type=EXISTING_FILE,
    help="References (trn or Kaldi text) to embed in the output (json, jsonl, hyporadise), "
    "in place of any the lists hold.",
)
@click.option(
    "--rename",
    "rename_pairs",
    multiple=True,
    metavar="OLD=NEW",
    help="Rename a score before writing (repeatable), e.g. --rename am_score=acoustic for "
    "--to srilm3 (which writes acoustic and lm) or --rename decoder=score for --to srilm1.",
)
@allow_extra_refs_option
@handle_errors
def convert(
    nbest_path: Path,
    fmt: str,
    max_nbest: int | None,
    extra_scores: tuple[ScoreDir, ...],
    to_fmt: str,
    out_path: Path,
    ref_path: Path | None,
    rename_pairs: tuple[str, ...],
    allow_extra_refs: bool,
) -> None:
    """Convert N-best lists between formats.

    Scores are converted to the target format's log base or cost convention. --to text and
    --to trn write the references a JSON, JSONL or HyPoradise file holds.

    \b
    Examples:
      rescorer convert --nbest DEV --to jsonl --out dev.jsonl
      rescorer convert --nbest DEV --ref DEV/references/ref_wer.trn --to hyporadise --out dev.json
      rescorer convert --nbest big.nbest --max-nbest 100 --to jsonl --out top100.jsonl
      rescorer convert --nbest dev.json --to text --out dev_refs.txt
      rescorer convert --nbest dev.json --rename am_score=acoustic --rename lm_score=lm \\
          --to srilm3 --out dev_srilm3
    """
    to_refs = to_fmt in REF_TARGETS
    file_out = to_fmt in FILE_FORMATS or to_refs
    (check_output_file if file_out else check_output_dir)(out_path)
    renames = parse_renames(rename_pairs)
    if to_refs and renames:
        raise click.UsageError(f"--rename: --to {to_fmt} writes references, no scores")
    source = open_source(nbest_path, fmt, extra_scores, max_nbest)
    refs = source.references
    if ref_path is not None:
        if to_fmt not in (*EMBEDS_REFS, *REF_TARGETS):
            raise click.UsageError(f"--ref: the {to_fmt} format has no place for references")
        refs = load_refs(ref_path, "auto", list(source), nbest_path, allow_extra_refs)
    if to_refs:
        _write_references(refs, list(source), nbest_path, out_path, to_fmt)
        return
    if to_fmt == "jsonl":  # written as read, a chunk at a time: flat memory from JSONL
        with atomic_write(out_path) as out:
            for chunk in source.chunks():
                nbest = NBest(list(chunk.values()), chunk_refs(refs, chunk))
                write_jsonl_lines(_renamed(nbest, renames, nbest_path), out)
    else:
        nbest = _renamed(NBest(list(source.load().values()), refs), renames, nbest_path)
        write_nbest(nbest, out_path, to_fmt)
    click.echo(f"wrote {len(source)} lists to {out_path} ({to_fmt})")
    if refs and to_fmt not in EMBEDS_REFS:
        logger.warning(
            "%s: the lists' references are not written (the %s format has no place for them); "
            "`rescorer convert --to text` writes them",
            nbest_path,
            to_fmt,
        )


def _renamed(nbest: NBest, renames: dict[str, str], nbest_path: Path) -> NBest:
    try:
        return nbest.rename_scores(renames)
    except ValueError as err:
        raise InputFailure(f"{nbest_path}: --rename: {err}") from None


def _write_references(
    refs: Mapping[str, tuple[str, ...]] | None,
    utts: list[str],
    nbest_path: Path,
    out_path: Path,
    to_fmt: str,
) -> None:
    """``convert --to text|trn``: the references of the lists, in list order."""
    if not refs:
        raise InputFailure(
            f"{nbest_path}: the lists hold no references to write (--to {to_fmt}): give --ref, "
            f"or convert a file that embeds them ({', '.join(EMBEDS_REFS)})"
        )
    chosen = {utt: refs[utt] for utt in utts if utt in refs}
    missing = len(utts) - len(chosen)
    if missing:
        logger.warning("%s: %d of %d lists have no reference", nbest_path, missing, len(utts))
    (write_kaldi_text if to_fmt == "text" else write_trn)(out_path, chosen)
    click.echo(f"wrote {len(chosen)} references to {out_path} ({REF_TARGETS[to_fmt]})")
