"""The backward model wrapper (``reverse:``): hypotheses scored with their words reversed."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from rescorer.cli.main import main
from rescorer.core.errors import InputError
from rescorer.lm_models.checkpoint import save_checkpoint
from rescorer.lms import load_lm
from rescorer.lms.contract import LanguageModel
from rescorer.lms.reverse import ReverseLM, ReverseSpec
from rescorer.lms.torch import TorchLM
from tests.conftest import write_espnet_set
from tests.rescorer.lms.test_torch import VOCAB, make_model


def reverse_file(tmp_path: Path, base: str) -> Path:
    path = tmp_path / "bwd.json"
    ReverseSpec(base).save(path)
    return path


def test_scores_are_the_base_on_the_reversed_words(tmp_path: Path, tiny_arpa: Path) -> None:
    lm = load_lm(f"bwd=reverse:{reverse_file(tmp_path, 'ng=kenlm:tiny.arpa')}")
    kenlm = load_lm(f"kenlm:{tiny_arpa}")
    assert isinstance(lm, ReverseLM) and isinstance(lm, LanguageModel)
    assert lm.name == "bwd" and lm.units == "word"
    sentences = [["a", "b"], ["b", "a", "a"], []]
    got = lm.sentence_logprobs(sentences)
    want = kenlm.sentence_logprobs([["b", "a"], ["a", "a", "b"], []])
    np.testing.assert_array_equal(got, want)
    # the tiny model is not symmetric: scoring forwards would give other numbers
    assert abs(got[0] - kenlm.sentence_logprobs([["a", "b"]])[0]) > 0.1
    tokens = lm.token_logprobs(sentences)
    backward = kenlm.token_logprobs([["a", "a", "b"]])[0]  # the words reversed, then </s>
    np.testing.assert_array_equal(tokens[1], backward[[2, 1, 0, 3]])  # in the words' order
    assert len(tokens[2]) == 1 and tokens[2][0] == kenlm.token_logprobs([[]])[0][0]
    np.testing.assert_allclose([t.sum() for t in tokens], got, rtol=1e-6)


@pytest.mark.usefixtures("tiny_arpa")
def test_oov_flags_follow_the_words_given(tmp_path: Path) -> None:
    lm = load_lm(f"reverse:{reverse_file(tmp_path, 'kenlm:tiny.arpa')}")
    flags = lm.oov_flags([["zebra", "a", "b", "b"], ["a", "quagga"]])
    assert [f.tolist() for f in flags] == [[True, False, False, False], [False, True]]


@pytest.mark.usefixtures("tiny_arpa")
def test_word_by_word_use_is_refused(tmp_path: Path) -> None:
    lm = load_lm(f"reverse:{reverse_file(tmp_path, 'kenlm:tiny.arpa')}")
    with pytest.raises(ValueError, match="whole sentences only"):
        lm.start()
    with pytest.raises(ValueError, match="whole sentences only"):
        lm.advance([None], ["a"])


def test_a_torch_base_shares_the_reversed_hypotheses_endings(tmp_path: Path) -> None:
    """N-best hypotheses that differ early share their endings: reversed, those are prefixes,
    and the prefix-tree scorer computes them once; each score equals the sentence scored alone."""
    ckpt = save_checkpoint(tmp_path / "lstm", make_model("unadapted", seed=5), VOCAB)
    lm = load_lm(f"reverse:{reverse_file(tmp_path, f'torch:{ckpt}')}", device="cpu")
    base = lm.base
    assert isinstance(base, TorchLM)
    hyps = [["the", "cat", "sat", "on", "the", "mat"], ["a", "cat", "sat", "on", "the", "mat"]]
    base.reset_stats()
    together = lm.sentence_logprobs(hyps)
    # reversed, the two share "mat the on sat cat": 8 steps where forwards they would take 13
    assert lm.stats == base.stats and (base.stats.computed_steps, base.stats.naive_steps) == (8, 14)
    alone = [base.sentence_logprobs([list(reversed(h))])[0] for h in hyps]
    np.testing.assert_allclose(together, alone, rtol=1e-5)
    assert abs(together[0] - base.sentence_logprobs([hyps[0]])[0]) > 1e-3


def test_cli_score_writes_the_backward_feature(tmp_path: Path, tiny_arpa: Path) -> None:
    utts = [("1-2-0000", [("a b", -1.0, -1.0, -1.0), ("b a a", -2.0, -2.0, -2.0)])]
    nbest = write_espnet_set(tmp_path / "dev", utts, {"1-2-0000": "a b"})
    spec = reverse_file(tmp_path, f"kenlm:{tiny_arpa}")
    scored = tmp_path / "scored.jsonl"
    runner = CliRunner()
    result = runner.invoke(
        main, ["score", "--nbest", str(nbest), "--lm", f"bwd=reverse:{spec}", "--out", str(scored)]
    )
    assert result.exit_code == 0, result.output
    kenlm = load_lm(f"kenlm:{tiny_arpa}", case="none")
    (row,) = map(json.loads, scored.read_text().splitlines())
    for h in row["hyps"]:
        words = h["text"].lower().split()
        want = kenlm.sentence_logprobs([words[::-1]])[0]
        assert h["scores"]["bwd"] == pytest.approx(want, abs=1e-6)
    missing = runner.invoke(
        main, ["score", "--nbest", str(nbest), "--lm", f"reverse:{tmp_path / 'no.json'}",
               "--out", str(tmp_path / "x.jsonl")],
    )  # fmt: skip
    assert missing.exit_code == 2 and "no.json" in missing.output
    assert "Traceback" not in missing.output


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{", "bwd.json:1: invalid JSON"),
        ('{"format": "rescorer-cache", "version": 1}', "format 'rescorer-reverse'"),
        ('{"format": "rescorer-reverse", "version": 2, "base": "kenlm:a"}', "version 1"),
        ('{"format": "rescorer-reverse", "version": 1}', '"base"'),
        ('{"format": "rescorer-reverse", "version": 1, "base": 3}', '"base"'),
        ('{"format": "rescorer-reverse", "version": 1, "base": "x:a"}', "model kind"),
    ],
)
def test_bad_files_name_the_file(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "bwd.json"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(InputError, match=message) as info:
        ReverseSpec.load(path)
    assert str(path) in str(info.value)


def test_a_reverse_of_itself_is_refused(tmp_path: Path) -> None:
    path = reverse_file(tmp_path, "reverse:bwd.json")
    with pytest.raises(ValueError, match="nested deeper"):
        load_lm(f"reverse:{path}")


@pytest.mark.usefixtures("tiny_arpa")
def test_ppl_leaves_out_the_unknown_word_itself(tmp_path: Path) -> None:
    """`rescorer ppl` pairs each word's value with its OOV flag: the one left out is the unknown
    word's own probability (given the words after it), not the value in its backward slot."""
    spec = reverse_file(tmp_path, "kenlm:tiny.arpa")
    text = tmp_path / "text.txt"
    text.write_text("zebra a b\n", encoding="utf-8")
    result = CliRunner().invoke(main, ["ppl", "--lm", f"reverse:{spec}", "--text", str(text)])
    assert result.exit_code == 0, result.output
    lp = load_lm(f"kenlm:{tmp_path / 'tiny.arpa'}").token_logprobs([["b", "a", "zebra"]])[0]
    known = lp[0] + lp[1] + lp[3]  # b, a and the end: zebra's lp[2] left out
    assert f"ppl excluding OOVs {math.exp(-known / 3):.2f} over 3 tokens" in result.output
