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
4. N-best scoring through the prefix tree, ``onnx:`` vs ``torch:``: the first
   ``--nbest-utterances`` (200) dev_other lists scored by ``OnnxLM`` on the step export (its
   prefix-shared forest) and by ``TorchLM`` (its forest) with the same model and context, as a
   ratio of CPU time (process, all threads), interleaved, at 1 thread each and at the default
   (every core); the step export's whole-sentence path for reference. ``--nbest-only`` runs
   this section alone and replaces it in ``--out`` (e.g. with ``--checkpoint`` a trained word
   LSTM: ``rescorer train recipes/librispeech_nbest/conf/lstm.json``).

Without ``--checkpoint`` the model has random weights (nothing is trained): a word FactorCell
of realistic size over the hypotheses' vocabulary, with the dev_other speakers as a categorical
context variable. Timings do not depend on the weights; perplexities of a random model do not
mean much, which is what ``--trained-exp`` is for.

Both runtimes run on ``--threads`` threads (default 1: torch, OpenMP, the ONNX Runtime
sessions' intra-op threads); the systems take turns in each round and the tables give medians.

    .venv/bin/python bench/bench_onnx.py [--checkpoint DIR] [--utterances 150] [--repeat 3]
        [--threads 1] [--trained-exp recipes/agnews_topic/exp/factor_seed0] [--smoke]
        [--trained-data DIR]
        [--nbest-utterances 200] [--nbest-only]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path

import numpy as np
import onnxruntime as ort
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchlib  # noqa: E402, I001  (first of the project's: the load average at the start)

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


def interleaved_median(fns: dict[str, Callable[[], object]], repeat: int) -> dict[str, float]:
    """Median time of each function over ``repeat`` rounds, the functions taking turns in each
    round, so that a busy machine slows them alike."""
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeat):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    return {name: statistics.median(t) for name, t in times.items()}


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
    return {name: sec / steps for name, sec in interleaved_median(runs, repeat).items()}


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


def held_out(exp: Path, data_dir: Path) -> tuple[ContextLSTM, list[str], list, list, str]:
    """A trained recipe run: its best checkpoint, its held-out split's sentences and contexts,
    and that split's name (``test``; ``dev`` for a run trained without a test split, as the
    keyboard recipes keep their test sentences apart)."""
    from rescorer.lm_models.lstm.train import CORPUS_READERS, TrainConfig, context_record

    model, tokens, _ = load_checkpoint(exp / "best")
    assert isinstance(model, ContextLSTM)
    dc = TrainConfig.load(exp / "config.json").data
    split = json.loads((exp / "split.json").read_text())
    part = "test" if split["test"] else "dev"
    test = set(split[part])
    # the held-out documents are in the training file, or in the run's own dev file (`dev`)
    name = dc.dev if part == "dev" and getattr(dc, "dev", None) else dc.path
    path = Path(name) if Path(name).is_absolute() else data_dir / name
    sentences, records = [], []
    for doc in CORPUS_READERS[dc.corpus](path, dc):
        if doc.doc_id in test:
            record = context_record(doc, model.config.context_vars)
            for sentence in doc.sentences:
                sentences.append(sentence[: dc.max_len] if dc.max_len else sentence)
                records.append(record)
    return model, tokens, sentences, records, part


def interleaved_cpu(
    fns: dict[str, Callable[[], object]], repeat: int
) -> dict[str, list[tuple[float, float]]]:
    """(CPU seconds of the process, all its threads; wall seconds) of each function in each of
    ``repeat`` rounds, the functions taking turns in each round."""
    out: dict[str, list[tuple[float, float]]] = {name: [] for name in fns}
    for _ in range(repeat):
        for name, fn in fns.items():
            c0, w0 = time.process_time(), time.perf_counter()
            fn()
            out[name].append((time.process_time() - c0, time.perf_counter() - w0))
    return out


def round_ratio(runs: dict[str, list[tuple[float, float]]], a: str, b: str, k: int = 0) -> float:
    """The median over the rounds of ``a``'s time / ``b``'s (``k`` 0: CPU, 1: wall)."""
    return statistics.median(x[k] / y[k] for x, y in zip(runs[a], runs[b], strict=True))


def max_token_diff(a: Sequence[np.ndarray], b: Sequence[np.ndarray]) -> float:
    return max(float(np.abs(x - y).max()) for x, y in zip(a, b, strict=True))


