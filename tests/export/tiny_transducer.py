"""A tiny random transducer in the forms sherpa-onnx loads: icefall's streaming LSTM transducer
and its offline (non-streaming) transducer, with the same weights.

sherpa-onnx reads three ONNX files, binding inputs and outputs by position. The streaming
``OnlineLstmTransducerModel`` (``OnlineRecognizer``):

* encoder: ``x`` (N, T, 80) fbank frames, ``h`` (layers, N, d_model), ``c`` (layers, N,
  rnn_hidden_size) -> ``encoder_out`` (N, T', J), ``next_h``, ``next_c``; metadata
  ``model_type`` = ``lstm``, ``num_encoder_layers``, ``T`` (frames per chunk),
  ``decode_chunk_len`` (the chunk shift), ``rnn_hidden_size``, ``d_model``;
* decoder: ``y`` (N, context_size) int64, the last tokens (-1 before the first) ->
  ``decoder_out`` (N, J); metadata ``vocab_size``, ``context_size``;
* joiner: ``encoder_out`` (N, J), ``decoder_out`` (N, J) -> ``logit`` (N, V).

The offline ``OfflineTransducerModel`` (``OfflineRecognizer.from_transducer``,
sherpa-onnx/csrc/offline-transducer-model.cc) takes the same decoder and joiner (a hypothesis
starts from context_size - 1 times -1 and the blank 0), and an encoder ``x`` (N, T, 80), ``x_lens``
(N,) int64 (the padding frames are log(1e-10)) -> ``encoder_out`` (N, T', J),
``encoder_out_lens`` (N,) int64, whose metadata it does not read when the model type is given
(``from_transducer`` passes ``transducer``).

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
INT64_MAX = np.iinfo(np.int64).max


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


def _encoder(rng: np.random.Generator, j: int, streaming: bool) -> tuple[onnx.GraphProto, dict]:
    """Every 4th frame, tanh(x W + b), in the streaming or the offline signature."""
    float_, int64 = TensorProto.FLOAT, TensorProto.INT64
    frames = CHUNK if streaming else INT64_MAX  # the offline encoder takes all frames
    project = [
        helper.make_node("Slice", ["x", "start", "stop", "axis1", "step"], ["kept"]),
        helper.make_node("MatMul", ["kept", "w_enc"], ["proj"]),  # (N, T/4, J)
        helper.make_node("Add", ["proj", "b_enc"], ["pre"]),
        helper.make_node("Tanh", ["pre"], ["encoder_out"]),
    ]
    weights = [
        _const("start", np.array([0])),
        _const("stop", np.array([frames])),
        _const("axis1", np.array([1])),
        _const("step", np.array([SUBSAMPLING])),
        _const("w_enc", rng.standard_normal((FEATURES, j)) * 0.2),
        _const("b_enc", rng.standard_normal(j)),
    ]
    if not streaming:  # x_lens -> encoder_out_lens = ceil(x_lens / 4), the frames kept
        lens = [
            helper.make_node("Add", ["x_lens", "round_up"], ["lens_up"]),
            helper.make_node("Div", ["lens_up", "subsampling"], ["encoder_out_lens"]),
        ]
        ins = [_info("x", float_, ["N", "T", FEATURES]), _info("x_lens", int64, ["N"])]
        outs = [
            _info("encoder_out", float_, ["N", "T_out", j]),
            _info("encoder_out_lens", int64, ["N"]),
        ]
        extra = [
            _const("round_up", np.array(SUBSAMPLING - 1)),
            _const("subsampling", np.array(SUBSAMPLING)),
        ]
        graph = helper.make_graph(
            project + lens, "tiny_offline_encoder", ins, outs, weights + extra
        )
        return graph, {}  # from_transducer's model_type "transducer": no metadata is read
    # streaming: the LSTM states pass through unchanged
    state = [1, "N", 4]
    graph = helper.make_graph(
        [
            *project,
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
        initializer=weights,
    )
    meta = {
        "model_type": "lstm",
        "num_encoder_layers": "1",
        "T": str(CHUNK),
        "decode_chunk_len": str(CHUNK),
        "rnn_hidden_size": "4",
        "d_model": "4",
    }
    return graph, meta


def write_transducer(
    folder: Path, tokens: Sequence[str], seed: int = 0, dim: int = 16, streaming: bool = True
) -> Transducer:
    """Write tokens.txt and the encoder, decoder and joiner of a random transducer over
    ``tokens`` (id i = tokens[i]; the blank must be id 0, as sherpa-onnx assumes): streaming
    (OnlineRecognizer) or offline (OfflineRecognizer); the same weights either way."""
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
    encoder_path = _save(*_encoder(rng, j, streaming), folder / "encoder.onnx")

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
