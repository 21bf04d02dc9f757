"""The exports a decoder loads (score-token, nll) in an ASR model's token ids, and
`rescorer export --kind score-token --tokens`.

The expected values are written out per ASR id (the blank -inf, <sos/eos> = the model's </s>,
<unk> = its <unk>, every other token its own unit) and computed with ``ContextLSTM.forward`` on
the model's own ids, so a wrong table in the graph or in rescorer.lm_models.asr_tokens shows here.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from click.testing import CliRunner, Result

from rescorer.cli.main import main
from rescorer.core.errors import InputError
from rescorer.export.exporter import ExportOptions, export_checkpoint, export_model
from rescorer.export.parity import check_parity
from rescorer.export.runtime import check_asr_tokens
from rescorer.lm_models.asr_tokens import ASR_TOKENS_FILE, AsrTokens, read_tokens_txt
from rescorer.lm_models.checkpoint import save_checkpoint
from rescorer.lms.onnx import OnnxLM
from tests.onnx_helpers import VOCAB, WORDS, make_model

ATOL = 1e-4
# An icefall layout (blank 0, <sos/eos> 1, <unk> 2) and one where nothing sits where the
# toolkit's specials do: <unk> in the middle, <sos/eos> last.
# (Not the order of tests.onnx_helpers.VOCAB: a model over it is not over these tokens.)
ICEFALL = ("<blk>", "<sos/eos>", "<unk>", *WORDS[1:13])
MOVED = ("<blk>", *WORDS[1:6], "<unk>", *WORDS[6:13], "<sos/eos>")
RECORD = {"genre": "sport", "topic": "money"}


# tiny models: one thread; main reconfigures the root logger: restored after each test
pytestmark = pytest.mark.usefixtures("one_torch_thread", "restore_logging")


def session(path: Path) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.log_severity_level = 3
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def tokens_txt(path: Path, tokens: Sequence[str]) -> Path:
    path.write_text("".join(f"{t} {i}\n" for i, t in enumerate(tokens)), encoding="utf-8")
    return path


def asr_model(asr: AsrTokens, seed: int = 0) -> torch.nn.Module:
    return make_model("factor", vocab_size=len(asr.lm_tokens()), seed=seed, scale=0.6)


@pytest.mark.parametrize("layout", [ICEFALL, MOVED], ids=["icefall", "moved"])
@torch.no_grad()
def test_score_token_speaks_the_asr_ids(tmp_path: Path, layout: tuple[str, ...]) -> None:
    asr = read_tokens_txt(tokens_txt(tmp_path / "tokens.txt", layout))
    lm = asr.lm_tokens()  # <unk> <s> </s> + the words in ASR-id order
    model = asr_model(asr)
    opts = ExportOptions("score-token", context=RECORD, asr_tokens=asr)
    res = export_model(model, lm, tmp_path / "lm.onnx", opts)
    assert res.vocab_path.read_text(encoding="utf-8").split("\n")[:-1] == list(layout)
    meta = res.metadata
    assert (meta["vocab_size"], meta["sos_id"], meta["eos_id"], meta["unk_id"]) == (
        str(len(layout)),
        str(layout.index("<sos/eos>")),
        str(layout.index("<sos/eos>")),
        str(layout.index("<unk>")),
    )
    assert meta["blank_id"] == "0" and meta["token_ids"] == "asr"
    sess = session(res.path)
    rng = np.random.default_rng(1)
    sos, unk = layout.index("<sos/eos>"), layout.index("<unk>")
    words = [i for i, t in enumerate(layout) if t in WORDS]
    for n, length in ((1, 1), (4, 1), (3, 3)):
        x = rng.choice([*words, unk, sos], (n, length))
        h0 = (rng.standard_normal((2, n, 16)) * 0.5).astype(np.float32)
        c0 = (rng.standard_normal((2, n, 16)) * 0.5).astype(np.float32)
        log_probs, h, c = sess.run(None, {"x": x, "h0": h0, "c0": c0})
        # the model's own ids, written out: a word is its unit, <sos/eos> <s>, <unk> <unk>
        own = np.vectorize(lambda i: 1 if i == sos else 0 if i == unk else lm.index(layout[i]))(x)
        state = (torch.from_numpy(h0), torch.from_numpy(c0))
        ref, (ref_h, ref_m) = model(torch.from_numpy(own), [RECORD] * n, state)
        last = ref[:, -1].numpy()  # (N, V_model)
        assert log_probs.shape == (n, len(layout))
        assert np.isneginf(log_probs[:, 0]).all()  # the blank: never predicted
        np.testing.assert_allclose(log_probs[:, sos], last[:, 2], atol=ATOL)  # </s>
        np.testing.assert_allclose(log_probs[:, unk], last[:, 0], atol=ATOL)  # <unk>
        for i in words:
            np.testing.assert_allclose(log_probs[:, i], last[:, lm.index(layout[i])], atol=ATOL)
        np.testing.assert_allclose(h, ref_h.numpy(), atol=ATOL)
        np.testing.assert_allclose(c, ref_m.numpy(), atol=ATOL)
    report = check_parity(model, res.path)
    assert report.ok and report.kind == "score-token", report.describe()
    assert check_asr_tokens(res.path, tmp_path / "tokens.txt").token_ids == "asr"


@torch.no_grad()
def test_nll_speaks_the_asr_ids(tmp_path: Path) -> None:
    asr = AsrTokens(MOVED, "moved")
    lm = asr.lm_tokens()
    model = asr_model(asr, seed=2)
    opts = ExportOptions("nll", context=RECORD, asr_tokens=asr)
    res = export_model(model, lm, tmp_path / "nll.onnx", opts)
    sentences = [["cat", "sat", "on"], ["a"], []]
    x = np.zeros((3, 4), dtype=np.int64)  # ASR ids, 0-padded (0 is the blank here)
    for j, s in enumerate(sentences):
        x[j, : len(s)] = [MOVED.index(w) for w in s]
    (nll,) = session(res.path).run(None, {"x": x, "x_lens": np.array([3, 1, 0])})
    for j, s in enumerate(sentences):
        ids = [1, *(lm.index(w) for w in s)]  # <s> w1 .. wn in the model's ids
        log_probs, _ = model(torch.tensor([ids]), [RECORD])
        targets = [*(lm.index(w) for w in s), 2]
        want = -sum(float(log_probs[0, t, k]) for t, k in enumerate(targets))
        assert abs(float(nll[j]) - want) < ATOL
    assert check_parity(model, res.path).ok


def test_exports_refuse_another_token_set(tmp_path: Path) -> None:
    asr = read_tokens_txt(tokens_txt(tmp_path / "tokens.txt", ICEFALL))
    toolkit = make_model("factor")  # trained over its own words (VOCAB), not these tokens
    with pytest.raises(
        InputError, match=r"tokens.txt:4: token 'a' \(id 3\) is unit 3 .* the model has 'the'"
    ):
        export_model(
            toolkit, VOCAB, tmp_path / "x.onnx", ExportOptions("score-token", asr_tokens=asr)
        )
    assert not (tmp_path / "x.onnx").exists()
    with pytest.raises(ValueError, match="ASR token ids are for the kinds a decoder loads"):
        ExportOptions("step", asr_tokens=asr)
    # at load time: an export in other ids than a tokens.txt names its first differing line
    res = export_model(toolkit, VOCAB, tmp_path / "own.onnx", ExportOptions("score-token"))
    with pytest.raises(InputError, match=r"tokens.txt:1: token '<blk>' at id 0, but own.onnx"):
        check_asr_tokens(res.path, tmp_path / "tokens.txt")
    model = asr_model(asr)
    opts = ExportOptions("score-token", asr_tokens=asr)
    good = export_model(model, asr.lm_tokens(), tmp_path / "lm.onnx", opts)
    other = tokens_txt(tmp_path / "other.txt", [*ICEFALL[:6], "zebra", *ICEFALL[7:]])
    with pytest.raises(InputError, match=r"other.txt:7: token 'zebra' at id 6, but lm.onnx has"):
        check_asr_tokens(good.path, other)
    longer = tokens_txt(tmp_path / "longer.txt", [*ICEFALL, "zebra"])
    with pytest.raises(InputError, match=r"longer.txt: 16 tokens, but lm.onnx has 15 ids"):
        check_asr_tokens(good.path, longer)
    # not for onnx: scoring, with what to use instead
    with pytest.raises(ValueError, match="single-step form for sherpa-onnx's online LM"):
        OnnxLM(good.path)


def test_metadata_is_what_icefall_and_sherpa_onnx_read(tmp_path: Path) -> None:
    """sherpa-onnx's OnlineRnnLM reads num_layers, hidden_size, sos_id and binds x, h0, c0 ->
    log_softmax, next_h0, next_c0 by position; icefall's export writes the rest."""
    asr = AsrTokens(ICEFALL)
    res = export_model(
        asr_model(asr), asr.lm_tokens(), tmp_path / "lm.onnx",
        ExportOptions("score-token", context=RECORD, asr_tokens=asr, url="https://x.org/lm"),
    )  # fmt: skip
    loaded = onnx.load(str(res.path))
    onnx.checker.check_model(loaded, full_check=True)

    def dims(values: Sequence[onnx.ValueInfoProto]) -> dict[str, list]:
        return {
            v.name: [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim]
            for v in values
        }

    assert dims(loaded.graph.input) == {"x": ["N", "L"], "h0": [2, "N", 16], "c0": [2, "N", 16]}
    assert dims(loaded.graph.output) == {
        "log_softmax": ["N", 15],
        "next_h0": [2, "N", 16],
        "next_c0": [2, "N", 16],
    }
    props = {p.key: p.value for p in loaded.metadata_props}
    icefall = {
        "version": "1",
        "model_author": "rescorer",
        "sos_id": "1",
        "eos_id": "1",
        "vocab_size": "15",
        "num_layers": "2",
        "hidden_size": "16",
        "embedding_dim": "12",
        "url": "https://x.org/lm",
    }
    assert {k: props[k] for k in icefall} == icefall
    assert props["export_kind"] == "score-token" and props["comment"].startswith(
        'factor context LSTM, score-token export, {"genre": "sport", "topic": "money"}, ids of '
        "the ASR tokens (15, blank 0)"
    )