def nbest_section(
    args: argparse.Namespace, model: ContextLSTM, tokens: list[str], folded: dict | None
) -> list[str]:
    """4. ``onnx:`` (a step export through OnnxLM's prefix-shared forest) vs ``torch:``
    (TorchLM's forest) scoring the first ``--nbest-utterances`` dev_other lists with the same
    model and context: CPU time of the process (all threads), interleaved rounds, at 1 thread
    each and at the default (every core); the whole-sentence path of the step export
    (``prefix_tree=False``, what ``onnx:`` did before) for reference. A model with a speaker
    variable also runs the multi export, each list with its speaker (one context per run)."""
    set_dir = args.data_dir / "nbest" / "librispeech-espnet" / "dev_other"
    nbest = read_nbest(set_dir, "espnet")
    utts = list(nbest)[: args.nbest_utterances]
    sentences = [h.words for u in utts for h in nbest[u]]
    records: list[dict | None] = [folded] * len(sentences)  # the step export's one context
    speakers = "speaker" in {v.name for v in model.config.context_vars}
    speaker_of = {u: s.split("-")[0] for u, s in read_utt2spk(set_dir / "utt2spk").items()}
    per_utt: list[dict | None] = [{"speaker": speaker_of[u]} for u in utts for _ in nbest[u]]
    load = os.getloadavg()
    rows, agreement = [], []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        step = export_model(model, tokens, root / "step.onnx", ExportOptions("step", folded)).path
        multi = export_model(model, tokens, root / "multi.onnx", ExportOptions("multi")).path
        ckpt = save_checkpoint(root / "ckpt", model, tokens)
        pinned = torch.get_num_threads()
        for label, n in (("1 each", 1), (f"default ({os.cpu_count()})", os.cpu_count() or 1)):
            torch.set_num_threads(n)
            torch_lm = TorchLM(ckpt, device="cpu")
            tree = OnnxLM(step, device="cpu", threads=n)
            lms: dict[str, tuple[TorchLM | OnnxLM, list[dict | None]]] = {
                "torch": (torch_lm, records),
                "onnx": (tree, records),
                "padded": (OnnxLM(step, device="cpu", threads=n, prefix_tree=False), records),
            }
            if speakers:
                lms["torch_spk"] = (torch_lm, per_utt)
                lms["onnx_spk"] = (OnnxLM(multi, device="cpu", threads=n), per_utt)
            fns = {
                name: partial(lm.token_logprobs, sentences, ctx) for name, (lm, ctx) in lms.items()
            }
            scores = {name: fn() for name, fn in fns.items()}  # warm-up, case decision
            if not agreement:
                torch_lm.reset_stats()
                torch_lm.token_logprobs(sentences, records)
                agreement = [
                    max_token_diff(scores["onnx"], scores["torch"]),
                    max_token_diff(scores["onnx"], scores["padded"]),
                    torch_lm.stats.computed_steps,
                ]
                if speakers:
                    agreement.append(max_token_diff(scores["onnx_spk"], scores["torch_spk"]))
            runs = interleaved_cpu(fns, args.repeat)
            cpu = {name: statistics.median(t[0] for t in r) for name, r in runs.items()}
            rows.append(
                f"| {label} | {cpu['torch']:.2f} | {cpu['onnx']:.2f} | "
                f"**{round_ratio(runs, 'onnx', 'torch'):.2f}** | "
                f"{round_ratio(runs, 'onnx', 'torch', 1):.2f} | {cpu['padded']:.2f} | "
                f"{round_ratio(runs, 'padded', 'onnx'):.2f} | "
                + (f"{round_ratio(runs, 'onnx_spk', 'torch_spk'):.2f} |" if speakers else "- |")
            )
        torch.set_num_threads(pinned)
    n_tokens = sum(len(s) + 1 for s in sentences)
    lines = [
        "",
        f"## N-best scoring through the prefix tree: `onnx:` vs `torch:`, first {len(utts)} "
        f"dev_other lists, {len(sentences):,} hypotheses, {n_tokens:,} tokens incl. </s>",
        "",
        f"- Command: `{benchlib.command()}`; load average {load[0]:.1f} / {load[1]:.1f} / "
        f"{load[2]:.1f} (1, 5, 15 min) at the start of this section, "
        f"{os.getloadavg()[0]:.1f} at its end; CPU seconds of the process (all threads), "
        f"medians of {args.repeat} interleaved rounds",
        f"- Model: {model.config.mode} word LSTM V={model.config.vocab_size}, "
        f"e={model.config.embed_dim}, d={model.config.hidden_dim}, "
        f"{model.config.num_layers} layer(s) ({args.checkpoint or 'random weights'})",
        f"- `onnx:` = `OnnxLM` on the step export (prefix-shared forest, at most "
        f"{tree.batch_tokens} nodes per run); `torch:` = `TorchLM` (its forest, at most "
        f"{torch_lm.batch_nodes} nodes per step); the same model and context "
        f"({folded or 'none'}); the forests compute {agreement[2]:,} distinct prefixes",
        f"- Agreement: max |onnx - torch| token log-prob {agreement[0]:.1e} nats; "
        f"|tree - whole sentences| (step export) {agreement[1]:.1e}"
        + (f"; multi export, speaker per list, vs torch: {agreement[3]:.1e}" if speakers else ""),
        "",
        "| threads | torch: CPU s | onnx: CPU s | onnx / torch CPU | onnx / torch wall | "
        "onnx whole sentences: CPU s | whole sentences / tree | multi, speaker per list: "
        "onnx / torch CPU |",
        "|---|---|---|---|---|---|---|---|",
        *rows,
    ]
    return lines


