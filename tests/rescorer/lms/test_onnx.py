"""OnnxLM (``onnx:MODEL.onnx``): ONNX Runtime scoring against TorchLM, streaming, contexts, CLI.

Scores of every export kind are checked against ``TorchLM`` on the same checkpoint (max abs
difference <= 1e-4), and a whole rescoring run through ``--lm torch:`` and ``--lm onnx:`` must give
the same WER, the same 1-best and the same scores to 1e-4.
"""

from __future__ import annotations

import json
import logging
import random
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from click.testing import CliRunner, Result

from rescorer.cli.main import main
from rescorer.export.exporter import ExportOptions, export_model
from rescorer.export.runtime import create_session
from rescorer.lm_models.checkpoint import save_checkpoint
from rescorer.lm_models.lstm.model import ContextLSTM
from rescorer.lms import LOADERS, load_lm
from rescorer.lms.contract import LanguageModel
from rescorer.lms.onnx import OnnxLM, OnnxLMState
from rescorer.lms.torch import TorchLM
from tests.onnx_helpers import VOCAB, WORDS, make_model
from tests.paths import REPO as ROOT

EXAMPLE = ROOT / "examples" / "onnx_greedy_predict.py"
ATOL = 1e-4
KINDS = ("step", "multi", "scorer", "multi-scorer")
NEWS = {"genre": "news", "topic": "money"}
CONTEXTS: list[dict | None] = [
    NEWS,
    {"genre": "sport"},  # partial: has its own id in the default context set
    None,
    {},
    {"genre": "chat", "topic": "games", "speaker": "s1"},  # unknown field: ignored
    {"genre": "weather"},  # unseen value: missing
]


# tiny models: one thread; main reconfigures the root logger: restored after each test
pytestmark = pytest.mark.usefixtures("one_torch_thread", "restore_logging")


@pytest.fixture(scope="module")
def model() -> ContextLSTM:
    return make_model("factor", num_layers=2, embed_dim=12, hidden_dim=16, scale=0.3)


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory, model: ContextLSTM) -> dict[str, Path]:
    """The checkpoint, and one export of each kind (single-context ones folded to NEWS)."""
    root = tmp_path_factory.mktemp("onnx_lm")
    out = {"ckpt": save_checkpoint(root / "ckpt", model, VOCAB)}
    for kind in KINDS:
        opts = ExportOptions(kind) if kind.startswith("multi") else ExportOptions(kind, NEWS)
        out[kind] = export_model(model, VOCAB, root / f"{kind}.onnx", opts).path
    return out


@pytest.fixture(scope="module")
def torch_lm(files: dict[str, Path]) -> TorchLM:
    return TorchLM(files["ckpt"], device="cpu")


def nbest_like(rng: random.Random, n_utts: int, n_hyps: int) -> tuple[list, list]:
    sentences, contexts = [], []
    for _ in range(n_utts):
        base = [rng.choice(WORDS) for _ in range(rng.randint(2, 9))]
        context = rng.choice(CONTEXTS)
        for _ in range(n_hyps):
            hyp = list(base)
            for _ in range(rng.randint(1, 3)):
                pos = rng.randrange(len(hyp) + 1)
                if rng.random() < 0.6 and pos < len(hyp):
                    hyp[pos] = rng.choice([*WORDS, "zebra"])
                elif rng.random() < 0.5:
                    hyp.insert(pos, rng.choice(WORDS))
                elif hyp:
                    del hyp[min(pos, len(hyp) - 1)]
            sentences.append(hyp)
            contexts.append(context)
    return sentences, contexts


