"""FNLMs and mixtures in the rescorer: the fnlm:DIR adapter and the fnlm-train, fnlm-eval,
mix-weights commands, with mixtures used by ppl, score and rescore (CliRunner)."""

from __future__ import annotations

import json
import math
import random
import re
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner, Result

from rescorer.cli.main import main
from rescorer.core.errors import InputError
from rescorer.formats import read_nbest
from rescorer.lm_models.fnlm.factors import Lexicon, PlainWord, words_of_text
from rescorer.lm_models.fnlm.model import load_fnlm
from rescorer.lms import load_lm
from rescorer.lms.contract import LanguageModel
from rescorer.lms.fnlm import FNLMLanguageModel
from rescorer.lms.mixture import MixtureLM

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tiny models: one thread


def run(*args: str) -> Result:
    return CliRunner().invoke(main, ["-q", *args], catch_exceptions=False)


def ab_lines(n: int, seed: int) -> list[str]:
    """Sentences over the words of the tiny ARPA fixture (a, b)."""
    rng = random.Random(seed)
    return [" ".join(rng.choice("aab") for _ in range(rng.randint(1, 5))) for _ in range(n)]


def write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def train_plain(tmp_path: Path, factors: list[str], name: str = "fnlm") -> Path:
    train = write(tmp_path / "train.txt", ab_lines(60, 0))
    dev = write(tmp_path / "dev.txt", ab_lines(20, 1))
    config = {
        "data": {
            "corpus": "plain",
            "train": str(train),
            "dev": str(dev),
            "factors": factors,
            "output_min_count": 1,
        },
        "model": {"order": 3, "embed_dim": 4, "hidden_dim": 8, "num_classes": 2},
        "train": {"epochs": 2, "batch_size": 16, "lr": 0.01},
    }
    (tmp_path / f"{name}.json").write_text(json.dumps(config), encoding="utf-8")
    result = run("fnlm-train", str(tmp_path / f"{name}.json"), "--out", str(tmp_path / name))
    assert result.exit_code == 0, result.output
    return tmp_path / name


# -- fnlm-train ---------------------------------------------------------------------------------


def test_fnlm_train_writes_a_checkpoint(tmp_path: Path) -> None:
    model = train_plain(tmp_path, ["word", "suffix1", "shape"])
    assert (model / "model.safetensors").is_file() and (model / "factor2.txt").is_file()
    meta = json.loads((model / "training.json").read_text())
    assert meta["config"]["data"]["factors"] == ["word", "suffix1", "shape"]
    assert len(meta["epochs"]) == 2
    result = run(
        "fnlm-train", str(tmp_path / "fnlm.json"), "--out", str(tmp_path / "s3"), "--seed", "3"
    )
    assert "best dev perplexity" in result.output
    assert (
        json.loads((tmp_path / "s3" / "training.json").read_text())["config"]["train"]["seed"] == 3
    )


def test_fnlm_train_bad_config(tmp_path: Path) -> None:
    (tmp_path / "c.json").write_text('{"data": {"corpus": "plain", "train": "x"}}')
    result = CliRunner().invoke(main, ["fnlm-train", str(tmp_path / "c.json"), "--out", "o"])
    assert result.exit_code == 2 and "needs a dev file" in result.output
    (tmp_path / "c.json").write_text('{"data": {"corpus": "conllu", "train": "x", "dev": "y"}}')
    result = CliRunner().invoke(
        main, ["fnlm-train", str(tmp_path / "c.json"), "--out", "o", "--data-dir", str(tmp_path)]
    )
    assert result.exit_code == 2 and "expected an existing file" in result.output


# -- fnlm-eval ------------------------------------------------------------------------------------

NOUNS = [("ev", "ev"), ("evde", "ev"), ("okul", "okul"), ("okulda", "okul")]
VERBS = [("geldi", "gel"), ("gitti", "git")]


def conllu_sentences(n: int, seed: int, extra: list[str] = ()) -> str:  # type: ignore[assignment]
    """Two-word sentences NOUN VERB with lemma, UPOS and a Case feature."""
    rng = random.Random(seed)
    blocks = []
    for i in range(n):
        (noun, nl), (verb, vl) = rng.choice(NOUNS), rng.choice(VERBS)
        if extra and i % 3 == 0:
            noun, nl = rng.choice(extra), "yeni"
        case = "Loc" if noun.endswith("de") or noun.endswith("da") else "Nom"
        blocks.append(
            f"# sent_id = s{i}\n"
            f"1\t{noun.capitalize()}\t{nl}\tNOUN\tNoun\tCase={case}\t2\tobl\t_\t_\n"
            f"2\t{verb}\t{vl}\tVERB\tVerb\tTense=Past\t0\troot\t_\t_\n"
            f"3\t.\t.\tPUNCT\tPunc\t_\t2\tpunct\t_\t_\n"
        )
    return "\n".join(blocks) + "\n"


