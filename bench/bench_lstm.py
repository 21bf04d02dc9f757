"""Context-aware LSTM inference speed: locked vs dynamic FactorCell vs Unadapted, and N-best
scoring with prefix sharing and batching vs one hypothesis at a time.

All figures are measured in one run on the same machine, the systems compared taking turns in
each round (A B C A B C ...), torch pinned to ``--threads`` (default 1), medians (and minima) of
the rounds; the ratios are the figures:
  1. tokens/s of a forward pass (no gradient) of the same-size Unadapted model, the dynamic
     FactorCell (a different context per row: W' per row, a batched matmul per step) and the
     FactorCell locked to one context (W' folded in: a plain LSTM). The paper's claim is that the
     locked FactorCell costs what the Unadapted model costs.
  2. scoring the N-best lists of dev_other utterances through ``TorchLM`` (prefix tree, all
     hypotheses batched) vs one hypothesis at a time through ``ContextLSTM.score``.
  3. the GFLOP/s the scorer achieves against a plain matrix multiply of the output layer's shape
     (into a reused output, timed in the same rounds, on the same threads: the limit).

    .venv/bin/python bench/bench_lstm.py [--checkpoint DIR] [--utterances 150] [--threads 1]
        [--repeat 3] [--smoke]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchlib  # noqa: E402  (first: the load average at the start)

from rescorer.formats import read_nbest
from rescorer.lm_models.checkpoint import load_checkpoint, save_checkpoint
from rescorer.lm_models.lstm.context import ContextVariable
from rescorer.lm_models.lstm.model import ContextLSTM, LSTMConfig
from rescorer.lm_models.vocab import build_vocabulary
from rescorer.lms.torch import TorchLM


def interleaved(fns: dict[str, Callable[[], object]], rounds: int) -> dict[str, list[float]]:
    """Seconds of each function in each of ``rounds`` rounds, the functions taking turns (after
    one warm-up call each), so that a change in machine load hits them alike."""
    for fn in fns.values():
        fn()
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    return times


def med(values: list[float]) -> float:
    return statistics.median(values)


@torch.no_grad()
def forward_speeds(vocab: int, e: int, d: int, n: int, t: int, repeat: int) -> list[str]:
    var = ContextVariable.categorical(
        "genre", [f"g{i}" for i in range(15)], [1] * 15, embed_dim=16, one_hot_bias=True
    )
    torch.manual_seed(0)
    plain = ContextLSTM(LSTMConfig(vocab_size=vocab, embed_dim=e, hidden_dim=d)).eval()
    factor = ContextLSTM(
        LSTMConfig(
            vocab_size=vocab,
            embed_dim=e,
            hidden_dim=d,
            mode="factor",
            context_dim=16,
            rank=8,
            context_vars=(var,),
        )
    ).eval()
    locked = factor.lock({"genre": "g3"})
    tokens = torch.randint(0, vocab, (n, t))
    records = [{"genre": f"g{i % 15}"} for i in range(n)]
    runs = {
        "Unadapted": lambda: plain(tokens),
        "FactorCell, dynamic (a context per row)": lambda: factor(tokens, records),
        "FactorCell, locked to one context": lambda: locked(tokens),
    }
    times = interleaved(runs, repeat)
    base = med(times["Unadapted"])
    lines = [
        f"Forward pass, batch {n} x {t} tokens, V={vocab}, e={e}, d={d}, FactorCell k=16 r=8; "
        f"{repeat} interleaved rounds:",
        "",
        "| model | ms per batch, median (min) | tokens/s | time / Unadapted |",
        "|---|---|---|---|",
    ]
    for name, secs in times.items():
        sec = med(secs)
        lines.append(
            f"| {name} | {1000 * sec:.1f} ({1000 * min(secs):.1f}) | {n * t / sec:,.0f} | "
            f"{sec / base:.2f} |"
        )
    return lines


def nbest_speeds(ckpt: Path | None, data_dir: Path, n_utt: int, repeat: int) -> list[str]:
    nbest = read_nbest(data_dir / "nbest" / "librispeech-espnet" / "dev_other", "espnet")
    utts = list(nbest)[:n_utt]
    sentences = [h.words for u in utts for h in nbest[u]]
    with tempfile.TemporaryDirectory() as tmp:
        if ckpt is None:
            # Timing does not depend on the weights: a random word model over these words.
            vocab = build_vocabulary([[w.lower() for w in s] for s in sentences], 20000)
            torch.manual_seed(0)
            model = ContextLSTM(LSTMConfig(vocab_size=len(vocab), embed_dim=128, hidden_dim=256))
            ckpt = save_checkpoint(Path(tmp) / "ckpt", model, vocab.tokens)
            origin = "random weights, vocabulary of the hypotheses' words"
        else:
            origin = str(ckpt)
        lm = TorchLM(ckpt, device="cpu")
        lm.token_logprobs(sentences[:30])  # case decision, warm-up
        lm.reset_stats()
        lm.sentence_logprobs(sentences)  # once, to count the steps of one pass
        stats = lm.stats
        model = lm.model
        _, tokens, _ = load_checkpoint(ckpt)
        index = {w: i for i, w in enumerate(tokens)}
        ids = [[index.get(w, 0) for w in lm.to_units(s)] for s in sentences]  # 0 = <unk>

        def one_at_a_time() -> None:
            with torch.no_grad():
                for row in ids:
                    inputs = torch.tensor([[1, *row]])
                    targets = torch.tensor([[*row, 2]])
                    model.score(inputs, targets, torch.tensor([len(row) + 1]))

        cfg = model.config
        e, d, v = cfg.embed_dim, cfg.hidden_dim, cfg.vocab_size
        a, b = torch.randn(2048, e), torch.randn(v, e).t()
        out = torch.empty(2048, v)  # reused, as the scorer reuses its buffers
        times = interleaved(
            {
                "shared": lambda: lm.sentence_logprobs(sentences),
                "single": one_at_a_time,
                "matmul": lambda: torch.mm(a, b, out=out),
            },
            repeat,
        )
    t_shared, t_single, t_mm = (med(times[k]) for k in ("shared", "single", "matmul"))
    steps = stats.computed_steps
    # per computed node: the gates (3d x (e+d)), the projection L (e x d), the output layer
    flops_per_step = 2 * 3 * d * (e + d) + (2 * e * d if e != d else 0) + 2 * v * e
    gflops = steps * flops_per_step / t_shared / 1e9
    mm_gflops = 2 * 2048 * e * v / t_mm / 1e9
    return [
        f"N-best scoring of the first {len(utts)} dev_other utterances ({len(sentences):,} "
        f"hypotheses), word LSTM V={v}, e={e}, d={d} ({origin}), CPU; {repeat} interleaved "
        "rounds (tree, one at a time, the matmul):",
        "",
        "| method | seconds, median (min) | hypotheses/s |",
        "|---|---|---|",
        f"| prefix tree + batching (`TorchLM`) | {t_shared:.2f} ({min(times['shared']):.2f}) | "
        f"{len(sentences) / t_shared:,.0f} |",
        f"| one hypothesis at a time (`ContextLSTM.score`) | {t_single:.2f} "
        f"({min(times['single']):.2f}) | {len(sentences) / t_single:,.0f} |",
        "",
        f"- Speed-up: {t_single / t_shared:.1f}x. Prefix sharing: {stats.describe()}.",
        f"- Achieved {gflops:.1f} GFLOP/s (LSTM step + output layer per computed node) vs "
        f"{mm_gflops:.1f} GFLOP/s for a plain (2048 x {e}) @ ({e} x {v}) matmul into a reused "
        f"output, same threads, same rounds: {100 * gflops / mm_gflops:.0f}% of it.",
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--checkpoint", type=Path, default=None)
    ap.add_argument("--data-dir", type=Path, default=benchlib.data_dir())
    ap.add_argument("--utterances", type=int, default=150)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", type=Path, default=benchlib.RESULTS / "lstm.md")
    benchlib.add_common(ap)
    args = ap.parse_args()
    benchlib.smoke(args, utterances=2, repeat=1)
    threads = benchlib.pin_threads(args.threads)
    lines = [
        *benchlib.header(
            "Context-aware LSTM inference benchmark",
            threads=threads,
            ratios="time / Unadapted, the speed-up, % of the matmul",
            absolute="ms, seconds, tokens/s, hypotheses/s, GFLOP/s",
        ),
        f"- torch {torch.__version__}",
        "",
    ]
    batch = (4, 10) if args.smoke else (32, 40)
    lines += forward_speeds(10000, 128, 256, *batch, 4 * args.repeat)  # short runs: more rounds
    lines += [""]
    lines += nbest_speeds(args.checkpoint, args.data_dir, args.utterances, args.repeat)
    benchlib.write(args.out, lines)


if __name__ == "__main__":
    main()
