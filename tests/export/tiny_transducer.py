"""A tiny random streaming transducer in the form sherpa-onnx loads (icefall's LSTM transducer).

sherpa-onnx's ``OnlineLstmTransducerModel`` reads three ONNX files, binding inputs and outputs
by position:

* encoder: ``x`` (N, T, 80) fbank frames, ``h`` (layers, N, d_model), ``c`` (layers, N,
  rnn_hidden_size) -> ``encoder_out`` (N, T', J), ``next_h``, ``next_c``; metadata
  ``model_type`` = ``lstm``, ``num_encoder_layers``, ``T`` (frames per chunk),
  ``decode_chunk_len`` (the chunk shift), ``rnn_hidden_size``, ``d_model``;
* decoder: ``y`` (N, context_size) int64, the last tokens (-1 before the first) ->
  ``decoder_out`` (N, J); metadata ``vocab_size``, ``context_size``;
* joiner: ``encoder_out`` (N, J), ``decoder_out`` (N, J) -> ``logit`` (N, V).

Here the encoder keeps every 4th frame and projects it (tanh), the states pass through; the
decoder averages the embeddings of its context; the joiner is tanh(enc + dec) W + b, with the
blank a little less likely than chance and ``<sos/eos>`` never emitted, as in a trained model.
The graphs are built with ``onnx.helper`` from seeded numpy weights.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

FEATURES = 80  # sherpa-onnx's default fbank dimension
CHUNK = 16  # frames per encoder call (T and decode_chunk_len)
SUBSAMPLING = 4
CONTEXT_SIZE = 2
OPSET = 17


@dataclass(frozen=True)
class Transducer:
    """The files of one tiny transducer."""

    tokens: Path
    encoder: Path
    decoder: Path
    joiner: Path


def _save(graph: onnx.GraphProto, meta: dict[str, str], path: Path) -> Path:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=8)
    helper.set_model_props(model, meta)
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, str(path))
    return path


def _const(name: str, array: np.ndarray) -> onnx.TensorProto:
    dtype = np.float32 if array.dtype.kind == "f" else np.int64
    return numpy_helper.from_array(array.astype(dtype), name)


def _info(name: str, dtype: int, shape: Sequence[int | str]) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, dtype, list(shape))


def write_transducer(
    folder: Path, tokens: Sequence[str], seed: int = 0, dim: int = 16
) -> Transducer:
    """Write tokens.txt and the encoder, decoder and joiner of a random transducer over
    ``tokens`` (id i = tokens[i]; the blank must be id 0, as sherpa-onnx assumes)."""
    if tokens[0] not in ("<blk>", "<blank>"):
        raise ValueError(
            f"sherpa-onnx's transducer search takes id 0 as the blank, got {tokens[0]!r}"
        )
    rng = np.random.default_rng(seed)
    v, j = len(tokens), dim
    folder.mkdir(parents=True, exist_ok=True)
    tokens_path = folder / "tokens.txt"
    tokens_path.write_text("".join(f"{t} {i}\n" for i, t in enumerate(tokens)), encoding="utf-8")
    float_, int64 = TensorProto.FLOAT, TensorProto.INT64

    # encoder: every 4th frame, tanh(x W + b); the LSTM states pass through unchanged
    state = [1, "N", 4]
    encoder = helper.make_graph(
        [
            helper.make_node("Slice", ["x", "start", "stop", "axis1", "step"], ["kept"]),
            helper.make_node("MatMul", ["kept", "w_enc"], ["proj"]),  # (N, T/4, J)
            helper.make_node("Add", ["proj", "b_enc"], ["pre"]),
            helper.make_node("Tanh", ["pre"], ["encoder_out"]),
            helper.make_node("Identity", ["h"], ["next_h"]),
            helper.make_node("Identity", ["c"], ["next_c"]),
        ],
        "tiny_encoder",
        [
            _info("x", float_, ["N", CHUNK, FEATURES]),
            _info("h", float_, state),
            _info("c", float_, state),
        ],
        [
            _info("encoder_out", float_, ["N", CHUNK // SUBSAMPLING, j]),
            _info("next_h", float_, state),
            _info("next_c", float_, state),
        ],
        initializer=[
            _const("start", np.array([0])),
            _const("stop", np.array([CHUNK])),
            _const("axis1", np.array([1])),
            _const("step", np.array([SUBSAMPLING])),
            _const("w_enc", rng.standard_normal((FEATURES, j)) * 0.2),
            _const("b_enc", rng.standard_normal(j)),
        ],
    )
    meta = {
        "model_type": "lstm",
        "num_encoder_layers": "1",
        "T": str(CHUNK),
        "decode_chunk_len": str(CHUNK),
        "rnn_hidden_size": "4",
        "d_model": "4",
    }
    encoder_path = _save(encoder, meta, folder / "encoder.onnx")

    # decoder: tanh(mean of the context's embeddings); -1 (before the first token) is the last row
    decoder = helper.make_graph(
        [
            helper.make_node("Gather", ["embedding", "y"], ["embedded"], axis=0),  # (N, 2, J)
            helper.make_node("ReduceMean", ["embedded"], ["mean"], axes=[1], keepdims=0),
            helper.make_node("Tanh", ["mean"], ["decoder_out"]),
        ],
        "tiny_decoder",
        [_info("y", int64, ["N", CONTEXT_SIZE])],
        [_info("decoder_out", float_, ["N", j])],
        initializer=[
            _const("embedding", rng.standard_normal((v, j))),
            _const("axis1", np.array([1])),
        ],
    )
    decoder_path = _save(
        decoder, {"vocab_size": str(v), "context_size": str(CONTEXT_SIZE)}, folder / "decoder.onnx"
    )

    # joiner: tanh(enc + dec) W + b
    bias = rng.standard_normal(v) * 0.5
    bias[0] = -2.0  # the blank: emit a token on most frames
    if "<sos/eos>" in tokens:
        bias[list(tokens).index("<sos/eos>")] = -30.0  # never a token of a transcript
    joiner = helper.make_graph(
        [
            helper.make_node("Add", ["encoder_out", "decoder_out"], ["both"]),
            helper.make_node("Tanh", ["both"], ["hidden"]),
            helper.make_node("MatMul", ["hidden", "w_out"], ["scores"]),
            helper.make_node("Add", ["scores", "b_out"], ["logit"]),
        ],
        "tiny_joiner",
        [_info("encoder_out", float_, ["N", j]), _info("decoder_out", float_, ["N", j])],
        [_info("logit", float_, ["N", v])],
        initializer=[_const("w_out", rng.standard_normal((j, v)) * 2.0), _const("b_out", bias)],
    )
    joiner_path = _save(joiner, {"joiner_dim": str(j)}, folder / "joiner.onnx")
    return Transducer(tokens_path, encoder_path, decoder_path, joiner_path)


def noise_waveform(seconds: float = 4.0, sample_rate: int = 16000, seed: int = 0) -> np.ndarray:
    """Noise whose loudness and colour change every 50 ms, so that the frames differ."""
    rng = np.random.default_rng(seed)
    segments = []
    for _ in range(int(seconds / 0.05)):
        noise = rng.standard_normal(sample_rate // 20)
        smooth = int(rng.integers(1, 12))  # a moving average: low-pass by a random amount
        noise = np.convolve(noise, np.ones(smooth) / smooth, mode="same")
        segments.append(noise * 10 ** rng.uniform(-2.5, -0.5))
    return np.concatenate(segments).astype(np.float32)
