"""ONNX Runtime vs PyTorch eager on the same context LSTM, in the same run, as ratios.

1. Per-step latency at batch 1 (a decoder embedding the LM, one token at a time): the step
   export (one context folded in) through ONNX Runtime vs ``ContextLSTM.forward`` with the
   context-folded weights (``adapt`` once, as ``TorchLM.advance`` runs it); int8 vs float32.
2. N-best sentence scoring of the first dev_other utterances, each with its speaker as context:
   the multi-context sentence scorer through ``OnnxLM`` (sorted by length, padded batches, one
   context_id per row) vs PyTorch eager on the very same padded batches (``ContextLSTM.score``
   with a context record per row), and the toolkit's ``TorchLM`` (prefix tree, per-context
   groups) for reference; int8 vs float32.
3. What int8 costs: perplexity change on the same utterances' references (and, with
   ``--trained-exp DIR``, of a trained recipe run on its own test split, with its contexts).

Without ``--checkpoint`` the model has random weights (nothing is trained): a word FactorCell
of realistic size over the hypotheses' vocabulary, with the dev_other speakers as a categorical
context variable. Timings do not depend on the weights; perplexities of a random model do not
mean much, which is what ``--trained-exp`` is for.

    .venv/bin/python bench/bench_onnx.py [--checkpoint DIR] [--utterances 150] [--repeat 3]
        [--threads N] [--trained-exp recipes/agnews_topic/exp/factor_seed0]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import shlex
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import onnxruntime as ort
import torch

from rescorer.core.data import REPO_ROOT, default_data_dir
from rescorer.core.machine import describe_machine
from rescorer.core.output import atomic_write
from rescorer.export.exporter import ExportOptions, export_model
from rescorer.export.quantize import quantize_int8
from rescorer.formats import read_nbest
from rescorer.lm_models.checkpoint import load_checkpoint, save_checkpoint
from rescorer.lm_models.lstm.context import ContextVariable
from rescorer.lm_models.lstm.model import ContextLSTM, LSTMConfig
from rescorer.lm_models.vocab import build_vocabulary
from rescorer.lms.onnx import OnnxLM, create_session, perplexity_change
from rescorer.lms.torch import TorchLM
from rescorer.refs import read_references, read_utt2spk

BATCH_TOKENS = 4096


def interleaved_best(fns: dict[str, Callable[[], object]], repeat: int) -> dict[str, float]:
    """Best time of each function over ``repeat`` rounds, the functions taking turns in each
    round, so that a busy machine slows them alike."""
    best = dict.fromkeys(fns, math.inf)
    for _ in range(repeat):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            best[name] = min(best[name], time.perf_counter() - t0)
    return best


def random_model(sentences: Sequence[Sequence[str]], speakers: Sequence[str]) -> tuple:
    vocab = build_vocabulary([[w.lower() for w in s] for s in sentences], 20000)
    var = ContextVariable.categorical("speaker", sorted(set(speakers)), embed_dim=16)
    torch.manual_seed(0)
    cfg = LSTMConfig(
        vocab_size=len(vocab),
        embed_dim=128,
        hidden_dim=256,
        mode="factor",
        context_dim=16,
        rank=8,
        context_vars=(var,),
    )
    return ContextLSTM(cfg).eval(), list(vocab.tokens)


def session(path: Path, threads: int) -> ort.InferenceSession:
    sess, _ = create_session(path, "cpu", threads)
    return sess


@torch.inference_mode()
def step_latency(
    model: ContextLSTM, record: dict | None, paths: dict[str, Path], threads: int, repeat: int
) -> dict[str, float]:
    """Seconds per step at batch 1, over a 100-token sequence fed one token at a time."""
    steps = 100
    cfg = model.config
    tokens = np.random.default_rng(0).integers(3, cfg.vocab_size, steps)
    runs: dict[str, Callable[[], object]] = {}
    zeros = np.zeros((cfg.num_layers, 1, cfg.hidden_dim), dtype=np.float32)
    for name, path in paths.items():
        sess = session(path, threads)

        def run_onnx(sess: ort.InferenceSession = sess) -> None:
            h, c = zeros, zeros
            for tok in tokens:
                _, h, c = sess.run(None, {"x": np.array([[tok]]), "h0": h, "c0": c})

        runs[name] = run_onnx
    adapted = model.adapt([record] if model.adaptive else None)
    ids = torch.from_numpy(tokens).view(-1, 1, 1)

    def run_torch() -> None:
        state = None
        for tok in ids:
            _, state = model(tok, None, state, adapted=adapted)

    runs["torch"] = run_torch
    for run in runs.values():
        run()  # warm-up
    return {name: sec / steps for name, sec in interleaved_best(runs, repeat).items()}


def padded_batches(
    lengths: Sequence[int], cids: Sequence[int], batch_tokens: int
) -> list[list[int]]:
    """OnnxLM's batches: by context then length, one context and <= batch_tokens positions."""
    batches: list[list[int]] = []
    current: list[int] = []
    for i in sorted(range(len(lengths)), key=lambda i: (cids[i], lengths[i])):
        full = current and (len(current) + 1) * (lengths[i] + 2) > batch_tokens
        if current and (full or cids[i] != cids[current[0]]):
            batches.append(current)
            current = []
        current.append(i)
    return batches + ([current] if current else [])


