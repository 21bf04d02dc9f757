"""Training speed of an LSTM with a `previous` text context, batches prepared in the loop or
ahead in a background thread (``train.prefetch``, rescorer.lm_models.prefetch; issue 16).

The lease's context run trained at half its no-context twin's speed: each 32k-token batch's
previous texts were embedded (``hash:256``) in the training loop, 0.12 s a batch on the CPU
(``bench/results/context_text.md``). With ``prefetch`` the next batches are collated, moved to
the device and embedded by a worker thread while the current step runs.

Three runs of the same model on the first ``--books`` novels (one block per book, in reading
order), each ``--steps`` steps of one epoch, interleaved over ``--rounds`` rounds in one
process: the context model with ``prefetch`` 0 and 2, and its no-context twin (no previous
text, prefetch 2) as the bound. Reported: the training loop's seconds (``EpochRecord.seconds``:
no data preparation before the loop, no dev evaluation), median over the rounds, and the ratios
within this run. The first run and every round's results must agree where they should: the
two context runs end with equal dev perplexity.

    .venv/bin/python bench/bench_prefetch.py [--device cpu|cuda] [--books 4] [--steps 30]
        [--threads 1] [--smoke]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
import benchlib  # noqa: E402  (first: the load average at the start)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cpu", help="cpu, cuda (the lease's runs: cuda)")
    ap.add_argument("--books", type=int, default=4, help="novels read (in titles.tsv order)")
    ap.add_argument("--steps", type=int, default=30, help="training steps per run")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--batch-tokens", type=int, default=8192)
    ap.add_argument("--embed-dim", type=int, default=128)
    ap.add_argument("--hidden-dim", type=int, default=256)
    ap.add_argument("--data-dir", type=Path, default=None)
    ap.add_argument(
        "--text",
        type=Path,
        default=None,
        help="a plain text of blocks between blank lines instead of the novels (e.g. the lease's "
        ".lease/data/books_by_book.txt); its first --books blocks",
    )
    ap.add_argument(
        "--out", type=Path, default=None, help="default bench/results/prefetch_DEVICE.md"
    )
    benchlib.add_common(ap)
    args = ap.parse_args()
    benchlib.smoke(args, books=2, steps=2, rounds=1, batch_tokens=1024)
    threads = benchlib.pin_threads(args.threads)

    from rescorer.lm_models.corpora import read_novels
    from rescorer.lm_models.lstm.context import clear_text_caches
    from rescorer.lm_models.lstm.train import TrainConfig, train

    work = Path(tempfile.mkdtemp(prefix="bench_prefetch_"))
    if args.text is not None:
        blocks = first_blocks(args.text, args.books)
        source = f"the first {len(blocks)} blocks of `{args.text.name}`"
    else:
        novels = benchlib.first_novels(args.books, work / "novels", args.data_dir)
        docs = read_novels(novels)  # the first --books only: read_novels reads every one listed
        blocks = [[" ".join(s) for s in d.sentences] for d in docs]
        source = f"the first {len(blocks)} novels of `corpora/gutenberg`"
    if args.smoke:
        blocks = [b[:300] for b in blocks]
    words = sum(len(line.split()) for b in blocks for line in b)
    with open(work / "books.txt", "w", encoding="utf-8") as f:
        for b in blocks:
            f.write("\n".join(b) + "\n\n")

    def config(previous: bool, prefetch: int) -> TrainConfig:
        data: dict[str, object] = {
            "corpus": "plain",
            "path": "books.txt",
            "plain_documents": "block",
            "split": [0.98, 0.02, 0.0],
            "max_len": 60,
            "vocab_size": 20000,
        }
        model: dict[str, object] = {
            "mode": "unadapted",
            "embed_dim": args.embed_dim,
            "hidden_dim": args.hidden_dim,
            "num_classes": 16,
            "shortlist": 2000,
        }
        if previous:
            data["previous"] = {
                "sentences": 3,
                "encoder": "hash:256",
                "noise": {"substitution": 0.03, "deletion": 0.01, "insertion": 0.01, "seed": 0},
            }
            model.update(mode="concat", context_dim=64)
        return TrainConfig.from_json(
            {
                "data": data,
                "model": model,
                "train": {
                    "epochs": 1,
                    "batch_tokens": args.batch_tokens,
                    "device": args.device,
                    "max_steps_per_epoch": args.steps,
                    "prefetch": prefetch,
                },
            }
        )

    runs = {
        "context, prepared in the loop (prefetch 0)": config(True, 0),
        "context, prepared ahead (prefetch 2)": config(True, 2),
        "no context (the twin), prefetch 2": config(False, 2),
    }
    seconds: dict[str, list[float]] = {name: [] for name in runs}
    tokens: dict[str, int] = {}
    dev: dict[str, set[float]] = {name: set() for name in runs}
    device = ""
    for r in range(args.rounds):
        for i, (name, cfg) in enumerate(runs.items()):
            clear_text_caches()  # each run embeds its texts from cold, as a training run does
            result = train(cfg, work, work / f"run{r}_{i}", progress=False, resume=False)
            (epoch,) = result.epochs
            seconds[name].append(epoch.seconds)
            tokens[name] = epoch.tokens
            dev[name].add(round(epoch.dev_ppl, 6))
            device = result.device
    names = list(runs)
    ctx0, ctx2, twin = (statistics.median(seconds[n]) for n in names)
    embed = embedding_seconds(runs[names[0]], work, args.steps, args.rounds)
    same = dev[names[0]] == dev[names[1]] and len(dev[names[0]]) == 1
    lines = [
        *benchlib.header(
            "Prefetching batches with a `previous` text context (issue 16)",
            threads=threads,
            ratios="vs the twin, how many times faster prefetching makes the run, the shares",
            absolute="loop seconds, tokens/s",
        ),
        f"- Device: {device}",
        f"- Data: {source} ({words:,} words), one block per book; context: the 3 previous "
        "sentences, ASR-like noise, `hash:256`",
        f"- Model: LSTM e={args.embed_dim}, d={args.hidden_dim}, class-factored softmax, "
        f"concat context k=64 (the twin: unadapted); {args.steps} steps of about "
        f"{args.batch_tokens:,} tokens; median of {args.rounds} rounds, interleaved",
        "",
        "| run | loop seconds | tokens/s | vs the twin |",
        "|---|---|---|---|",
        *(
            f"| {n} | {s:.2f} | {tokens[n] / s:,.0f} | {s / twin:.2f}x |"
            for n, s in zip(names, (ctx0, ctx2, twin), strict=True)
        ),
        "",
        f"- Prefetching makes the context run **{ctx0 / ctx2:.2f}x** faster; the context's "
        f"remaining cost over the twin is {100 * (ctx2 / twin - 1):.0f} % "
        f"({100 * (ctx0 / twin - 1):.0f} % in the loop).",
        f"- What the prefetching can hide: encoding the {args.steps} batches' context records "
        f"alone (the `hash:256` embedding, on the CPU, no step) takes {embed:.2f} s, "
        f"{100 * embed / ctx0:.0f} % of the context run's loop in the loop; the rest of its "
        "cost over the twin is the model's own (the context's input to every LSTM step).",
        f"- Dev perplexity equal with and without prefetching: {'yes' if same else 'NO'} "
        f"({sorted(dev[names[0]])} and {sorted(dev[names[1]])}).",
        "",
    ]
    out = args.out or REPO / "bench" / "results" / f"prefetch_{args.device.split(':')[0]}.md"
    shutil.rmtree(work)
    benchlib.write(out, lines)


def embedding_seconds(cfg: Any, work: Path, steps: int, rounds: int) -> float:
    """Median seconds to encode the context records of the first ``steps`` training batches of
    epoch 1, as the trainer's ``prepare`` does, without training."""
    import time

    from rescorer.lm_models.batching import bucket_parts
    from rescorer.lm_models.lstm.context import clear_text_caches
    from rescorer.lm_models.lstm.model import ContextLSTM
    from rescorer.lm_models.lstm.train import model_config, prepare_data

    data = prepare_data(cfg, work)
    model = ContextLSTM(model_config(cfg, data))
    seed = cfg.train.seed * 1000 + 1  # the trainer's epoch-1 seed
    parts = data.train_parts(seed, 1)
    batches = list(bucket_parts(parts, cfg.train.batch_tokens, seed))[:steps]
    times = []
    for _ in range(rounds):
        clear_text_caches()  # training embedded these very texts: a cold cache, as in training
        start = time.perf_counter()
        for batch in batches:
            model.encode_records([e.record for e in batch])
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def first_blocks(path: Path, n: int) -> list[list[str]]:
    """The first ``n`` blocks (runs of non-empty lines) of a text file."""
    blocks: list[list[str]] = [[]]
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                blocks[-1].append(line.strip())
            elif blocks[-1]:
                if len(blocks) == n:
                    break
                blocks.append([])
    return [b for b in blocks if b]


if __name__ == "__main__":
    main()
