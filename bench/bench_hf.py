"""``hf:`` model N-best scoring with and without prefix caching, interleaved, on CPU.

The first ``--utterances`` dev_other 30-best lists (in N-best order, as the rescorer passes them:
one call of ``sentence_logprobs`` over all hypotheses) are scored by a small random GPT-2
(n_embd 256, 4 layers, 4 heads, n_positions 512) with a byte-level BPE tokenizer trained here
on the dev_clean reference transcripts (lower case; ``case="auto"`` lower-cases the upper-case
hypotheses). Timings do not depend on the weights; the tokenizer sets how many pieces a
hypothesis has and so how long the shared prefixes are.

Measured for ``HFCausalLM`` without caching and with caching at several shortest cached
prefixes (``min_prefix``): wall and CPU time (best and median of ``--repeat`` rounds, the
configurations taking turns in each round so that machine load hits them alike), the positions
scored (pieces + EOS), those run through the model (``HFStats.computed``) and with padding
(``HFStats.padded``), and the largest difference between cached and uncached values. A second
table counts, without running the model, the positions the grouping would run were the
hypotheses grouped in input order instead of sorted by piece ids.

    .venv/bin/python bench/bench_hf.py [--utterances 100] [--repeat 3] [--threads 1] [--smoke]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
import transformers

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchlib  # noqa: E402, I001  (first of the project's: the load average at the start)

from rescorer.formats import read_nbest
from rescorer.lms.hf import HFCausalLM, HFStats
from rescorer.refs import read_references

VOCAB = 4000


def build_model(out: Path, texts: Sequence[str], n_embd: int = 256, n_layer: int = 4) -> Path:
    """A random GPT-2 and a byte-level BPE tokenizer trained on ``texts``, saved in ``out``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(
        texts,
        trainers.BpeTrainer(
            vocab_size=VOCAB,
            special_tokens=["<|endoftext|>"],
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
        ),
    )
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<|endoftext|>", eos_token="<|endoftext|>"
    )
    torch.manual_seed(0)
    config = transformers.GPT2Config(
        vocab_size=len(fast), n_positions=512, n_embd=n_embd, n_layer=n_layer, n_head=4,
        bos_token_id=fast.bos_token_id, eos_token_id=fast.eos_token_id,
    )  # fmt: skip
    transformers.GPT2LMHeadModel(config).save_pretrained(out, safe_serialization=True)
    fast.save_pretrained(out)
    return out


