"""The CPU cost of a `previous` text context in training (issue 16's lease runs).

Training an LSTM with ``data.previous`` (the K previous sentences of each sentence, with
ASR-like word errors drawn anew every epoch, embedded by a frozen ``hash:DIM`` encoder) adds
two CPU costs to each epoch, both measured here on sentences of the novels in their book order:

1. deriving the epoch's noisy previous texts
   (:func:`rescorer.lm_models.context_text.previous_texts`), once per epoch, reported per million
   words of text;
2. embedding each batch's texts (:class:`rescorer.lm_models.text_encoders.HashEmbedder`), once per
   batch of ``--batch-tokens`` tokens (the lease config's 32,768), reported per batch and per
   200-step epoch (the lease config's ``max_steps_per_epoch``).

Row 2 is timed for the embedder as it is and for its earlier form (one Python call per word to
find its row, kept here as ``PerWordHashEmbedder``), interleaved over ``--rounds`` rounds, in
one process, ``--threads`` threads (default 1); the ratio is within this run. The vectors of
both are checked equal.

    .venv/bin/python bench/bench_context_text.py [--books 3] [--rounds 5] [--batch-tokens 32768]
        [--threads 1] [--smoke]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
import benchlib  # noqa: E402  (first: the load average at the start)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--books", type=int, default=3, help="novels read (in titles.tsv order)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--batch-tokens", type=int, default=32768)
    ap.add_argument("--sentences", type=int, default=3, help="previous sentences (K)")
    ap.add_argument("--dim", type=int, default=256)
    ap.add_argument("--data-dir", type=Path, default=None)
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "context_text.md")
    benchlib.add_common(ap)
    args = ap.parse_args()
    benchlib.smoke(args, books=1, rounds=1, batch_tokens=2048)
    threads = benchlib.pin_threads(args.threads)

    from rescorer.lm_models.context_text import WordNoise, WordSampler, previous_texts
    from rescorer.lm_models.corpora import read_novels
    from rescorer.lm_models.text_encoders import _WORD_RE, HashEmbedder

    class PerWordHashEmbedder(HashEmbedder):
        """The earlier form of finding the words' rows: a Python call (``_id``) per word."""

        def _word_ids(self, texts):  # type: ignore[no-untyped-def]
            rows = [[self._id(w) for w in _WORD_RE.findall(t.lower())] for t in texts]
            counts = np.fromiter((len(r) for r in rows), np.int64, len(texts))
            return counts, np.fromiter((i for r in rows for i in r), np.int64, int(counts.sum()))

    with tempfile.TemporaryDirectory() as tmp:  # read_novels reads every novel listed
        docs = read_novels(benchlib.first_novels(args.books, Path(tmp), args.data_dir))
    words = sum(d.n_tokens for d in docs)
    counts = Counter(w for d in docs for s in d.sentences for w in s)
    noise = WordNoise(substitution=0.03, deletion=0.01, insertion=0.01, seed=0)
    sampler = WordSampler(counts)

    derive = []
    for epoch in range(1, args.rounds + 1):
        start = time.perf_counter()
        texts = [t for d in docs for t in previous_texts(d, args.sentences, noise, sampler, epoch)]
        derive.append(time.perf_counter() - start)
    # batches of whole sentences, about batch_tokens tokens each (words + </s>), in book order
    lengths = [len(s) + 1 for d in docs for s in d.sentences]
    batches, cur, size = [], [], 0
    for text, n in zip(texts, lengths, strict=True):
        cur.append(text or "")
        size += n
        if size >= args.batch_tokens:
            batches.append(cur)
            cur, size = [], 0
    batches = batches[:10] if args.smoke else batches
    new, old = HashEmbedder(args.dim), PerWordHashEmbedder(args.dim)
    for b in batches[:2]:  # both warm: the words of two batches hashed once
        assert np.array_equal(new.embed(b), old.embed(b))
    t_new: list[float] = []
    t_old: list[float] = []
    for _ in range(args.rounds):
        for emb, times in ((new, t_new), (old, t_old)):
            start = time.perf_counter()
            for b in batches:
                emb.embed(b)
            times.append((time.perf_counter() - start) / len(batches))
    per_new, per_old = statistics.median(t_new), statistics.median(t_old)
    mean_words = statistics.mean(len(t.split()) for b in batches for t in b)
    lines = [
        *benchlib.header(
            "The CPU cost of a `previous` text context in training (issue 16)",
            threads=threads,
            ratios="how many times faster the embedding is than its earlier form",
            absolute="seconds, per 200-step epoch",
        ),
        f"- Text: the first {len(docs)} novels of `corpora/gutenberg` ({len(texts):,} sentences, "
        f"{words:,} words), each sentence's {args.sentences} previous sentences of its book "
        f"(mean {mean_words:.1f} words a text), noise 3 % sub, 1 % del, 1 % ins; "
        f"{len(batches)} batches of about {args.batch_tokens:,} tokens "
        f"({len(texts) // max(len(batches), 1):,} texts each); median of {args.rounds} rounds.",
        "",
        "| cost | seconds | per 200-step epoch (s) |",
        "|---|---|---|",
        f"| derive the epoch's noisy previous texts, per 1M words | "
        f"{statistics.median(derive) * 1e6 / words:.2f} | once per epoch |",
        f"| embed one batch's texts, `hash:{args.dim}` as it is | {per_new:.3f} | "
        f"{200 * per_new:.1f} |",
        f"| the same, one Python call per word (the earlier form) | {per_old:.3f} | "
        f"{200 * per_old:.1f} |",
        "",
        f"- Embedding a batch's previous texts is **{per_old / per_new:.1f}x** faster than "
        f"before, the vectors equal. On the H200 lease of 2026-11-27 a twin epoch (200 steps, "
        f"no context) took 19-23 s and the context run's 43-49 s.",
        "",
    ]
    benchlib.write(args.out, lines)


if __name__ == "__main__":
    main()
