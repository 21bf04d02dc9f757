"""Multiplicative LBLs in the rescorer: the lbl:DIR LanguageModel, the lbl-* commands (CliRunner),
ppl and rescore with contexts, and the ONNX export with an attribute folded in."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from click.testing import CliRunner, Result

from rescorer.cli.main import main
from rescorer.combine import Weights
from rescorer.export.lbl_graph import export_lbl, lbl_parity
from rescorer.formats import read_nbest
from rescorer.lm_models.lbl.model import LBL, AttributeSpec, LBLConfig, load_lbl, save_lbl
from rescorer.lm_models.vocab import Vocabulary
from rescorer.lms import load_lm
from rescorer.lms.contract import LanguageModel
from rescorer.lms.lbl import LBLLanguageModel

WORDS = ["the", "a", "cat", "dog", "sat", "ran", "on", "mat", "god", "church", "war", "news"]
VOCAB = Vocabulary(["<unk>", "<s>", "</s>", *WORDS])
GENRE = AttributeSpec("genre", ("news", "religion", "fiction"), 3)
DOC = AttributeSpec("doc", ("d1", "d2"), 2)
SENTENCES = [["the", "cat", "sat"], ["a", "dog", "ran", "on", "the", "mat"], ["god"], []]


pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tiny models: one thread


def make_checkpoint(path: Path, seed: int = 0, **kw: object) -> Path:
    base: dict = dict(vocab_size=len(VOCAB), order=3, embed_dim=5, factors=6,
                      attributes=(GENRE, DOC))  # fmt: skip
    base.update(kw)
    model = LBL(LBLConfig(**base))
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.5)
    save_lbl(path, model, VOCAB)
    return path


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_checkpoint(tmp_path_factory.mktemp("lbl") / "atd")


def run(*args: str) -> Result:
    return CliRunner().invoke(main, ["-q", *args], catch_exceptions=False)


def test_adapter_is_a_language_model_and_sums_tokens(ckpt: Path) -> None:
    lm = load_lm(f"lbl:{ckpt}", case="lower")
    assert isinstance(lm, LBLLanguageModel) and isinstance(lm, LanguageModel)
    contexts = [{"genre": "news"}, {"genre": "religion", "doc": "d2"}, None, {"genre": "fiction"}]
    toks = lm.token_logprobs(SENTENCES, contexts)
    assert [len(t) for t in toks] == [4, 7, 2, 1]
    sums = lm.sentence_logprobs(SENTENCES, contexts)
    np.testing.assert_allclose(sums, [t.sum() for t in toks], rtol=1e-12)
    # The same numbers as the model itself, row by row.
    model, _ = load_lbl(ckpt)
    hist = torch.tensor([[1, 1], [3, 1], [5, 3], [7, 5]])  # the cat sat </s>
    tgt = torch.tensor([3, 5, 7, 2])
    with torch.no_grad():
        want = model(hist, tgt, attrs=torch.tensor([[0, -1]] * 4)).double().numpy()
    np.testing.assert_allclose(toks[0], want, atol=1e-6)


def test_streaming_equals_token_logprobs(ckpt: Path) -> None:
    lm = LBLLanguageModel(ckpt, case="lower")
    context = {"genre": "religion", "doc": "d1"}
    words = ["The", "dog", "ran", "on", "a", "zebra", "mat"]
    want = lm.token_logprobs([words], [context])[0]
    state = lm.start(context)
    got = []
    for tok in [*words, "</s>"]:
        lp, (state,) = lm.advance([state], [tok])
        got.append(lp[0])
    # float32 log-probs by two paths (one step vs the whole sentence): equal to a few ulps
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)
    assert lm.oov_flags([words])[0].tolist() == [False] * 5 + [True, False]


def test_contexts_change_scores_and_unknown_values_use_the_expected_vector(ckpt: Path) -> None:
    lm = LBLLanguageModel(ckpt, case="lower")
    s = [SENTENCES[1]]
    news = lm.sentence_logprobs(s, [{"genre": "news"}])[0]
    religion = lm.sentence_logprobs(s, [{"genre": "religion"}])[0]
    assert abs(news - religion) > 1e-3
    missing = lm.sentence_logprobs(s, [None])[0]
    unseen = lm.sentence_logprobs(s, [{"genre": "poetry", "speaker": "x"}])[0]
    assert unseen == pytest.approx(missing, abs=1e-12)
    # The expected vector really is the mean of the rectified lookup rows.
    model, _ = load_lbl(ckpt)
    mean_genre = torch.relu(model.lookups[0]).mean(0).detach()
    torch.testing.assert_close(model.expected_attribute(0).detach(), mean_genre)


def write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_ppl_score_and_rescore_with_contexts(
    ckpt: Path, tmp_path: Path, espnet_factory: Callable[..., Path]
) -> None:
    text = write(tmp_path / "text", ["u1 the cat sat", "u2 god church", "u3 war news"])
    ctx = write(
        tmp_path / "ctx.jsonl",
        [json.dumps({"utt": u, "fields": {"genre": g}})
         for u, g in (("u1", "fiction"), ("u2", "religion"), ("u3", "news"))],
    )  # fmt: skip
    result = run("ppl", "--lm", f"lbl:{ckpt}", "--text", str(text), "--text-format", "kaldi",
                 "--context", str(ctx), "--lm-case", "lower")  # fmt: skip
    assert result.exit_code == 0, result.output
    lm = LBLLanguageModel(ckpt, case="lower")
    sents = [["the", "cat", "sat"], ["god", "church"], ["war", "news"]]
    recs = [{"genre": "fiction"}, {"genre": "religion"}, {"genre": "news"}]
    total = sum(lp.sum() for lp in lm.token_logprobs(sents, recs))
    assert f"ppl {math.exp(-total / 10):.2f}" in result.output
    assert "genre=news: ppl" in result.output
    # score and rescore an ESPnet set with the LBL as an LM feature and a context per utterance.
    nbest = espnet_factory(
        "set",
        [
            ("spk-1", [("the cat sat", -1.0, -1.0, -2.0), ("the cat mat", -1.5, -1.0, -2.0)]),
            ("spk-2", [("god church", -1.0, -2.0, -2.0), ("war news", -1.2, -1.0, -2.0)]),
        ],
        refs={"spk-1": "the cat sat", "spk-2": "god church"},
    )
    ctx2 = write(
        tmp_path / "ctx2.jsonl",
        [json.dumps({"utt": "spk-1", "fields": {"genre": "fiction"}}),
         json.dumps({"utt": "spk-2", "fields": {"genre": "religion"}})],
    )  # fmt: skip
    spec = f"atd=lbl:{ckpt}"
    common = ["--nbest", str(nbest), "--lm", spec, "--context", str(ctx2), "--lm-case", "lower"]
    result = run("score", *common, "--out", str(tmp_path / "s.jsonl"))
    assert result.exit_code == 0, result.output
    scored = read_nbest(tmp_path / "s.jsonl", "jsonl")
    want = lm.sentence_logprobs([["war", "news"]], [{"genre": "religion"}])[0]
    assert scored["spk-2"].hyps[1].scores["atd"] == pytest.approx(want, abs=1e-6)
    weights = tmp_path / "w.json"
    Weights({"decoder": 1.0, "atd": 1.0}).save(weights)
    ref = nbest / "references" / "ref_wer.trn"
    result = run("rescore", *common, "--ref", str(ref), "--weights", str(weights),
                 "--out", str(tmp_path / "out"))  # fmt: skip
    assert result.exit_code == 0, result.output
    assert (tmp_path / "out" / "1best.txt").is_file()


def test_lbl_train_command_and_bad_corpus_line(tmp_path: Path) -> None:
    genres = ("news", "fiction")
    docs = [json.dumps({"id": f"d{i}", "text": "the cat sat\na dog ran",
                        "fields": {"genre": genres[i % 2]}}) for i in range(10)]  # fmt: skip
    corpus = write(tmp_path / "docs.jsonl", docs)
    cfg = {"data": {"corpus": "jsonl", "path": str(corpus), "attributes": ["genre"],
                    "max_vocab": None, "split": [0.6, 0.2, 0.2]},
           "model": {"order": 3, "embed_dim": 4, "factors": 4, "attr_dims": 2},
           "train": {"epochs": 1, "batch_size": 16}}  # fmt: skip
    conf = tmp_path / "conf.json"
    conf.write_text(json.dumps(cfg))
    result = run("lbl-train", str(conf), "--out", str(tmp_path / "m"), "--seed", "3")
    assert result.exit_code == 0, result.output
    assert "best dev perplexity" in result.output
    assert (
        json.loads((tmp_path / "m" / "training.json").read_text())["config"]["train"]["seed"] == 3
    )
    write(tmp_path / "docs.jsonl", [*docs[:3], "{not json", *docs[3:]])
    result = CliRunner().invoke(main, ["-q", "lbl-train", str(conf), "--out", str(tmp_path / "x")])
    assert result.exit_code == 2
    assert f"{corpus}:4: invalid JSON" in result.output
    assert len(result.output.strip().splitlines()) == 1 and "Traceback" not in result.output


def test_lbl_infer_command(ckpt: Path, tmp_path: Path) -> None:
    texts = write(tmp_path / "t.jsonl", [
        json.dumps({"id": "x1", "text": "the cat sat on the mat\na dog ran", "fields": {}}),
        json.dumps({"id": "x2", "text": "god church\nwar news", "fields": {"doc": "d1"}}),
    ])  # fmt: skip
    out = tmp_path / "inferred.jsonl"
    result = run("lbl-infer", "--model", str(ckpt), "--text", str(texts), "--attribute", "genre",
                 "--steps", "20", "--out", str(out))  # fmt: skip
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["id"] for r in lines] == ["x1", "x2"]
    assert len(lines[0]["vector"]) == 3 and len(lines[0]["losses"]) == 21
    assert lines[0]["losses"][-1] < lines[0]["losses"][0]
    assert all(v >= 0 for r in lines for v in r["vector"])  # rectified attribute space
    assert "x1:" in result.output and "nearest" in result.output
    # Bad input: one line naming the file and line, status 2.
    write(texts, [json.dumps({"id": "x1", "text": "the cat"}), '{"id": "x2", "text": 5}'])
    result = CliRunner().invoke(main, ["lbl-infer", "--model", str(ckpt), "--text", str(texts),
                                       "--attribute", "genre"])  # fmt: skip
    assert result.exit_code == 2
    assert f"{texts}:2:" in result.output and len(result.output.strip().splitlines()) == 1
    result = CliRunner().invoke(main, ["lbl-infer", "--model", str(ckpt), "--text", str(texts),
                                       "--attribute", "author"])  # fmt: skip
    assert result.exit_code == 2 and "unknown attribute 'author'" in result.output


def test_lbl_similar_command(ckpt: Path, tmp_path: Path) -> None:
    result = run("lbl-similar", "--model", str(ckpt), "--word", "cat", "--a", "genre=news",
                 "--b", "genre=religion", "--top", "5")  # fmt: skip
    assert result.exit_code == 0, result.output
    header, row = result.output.strip().splitlines()
    assert header.startswith("query\tcommon") and row.startswith("cat\t")
    queries = write(tmp_path / "q.txt", ["cat", "the dog"])
    ab = ["--a", "genre=news", "--b", "genre=fiction"]
    result = CliRunner().invoke(main, ["lbl-similar", "--model", str(ckpt), "--queries",
                                       str(queries), *ab])  # fmt: skip
    assert result.exit_code == 2
    assert f"{queries}:2: expected one word per line" in result.output
    result = CliRunner().invoke(main, ["lbl-similar", "--model", str(ckpt), "--word", "cat",
                                       "--a", "genre=poetry", "--b", "genre=news"])  # fmt: skip
    assert result.exit_code == 2 and "not seen in training" in result.output


def test_lbl_sample_command(ckpt: Path) -> None:
    args = ["lbl-sample", "--model", str(ckpt), "-n", "3", "--max-words", "6", "--seed", "1"]
    one = run(*args, "--context", "genre=news")
    assert one.exit_code == 0, one.output
    assert len(one.output.splitlines()) == 3
    assert all(w in WORDS for line in one.output.splitlines() for w in line.split())
    mixed = run(*args, "--context", "genre=news", "--context", "genre=religion")
    assert mixed.exit_code == 0 and len(mixed.output.splitlines()) == 3
    bad = CliRunner().invoke(main, [*args, "--context", "genre"])
    assert bad.exit_code == 2 and "expected FIELD=VALUE" in bad.output


def test_onnx_export_matches_pytorch(ckpt: Path, tmp_path: Path) -> None:
    model, _ = load_lbl(ckpt)
    for record in ({"genre": "religion", "doc": "d2"}, {"genre": "news"}, {}):
        out = tmp_path / f"m{len(record)}.onnx"
        result = export_lbl(ckpt, out, record)
        assert lbl_parity(model, out, record) <= 1e-4
        meta = {p.key: p.value for p in onnx.load(str(out)).metadata_props}
        assert meta["model_type"] == "lbl" and json.loads(meta["context"]) == record
        assert result.vocab_path.read_text().splitlines() == VOCAB.tokens
    # The folded export differs between attributes (it really holds T^x).
    import onnxruntime as ort

    hist = np.array([[3, 1], [5, 3]], dtype=np.int64)
    outs = [
        ort.InferenceSession(str(tmp_path / f"m{k}.onnx")).run(None, {"history": hist})[0]
        for k in (1, 2)
    ]
    finite = np.isfinite(outs[0])
    assert np.abs(outs[0][finite] - outs[1][finite]).max() > 1e-3
    with pytest.raises(ValueError, match="not seen in training"):
        export_lbl(ckpt, tmp_path / "bad.onnx", {"genre": "poetry"})


def test_onnx_export_unshared_vocabulary_and_plain_lbl(tmp_path: Path) -> None:
    lang = AttributeSpec("lang", ("en", "fr"), 2)
    blocks = (-1, -1, -1, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1)
    ckpt = make_checkpoint(tmp_path / "u", attributes=(lang,), vocab_attribute="lang",
                           word_blocks=blocks)  # fmt: skip
    model, _ = load_lbl(ckpt)
    export_lbl(ckpt, tmp_path / "fr.onnx", {"lang": "fr"})
    assert lbl_parity(model, tmp_path / "fr.onnx", {"lang": "fr"}) <= 1e-4
    plain = make_checkpoint(tmp_path / "p", factors=0, attributes=())
    export_lbl(plain, tmp_path / "p.onnx")
    assert lbl_parity(load_lbl(plain)[0], tmp_path / "p.onnx") <= 1e-4


def test_lbl_export_command(ckpt: Path, tmp_path: Path) -> None:
    out = tmp_path / "news.onnx"
    result = run("lbl-export", str(ckpt), str(out), "--context", "genre=news")
    assert result.exit_code == 0, result.output
    assert "parity with PyTorch ok" in result.output and out.is_file()
    bad_ckpt = tmp_path / "broken"
    bad_ckpt.mkdir()
    (bad_ckpt / "config.json").write_text("{broken")
    result = CliRunner().invoke(main, ["lbl-export", str(bad_ckpt), str(tmp_path / "b.onnx")])
    assert result.exit_code == 2
    assert "config.json:1: invalid JSON" in result.output
    result = CliRunner().invoke(main, ["lbl-export", str(ckpt), str(out), "--context", "year=1961"])
    assert result.exit_code == 2 and "not an attribute" in result.output