def test_fnlm_eval_reports_each_strategy(tmp_path: Path) -> None:
    (tmp_path / "train.conllu").write_text(conllu_sentences(60, 0), encoding="utf-8")
    (tmp_path / "dev.conllu").write_text(
        conllu_sentences(20, 1, extra=["masada", "kapı"]), encoding="utf-8"
    )
    config = {
        "data": {
            "corpus": "conllu",
            "train": "train.conllu",
            "dev": "dev.conllu",
            "factors": ["word", "upos", "feat:Case"],
            "drop_punct": True,
        },
        "model": {"order": 3, "embed_dim": 4, "hidden_dim": 8, "output": "full"},
        "train": {"epochs": 2, "batch_size": 16},
    }
    (tmp_path / "c.json").write_text(json.dumps(config))
    result = run(
        "fnlm-train", str(tmp_path / "c.json"), "--out", str(tmp_path / "m"), "--data-dir",
        str(tmp_path),
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    result = run(
        "fnlm-eval", "--model", str(tmp_path / "m"), "--text", str(tmp_path / "dev.conllu")
    )
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    for strategy in ("null", "all", "tail", "least"):
        (line,) = [x for x in lines if x.strip().startswith(f"{strategy}:")]
        # 20 sentences, 2 words each (punctuation dropped as in training) + 20 </s>;
        # every third sentence (7 of 20) starts with an unknown noun.
        assert "20 sentences, 60 tokens incl. </s>, 7 OOV" in line
        assert re.search(r"ppl no unk [\d.]+, w/unk [\d.]+", line)
    # Table 1: the 7 verbs right after an unknown noun (</s> is not a word).
    assert sum("over 7" in x for x in lines) == 4
    result = run(
        "fnlm-eval", "--model", str(tmp_path / "m"), "--text", str(tmp_path / "dev.conllu"),
        "--strategy", "least", "--keep-punct",
    )  # fmt: skip
    assert "least:" in result.output and "null:" not in result.output
    assert "80 tokens" in result.output


def test_fnlm_eval_bad_conllu_is_an_input_error(tmp_path: Path) -> None:
    model = train_plain(tmp_path, ["word"])
    (tmp_path / "bad.conllu").write_text("1\ta\tb\n", encoding="utf-8")
    result = CliRunner().invoke(
        main, ["fnlm-eval", "--model", str(model), "--text", str(tmp_path / "bad.conllu")]
    )
    assert result.exit_code == 2
    assert f"{tmp_path / 'bad.conllu'}:1: expected 10 tab-separated fields" in result.output


# -- the fnlm:DIR adapter -------------------------------------------------------------------------


def test_adapter_scores_like_the_model(tmp_path: Path) -> None:
    path = train_plain(tmp_path, ["word", "suffix1", "shape"])
    lm = load_lm(f"f=fnlm:{path}")
    assert isinstance(lm, FNLMLanguageModel) and isinstance(lm, LanguageModel)
    assert lm.name == "f" and lm.units == "word"
    model = load_fnlm(path)
    sentences = [["a", "b", "a"], ["b", "zz", "a", "a"], [], ["a", "b", "a"]]
    got = lm.token_logprobs(sentences)
    want = model.token_logprobs([words_of_text(s) for s in sentences])
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-6)
    np.testing.assert_allclose(lm.sentence_logprobs(sentences), [w.sum() for w in want], rtol=1e-6)
    assert [f.tolist() for f in lm.oov_flags(sentences)] == [
        [False] * 3,
        [False, True, False, False],
        [],
        [False] * 3,
    ]
    # Streaming: the same scores token by token.
    states = [lm.start(), lm.start()]
    seqs = [["b", "zz", "a", "a", "</s>"], ["a", "b", "a", "</s>", "</s>"]]
    stream = []
    for step in range(5):
        lp, states = lm.advance(states, [s[step] for s in seqs])
        stream.append(lp)
    np.testing.assert_allclose([x[0] for x in stream], got[1], rtol=1e-6)
    np.testing.assert_allclose([x[1] for x in stream][:4], got[0], rtol=1e-6)


