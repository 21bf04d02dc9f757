"""LSTM or small causal Transformer for the LibriSpeech LM: which is better per CPU-hour?

Issue 15 asks for the architecture to be chosen from measurements. The same training batches of
the recipe's novels, the same vocabulary (V = 50k) and the same exact class-factored output
layer (the 2,000 most frequent words each a class, the rest in 8 clusters) under:

- ``lstm``: the recipe's CPU LSTM (Unadapted, e=128, d=256, one layer;
  `conf/context_cpu/word.json`);
- ``transformer:L``: a pre-norm causal Transformer of L blocks, d=256, 4 heads, feed-forward
  1024, on the same tied e=128 embedding (`rescorer/lm_models/lstm/transformer.py`).

Measured in one run, one thread, as ratios:

  1. training tokens/s (forward, backward, Adam step), timed interleaved (A B C C B A ...; the
     median of the rounds), and the hours an epoch of the novels takes;
  2. the dev perplexity each reaches in the same CPU time of training, from the same batches
     (exact normalised probabilities);
  3. the time to score the 30-best lists of the first dev_other utterances through ``torch:``
     (``TorchLM``: the prefix tree; the LSTM's state or the Transformer's key/value cache).

Times are CPU seconds of this process on ``--threads`` threads (default 1); the scoring runs of
the architectures take turns in each round (medians). The text is the LibriSpeech recipe's
``exp/lm/books.txt``; a ``--smoke`` run uses Gutenberg sentences instead.

    .venv/bin/python bench/bench_arch.py [--seconds 300] [--archs lstm,transformer:2,transformer:4]
        [--smoke]
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
import benchlib  # noqa: E402, I001  (first: the load average at the start)
from bench_output import (  # noqa: E402
    BOOK_WORDS,
    BOOKS,
    BOS,
    Corpus,
    load_split,
    same_time_perplexity,
    throughput,
)

from rescorer.formats import read_nbest  # noqa: E402
from rescorer.lm_models.checkpoint import save_checkpoint  # noqa: E402
from rescorer.lm_models.lstm.model import ContextLSTM, LSTMConfig  # noqa: E402
from rescorer.lm_models.lstm.transformer import CausalTransformerLM, TransformerConfig  # noqa: E402
from rescorer.lm_models.word_classes import shortlist_classes  # noqa: E402
from rescorer.lms.torch import TorchLM  # noqa: E402

DEFAULT_OUT = REPO / "bench" / "results" / "arch.md"
SHORTLIST, CLUSTERS = 2000, 8  # the recipe's output layer (conf/context_cpu/word.json)
# Learning rates: the recipe's 2e-3 for the LSTM; 1e-3 for the Transformer, which has no warm-up
# in this loop (conf/context_cpu/transformer.json).
LR = {"lstm": 2e-3, "transformer": 1e-3}


def make_arch(corpus: Corpus, arch: str, seed: int, shortlist: int = SHORTLIST) -> torch.nn.Module:
    """``lstm`` or ``transformer:L`` over ``corpus``'s vocabulary, the same output layer."""
    counts = list(corpus.counts)
    counts[BOS] = 0  # never predicted: in the last cluster, not a class of its own
    classes = tuple(shortlist_classes(counts, shortlist, CLUSTERS))
    torch.manual_seed(seed)
    if arch == "lstm":
        return ContextLSTM(
            LSTMConfig(corpus.vocab_size, embed_dim=128, hidden_dim=256, word_classes=classes)
        )
    kind, _, layers = arch.partition(":")
    if kind != "transformer" or not layers.isdigit():
        raise SystemExit(f"--archs: expected lstm or transformer:LAYERS, got {arch!r}")
    cfg = TransformerConfig(
        corpus.vocab_size,
        embed_dim=128,
        hidden_dim=256,
        num_layers=int(layers),
        heads=4,
        ffn_dim=1024,
        max_positions=256,  # sentences of up to 60 words in training; longer hypotheses too
        word_classes=classes,
    )
    return CausalTransformerLM(cfg)


