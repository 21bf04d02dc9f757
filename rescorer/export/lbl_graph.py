"""ONNX export of a multiplicative LBL (:mod:`rescorer.lm_models.lbl.model`), one attribute vector
folded in.

For a fixed attribute vector x the gated word matrix T^x = (W^fv)^T diag(W^fd x) W^fk (eq. 3) is
a constant V x K matrix, so the exported graph is a plain log-bilinear n-gram model (N rows,
n-1 history words, K, V as in :mod:`rescorer.lm_models.lbl.model`)::

    r_i     = E^T[history[:, i]]                 Gather             (N, n-1, K)
    r_cat   = reshape(r, (N, (n-1) K))           Reshape            (N, (n-1) K)
    r_hat   = r_cat @ [C(1)^T; ...; C(n-1)^T]    MatMul             (N, K)       eq. 4
    logits  = r_hat @ (T^x)^T + b'               MatMul, Add        (N, V)       eq. 5
    log_probs = log_softmax(logits)              LogSoftmax         (N, V)

where E^T = W^fv^T W^fk holds the folded history embeddings (R for a plain LBL) and b' is the
bias with -inf at ``<s>`` (never predicted) and, for unshared vocabularies (section 2.4), at
the words outside the folded attribute value's vocabulary.

Input ``history`` (N, n-1) int64, most recent word first, ``<s>`` (id 1) before the sentence
start; output ``log_probs`` (N, V) float32, natural logs. Metadata (strings; JSON where
noted): ``model_type`` (``lbl``), ``format``, ``format_version``, ``export_kind`` (``lbl-step``),
``vocab_size``, ``order``, ``sos_id``, ``eos_id``, ``unk_id``, ``context`` (JSON record folded
in; fields left out use the expected vector), ``attribute_vector`` (JSON list, x),
``vocab_file`` (the vocabulary beside the model, one token per line), ``log_base`` (``e``).
Files are written to temporary names in the destination folder and renamed into place.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import torch
from onnx import TensorProto, helper, numpy_helper

from rescorer.core.output import atomic_write
from rescorer.export.format import FORMAT_VERSION, LBL_KIND
from rescorer.export.format import LBL_FORMAT as FORMAT
from rescorer.lm_models.lbl.model import LBL, attribute_ids, load_lbl
from rescorer.lm_models.vocab import BOS_ID, EOS_ID, UNK_ID

logger = logging.getLogger(__name__)

OPSET = 17
IR_VERSION = 8
TOLERANCE = 1e-4


@dataclass(frozen=True)
class LBLExportResult:
    """What :func:`export_lbl` wrote."""

    # The .onnx file and the vocabulary file beside it.
    model_path: Path
    vocab_path: Path
    # The context record folded in, after dropping unknown values (missing: expected vector).
    context: dict[str, str]
    # Size of the .onnx file in bytes.
    bytes: int


@torch.no_grad()
def folded_weights(
    model: LBL, record: Mapping[str, Any] | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(E^T (V, K), C stacked ((n-1) K, K), (T^x)^T (K, V), b' (V,))`` for one record."""
    cfg = model.config
    ids = torch.tensor([attribute_ids(cfg, record)], dtype=torch.long, device=model.bias.device)
    x = model.attribute_vector(ids)[0] if cfg.attributes else None
    emb = model.word_vectors()
    # r_hat = sum_i C(i) r_i = [r_1 .. r_{n-1}] @ [C(1)^T; ...; C(n-1)^T]
    c_stack = model.context.transpose(1, 2).reshape(-1, cfg.embed_dim)
    t_x = model.word_matrix(x)
    bias = model.bias.clone()
    bias[BOS_ID] = -np.inf
    if cfg.vocab_attribute:
        a = cfg.attribute_index(cfg.vocab_attribute)
        if ids[0, a] >= 0:
            bias = bias.masked_fill(~model._allowed[ids[0, a]], -np.inf)
    return tuple(  # type: ignore[return-value]
        t.detach().cpu().numpy().astype(np.float32) for t in (emb, c_stack, t_x.T, bias)
    )


