"""Evaluating context-aware LMs: perplexity per context value, and generative classification.

Generative classification is Jaech & Ostendorf 2018, eq. 7: a text's class is the context value
under which the model gives it the highest probability, with a uniform prior. Each candidate value
is folded into the weights once (``ContextLSTM.lock``), so scoring under V values costs V plain
LSTM passes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from rescorer.lm_models.batching import Example, bucket_batches, collate
from rescorer.lm_models.corpora import Document
from rescorer.lm_models.lstm.model import ContextLSTM
from rescorer.lm_models.vocab import Vocabulary


@torch.no_grad()
def document_logprobs(
    model: ContextLSTM,
    vocab: Vocabulary,
    docs: Sequence[Document],
    records: Sequence[Mapping[str, Any] | None],
    device: torch.device,
    batch_tokens: int = 8192,
) -> tuple[np.ndarray, np.ndarray]:
    """Natural-log probability of each document under its record, and its token count
    (``</s>`` of every sentence included)."""
    if len(records) != len(docs):
        raise ValueError(f"got {len(records)} records for {len(docs)} documents")
    model.eval()
    examples: list[Example] = []
    owner: list[int] = []
    for d, (doc, record) in enumerate(zip(docs, records, strict=True)):
        for sentence in doc.sentences:
            inputs, targets = vocab.encode_sentence(sentence)
            examples.append(Example(tuple(inputs), tuple(targets), record))
            owner.append(d)
    totals = np.zeros(len(docs))
    tokens = np.zeros(len(docs), dtype=np.int64)
    owners = np.array(owner)
    for idxs in bucket_batches([len(e) for e in examples], batch_tokens, seed=0, shuffle=False):
        batch = collate([examples[i] for i in idxs], vocab.eos_id).to(device)
        recs = list(batch.records) if model.adaptive else None
        logp = model.score(batch.inputs, batch.targets, batch.lengths, recs).sum(1)  # (N,)
        np.add.at(totals, owners[idxs], logp.double().cpu().numpy())
        np.add.at(tokens, owners[idxs], batch.lengths.cpu().numpy())
    return totals, tokens


@dataclass(frozen=True)
class PerplexityReport:
    """Perplexity overall and per value of one context field."""

    perplexity: float
    tokens: int
    # value -> (perplexity, tokens)
    per_value: Mapping[str, tuple[float, int]]


def perplexity(
    model: ContextLSTM,
    vocab: Vocabulary,
    docs: Sequence[Document],
    field: str | None,
    device: torch.device,
) -> PerplexityReport:
    """Perplexity of ``docs``, each under its own value of ``field`` (None: no context)."""
    records = [None if field is None else {field: d.fields.get(field)} for d in docs]
    if not model.adaptive:
        records = [None] * len(docs)
    totals, tokens = document_logprobs(model, vocab, docs, records, device)
    per_value: dict[str, tuple[float, int]] = {}
    if field is not None:
        for value in sorted({d.fields.get(field, "") for d in docs}):
            sel = np.array([d.fields.get(field, "") == value for d in docs])
            n = int(tokens[sel].sum())
            per_value[value] = (math.exp(-totals[sel].sum() / max(n, 1)), n)
    n = int(tokens.sum())
    return PerplexityReport(math.exp(-totals.sum() / max(n, 1)), n, per_value)


@dataclass(frozen=True)
class ClassificationReport:
    """Generative classification of documents by a context field."""

    values: tuple[str, ...]
    accuracy: float
    # confusion[i][j]: documents of true value i classified as value j.
    confusion: tuple[tuple[int, ...], ...]
    predictions: tuple[str, ...]

    def table(self) -> str:
        width = max(len(v) for v in self.values)
        head = " " * width + " | " + " ".join(f"{v[:6]:>6s}" for v in self.values)
        rows = [head, "-" * len(head)]
        for v, row in zip(self.values, self.confusion, strict=True):
            rows.append(f"{v:>{width}s} | " + " ".join(f"{c:6d}" for c in row))
        return "\n".join(rows)


def value_scores(
    model: ContextLSTM,
    vocab: Vocabulary,
    docs: Sequence[Document],
    field: str,
    values: Sequence[str],
    device: torch.device,
) -> np.ndarray:
    """(documents, values): natural-log p(document | field = value), one locked model per value."""
    if not model.adaptive:
        raise ValueError("an unadapted model gives every value the same score: nothing to classify")
    scores = np.zeros((len(docs), len(values)))
    for j, value in enumerate(values):
        locked = model.lock({field: value})
        scores[:, j], _ = document_logprobs(locked, vocab, docs, [None] * len(docs), device)
    return scores


def report_from_scores(
    scores: np.ndarray, truths: Sequence[str | None], values: Sequence[str]
) -> ClassificationReport:
    """Eq. 7 from a (texts, values) score matrix: argmax per row, uniform prior."""
    index = {v: i for i, v in enumerate(values)}
    pred = scores.argmax(axis=1)
    confusion = np.zeros((len(values), len(values)), dtype=np.int64)
    for row, (truth, p) in enumerate(zip(truths, pred, strict=True)):
        t = index.get(truth) if truth is not None else None
        if t is None:
            raise ValueError(f"text {row} has the value {truth!r}, not one of {list(values)}")
        confusion[t, p] += 1
    return ClassificationReport(
        values=tuple(values),
        accuracy=float(np.trace(confusion)) / max(len(truths), 1),
        confusion=tuple(tuple(int(c) for c in row) for row in confusion),
        predictions=tuple(values[p] for p in pred),
    )


def classify(
    model: ContextLSTM,
    vocab: Vocabulary,
    docs: Sequence[Document],
    field: str,
    values: Sequence[str],
    device: torch.device,
) -> ClassificationReport:
    """Eq. 7: argmax over ``values`` of p(document | value), uniform prior."""
    scores = value_scores(model, vocab, docs, field, values, device)
    return report_from_scores(scores, [d.fields.get(field) for d in docs], values)
