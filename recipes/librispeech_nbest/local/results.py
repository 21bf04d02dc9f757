"""Write the LibriSpeech rescoring results table (exp/RESULTS.md) from the recipe's outputs.

Uses the toolkit's public API only: the N-best reader, reference reader, WER scoring, oracle and
significance tests. Run by stage 7 of run.sh, which writes the table of the rows it ran under
exp/; `run.sh --publish` merges it into the committed RESULTS.md (recipes/common/publish.py).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rescorer.combine import Weights, best_index, one_best, total_scores
from rescorer.core.machine import describe_machine
from rescorer.core.output import atomic_write
from rescorer.formats import read_nbest
from rescorer.lm_models.lstm.summary import TrainingSummary
from rescorer.lms.cache import CacheSpec
from rescorer.lms.neural_cache import NeuralCacheSpec
from rescorer.refs import read_kaldi_text, read_references
from rescorer.significance import compare
from rescorer.wer import WerReport, align, oracle, score_corpus

SETS = ("dev_clean", "dev_other")
SYSTEMS = [
    ("1", "ESPnet 1-best (its own `score`: decoder, ctc, Transformer LM)", None),
    ("2", "first pass without ESPnet's LM: decoder + ctc", "2_first_pass"),
    ("3", "decoder + ctc + our 4-gram", "3_4gram"),
    ("3a", "  ablation: 4-gram log-prob only, no OOV count", "3a_4gram_logprob_only"),
    ("3b", "  3 + length", "3b_4gram_length"),
    ("4", "all: decoder + ctc + ESPnet LM + our 4-gram + length", "4_all"),
    ("4a", "  ablation: 4-gram log-prob only, no OOV count", "4a_all_logprob_only"),
    ("3L", "decoder + ctc + our word LSTM", "3L_lstm"),
    ("3M", "decoder + ctc + our 4-gram + our word LSTM", "3M_4gram_lstm"),
    ("4L", "all + our word LSTM", "4L_all_lstm"),
    ("3N", "decoder + ctc + our LSTM (no context)", "3N_lstm_nocontext"),
    (
        "3C0",
        "  3C's LM with its context withheld (none given)",
        "3C0_lstm_context_withheld",
    ),
    ("3C", "decoder + ctc + our LSTM (previous utterances)", "3C_lstm_previous"),
    ("4N", "all + our LSTM (no context)", "4N_all_nocontext"),
    (
        "4C0",
        "  4C's LM with its context withheld (none given)",
        "4C0_all_context_withheld",
    ),
    ("4C", "all + our LSTM (previous utterances)", "4C_all_previous"),
    (
        "4C2",
        "  4C, second pass: context from 4C's 1-best of the previous utterances (4C's weights)",
        "4C2_all_previous_second_pass",
    ),
    ("3G", "decoder + ctc + our 4-gram with a cache of the previous utterances", "3G_4gram_cache"),
    ("3K", "decoder + ctc + our LSTM with a cache of the previous utterances", "3K_lstm_cache"),
    ("4K", "all + our LSTM with a cache of the previous utterances", "4K_all_cache"),
    (
        "4K2",
        "  4K, second pass: caches from 4K's 1-best of the previous utterances (4K's weights)",
        "4K2_all_cache_second_pass",
    ),
    (
        "3CK",
        "decoder + ctc + our LSTM (previous utterances) with a cache of them",
        "3CK_lstm_previous_cache",
    ),
    ("4CK", "all + our LSTM (previous utterances) with a cache of them", "4CK_all_previous_cache"),
    ("4G", "all + our 4-gram with a cache of the previous utterances", "4G_all_4gram_cache"),
    (
        "4NG",
        "all + our LSTM (no context) + our 4-gram with a cache of the previous utterances",
        "4NG_all_nocontext_4gram_cache",
    ),
    (
        "4CG",
        "all + our LSTM (previous utterances) + our 4-gram with a cache of them",
        "4CG_all_previous_4gram_cache",
    ),
    (
        "3NN",
        "decoder + ctc + our LSTM (no context) with a neural cache of the previous utterances",
        "3NN_lstm_neural_cache",
    ),
    (
        "4NN",
        "all + our LSTM (no context) with a neural cache of the previous utterances",
        "4NN_all_neural_cache",
    ),
    (
        "4NN2",
        "  4NN, second pass: caches from 4NN's 1-best of the previous utterances (4NN's weights)",
        "4NN2_all_neural_cache_second_pass",
    ),
    ("3BO", "decoder + ctc + our backward LSTM (alone)", "3BO_backward_only"),
    ("3B", "decoder + ctc + our LSTM (no context) + our backward LSTM", "3B_lstm_backward"),
    ("4B", "all + our LSTM (no context) + our backward LSTM", "4B_all_backward"),
    (
        "3BN",
        "decoder + ctc + our LSTM with a neural cache of the previous utterances + our backward "
        "LSTM",
        "3BN_lstm_neural_cache_backward",
    ),
    (
        "4BN",
        "all + our LSTM with a neural cache of the previous utterances + our backward LSTM",
        "4BN_all_neural_cache_backward",
    ),
    ("3UN", "decoder + ctc + our CUE control (trained with no context)", "3UN_cue_nocontext"),
    (
        "3U0",
        "  3U's CUE model with its context withheld (none given)",
        "3U0_cue_context_withheld",
    ),
    ("3U", "decoder + ctc + our CUE (previous utterance)", "3U_cue_previous"),
    ("4UN", "all + our CUE control (trained with no context)", "4UN_all_cue_nocontext"),
    (
        "4U0",
        "  4U's CUE model with its context withheld (none given)",
        "4U0_all_cue_context_withheld",
    ),
    ("4U", "all + our CUE (previous utterance)", "4U_all_cue_previous"),
    (
        "4U2",
        "  4U, second pass: context from 4U's 1-best of the previous utterance (4U's weights)",
        "4U2_all_cue_second_pass",
    ),
    (
        "4UG",
        "all + our CUE (previous utterance) + our 4-gram with a cache of them",
        "4UG_all_cue_previous_4gram_cache",
    ),
]
# The rows of issue 16 (run.sh with CTX=1): in the table only with --context, since their
# folders outlive a later run without it (and its models may be others by then).
CONTEXT_ROWS = frozenset(
    {"3N", "3C0", "3C", "4N", "4C0", "4C", "4C2", "3G", "3K", "4K", "4K2", "3CK", "4CK"}
    | {"4G", "4NG", "4CG", "3NN", "4NN", "4NN2"}
)
# The CUE rows (run.sh with CUE=1), in the table only with --cue. Row 4G (the 4-gram's cache,
# no neural LM) belongs to both: either flag shows it.
CUE_ROWS = frozenset({"3UN", "3U0", "3U", "4UN", "4U0", "4U", "4U2", "4G", "4UG"})
# The backward LSTM's rows (run.sh with BWD=1), in the table only with --backward.
BACKWARD_ROWS = frozenset({"3BO", "3B", "4B", "3BN", "4BN"})


def row_shown(key: str, context: bool, cue: bool, backward: bool = False) -> bool:
    """Whether row ``key`` goes in a table written with (or without) --context, --cue and
    --backward."""
    if key in BACKWARD_ROWS:
        return backward
    if key not in CONTEXT_ROWS and key not in CUE_ROWS:
        return True
    return (context and key in CONTEXT_ROWS) or (cue and key in CUE_ROWS)


COMPARISONS = [
    ("2", "3"),
    ("2", "3a"),
    ("1", "4"),
    ("4a", "4"),
    ("3", "3L"),
    ("3", "3M"),
    ("4", "4L"),
    ("3N", "3C"),
    ("3C0", "3C"),
    ("4", "4N"),
    ("4N", "4C"),
    ("4C0", "4C"),
    ("4C", "4C2"),
    ("3", "3G"),
    ("3N", "3K"),
    ("4N", "4K"),
    ("4K", "4K2"),
    ("3C0", "3CK"),
    ("4C0", "4CK"),
    ("4K", "4CK"),
    ("4", "4G"),
    ("4N", "4NG"),
    ("4NG", "4CG"),
    ("4N", "4CG"),
    ("4G", "4CG"),
    ("3N", "3NN"),
    ("4N", "4NN"),
    ("4NN", "4NN2"),
    ("3N", "3BO"),
    ("3N", "3B"),
    ("3", "3B"),
    ("4N", "4B"),
    ("4", "4B"),
    ("3NN", "3BN"),
    ("3", "3BN"),
    ("4NN", "4BN"),
    ("4", "4BN"),
    ("3UN", "3U"),
    ("3U0", "3U"),
    ("4", "4UN"),
    ("4UN", "4U"),
    ("4U0", "4U"),
    ("4U", "4U2"),
    ("4G", "4UG"),
    ("4U", "4UG"),
    ("4UN", "4UG"),
]
PPL_VARIANTS = [  # (file stem under EXP/context, description)
    ("twin", "the twin LM (no context)"),
    ("none", "the context LM, no context given"),
    ("first_pass", "the context LM, previous utterances from the first-pass 1-best"),
    ("references", "the context LM, previous utterances from the references (upper bound)"),
    ("cache_first_pass", "the twin with a cache of the chapter's earlier first-pass 1-best"),
    ("cache_references", "the twin with a cache of the chapter's earlier references (upper bound)"),
    (
        "ncache_first_pass",
        "the twin with a neural cache of the chapter's earlier first-pass 1-best",
    ),
    (
        "ncache_references",
        "the twin with a neural cache of the chapter's earlier references (upper bound)",
    ),
    ("backward", "the backward LSTM (no context; each sentence read right to left)"),
]
CUE_PPL_VARIANTS = [
    ("cue_twin", "the CUE control (trained with no context)"),
    ("cue_none", "the CUE model, no context given"),
    ("cue_first_pass", "the CUE model, the previous utterance from the first-pass 1-best"),
    ("cue_references", "the CUE model, the previous utterance from the references (upper bound)"),
]


def device() -> str:
    return f"{describe_machine()} (KenLM and the tuner run on the CPU)"


def wall_time(exp: Path) -> str:
    """The stages' seconds from times.tsv, which every invocation appends to: a stage run
    again (its output deleted, or a new model's) counts once, with its latest time, in the
    order of the latest runs."""
    times = exp / "times.tsv"
    if not times.exists():
        return "unknown"
    latest: dict[str, int] = {}
    for line in times.read_text().splitlines():
        if line.strip():
            name, seconds = line.split("\t")
            latest.pop(name, None)
            latest[name] = int(seconds)
    parts = ", ".join(f"{name} {t}s" for name, t in latest.items())
    return f"{sum(latest.values())} s in all ({parts})"


def pct(report: WerReport) -> str:
    return f"{100 * report.total.wer:.2f}"


def tuning_words(exp: Path, systems: list[tuple[str, str, str | None]]) -> str:
    """How the systems' weights were tuned, from their weights files' metadata."""
    methods = {
        json.loads((exp / folder / "weights.json").read_text(encoding="utf-8"))["meta"].get(
            "method", "mert"
        )
        for _, _, folder in systems
        if folder is not None
    }
    if methods == {"risk"}:
        return (
            "by minimising the expected word errors of a softmax over each list, annealed toward "
            "the 1-best choice (`rescorer tune --method risk`)"
        )
    if methods == {"mert"}:
        return "by direct minimisation of its word errors (`rescorer tune --method mert`)"
    return f"with a mix of methods ({', '.join(sorted(methods))})"


def lstm_lines(exp: Path, lstm_dir: Path, every: int) -> list[str]:
    """Lines describing the neural LM, when the recipe used one: its shape, data, training."""
    if not (lstm_dir / "best" / "training.json").exists():
        return []
    run = TrainingSummary.of(lstm_dir)
    model = run.config["model"]
    steps = run.config["train"].get("max_steps_per_epoch")
    share = "all the sentences" if every == 1 else f"every {every}th sentence"
    features = "`lstm`" if run.units != "words" else "`lstm`, `lstm_oov`"
    return [
        f"- Our LSTM LM (rows 3L, 3M, 4L): {model['mode']}, e={model['embed_dim']}, "
        f"d={model['hidden_dim']}, {model['num_layers']} layer(s), {run.vocab_size:,} "
        f"{run.units}, {run.output}; {run.parameters / 1e6:.1f} M parameters. Trained on {share} "
        f"of the same books"
        + (f" in epochs of at most {steps} steps" if steps else "")
        + f", {run.training_words()}; best dev perplexity "
        f"{run.dev_ppl:.1f} (epoch {run.best_epoch}; {held_out(run.config['data'])}). "
        f"Its features: {features}.",
        *sharing_lines(exp),
    ]


def held_out(data: dict) -> str:
    """What the LM's dev perplexity is over: held-out books (``plain_documents: block``, the
    harder measure) or held-out sentences of the training books."""
    share = f"{data['split'][1]:.0%}"
    if data.get("plain_documents") == "block":
        return f"{share} of the books held out"
    return f"{share} of the book sentences held out"


def context_lines(exp: Path, ctx_model: Path, ctx_base: Path) -> list[str]:
    """The context LM and its twin (rows 3N-4C2) and the dev_other reference perplexities."""
    if not (ctx_model / "training.json").exists() or not (exp / "4C_all_previous").is_dir():
        return []
    lines = []
    for label, folder in (
        ("context LM (rows 3C, 4C, 4C2; with its context withheld, 3C0, 4C0)", ctx_model),
        ("no-context twin (rows 3N, 4N; the base of 3K, 4K, 4K2)", ctx_base),
    ):
        run = TrainingSummary.of(folder.parent)
        model = run.config["model"]
        prev = run.config["data"].get("previous") or {}
        history = run.config["data"].get("history") or 0
        if prev:
            ctx = (
                f"context: the {prev['sentences']} previous sentences of the book as text "
                f"(`{prev['encoder']}`, noise {json.dumps(prev.get('noise'))}), "
                f"{model['mode']}, k={model.get('context_dim')}"
            )
        elif history:
            ctx = (
                f"context: the previous utterances read by the LSTM itself, its state carried "
                f"into the sentence (trained on runs of {history + 1} consecutive book "
                f"sentences, every word a target: `data.history` {history})"
            )
        else:
            ctx = "no context"
        lines.append(
            f"- Our {label}: e={model['embed_dim']}, d={model['hidden_dim']}, "
            f"{model['num_layers']} layer(s), {run.vocab_size:,} {run.units}, {run.output}; "
            f"{run.parameters / 1e6:.1f} M parameters; {ctx}. {run.training_words()}; best dev "
            f"perplexity {run.dev_ppl:.1f} (epoch {run.best_epoch}; held-out books)."
        )
    cache_file = exp / "context" / "cache_nb.json"
    if cache_file.exists():
        cs = CacheSpec.load(cache_file)
        lines.append(
            f"- Cache rows (3G, 3K, 4K, 4K2): the model (the 4-gram in 3G, the twin in 3K-4K2) "
            f"interpolated word by word with a unigram cache, p = (1 - l) p_model + l c(w) / n, "
            f"l = {cs.lam:g}, where c counts the words of at least {cs.min_chars} letters in the "
            f"first-pass 1-best of the earlier utterances of the same chapter (`rescorer context "
            f"build --previous 100`; `cache:` models, rescorer/lms/cache.py); a chapter's first "
            f"utterance is scored by the model alone."
        )
    if (exp / "context" / "cache_ctx.json").exists():
        lines.append(
            "- Both contexts (3CK, 4CK): the context LM itself interpolated with the same cache "
            "(`ctxk`, beside its own `ctx`), each reading its own span of the earlier 1-best: "
            "the context LM its usual previous utterances, the cache the chapter so far "
            "(`context build --cache`)."
        )
    ncache_file = exp / "context" / "ncache_nb.json"
    if ncache_file.exists():
        ns = NeuralCacheSpec.load(ncache_file)
        lines.append(
            "- Neural cache rows (3NN, 4NN, 4NN2): the twin with the continuous cache of "
            "Grave et al. (2017) over the chapter's earlier first-pass 1-best (up to "
            f"{ns.max_words:,} words; `ncache:` models, rescorer/lms/neural_cache.py): "
            "p = (1 - l) p_LSTM(w | h_t) + l sum_(i: w_i = w) softmax_i(theta h_t . h_(i-1)), "
            "each earlier word with the LSTM state that predicted it, "
            f"theta = {ns.theta:g}, l = {ns.lam:g} (the pair that gave the dev_clean references "
            "the lowest perplexity); in place of the twin's own score."
        )
    return lines + ppl_table(exp, PPL_VARIANTS)


def backward_lines(exp: Path, bwd_dir: Path) -> list[str]:
    """The backward LSTM of rows 3BO-4BN, when the recipe used one."""
    if not (bwd_dir / "best" / "training.json").exists() or not (exp / "3B_lstm_backward").is_dir():
        return []
    run = TrainingSummary.of(bwd_dir)
    model = run.config["model"]
    return [
        f"- Our backward LSTM (rows 3BO, 3B, 4B, 3BN, 4BN; `reverse:`, rescorer/lms/reverse.py): "
        f"e={model['embed_dim']}, d={model['hidden_dim']}, {model['num_layers']} layer(s), "
        f"{run.vocab_size:,} {run.units}, {run.output}; {run.parameters / 1e6:.1f} M parameters; "
        f"trained on the same books with each line's words reversed and scoring each hypothesis "
        f"right to left, log P(w_1..w_n) = sum_i log p(w_i | w_(i+1)..w_n) + log p(<s> | "
        f"w_1..w_n). {run.training_words()}; best dev perplexity {run.dev_ppl:.1f} (epoch "
        f"{run.best_epoch}; {held_out(run.config['data'])}). Its feature `bwd` sits beside the "
        f"twin's `nb` (or the neural cache's `nbn`); row 3BO takes it alone, in the twin's place."
    ]


def ppl_table(exp: Path, variants: list[tuple[str, str]]) -> list[str]:
    """The perplexities of the dev_other references that ``rescorer ppl`` wrote to
    EXP/context/ppl_dev_other.STEM.txt, one row per variant found."""
    ppl = []
    for stem, what in variants:
        f = exp / "context" / f"ppl_dev_other.{stem}.txt"
        if not f.exists():
            continue
        found = dict(
            line.split(" ", 1)
            if line.startswith("ppl ") and "excluding" not in line
            else ("excl", line.split()[3])
            for line in f.read_text(encoding="utf-8").splitlines()
            if line.startswith("ppl ")
        )
        excl = found.get("excl", "—")
        ppl.append(f"| {what} | {found.get('ppl', '?').strip()} | {excl} |")
    if not ppl:
        return []
    return [
        "",
        "Perplexity of the dev_other references (2,864 utterances, `rescorer ppl --context`):",
        "",
        "| model and context | ppl | ppl excluding OOVs |",
        "|---|---|---|",
        *ppl,
        "",
    ]


def cue_lines(exp: Path, cue_model: Path, cue_base: Path) -> list[str]:
    """The CUE model and its control (rows 3UN-4U2), their training and the dev_other
    reference perplexities."""
    if not (cue_model / "config.json").exists() or not (exp / "4U_all_cue_previous").is_dir():
        return []
    stats_file = cue_model.parent.parent.parent / "data" / "stats.json"
    stats = json.loads(stats_file.read_text()) if stats_file.exists() else {}
    lines = []
    for label, folder in (
        ("CUE model (rows 3U, 4U, 4U2; with its context withheld, 3U0, 4U0)", cue_model),
        ("CUE control (rows 3UN, 4UN)", cue_base),
    ):
        config = json.loads((folder / "config.json").read_text())["config"]
        result_file = folder.parent / "result.json"
        result = json.loads(result_file.read_text()) if result_file.exists() else {}
        fields = [name for _, name in config.get("context_fields", [])]
        ctx = (
            f"context: the {', '.join(fields)} as a `{config.get('embedder')}` vector"
            if fields
            else "trained with the empty context"
        )
        sentence = config["sentence"]
        units = "subword units" if (folder / "tokenizer.model").exists() else "words"
        line = (
            f"- Our {label}: a {config['dim']}-dim decoder of {config['decoder_layers']} "
            f"layer(s) on a frozen {sentence['layers']}x{sentence['dim']} {sentence['kind']} "
            f"sentence encoder, {config['vocab_size']:,} {units}; {ctx}."
        )
        sample = stats.get("train")
        if sample and result:  # trained by the recipe (stage 3), not given
            line += (
                f" Trained on {sample['sentences']:,} sentences of the normalised books "
                f"({sample['words']:,} words), {len(result['epochs'])} epochs, the best dev "
                f"epoch {result['best_epoch']} kept ({result['seconds'] / 60:.0f} min); test "
                f"perplexity per word on held-out book blocks {result['test_ppl']:.1f}."
            )
        lines.append(line)
    cache_file = exp / "context" / "cache_4gram.json"
    if (exp / "4UG_all_cue_previous_4gram_cache").is_dir() and cache_file.exists():
        cs = CacheSpec.load(cache_file)
        lines.append(
            f"- Rows 4G, 4UG: the 4-gram beside its cached form (`4gk`, as in row 3G), "
            f"interpolated word by word with a unigram cache of the words of at least "
            f"{cs.min_chars} letters in the chapter's earlier first-pass 1-best, l = {cs.lam:g}."
        )
    return lines + ppl_table(exp, CUE_PPL_VARIANTS)


def reach_of_context(
    refs: dict[str, tuple[str, ...]],
    hyps: dict[str, tuple[str, ...]],
    nbest: dict[str, list[tuple[str, ...]]],
    min_chars: int,
) -> dict[str, int]:
    """How many of a system's errors a context of the earlier utterances could reach.

    For each reference word the system got wrong (substituted or deleted), in chapter order:
    is it in the chapter's earlier first-pass 1-best, in its earlier references, and in the
    utterance's own N-best list (where reranking can find it)? Counted for every word and for
    the words of at least ``min_chars`` letters (names and content words).
    """
    counts = dict.fromkeys(
        ("errors", "in_first_pass", "in_references", "in_nbest_and_first_pass"), 0
    )
    long_counts = {f"long_{k}": 0 for k in counts}
    chapters: dict[str, list[str]] = {}
    for utt in sorted(refs):
        chapters.setdefault(utt.rsplit("-", 1)[0], []).append(utt)
    for utts in chapters.values():
        seen_hyp: set[str] = set()
        seen_ref: set[str] = set()
        for utt in utts:
            in_list = {w for h in nbest[utt] for w in h}
            for code, ref, _ in align(refs[utt], hyps[utt]).ops:
                if code in ("C", "I") or ref is None:
                    continue
                hit = {
                    "errors": True,
                    "in_first_pass": ref in seen_hyp,
                    "in_references": ref in seen_ref,
                    "in_nbest_and_first_pass": ref in seen_hyp and ref in in_list,
                }
                for k, v in hit.items():
                    counts[k] += v
                    if len(ref) >= min_chars:
                        long_counts[f"long_{k}"] += v
            seen_hyp.update(nbest[utt][0])
            seen_ref.update(refs[utt])
    return {**counts, **long_counts}


def reach_lines(r: dict[str, int], row: str, min_chars: int) -> list[str]:
    """The reach of context (:func:`reach_of_context`) as README lines."""
    return [
        f"- What context can reach (row {row}'s dev_other errors; substituted or deleted "
        f"reference words, {r['errors']:,}): {r['in_first_pass']:,} are words of the chapter's "
        f"earlier first-pass 1-best ({r['in_references']:,} of its earlier references), "
        f"{r['in_nbest_and_first_pass']:,} of those also in the utterance's 30-best. Of the "
        f"{r['long_errors']:,} words of at least {min_chars} letters, {r['long_in_first_pass']:,} "
        f"are in the earlier 1-best ({r['long_in_references']:,} in the earlier references) and "
        f"{r['long_in_nbest_and_first_pass']:,} also in the 30-best: the most a cache of the "
        f"earlier utterances can fix there.",
    ]


@dataclass(frozen=True)
class ReferencePerplexity:
    """Per-word perplexities of the references that the N-best lists contain, one per LM score
    column, all over the same utterances (:func:`reference_perplexity`)."""

    # Utterances whose reference is one of its hypotheses and unknown to no model (counted),
    # and those left out because some model scores an unknown word of the reference.
    utterances: int
    with_oov: int
    # Tokens: the reference words plus one end of sentence each.
    tokens: int
    # Score column -> exp(-sum of its log-probabilities / tokens).
    ppl: dict[str, float]


def reference_perplexity(
    scored: Path, refs: dict[str, tuple[str, ...]], columns: Sequence[str]
) -> ReferencePerplexity:
    """What each LM score column of ``scored`` (natural-log sentence probabilities, such as
    ESPnet's ``lm``, of which only the scores exist, and ours) makes of the references, on equal
    terms: the utterances whose reference is among the hypotheses, per word with the end of
    sentence counted, leaving out a reference with a word some model does not know (its
    ``COLUMN_oov`` > 0: ``<unk>`` would flatter it)."""
    nbest = read_nbest(scored, "jsonl")
    totals = dict.fromkeys(columns, 0.0)
    n = with_oov = tokens = 0
    for utt, nb in nbest.items():
        ref = tuple(refs[utt])
        hyp = next((h for h in nb if tuple(h.words) == ref), None)
        if hyp is None:
            continue
        missing = [c for c in columns if c not in hyp.scores]
        if missing:
            raise ValueError(f"{scored}: utterance {utt} has no score {missing[0]!r}")
        if any(hyp.scores.get(f"{c}_oov", 0.0) > 0 for c in columns):
            with_oov += 1
            continue
        n += 1
        tokens += len(ref) + 1
        for c in columns:
            totals[c] += hyp.scores[c]
    ppl = {c: math.exp(-t / tokens) if tokens else math.nan for c, t in totals.items()}
    return ReferencePerplexity(n, with_oov, tokens, ppl)


REFERENCE_PPL_LABELS = {
    "lm": "ESPnet's Transformer LM (`lm`, trained on the 800 M words of the LibriSpeech LM corpus)",
    "lstm": "our word LSTM (`lstm`)",
    "nb": "our LSTM (no context, `nb`)",
    "4gram": "our 4-gram",
}


def reference_ppl_lines(r: ReferencePerplexity, set_name: str) -> list[str]:
    """:func:`reference_perplexity` as a line of RESULTS.md."""
    parts = ", ".join(f"{REFERENCE_PPL_LABELS.get(c, c)} {p:.1f}" for c, p in r.ppl.items())
    return [
        f"- The same LMs on equal terms: per-word perplexity of the {set_name} references found "
        f"in the 30-best ({r.utterances:,} utterances, {r.tokens:,} tokens with one `</s>` each; "
        f"{r.with_oov} left out for a word some model does not know), from the lists' own "
        f"scores: {parts}."
    ]


def margin_of_context(
    scored: Path, refs: dict[str, tuple[str, ...]], weights: Weights, with_ctx: str, without: str
) -> dict[str, float]:
    """Why a context that lowers perplexity may not lower WER: where a row without the context
    (``weights``, whose LM feature is ``without``) picks a wrong hypothesis and the reference is
    in the list, how far the context (feature ``with_ctx``: the same LM given it) moves the LM's
    log-probability of the reference relative to that choice, against the combined-score margin
    by which the wrong choice wins. The context alone would flip the choice where its shift,
    times the LM's weight, exceeds that margin."""
    nbest = read_nbest(scored, "jsonl")
    totals = total_scores(nbest, weights)
    w = weights.features[without]
    shifts, flips, margins = [], 0, []
    for utt, nb in nbest.items():
        texts = [h.words for h in nb]
        ref = tuple(refs[utt])
        if ref not in texts:
            continue
        best = best_index(totals[utt])
        r = texts.index(ref)
        if texts[best] == ref:
            continue
        h_best, h_ref = nb.hyps[best].scores, nb.hyps[r].scores
        shift = (h_ref[with_ctx] - h_best[with_ctx]) - (h_ref[without] - h_best[without])
        margin = float(totals[utt][best] - totals[utt][r])
        shifts.append(shift)
        margins.append(margin)
        flips += w * shift > margin
    arr = np.array(shifts)
    return {
        "cases": len(shifts),
        "toward": int((arr > 0).sum()),
        "mean": float(arr.mean()) if len(arr) else 0.0,
        "median_abs": float(np.median(np.abs(arr))) if len(arr) else 0.0,
        "median_margin": float(np.median(margins)) if margins else 0.0,
        "weight": w,
        "flips": flips,
    }


def margin_lines(m: dict[str, float], row: str, label: str = "the context LM") -> list[str]:
    """The context's shift of the reference's margin (:func:`margin_of_context`) as lines."""
    return [
        f"- Why the perplexity gain barely moves WER (row {row}, {label} without its "
        f"context, on dev_other): in the {m['cases']:,} utterances where it picks a wrong "
        f"hypothesis and the reference is in the 30-best, giving the LM its context moves its "
        f"log-probability of the reference relative to that choice toward the reference in "
        f"{m['toward']:,} ({m['toward'] / max(m['cases'], 1):.0%}; mean shift "
        f"{m['mean']:+.2f} nats, median size {m['median_abs']:.2f}), while the wrong choice "
        f"wins by a median {m['median_margin']:.2f} in the combined score, where the LM weighs "
        f"{m['weight']:.2f}: the shift alone would flip {m['flips']:,} of them. "
        + (
            "The context helps the LM predict the reference's words in general (perplexity), "
            "not the words where the hypotheses differ."
            if m["toward"] >= m["cases"] / 2
            else "It moves the wrong choice up about as often as the reference: the words where "
            "the hypotheses differ are seldom words its context makes likelier."
        ),
    ]


def sharing_lines(exp: Path) -> list[str]:
    """The prefix-sharing counts `rescorer score` logged for the LSTM (stage 4)."""
    lines = []
    for log in sorted((exp / "scored_lstm").glob("*.log")):
        for line in log.read_text(encoding="utf-8").splitlines():
            if line.startswith("lstm: ") and "LSTM steps computed" in line:
                lines.append(f"  - {log.stem}: {line.removeprefix('lstm: ')}")
    if lines:
        lines.insert(0, "- Scoring the N-best lists with the LSTM through a prefix tree:")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--nbest", type=Path, required=True)
    ap.add_argument("--exp", type=Path, required=True)
    ap.add_argument("--lm", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--lstm-dir", type=Path, default=None, help="default: EXP/lstm")
    ap.add_argument("--lstm-every", type=int, default=5)
    ap.add_argument(
        "--ctx-model", type=Path, default=None, help="default: EXP/lease_pair/previous/best"
    )
    ap.add_argument("--ctx-base", type=Path, default=None, help="default: EXP/lease_pair/word/best")
    ap.add_argument(
        "--cue-model", type=Path, default=None, help="default: EXP/cue/runs/t3_prev/model"
    )
    ap.add_argument(
        "--cue-base", type=Path, default=None, help="default: EXP/cue/runs/t3_none/model"
    )
    ap.add_argument(
        "--cue", action="store_true", help="the rows of the CUE model and its control (CUE=1)"
    )
    ap.add_argument("--backward", action="store_true", help="the rows of the backward LSTM (BWD=1)")
    ap.add_argument("--bwd-dir", type=Path, default=None, help="default: EXP/bwd/backward")
    ap.add_argument("--command", required=True)
    ap.add_argument("--settings", default="")
    ap.add_argument("--title", default="LibriSpeech N-best rescoring: results")
    ap.add_argument(
        "--context",
        action="store_true",
        help="the rows of the previous-utterance context and the cache (run.sh CTX=1)",
    )
    args = ap.parse_args()

    systems = [
        x
        for x in SYSTEMS
        if (x[2] is None or (args.exp / x[2] / "dev_other").is_dir())
        and row_shown(x[0], args.context, args.cue, args.backward)
    ]
    keys = {x[0] for x in systems}
    comparisons = [(a, b) for a, b in COMPARISONS if a in keys and b in keys]
    reports: dict[tuple[str, str], WerReport] = {}
    oracles: dict[str, WerReport] = {}
    sizes: dict[str, tuple[int, int]] = {}
    reach_text: list[str] = []
    for s in SETS:
        nbest = read_nbest(args.nbest / s, "espnet")
        refs = read_references(args.nbest / s / "references" / "ref_wer.trn")
        sizes[s] = (len(nbest), max(len(nb) for nb in nbest.values()))
        reports[("1", s)] = score_corpus(refs, one_best(nbest))
        oracles[s] = oracle(nbest, refs).report
        for key, _, folder in systems[1:]:
            assert folder is not None
            reports[(key, s)] = score_corpus(
                refs, read_kaldi_text(args.exp / folder / s / "1best.txt")
            )
        cache_file = args.exp / "context" / "cache_nb.json"
        if s == "dev_other" and args.context and cache_file.exists():
            min_chars = CacheSpec.load(cache_file).min_chars
            reach = reach_of_context(
                {u: tuple(w) for u, w in refs.items()},
                {
                    u: tuple(w)
                    for u, w in read_kaldi_text(args.exp / "4_all" / s / "1best.txt").items()
                },
                {u: [tuple(h.words) for h in nb] for u, nb in nbest.items()},
                min_chars,
            )
            reach_text = reach_lines(reach, "4", min_chars)
        # ESPnet's LM, of which only its scores exist, beside ours on the references
        for scored_dir, ours in (("scored_lstm", "lstm"), ("scored_ctx", "nb")):
            scored = args.exp / scored_dir / f"{s}.jsonl"
            if s == "dev_other" and scored.exists():
                reach_text += reference_ppl_lines(
                    reference_perplexity(
                        scored, {u: tuple(w) for u, w in refs.items()}, ("lm", ours, "4gram")
                    ),
                    s,
                )
                break
        # the context's shift of the margin: the LSTM's (CTX=1) and the CUE model's (CUE=1)
        for wanted, row, folder, scored_dir, with_ctx, without, label in (
            (args.context, "3C0", "3C0_lstm_context_withheld", "scored_ctx", "ctx", "ctx0",
             "the context LM"),
            (args.cue, "3U0", "3U0_cue_context_withheld", "scored_cue", "cu", "cu0",
             "the CUE model"),
            (args.context, "3N", "3N_lstm_nocontext", "scored_ncache", "nbn", "nb",
             "the twin, whose context here is its neural cache,"),
        ):  # fmt: skip
            withheld = args.exp / folder / "weights.json"
            scored = args.exp / scored_dir / f"{s}.jsonl"
            if s == "dev_other" and wanted and withheld.exists() and scored.exists():
                margin = margin_of_context(
                    scored, {u: tuple(w) for u, w in refs.items()}, Weights.load(withheld),
                    with_ctx, without,
                )  # fmt: skip
                reach_text += margin_lines(margin, row, label)

    books = args.exp / "lm" / "books.txt"
    n_sent = n_words = 0
    with open(books, encoding="utf-8") as f:
        for line in f:
            n_sent += 1
            n_words += len(line.split())

    lines = [
        f"# {args.title}",
        "",
        f"- Command: `{args.command}` (settings: {args.settings})",
        f"- Date: {dt.datetime.now(dt.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}",
        f"- Device: {device()}",
        f"- Wall time of the stages run: {wall_time(args.exp)}",
        f"- N-best: ESPnet conformer/HuBERT 30-best lists; dev_clean {sizes['dev_clean'][0]} "
        f"utterances, dev_other {sizes['dev_other'][0]} utterances.",
        f"- Our n-gram: `{args.lm.name}`, KenLM modified Kneser-Ney, trained on the 96 novels "
        f"of `corpora/gutenberg` normalised to LibriSpeech style ({n_sent:,} sentences, "
        f"{n_words:,} words); binary size {args.lm.stat().st_size / 2**20:.0f} MiB.",
        f"- Weights tuned on dev_clean {tuning_words(args.exp, systems)}, applied unchanged to "
        "dev_other (`docs/experiments/librispeech_tuning.md` compares the tuning methods). "
        "Row 1 is the list order ESPnet produced.",
        *lstm_lines(args.exp, args.lstm_dir or args.exp / "lstm", args.lstm_every),
        *(
            context_lines(
                args.exp,
                args.ctx_model or args.exp / "lease_pair" / "previous" / "best",
                args.ctx_base or args.exp / "lease_pair" / "word" / "best",
            )
            if args.context
            else []
        ),
        *(
            cue_lines(
                args.exp,
                args.cue_model or args.exp / "cue" / "runs" / "t3_prev" / "model",
                args.cue_base or args.exp / "cue" / "runs" / "t3_none" / "model",
            )
            if args.cue
            else []
        ),
        *(
            backward_lines(args.exp, args.bwd_dir or args.exp / "bwd" / "backward")
            if args.backward
            else []
        ),
        *reach_text,
        '- "Our 4-gram" is two features, as `--lm` adds them: its natural-log sentence '
        "probability (`4gram`) and the number of words it does not know (`4gram_oov`); the "
        "ablation rows drop the OOV count.",
        "",
        "| # | system | dev_clean WER % (tuning set) | dev_other WER % | dev_other errors |",
        "|---|---|---|---|---|",
    ]
    for key, label, _ in systems:
        rc, ro = reports[(key, "dev_clean")], reports[(key, "dev_other")]
        t = ro.total
        lines.append(
            f"| {key} | {label} | {pct(rc)} | {pct(ro)} | "
            f"{t.errors} / {t.ref_words} ({t.sub} sub, {t.dele} del, {t.ins} ins) |"
        )
    t = oracles["dev_other"].total
    lines.append(
        f"| 5 | oracle over the 30-best | {pct(oracles['dev_clean'])} | "
        f"{pct(oracles['dev_other'])} | {t.errors} / {t.ref_words} ({t.sub} sub, {t.dele} del, "
        f"{t.ins} ins) |"
    )
    lines += ["", "## Significance on dev_other (utterances as the paired unit)", ""]
    for a, b in comparisons:
        cmp = compare(reports[(a, "dev_other")], reports[(b, "dev_other")], names=(a, b))
        lines += [f"### row {b} vs row {a}", "", "```", cmp.summary(), "```", ""]
    lines += ["## Tuned weights (anchor: decoder = 1)", ""]
    lines += ["| # | weights | dev_clean errors before -> after tuning |", "|---|---|---|"]
    for key, _, folder in systems[1:]:
        assert folder is not None
        w = Weights.load(args.exp / folder / "weights.json")
        ws = ", ".join(f"{n} {v:+.4g}" for n, v in w.features.items())
        if w.length:
            ws += f", length {w.length:+.4g}"
        lines.append(
            f"| {key} | {ws} | {w.meta.get('initial_errors')} -> {w.meta.get('dev_errors')} |"
        )
    lines.append("")
    text = "\n".join(lines)
    with atomic_write(args.out) as f:
        f.write(text)
    # The table itself on stdout for the person running the recipe.
    start = next(i for i, line in enumerate(lines) if line.startswith("| # | system"))
    print("\n".join(lines[start : start + len(systems) + 3]))
    for key in ("1", "4"):
        print(f"{reports[(key, 'dev_other')].kaldi_line()} dev_other row {key}")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
