"""The decoder exports inside sherpa-onnx, checked against PyTorch: score-token in its online
transducer decoding, nll in its offline one.

Online: sherpa-onnx's modified beam search with ``lm=`` (shallow fusion, its default) feeds the LM
the metadata's ``sos_id`` and then each hypothesis's last token, in the ASR model's ids, and adds
``lm_scale * log_softmax[token]`` to the hypothesis. It reports what it added per token of the
best hypothesis, divided by the scale, as ``OnlineRecognizer.lm_probs``: the observable compared
here, token by token, with ``ContextLSTM.forward`` over ``<s>`` and the decoded tokens in the
model's own ids (the context folded in at export given to PyTorch as a record).

It fails for a wrong export: another token mapping or state layout gives other numbers (checked
below with a ``step`` export in the model's own ids, which sherpa-onnx runs without complaint
but scores the wrong tokens with), and a graph of another signature does not load.

Offline: sherpa-onnx's modified beam search (offline-transducer-modified-beam-search-decoder.cc)
searches without the LM; then ``OfflineLM::ComputeLMScore`` (offline-lm.cc) rescores the final
beam in one call of the nll graph (inputs and output bound by position): ``x`` = each
hypothesis's tokens in the ASR's ids with the decoder's context_size leading entries stripped,
no ``<s>``/``</s>`` (the graph adds them), padded with 0, ``x_lens`` = their numbers, and sets
``lm_log_prob = -lm_scale * nll``. The result is the hypothesis of the largest
``(am + lm_log_prob) / (context_size + n)`` (``GetMostProbable(length_norm=true)``,
hypothesis.cc): n tokens, am the acoustic log-prob of the hypothesis, its alignments summed.
The result carries no LM score, so the test checks the choice. The beam does not depend on the
LM or its scale, so every decoding of one waveform returns a member of one beam B, each
maximising a + s l over B, with a = am / (context_size + n) and l = the LM's log-prob over the
same length: as s grows, the chosen hypothesis's l cannot go down, whatever a is. The test
computes l with PyTorch (``<s>`` w1 .. wn ``</s>``) for the choices at lm_scale 0 (no LM) up to
1000 (where a matters by at most its spread over 1000) and asserts it never decreases and ends
well above the no-LM choice's. A sign-flipped export picks worse sentences as the scale grows,
and an nll export in the model's own ids (not the ASR's) keeps a sentence that the true LM ranks
well below the one the right export picks from the same beam: both fail. The division by the
length matters: the sign-flipped export's picks get shorter, so their log-prob itself rises
(-44.6, -41.7, -38.8) while l falls; a check of the log-prob alone would pass it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
import torch

from rescorer.export.exporter import ExportOptions, export_checkpoint, export_model
from rescorer.export.runtime import check_asr_tokens
from rescorer.lm_models.asr_tokens import ASR_TOKENS_FILE, AsrTokens, read_tokens_txt
from rescorer.lm_models.checkpoint import save_checkpoint
from rescorer.lm_models.lstm.model import ContextLSTM
from tests.export.test_decoder_export import ICEFALL, MOVED, RECORD
from tests.export.tiny_transducer import (
    CONTEXT_SIZE,
    Transducer,
    noise_waveform,
    write_transducer,
)
from tests.onnx_helpers import make_model

sherpa_onnx = pytest.importorskip("sherpa_onnx")

ATOL = 1e-4  # sherpa-onnx accumulates the scaled scores in float32, then divides by the scale
LM_SCALE = 0.5


def recognizer_args(transducer: Transducer, lm: Path | None, scale: float, paths: int) -> dict:
    """The arguments of sherpa-onnx's ``from_transducer``, online and offline alike."""
    return {
        "tokens": str(transducer.tokens),
        "encoder": str(transducer.encoder),
        "decoder": str(transducer.decoder),
        "joiner": str(transducer.joiner),
        "num_threads": 1,
        "decoding_method": "modified_beam_search",
        "max_active_paths": paths,
        "lm": "" if lm is None else str(lm),
        "lm_scale": scale,
    }


def decode(transducer: Transducer, lm: Path | None, scale: float = LM_SCALE) -> tuple[list, list]:
    """sherpa-onnx's streaming decoding of a noise waveform -> (tokens, lm_probs)."""
    args = recognizer_args(transducer, lm, scale, paths=4)
    recognizer = sherpa_onnx.OnlineRecognizer.from_transducer(**args)
    stream = recognizer.create_stream()
    stream.accept_waveform(16000, noise_waveform())
    stream.input_finished()
    while recognizer.is_ready(stream):
        recognizer.decode_stream(stream)
    return list(recognizer.tokens(stream)), list(recognizer.lm_probs(stream))


@torch.no_grad()
def pytorch_log_probs(
    model: ContextLSTM, asr: AsrTokens, tokens: list[str], eos: bool = False
) -> np.ndarray:
    """ln P(token_i | <s>, token_1 .. token_{i-1}) under the model, in its own units, and with
    ``eos`` that of </s> after them last."""
    units = asr.lm_tokens()
    targets = [units.index(t) for t in tokens] + ([2] if eos else [])  # </s> = 2
    log_probs, _ = model(torch.tensor([[1, *targets[:-1]]]), [RECORD])  # <s> = 1
    return log_probs[0, torch.arange(len(targets)), torch.tensor(targets)].numpy()