def scoring_seconds(
    corpus: Corpus, archs: list[str], sentences: list[list[str]], repeat: int, factory: Any
) -> dict[str, float]:
    """Median CPU seconds to score ``sentences`` with ``torch:`` per architecture, the
    architectures taking turns in each of ``repeat`` rounds (initial weights: the time does not
    depend on them)."""
    with tempfile.TemporaryDirectory() as tmp:
        lms = {}
        for arch in archs:
            ckpt = save_checkpoint(
                Path(tmp) / arch.replace(":", "_"), factory(corpus, arch, 0), corpus.tokens
            )
            lms[arch] = TorchLM(ckpt, device="cpu")  # case auto: books and lists upper case
            lms[arch].sentence_logprobs(sentences[:30])  # warm-up
        times: dict[str, list[float]] = {arch: [] for arch in archs}
        for _ in range(repeat):
            for arch, lm in lms.items():
                t0 = time.process_time()
                lm.sentence_logprobs(sentences)
                times[arch].append(time.process_time() - t0)
    return {arch: statistics.median(t) for arch, t in times.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--text", type=Path, default=BOOKS)
    ap.add_argument("--sentences", type=int, default=400_000, help="Sentences read from --text.")
    ap.add_argument("--size", type=int, default=50_000, help="Vocabulary size V.")
    ap.add_argument("--archs", default="lstm,transformer:2,transformer:4")
    ap.add_argument("--rounds", type=int, default=3, help="Interleaved timing rounds.")
    ap.add_argument("--seconds", type=float, default=300.0, help="Training time per model (2).")
    ap.add_argument("--utterances", type=int, default=100, help="dev_other lists scored (3).")
    ap.add_argument(
        "--sweep-lrs",
        default="",
        help="Also train each Transformer at these learning rates (same time; a table of its own).",
    )
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    benchlib.add_common(ap)
    args = ap.parse_args()
    benchlib.smoke(args, sentences=1000, size=2000, archs="lstm,transformer:1", rounds=1,
                   seconds=0.5, utterances=2)  # fmt: skip
    archs = args.archs.split(",")
    sentences, dev_rows, train_rows = load_split(
        args.text, args.sentences, args.threads, args.smoke
    )
    corpus = Corpus(sentences, args.size)
    # the recipe's shortlist, a smaller one for a smoke run's small vocabulary
    make = functools.partial(make_arch, shortlist=200 if args.smoke else SHORTLIST)
    params = {a: sum(p.numel() for p in make(corpus, a, 0).parameters()) for a in archs}
    lines = [
        *benchlib.header(
            "LSTM vs small causal Transformer: training cost and perplexity per CPU-second",
            threads=args.threads,
            ratios="x lstm; the same-CPU-time perplexities compare across machines of like "
            "speed only",
            absolute="tokens/s (per CPU-second), the epoch hours, the scoring seconds",
        ),
        f"- Text: {len(sentences):,} sentences of `{args.text.name}` (shuffled; 2,000 held out "
        f"for dev); V = {corpus.vocab_size:,}; output layer: class-factored, the {SHORTLIST:,} "
        f"most frequent words each a class and the rest in {CLUSTERS} clusters (exact)",
        "- `lstm`: Unadapted LSTM e=128, d=256, one layer (lr 2e-3); `transformer:L`: pre-norm "
        "causal Transformer, L blocks of d=256, 4 heads, feed-forward 1024, on the same tied "
        "e=128 embedding (lr 1e-3, Adam, no warm-up)",
        "",
        "| model | parameters | train tokens/s | x lstm | epoch of the novels (13.6 M words) "
        f"| dev ppl after {args.seconds:g} s | tokens in {args.seconds:g} s "
        f"| scoring {args.utterances} dev_other lists | x lstm |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    nbest = read_nbest(benchlib.nbest_dir("dev_other"), "espnet")
    hyps = [h.words for u in list(nbest)[: args.utterances] for h in nbest[u]]
    known = set(corpus.tokens)
    oov = sum(w not in known for h in hyps for w in h) / max(1, sum(len(h) for h in hyps))
    scoring = scoring_seconds(corpus, archs, hyps, args.rounds, make)
    rates = throughput(corpus, archs, train_rows[: 64 if args.smoke else 400], args.rounds, make)
    for arch in archs:
        lr = LR[arch.partition(":")[0]]
        ppl, seen = same_time_perplexity(corpus, arch, train_rows, dev_rows, args.seconds, make, lr)
        hours = BOOK_WORDS / rates[arch] / 3600
        lines.append(
            f"| {arch} | {params[arch] / 1e6:.1f} M | {rates[arch]:,.0f} | "
            f"{rates[arch] / rates[archs[0]]:.2f} | {hours:.2f} h | {ppl:.1f} | {seen:,} | "
            f"{scoring[arch]:.2f} s | {scoring[arch] / scoring[archs[0]]:.2f} |"
        )
        print(lines[-1], flush=True)
    sweep = [float(x) for x in args.sweep_lrs.split(",") if x]
    if sweep:
        lines += [
            "",
            f"Dev perplexity after {args.seconds:g} s by learning rate (Adam, no warm-up; the "
            "table above used the LR of each kind):",
            "",
            "| model | " + " | ".join(f"lr {lr:g}" for lr in sweep) + " |",
            "|---|" + "---|" * len(sweep),
        ]
        for arch in (a for a in archs if a != "lstm"):
            cells = [
                same_time_perplexity(corpus, arch, train_rows, dev_rows, args.seconds, make, lr)[0]
                for lr in sweep
            ]
            lines.append(f"| {arch} | " + " | ".join(f"{c:.1f}" for c in cells) + " |")
            print(lines[-1], flush=True)
    lines += [
        "",
        "Tokens/s: median of the interleaved rounds on the same 400 sentences. Same-time "
        "perplexity: each model trains from its seed-0 initialisation on the same batches (64 "
        "sentences of at most 40 words) for the same CPU time, then scores the dev sentences "
        "with its exact probabilities (`</s>` included, <unk> as a word). Scoring: the median of "
        f"the rounds for the {len(hyps):,} hypotheses of the first {args.utterances} dev_other "
        "30-best lists through `TorchLM` (one call; a prefix tree, each depth one batch; "
        f"{100 * oov:.1f} % of their words outside V). "
        "The recipe-scale runs "
        "(`docs/experiments/librispeech_arch_cpu.md`) train each for the LSTM twin's 30 minutes.",
        "",
    ]
    benchlib.write(args.out, lines)


if __name__ == "__main__":
    main()
