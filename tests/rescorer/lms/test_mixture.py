"""Linear interpolation: EM weights against a hand-solved optimum, MixtureLM, mixture files."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from rescorer.core.errors import InputError
from rescorer.lms import load_lm, parse_spec
from rescorer.lms.contract import LanguageModel
from rescorer.lms.mixture import (
    MixtureLM,
    MixtureSpec,
    em_weights,
    mix_logprobs,
    relative_spec,
)


def test_em_finds_the_hand_computed_optimum() -> None:
    """Tokens of type A (p1 = 0.4, p2 = 0.1) three times, B (0.1, 0.4) once.

    L(l) = 3 ln(0.1 + 0.3 l) + ln(0.4 - 0.3 l); L'(l) = 0 <=> 3 (0.4 - 0.3 l) = 0.1 + 0.3 l
    <=> l = 1.1 / 1.2 = 11/12.
    """
    p = np.log(np.array([[0.4, 0.1]] * 3 + [[0.1, 0.4]]))
    result = em_weights(p)
    assert result.weights[0] == pytest.approx(11 / 12, abs=1e-5)
    assert result.weights[1] == pytest.approx(1 / 12, abs=1e-5)
    assert result.converged and result.tokens == 4
    best = 3 * math.log(0.1 + 0.3 * 11 / 12) + math.log(0.4 - 0.3 * 11 / 12)
    assert result.log_likelihood == pytest.approx(best, abs=1e-9)
    # Any other weight is worse.
    for lam in (0.5, 0.8, 0.99):
        assert mix_logprobs(p, [lam, 1 - lam]).sum() < result.log_likelihood


def test_em_moves_to_the_boundary_when_one_model_dominates() -> None:
    p = np.log(np.array([[0.5, 0.25], [0.2, 0.2], [0.3, 0.1]]))
    result = em_weights(p, max_iter=5000)
    assert result.weights[0] > 0.99


def test_em_three_components_and_start() -> None:
    rng = np.random.default_rng(0)
    p = np.log(rng.dirichlet(np.ones(3), size=50))
    a = em_weights(p)
    b = em_weights(p, init=[0.7, 0.2, 0.1])
    assert sum(a.weights) == pytest.approx(1.0)
    assert a.weights == pytest.approx(b.weights, abs=1e-3)
    with pytest.raises(ValueError, match="sum to 1"):
        em_weights(p, init=[0.5, 0.5, 0.5])
    with pytest.raises(ValueError, match="probability 0 under every component"):
        em_weights(np.array([[-math.inf, -math.inf]]))


def test_mix_logprobs() -> None:
    p = np.array([[math.log(0.5), math.log(0.1)], [math.log(0.2), -math.inf]])
    mixed = mix_logprobs(p, [0.25, 0.75])
    assert np.exp(mixed).tolist() == pytest.approx([0.25 * 0.5 + 0.75 * 0.1, 0.25 * 0.2])
    assert mix_logprobs(p, [1.0, 0.0])[1] == pytest.approx(math.log(0.2))


class Unigram:
    """A word unigram model with <unk>, streaming included."""

    units = "word"

    def __init__(self, name: str, probs: dict[str, float]) -> None:
        self.name = name
        self.probs = probs

    def _lp(self, word: str) -> float:
        return math.log(self.probs.get(word, self.probs["<unk>"]))

    def token_logprobs(
        self, sentences: Sequence[Sequence[str]], contexts: object = None
    ) -> list[np.ndarray]:
        return [np.array([self._lp(w) for w in [*s, "</s>"]]) for s in sentences]

    def sentence_logprobs(self, sentences: Sequence[Sequence[str]], contexts: object = None):  # type: ignore[no-untyped-def]
        return np.array([lp.sum() for lp in self.token_logprobs(sentences)])

    def oov_flags(self, sentences: Sequence[Sequence[str]]) -> list[np.ndarray]:
        return [np.array([w not in self.probs for w in s], dtype=bool) for s in sentences]

    def start(self, context: object = None) -> int:
        return 0

    def advance(self, states: Sequence[int], tokens: Sequence[str]) -> tuple[np.ndarray, list]:
        return np.array([self._lp(t) for t in tokens]), [s + 1 for s in states]


A = Unigram("a", {"x": 0.5, "y": 0.2, "</s>": 0.2, "<unk>": 0.1})
B = Unigram("b", {"x": 0.1, "z": 0.5, "</s>": 0.3, "<unk>": 0.1})


def test_mixture_lm_satisfies_the_contract() -> None:
    mix = MixtureLM([A, B], [0.25, 0.75], name="ab")
    assert isinstance(mix, LanguageModel) and mix.units == "word"
    sentences = [["x", "y"], ["z", "w"], []]
    lps = mix.token_logprobs(sentences)
    assert np.exp(lps[0]).tolist() == pytest.approx(
        [0.25 * 0.5 + 0.75 * 0.1, 0.25 * 0.2 + 0.75 * 0.1, 0.25 * 0.2 + 0.75 * 0.3]
    )
    np.testing.assert_allclose(mix.sentence_logprobs(sentences), [lp.sum() for lp in lps])
    # OOV only when no component knows the word: y is known to A, w to none.
    assert [f.tolist() for f in mix.oov_flags(sentences)] == [[False, False], [False, True], []]
    # Streaming gives the batch scores.
    states = [mix.start(), mix.start()]
    out = []
    for tokens in (["z", "x"], ["w", "</s>"]):
        lp, states = mix.advance(states, tokens)
        out.append(lp)
    assert [out[0][0], out[1][0]] == pytest.approx(lps[1][:2].tolist())


def test_mixture_needs_same_units_and_valid_weights() -> None:
    class Chars(Unigram):
        units = "char"

    with pytest.raises(ValueError, match="same units"):
        MixtureLM([A, Chars("c", {"<unk>": 1.0})], [0.5, 0.5])
    with pytest.raises(ValueError, match="sum to 1"):
        MixtureLM([A, B], [0.5, 0.6])


def test_mixture_file_round_trip_and_relative_paths(tmp_path: Path, tiny_arpa: Path) -> None:
    spec = MixtureSpec(("one=kenlm:tiny.arpa", "two=kenlm:./tiny.arpa"), (0.3, 0.7), {"x": 1})
    spec.save(tmp_path / "mix.json")
    assert MixtureSpec.load(tmp_path / "mix.json") == spec
    mix = load_lm(f"m=mix:{tmp_path / 'mix.json'}")
    assert isinstance(mix, MixtureLM) and mix.name == "m" and mix.weights == (0.3, 0.7)
    assert [c.name for c in mix.components] == ["one", "two"]
    # Two copies of one model: the mixture is that model.
    single = load_lm(f"kenlm:{tiny_arpa}")
    sentences = [["a", "b"], ["b", "q"]]
    for got, want in zip(
        mix.token_logprobs(sentences), single.token_logprobs(sentences), strict=True
    ):
        np.testing.assert_allclose(got, want, rtol=1e-12)
    rel = relative_spec(parse_spec(f"lm=kenlm:{tiny_arpa}"), tmp_path / "sub")
    assert rel == "lm=kenlm:../tiny.arpa"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{", "mix.json:1: invalid JSON"),
        ('{"format": "other"}', "format 'rescorer-mixture'"),
        ('{"format": "rescorer-mixture", "version": 9}', "version 1"),
        ('{"format": "rescorer-mixture", "version": 1, "components": [1]}', "components"),
        (
            '{"format": "rescorer-mixture", "version": 1, "components": '
            '[{"spec": "kenlm:a", "weight": 0.4}]}',
            "sum to 1",
        ),
        (
            '{"format": "rescorer-mixture", "version": 1, "components": '
            '[{"spec": "nope:a", "weight": 1}]}',
            "unknown model kind",
        ),
    ],
)
def test_bad_mixture_files(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "mix.json"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(InputError, match=message) as info:
        MixtureSpec.load(path)
    assert str(path) in str(info.value)


def test_nested_mixture_cycle_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "mix.json"
    path.write_text(
        json.dumps(
            {
                "format": "rescorer-mixture",
                "version": 1,
                "components": [{"spec": "mix:mix.json", "weight": 1.0}],
            }
        ),
        encoding="utf-8",
    )
    with pytest.raises(ValueError, match="nested deeper"):
        load_lm(f"mix:{path}")
