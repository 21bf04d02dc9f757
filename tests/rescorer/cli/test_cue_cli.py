"""CUE in the rescorer: the cue:DIR adapter, the cue-vectors and cue-export commands, and the
ONNX export (parity with PyTorch)."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner, Result

from rescorer.cli.main import main
from rescorer.export.cue_graph import check_cue_parity, export_cue
from rescorer.lms import load_lm
from rescorer.lms.contract import LanguageModel
from rescorer.lms.cue import CUELanguageModel
from tests.lm_models.cue.test_cue import tiny_corpus, tiny_lm

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tiny models: one thread


def run(*args: str) -> Result:
    return CliRunner().invoke(main, ["-q", *args], catch_exceptions=False)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("cue") / "model"
    tiny_lm(seed=1).save(path)
    return path


def write_contexts(path: Path, records: list[dict[str, str]]) -> None:
    lines = [json.dumps({"utt": f"u{i}", "fields": r}) for i, r in enumerate(records)]
    path.write_text("\n".join(lines) + "\n")


def test_cue_spec_is_a_language_model(model_dir: Path) -> None:
    lm = load_lm(f"cue:{model_dir}")
    assert isinstance(lm, CUELanguageModel) and isinstance(lm, LanguageModel)
    sents, records = tiny_corpus(5)
    sents[0] = [*sents[0], "zebra"]  # out of vocabulary
    lps = lm.token_logprobs(sents, records)
    assert [len(lp) for lp in lps] == [len(s) + 1 for s in sents]
    np.testing.assert_allclose(lm.sentence_logprobs(sents, records), [lp.sum() for lp in lps])
    assert lm.oov_flags(sents)[0].tolist() == [False] * (len(sents[0]) - 1) + [True]
    # Contexts matter, and a missing record is the empty context, not a crash.
    no_ctx = lm.token_logprobs(sents, None)
    assert not np.allclose(np.concatenate(no_ctx), np.concatenate(lps))
    missing = lm.token_logprobs(sents, [None, {}, {"x": "y"}, None, {}])
    assert np.isfinite(np.concatenate(missing)).all()


def test_streaming_matches_token_logprobs(model_dir: Path) -> None:
    lm = CUELanguageModel(model_dir, case="none")
    sents, records = tiny_corpus(3)
    ref = lm.token_logprobs(sents, records)
    for sent, rec, expected in zip(sents, records, ref, strict=True):
        state = lm.start(rec)
        got = []
        for tok in [*sent, "</s>"]:
            lp, (state,) = lm.advance([state], [tok])
            got.append(lp[0])
        np.testing.assert_allclose(got, expected, atol=1e-5)


def test_ppl_command_with_contexts(model_dir: Path, tmp_path: Path) -> None:
    sents, records = tiny_corpus(6)
    (tmp_path / "text").write_text("".join(f"u{i} {' '.join(s)}\n" for i, s in enumerate(sents)))
    write_contexts(tmp_path / "ctx.jsonl", records)
    result = run(
        "ppl",
        "--lm",
        f"cue:{model_dir}",
        "--text",
        str(tmp_path / "text"),
        "--text-format",
        "kaldi",
        "--context",
        str(tmp_path / "ctx.jsonl"),
    )
    assert result.exit_code == 0, result.output
    lm = CUELanguageModel(model_dir)
    lps = lm.token_logprobs(sents, records)
    ppl = math.exp(-sum(lp.sum() for lp in lps) / sum(len(lp) for lp in lps))
    assert f"ppl {ppl:.2f}" in result.output


def test_cue_vectors_command(model_dir: Path, tmp_path: Path) -> None:
    _, records = tiny_corpus(4)
    records[3] = {}
    write_contexts(tmp_path / "ctx.jsonl", records)
    result = run(
        "cue-vectors",
        "--model",
        str(model_dir),
        "--contexts",
        str(tmp_path / "ctx.jsonl"),
        "--out",
        str(tmp_path / "cue.jsonl"),
    )
    assert result.exit_code == 0, result.output
    assert "4 CUE vectors (16 dims; 1 with no known field)" in result.output
    rows = [json.loads(line) for line in (tmp_path / "cue.jsonl").read_text().splitlines()]
    assert [r["utt"] for r in rows] == ["u0", "u1", "u2", "u3"]
    assert rows[0]["strings"] == ["genre: animals"]
    lm = CUELanguageModel(model_dir)
    np.testing.assert_allclose([r["cue"] for r in rows], lm.cue_vectors(records), atol=1e-6)


def test_cue_vectors_bad_contexts_file(model_dir: Path, tmp_path: Path) -> None:
    bad = tmp_path / "ctx.jsonl"
    bad.write_text('{"utt": "u0", "fields": {"genre": "news"}}\n{"utt": "u1", "fields": \n')
    result = CliRunner().invoke(
        main,
        [
            "cue-vectors",
            "--model",
            str(model_dir),
            "--contexts",
            str(bad),
            "--out",
            str(tmp_path / "o.jsonl"),
        ],
    )
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and f"{bad}:2" in lines[0], result.output
    assert "Traceback" not in result.output
    assert not (tmp_path / "o.jsonl").exists()


def test_onnx_export_parity_and_precomputed_cue(tmp_path: Path) -> None:
    import onnxruntime as ort

    lm = tiny_lm(seed=2)
    lm.model.eval()
    result = export_cue(lm, tmp_path / "cue.onnx")
    report = check_cue_parity(lm, result.model_path)
    assert report.ok, report.describe()
    meta = ort.InferenceSession(str(result.model_path)).get_modelmeta().custom_metadata_map
    assert meta["model_type"] == "cue" and meta["cue_dim"] == "16" and meta["log_base"] == "e"
    assert result.vocab_path.read_text().splitlines() == lm.vocab.tokens
    # Precomputed CUE vectors fed to the export give the model's own per-token scores.
    sents, records = tiny_corpus(3)
    cue = lm.cue_vectors(records)
    ref = lm.token_logprobs(sents, records)
    sess = ort.InferenceSession(str(result.model_path), providers=["CPUExecutionProvider"])
    ids = [lm.vocab.encode(s) for s in sents]
    width = max(map(len, ids)) + 2
    x = np.full((len(ids), width), 2, dtype=np.int64)
    for i, row in enumerate(ids):
        x[i, : len(row) + 2] = [1, *row, 2]
    lens = np.array([len(r) + 2 for r in ids], dtype=np.int64)
    tok, total = sess.run(
        ["token_logprobs", "sentence_logprob"], {"x": x, "x_lens": lens, "cue": cue}
    )
    for i, lp in enumerate(ref):
        np.testing.assert_allclose(tok[i, : len(lp)], lp, atol=1e-4)
        assert total[i] == pytest.approx(lp.sum(), abs=1e-4)


def test_cue_export_command(model_dir: Path, tmp_path: Path) -> None:
    result = run("cue-export", "--model", str(model_dir), "--out", str(tmp_path / "m.onnx"))
    assert result.exit_code == 0, result.output
    assert "parity with PyTorch ok" in result.output
    assert (tmp_path / "m.vocab.txt").is_file()
    bad = CliRunner().invoke(main, ["cue-export", "--model", str(model_dir), "--out", "m.txt"])
    assert bad.exit_code == 2 and "ending in .onnx" in bad.output


def test_next_word_prediction_api(model_dir: Path) -> None:
    from rescorer.predict import next_word_model

    lm = CUELanguageModel(model_dir, case="none")
    _, records = tiny_corpus(2)
    state = lm.start(records[0])
    dist = lm.next_logprobs(state)
    assert len(dist) == len(lm.vocabulary())
    assert np.exp(dist).sum() == pytest.approx(1.0, abs=1e-5)
    lp, (after,) = lm.advance([state], ["cat"])
    assert lp[0] == pytest.approx(dist[lm.vocabulary().index("cat")])
    assert after.ids == (lm.vocabulary().index("cat"),)
    nw = next_word_model(lm, ["cat", "dog", "zebra"])
    got = nw.next_logprobs(nw.start(records[0]))
    voc = lm.vocabulary()
    np.testing.assert_allclose(got, dist[[voc.index("cat"), voc.index("dog"), 0]])


# -- subword units ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def subword_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from rescorer.lm_models.cue.model import CUELM, CUEModel
    from rescorer.lm_models.text_encoders import HashEmbedder
    from rescorer.lm_models.tokenizer import SubwordTokenizer, TokenizerOptions
    from rescorer.lm_models.vocab import Vocabulary
    from tests.lm_models.cue.test_cue import CTX_DIM, tiny_config
    from tests.lm_models.test_tokenizer import sentences

    tok = SubwordTokenizer.train(sentences(), TokenizerOptions(vocab_size=320))
    sentence = replace(tiny_config().sentence, vocab_size=len(tok))
    torch.manual_seed(2)
    model = CUEModel(tiny_config(vocab_size=len(tok), sentence=sentence))
    path = tmp_path_factory.mktemp("cue_sw") / "model"
    CUELM(model, Vocabulary(tok.pieces), HashEmbedder(CTX_DIM), tok).save(path)
    return path


def test_subword_cue_scores_a_word_as_its_pieces(subword_dir: Path) -> None:
    """Each word's value is the sum of its pieces' (the model run on the piece sequence), </s>
    its own; no word is OOV; streaming word by word gives the same values."""
    from rescorer.lm_models.cue.model import CUELM, load_cue
    from tests.lm_models.test_tokenizer import sentences

    lm = CUELanguageModel(subword_dir, case="none")
    assert lm.describe()["units"] == "subword" and lm.lm.tokenizer is not None
    sents = [s[:5] for s in sentences(4, seed=9)]
    sents[1] = [*sents[1], "qxzj"]  # characters the tokenizer spells as bytes
    records = [{"genre": "news"}, None, {"genre": "fiction", "prev": "ka lo"}, {}]
    got = lm.token_logprobs(sents, records)
    assert [len(g) for g in got] == [len(s) + 1 for s in sents]
    assert not any(flags.any() for flags in lm.oov_flags(sents))
    pieces_lm = CUELM(lm.lm.model, lm.lm.vocab, lm.lm._embedder)  # the same net over pieces
    tok = lm.lm.tokenizer
    cut = [[p for w in s for p in tok.word_pieces(w)] for s in sents]
    per_piece = pieces_lm.token_logprobs(cut, cue=lm.cue_vectors(records))
    multi = 0
    for s, pp, g in zip(sents, per_piece, got, strict=True):
        k = 0
        for w, value in zip(s, g[:-1], strict=True):
            n = len(tok.word_pieces(w))
            multi += n > 1
            assert value == pytest.approx(pp[k : k + n].sum(), abs=1e-9)
            k += n
        assert g[-1] == pytest.approx(pp[-1]) and k == len(pp) - 1
    assert multi >= 3  # words of several pieces were checked
    for sent, rec, expected in zip(sents, records, got, strict=True):
        state, stream = lm.start(rec), []
        for t in [*sent, "</s>"]:
            lp, (state,) = lm.advance([state], [t])
            stream.append(lp[0])
        np.testing.assert_allclose(stream, expected, atol=1e-5)
    assert load_cue(subword_dir).tokenizer is not None  # kept in the checkpoint


def test_subword_cue_refuses_a_tokenizer_of_other_pieces(subword_dir: Path, tmp_path: Path) -> None:
    import shutil

    from rescorer.lm_models.cue.model import load_cue

    bad = tmp_path / "bad"
    shutil.copytree(subword_dir, bad)
    tokens = (bad / "vocab.txt").read_text().splitlines()
    tokens[10], tokens[11] = tokens[11], tokens[10]
    (bad / "vocab.txt").write_text("\n".join(tokens) + "\n")
    with pytest.raises(ValueError, match=r"bad: the tokenizer's \d+ pieces are not the vocabulary"):
        load_cue(bad)


def test_subword_cue_export_carries_its_tokenizer(subword_dir: Path, tmp_path: Path) -> None:
    import onnxruntime as ort

    from rescorer.lm_models.cue.model import load_cue
    from rescorer.lm_models.tokenizer import SubwordTokenizer

    lm = load_cue(subword_dir)
    result = export_cue(lm, tmp_path / "sw.onnx")
    meta = ort.InferenceSession(str(result.model_path)).get_modelmeta().custom_metadata_map
    assert meta["units"] == "subword" and meta["tokenizer_file"] == "sw.tokenizer.model"
    written = SubwordTokenizer((tmp_path / "sw.tokenizer.model").read_bytes())
    assert written.pieces == tuple(result.vocab_path.read_text().splitlines())
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "sw.onnx", "sw.tokenizer.model", "sw.vocab.txt"]  # fmt: skip
    assert check_cue_parity(lm, result.model_path).ok
    word = export_cue(tiny_lm(seed=2), tmp_path / "w" / "w.onnx")
    assert word.metadata["units"] == "word" and "tokenizer_file" not in word.metadata
    assert not (tmp_path / "w" / "w.tokenizer.model").exists()
