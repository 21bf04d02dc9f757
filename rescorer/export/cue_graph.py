"""Export a CUE checkpoint (:mod:`rescorer.lm_models.cue.model`) to ONNX with the CUE vector as an
input.

The context side of CUE runs once per context: its strings are embedded by the frozen string
encoder and folded into one CUE vector (:meth:`rescorer.lm_models.cue.model.CUELM.cue_vectors`, or
``rescorer cue-vectors``), which a decoder keeps beside the utterance. The exported graph is the
rest: the frozen sentence encoder and the decoder, for any batch of sentences and their vectors.

==========  ============================================================================
input       ``x`` (N, L) int64: ``<s> w1 .. wn </s>`` padded (any id; padding is masked)
            ``x_lens`` (N,) int64: n + 2
            ``cue`` (N, D) float32: the CUE vector of each sentence's context
output      ``log_probs`` (N, L, V): ln P(next unit | <s> .. x_t, context) at every position
            ``token_logprobs`` (N, L-1): ln P(x_{t+1} | ..), 0 beyond each sentence
            ``sentence_logprob`` (N,): their sum (</s> included)
==========  ============================================================================

Metadata properties follow :mod:`rescorer.export.exporter`: ``model_type`` (``cue``), ``format``,
``format_version``, ``export_kind`` (``cue-scorer``), ``vocab_size``, ``sos_id``, ``eos_id``,
``unk_id``, ``pad_id``, ``cue_dim``, ``sentence_encoder`` (``transformer``/``lstm``),
``embedder`` (the string encoder's spec), ``context_fields`` (JSON list of [field, label]),
``vocab_file`` (one token per line beside the model), ``units`` (``word``, or ``subword``: the
vocabulary is a tokenizer's pieces, a word's score the sum of its pieces', and the tokenizer is
written beside as ``<name>.tokenizer.model``, named by ``tokenizer_file``), ``log_base`` (``e``).
Files are written to temporary names in the destination folder and renamed into place. All
scores are natural logs.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import torch
from torch import Tensor, nn

from rescorer.export.format import CUE_KIND as EXPORT_KIND
from rescorer.export.format import FORMAT, FORMAT_VERSION, LOG_BASE
from rescorer.export.parity import TOLERANCE, ParityReport, output_diff
from rescorer.lm_models.cue.model import CUELM, PAD_ID, CUEModel
from rescorer.lm_models.vocab import BOS_ID, EOS_ID, UNK_ID

logger = logging.getLogger(__name__)

OPSET = 17
INPUTS = ("x", "x_lens", "cue")
OUTPUTS = ("log_probs", "token_logprobs", "sentence_logprob")


class CUEScorer(nn.Module):
    """The exported computation (see the module docstring), in PyTorch."""

    def __init__(self, model: CUEModel) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: Tensor, x_lens: Tensor, cue: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        log_probs = self.model(x, cue)
        nxt = x[:, 1:]
        tok = log_probs[:, :-1].gather(2, nxt.unsqueeze(-1)).squeeze(-1)
        pos = torch.arange(nxt.shape[1], device=x.device).unsqueeze(0)
        valid = pos < (x_lens.unsqueeze(1) - 1)
        tok = torch.where(valid, tok, torch.zeros_like(tok))
        return log_probs, tok, tok.sum(dim=1)


@dataclass(frozen=True)
class CUEExportResult:
    """What :func:`export_cue` wrote."""

    # The .onnx file and the vocabulary file beside it.
    model_path: Path
    vocab_path: Path
    # The metadata properties written into the model.
    metadata: dict[str, str]


def _example(model: CUEModel) -> tuple[Tensor, Tensor, Tensor]:
    x = torch.tensor(
        [[BOS_ID, 5 % model.config.vocab_size, EOS_ID, PAD_ID], [BOS_ID, 3, 4, EOS_ID]]
    )
    return x, torch.tensor([3, 4]), torch.zeros(2, model.config.dim)


def _export(model: CUEModel, path: str, opset: int) -> None:
    torch.onnx.export(
        CUEScorer(model),
        _example(model),
        path,
        input_names=list(INPUTS),
        output_names=list(OUTPUTS),
        dynamic_axes={
            "x": {0: "N", 1: "L"},
            "x_lens": {0: "N"},
            "cue": {0: "N"},
            "log_probs": {0: "N", 1: "L"},
            "token_logprobs": {0: "N", 1: "L-1"},
            "sentence_logprob": {0: "N"},
        },
        opset_version=opset,
        dynamo=False,
    )


def export_cue(lm: CUELM, out: str | os.PathLike[str], opset: int = OPSET) -> CUEExportResult:
    """Write ``lm`` (sentence encoder + decoder) to ``out`` (.onnx) and its vocabulary beside."""
    out = Path(out)
    if out.suffix != ".onnx":
        raise ValueError(f"expected an output path ending in .onnx, got {out}")
    if opset < OPSET:
        raise ValueError(f"opset: expected an integer >= {OPSET}, got {opset}")
    model = lm.model.eval()
    cfg = model.config
    vocab_path = out.with_suffix(".vocab.txt")
    meta = {
        "model_type": "cue",
        "format": FORMAT,
        "format_version": str(FORMAT_VERSION),
        "export_kind": EXPORT_KIND,
        "vocab_size": str(cfg.vocab_size),
        "sos_id": str(BOS_ID),
        "eos_id": str(EOS_ID),
        "unk_id": str(UNK_ID),
        "pad_id": str(PAD_ID),
        "cue_dim": str(cfg.dim),
        "sentence_encoder": cfg.sentence.kind,
        "embedder": cfg.embedder,
        "context_fields": json.dumps([list(p) for p in cfg.context_fields]),
        "vocab_file": vocab_path.name,
        "units": "word" if lm.tokenizer is None else "subword",
        "log_base": LOG_BASE,
    }
    tokenizer_path = out.with_suffix(".tokenizer.model")
    if lm.tokenizer is not None:
        meta["tokenizer_file"] = tokenizer_path.name
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_model = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".onnx", dir=out.parent)
    os.close(fd)
    fd, tmp_vocab = tempfile.mkstemp(prefix=f".{vocab_path.name}.", dir=out.parent)
    os.close(fd)
    fd, tmp_tokenizer = tempfile.mkstemp(prefix=f".{tokenizer_path.name}.", dir=out.parent)
    os.close(fd)
    try:
        with warnings.catch_warnings():
            # The trace is of fixed-size Python arithmetic (head sizes, the position check).
            warnings.simplefilter("ignore", torch.jit.TracerWarning)
            _export(model, tmp_model, opset)
        proto = onnx.load(tmp_model)
        onnx.helper.set_model_props(proto, meta)
        proto.doc_string = (
            "CUE sentence encoder + decoder; the CUE vector is an input (natural logs)"
        )
        onnx.save(proto, tmp_model)
        Path(tmp_vocab).write_text("".join(t + "\n" for t in lm.vocab.tokens), encoding="utf-8")
        if lm.tokenizer is not None:
            Path(tmp_tokenizer).write_bytes(lm.tokenizer.model_proto)
            os.replace(tmp_tokenizer, tokenizer_path)
        os.replace(tmp_vocab, vocab_path)
        os.replace(tmp_model, out)
    finally:
        for tmp in (tmp_model, tmp_vocab, tmp_tokenizer):
            if os.path.exists(tmp):
                os.unlink(tmp)
    logger.info("exported CUE model to %s", out)
    return CUEExportResult(out, vocab_path, meta)


@torch.no_grad()
def check_cue_parity(
    lm: CUELM,
    path: str | os.PathLike[str],
    batch_sizes: Sequence[int] = (1, 2, 3),
    max_len: int = 9,
    seed: int = 0,
    tolerance: float = TOLERANCE,
) -> ParityReport:
    """Run the export with ONNX Runtime (CPU) and the model with PyTorch on random sentences of
    unequal lengths and random CUE vectors; compare every output."""
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    scorer = CUEScorer(lm.model.eval())
    v = lm.config.vocab_size
    rng = np.random.default_rng(seed)
    worst = 0.0
    for n in batch_sizes:
        lens = rng.integers(1, max_len + 1, size=n)
        x = np.full((n, int(lens.max()) + 2), PAD_ID, dtype=np.int64)
        for i, k in enumerate(lens):
            x[i, 0] = BOS_ID
            x[i, 1 : k + 1] = rng.integers(3, v, size=k) if v > 3 else UNK_ID
            x[i, k + 1] = EOS_ID
        x_lens = (lens + 2).astype(np.int64)
        cue = rng.normal(size=(n, lm.config.dim)).astype(np.float32)
        got = session.run(list(OUTPUTS), {"x": x, "x_lens": x_lens, "cue": cue})
        ref = scorer(torch.from_numpy(x), torch.from_numpy(x_lens), torch.from_numpy(cue))
        for a, b in zip(got, ref, strict=True):
            worst = max(worst, output_diff(a, b))
    return ParityReport(EXPORT_KIND, worst, len(batch_sizes), tolerance)