@torch.inference_mode()
def torch_padded_scores(
    model: ContextLSTM,
    ids: Sequence[Sequence[int]],
    records: Sequence[dict | None],
    cids: Sequence[int],
) -> np.ndarray:
    """Sentence log-probs with ContextLSTM.score over the batches OnnxLM builds."""
    out = np.empty(len(ids))
    for batch in padded_batches([len(s) for s in ids], cids, BATCH_TOKENS):
        width = max(len(ids[i]) for i in batch) + 2
        x = torch.full((len(batch), width), 2, dtype=torch.long)
        x[:, 0] = 1
        for j, i in enumerate(batch):
            x[j, 1 : 1 + len(ids[i])] = torch.tensor(ids[i], dtype=torch.long)
        lens = torch.tensor([len(ids[i]) + 1 for i in batch])
        ctx = [records[i] for i in batch] if model.adaptive else None
        out[batch] = model.score(x[:, :-1], x[:, 1:], lens, ctx).sum(dim=1).double().numpy()
    return out


def held_out(exp: Path, data_dir: Path) -> tuple[ContextLSTM, list[str], list, list]:
    """A trained recipe run: its best checkpoint, and its test split's sentences and contexts."""
    from rescorer.lm_models.lstm.train import CORPUS_READERS, TrainConfig, context_record

    model, tokens, _ = load_checkpoint(exp / "best")
    assert isinstance(model, ContextLSTM)
    dc = TrainConfig.load(exp / "config.json").data
    test = set(json.loads((exp / "split.json").read_text())["test"])
    path = Path(dc.path) if Path(dc.path).is_absolute() else data_dir / dc.path
    sentences, records = [], []
    for doc in CORPUS_READERS[dc.corpus](path, dc):
        if doc.doc_id in test:
            record = context_record(doc, model.config.context_vars)
            for sentence in doc.sentences:
                sentences.append(sentence[: dc.max_len] if dc.max_len else sentence)
                records.append(record)
    return model, tokens, sentences, records


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--checkpoint", type=Path, default=None)
    ap.add_argument("--data-dir", type=Path, default=default_data_dir())
    ap.add_argument("--utterances", type=int, default=150)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument(
        "--threads", type=int, default=None, help="for both runtimes (default: torch's own)"
    )
    ap.add_argument(
        "--trained-exp",
        type=Path,
        default=None,
        help="a recipe run (best/, config.json, split.json): int8 perplexity on its test split",
    )
    ap.add_argument("--out", type=Path, default=REPO_ROOT / "bench" / "results" / "onnx.md")
    args = ap.parse_args()
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    threads = torch.get_num_threads()
    load = os.getloadavg()[0]

    set_dir = args.data_dir / "nbest" / "librispeech-espnet" / "dev_other"
    nbest = read_nbest(set_dir, "espnet")
    utts = list(nbest)[: args.utterances]
    speaker_of = {u: s.split("-")[0] for u, s in read_utt2spk(set_dir / "utt2spk").items()}
    sentences = [h.words for u in utts for h in nbest[u]]
    records: list[dict | None] = [{"speaker": speaker_of[u]} for u in utts for _ in nbest[u]]
    refs = read_references(set_dir / "references" / "ref_wer.trn")
    ref_sentences = [refs[u] for u in utts]
    ref_records = [{"speaker": speaker_of[u]} for u in utts]

    if args.checkpoint is None:
        model, tokens = random_model(sentences, list(speaker_of.values()))
        origin = (
            "random weights (nothing trained), vocabulary of the hypotheses' words, "
            "the 33 dev_other speakers as context"
        )
    else:
        loaded, tokens, _ = load_checkpoint(args.checkpoint)
        assert isinstance(loaded, ContextLSTM)
        model, origin = loaded, str(args.checkpoint)
    cfg = model.config
    folded = ({"speaker": speaker_of[utts[0]]} if "speaker" in
              {v.name for v in cfg.context_vars} else None)  # fmt: skip

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        t0 = time.perf_counter()
        step = export_model(model, tokens, root / "step.onnx", ExportOptions("step", folded))
        scorer = export_model(model, tokens, root / "scorer.onnx", ExportOptions("multi-scorer"))
        t_export = time.perf_counter() - t0
        step8 = quantize_int8(step.path)
        scorer8 = quantize_int8(scorer.path)
        sizes = {p.name: p.stat().st_size / 2**20 for p in (step.path, step8, scorer.path, scorer8)}

        # 1. per-step latency, batch 1
        lat = step_latency(  # short runs: more rounds
            model, folded, {"onnx": step.path, "onnx_int8": step8}, threads, 10 * args.repeat
        )

        # 2. N-best scoring throughput
        lm = OnnxLM(scorer.path, device="cpu", threads=threads, batch_tokens=BATCH_TOKENS)
        lm8 = OnnxLM(scorer8, device="cpu", threads=threads, batch_tokens=BATCH_TOKENS)
        lm.sentence_logprobs(sentences[:50], records[:50])  # case decision, warm-up
        lm8.sentence_logprobs(sentences[:50], records[:50])
        index = {t: i for i, t in enumerate(tokens)}
        ids = [[index.get(w, 0) for w in lm.to_units(s)] for s in sentences]
        cids = lm.context_ids(len(sentences), records).tolist()
        ckpt = args.checkpoint or save_checkpoint(root / "ckpt", model, tokens)
        torch_lm = TorchLM(ckpt, device="cpu")
        torch_lm.sentence_logprobs(sentences[:50], records[:50])
        times = interleaved_best(
            {
                "onnx": lambda: lm.sentence_logprobs(sentences, records),
                "onnx_int8": lambda: lm8.sentence_logprobs(sentences, records),
                "torch": lambda: torch_padded_scores(model, ids, records, cids),
                "torchlm": lambda: torch_lm.sentence_logprobs(sentences, records),
            },
            args.repeat,
        )
        s_onnx = lm.sentence_logprobs(sentences, records)
        s_torch = torch_padded_scores(model, ids, records, cids)
        torch_lm.reset_stats()
        s_tree = torch_lm.sentence_logprobs(sentences, records)
        tree_steps = torch_lm.stats.computed_steps
        padded = sum(
            len(b) * (max(len(ids[i]) for i in b) + 1)
            for b in padded_batches([len(x) for x in ids], cids, BATCH_TOKENS)
        )
        s_int8 = lm8.sentence_logprobs(sentences, records)
        agree = float(np.abs(s_onnx - s_torch).max())
        agree_tree = float(np.abs(s_onnx - s_tree).max())
        int8_dev = float(np.abs(s_onnx - s_int8).max())

        # 3. what int8 costs in perplexity
        change = perplexity_change(scorer.path, scorer8, ref_sentences, ref_records)
        trained = None
        if args.trained_exp is not None:
            tmodel, ttokens, texts, trecords = held_out(args.trained_exp, args.data_dir)
            tres = export_model(tmodel, ttokens, root / "trained.onnx", ExportOptions("multi"))
            trained = perplexity_change(tres.path, quantize_int8(tres.path), texts, trecords)

    n_hyps = len(sentences)
    n_tokens = sum(len(s) + 1 for s in sentences)
    lines = [
        "# ONNX Runtime vs PyTorch benchmark",
        "",
        f"- Date: {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M UTC}",
        f"- Machine: {describe_machine()}; torch {torch.__version__}, onnxruntime "
        f"{ort.__version__}, {threads} thread(s) each (CPU execution provider); load average "
        f"{load:.1f} at the start (other jobs on the machine slow both runtimes alike)",
        f"- Command: `{shlex.join([Path(sys.executable).name, *sys.argv])}`",
        f"- Model: FactorCell word LSTM V={cfg.vocab_size}, e={cfg.embed_dim}, "
        f"d={cfg.hidden_dim}, {cfg.num_layers} layer(s), k={cfg.context_dim}, r={cfg.rank}, "
        f"layer norm {'on' if cfg.layer_norm else 'off'}; {origin}",
        f"- Exports: step model {sizes['step.onnx']:.1f} MiB (int8 {sizes['step.int8.onnx']:.1f}), "
        f"multi-context scorer with {len(scorer.contexts)} contexts "
        f"{sizes['scorer.onnx']:.1f} MiB (int8 {sizes['scorer.int8.onnx']:.1f}); export took "
        f"{t_export:.1f} s",
        "",
        "## Per-step latency, batch 1 (one token in, log-probs and state out)",
        "",
        "| runtime | ms per step | steps/s | PyTorch time / this |",
        "|---|---|---|---|",
    ]
    for name, label in (
        ("torch", "PyTorch eager (`forward`, folded weights)"),
        ("onnx", "ONNX Runtime, step export (float32)"),
        ("onnx_int8", "ONNX Runtime, step export (dynamic int8)"),
    ):
        sec = lat[name]
        lines.append(f"| {label} | {1000 * sec:.3f} | {1 / sec:,.0f} | {lat['torch'] / sec:.2f} |")
    lines += [
        "",
        f"## N-best sentence scoring: first {len(utts)} dev_other utterances, {n_hyps:,} "
        f"hypotheses, {n_tokens:,} tokens incl. </s>, speaker as context",
        "",
        "| method | seconds | hypotheses/s | PyTorch eager time / this |",
        "|---|---|---|---|",
    ]
    for name, label in (
        ("torch", "PyTorch eager, same padded batches (`ContextLSTM.score`)"),
        ("onnx", "ONNX Runtime, multi-context scorer (`OnnxLM`, float32)"),
        ("onnx_int8", "ONNX Runtime, multi-context scorer (dynamic int8)"),
        ("torchlm", "PyTorch, prefix tree + context groups (`TorchLM`)"),
    ):
        sec = times[name]
        lines.append(f"| {label} | {sec:.2f} | {n_hyps / sec:,.0f} | {times['torch'] / sec:.2f} |")
    lines += [
        "",
        f"- Batches of one context and at most {BATCH_TOKENS} padded positions, sorted by "
        f"length (OnnxLM's batching, reproduced for PyTorch eager).",
        f"- Work: the padded batches hold {padded:,} positions (every one a full LSTM step and "
        f"softmax); TorchLM's prefix tree computes {tree_steps:,} distinct prefixes.",
        f"- Agreement: max |ONNX - PyTorch eager| sentence log-prob {agree:.1e} nats; "
        f"vs TorchLM {agree_tree:.1e} nats. int8 vs float32: max {int8_dev:.3f} nats.",
        "",
        "## int8 vs float32",
        "",
        f"- Step latency: int8 takes {lat['onnx_int8'] / lat['onnx']:.2f}x the float32 time; "
        f"N-best scoring: {times['onnx_int8'] / times['onnx']:.2f}x.",
        f"- Perplexity on the {len(utts)} utterances' references (speaker contexts), this "
        f"model: {change.describe()}.",
    ]
    if trained is not None:
        lines.append(
            f"- Trained `{args.trained_exp}/best` (multi-context export) on its own test split, "
            f"each sentence with its document's context: {trained.describe()}."
        )
    if args.checkpoint is None:
        lines.append(
            "- The bench model has random weights: its perplexity change says little about a "
            "trained model's (see the trained checkpoint line when given)."
        )
    text = "\n".join(lines) + "\n"
    print(text)
    with atomic_write(args.out) as f:
        f.write(text)


if __name__ == "__main__":
    main()
