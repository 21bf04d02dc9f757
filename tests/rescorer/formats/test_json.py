"""JSON ({utt: {hypN: ...}}) and JSONL (canonical) N-best files."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from rescorer.core.errors import InputError
from rescorer.formats.json_formats import read_json, read_jsonl, write_json, write_jsonl
from rescorer.nbest import Hypothesis, NBest, NBestList
from tests.paths import NBEST_FIXTURES

FIXTURES = NBEST_FIXTURES


def sample() -> NBest:
    return NBest(
        [
            NBestList(
                "utt1",
                (
                    Hypothesis(("A", "B"), {"score": -1.5, "lm": 0.1 + 0.2}, ("▁A", "▁B")),
                    Hypothesis((), {"score": -1e-320, "lm": -7.0}),
                ),
            ),
            NBestList("utt2", (Hypothesis(("ÉTÉ",), {"score": 12345678.123456789}),)),
            NBestList("utt3", ()),
        ],
        references={"utt1": ("A", "B"), "utt3": ()},
    )


# --- json ---------------------------------------------------------------------------------------


def test_json_fixture() -> None:
    nb = read_json(FIXTURES / "small.json")
    assert list(nb) == ["utt1", "utt2"]
    hyps = nb["utt1"].hyps
    # hyp1, hyp2, hyp10 by number, not by key order or string order
    assert [h.words for h in hyps] == [("THE", "CAT", "SAT"), ("THE", "CAT", "SAD"), ()]
    assert dict(hyps[0].scores) == {"score": -1.25, "lm": -7.5}
    assert nb.references == {"utt1": ("THE", "CAT", "SAT")}


def test_json_round_trip(tmp_path: Path) -> None:
    nb = sample()
    write_json(nb, tmp_path / "x.json")
    back = read_json(tmp_path / "x.json")
    assert dict(back) == dict(nb)
    assert back.references == nb.references


def test_json_without_refs(tmp_path: Path) -> None:
    (tmp_path / "a.json").write_text('{"u": {"hyp1": {"score": 1, "text": "A"}, "ref": null}}')
    nb = read_json(tmp_path / "a.json")
    assert nb.references is None
    assert nb["u"][0].scores["score"] == 1.0


@pytest.mark.parametrize(
    ("content", "line", "needle"),
    [
        ('{"u": {"hyp1": {"score": -1, "text": "A"}', 1, "invalid JSON"),
        ('{\n"u": {\n"hyp1": {"score": -1, "text": "A"},\n}}', 4, "invalid JSON"),
        ("[1, 2]", None, "JSON object of utterances"),
        ('{"u": [1]}', None, "expected an object"),
        ('{"u": {"hyp1": {"score": -1}}}', None, "no 'text'"),
        ('{"u": {"hyp1": {"score": "-1", "text": "A"}}}', None, "expected a number"),
        ('{"u": {"hyp1": {"score": true, "text": "A"}}}', None, "expected a number"),
        ('{"u": {"hyp1": {"score": NaN, "text": "A"}}}', None, "non-finite"),
        ('{"u": {"hyp1": {"score": 1, "text": 5}}}', None, "expected a string"),
        ('{"u": {"best": {"score": 1, "text": "A"}}}', None, "ending in its rank"),
        ('{"u": {"hyp1": {"text": "A"}, "h1": {"text": "B"}}}', None, "same rank 1"),
        ('{"u": {"hyp1": {"text": "A"}, "ref": 3}}', None, "ref: expected a string"),
        ('{"u": {"hyp1": {"text": "A", "tokens": "a"}}}', None, "list of strings"),
        ('{"u": {"hyp1": {"text": "A"}}, "u": {}}', None, "duplicate JSON key 'u'"),
        ('{"a b": {}}', None, "bad utterance id"),
        ('{"": {}}', None, "bad utterance id"),
        ("[" * 100000, None, "nested too deeply"),
    ],
)
def test_json_errors(tmp_path: Path, content: str, line, needle: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(InputError) as info:
        read_json(path)
    assert info.value.path == str(path)
    assert info.value.line == line
    assert needle in str(info.value)


def test_json_writer_refuses_clashing_score_name(tmp_path: Path) -> None:
    nb = NBest([NBestList("u", (Hypothesis(("A",), {"text": 1.0}),))])
    with pytest.raises(ValueError, match="clashes"):
        write_json(nb, tmp_path / "x.json")


# --- jsonl --------------------------------------------------------------------------------------


def test_jsonl_fixture() -> None:
    nb = read_jsonl(FIXTURES / "small.jsonl")
    assert list(nb) == ["utt1", "utt2"]
    assert nb["utt1"][0].tokens == ("▁THE", "▁CAT", "▁SAT")
    assert nb["utt1"][1].words == ()
    assert nb["utt1"][1].tokens is None
    assert dict(nb["utt2"][0].scores) == {"am": -0.125, "lm": -3.0}
    assert nb.references == {"utt1": ("THE", "CAT", "SAT")}


def test_jsonl_round_trip_exact(tmp_path: Path) -> None:
    nb = sample()
    write_jsonl(nb, tmp_path / "x.jsonl")
    back = read_jsonl(tmp_path / "x.jsonl")
    assert dict(back) == dict(nb)
    assert back.references == nb.references
    for u in nb:
        for h, g in zip(nb[u], back[u], strict=True):
            assert list(h.scores.items()) == list(g.scores.items())  # order kept too
            assert all(
                math.copysign(1, a) == math.copysign(1, b)
                for a, b in zip(h.scores.values(), g.scores.values(), strict=True)
            )
    first = json.loads((tmp_path / "x.jsonl").read_text().splitlines()[0])
    assert first["hyps"][0] == {
        "text": "A B",
        "scores": {"score": -1.5, "lm": 0.30000000000000004},
        "tokens": ["▁A", "▁B"],
    }


@pytest.mark.parametrize(
    ("content", "line", "needle"),
    [
        ('{"utt": "a", "hyps": []}\n{"utt": "a", "hyps": []}\n', 2, "duplicate utterance 'a'"),
        ('{"utt": "a", "hyps": []}\n\n{"utt": "b", "hyps": [}\n', 3, "invalid JSON"),
        ('{"utt": "a", "hyps": []}\n[1]\n', 2, "expected a JSON object"),
        ('{"utt": "a"}\n', 1, "needs 'utt' and 'hyps'"),
        ('{"utt": "a", "hyps": [], "extra": 1}\n', 1, "unknown key 'extra'"),
        ('{"utt": 5, "hyps": []}\n', 1, "utt: expected a string"),
        ('{"utt": "a", "hyps": {}}\n', 1, "'hyps' must be a list"),
        ('{"utt": "a", "hyps": [5]}\n', 1, "hypothesis 1: expected an object"),
        ('{"utt": "a", "hyps": [{"scores": {}}]}\n', 1, "no 'text'"),
        ('{"utt": "a", "hyps": [{"text": "", "score": {}}]}\n', 1, "unknown key 'score'"),
        ('{"utt": "a", "hyps": [{"text": "", "scores": []}]}\n', 1, "scores must be an object"),
        ('{"utt": "a", "hyps": [{"text": "", "scores": {"x": "1"}}]}\n', 1, "expected a number"),
        ('{"utt": "a", "hyps": [{"text": "", "scores": {"x": Infinity}}]}\n', 1, "non-finite"),
        ('{"utt": "a", "hyps": [{"text": "", "scores": {"x": 1e400}}]}\n', 1, "non-finite"),
        ('{"utt": "a", "hyps": [{"text": "", "tokens": [1]}]}\n', 1, "expected a string"),
        ('{"utt": "a", "hyps": [{"text": "\\ud800"}]}\n', 1, "lone surrogate"),
        ('{"utt": "a", "hyps": [], "ref": ["A"]}\n', 1, "ref: expected a string"),
        ('{"utt": "a", "utt": "b", "hyps": []}\n', 1, "duplicate JSON key"),
        # 3.11+: too many digits for int(); 3.10: the float overflows. Either way an InputError.
        ('{"utt": "a", "hyps": [{"text": "", "scores": {"x": 1' + "0" * 5000 + "}}]}\n", 1, ""),
    ],
)
def test_jsonl_errors(tmp_path: Path, content: str, line: int, needle: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(content)
    with pytest.raises(InputError) as info:
        read_jsonl(path)
    assert (info.value.path, info.value.line) == (str(path), line)
    assert needle in str(info.value)


def test_jsonl_writer_refuses_nan(tmp_path: Path) -> None:
    nb = NBest([NBestList("u", (Hypothesis(("A",), {"x": math.inf}),))])
    with pytest.raises(ValueError, match="non-finite"):
        write_jsonl(nb, tmp_path / "x.jsonl")
    assert not (tmp_path / "x.jsonl").exists()
