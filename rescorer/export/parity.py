"""Parity of an ONNX export with the PyTorch model it came from.

:func:`check_parity` runs the export with ONNX Runtime (CPU) and the model with PyTorch on the same
random batches (batch sizes 1..4 by default, unequal lengths, random context ids for multi-context
exports, random context vectors, a row each, for the vector kinds, random initial states for step
models) and reports the largest absolute difference of
any output: log-probabilities, next states, per-token and per-sentence scores. An export in an
ASR model's token ids (``token_ids`` = ``asr``) is fed that set's ids and compared through its
tables (:mod:`rescorer.lm_models.asr_tokens`), log 0 (the blank) where the model has no unit. The
PyTorch side goes through ``ContextLSTM.forward`` / ``ContextLSTM.score`` with the context *records*
(its own adaptation path), not through the folded weights the export was built from; for the vector
kinds through ``ContextLSTM.adapt_embedding`` of the same vectors.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rescorer.core.io import read_tokens
from rescorer.export.format import NLL_KIND, SCORE_TOKEN_KIND
from rescorer.export.runtime import OnnxMeta, create_session
from rescorer.lm_models.asr_tokens import AsrTokens
from rescorer.lm_models.lstm.model import ContextLSTM
from rescorer.lm_models.vocab import BOS_ID, EOS_ID

TOLERANCE = 1e-4


@dataclass(frozen=True)
class ParityReport:
    """Largest ONNX-vs-PyTorch difference over the batches compared."""

    # The export kind.
    kind: str
    # Largest absolute difference of any output value (log-probs in nats, states).
    max_abs_diff: float
    # Batches compared.
    batches: int
    # The tolerance ``ok`` compares against.
    tolerance: float = TOLERANCE

    @property
    def ok(self) -> bool:
        return self.max_abs_diff <= self.tolerance

    def describe(self) -> str:
        verdict = "ok" if self.ok else "FAILED"
        return (
            f"parity with PyTorch {verdict}: max abs difference {self.max_abs_diff:.2e} "
            f"(tolerance {self.tolerance:.0e}) over {self.batches} {self.kind} batches"
        )


def output_diff(a: np.ndarray, b: torch.Tensor | np.ndarray) -> float:
    """Largest |a - b| of an ONNX output ``a`` and its PyTorch value ``b`` (log 0 must be log 0
    in both: inf otherwise); a shape mismatch is a ValueError."""
    b_np = b.detach().to(torch.float32).cpu().numpy() if isinstance(b, torch.Tensor) else b
    if a.shape != b_np.shape:
        raise ValueError(f"parity: ONNX output shape {a.shape} != PyTorch shape {b_np.shape}")
    if not a.size:
        return 0.0
    never_a, never_b = np.isneginf(a), np.isneginf(b_np)  # log 0 (e.g. the blank, <s>)
    if not np.array_equal(never_a, never_b):
        return float("inf")
    finite = ~never_a
    return float(np.abs(a[finite] - b_np[finite]).max()) if finite.any() else 0.0


def _vector_diff(
    model: ContextLSTM,
    session: Any,
    meta: OnnxMeta,
    n: int,
    max_len: int,
    rng: np.random.Generator,
) -> float:
    """A vector kind on ``n`` rows, each its own random context embedding (ReLU-like: >= 0)."""
    v, layers, d = meta.vocab_size, meta.num_layers, meta.hidden_size
    c = np.abs(rng.standard_normal((n, meta.context_dim))).astype(np.float32)
    adapted = model.adapt_embedding(torch.from_numpy(c))
    dtype = model.b_out.dtype
    if meta.scorer:
        words = rng.integers(0, max_len, n)
        x = np.full((n, int(words.max()) + 2), meta.pad_id, dtype=np.int64)
        x[:, 0] = meta.sos_id
        for j, k in enumerate(words):
            x[j, 1 : 1 + k] = rng.integers(3, v, k)
            x[j, 1 + k] = meta.eos_id
        lens = (words + 2).astype(np.int64)
        tok, sent = session.run(None, {"x": x, "x_lens": lens, "context_vector": c})
        log_probs, _ = model(torch.from_numpy(x[:, :-1]), None, adapted=adapted)
        picked = log_probs.gather(2, torch.from_numpy(x[:, 1:]).unsqueeze(2)).squeeze(2)
        valid = torch.arange(x.shape[1] - 1).unsqueeze(0) < torch.from_numpy(lens - 1).unsqueeze(1)
        ref = torch.where(valid, picked, torch.zeros_like(picked))
        return max(output_diff(tok, ref), output_diff(sent, ref.sum(dim=1)))
    x = rng.integers(0, v, (n, int(rng.integers(1, max_len + 1)))).astype(np.int64)
    h0 = (rng.standard_normal((layers, n, d)) * 0.5).astype(np.float32)
    c0 = (rng.standard_normal((layers, n, d)) * 0.5).astype(np.float32)
    feed = {"x": x, "h0": h0, "c0": c0, "context_vector": c}
    log_probs, h, m = session.run(None, feed)
    state = (torch.from_numpy(h0).to(dtype), torch.from_numpy(c0).to(dtype))
    ref, (ref_h, ref_m) = model(torch.from_numpy(x), None, state, adapted=adapted)
    return max(output_diff(log_probs, ref), output_diff(h, ref_h), output_diff(m, ref_m))


def _asr_tokens(meta: OnnxMeta, path: Path) -> AsrTokens | None:
    """The ASR token set of an export in ASR ids (its vocabulary file), else None."""
    if meta.token_ids != "asr":
        return None
    vocab = path.parent / meta.vocab_file
    return AsrTokens(tuple(read_tokens(vocab)), str(vocab))


@torch.no_grad()
def check_parity(
    model: ContextLSTM,
    path: str | os.PathLike[str],
    batch_sizes: Sequence[int] = (1, 2, 3, 4),
    max_len: int = 7,
    seed: int = 0,
    tolerance: float = TOLERANCE,
) -> ParityReport:
    """Compare the export at ``path`` with ``model`` on random batches (see the module doc)."""
    path = Path(path)
    session, _ = create_session(path, "cpu")
    meta = OnnxMeta.from_props(dict(session.get_modelmeta().custom_metadata_map), path)
    asr = _asr_tokens(meta, path)
    units = meta.vocab_size if asr is None else len(asr.lm_tokens())
    if units != model.config.vocab_size:
        raise ValueError(
            f"{path}: {units} units, but the model's vocab_size is {model.config.vocab_size}"
        )
    # ASR-id exports: the ids a decoder feeds (no blank) and the tables between them and the
    # model's units (rescorer.lm_models.asr_tokens).
    fed = None if asr is None else np.array([*asr.regular_ids, asr.sos_id], dtype=np.int64)
    to_model = None if asr is None else asr.input_map()
    model = model.eval()
    dtype = model.b_out.dtype
    rng = np.random.default_rng(seed)
    v, layers, d = meta.vocab_size, meta.num_layers, meta.hidden_size
    worst = 0.0
    for n in batch_sizes:
        cids = rng.integers(0, len(meta.contexts), n) if meta.multi else np.zeros(n, np.int64)
        records = [meta.contexts[c] for c in cids] if model.adaptive else None
        if meta.vector:
            worst = max(worst, _vector_diff(model, session, meta, n, max_len, rng))
        elif meta.kind == SCORE_TOKEN_KIND:  # the next token after x's last position
            length = int(rng.integers(1, max_len + 1))
            x = (
                rng.integers(0, v, (n, length)) if fed is None else rng.choice(fed, (n, length))
            ).astype(np.int64)
            h0 = (rng.standard_normal((layers, n, d)) * 0.5).astype(np.float32)
            c0 = (rng.standard_normal((layers, n, d)) * 0.5).astype(np.float32)
            log_probs, h, m = session.run(None, {"x": x, "h0": h0, "c0": c0})
            state = (torch.from_numpy(h0).to(dtype), torch.from_numpy(c0).to(dtype))
            x_model = x if to_model is None else to_model[x]
            ref, (ref_h, ref_m) = model(torch.from_numpy(x_model), records, state)
            last = ref[:, -1].to(torch.float32).numpy()  # (N, V_model)
            if asr is not None:  # per ASR id: its unit's log-prob, or log 0
                out = asr.output_map()
                last = np.where(out >= 0, last[:, np.maximum(out, 0)], -np.inf)  # (N, V_asr)
            worst = max(
                worst, output_diff(log_probs, last), output_diff(h, ref_h), output_diff(m, ref_m)
            )
        elif meta.kind == NLL_KIND:  # tokens alone, 0-padded past x_lens (and a padding column)
            words = rng.integers(0, max_len, n)
            x = np.zeros((n, int(words.max()) + 1), dtype=np.int64)
            full = np.full((n, int(words.max()) + 2), EOS_ID, dtype=np.int64)  # model ids
            full[:, 0] = BOS_ID
            for j, k in enumerate(words):
                x[j, :k] = rng.integers(3, v, k) if fed is None else rng.choice(fed, k)
                full[j, 1 : 1 + k] = x[j, :k] if to_model is None else to_model[x[j, :k]]
                full[j, 1 + k] = EOS_ID
            (nll,) = session.run(None, {"x": x, "x_lens": words.astype(np.int64)})
            ft = torch.from_numpy(full)
            ref = model.score(ft[:, :-1], ft[:, 1:], torch.from_numpy(words + 1), records)
            worst = max(worst, output_diff(nll, -ref.sum(dim=1)))
        elif meta.scorer:
            words = rng.integers(0, max_len, n)  # sentence lengths, 0 allowed
            width = int(words.max()) + 2
            x = np.full((n, width), meta.pad_id, dtype=np.int64)
            x[:, 0] = meta.sos_id
            for j, k in enumerate(words):
                x[j, 1 : 1 + k] = rng.integers(3, v, k)
                x[j, 1 + k] = meta.eos_id
            lens = (words + 2).astype(np.int64)
            feed = {"x": x, "x_lens": lens}
            if meta.multi:
                feed["context_id"] = cids.astype(np.int64)
            tok, sent = session.run(None, feed)
            xt = torch.from_numpy(x)
            ref = model.score(xt[:, :-1], xt[:, 1:], torch.from_numpy(lens - 1), records)
            worst = max(worst, output_diff(tok, ref), output_diff(sent, ref.sum(dim=1)))
        else:
            length = int(rng.integers(1, max_len + 1))
            x = rng.integers(0, v, (n, length)).astype(np.int64)
            h0 = (rng.standard_normal((layers, n, d)) * 0.5).astype(np.float32)
            c0 = (rng.standard_normal((layers, n, d)) * 0.5).astype(np.float32)
            feed = {"x": x, "h0": h0, "c0": c0}
            if meta.multi:
                feed["context_id"] = cids.astype(np.int64)
            log_probs, h, m = session.run(None, feed)
            state = (torch.from_numpy(h0).to(dtype), torch.from_numpy(c0).to(dtype))
            ref, (ref_h, ref_m) = model(torch.from_numpy(x), records, state)
            worst = max(
                worst, output_diff(log_probs, ref), output_diff(h, ref_h), output_diff(m, ref_m)
            )
    return ParityReport(meta.kind, worst, len(batch_sizes), tolerance)