def test_registered_and_free_of_torch(files: dict[str, Path]) -> None:
    # the runtime reads exports through rescorer.export.format and rescorer.export.runtime alone: no
    # torch, no model code, no exporter
    assert "onnx" in LOADERS
    code = (
        "import sys, rescorer.lms.onnx, rescorer.lms.contract, rescorer.cli.main\n"
        "heavy = [m for m in ('torch', 'lm_models') if m in sys.modules]\n"
        "readers = ('rescorer.export.format', 'rescorer.export.runtime')\n"
        "exporters = [m for m in sys.modules if m.startswith('export.') and m not in readers]\n"
        "print(sorted(heavy + exporters))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
    lm = load_lm(f"mine=onnx:{files['multi']}", case="none", device="cpu")
    assert isinstance(lm, LanguageModel) and isinstance(lm, OnnxLM)
    assert lm.name == "mine" and lm.units == "word" and lm.case == "none" and lm.device == "cpu"
    assert "kind='multi'" in repr(lm)


@pytest.mark.parametrize("kind", KINDS)
def test_scores_equal_torch(files: dict[str, Path], torch_lm: TorchLM, kind: str) -> None:
    rng = random.Random(KINDS.index(kind))
    sentences, contexts = nbest_like(rng, 8, 5)
    sentences += [[], ["cat"], ["zebra", "zebra"]]
    contexts += [None, {"genre": "sport"}, NEWS]
    if not kind.startswith("multi"):
        contexts = [NEWS] * len(sentences)  # the context folded into the export
    lm = OnnxLM(files[kind], device="cpu", batch_tokens=64)
    got = lm.token_logprobs(sentences, contexts)
    want = torch_lm.token_logprobs(sentences, contexts)
    assert len(got) == len(sentences)
    for g, w, words in zip(got, want, sentences, strict=True):
        assert g.dtype == np.float64 and g.shape == (len(words) + 1,)
        np.testing.assert_allclose(g, w, atol=ATOL, rtol=0)
    totals = lm.sentence_logprobs(sentences, contexts)
    np.testing.assert_allclose(totals, [g.sum() for g in got], atol=1e-9)
    # One big batch or many small ones: the same scores, in input order.
    big = OnnxLM(files[kind], device="cpu").token_logprobs(sentences, contexts)
    for a, b in zip(big, got, strict=True):
        np.testing.assert_allclose(a, b, atol=1e-6, rtol=0)
    assert lm.token_logprobs([]) == [] and lm.sentence_logprobs([]).shape == (0,)


# -- step kinds: the prefix-shared forest --------------------------------------------------------


def counting(lm: OnnxLM, monkeypatch: pytest.MonkeyPatch) -> list[dict[str, np.ndarray]]:
    """Record the feed of every session run of ``lm``."""
    feeds: list[dict[str, np.ndarray]] = []
    real_run = lm.session.run

    def run(names: object, feed: dict[str, np.ndarray]) -> object:
        feeds.append(feed)
        return real_run(names, feed)

    monkeypatch.setattr(lm.session, "run", run)
    return feeds


@pytest.mark.parametrize("kind", ["step", "multi"])
def test_step_kinds_score_distinct_prefixes_once(
    files: dict[str, Path], monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    rng = random.Random(30 + len(kind))
    sentences, contexts = nbest_like(rng, 10, 6)
    sentences += [[], [], ["cat"]]
    contexts += [None, NEWS, {"genre": "sport"}]
    if kind == "step":
        contexts = [NEWS] * len(sentences)
    padded = OnnxLM(files[kind], device="cpu", prefix_tree=False)  # the whole-sentence path
    want = padded.token_logprobs(sentences, contexts)
    for batch in (4096, 7, 1):
        lm = OnnxLM(files[kind], device="cpu", batch_tokens=batch)
        feeds = counting(lm, monkeypatch)
        got = lm.token_logprobs(sentences, contexts)
        for g, w, words in zip(got, want, sentences, strict=True):
            assert g.dtype == np.float64 and g.shape == (len(words) + 1,)
            np.testing.assert_allclose(g, w, atol=ATOL, rtol=0)
        # one row per distinct (context, prefix), each run one position of <= batch rows
        cids = lm.context_ids(len(sentences), contexts)
        ids = lm.words.ids(sentences)
        prefixes = {
            (int(c), tuple(s[:k]))
            for c, s in zip(cids, ids, strict=True)
            for k in range(len(s) + 1)
        }
        assert sum(len(f["x"]) for f in feeds) == len(prefixes)
        assert all(f["x"].shape[1] == 1 and len(f["x"]) <= batch for f in feeds)
        if kind == "multi":  # a FactorCell export: every run of one context (its shared W')
            assert lm._one_context_runs
            assert all(len(set(f["context_id"].tolist())) == 1 for f in feeds)
            assert len({int(f["context_id"][0]) for f in feeds}) == len(set(cids.tolist())) > 1
    assert not OnnxLM(files["scorer"], device="cpu", prefix_tree=True).prefix_tree


def test_mixed_contexts_share_runs_where_that_is_cheap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A SoftmaxBias multi export gathers only a bias per row: the trees run together.
    model = make_model("softmax_bias", num_layers=1, scale=0.3)
    path = export_model(model, VOCAB, tmp_path / "m.onnx", ExportOptions("multi")).path
    want = TorchLM(save_checkpoint(tmp_path / "ckpt", model, VOCAB), device="cpu")
    sentences, contexts = nbest_like(random.Random(5), 12, 4)
    lm = OnnxLM(path, device="cpu")
    feeds = counting(lm, monkeypatch)
    got = lm.token_logprobs(sentences, contexts)
    for g, w in zip(got, want.token_logprobs(sentences, contexts), strict=True):
        np.testing.assert_allclose(g, w, atol=ATOL, rtol=0)
    assert not lm._one_context_runs
    assert len(set(feeds[0]["context_id"].tolist())) > 1  # the roots of several contexts
    assert len(feeds) == max(len(s) for s in sentences) + 1  # one run per depth


def test_multi_context_ids_follow_the_torch_rules(
    files: dict[str, Path], caplog: pytest.LogCaptureFixture
) -> None:
    lm = OnnxLM(files["multi-scorer"], device="cpu")
    assert lm.contexts[0] == {} and len(lm.contexts) == 12
    with caplog.at_level(logging.INFO, logger="rescorer.lms.onnx"):
        ids = lm.context_ids(len(CONTEXTS), CONTEXTS)
    assert lm.contexts[ids[0]] == NEWS and lm.contexts[ids[1]] == {"genre": "sport"}
    assert ids[2] == ids[3] == ids[5] == 0  # None, {} and an unseen value: expected context
    assert lm.contexts[ids[4]] == {"genre": "chat", "topic": "games"}
    assert "'speaker' is not one of the model's" in caplog.text
    assert "'weather' was not seen in training" in caplog.text
    # The context matters: news and sport rows score differently.
    news, sport = lm.sentence_logprobs([["the", "cat"]] * 2, [NEWS, {"genre": "sport"}])
    assert abs(news - sport) > 1e-3
    with pytest.raises(ValueError, match="2 contexts for 1 sentences"):
        lm.token_logprobs([["the"]], [None, None])


def test_records_missing_from_the_export_warn_once(
    tmp_path: Path, model: ContextLSTM, caplog: pytest.LogCaptureFixture
) -> None:
    path = export_model(
        model, VOCAB, tmp_path / "m.onnx", ExportOptions("multi", contexts=({"genre": "news"},))
    ).path
    lm = OnnxLM(path, device="cpu")
    with caplog.at_level(logging.WARNING, logger="rescorer.lms.onnx"):
        ids = lm.context_ids(3, [{"genre": "sport"}, {"genre": "sport"}, {"genre": "news"}])
        lm.context_ids(1, [{"genre": "sport"}])
    assert ids.tolist() == [0, 0, 1]
    assert caplog.text.count("is not one of the 2 exported; using context 0") == 1
    step = OnnxLM(
        export_model(model, VOCAB, tmp_path / "s.onnx", ExportOptions("step", NEWS)).path,
        device="cpu",
    )
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="rescorer.lms.onnx"):
        step.token_logprobs([["the"], ["a"]], [{"genre": "sport"}, {"genre": "sport"}])
        step.token_logprobs([["the"]], [NEWS])  # the folded one: no warning
    assert caplog.text.count("exported for the context {'genre': 'news', 'topic': 'money'}") == 1


@pytest.mark.parametrize("kind", ["step", "multi"])
def test_streaming_equals_whole_sentences(
    files: dict[str, Path], torch_lm: TorchLM, kind: str
) -> None:
    lm = OnnxLM(files[kind], device="cpu")
    sentences = [["the", "cat", "sat"], ["a", "zebra"], [], ["the", "team", "won", "the", "match"]]
    contexts = [NEWS] * 4 if kind == "step" else [NEWS, None, {"genre": "sport"}, {"genre": "chat"}]
    whole = torch_lm.token_logprobs(sentences, contexts)
    states = [lm.start(c) for c in contexts]
    assert all(isinstance(s, OnnxLMState) for s in states)
    got: list[list[float]] = [[] for _ in sentences]
    live = list(range(len(sentences)))
    step = 0
    while live:  # every unfinished sentence together, mixed contexts in one call
        toks = [sentences[i][step] if step < len(sentences[i]) else "</s>" for i in live]
        logps, new = lm.advance([states[i] for i in live], toks)
        for i, lp, st in zip(live, logps, new, strict=True):
            got[i].append(float(lp))
            states[i] = st
        live = [i for i in live if step < len(sentences[i])]
        step += 1
    for g, w in zip(got, whole, strict=True):
        np.testing.assert_allclose(g, w, atol=ATOL, rtol=0)
    assert lm.advance([], [])[1] == []
    # The whole next-token distribution after "the cat" equals PyTorch's.
    state = lm.advance(lm.advance([lm.start(NEWS)], ["the"])[1], ["cat"])[1][0]
    dist = lm.next_logprobs(state)
    assert lm.vocabulary() == tuple(VOCAB) and dist.shape == (len(VOCAB),)
    with torch.no_grad():
        ref, _ = torch_lm.model(torch.tensor([[1, VOCAB.index("the"), VOCAB.index("cat")]]), [NEWS])
    np.testing.assert_allclose(dist, ref[0, -1].double().numpy(), atol=ATOL, rtol=0)
    with pytest.raises(ValueError, match="states but"):
        lm.advance([lm.start()], [])
    with pytest.raises(ValueError, match="expected an OnnxLMState"):
        lm.advance([object()], ["the"])  # type: ignore[list-item]


def test_prediction_runs_the_network_once_per_word(
    files: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """next_logprobs then advance of the same state (what typing does) is one session run."""
    lm = OnnxLM(files["step"], device="cpu")
    calls = []
    real_run = lm.session.run

    def counting_run(*args: object, **kwargs: object) -> object:
        calls.append(1)
        return real_run(*args, **kwargs)

    monkeypatch.setattr(lm.session, "run", counting_run)
    state = lm.start(NEWS)
    for word in ["the", "cat", "sat"]:
        dist = lm.next_logprobs(state)
        logp, (nxt,) = lm.advance([state], [word])
        assert logp[0] == pytest.approx(dist[VOCAB.index(word)], abs=1e-6)
        state = nxt
    assert len(calls) == 3
    # Batches of several states are not cached: each call runs the network.
    lm.advance([lm.start(NEWS), lm.start(NEWS)], ["the", "a"])
    assert len(calls) == 4


def test_a_scorer_cannot_stream(files: dict[str, Path]) -> None:
    lm = OnnxLM(files["scorer"], device="cpu")
    with pytest.raises(ValueError, match=r"scorer\.onnx: a 'scorer' export scores whole sentences"):
        lm.start()
    with pytest.raises(ValueError, match="--kind step or multi"):
        lm.advance([], [])
    with pytest.raises(ValueError, match="scores whole sentences"):
        lm.next_logprobs(None)  # type: ignore[arg-type]


def test_case_and_oov(files: dict[str, Path]) -> None:
    lm = OnnxLM(files["multi"], device="cpu")
    upper = lm.token_logprobs([["THE", "CAT", "SAT"]])
    assert lm.case == "lower" and lm.to_units(["THE", "Cat"]) == ["the", "cat"]
    assert lm.oov_flags([["THE", "ZEBRA"]])[0].tolist() == [False, True]
    lower = OnnxLM(files["multi"], device="cpu", case="none").token_logprobs(
        [["the", "cat", "sat"]]
    )
    np.testing.assert_allclose(upper[0], lower[0], atol=0, rtol=0)
    a, b = lm.token_logprobs([["the", "zebra"], ["the", "<unk>"]])
    np.testing.assert_allclose(a, b, atol=0, rtol=0)


def test_devices(files: dict[str, Path], caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="rescorer.export.runtime"):
        session, device = create_session(files["step"], "auto")
    got_cuda = "CUDAExecutionProvider" in session.get_providers()
    assert device == ("cuda:0" if got_cuda else "cpu")
    if not got_cuda and "CUDAExecutionProvider" in ort.get_available_providers():
        # The GPU build lists CUDA without a GPU: one log line, then the CPU.
        assert caplog.text.count("CUDA execution provider is not usable here") == 1
    session, device = create_session(files["step"], "cpu")
    assert device == "cpu" and session.get_providers() == ["CPUExecutionProvider"]
    if not got_cuda:
        with pytest.raises(ValueError, match="device 'cuda' asked for"):
            create_session(files["step"], "cuda")
    with pytest.raises(ValueError, match="bad device 'tpu'"):
        create_session(files["step"], "tpu")
    with pytest.raises(ValueError, match="bad device 'cuda:x'"):
        create_session(files["step"], "cuda:x")


def test_bad_files(tmp_path: Path, files: dict[str, Path], model: ContextLSTM) -> None:
    with pytest.raises(ValueError, match="ONNX model file not found"):
        OnnxLM(tmp_path / "nope.onnx")
    res = export_model(model, VOCAB, tmp_path / "m.onnx", ExportOptions("step"))
    res.vocab_path.unlink()
    with pytest.raises(ValueError, match=r"its vocabulary file .*m.vocab.txt is missing"):
        OnnxLM(res.path, device="cpu")
    res.vocab_path.write_text("<unk>\n<s>\n</s>\n")
    with pytest.raises(ValueError, match="has 3 tokens but m.onnx says vocab_size=50"):
        OnnxLM(res.path, device="cpu")
    res.vocab_path.write_text("".join(t + "\n" for t in VOCAB))
    loaded = onnx.load(str(res.path))
    onnx.helper.set_model_props(loaded, {"format": "something-else"})
    onnx.save_model(loaded, str(tmp_path / "other.onnx"))
    with pytest.raises(ValueError, match="metadata format: expected 'rescorer-onnx'"):
        OnnxLM(tmp_path / "other.onnx", device="cpu")
    props = {p.key: p.value for p in onnx.load(str(res.path)).metadata_props}
    onnx.helper.set_model_props(loaded, {**props, "vocab_file": "../m.vocab.txt"})
    onnx.save_model(loaded, str(tmp_path / "escape.onnx"))
    with pytest.raises(ValueError, match="vocab_file: expected a file name in the model's folder"):
        OnnxLM(tmp_path / "escape.onnx", device="cpu")
    del loaded.metadata_props[:]
    onnx.save_model(loaded, str(tmp_path / "bare.onnx"))
    with pytest.raises(ValueError, match="metadata property 'format' missing"):
        OnnxLM(tmp_path / "bare.onnx", device="cpu")
    (tmp_path / "junk.onnx").write_bytes(b"not a model")
    with pytest.raises(ValueError, match="cannot load the ONNX model"):
        OnnxLM(tmp_path / "junk.onnx", device="cpu")
    with pytest.raises(ValueError, match="batch_tokens must be >= 1"):
        OnnxLM(files["step"], batch_tokens=0)


# -- the standalone example -------------------------------------------------------------------


@torch.no_grad()
def torch_greedy(model: ContextLSTM, record: dict | None, prompt: Sequence[str], n: int) -> list:
    index = {t: i for i, t in enumerate(VOCAB)}
    ctx = [record] if model.adaptive else None
    log_probs, state = model(torch.tensor([[1, *(index.get(w, 0) for w in prompt)]]), ctx)
    out: list[str] = []
    while True:
        scores = log_probs[0, -1].clone()
        scores[[0, 1]] = -float("inf")
        best = int(scores.argmax())
        if best == 2 or len(out) >= n:
            return out
        out.append(VOCAB[best])
        log_probs, state = model(torch.tensor([[best]]), ctx, state)


def run_example(args: Sequence[object]) -> str:
    """Run the example with torch and the toolkit made unimportable."""
    code = (
        "import runpy, sys\n"
        "for m in ('torch', 'rescorer', 'lm_models', 'export'): sys.modules[m] = None\n"
        f"sys.argv = {[str(EXAMPLE), *map(str, args)]!r}\n"
        f"runpy.run_path({str(EXAMPLE)!r}, run_name='__main__')\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd="/"
    )
    return out.stdout.strip()


def test_example_greedy_prediction(files: dict[str, Path], model: ContextLSTM) -> None:
    want = torch_greedy(model, NEWS, ["the", "team"], 6)
    assert len(want) >= 2  # a real continuation, not an immediate </s>
    assert run_example([files["step"], "the team", "--words", 6]) == " ".join(want)
    sport = {"genre": "sport", "topic": "games"}
    want = torch_greedy(model, sport, ["the", "market"], 6)
    assert want != torch_greedy(model, NEWS, ["the", "market"], 6)  # the context matters
    got = run_example(
        [files["multi"], "The market", "--words", 6, "--lower", "--context", "genre=sport",
         "--context", "topic=games"]
    )  # fmt: skip
    assert got == " ".join(want)


# -- the command line -------------------------------------------------------------------------


def run(args: Sequence[object]) -> Result:
    return CliRunner().invoke(main, ["-q", *map(str, args)], catch_exceptions=False)


NBEST_UTTS = {
    "u1": ["the cat sat on the mat", "the cat sat on a mat", "a cat sat on the mat"],
    "u2": ["the team won the match", "the team won", "a team lost the match"],
    "u3": ["shares fell today", "the shares fell", ""],
    "u4": ["she said it was big", "he said it was big", "she said it is big"],
}
REFS = {
    "u1": "the cat sat on the mat",
    "u2": "the team won the match",
    "u3": "shares fell today",
    "u4": "she said it was big",
}
CONTEXT_TSV = "utt\tgenre\tspeaker\nu1\tchat\ts1\nu2\tsport\ts2\nu3\tnews\ts1\nu4\t\ts3\n"


@pytest.fixture()
def cli_set(tmp_path: Path) -> dict[str, Path]:
    rows = []
    for utt, texts in NBEST_UTTS.items():
        hyps = [{"text": t, "scores": {"am": -0.3 * k}} for k, t in enumerate(texts)]
        rows.append(json.dumps({"utt": utt, "hyps": hyps}))
    nbest = tmp_path / "set.jsonl"
    nbest.write_text("\n".join(rows) + "\n", encoding="utf-8")
    ref = tmp_path / "ref.txt"
    ref.write_text("".join(f"{u} {t}\n" for u, t in REFS.items()), encoding="utf-8")
    ctx = tmp_path / "ctx.tsv"
    ctx.write_text(CONTEXT_TSV, encoding="utf-8")
    weights = tmp_path / "w.json"
    weights.write_text(
        json.dumps(
            {
                "format": "rescorer-weights",
                "version": 1,
                "features": {"am": 1.0, "nlm": 0.8, "nlm_oov": 0.0},
                "length": 0.5,
                "meta": {},
            }
        )
    )
    return {"nbest": nbest, "ref": ref, "ctx": ctx, "weights": weights}


def test_cli_rescore_torch_and_onnx_agree(
    tmp_path: Path, files: dict[str, Path], cli_set: dict[str, Path]
) -> None:
    outputs = {}
    for name, spec in (
        ("torch", f"nlm=torch:{files['ckpt']}"),
        ("onnx", f"nlm=onnx:{files['multi-scorer']}"),
        ("onnx_step", f"nlm=onnx:{files['multi']}"),
    ):
        out = tmp_path / name
        result = run(
            [
                "rescore", "--nbest", cli_set["nbest"], "--ref", cli_set["ref"], "--lm", spec,
                "--context", cli_set["ctx"], "--weights", cli_set["weights"], "--out", out,
                "--device", "cpu",
            ]
        )  # fmt: skip
        assert result.exit_code == 0, result.output
        outputs[name] = out
    for name in ("onnx", "onnx_step"):
        a, b = outputs["torch"], outputs[name]
        assert (a / "wer.txt").read_text() == (b / "wer.txt").read_text()
        assert (a / "1best.txt").read_text() == (b / "1best.txt").read_text()
        rows_a = [json.loads(x) for x in (a / "nbest.jsonl").read_text().splitlines()]
        rows_b = [json.loads(x) for x in (b / "nbest.jsonl").read_text().splitlines()]
        for ra, rb in zip(rows_a, rows_b, strict=True):
            for ha, hb in zip(ra["hyps"], rb["hyps"], strict=True):
                assert ha["text"] == hb["text"]
                for key in ("nlm", "total"):
                    assert hb["scores"][key] == pytest.approx(ha["scores"][key], abs=ATOL)


def test_cli_score_tune_and_ppl_with_onnx(
    tmp_path: Path, files: dict[str, Path], torch_lm: TorchLM, cli_set: dict[str, Path]
) -> None:
    scored = tmp_path / "scored.jsonl"
    result = run(
        [
            "score", "--nbest", cli_set["nbest"], "--lm", f"nlm=onnx:{files['multi-scorer']}",
            "--context", cli_set["ctx"], "--out", scored,
        ]
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    contexts = {"u1": {"genre": "chat"}, "u2": {"genre": "sport"}, "u3": {"genre": "news"}}
    for line in scored.read_text().splitlines():
        row = json.loads(line)
        for hyp in row["hyps"]:
            want = torch_lm.sentence_logprobs([hyp["text"].split()], [contexts.get(row["utt"])])
            assert hyp["scores"]["nlm"] == pytest.approx(float(want[0]), abs=ATOL)
    weights = tmp_path / "tuned.json"
    result = run(
        [
            "tune", "--nbest", cli_set["nbest"], "--ref", cli_set["ref"], "--lm",
            f"nlm=onnx:{files['multi']}", "--context", cli_set["ctx"], "--restarts", "1",
            "--out", weights,
        ]
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert set(json.loads(weights.read_text())["features"]) == {"am", "nlm", "nlm_oov"}
    ppl = {}
    for spec in (f"torch:{files['ckpt']}", f"onnx:{files['multi']}", f"onnx:{files['scorer']}"):
        result = run(
            ["ppl", "--lm", spec, "--text", cli_set["ref"], "--text-format", "kaldi", "--context",
             cli_set["ctx"]]
        )  # fmt: skip
        assert result.exit_code == 0, result.output
        ppl[spec.split(":")[0] + spec[-12:]] = result.output
    outs = list(ppl.values())
    assert outs[0] == outs[1]  # the multi-context export: every line the same
    assert outs[0] != outs[2]  # the scorer has NEWS folded in: other contexts differ
    result = run(["ppl", "--lm", f"onnx:{tmp_path / 'missing.onnx'}", "--text", cli_set["ref"]])
    assert result.exit_code == 2 and "missing.onnx: model file not found" in result.output
    result = run(
        ["ppl", "--lm", f"onnx:{files['step']}", "--text", cli_set["ref"], "--device", "tpu"]
    )
    assert result.exit_code == 2 and "bad device 'tpu'" in result.output


# -- vector exports: the context embedding per utterance as an input ---------------------------


def previous_text_model() -> ContextLSTM:
    from rescorer.lm_models.lstm.context import ContextVariable

    prev = ContextVariable.text("previous", "hash:8", 8, [0.05 * i for i in range(8)])
    return make_model("factor", variables=(prev,), scale=0.3)


def test_vector_exports_score_previous_texts_as_torch_does(tmp_path: Path) -> None:
    ckpt = save_checkpoint(tmp_path / "ckpt", previous_text_model(), VOCAB)
    torch_lm = TorchLM(ckpt, device="cpu")
    rng = random.Random(11)
    sentences, _ = nbest_like(rng, 8, 4)
    texts = [" ".join(rng.choice(WORDS) for _ in range(5)) for _ in range(6)]
    per_utt: list[dict | None] = [{"previous": t, "speaker": "s"} for t in texts] + [None, {}]
    contexts = [c for c in per_utt for _ in range(4)]
    want = torch_lm.token_logprobs(sentences, contexts)
    # each utterance's vector computed once, as `rescorer context vectors` writes it
    vectors = torch_lm.context_vectors(per_utt)
    assert vectors.shape == (8, 4) and np.abs(vectors[0] - vectors[1]).max() > 1e-3
    rows = [{"context_vector": ",".join(map(repr, v.tolist()))} for v in vectors]
    rows[-1] = {}  # no vector: the export's expected one, as torch's missing text
    vec_contexts = [r for r in rows for _ in range(4)]
    for kind in ("vector-scorer", "vector-step"):
        path = export_model(
            torch_lm.model, VOCAB, tmp_path / f"{kind}.onnx", ExportOptions(kind)
        ).path
        lm = OnnxLM(path, device="cpu", batch_tokens=64)  # several batches, contexts mixed
        got = lm.token_logprobs(sentences, vec_contexts)
        for a, b in zip(got, want, strict=True):
            np.testing.assert_allclose(a, b, atol=ATOL, rtol=0)
    # streaming with a vector-step export: each state keeps its utterance's vector
    states = [lm.start(r) for r in rows[:3]]
    words = [sentences[0][0], sentences[4][0], sentences[8][0]]
    values, states = lm.advance(states, words)
    assert all(s.vector is not None for s in states)
    for j, value in enumerate(values):
        assert value == pytest.approx(want[4 * j][0], abs=ATOL)
    with pytest.raises(ValueError, match="takes no context vectors"):
        OnnxLM(export_model(torch_lm.model, VOCAB, tmp_path / "s.onnx").path).context_vectors(
            1, None
        )


def test_cli_context_vectors_export_and_score_with_onnx(tmp_path: Path) -> None:
    from rescorer.contexts import read_contexts
    from tests.conftest import write_espnet_set

    ckpt = save_checkpoint(tmp_path / "ckpt", previous_text_model(), VOCAB)
    rng = random.Random(3)
    utts = [
        (f"5-50-{i:04d}", [(" ".join(rng.choice(WORDS) for _ in range(4)), -1.0, -1.0, -1.0)] * 3)
        for i in range(6)
    ]
    nbest = write_espnet_set(tmp_path / "dev", utts)
    ctx, vec, onnx_path = tmp_path / "ctx.jsonl", tmp_path / "vec.jsonl", tmp_path / "prev.onnx"
    assert (
        run(["context", "build", "--nbest", nbest, "--previous", "2", "--out", ctx]).exit_code == 0
    )
    result = run(["context", "vectors", "--model", ckpt, "--context", ctx, "--out", vec])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == f"wrote {vec}: 6 context vectors of 4 numbers"
    assert set(read_contexts(vec)["5-50-0003"]) == {"context_vector"}
    result = run(["export", ckpt, onnx_path, "--kind", "vector-scorer"])
    assert result.exit_code == 0, result.output
    assert "(vector-scorer, context_vector input of 4 numbers" in result.output
    assert "parity with PyTorch ok" in result.output
    scores = {}
    for name, spec, context in (("t", f"torch:{ckpt}", ctx), ("o", f"onnx:{onnx_path}", vec)):
        out = tmp_path / f"{name}.jsonl"
        result = run(["score", "--nbest", nbest, "--lm", f"nlm={spec}", "--context", context,
                      "--out", out])  # fmt: skip
        assert result.exit_code == 0, result.output
        rows = [json.loads(line) for line in out.read_text().splitlines()]
        scores[name] = [h["scores"]["nlm"] for row in rows for h in row["hyps"]]
    np.testing.assert_allclose(scores["o"], scores["t"], atol=ATOL, rtol=0)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"utt": "u1", "fields": {"previous": "a b"}}\n{"utt": \n', encoding="utf-8")
    result = run(["context", "vectors", "--model", ckpt, "--context", bad, "--out", vec])
    assert result.exit_code == 2 and "bad.jsonl:2: invalid JSON" in result.output
    assert "Traceback" not in result.output
    # a context folded into a vector kind is refused in one line
    result = run(["export", ckpt, tmp_path / "x.onnx", "--kind", "vector-step", "--context", "a=b"])
    assert result.exit_code == 2 and "folds no context" in result.output