def trained_over(
    tmp_path: Path, layout: tuple[str, ...], streaming: bool = True, seed: int = 3
) -> tuple[Transducer, Path, AsrTokens, ContextLSTM]:
    """A random transducer over ``layout`` and a checkpoint of a random FactorCell LM (drawn
    from ``seed``) over the same tokens (as `rescorer train --tokens` writes it:
    asr_tokens.txt beside the weights)."""
    transducer = write_transducer(tmp_path / "asr", layout, streaming=streaming)
    asr = read_tokens_txt(transducer.tokens)
    model = make_model("factor", vocab_size=len(asr.lm_tokens()), scale=0.8, seed=seed)
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
    # (an ASR id read as the model's <s> scores -inf: nan where sherpa-onnx sums such values)
    assert np.nanmax(np.abs(np.array(lm_probs) - pytorch_log_probs(model, asr, tokens))) > 0.1


# -- offline: nll rescoring of the final beam ------------------------------------------------

SCALES = (0.0, 0.3, 1.0, 3.0, 1000.0)  # lm_scale; 0 decodes without the LM
SECONDS = 2.0  # of noise: 12 tokens or so


def decode_offline(transducer: Transducer, lm: Path | None, scale: float) -> list[str]:
    """sherpa-onnx's offline decoding of a noise waveform, rescored by ``lm`` -> its tokens."""
    args = recognizer_args(transducer, lm, scale, paths=8)
    recognizer = sherpa_onnx.OfflineRecognizer.from_transducer(**args)
    stream = recognizer.create_stream()
    stream.accept_waveform(16000, noise_waveform(SECONDS))
    recognizer.decode_stream(stream)
    return list(stream.result.tokens)


def sweep(transducer: Transducer, lm: Path) -> dict[float, list[str]]:
    """The tokens sherpa-onnx picks from one beam at each of SCALES."""
    return {s: decode_offline(transducer, lm if s else None, s) for s in SCALES}


def length_normed(model: ContextLSTM, asr: AsrTokens, tokens: list[str]) -> float:
    """l: the PyTorch log-prob of <s> tokens </s> over context_size + n, as sherpa-onnx divides."""
    return float(pytorch_log_probs(model, asr, tokens, eos=True).sum()) / (
        len(tokens) + CONTEXT_SIZE
    )


def assert_chosen_by_the_lm(model: ContextLSTM, asr: AsrTokens, picks: dict) -> list[float]:
    """l of each pick, asserted non-decreasing with the scale and clearly above the no-LM pick's
    at the largest (the LM takes part and ranks as PyTorch does)."""
    ls = [length_normed(model, asr, picks[s]) for s in SCALES]
    assert (np.diff(ls) >= -ATOL).all(), ls
    assert picks[SCALES[-1]] != picks[0.0] and ls[-1] > ls[0] + 0.05, ls
    return ls


@pytest.mark.parametrize("layout", [ICEFALL, MOVED], ids=["icefall", "moved"])
def test_sherpa_onnx_offline_rescoring_ranks_by_the_models_sentence_log_prob(
    tmp_path: Path, layout: tuple[str, ...]
) -> None:
    transducer, ckpt, asr, model = trained_over(tmp_path, layout, streaming=False)
    lm = export_checkpoint(ckpt, tmp_path / "nll.onnx", ExportOptions("nll", context=RECORD))
    check_asr_tokens(lm.path, transducer.tokens)
    picks = sweep(transducer, lm.path)
    assert all(len(tokens) >= 8 for tokens in picks.values()), picks
    assert_chosen_by_the_lm(model, asr, picks)


def sign_flipped(path: Path, out: Path) -> Path:
    """The graph with its output negated: log P where sherpa-onnx reads -log P."""
    model = onnx.load(str(path))
    name = model.graph.output[0].name
    for node in model.graph.node:
        node.output[:] = [f"{o}_unflipped" if o == name else o for o in node.output]
    model.graph.node.append(onnx.helper.make_node("Neg", [f"{name}_unflipped"], [name]))
    onnx.save(model, str(out))
    return out


def test_wrong_nll_exports_pick_other_sentences_offline(tmp_path: Path) -> None:
    """The check above is sharp: sherpa-onnx loads and runs an nll export in the model's own
    ids and one with the sign flipped, but neither ranks the beam as the model does.

    The model is drawn from seed 10: the export in the model's own ids reads the ASR's id 1
    ("a") as the model's <s>, which the model never predicts, so it gives every hypothesis
    with "a" log 0; under seed 3's model it then happens to pick the right export's sentence
    from this beam (seeds 10, 14, 15, 17 of 3-18 tell both wrong exports apart by both checks
    below and pass the right export's check)."""
    transducer, ckpt, asr, model = trained_over(tmp_path, MOVED, streaming=False, seed=10)
    right = export_checkpoint(ckpt, tmp_path / "nll.onnx", ExportOptions("nll", context=RECORD))
    best = length_normed(model, asr, sweep(transducer, right.path)[SCALES[-1]])
    own = export_model(
        model, asr.lm_tokens(), tmp_path / "own.onnx", ExportOptions("nll", context=RECORD)
    )
    assert own.metadata["token_ids"] == "toolkit"
    for wrong in (own.path, sign_flipped(right.path, tmp_path / "flipped.onnx")):
        picks = sweep(transducer, wrong)
        with pytest.raises(AssertionError):
            assert_chosen_by_the_lm(model, asr, picks)
        # at lm_scale 1000 the right export's pick is the beam's best l to within 1e-3 (the
        # spread of a over 1000); this one's pick, from the same beam, is well below it
        assert length_normed(model, asr, picks[SCALES[-1]]) < best - 0.02