def _train_tagged(tmp_path: Path, factors: list[str], epochs: int = 1) -> Path:
    """An FNLM over a CoNLL-U corpus where "a" and "c" carry the tag X and "b" the tag Y: the
    next word depends on the previous word's tag (after X: b, after Y: a or c)."""
    rng = random.Random(0)
    conllu = []
    for i in range(60):
        words = [rng.choice("ac")]
        for _ in range(rng.randint(1, 5)):
            words.append("b" if words[-1] in "ac" else rng.choice("ac"))
        tags = ["Y" if w == "b" else "X" for w in words]
        rows = [f"{j + 1}\t{w}\t{w}\t{t}\t_\t_\t0\troot\t_\t_"
                for j, (w, t) in enumerate(zip(words, tags, strict=True))]  # fmt: skip
        conllu.append(f"# sent_id = {i}\n" + "\n".join(rows) + "\n")
    (tmp_path / "t.conllu").write_text("\n".join(conllu), encoding="utf-8")
    config = {
        "data": {"corpus": "conllu", "train": "t.conllu", "dev": "t.conllu",
                 "factors": factors},
        "model": {"order": 2, "embed_dim": 4, "hidden_dim": 8, "num_classes": 2},
        "train": {"epochs": epochs, "lr": 0.05, "batch_size": 16},
    }  # fmt: skip
    (tmp_path / "c.json").write_text(json.dumps(config))
    run("fnlm-train", str(tmp_path / "c.json"), "--out", str(tmp_path / "m"), "--data-dir",
        str(tmp_path))  # fmt: skip
    return tmp_path / "m"


def test_adapter_annotates_plain_words_from_the_training_lexicon(tmp_path: Path) -> None:
    # POS is the only input factor: without annotation every history would be unknown and a
    # word's score would not depend on the word before it.
    model = _train_tagged(tmp_path, ["upos"], epochs=8)
    assert (model / "lexicon.txt").read_text().splitlines() == [
        "a\ta\tX\t_\t_", "b\tb\tY\t_\t_", "c\tc\tX\t_\t_",
    ]  # fmt: skip
    lm = FNLMLanguageModel(model, case="auto")
    assert lm.missing_factors == ("upos",) and len(lm.lexicon) == 3  # type: ignore[arg-type]
    after_x = lm.token_logprobs([["a", "b"]])[0][1]
    after_y = lm.token_logprobs([["b", "b"]])[0][1]
    assert after_x - after_y > 0.5  # b follows X words in training, never Y ones
    # The plain-text scores are those of the gold-annotated sentences.
    fl = load_fnlm(model)
    gold = [PlainWord("a", "a", "X", "_", "_"), PlainWord("b", "b", "Y", "_", "_")]
    np.testing.assert_allclose(lm.token_logprobs([["a", "b"]])[0], fl.token_logprobs([gold])[0])
    # A word outside the lexicon has an unknown tag, as an unseen word: "c" and "zz" differ.
    assert lm.token_logprobs([["zz", "b"]])[0][1] != pytest.approx(after_x)
    # Streaming annotates the same way.
    states = [lm.start()]
    _, states = lm.advance(states, ["a"])
    lp, _ = lm.advance(states, ["b"])
    assert lp[0] == pytest.approx(after_x, rel=1e-6)
    # Upper-case hypotheses find the lower-cased lexicon entries.
    np.testing.assert_allclose(
        lm.token_logprobs([["A", "B"]])[0], lm.token_logprobs([["a", "b"]])[0]
    )


def test_adapter_refuses_annotation_factors_without_a_lexicon(tmp_path: Path) -> None:
    model = _train_tagged(tmp_path, ["word", "upos"])
    (model / "lexicon.txt").unlink()
    with pytest.raises(ValueError, match=r"\['upos'\] need annotation .* no lexicon.txt"):
        FNLMLanguageModel(model)
    text = write(tmp_path / "x.txt", ["a b"])
    result = CliRunner().invoke(main, ["ppl", "--lm", f"fnlm:{model}", "--text", str(text)])
    assert result.exit_code == 2
    assert "lexicon.txt" in result.output and "Traceback" not in result.output