def planned_positions(lm: HFCausalLM, ids: Sequence[Sequence[int]], order: Sequence[int]) -> int:
    """Positions (no padding) the model runs when the groups are formed over ``order``."""
    groups = lm._prefix_groups(ids, order)
    grouped = {i for members, _ in groups for i in members}
    alone = sum(len(s) + 1 for i, s in enumerate(ids) if i not in grouped)
    # a group: BOS + prefix[:-1] once, then per member its last prefix piece + suffix
    cached = sum(shared + sum(len(ids[i]) - shared + 1 for i in m) for m, shared in groups)
    return alone + cached


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data-dir", type=Path, default=benchlib.data_dir())
    ap.add_argument("--utterances", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", type=Path, default=benchlib.RESULTS / "hf.md")
    benchlib.add_common(ap)
    args = ap.parse_args()
    benchlib.smoke(args, utterances=1, repeat=1)
    threads = benchlib.pin_threads(args.threads)
    transformers.utils.logging.disable_progress_bar()

    root = args.data_dir / "nbest" / "librispeech-espnet"
    refs = read_references(root / "dev_clean" / "references" / "ref_wer.trn")
    texts = [" ".join(words).lower() for words in refs.values()]
    nbest = read_nbest(root / "dev_other", "espnet")
    utts = list(nbest)[: args.utterances]
    sentences = [h.words for u in utts for h in nbest[u]]

    with tempfile.TemporaryDirectory() as tmp:
        size = {"n_embd": 64, "n_layer": 1} if args.smoke else {}  # smoke: a tiny GPT-2
        path = build_model(Path(tmp) / "gpt2", texts, **size)
        configs = {"off": HFCausalLM(path, device="cpu", prefix_cache=False)}
        for least in (4, 8, 16):
            lm = HFCausalLM(path, device="cpu", prefix_cache=True)
            lm.min_prefix = least
            configs[f"on{least}"] = lm
        for lm in configs.values():
            lm.sentence_logprobs(sentences[:60])  # warm-up
        wall: dict[str, list[float]] = {name: [] for name in configs}
        cpu: dict[str, list[float]] = {name: [] for name in configs}
        stats: dict[str, HFStats] = {}
        values: dict[str, list[np.ndarray]] = {}
        for _ in range(args.repeat):
            for name, lm in configs.items():
                lm.reset_stats()
                w0, c0 = time.perf_counter(), time.process_time()
                values[name] = lm.token_logprobs(sentences)
                wall[name].append(time.perf_counter() - w0)
                cpu[name].append(time.process_time() - c0)
                stats[name] = lm.stats
        off = configs["off"]
        ids = [off.pieces(s)[0] for s in sentences]
        by_ids = sorted(range(len(ids)), key=lambda i: ids[i])
        # a prefix tree would run each distinct prefix (BOS alone, ..., the whole sentence) once
        tree = len({tuple(s[:k]) for s in ids for k in range(len(s) + 1)})
        grouping = {
            (order_name, least): planned_positions(configs[f"on{least}"], ids, order)
            for order_name, order in (("input order", range(len(ids))), ("sorted", by_ids))
            for least in (4, 8, 16)
        }

    def agreement(name: str) -> tuple[float, float]:
        """Largest |difference| from the uncached values: sentence sums, and per token relative."""
        sums = max(abs(a.sum() - b.sum()) for a, b in zip(values[name], values["off"], strict=True))
        rel = max(
            float(np.max(np.abs(a - b) / np.maximum(np.abs(b), 1e-12)))
            for a, b in zip(values[name], values["off"], strict=True)
        )
        return float(sums), rel

    n_pieces = stats["off"].scored
    cfg = off.model.config
    lines = [
        *benchlib.header(
            "HF causal LM: prefix caching on CPU",
            threads=threads,
            ratios="run / scored, wall vs off, the positions' fractions",
            absolute="wall and CPU seconds",
        ),
        f"- torch {torch.__version__}, transformers {transformers.__version__}",
        f"- Model: random GPT-2, n_embd {cfg.n_embd}, {cfg.n_layer} layers, {cfg.n_head} heads, "
        f"n_positions {cfg.n_positions}, vocabulary {cfg.vocab_size} (byte-level BPE trained on "
        f"the dev_clean references); float32, batch_tokens {off.batch_tokens}",
        f"- Data: first {len(utts)} dev_other utterances, {len(sentences):,} hypotheses in "
        f"N-best order, one `token_logprobs` call; {n_pieces:,} positions scored (pieces + EOS)",
        "",
        f"## Time and work (best and median of {args.repeat} interleaved rounds)",
        "",
        "| prefix cache | wall s best | wall s median | CPU s best | CPU s median | positions "
        "run | with padding | run / scored | median wall vs off |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name in configs:
        label = "off" if name == "off" else f"on, min_prefix {name[2:]}"
        st = stats[name]
        lines.append(
            f"| {label} | {min(wall[name]):.2f} | {statistics.median(wall[name]):.2f} | "
            f"{min(cpu[name]):.2f} | {statistics.median(cpu[name]):.2f} | {st.computed:,} | "
            f"{st.padded:,} | {st.computed / st.scored:.3f} | "
            f"{statistics.median(wall[name]) / statistics.median(wall['off']):.2f} |"
        )
    lines += ["", "Agreement with the uncached values:", ""]
    for name in configs:
        if name != "off":
            sums, rel = agreement(name)
            lines.append(
                f"- min_prefix {name[2:]}: max |sentence difference| {sums:.1e} nats, max "
                f"relative difference of a word value {rel:.1e}"
            )
    lines += [
        "",
        "## Grouping order (positions run, padding left out; counted, not timed)",
        "",
        "| hypotheses grouped in | min_prefix 4 | min_prefix 8 | min_prefix 16 |",
        "|---|---|---|---|",
    ]
    for order_name in ("input order", "sorted"):
        cells = " | ".join(
            f"{grouping[order_name, least]:,} ({grouping[order_name, least] / n_pieces:.3f})"
            for least in (4, 8, 16)
        )
        lines.append(f"| {order_name} | {cells} |")
    lines += [
        "",
        "- Grouping reads the hypotheses sorted by piece ids (the `sorted` row); input order "
        "splits a group wherever a hypothesis with another prefix comes between.",
        f"- For scale: a prefix tree running every distinct prefix once (as `TorchLM` does for "
        f"LSTMs) would run {tree:,} positions ({tree / n_pieces:.3f}); one level of shared "
        "prefixes gets a part of that.",
        "- Cached runs: per bundle of groups, one batch of prefixes and one batch of the "
        "members' rests on their cache; the padding column counts both.",
    ]
    benchlib.write(args.out, lines)


if __name__ == "__main__":
    main()
