"""KenLM adapter: hand-computed probabilities, prefix sharing, case mapping, OOVs, streaming."""

from __future__ import annotations

import math
import random
from pathlib import Path

import kenlm
import numpy as np
import pytest

from rescorer.lms import LOADERS, load_lm, parse_spec
from rescorer.lms.contract import LanguageModel, count_oov, sentence_scores
from rescorer.lms.kenlm import KenLM

LN10 = math.log(10)


def ln(*log10_values: float) -> list[float]:
    return [v * LN10 for v in log10_values]


def test_hand_computed_token_logprobs(tiny_arpa: Path) -> None:
    lm = KenLM(tiny_arpa, case="none")
    got = lm.token_logprobs([["a", "b"], ["b", "a"], ["c"], []])
    # a b: bigrams <s> a, a b, b </s>
    np.testing.assert_allclose(got[0], ln(-0.30103, -0.39794, -0.2), atol=1e-6)
    # b a: backoff(<s>) + p(b); backoff(b) + p(a); p(</s> | a)
    np.testing.assert_allclose(got[1], ln(-0.30103 - 0.52288, -0.2 - 0.52288, -0.5), atol=1e-6)
    # c is unknown: backoff(<s>) + p(<unk>), then </s> from the empty context
    np.testing.assert_allclose(got[2], ln(-0.30103 - 1.0, -0.69897), atol=1e-6)
    # the empty sentence: backoff(<s>) + p(</s>)
    np.testing.assert_allclose(got[3], ln(-0.30103 - 0.69897), atol=1e-6)


def test_matches_kenlm_full_scores_in_any_order(tmp_path: Path, tiny_arpa: Path) -> None:
    """Prefix sharing over sorted sentences must not change any score."""
    rng = random.Random(1)
    sents = [[rng.choice("abc") for _ in range(rng.randint(0, 7))] for _ in range(300)]
    sents += [s[:] for s in sents[:50]]  # duplicates share everything
    lm = KenLM(tiny_arpa, case="none")
    model = kenlm.Model(str(tiny_arpa))
    got = lm.token_logprobs(sents)
    for words, lp in zip(sents, got, strict=True):
        want = [s[0] * LN10 for s in model.full_scores(" ".join(words))]
        np.testing.assert_allclose(lp, want, atol=1e-9)
        assert len(lp) == len(words) + 1


def test_sentence_totals_equal_token_sums(tiny_arpa: Path) -> None:
    lm = KenLM(tiny_arpa)
    sents = [["A", "B"], ["b", "a"], ["c"], [], ["a", "b", "a", "b", "c", "a"]]
    totals = lm.sentence_logprobs(sents)
    assert totals.shape == (5,)
    np.testing.assert_allclose(totals, [t.sum() for t in lm.token_logprobs(sents)], atol=1e-5)
    assert totals[0] == pytest.approx(sum(ln(-0.30103, -0.39794, -0.2)), abs=1e-5)
    assert lm.sentence_logprobs([]).shape == (0,) and lm.token_logprobs([]) == []


def test_case_auto_maps_upper_case_to_the_model(tiny_arpa: Path) -> None:
    lm = KenLM(tiny_arpa)  # auto
    upper = lm.token_logprobs([["A", "B"]])[0]
    assert lm.case == "lower"
    np.testing.assert_allclose(upper, ln(-0.30103, -0.39794, -0.2), atol=1e-6)
    assert count_oov(lm, [["A", "B", "C"]]) == (1, 3)


def test_case_none_leaves_upper_case_unknown(tiny_arpa: Path) -> None:
    lm = KenLM(tiny_arpa, case="none")
    flags = lm.oov_flags([["A", "b"], []])
    assert flags[0].tolist() == [True, False]
    assert flags[1].tolist() == []


def test_streaming_equals_whole_sentence(tiny_arpa: Path) -> None:
    lm = KenLM(tiny_arpa, case="none")
    words = ["a", "b", "a", "c", "b"]
    states = [lm.start()]
    total = []
    for w in [*words, "</s>"]:
        lp, states = lm.advance(states, [w])
        total.append(lp[0])
    np.testing.assert_allclose(total, lm.token_logprobs([words])[0], atol=1e-12)


def test_satisfies_the_contract(tiny_arpa: Path) -> None:
    lm = load_lm(f"tiny=kenlm:{tiny_arpa}")
    assert isinstance(lm, LanguageModel)
    assert lm.name == "tiny" and lm.units == "word"


def test_sentence_scores_batches_and_reports_progress(tiny_arpa: Path) -> None:
    lm = KenLM(tiny_arpa, case="none")
    sents = [["a"], ["b"], ["a", "b"], ["c"], []]
    done: list[int] = []
    got = sentence_scores(lm, sents, batch_size=2, progress=done.append)
    assert done == [2, 2, 1]
    want = [float(x.sum()) for x in lm.token_logprobs(sents)]
    np.testing.assert_allclose(got, want, atol=1e-5)
    with pytest.raises(ValueError, match="batch_size"):
        sentence_scores(lm, sents, batch_size=0)


def test_spec_parsing(tmp_path: Path) -> None:
    spec = parse_spec("kenlm:/x/4gram.books.bin")
    assert (spec.name, spec.kind, spec.path) == ("4gram", "kenlm", Path("/x/4gram.books.bin"))
    assert parse_spec("big=kenlm:a.arpa").name == "big"
    with pytest.raises(ValueError, match="KIND:PATH"):
        parse_spec("model.arpa")
    with pytest.raises(ValueError, match="unknown model kind 'srilm'"):
        parse_spec("srilm:model.arpa")
    with pytest.raises(ValueError, match="empty path"):
        parse_spec("kenlm:")
    assert "kenlm" in LOADERS
    # the combined score and the word count are not model names, given or taken from the file
    for spec in ("total=kenlm:a.arpa", "length=kenlm:a.arpa", "kenlm:/x/total.arpa"):
        with pytest.raises(ValueError, match="reserved"):
            parse_spec(spec)


def test_reserved_feature_names_refused_on_the_command_line(tiny_arpa: Path) -> None:
    from click.testing import CliRunner

    from rescorer.cli.main import main

    nbest = tiny_arpa.parent / "n.jsonl"
    nbest.write_text('{"utt": "u1", "hyps": [{"text": "a b", "scores": {"am": -1.0}}]}\n')
    for name in ("total", "length"):
        out = tiny_arpa.parent / f"{name}.jsonl"
        args = ["score", "--nbest", str(nbest), "--lm", f"{name}=kenlm:{tiny_arpa}"]
        result = CliRunner().invoke(main, [*args, "--out", str(out)])
        assert result.exit_code == 2 and "reserved" in result.output, result.output
        assert not out.exists()


def test_missing_or_broken_model_is_a_value_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not found"):
        KenLM(tmp_path / "nope.arpa")
    bad = tmp_path / "bad.arpa"
    bad.write_text("this is not an arpa file\n")
    with pytest.raises(ValueError, match="bad.arpa: expected a KenLM model"):
        KenLM(bad)
    with pytest.raises(ValueError, match="case must be one of"):
        KenLM(bad, case="title")