NBEST_HEADING = "## N-best scoring through the prefix tree"


def replace_section(out: Path, section: list[str]) -> None:
    """Put ``section`` in place of the results file's prefix-tree section (else at its end)."""
    text = out.read_text() if out.is_file() else ""
    start = text.find(NBEST_HEADING)
    if start >= 0:
        end = text.find("\n## ", start + 1)
        text = text[:start].rstrip("\n") + "\n" + (text[end:] if end >= 0 else "")
    body = "\n".join(section).strip("\n")
    text = text.rstrip("\n") + "\n\n" + body + "\n"
    print(body)
    with atomic_write(out) as f:
        f.write(text)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--checkpoint", type=Path, default=None)
    ap.add_argument("--data-dir", type=Path, default=benchlib.data_dir())
    ap.add_argument("--utterances", type=int, default=150)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument(
        "--trained-exp",
        type=Path,
        default=None,
        help="a recipe run (best/, config.json, split.json): int8 perplexity on its test split",
    )
    ap.add_argument(
        "--trained-data",
        type=Path,
        default=None,
        help="the folder the --trained-exp run's config data path is relative to (default: the "
        "data folder; a recipe that writes its own corpus, e.g. recipes/keyboard_context/exp/"
        "agnews/data)",
    )
    ap.add_argument("--out", type=Path, default=benchlib.RESULTS / "onnx.md")
    ap.add_argument(
        "--nbest-utterances",
        type=int,
        default=200,
        help="dev_other lists of the prefix-tree section (onnx: vs torch:, CPU time)",
    )
    ap.add_argument(
        "--nbest-only",
        action="store_true",
        help="run the prefix-tree section alone; it replaces that section of --out",
    )
    benchlib.add_common(ap)
    args = ap.parse_args()
    benchlib.smoke(args, utterances=2, repeat=1, nbest_utterances=2)
    threads = benchlib.pin_threads(args.threads)

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
    if args.nbest_only:
        replace_section(args.out, nbest_section(args, model, tokens, folded))
        return

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
        times = interleaved_median(
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
            tmodel, ttokens, texts, trecords, tpart = held_out(
                args.trained_exp, args.trained_data or args.data_dir
            )
            tres = export_model(tmodel, ttokens, root / "trained.onnx", ExportOptions("multi"))
            trained = perplexity_change(tres.path, quantize_int8(tres.path), texts, trecords)

    n_hyps = len(sentences)
    n_tokens = sum(len(s) + 1 for s in sentences)
    lines = [
        *benchlib.header(
            "ONNX Runtime vs PyTorch benchmark",
            threads=threads,
            ratios="PyTorch time / this, int8 / float32",
            absolute="ms per step, steps/s, seconds, hypotheses/s, export seconds",
        ),
        f"- torch {torch.__version__}, onnxruntime {ort.__version__} (CPU execution provider); "
        f"medians of {args.repeat} interleaved rounds ({10 * args.repeat} for the step latency)",
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
            f"- Trained `{args.trained_exp}/best` (multi-context export) on its own {tpart} split, "
            f"each sentence with its document's context: {trained.describe()}."
        )
    if args.checkpoint is None:
        lines.append(
            "- The bench model has random weights: its perplexity change says little about a "
            "trained model's (see the trained checkpoint line when given)."
        )
    lines += nbest_section(args, model, tokens, folded)
    benchlib.write(args.out, lines)


if __name__ == "__main__":
    main()
