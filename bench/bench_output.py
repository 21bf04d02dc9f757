"""Training cost of the LSTM's output layer: full softmax vs the class-factored (shortlist) one.

The same word LSTM as the LibriSpeech recipe (Unadapted, e=128, d=256, one layer) on the same
batches of real text (the recipe's LibriSpeech-normalised novels), one thread, at V = 20k and
50k. Measured in one run, as ratios:

  1. training tokens/s (forward, backward, Adam step) of each output layer, timed interleaved
     (A B A B ...; the median of the rounds), and the time per epoch of the novels it implies;
  2. the dev perplexity each reaches in the same CPU time of training (exact, normalised
     probabilities for both: the class-factored model sums to 1 over the vocabulary).

Times are CPU seconds of this process (``time.process_time``) on ``--threads`` threads
(default 1): a busy machine slows the wall clock, not the work done in a CPU-second.

    .venv/bin/python bench/bench_output.py [--text books.txt] [--seconds 240] [--smoke]

The text defaults to the LibriSpeech recipe's ``exp/lm/books.txt`` (its stage 1 makes it); a
``--smoke`` run uses the first 3,000 sentences of the Gutenberg novels instead.
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchlib  # noqa: E402, I001  (first of the project's: the load average at the start)

from rescorer.core.data import REPO_ROOT
from rescorer.lm_models.lstm.model import ContextLSTM, LSTMConfig
from rescorer.lm_models.lstm.train import LossModule
from rescorer.lm_models.word_classes import shortlist_classes

UNK, BOS, EOS = 0, 1, 2
BOOKS = benchlib.RECIPE_LM / "books.txt"
BOOK_WORDS = 13_599_766  # words of the 96 novels (recipes/librispeech_nbest/RESULTS.md)


def read_sentences(path: Path, limit: int) -> list[list[str]]:
    out = []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            words = line.split()
            if words:
                out.append(words)
            if len(out) >= limit:
                break
    return out


def load_split(
    text: Path, limit: int, threads: int, smoke: bool = False
) -> tuple[list[list[str]], list[int], list[int]]:
    """The first ``limit`` sentences of ``text``, shuffled (seed 0) into 2,000 dev rows (a fifth
    of a smaller text) and the training rows; every runtime pinned to ``threads``. Exits with a
    message when ``text`` is missing. A smoke run given the default (the recipe's text, of the
    full data) makes a stand-in instead."""
    if smoke and text == BOOKS:
        with tempfile.TemporaryDirectory() as tmp:
            sentences = read_sentences(benchlib.books_text(Path(tmp), limit), limit)
    elif not text.is_file():
        raise SystemExit(f"{text}: not found (run the LibriSpeech recipe's stage 1)")
    else:
        sentences = read_sentences(text, limit)
    benchlib.pin_threads(threads)
    order = list(range(len(sentences)))
    random.Random(0).shuffle(order)
    dev = min(2000, len(order) // 5)
    return sentences, order[:dev], order[dev:]


class Corpus:
    """Sentences as id tensors over the V - 3 most frequent words (+ <unk>, <s>, </s>)."""

    def __init__(self, sentences: Sequence[Sequence[str]], vocab_size: int) -> None:
        counts = Counter(w for s in sentences for w in s)
        words = [w for w, _ in counts.most_common(vocab_size - 3)]
        self.tokens = ["<unk>", "<s>", "</s>", *words]  # the vocabulary, id order
        index = {w: i + 3 for i, w in enumerate(words)}
        self.ids = [[index.get(w, UNK) for w in s] for s in sentences]
        unk = sum(c for w, c in counts.items() if w not in index)
        self.counts = [unk, 0, len(sentences)] + [counts[w] for w in words]
        self.vocab_size = len(self.counts)

    def batches(self, rows: Sequence[int], batch_sentences: int, max_len: int):
        """(inputs, targets, mask) batches of whole sentences (<s> w1 .. wn / w1 .. wn </s>)."""
        for lo in range(0, len(rows), batch_sentences):
            sents = [self.ids[r][:max_len] for r in rows[lo : lo + batch_sentences]]
            t = max(len(s) for s in sents) + 1
            x = torch.full((len(sents), t), EOS)
            y = torch.full((len(sents), t), EOS)
            mask = torch.zeros(len(sents), t)
            for i, s in enumerate(sents):
                x[i, : len(s) + 1] = torch.tensor([BOS, *s])
                y[i, : len(s) + 1] = torch.tensor([*s, EOS])
                mask[i, : len(s) + 1] = 1
            yield x, y, mask


def make_model(corpus: Corpus, layout: str, seed: int) -> ContextLSTM:
    classes: tuple[int, ...] = ()
    if layout != "full":
        _, shortlist, clusters = layout.split(":")
        counts = list(corpus.counts)
        counts[BOS] = 0  # never predicted: in the last cluster, not a class of its own
        classes = tuple(shortlist_classes(counts, int(shortlist), int(clusters)))
    torch.manual_seed(seed)
    cfg = LSTMConfig(
        vocab_size=corpus.vocab_size, embed_dim=128, hidden_dim=256, word_classes=classes
    )
    return ContextLSTM(cfg)


# (corpus, name, seed) -> a model to train: here a layout, in bench_arch.py an architecture
ModelFactory = Callable[[Corpus, str, int], torch.nn.Module]


def throughput(
    corpus: Corpus,
    layouts: Sequence[str],
    rows: Sequence[int],
    rounds: int,
    factory: ModelFactory | None = None,
) -> dict[str, float]:
    """Median training tokens per CPU-second per layout over ``rounds`` interleaved rounds."""
    batches = list(corpus.batches(rows, 64, 40))
    runs = {}
    for layout in layouts:
        model = (factory or make_model)(corpus, layout, 0)
        runs[layout] = (LossModule(model), torch.optim.Adam(model.parameters(), lr=1e-3))
    rates: dict[str, list[float]] = {name: [] for name in layouts}
    tokens = sum(float(m.sum()) for _, _, m in batches)
    for r in range(rounds + 1):
        for layout in layouts if r % 2 == 0 else reversed(layouts):
            loss_module, opt = runs[layout]
            t0 = time.process_time()
            for x, y, mask in batches:
                loss = loss_module(x, y, mask, None)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
            if r > 0:  # round 0 warms up
                rates[layout].append(tokens / (time.process_time() - t0))
    return {name: statistics.median(v) for name, v in rates.items()}


@torch.no_grad()
def dev_perplexity(model: torch.nn.Module, corpus: Corpus, rows: Sequence[int]) -> float:
    model.eval()
    total, tokens = 0.0, 0.0
    for x, y, mask in corpus.batches(rows, 128, 60):
        total += float(model.score(x, y, mask.sum(1).long()).sum())
        tokens += float(mask.sum())
    model.train()
    return math.exp(-total / tokens)


def same_time_perplexity(
    corpus: Corpus,
    layout: str,
    train_rows: Sequence[int],
    dev_rows: Sequence[int],
    seconds: float,
    factory: ModelFactory | None = None,
    lr: float = 2e-3,
) -> tuple[float, int]:
    """Dev perplexity after ``seconds`` of training, CPU time of this process (and the tokens
    trained on)."""
    model = (factory or make_model)(corpus, layout, 0)
    loss_module = LossModule(model)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    t0, seen = time.process_time(), 0
    for x, y, mask in corpus.batches(train_rows, 64, 40):
        loss = loss_module(x, y, mask, None)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
        opt.step()
        seen += int(mask.sum())
        if time.process_time() - t0 >= seconds:
            break
    return dev_perplexity(model, corpus, dev_rows), seen


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--text", type=Path, default=BOOKS)
    ap.add_argument("--sentences", type=int, default=400_000, help="Sentences read from --text.")
    ap.add_argument("--sizes", default="20000,50000", help="Vocabulary sizes V.")
    ap.add_argument("--layouts", default="full,shortlist:2000:8", help="full | shortlist:K:C")
    ap.add_argument("--rounds", type=int, default=3, help="Interleaved timing rounds.")
    ap.add_argument("--seconds", type=float, default=240.0, help="Training time per model (2).")
    ap.add_argument("--out", type=Path, default=REPO_ROOT / "bench" / "results" / "output.md")
    benchlib.add_common(ap)
    args = ap.parse_args()
    benchlib.smoke(args, sentences=1000, sizes="2000", layouts="full,shortlist:200:4",
                   rounds=1, seconds=0.5)  # fmt: skip
    layouts = args.layouts.split(",")
    sentences, dev_rows, train_rows = load_split(
        args.text, args.sentences, args.threads, args.smoke
    )
    lines = [
        *benchlib.header(
            "Output layers: full vs class-factored softmax in LSTM training",
            threads=args.threads,
            ratios="x full; the same-CPU-time perplexities compare across machines of like "
            "speed only",
            absolute="tokens/s (per CPU-second), the epoch hours, tokens trained",
        ),
        f"- Text: {len(sentences):,} sentences of `{args.text.name}` (shuffled; 2,000 held out "
        "for dev); model: Unadapted LSTM e=128, d=256, one layer (the LibriSpeech recipe's)",
        "- Layouts: `full` = softmax over V; `shortlist:K:C` = class-factored, the K most "
        "frequent words each a class (their tied word logits) and the rest in C clusters of equal "
        "count mass (exact, normalised; `rescorer/lm_models/output.py`)",
        "",
        "| V | layout | train tokens/s | x full | epoch of the novels (13.6 M words) "
        f"| dev ppl after {args.seconds:g} s | tokens in {args.seconds:g} s |",
        "|---|---|---|---|---|---|---|",
    ]
    for size in (int(s) for s in args.sizes.split(",")):
        corpus = Corpus(sentences, size)
        rates = throughput(corpus, layouts, train_rows[: 64 if args.smoke else 400], args.rounds)
        for layout in layouts:
            ppl, seen = same_time_perplexity(corpus, layout, train_rows, dev_rows, args.seconds)
            hours = BOOK_WORDS / rates[layout] / 3600
            lines.append(
                f"| {corpus.vocab_size:,} | {layout} | {rates[layout]:,.0f} | "
                f"{rates[layout] / rates[layouts[0]]:.2f} | {hours:.1f} h | {ppl:.1f} | {seen:,} |"
            )
            print(lines[-1], flush=True)
    lines += [
        "",
        "Tokens/s: tokens per CPU-second, median of the interleaved rounds on the same 400 "
        "sentences. The epoch time is words / tokens/s at one thread. Same-time perplexity: each "
        "model trains from the same initialisation on the same batches for the same CPU time, "
        "then scores the dev "
        "sentences with its exact probabilities (`</s>` included, <unk> as a word).",
        "",
    ]
    benchlib.write(args.out, lines)


if __name__ == "__main__":
    main()
