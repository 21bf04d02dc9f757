"""A score-token export inside sherpa-onnx's online transducer decoding, checked against PyTorch.

sherpa-onnx's modified beam search with ``lm=`` (shallow fusion, its default) feeds the LM the
metadata's ``sos_id`` and then each hypothesis's last token, in the ASR model's ids, and adds
``lm_scale * log_softmax[token]`` to the hypothesis. It reports what it added per token of the
best hypothesis, divided by the scale, as ``OnlineRecognizer.lm_probs``: the observable compared
here, token by token, with ``ContextLSTM.forward`` over ``<s>`` and the decoded tokens in the
model's own ids (the context folded in at export given to PyTorch as a record).

It fails for a wrong export: another token mapping or state layout gives other numbers (checked
below with a ``step`` export in the model's own ids, which sherpa-onnx runs without complaint
but scores the wrong tokens with), and a graph of another signature does not load.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from export.exporter import ExportOptions, export_checkpoint
from export.runtime import check_asr_tokens
from lm_models.asr_tokens import ASR_TOKENS_FILE, AsrTokens, read_tokens_txt
from lm_models.checkpoint import save_checkpoint
from lm_models.lstm.model import ContextLSTM
from tests.export.test_decoder_export import ICEFALL, MOVED, RECORD
from tests.export.tiny_transducer import Transducer, noise_waveform, write_transducer
from tests.onnx_helpers import make_model

sherpa_onnx = pytest.importorskip("sherpa_onnx")

ATOL = 1e-4  # sherpa-onnx accumulates the scaled scores in float32, then divides by the scale
LM_SCALE = 0.5


def decode(transducer: Transducer, lm: Path | None, scale: float = LM_SCALE) -> tuple[list, list]:
    """sherpa-onnx's streaming decoding of a noise waveform -> (tokens, lm_probs)."""
    recognizer = sherpa_onnx.OnlineRecognizer.from_transducer(
        tokens=str(transducer.tokens),
        encoder=str(transducer.encoder),
        decoder=str(transducer.decoder),
        joiner=str(transducer.joiner),
        num_threads=1,
        decoding_method="modified_beam_search",
        max_active_paths=4,
        lm="" if lm is None else str(lm),
        lm_scale=scale,
    )
    stream = recognizer.create_stream()
    stream.accept_waveform(16000, noise_waveform())
    stream.input_finished()
    while recognizer.is_ready(stream):
        recognizer.decode_stream(stream)
    return list(recognizer.tokens(stream)), list(recognizer.lm_probs(stream))


@torch.no_grad()
def pytorch_log_probs(model: ContextLSTM, asr: AsrTokens, tokens: list[str]) -> np.ndarray:
    """ln P(token_i | <s>, token_1 .. token_{i-1}) under the model, in its own units."""
    units = asr.lm_tokens()
    ids = [units.index(t) for t in tokens]  # decoded tokens are ordinary units
    log_probs, _ = model(torch.tensor([[1, *ids[:-1]]]), [RECORD])  # <s> = 1
    return log_probs[0, torch.arange(len(ids)), torch.tensor(ids)].numpy()


def trained_over(
    tmp_path: Path, layout: tuple[str, ...]
) -> tuple[Transducer, Path, AsrTokens, ContextLSTM]:
    """A random transducer over ``layout`` and a checkpoint of a random FactorCell LM over the
    same tokens (as `rescorer train --tokens` writes it: asr_tokens.txt beside the weights)."""
    transducer = write_transducer(tmp_path / "asr", layout)
    asr = read_tokens_txt(transducer.tokens)
    model = make_model("factor", vocab_size=len(asr.lm_tokens()), scale=0.8, seed=3)
    ckpt = save_checkpoint(
        tmp_path / "lm", model, asr.lm_tokens(), extra_files={ASR_TOKENS_FILE: asr.to_text()}
    )
    return transducer, ckpt, asr, model


@pytest.mark.parametrize("layout", [ICEFALL, MOVED], ids=["icefall", "moved"])
def test_sherpa_onnx_applies_the_models_log_probs(tmp_path: Path, layout: tuple[str, ...]) -> None:
    transducer, ckpt, asr, model = trained_over(tmp_path, layout)
    lm = export_checkpoint(ckpt, tmp_path / "lm.onnx", ExportOptions("score-token", context=RECORD))
    check_asr_tokens(lm.path, transducer.tokens)  # what a decoder-side script checks first

    tokens, lm_probs = decode(transducer, lm.path)
    assert len(tokens) >= 10 and len(set(tokens)) >= 4, tokens
    assert len(lm_probs) == len(tokens)
    want = pytorch_log_probs(model, asr, tokens)
    np.testing.assert_allclose(lm_probs, want, atol=ATOL, rtol=0)
    assert np.ptp(want) > 1.0  # a peaked LM: a wrong token would not pass by chance
    # The LM takes part in the search: without it the best path differs, and nothing is scored.
    plain, none = decode(transducer, None)
    assert none == [] and plain != tokens


def test_a_step_export_in_the_models_own_ids_scores_other_tokens(tmp_path: Path) -> None:
    """The check above is sharp: the sequence-form step export, in the model's own ids, loads
    in sherpa-onnx (same inputs, a flat output it indexes alike) but scores other tokens when
    the ASR's ids are not the model's."""
    transducer, ckpt, asr, model = trained_over(tmp_path, MOVED)
    step = export_checkpoint(ckpt, tmp_path / "step.onnx", ExportOptions("step", context=RECORD))
    tokens, lm_probs = decode(transducer, step.path)
    assert len(lm_probs) == len(tokens) >= 10
    assert np.abs(np.array(lm_probs) - pytorch_log_probs(model, asr, tokens)).max() > 0.1