def test_lexicon_choice_round_trip_and_errors(tmp_path: Path) -> None:
    sentences = [
        [PlainWord("Run", "run", "VERB"), PlainWord("x")],
        [PlainWord("run", "run", "NOUN"), PlainWord("run", "run", "NOUN")],
        [PlainWord("tie", "b", "X"), PlainWord("tie", "a", "X")],
    ]
    lex = Lexicon.fit("", sentences)
    assert lex.entries == {"run": ("run", "NOUN", None, None), "tie": ("a", "X", None, None)}
    assert lex.annotate(PlainWord("RUN")) == PlainWord("RUN", "run", "NOUN")
    assert lex.annotate(PlainWord("x")) == PlainWord("x")  # unannotated in training
    own = PlainWord("run", "ran", "VERB")
    assert lex.annotate(own) is own  # a word's own annotation wins
    (tmp_path / "lexicon.txt").write_text(lex.to_text(), encoding="utf-8")
    assert Lexicon.load(tmp_path / "lexicon.txt", "").entries == lex.entries
    (tmp_path / "bad.txt").write_text("run\trun\tNOUN\t\t\nrun\trun\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"bad.txt:2: expected 5 tab-separated fields"):
        Lexicon.load(tmp_path / "bad.txt", "")


# -- mix-weights, and a mixture in ppl / score / rescore ---------------------------------------


def test_mix_weights_then_ppl_score_rescore(
    tmp_path: Path, tiny_arpa: Path, espnet_factory: Callable[..., Path]
) -> None:
    fnlm = train_plain(tmp_path, ["word", "suffix1"])
    dev = write(tmp_path / "mixdev.txt", ab_lines(15, 5))
    result = run(
        "mix-weights", "--lm", f"ngram=kenlm:{tiny_arpa}", "--lm", f"nn=fnlm:{fnlm}",
        "--text", str(dev), "--out", str(tmp_path / "mixes" / "mix.json"),
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    weights = re.findall(r"weight ([\d.]+)", result.output)
    assert len(weights) == 2 and math.isclose(sum(map(float, weights)), 1.0, abs_tol=2e-4)
    mix_ppl = float(re.search(r"mixture ppl ([\d.]+)", result.output).group(1))  # type: ignore[union-attr]
    data = json.loads((tmp_path / "mixes" / "mix.json").read_text())
    assert data["components"][0]["spec"] == "ngram=kenlm:../tiny.arpa"  # relative to the file
    assert data["components"][1]["spec"] == "nn=fnlm:../fnlm"

    # The mixture is one model: ppl gives the perplexity EM reached (no OOVs in this text).
    result = run("ppl", "--lm", f"mix:{tmp_path / 'mixes' / 'mix.json'}", "--text", str(dev))
    assert result.exit_code == 0, result.output
    assert float(re.search(r"^ppl ([\d.]+)", result.output, re.M).group(1)) == pytest.approx(  # type: ignore[union-attr]
        mix_ppl, abs=0.01
    )
    mix = load_lm(f"mix:{tmp_path / 'mixes' / 'mix.json'}")
    assert isinstance(mix, MixtureLM)

    nbest = espnet_factory(
        "set",
        [
            ("spk-1", [("a b", -1.0, -1.0, -2.0), ("a a", -1.5, -1.0, -2.0)]),
            ("spk-2", [("b", -1.0, -2.0, -2.0), ("a b a", -1.2, -1.0, -2.0)]),
        ],
        refs={"spk-1": "a b", "spk-2": "a b a"},
    )
    ref = nbest / "references" / "ref_wer.trn"
    mix_spec = f"mx=mix:{tmp_path / 'mixes' / 'mix.json'}"
    result = run(
        "score", "--nbest", str(nbest), "--lm", mix_spec, "--out", str(tmp_path / "s.jsonl")
    )
    assert result.exit_code == 0, result.output
    scored = read_nbest(tmp_path / "s.jsonl", "jsonl")
    hyp = scored["spk-1"].hyps[0]
    assert hyp.scores["mx"] == pytest.approx(float(mix.sentence_logprobs([["a", "b"]])[0]))
    (tmp_path / "w.json").write_text(
        json.dumps(
            {"format": "rescorer-weights", "version": 1, "length": 0.0, "meta": {},
             "features": {"decoder": 1.0, "mx": 1.0}}
        )
    )  # fmt: skip
    result = run(
        "rescore", "--nbest", str(nbest), "--ref", str(ref), "--lm", mix_spec,
        "--weights", str(tmp_path / "w.json"), "--out", str(tmp_path / "out"),
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert (tmp_path / "out" / "1best.txt").is_file() and "rescored" in result.output


def test_mix_weights_needs_two_models(tmp_path: Path, tiny_arpa: Path) -> None:
    dev = write(tmp_path / "d.txt", ["a b"])
    result = CliRunner().invoke(
        main, ["mix-weights", "--lm", f"kenlm:{tiny_arpa}", "--text", str(dev), "--out", "m.json"]
    )
    assert result.exit_code == 2 and "at least two" in result.output