def lbl_graph(
    emb: np.ndarray, c_stack: np.ndarray, t_out: np.ndarray, bias: np.ndarray, order: int
) -> onnx.ModelProto:
    """The graph of the module docstring from folded weights."""
    v, k = emb.shape
    n1 = order - 1
    if c_stack.shape != (n1 * k, k) or t_out.shape != (k, v) or bias.shape != (v,):
        raise ValueError(
            f"folded weights do not fit V={v}, K={k}, n-1={n1}: C {c_stack.shape}, "
            f"T {t_out.shape}, b {bias.shape}"
        )
    inits = [
        numpy_helper.from_array(emb, "E"),
        numpy_helper.from_array(c_stack, "C"),
        numpy_helper.from_array(t_out, "T"),
        numpy_helper.from_array(bias, "b"),
        numpy_helper.from_array(np.array([-1, n1 * k], dtype=np.int64), "flat_shape"),
    ]
    nodes = [
        helper.make_node("Gather", ["E", "history"], ["r"], axis=0),  # (N, n-1, K)
        helper.make_node("Reshape", ["r", "flat_shape"], ["r_cat"]),  # (N, (n-1) K)
        helper.make_node("MatMul", ["r_cat", "C"], ["r_hat"]),  # (N, K)
        helper.make_node("MatMul", ["r_hat", "T"], ["scores"]),  # (N, V)
        helper.make_node("Add", ["scores", "b"], ["logits"]),
        helper.make_node("LogSoftmax", ["logits"], ["log_probs"], axis=-1),
    ]
    graph = helper.make_graph(
        nodes,
        "lbl_step",
        [helper.make_tensor_value_info("history", TensorProto.INT64, ["N", n1])],
        [helper.make_tensor_value_info("log_probs", TensorProto.FLOAT, ["N", v])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = IR_VERSION
    return model


def export_lbl(
    checkpoint: str | Path, out_path: str | Path, context: Mapping[str, Any] | None = None
) -> LBLExportResult:
    """Write ``out_path`` (.onnx) and its vocabulary file for ``context`` folded in."""
    checkpoint, out_path = Path(checkpoint), Path(out_path)
    model, vocab = load_lbl(checkpoint)
    cfg = model.config
    record: dict[str, str] = {}
    for field, value in (context or {}).items():
        names = [a.name for a in cfg.attributes]
        if field not in names:
            raise ValueError(f"context field {field!r} is not an attribute of the model ({names})")
        spec = cfg.attributes[names.index(field)]
        if value is not None and str(value) not in spec.values:
            raise ValueError(
                f"value {value!r} of {field!r} was not seen in training; leave the field out to "
                f"fold in its expected vector"
            )
        if value is not None:
            record[field] = str(value)
    emb, c_stack, t_out, bias = folded_weights(model, record)
    proto = lbl_graph(emb, c_stack, t_out, bias, cfg.order)
    x = []
    if cfg.attributes:
        ids = torch.tensor([attribute_ids(cfg, record)], dtype=torch.long)
        with torch.no_grad():
            x = [float(v) for v in model.attribute_vector(ids)[0]]
    vocab_path = out_path.with_name(out_path.name.rsplit(".", 1)[0] + ".vocab.txt")
    meta = {
        "model_type": "lbl",
        "format": FORMAT,
        "format_version": str(FORMAT_VERSION),
        "export_kind": LBL_KIND,
        "vocab_size": str(cfg.vocab_size),
        "order": str(cfg.order),
        "sos_id": str(BOS_ID),
        "eos_id": str(EOS_ID),
        "unk_id": str(UNK_ID),
        "context": json.dumps(record, sort_keys=True),
        "attribute_vector": json.dumps(x),
        "vocab_file": vocab_path.name,
        "log_base": "e",
    }
    helper.set_model_props(proto, meta)
    onnx.checker.check_model(proto)
    with atomic_write(vocab_path) as f:
        f.write("".join(t + "\n" for t in vocab.tokens))
    data = proto.SerializeToString()
    with atomic_write(out_path, "wb") as f:
        f.write(data)
    logger.info("exported %s with context %s to %s", checkpoint, record, out_path)
    return LBLExportResult(out_path, vocab_path, record, len(data))


@torch.no_grad()
def lbl_parity(
    model: LBL,
    onnx_path: str | Path,
    context: Mapping[str, Any] | None = None,
    rows: int = 64,
    seed: int = 0,
) -> float:
    """Largest |ONNX Runtime - PyTorch| log-probability over random histories (finite entries).

    The PyTorch side runs :meth:`LBL.log_probs` with the attribute *ids* of ``context`` (its own
    lookup and gating path), not the folded matrix the export was built from.
    """
    import onnxruntime as ort

    cfg = model.config
    gen = torch.Generator().manual_seed(seed)
    history = torch.randint(0, cfg.vocab_size, (rows, cfg.order - 1), generator=gen)
    history[: rows // 4, -1] = BOS_ID  # some sentence starts
    ids = torch.tensor([attribute_ids(cfg, context)] * rows, dtype=torch.long)
    expected = model.log_probs(history, attrs=ids).float().numpy()
    session = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    (got,) = session.run(["log_probs"], {"history": history.numpy().astype(np.int64)})
    finite = np.isfinite(expected)
    if not np.array_equal(finite, np.isfinite(got)):
        return float("inf")
    return float(np.abs(got[finite] - expected[finite]).max())
