"""The unigram cache LM: hand-computed mixtures, normalisation, no context = base, files, CLI."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from rescorer.cli.main import main
from rescorer.core.errors import InputError
from rescorer.lms import load_lm
from rescorer.lms.cache import CacheLM, CacheSpec
from rescorer.lms.contract import LanguageModel
from tests.conftest import write_espnet_set
from tests.rescorer.lms.test_mixture import Unigram

# A closed vocabulary (no <unk> mass is used by in-vocabulary words): x, y, z and </s>.
BASE = Unigram("base", {"x": 0.5, "y": 0.2, "z": 0.1, "</s>": 0.2, "<unk>": 0.05})


def test_words_mix_with_the_cache_and_the_end_keeps_the_base_share() -> None:
    lm = CacheLM(BASE, 0.2, name="c")
    assert isinstance(lm, LanguageModel) and lm.units == "word"
    # cache "y y z": p_c(y) = 2/3, p_c(z) = 1/3, p_c(x) = 0
    got = np.exp(lm.token_logprobs([["x", "y", "z"]], [{"previous": "y y z"}])[0])
    want = [0.8 * 0.5, 0.8 * 0.2 + 0.2 * 2 / 3, 0.8 * 0.1 + 0.2 / 3, 0.8 * 0.2]
    np.testing.assert_allclose(got, want, rtol=1e-12)
    assert lm.sentence_logprobs([["x", "y", "z"]], [{"previous": "y y z"}])[0] == pytest.approx(
        sum(math.log(p) for p in want), abs=1e-12
    )


def test_the_mixture_sums_to_one_over_the_vocabulary() -> None:
    lm = CacheLM(BASE, 0.3)
    state = lm.start({"previous": "z x z y"})
    events = ["x", "y", "z", "</s>"]
    lp, _ = lm.advance([state] * len(events), events)
    assert np.exp(lp).sum() == pytest.approx(1.0, abs=1e-12)


def test_no_context_or_an_empty_cache_is_the_base_model_exactly() -> None:
    lm = CacheLM(BASE, 0.5, min_chars=2)
    s = [["x", "q", "y"]]
    base = BASE.token_logprobs(s)[0]
    for contexts in (
        None,
        [None],
        [{}],
        [{"previous": ""}],
        [{"speaker": "7"}],
        [{"previous": "a b"}],
    ):
        np.testing.assert_array_equal(lm.token_logprobs(s, contexts)[0], base)


def test_min_chars_and_case_decide_what_is_cached() -> None:
    lm = CacheLM(
        Unigram("u", {"the": 0.3, "cat": 0.1, "</s>": 0.2, "<unk>": 0.4}), 0.5, min_chars=4
    )
    cache = lm.cache({"previous": "The CAT Catalina the sat"})
    assert dict(cache.probs) == {"catalina": 1.0}
    # an unknown word seen in the cache gets the base's <unk> share plus the cache's
    lp = lm.token_logprobs([["catalina", "CATALINA", "cat"]], [{"previous": "Catalina"}])[0]
    np.testing.assert_allclose(np.exp(lp), [0.5 * 0.4 + 0.5, 0.5 * 0.4 + 0.5, 0.5 * 0.1, 0.5 * 0.2])
    assert [f.tolist() for f in lm.oov_flags([["catalina", "cat"]])] == [[True, False]]


def test_streaming_equals_the_batch_scores() -> None:
    lm = CacheLM(BASE, 0.1)
    ctx = {"previous": "x z"}
    sentence = ["z", "y", "x"]
    want = lm.token_logprobs([sentence], [ctx])[0]
    states = [lm.start(ctx), lm.start(None)]
    got, got_plain = [], []
    for token in [*sentence, "</s>"]:
        lp, states = lm.advance(states, [token, token])
        got.append(lp[0])
        got_plain.append(lp[1])
    np.testing.assert_allclose(got, want, rtol=1e-12)
    np.testing.assert_allclose(got_plain, BASE.token_logprobs([sentence])[0], rtol=1e-12)


def test_options_are_checked() -> None:
    for lam in (0.0, 1.0, -0.1, math.nan):
        with pytest.raises(ValueError, match="lambda must be between 0 and 1"):
            CacheLM(BASE, lam)
    with pytest.raises(ValueError, match="min_chars must be >= 0"):
        CacheLM(BASE, 0.1, min_chars=-1)

    class Pieces(Unigram):
        units = "subword"

    with pytest.raises(ValueError, match="base model over words, got 'p' with units 'subword'"):
        CacheLM(Pieces("p", {"<unk>": 1.0}), 0.1)
    with pytest.raises(ValueError, match="context field 'previous' must be text, got list"):
        CacheLM(BASE, 0.1).token_logprobs([["x"]], [{"previous": ["x"]}])


def test_cache_file_round_trip_relative_base_and_kenlm(tmp_path: Path, tiny_arpa: Path) -> None:
    spec = CacheSpec("ng=kenlm:tiny.arpa", 0.25, "previous", 1)
    spec.save(tmp_path / "cache.json")
    assert CacheSpec.load(tmp_path / "cache.json") == spec
    lm = load_lm(f"c=cache:{tmp_path / 'cache.json'}")
    assert isinstance(lm, CacheLM) and lm.name == "c" and lm.base.name == "ng"
    kenlm = load_lm(f"kenlm:{tiny_arpa}")
    s = [["a", "b"]]
    base = kenlm.token_logprobs(s)[0]
    np.testing.assert_array_equal(lm.token_logprobs(s, [None])[0], base)
    got = lm.token_logprobs(s, [{"previous": "b b a b"}])[0]
    want = np.log(0.75 * np.exp(base) + 0.25 * np.array([0.25, 0.75, 0.0]))
    np.testing.assert_allclose(got, want, rtol=1e-12)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{", "cache.json:1: invalid JSON"),
        ('{"format": "rescorer-mixture"}', "format 'rescorer-cache'"),
        ('{"format": "rescorer-cache", "version": 2}', "version 1"),
        ('{"format": "rescorer-cache", "version": 1, "lambda": 0.1}', '"base"'),
        ('{"format": "rescorer-cache", "version": 1, "base": "kenlm:a", "lambda": 1.5}', "lambda"),
        ('{"format": "rescorer-cache", "version": 1, "base": "x:a", "lambda": 0.1}', "model kind"),
        (
            '{"format": "rescorer-cache", "version": 1, "base": "kenlm:a", "lambda": 0.1, '
            '"min_chars": "5"}',
            "min_chars",
        ),
    ],
)
def test_bad_cache_files_name_the_file(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "cache.json"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(InputError, match=message) as info:
        CacheSpec.load(path)
    assert str(path) in str(info.value)


def test_a_cache_of_itself_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "cache.json"
    path.write_text(
        json.dumps({"format": "rescorer-cache", "version": 1, "base": "cache:cache.json",
                    "lambda": 0.1}),
        encoding="utf-8",
    )  # fmt: skip
    with pytest.raises(ValueError, match="nested deeper"):
        load_lm(f"cache:{path}")


def test_cli_context_build_then_score_with_a_cache(tmp_path: Path, tiny_arpa: Path) -> None:
    """The recording's first utterance is scored by the base; later ones see earlier 1-bests."""
    utts = [
        ("9-90-0000", [("a b", -1.0, -1.0, -1.0), ("b b", -2.0, -2.0, -2.0)]),
        ("9-90-0001", [("b a", -1.0, -1.0, -1.0), ("a a", -2.0, -2.0, -2.0)]),
        ("9-91-0000", [("a", -1.0, -1.0, -1.0)]),
    ]
    nbest = write_espnet_set(tmp_path / "dev", utts, {u: h[0][0] for u, h in utts})
    ctx = tmp_path / "ctx.jsonl"
    runner = CliRunner()
    built = runner.invoke(main, ["context", "build", "--nbest", str(nbest), "--out", str(ctx)])
    assert built.exit_code == 0, built.output
    CacheSpec(f"kenlm:{tiny_arpa}", 0.5).save(tmp_path / "cache.json")
    scored = tmp_path / "scored.jsonl"
    result = runner.invoke(
        main,
        ["score", "--nbest", str(nbest), "--lm", f"ng=kenlm:{tiny_arpa}", "--lm",
         f"c=cache:{tmp_path / 'cache.json'}", "--context", str(ctx), "--out", str(scored)],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    rows = {r["utt"]: r for r in map(json.loads, scored.read_text().splitlines())}
    kenlm = load_lm(f"kenlm:{tiny_arpa}", case="none")
    for utt in ("9-90-0000", "9-91-0000"):  # a recording's first utterance: no cache
        for h in rows[utt]["hyps"]:
            assert h["scores"]["c"] == pytest.approx(h["scores"]["ng"], abs=1e-6)
    # 9-90-0001 after "A B": p_c(a) = p_c(b) = 1/2
    for h in rows["9-90-0001"]["hyps"]:
        words = h["text"].lower().split()
        base = np.exp(kenlm.token_logprobs([words])[0])
        want = np.log(0.5 * base + 0.5 * np.array([0.5] * len(words) + [0.0])).sum()
        assert h["scores"]["c"] == pytest.approx(want, abs=1e-9)
        assert abs(h["scores"]["c"] - h["scores"]["ng"]) > 0.1
    missing = runner.invoke(
        main, ["score", "--nbest", str(nbest), "--lm", f"cache:{tmp_path / 'no.json'}",
               "--out", str(tmp_path / "x.jsonl")],
    )  # fmt: skip
    assert missing.exit_code == 2 and "no.json" in missing.output
    assert "Traceback" not in missing.output
