"""Context-aware LSTM inference speed: locked vs dynamic FactorCell vs Unadapted, and N-best
scoring with prefix sharing and batching vs one hypothesis at a time.

All figures are measured in one run on the same machine, as ratios:
  1. tokens/s of a forward pass (no gradient) of the same-size Unadapted model, the dynamic
     FactorCell (a different context per row: W' per row, a batched matmul per step) and the
     FactorCell locked to one context (W' folded in: a plain LSTM). The paper's claim is that the
     locked FactorCell costs what the Unadapted model costs.
  2. scoring the N-best lists of dev_other utterances through ``TorchLM`` (prefix tree, all
     hypotheses batched) vs one hypothesis at a time through ``ContextLSTM.score``.
  3. the GFLOP/s the scorer achieves against a plain matrix multiply of the output layer's shape.

    .venv/bin/python bench/bench_lstm.py [--checkpoint DIR] [--utterances 150]
"""

from __future__ import annotations

import argparse
import datetime as dt
import math
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

from rescorer.core.data import REPO_ROOT, default_data_dir
from rescorer.core.machine import cpu_name
from rescorer.core.output import atomic_write
from rescorer.formats import read_nbest
from rescorer.lm_models.checkpoint import load_checkpoint, save_checkpoint
from rescorer.lm_models.lstm.context import ContextVariable
from rescorer.lm_models.lstm.model import ContextLSTM, LSTMConfig
from rescorer.lm_models.vocab import build_vocabulary
from rescorer.lms.torch import TorchLM


def best_of(fn: Callable[[], object], repeat: int) -> float:
    best = math.inf
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


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
    times = {name: best_of(fn, repeat) for name, fn in runs.items()}
    base = times["Unadapted"]
    lines = [
        f"Forward pass, batch {n} x {t} tokens, V={vocab}, e={e}, d={d}, FactorCell k=16 r=8:",
        "",
        "| model | ms per batch | tokens/s | time / Unadapted |",
        "|---|---|---|---|",
    ]
    for name, sec in times.items():
        lines.append(f"| {name} | {1000 * sec:.1f} | {n * t / sec:,.0f} | {sec / base:.2f} |")
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
        t_shared = best_of(lambda: lm.sentence_logprobs(sentences), repeat)
        lm.reset_stats()
        lm.sentence_logprobs(sentences)  # once more, to count the steps of one pass
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

        t_single = best_of(one_at_a_time, 1)
    cfg = model.config
    e, d, v = cfg.embed_dim, cfg.hidden_dim, cfg.vocab_size
    steps = stats.computed_steps
    # per computed node: the gates (3d x (e+d)), the projection L (e x d), the output layer
    flops_per_step = 2 * 3 * d * (e + d) + (2 * e * d if e != d else 0) + 2 * v * e
    gflops = steps * flops_per_step / t_shared / 1e9
    a = torch.randn(2048, e)
    b = torch.randn(e, v)
    t_mm = best_of(lambda: a @ b, 5)
    mm_gflops = 2 * 2048 * e * v / t_mm / 1e9
    return [
        f"N-best scoring of the first {len(utts)} dev_other utterances ({len(sentences):,} "
        f"hypotheses), word LSTM V={v}, e={e}, d={d} ({origin}), CPU:",
        "",
        "| method | seconds | hypotheses/s |",
        "|---|---|---|",
        f"| prefix tree + batching (`TorchLM`) | {t_shared:.2f} | "
        f"{len(sentences) / t_shared:,.0f} |",
        f"| one hypothesis at a time (`ContextLSTM.score`) | {t_single:.2f} | "
        f"{len(sentences) / t_single:,.0f} |",
        "",
        f"- Speed-up: {t_single / t_shared:.1f}x. Prefix sharing: {stats.describe()}.",
        f"- Achieved {gflops:.1f} GFLOP/s (LSTM step + output layer per computed node) vs "
        f"{mm_gflops:.1f} GFLOP/s for a plain (2048 x {e}) @ ({e} x {v}) matmul on the same "
        f"machine: {100 * gflops / mm_gflops:.0f}% of it.",
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--checkpoint", type=Path, default=None)
    ap.add_argument("--data-dir", type=Path, default=default_data_dir())
    ap.add_argument("--utterances", type=int, default=150)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", type=Path, default=REPO_ROOT / "bench" / "results" / "lstm.md")
    args = ap.parse_args()
    lines = [
        "# Context-aware LSTM inference benchmark",
        "",
        f"- Date: {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M UTC}",
        f"- Machine: {cpu_name()}, {os.cpu_count()} cores, torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads; no GPU",
        "",
    ]
    lines += forward_speeds(10000, 128, 256, 32, 40, 4 * args.repeat)  # short runs: more repeats
    lines += [""]
    lines += nbest_speeds(args.checkpoint, args.data_dir, args.utterances, args.repeat)
    text = "\n".join(lines) + "\n"
    print(text)
    with atomic_write(args.out) as f:
        f.write(text)


if __name__ == "__main__":
    main()
