"""HuggingFace LM scoring of N-best lists with and without the prefix cache, as ratios.

``hf:`` models (``rescorer/lms/hf.py``) run the pieces an N-best list's consecutive hypotheses
share once and their remainders on the cached keys and values (``prefix_cache``, on by
default). This measures what that saves on the first dev_other 30-best lists: pieces fed to
the model with and without the cache, wall and CPU time (one torch thread, runs interleaved A B
A B, min and median), and the largest difference of a sentence value.

The model is a random GPT-2 of moderate size (n_embd 256, 4 layers, 4 heads, 512 positions)
with a byte-level BPE tokenizer trained here on the LibriSpeech dev_other references (4,000
pieces): timings do not depend on the weights.

    .venv/bin/python bench/bench_hf.py [--utterances 100] [--repeat 3]
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import resource
import shlex
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from rescorer.core.data import REPO_ROOT, default_data_dir
from rescorer.core.machine import describe_machine
from rescorer.core.output import atomic_write
from rescorer.formats import read_nbest
from rescorer.lms import hf
from rescorer.lms.hf import HFCausalLM
from rescorer.refs import read_references

SET = "nbest/librispeech-espnet/dev_other"


def build_model(out: Path, texts: list[str]) -> Path:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=4000,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(texts, trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<|endoftext|>", eos_token="<|endoftext|>"
    )
    torch.manual_seed(0)
    config = GPT2Config(
        vocab_size=len(fast), n_positions=512, n_embd=256, n_layer=4, n_head=4,
        bos_token_id=fast.bos_token_id, eos_token_id=fast.eos_token_id,
    )  # fmt: skip
    GPT2LMHeadModel(config).save_pretrained(out, safe_serialization=True)
    fast.save_pretrained(out)
    return out


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--utterances", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", type=Path, default=REPO_ROOT / "bench" / "results" / "hf.md")
    args = ap.parse_args()
    torch.set_num_threads(1)
    load = os.getloadavg()[0]
    root = default_data_dir() / SET
    refs = read_references(root / "references" / "ref_wer.trn")
    nbest = read_nbest(root)
    ids = list(nbest)[: args.utterances]
    sentences = [h.words for u in ids for h in nbest[u]]
    with tempfile.TemporaryDirectory() as tmp:
        folder = build_model(Path(tmp) / "gpt", [" ".join(w).lower() for w in refs.values()])
        models = {
            "cache": HFCausalLM(folder, device="cpu"),
            "no cache": HFCausalLM(folder, device="cpu", prefix_cache=False),
        }
        # Pieces fed to the model: every sentence's BOS + pieces without the cache; with it,
        # each shared run's BOS + shared pieces once plus its members' remainders.
        pieces = [models["cache"].pieces(s)[0] for s in sentences]
        runs = hf._shared_runs(pieces, set(), hf.MIN_SHARED_PIECES)
        fed_plain = sum(len(p) + 1 for p in pieces)
        in_runs = {i for run in runs for i in run}
        fed_cache = sum(len(pieces[i]) + 1 for i in range(len(pieces)) if i not in in_runs)
        for run in runs:
            m = hf._common_prefix([pieces[i] for i in run])
            fed_cache += m + 1 + sum(len(pieces[i]) - m for i in run)
        times: dict[str, list[tuple[float, float]]] = {k: [] for k in models}
        values: dict[str, np.ndarray] = {}
        for _ in range(args.repeat):
            for name, lm in models.items():  # interleaved: A B A B
                wall, cpu = time.perf_counter(), cpu_seconds()
                values[name] = lm.sentence_logprobs(sentences)
                times[name].append((time.perf_counter() - wall, cpu_seconds() - cpu))
    diff = float(np.abs(values["cache"] - values["no cache"]).max())
    walls = {k: [w for w, _ in v] for k, v in times.items()}
    cpus = {k: [c for _, c in v] for k, v in times.items()}
    ratio = float(np.median(walls["no cache"]) / np.median(walls["cache"]))
    lines = [
        "# HuggingFace LM scoring: the prefix cache (rescorer/lms/hf.py)",
        "",
        f"- Date: {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC",
        f"- Machine: {describe_machine()}; 1-minute load average {load:.2f} at the start",
        f"- Command: `.venv/bin/python bench/bench_hf.py {shlex.join(sys.argv[1:])}`",
        f"- Data: the first {len(ids)} dev_other 30-best lists, {len(sentences):,} hypotheses",
        "- Model: random GPT-2, n_embd 256, 4 layers, 4 heads, 512 positions; byte-level BPE of "
        "4,000 pieces trained on the dev_other references; one torch thread, batch_tokens "
        f"{hf.DEFAULT_BATCH_TOKENS}; runs interleaved, {args.repeat} each",
        "",
        "| path | pieces fed to the model | wall s (min / median) | CPU s (min / median) |",
        "|---|---|---|---|",
    ]
    for name, fed in (("no cache", fed_plain), ("cache", fed_cache)):
        lines.append(
            f"| {name} | {fed:,} | {min(walls[name]):.2f} / {np.median(walls[name]):.2f} | "
            f"{min(cpus[name]):.2f} / {np.median(cpus[name]):.2f} |"
        )
    lines += [
        "",
        f"- Shared runs: {len(runs)} (of {len(ids)} lists), at least {hf.MIN_SHARED_PIECES} "
        f"shared pieces each; pieces fed with the cache {fed_cache / fed_plain:.1%} of those "
        "without it.",
        f"- Wall time without / with the cache (medians): **{ratio:.2f}x**.",
        f"- Largest difference of a sentence value: {diff:.2e} nats (float32 rounding).",
    ]
    with atomic_write(args.out) as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