def test_export_checkpoint_takes_the_checkpoints_token_set(tmp_path: Path) -> None:
    asr = AsrTokens(MOVED)
    ckpt = save_checkpoint(
        tmp_path / "ckpt",
        asr_model(asr),
        asr.lm_tokens(),
        extra_files={ASR_TOKENS_FILE: asr.to_text()},
    )
    for kind in ("score-token", "nll"):
        res = export_checkpoint(
            ckpt, tmp_path / f"{kind}.onnx", ExportOptions(kind, context=RECORD)
        )
        assert res.metadata["token_ids"] == "asr" and res.metadata["sos_id"] == "14"
    step = export_checkpoint(ckpt, tmp_path / "step.onnx", ExportOptions("step", context=RECORD))
    assert step.metadata["token_ids"] == "toolkit" and step.metadata["sos_id"] == "1"


# -- rescorer export --tokens -----------------------------------------------------------------


def run(args: Sequence[object]) -> Result:
    return CliRunner().invoke(main, ["-q", "export", *map(str, args)], catch_exceptions=False)


def test_cli_export_score_token_with_tokens(tmp_path: Path) -> None:
    asr = AsrTokens(ICEFALL)
    listed = tokens_txt(tmp_path / "tokens.txt", ICEFALL)
    trained = save_checkpoint(
        tmp_path / "asr_lm", asr_model(asr), asr.lm_tokens(),
        extra_files={ASR_TOKENS_FILE: asr.to_text()},
    )  # fmt: skip
    out = tmp_path / "lm.onnx"
    ctx = ["--context", "genre=sport"]
    result = run([trained, out, "--kind", "score-token", *ctx])  # the checkpoint's own set
    assert result.exit_code == 0, result.output
    assert f"wrote {out} (score-token, 1 context, " in result.output
    assert (
        f"token ids: the ASR model's, 15 tokens of {trained / ASR_TOKENS_FILE}: blank 0, "
        "sos/eos 1, unk 2" in result.output
    )
    assert "parity with PyTorch ok" in result.output
    check_asr_tokens(out, listed)
    result = run([trained, out, "--kind", "score-token", "--tokens", listed, *ctx])
    assert result.exit_code == 0 and f"15 tokens of {listed}: blank 0" in result.output

    # a tokens.txt that is not the checkpoint's: one line naming its line, exit 2, no file
    other = tokens_txt(tmp_path / "other.txt", [*ICEFALL[:4], "zebra", *ICEFALL[5:]])
    result = run([trained, tmp_path / "o.onnx", "--kind", "score-token", "--tokens", other])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert f"{other}:5: token 'zebra' at id 4, but {trained / ASR_TOKENS_FILE} has 'cat'" in (
        result.output
    )
    assert not (tmp_path / "o.onnx").exists()
    # a checkpoint over the toolkit's own words: refused at the first token it lacks
    words = save_checkpoint(tmp_path / "words", make_model("factor"), VOCAB)
    result = run([words, tmp_path / "w.onnx", "--kind", "nll", "--tokens", listed])
    assert result.exit_code == 2
    assert f"{listed}:4: token 'a' (id 3) is unit 3 of an LM over these tokens, but the " in (
        result.output
    )
    # ... exported in its own ids without --tokens, and said so
    result = run([words, tmp_path / "w.onnx", "--kind", "score-token", "--no-check"])
    assert result.exit_code == 0
    assert "token ids: the checkpoint's own (<unk> 0, <s> 1, </s> 2)" in result.output
    # a checkpoint whose vocabulary is the token set's units, without asr_tokens.txt: fine
    bare = save_checkpoint(tmp_path / "bare", asr_model(asr), asr.lm_tokens())
    result = run([bare, tmp_path / "b.onnx", "--kind", "nll", "--tokens", listed, *ctx])
    assert result.exit_code == 0 and "parity with PyTorch ok" in result.output
    # --tokens with a kind that keeps the model's ids
    result = run([trained, tmp_path / "s.onnx", "--kind", "step", "--tokens", listed])
    assert result.exit_code == 2 and "--tokens is for the kinds a decoder loads" in result.output
