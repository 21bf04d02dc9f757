"""ONNX export (export/): graphs against the PyTorch model, metadata, context sets, int8, CLI.

Every ONNX output is compared with ``ContextLSTM.forward`` / ``ContextLSTM.score`` run with the
context *records* (the model's own adaptation path), not with the folded weights the export was
built from: max absolute difference <= 1e-4 for every mode, with and without layer norm, 1 and 2
layers, e == d and e != d (projection L), batch sizes 1..4 and unequal lengths.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from click.testing import CliRunner, Result

from rescorer.cli.main import main
from rescorer.cli.models import EXPORT_KINDS
from rescorer.core.errors import InputError
from rescorer.export.exporter import (
    ExportOptions,
    all_context_records,
    context_records,
    export_checkpoint,
    export_model,
    normalise_record,
    read_context_records,
    vocab_path_for,
)
from rescorer.export.format import KINDS
from rescorer.export.graph import LayerWeights, LSTMWeights, step_graph
from rescorer.export.parity import ParityReport, check_parity
from rescorer.export.quantize import int8_path_for, quantize_int8
from rescorer.lm_models.checkpoint import save_checkpoint
from rescorer.lm_models.lstm.model import MODES, ContextLSTM
from rescorer.lm_models.word_classes import shortlist_classes
from rescorer.lms.onnx import perplexity_change
from tests.onnx_helpers import GENRE, GEO, TOPIC, VOCAB, make_model

ATOL = 1e-4
V = len(VOCAB)


# tiny models: one thread; main reconfigures the root logger: restored after each test
pytestmark = pytest.mark.usefixtures("one_torch_thread", "restore_logging")


def session(path: Path) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.log_severity_level = 3
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def close(got: np.ndarray, want: torch.Tensor) -> None:
    np.testing.assert_allclose(got, want.detach().numpy(), atol=ATOL, rtol=0)


def records_for(model: ContextLSTM, records: Sequence[dict | None]) -> list | None:
    return list(records) if model.adaptive else None


def padded(rng: np.random.Generator, lengths: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """<s> w1 .. wn </s> padded with </s>, and x_lens = n + 2."""
    x = np.full((len(lengths), max(lengths) + 2), 2, dtype=np.int64)
    x[:, 0] = 1
    for j, k in enumerate(lengths):
        x[j, 1 : 1 + k] = rng.integers(3, V, k)
    return x, np.array([k + 2 for k in lengths], dtype=np.int64)


CONFIGS = list(itertools.product(MODES, (False, True), (1, 2), (16, 12)))


@pytest.mark.parametrize(
    ("mode", "layer_norm", "layers", "embed_dim"),
    CONFIGS,
    ids=[f"{m}-ln{int(ln)}-{n}layer-e{e}" for m, ln, n, e in CONFIGS],
)
@torch.no_grad()
def test_every_kind_matches_pytorch(
    tmp_path: Path, mode: str, layer_norm: bool, layers: int, embed_dim: int
) -> None:
    model = make_model(mode, embed_dim=embed_dim, num_layers=layers, layer_norm=layer_norm)
    assert (model.L is not None) == (embed_dim != 16)
    rng = np.random.default_rng(layers + 2 * embed_dim)
    record = {"genre": "sport", "topic": "money"} if model.adaptive else None
    d = 16

    # Per-context step model: log-probs and next states, batch sizes 1..4.
    step = export_model(model, VOCAB, tmp_path / "step.onnx", ExportOptions("step", context=record))
    sess = session(step.path)
    for n in range(1, 5):
        x = rng.integers(0, V, (n, n + 2))
        h0 = (rng.standard_normal((layers, n, d)) * 0.5).astype(np.float32)
        c0 = (rng.standard_normal((layers, n, d)) * 0.5).astype(np.float32)
        log_probs, h, c = sess.run(None, {"x": x, "h0": h0, "c0": c0})
        state = (torch.from_numpy(h0), torch.from_numpy(c0))
        ref, (ref_h, ref_m) = model(torch.from_numpy(x), records_for(model, [record] * n), state)
        close(log_probs, ref)
        close(h, ref_h)
        close(c, ref_m)
    # Step by step (feeding next_h0/next_c0 back) equals the whole sequence at once.
    zeros = np.zeros((layers, n, d), dtype=np.float32)
    whole = sess.run(None, {"x": x, "h0": zeros, "c0": zeros})[0]
    h, c = zeros, zeros
    for t in range(x.shape[1]):
        one, h, c = sess.run(None, {"x": x[:, t : t + 1], "h0": h, "c0": c})
        np.testing.assert_allclose(one[:, 0], whole[:, t], atol=ATOL, rtol=0)

    # Multi-context step model: a different context per row.
    multi = export_model(model, VOCAB, tmp_path / "multi.onnx", ExportOptions("multi"))
    sess = session(multi.path)
    n_ctx = len(multi.contexts)
    assert n_ctx == (12 if model.adaptive else 1)
    for n in range(1, 6):
        # Mixed contexts, and (n = 5) one context for the whole batch: both paths of the graph.
        cids = rng.integers(0, n_ctx, n) if n < 5 else np.full(n, n_ctx - 1)
        x = rng.integers(0, V, (n, 3))
        h0 = (rng.standard_normal((layers, n, d)) * 0.5).astype(np.float32)
        log_probs, h, c = sess.run(None, {"x": x, "h0": h0, "c0": h0, "context_id": cids})
        recs = [multi.contexts[i] for i in cids]
        state = (torch.from_numpy(h0), torch.from_numpy(h0))
        ref, (ref_h, ref_m) = model(torch.from_numpy(x), records_for(model, recs), state)
        close(log_probs, ref)
        close(h, ref_h)
        close(c, ref_m)

    # Sentence scorers, unequal lengths (0 words included), padding masked.
    for kind in ("scorer", "multi-scorer"):
        opts = ExportOptions(kind, context=record) if kind == "scorer" else ExportOptions(kind)
        res = export_model(model, VOCAB, tmp_path / f"{kind}.onnx", opts)
        sess = session(res.path)
        for n in range(1, 5):
            x, lens = padded(rng, [int(k) for k in rng.integers(0, 6, n)])
            feed = {"x": x, "x_lens": lens}
            if kind == "multi-scorer":
                cids = rng.integers(0, len(res.contexts), n)
                feed["context_id"] = cids
                recs = [res.contexts[i] for i in cids]
            else:
                recs = [record] * n
            tok, total = sess.run(None, feed)
            xt = torch.from_numpy(x)
            ref = model.score(
                xt[:, :-1], xt[:, 1:], torch.from_numpy(lens - 1), records_for(model, recs)
            )
            close(tok, ref)
            close(total, ref.sum(dim=1))
            assert np.all(tok[np.arange(x.shape[1] - 1)[None, :] >= (lens - 1)[:, None]] == 0)

    # icefall's score_token_onnx form: the next token's log-probs after x's last position.
    res = export_model(
        model, VOCAB, tmp_path / "st.onnx", ExportOptions("score-token", context=record)
    )
    sess = session(res.path)
    for n, length in ((1, 1), (3, 1), (2, 4)):
        x = rng.integers(0, V, (n, length))
        h0 = (rng.standard_normal((layers, n, d)) * 0.5).astype(np.float32)
        c0 = (rng.standard_normal((layers, n, d)) * 0.5).astype(np.float32)
        log_probs, h, c = sess.run(None, {"x": x, "h0": h0, "c0": c0})
        state = (torch.from_numpy(h0), torch.from_numpy(c0))
        ref, (ref_h, ref_m) = model(torch.from_numpy(x), records_for(model, [record] * n), state)
        assert log_probs.shape == (n, V)
        close(log_probs, ref[:, -1])
        close(h, ref_h)
        close(c, ref_m)

    # icefall's state-less form: tokens only, 0-padded (plus a spare column) -> -log P(sentence).
    res = export_model(model, VOCAB, tmp_path / "nll.onnx", ExportOptions("nll", context=record))
    sess = session(res.path)
    for n in range(1, 5):
        x, lens = padded(rng, [int(k) for k in rng.integers(0, 6, n)])
        tokens = np.zeros((n, x.shape[1] - 1), dtype=np.int64)  # w1..wn, 0 after, spare column
        for j, k in enumerate(lens - 2):
            tokens[j, :k] = x[j, 1 : 1 + k]
        (nll,) = sess.run(None, {"x": tokens, "x_lens": lens - 2})
        xt = torch.from_numpy(x)
        ref = model.score(
            xt[:, :-1], xt[:, 1:], torch.from_numpy(lens - 1), records_for(model, [record] * n)
        )
        close(nll, -ref.sum(dim=1))


@torch.no_grad()
def test_untied_embeddings_and_numerical_contexts(tmp_path: Path) -> None:
    model = make_model("factor", variables=(GENRE, GEO), tie_embeddings=False, num_layers=1)
    with pytest.raises(ValueError, match=r"\['geo'\] are numerical.*--contexts FILE.jsonl"):
        export_model(model, VOCAB, tmp_path / "m.onnx", ExportOptions("multi"))
    records = ({"genre": "news", "geo": [0.1, 0.2]}, {"geo": "1.5, -2"}, {"genre": "chat"})
    res = export_model(model, VOCAB, tmp_path / "m.onnx", ExportOptions("multi", contexts=records))
    assert res.contexts == (
        {},
        {"genre": "news", "geo": [0.1, 0.2]},
        {"geo": [1.5, -2.0]},
        {"genre": "chat"},
    )
    x = np.array([[1, 5, 9], [1, 7, 8], [1, 3, 4], [1, 20, 30]])
    cids = np.array([3, 2, 1, 0])
    zeros = np.zeros((1, 4, 16), dtype=np.float32)
    log_probs, _, _ = session(res.path).run(
        None, {"x": x, "h0": zeros, "c0": zeros, "context_id": cids}
    )
    ref, _ = model(torch.from_numpy(x), [res.contexts[i] for i in cids])
    close(log_probs, ref)
    # The context matters: rows under different contexts differ (<s>: -inf in both, left out).
    assert np.nanmax(np.abs(log_probs[0] - log_probs[3])) > 1e-3


def test_metadata_inputs_and_outputs_are_as_documented(tmp_path: Path) -> None:
    model = make_model("factor", variables=(GENRE,))
    res = export_model(model, VOCAB, tmp_path / "lm.onnx", ExportOptions("multi"))
    loaded = onnx.load(str(res.path))
    onnx.checker.check_model(loaded, full_check=True)
    assert loaded.opset_import[0].version == 17 and loaded.ir_version == 8
    props = {p.key: p.value for p in loaded.metadata_props}
    assert props == {
        "model_type": "context_lstm",
        "format": "rescorer-onnx",
        "format_version": "1",
        "version": "1",
        "export_kind": "multi",
        "comment": "factor context LSTM, multi export, 4 contexts by context_id",
        "vocab_size": "50",
        "sos_id": "1",
        "eos_id": "2",
        "unk_id": "0",
        "pad_id": "2",
        "token_ids": "toolkit",
        "num_layers": "2",
        "hidden_size": "16",
        "embedding_dim": "12",
        "mode": "factor",
        "layer_norm": "true",
        "context_variables": '[{"name": "genre", "kind": "categorical", '
        '"values": ["news", "sport", "chat"]}]',
        "contexts": '[{}, {"genre": "news"}, {"genre": "sport"}, {"genre": "chat"}]',
        "num_contexts": "4",
        "vocab_file": "lm.vocab.txt",
        "log_base": "e",
        "model_author": "rescorer",
        "url": "",
    }
    assert res.metadata == props
    assert res.vocab_path == tmp_path / "lm.vocab.txt"
    assert res.vocab_path.read_text(encoding="utf-8") == "".join(t + "\n" for t in VOCAB)

    def dims(values: Sequence[onnx.ValueInfoProto]) -> dict[str, list]:
        return {
            v.name: [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim]
            for v in values
        }

    assert dims(loaded.graph.input) == {
        "x": ["N", "L"],
        "h0": [2, "N", 16],
        "c0": [2, "N", 16],
        "context_id": ["N"],
    }
    assert dims(loaded.graph.output) == {
        "log_softmax": ["N", "L", 50],
        "next_h0": [2, "N", 16],
        "next_c0": [2, "N", 16],
    }
    # FactorCell: W' and b' stacked per context, and the output bias; shared E.
    shapes = {t.name: tuple(t.dims) for t in loaded.graph.initializer}
    assert shapes["l0_w_x_t"] == (4, 12, 48) and shapes["l0_w_h_t"] == (4, 16, 48)
    assert shapes["l1_w_t"] == (4, 32, 48) and shapes["l1_b"] == (4, 48)
    assert shapes["output_bias"] == (4, 50) and shapes["embedding"] == (50, 12)
    assert shapes["projection_t"] == (16, 12) and shapes["output_embedding_t"] == (12, 50)
    # Per-context W': an If between one context for the batch (W' gathered once, shared
    # matmuls) and a context per row (W' gathered per row, batched matmuls); one Scan each.
    (branch,) = [n for n in loaded.graph.node if n.op_type == "If"]
    for attr in branch.attribute:
        assert [n.op_type for n in attr.g.node].count("Scan") == 1

    single = export_model(
        model, VOCAB, tmp_path / "one.onnx", ExportOptions("scorer", context={"genre": "chat"})
    )
    meta = single.metadata
    assert meta["contexts"] == '[{"genre": "chat"}]' and meta["export_kind"] == "scorer"
    assert meta["comment"] == 'factor context LSTM, scorer export, {"genre": "chat"}'
    scorer = onnx.load(str(single.path))
    assert dims(scorer.graph.input) == {"x": ["N", "L"], "x_lens": ["N"]}
    assert dims(scorer.graph.output) == {"token_logprobs": ["N", "T"], "sentence_logprob": ["N"]}
    shapes = {t.name: tuple(t.dims) for t in scorer.graph.initializer}
    assert shapes["l0_w_x_t"] == (12, 48) and shapes["output_bias"] == (50,)
    assert [n.op_type for n in scorer.graph.node].count("Scan") == 1  # one loop, every layer

    nll = export_model(
        model, VOCAB, tmp_path / "nll.onnx",
        ExportOptions("nll", context={"genre": "chat"}, author="me", url="https://example.org/lm"),
    )  # fmt: skip
    assert nll.metadata["export_kind"] == "nll" and nll.metadata["model_author"] == "me"
    assert nll.metadata["url"] == "https://example.org/lm" and nll.metadata["vocab_size"] == "50"
    loaded = onnx.load(str(nll.path))
    assert dims(loaded.graph.input) == {"x": ["N", "L"], "x_lens": ["N"]}
    assert dims(loaded.graph.output) == {"nll": ["N"]}


@torch.no_grad()
def test_nll_export_ignores_padding_and_has_parity(tmp_path: Path) -> None:
    model = make_model("factor", variables=(GENRE,))
    record = {"genre": "news"}
    res = export_model(model, VOCAB, tmp_path / "nll.onnx", ExportOptions("nll", context=record))
    sess = session(res.path)
    words = np.array([[5, 9, 7], [4, 0, 0]], dtype=np.int64)
    lens = np.array([3, 1], dtype=np.int64)
    (nll,) = sess.run(None, {"x": words, "x_lens": lens})
    wide = np.concatenate([words, np.full((2, 4), 11, dtype=np.int64)], axis=1)  # junk padding
    (nll_wide,) = sess.run(None, {"x": wide, "x_lens": lens})
    np.testing.assert_allclose(nll_wide, nll, atol=1e-6, rtol=0)
    # by hand from the step form of the same model: -(log p(w1|<s>) + ... + log p(</s>|wn))
    for row, k in zip(words, lens, strict=True):
        seq = torch.tensor([[1, *row[:k]]])
        log_probs, _ = model(seq, [record])
        targets = [*row[:k], 2]
        want = -sum(float(log_probs[0, t, targets[t]]) for t in range(k + 1))
        assert abs(float(nll[list(lens).index(k)]) - want) < ATOL
    report = check_parity(model, res.path)
    assert report.kind == "nll" and report.ok and report.max_abs_diff < 1e-4
    # not a model for `onnx:` scoring: refused with what to use instead
    from rescorer.lms.onnx import OnnxLM

    with pytest.raises(ValueError, match="state-less form for sherpa-onnx"):
        OnnxLM(res.path)


def test_softmax_bias_and_concat_stack_only_what_depends_on_the_context(tmp_path: Path) -> None:
    for mode, stacked in (("softmax_bias", set()), ("concat", {"l0_b", "l1_b"})):
        res = export_model(
            make_model(mode, variables=(GENRE,)), VOCAB, tmp_path / "m.onnx", ExportOptions("multi")
        )
        shapes = {t.name: tuple(t.dims) for t in onnx.load(str(res.path)).graph.initializer}
        per_context = {k for k, s in shapes.items() if s[:1] == (4,) and k != "output_bias"}
        assert per_context == stacked and shapes["output_bias"] == (4, 50)


def test_context_sets() -> None:
    model = make_model("concat")
    combos = all_context_records(model)
    assert len(combos) == 4 * 3 and combos[0] == {}
    assert {"genre": "news"} in combos and {"topic": "games"} in combos
    assert {"genre": "chat", "topic": "money"} in combos
    with pytest.raises(ValueError, match="make 12 contexts, more than 5.*--contexts"):
        all_context_records(model, limit=5)
    got = context_records(model, [{"genre": "news"}, None, {"genre": "news", "topic": ""}])
    assert got == [{}, {"genre": "news"}]  # expected first, duplicates dropped
    with pytest.raises(ValueError, match="context record 2: .*unknown value 'weather'"):
        context_records(model, [{"genre": "news"}, {"genre": "weather"}])
    assert all_context_records(make_model("unadapted")) == [{}]


@pytest.mark.parametrize("mode", ["unadapted", "factor"])
@torch.no_grad()
def test_class_factored_output_matches_pytorch(tmp_path: Path, mode: str) -> None:
    model = make_model(mode, num_layers=1)
    counts = [0 if i == 1 else 1000 // (i + 1) + 1 for i in range(V)]  # <s> never predicted
    classes = shortlist_classes(counts, 6, 3)  # 6 words each a class, 3 clusters of the rest
    classy = ContextLSTM(replace(model.config, word_classes=tuple(classes)))
    classy.load_state_dict(model.state_dict(), strict=False)
    torch.nn.init.normal_(classy.class_output.class_layer.weight)
    record = {"genre": "sport", "topic": "money"} if classy.adaptive else None
    rng = np.random.default_rng(3)
    step = export_model(classy, VOCAB, tmp_path / "s.onnx", ExportOptions("step", context=record))
    x = rng.integers(0, V, (3, 4))
    h0 = (rng.standard_normal((1, 3, 16)) * 0.5).astype(np.float32)
    log_probs, h, c = session(step.path).run(None, {"x": x, "h0": h0, "c0": h0})
    state = (torch.from_numpy(h0), torch.from_numpy(h0))
    ref, _ = classy(torch.from_numpy(x), records_for(classy, [record] * 3), state)
    assert np.isneginf(log_probs[..., 1]).all() and np.isneginf(ref[..., 1].numpy()).all()
    keep = [i for i in range(V) if i != 1]
    close(log_probs[..., keep], ref[..., keep])
    np.testing.assert_allclose(np.exp(log_probs).sum(-1), 1.0, atol=1e-5)
    # ... and differs from the full softmax over the same logits (the classes matter)
    full, _ = model(torch.from_numpy(x), records_for(model, [record] * 3), state)
    assert np.abs(log_probs[..., keep] - full[..., keep].numpy()).max() > 1e-2
    one = export_model(
        classy, VOCAB, tmp_path / "t.onnx", ExportOptions("score-token", context=record)
    )
    report = check_parity(classy, one.path)  # <s> at -inf on both sides, the rest within 1e-4
    assert report.ok and report.kind == "score-token", report.describe()
    scorer = export_model(classy, VOCAB, tmp_path / "m.onnx", ExportOptions("multi-scorer"))
    xs, lens = padded(rng, [3, 0, 5])
    cids = np.array([0, len(scorer.contexts) - 1, 0])
    tok, total = session(scorer.path).run(None, {"x": xs, "x_lens": lens, "context_id": cids})
    xt = torch.from_numpy(xs)
    recs = records_for(classy, [scorer.contexts[i] for i in cids])
    ref_tok = classy.score(xt[:, :-1], xt[:, 1:], torch.from_numpy(lens - 1), recs)
    close(tok, ref_tok)
    close(total, ref_tok.sum(dim=1))


def test_bad_records_and_options_are_value_errors() -> None:
    model = make_model("factor")
    record = normalise_record(model, {"topic": "games", "genre": "news"})
    assert list(record.items()) == [("genre", "news"), ("topic", "games")]  # the model's order
    with pytest.raises(ValueError, match=r"unknown value 'weather'; expected one of 'news', "):
        normalise_record(model, {"genre": "weather"})
    with pytest.raises(ValueError, match=r"unknown context field\(s\) \['speaker'\]; .*"):
        normalise_record(model, {"speaker": "s1"})
    with pytest.raises(ValueError, match="expected a mapping"):
        normalise_record(model, ["news"])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="the model is unadapted"):
        normalise_record(make_model("unadapted"), {"genre": "news"})
    with pytest.raises(ValueError, match="export kind must be one of"):
        ExportOptions("lstm")
    with pytest.raises(ValueError, match="for the multi-context kinds"):
        ExportOptions("step", contexts=({"genre": "news"},))
    with pytest.raises(ValueError, match="give `contexts`"):
        ExportOptions("multi", context={"genre": "news"})
    with pytest.raises(ValueError, match="opset: expected an integer >= 17, got 13"):
        ExportOptions(opset=13)
    assert KINDS == EXPORT_KINDS
    assert vocab_path_for("a/lm.step.onnx") == Path("a/lm.step.vocab.txt")
    assert int8_path_for("a/lm.onnx") == Path("a/lm.int8.onnx")


def test_graph_weights_are_checked() -> None:
    e = np.zeros((V, 16), np.float32)
    layer = LayerWeights(np.zeros((48, 32), np.float32), np.zeros(48, np.float32))
    ok = LSTMWeights(e, e, None, (layer,), np.zeros(V, np.float32))
    assert ok.num_contexts is None and ok.hidden_dim == 16
    with pytest.raises(ValueError, match=r"layer 0 weight: expected shape \(48, 32\)"):
        LSTMWeights(e, e, None, (LayerWeights(np.zeros((48, 30)), np.zeros(48)),), np.zeros(V))
    with pytest.raises(ValueError, match=r"projection: expected an \(e, d\) = \(12, 16\)"):
        small = np.zeros((V, 12), np.float32)
        LSTMWeights(
            small, small, None, (LayerWeights(np.zeros((48, 28)), np.zeros(48)),), ok.output_bias
        )
    with pytest.raises(ValueError, match="finite"):
        LayerWeights(np.full((48, 32), np.nan), np.zeros(48))
    stacked = LSTMWeights(e, e, None, (layer,), np.zeros((3, V), np.float32))
    assert stacked.num_contexts == 3
    with pytest.raises(ValueError, match="weights hold 3 contexts"):
        step_graph(stacked, with_context=False)


def test_read_context_records(tmp_path: Path) -> None:
    model = make_model("factor")
    good = tmp_path / "ctx.jsonl"
    good.write_text('{"genre": "news"}\n\n{"genre": "sport", "topic": "games"}\n')
    assert read_context_records(good, model) == [
        {"genre": "news"},
        {"genre": "sport", "topic": "games"},
    ]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"genre": "news"}\n["sport"]\n')
    with pytest.raises(InputError, match=r"bad.jsonl:2: expected a JSON object"):
        read_context_records(bad)
    bad.write_text('{"genre": "news"}\n{"genre": "weather"}\n')
    with pytest.raises(InputError, match=r"bad.jsonl:2: .*unknown value 'weather'"):
        read_context_records(bad, model)
    bad.write_text("{oops\n")
    with pytest.raises(InputError, match=r"bad.jsonl:1: invalid JSON"):
        read_context_records(bad)
    bad.write_text("\n")
    with pytest.raises(InputError, match="no context records"):
        read_context_records(bad)


def test_export_checkpoint_and_parity_report(tmp_path: Path) -> None:
    model = make_model("factor", num_layers=1)
    ckpt = save_checkpoint(tmp_path / "ckpt", model, VOCAB)
    res = export_checkpoint(ckpt, tmp_path / "out" / "lm.onnx", ExportOptions("multi-scorer"))
    assert res.path.is_file() and res.size_bytes == res.path.stat().st_size
    report = check_parity(model, res.path)
    assert isinstance(report, ParityReport) and report.ok and report.batches == 4
    assert report.max_abs_diff <= ATOL and "parity with PyTorch ok" in report.describe()
    # A different model is caught.
    other = check_parity(make_model("factor", num_layers=1, seed=5), res.path)
    assert not other.ok and "FAILED" in other.describe()
    with pytest.raises(ValueError, match="is a folder"):
        export_model(model, VOCAB, tmp_path, ExportOptions())
    with pytest.raises(ValueError, match="vocabulary has 3 tokens"):
        export_model(model, VOCAB[:3], tmp_path / "x.onnx")


def test_int8_quantisation(tmp_path: Path) -> None:
    model = make_model("factor", num_layers=2, scale=0.2)
    for kind in ("step", "multi"):
        res = export_model(model, VOCAB, tmp_path / f"{kind}.onnx", ExportOptions(kind))
        q = quantize_int8(res.path)
        assert q == tmp_path / f"{kind}.int8.onnx"
        loaded = onnx.load(str(q))
        onnx.checker.check_model(loaded, full_check=True)
        props = {p.key: p.value for p in loaded.metadata_props}
        assert props.pop("quantization").startswith("dynamic int8")
        assert props == res.metadata  # the vocabulary file stays the float model's
        ops = [n.op_type for n in loaded.graph.node]
        assert "MatMulInteger" in ops and "DynamicQuantizeLinear" in ops
        sentences = [["the", "cat", "sat"], ["a", "team", "won", "the", "match"], []]
        change = perplexity_change(res.path, q, sentences)
        assert change.tokens == 3 + 5 + 0 + 3
        assert 0 < change.max_token_diff < 0.1 and abs(change.relative_change) < 0.05
        assert "(int8)" in change.describe()
    with pytest.raises(ValueError, match="same file"):
        quantize_int8(res.path, res.path)


# -- the command line -------------------------------------------------------------------------


def run(args: Sequence[object]) -> Result:
    return CliRunner().invoke(main, ["-q", "export", *map(str, args)], catch_exceptions=False)


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    model = make_model("factor", num_layers=1, scale=0.3)
    return save_checkpoint(tmp_path_factory.mktemp("export_cli") / "ckpt", model, VOCAB)


def meta_of(path: Path) -> dict[str, str]:
    return {p.key: p.value for p in onnx.load(str(path)).metadata_props}


def test_cli_export_step_and_scorer(tmp_path: Path, ckpt: Path) -> None:
    out = tmp_path / "lm.onnx"
    result = run([ckpt, out, "--context", "genre=news", "--context", "topic=games"])
    assert result.exit_code == 0, result.output
    assert f"wrote {out} (step, 1 context, " in result.output
    assert f"and {tmp_path / 'lm.vocab.txt'}" in result.output
    assert "parity with PyTorch ok" in result.output
    assert json.loads(meta_of(out)["contexts"]) == [{"genre": "news", "topic": "games"}]
    result = run([ckpt, tmp_path / "sc.onnx", "--kind", "scorer", "--no-check"])
    assert result.exit_code == 0 and "parity" not in result.output
    assert meta_of(tmp_path / "sc.onnx")["export_kind"] == "scorer"
    nll = tmp_path / "nll.onnx"
    result = run([ckpt, nll, "--kind", "nll", "--context", "genre=news", "--url", "https://x.org"])
    assert result.exit_code == 0, result.output
    assert "(nll, 1 context, " in result.output and "parity with PyTorch ok" in result.output
    assert meta_of(nll)["url"] == "https://x.org" and meta_of(nll)["model_author"] == "rescorer"


def test_cli_export_multi_with_contexts_and_int8(tmp_path: Path, ckpt: Path) -> None:
    ctx = tmp_path / "ctx.jsonl"
    ctx.write_text('{"genre": "news"}\n{"genre": "sport", "topic": "money"}\n')
    text = tmp_path / "dev.txt"
    text.write_text("the cat sat on the mat\na team won the match today\n")
    out = tmp_path / "multi.onnx"
    args = [ckpt, out, "--kind", "multi", "--contexts", ctx, "--quantize", "int8"]
    result = run([*args, "--ppl-text", text])
    assert result.exit_code == 0, result.output
    assert "(multi, 3 contexts, " in result.output and "parity with PyTorch ok" in result.output
    assert f"wrote {tmp_path / 'multi.int8.onnx'} (dynamic int8, " in result.output
    assert f"int8 on {text}: perplexity " in result.output and "over 14 tokens" in result.output
    assert json.loads(meta_of(out)["contexts"]) == [
        {},
        {"genre": "news"},
        {"genre": "sport", "topic": "money"},
    ]


def test_cli_export_errors(tmp_path: Path, ckpt: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "lm.onnx"
    cases = [
        (["--context", "genre=weather"], "unknown value 'weather'; expected one of 'news', "),
        (["--context", "genre"], "expected FIELD=VALUE, got 'genre'"),
        (["--context", "speaker=s1"], "unknown context field(s) ['speaker']"),
        (["--kind", "multi", "--context", "genre=news"], "takes --contexts FILE.jsonl"),
        (["--ppl-text", ckpt / "vocab.txt"], "--ppl-text reports what --quantize costs"),
        (["--kind", "lstm"], "Invalid value for '--kind'"),
    ]
    for extra, message in cases:
        result = run([ckpt, out, *extra])
        assert result.exit_code == 2, (extra, result.output)
        assert message in result.output and "Traceback" not in result.output
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"genre": "news"}\n{"genre": "weather"}\n')
    result = run([ckpt, out, "--kind", "multi", "--contexts", bad])
    assert result.exit_code == 2 and f"{bad}:2: " in result.output
    result = run([ckpt, out, "--contexts", bad])
    assert result.exit_code == 2 and "--contexts is for --kind multi" in result.output
    result = run([tmp_path, out])
    assert result.exit_code == 2 and "config.json" in result.output
    assert not out.exists()
    # Numerical variables cannot be enumerated: a clear error asking for a JSONL file.
    geo = save_checkpoint(tmp_path / "geo", make_model("factor", variables=(GEO,)), VOCAB)
    result = run([geo, out, "--kind", "multi"])
    assert result.exit_code == 2 and "['geo'] are numerical" in result.output
    # A failed parity check is an error (exit 1), naming the file.
    import rescorer.export.parity

    def failing(model: ContextLSTM, path: Path) -> ParityReport:
        return ParityReport("step", 0.5, 4)

    monkeypatch.setattr(rescorer.export.parity, "check_parity", failing)
    result = run([ckpt, out])
    assert result.exit_code == 1 and "FAILED: max abs difference 5.00e-01" in result.output


# -- the vector form: the context embedding as an input ---------------------------------------

VECTOR_CONFIGS = list(itertools.product(("factor", "concat", "softmax_bias"), (1, 2), (16, 12)))


@pytest.mark.parametrize(
    ("mode", "layers", "embed_dim"),
    VECTOR_CONFIGS,
    ids=[f"{m}-{n}layer-e{e}" for m, n, e in VECTOR_CONFIGS],
)
def test_vector_kinds_match_pytorch_with_a_context_per_row(
    tmp_path: Path, mode: str, layers: int, embed_dim: int
) -> None:
    model = make_model(mode, num_layers=layers, embed_dim=embed_dim, variables=(TOPIC, GEO))
    for kind in ("vector-step", "vector-scorer"):
        res = export_model(model, VOCAB, tmp_path / f"{kind}.onnx", ExportOptions(kind))
        report = check_parity(model, res.path, batch_sizes=(1, 2, 4))
        assert report.ok and report.max_abs_diff <= ATOL, report.describe()
    # the records' own path: c of each record fed to the scorer, rows of different contexts
    records = [{"topic": "money", "geo": [0.3, -2.0]}, {"topic": "games"}, None]
    c = model.context_embedding(records).detach().numpy()
    x, lens = padded(np.random.default_rng(layers), [5, 3, 4])
    tok, _ = session(tmp_path / "vector-scorer.onnx").run(
        None, {"x": x, "x_lens": lens, "context_vector": c}
    )
    xt = torch.from_numpy(x)
    ref = model.score(xt[:, :-1], xt[:, 1:], torch.from_numpy(lens - 1), records)
    close(tok, ref)
    # and each row's vector is its own: another row's vector gives other values
    swapped, _ = session(tmp_path / "vector-scorer.onnx").run(
        None, {"x": x, "x_lens": lens, "context_vector": c[::-1].copy()}
    )
    assert np.abs(swapped[0] - tok[0]).max() > 1e-3


def test_vector_export_metadata_and_refusals(tmp_path: Path) -> None:
    model = make_model("factor", variables=(TOPIC, GEO))
    res = export_model(model, VOCAB, tmp_path / "v.onnx", ExportOptions("vector-scorer"))
    props = meta_of(res.path)
    assert props["export_kind"] == "vector-scorer" and props["context_dim"] == "4"
    assert props["context_vector_field"] == "context_vector"
    expected = model.context_embedding(None, batch_size=1)[0].tolist()
    assert json.loads(props["expected_context_vector"]) == pytest.approx(expected, abs=1e-7)
    assert [i.name for i in session(res.path).get_inputs()] == ["x", "x_lens", "context_vector"]
    with pytest.raises(ValueError, match=r"\['genre'\] have one-hot softmax biases"):
        export_model(make_model("factor"), VOCAB, tmp_path / "g.onnx", ExportOptions("vector-step"))
    with pytest.raises(ValueError, match="unadapted model has no context embedding"):
        export_model(
            make_model("unadapted"), VOCAB, tmp_path / "u.onnx", ExportOptions("vector-step")
        )
    with pytest.raises(ValueError, match="takes the context embedding as an input"):
        ExportOptions("vector-scorer", context={"topic": "money"})


def test_a_folded_step_export_types_as_the_torch_model_with_its_context(
    tmp_path: Path, ckpt: Path
) -> None:
    """Issue 49: `export --kind step --context ...` typed through `keyboard-eval --lm onnx:`
    gives the keystrokes, hits and ranks of the torch model given that context."""
    rng = np.random.default_rng(0)
    words = [w for w in VOCAB if not w.startswith("<")]
    lines = [" ".join(rng.choice(words, size=rng.integers(3, 9))) for _ in range(25)]
    text = tmp_path / "t.tsv"
    text.write_text("".join(f"s{i}\t{line}\n" for i, line in enumerate(lines)), encoding="utf-8")
    ctx = tmp_path / "ctx.jsonl"
    ctx.write_text(
        "".join(
            json.dumps({"utt": f"s{i}", "fields": {"genre": "sport", "topic": "money"}}) + "\n"
            for i in range(len(lines))
        ),
        encoding="utf-8",
    )
    onnx_path = tmp_path / "sport.onnx"
    assert (
        run([ckpt, onnx_path, "--context", "genre=sport", "--context", "topic=money"]).exit_code
        == 0
    )

    def typed(lm: str, *extra: object) -> list[dict]:
        out = tmp_path / f"{len(list(tmp_path.iterdir()))}.jsonl"
        args = ["-q", "keyboard-eval", "--lm", lm, "--text", text, "-k", "1,3", *extra]
        result = CliRunner().invoke(main, [*map(str, args), "--per-sentence", str(out)])
        assert result.exit_code == 0, result.output
        return [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]

    with_context = typed(f"m=torch:{ckpt}", "--context", ctx)
    folded = typed(f"m=onnx:{onnx_path}")
    assert folded == with_context
    assert typed(f"m=torch:{ckpt}") != with_context  # the context changes the suggestions
