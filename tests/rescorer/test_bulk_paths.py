"""The fast paths of the KenLM scoring path (issue 50) give what the careful paths give.

Reading keyed files, ESPnet score lines, adding features, writing JSONL and KenLM's OOV flags
each have a fast path for the common case and fall back to the careful one for anything else;
these tests hold the two to the same answers and the same errors.
"""

from __future__ import annotations

import gc
import io
import json
import math
import pickle
import random
from pathlib import Path

import pytest

from rescorer.core.bulk import freeze_after_bulk, paused_gc
from rescorer.core.errors import InputError
from rescorer.core.io import plain_lines, read_lines
from rescorer.formats import espnet
from rescorer.formats._common import read_keyed
from rescorer.formats.json_formats import read_jsonl, write_jsonl_lines
from rescorer.nbest import Hypothesis, NBest, NBestList, Scores


def _careful(path: Path, parse):  # the line-by-line path, forced
    return read_keyed(path, parse, lines=read_lines(path))


def _outcome(fn):
    try:
        return ("ok", fn())
    except InputError as err:
        return ("error", str(err))


@pytest.mark.parametrize("seed", range(40))
def test_read_keyed_fast_path_equals_the_line_by_line_path(seed: int, tmp_path: Path) -> None:
    rng = random.Random(seed)
    keys = [f"u{rng.randrange(12)}" for _ in range(rng.randrange(0, 10))]
    lines = []
    for key in keys:
        kind = rng.random()
        if kind < 0.1:
            lines.append("")  # blank line: skipped by both
        elif kind < 0.2:
            lines.append(key)  # a key without a value
        elif kind < 0.3:
            lines.append(f"{key} tensor(nope)")  # a value the parser refuses
        else:
            lines.append(f"{key}\t tensor({rng.uniform(-9, 9)!r})  ")
    path = tmp_path / "score"
    path.write_text("\n".join(lines) + ("\n" if rng.random() < 0.8 else ""), encoding="utf-8")
    parse = espnet._parse_score(path)
    assert _outcome(lambda: read_keyed(path, parse)) == _outcome(lambda: _careful(path, parse))


def test_read_keyed_reports_the_first_problem_in_file_order(tmp_path: Path) -> None:
    # A repeated key on line 2 comes before a bad value on line 3 (the fast path meets the
    # bad value first; it must not be the one reported).
    path = tmp_path / "score"
    path.write_text("a tensor(1)\na tensor(2)\nb tensor(x)\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"score:2: duplicate utterance id 'a' \(first on line 1"):
        read_keyed(path, espnet._parse_score(path))


def test_plain_lines_leaves_cr_and_gzip_to_read_lines(tmp_path: Path) -> None:
    crlf = tmp_path / "a.txt"
    crlf.write_bytes(b"x 1\r\ny 2\r\n")
    assert plain_lines(crlf) is None
    plain = tmp_path / "b.txt"
    plain.write_text("x 1\n\ny 2", encoding="utf-8")
    assert plain_lines(plain) == ["x 1", "", "y 2"]
    assert plain_lines(plain) == [line for _, line in read_lines(plain)]


SCORE_LINES = [
    '{"decoder": "tensor(-0.9373)", "ctc": "tensor(-0.1480)", "lm": "tensor(-115.2517)"}',
    '{"decoder": "tensor(-1)"}',
    '{"decoder":"tensor(-1)"}',  # other separators: the careful path
    '{"decoder": "tensor(1e5)", "ctc": -2.5}',  # a plain number
    '{"decoder": "tensor(-1, device=\'cuda:0\')"}',
    '{"decoder": "tensor(-1)", "decoder": "tensor(2)"}',  # a repeated name
    '{"decoder": "tensor(nan)"}',
    '{"decoder": "tensor(1\t)"}',  # a raw tab: not JSON
    '{"decoder": "tensor(1)", }',
    '{"de\\u0063oder": "tensor(1)"}',  # an escape
    '{"new name": "tensor(1)"}',
    '{"decoder": "tensor(1_0)"}',
    '{"decoder": "tensor( 2 )"}',
    "{}",
]


@pytest.mark.parametrize("line", SCORE_LINES)
def test_espnet_scores_fast_path_equals_the_careful_one(line: str, tmp_path: Path) -> None:
    path = tmp_path / "scores"
    first = '{"decoder": "tensor(0)", "ctc": "tensor(0)", "lm": "tensor(0)"}'
    fast = espnet._parse_scores(path)
    fast(first, 1)  # names seen: the fast path is open to them

    def careful(rest: str, lineno: int):
        real = espnet._ESPNET_SCORES
        espnet._ESPNET_SCORES = _NeverMatches()  # type: ignore[assignment]
        try:
            parse = espnet._parse_scores(path)
            parse(first, 1)
            return parse(rest, lineno)
        finally:
            espnet._ESPNET_SCORES = real

    assert _outcome(lambda: fast(line, 2)) == _outcome(lambda: careful(line, 2))


class _NeverMatches:
    def fullmatch(self, text: str) -> None:
        return None


def test_scores_are_a_read_only_dict_that_pickles() -> None:
    hyp = Hypothesis(("a", "b"), {"x": 1, "y": -2.5})
    assert type(hyp.scores) is Scores and hyp.scores == {"x": 1.0, "y": -2.5}
    for change in (
        lambda s: s.__setitem__("z", 1.0),
        lambda s: s.update(z=1.0),
        lambda s: s.pop("x"),
        lambda s: s.clear(),
        lambda s: s.setdefault("z", 1.0),
    ):
        with pytest.raises(TypeError, match="read-only"):
            change(hyp.scores)
    assert hyp.scores == {"x": 1.0, "y": -2.5}
    assert pickle.loads(pickle.dumps(hyp)) == hyp
    assert json.dumps(hyp.scores) == '{"x": 1.0, "y": -2.5}'
    copy = hyp.scores.copy()
    copy["z"] = 3.0  # a copy is a plain dict
    assert "z" not in hyp.scores


def test_with_features_equals_one_feature_at_a_time() -> None:
    nbest = NBest(
        [
            NBestList("u1", (Hypothesis(("a",), {"s": 1.0}), Hypothesis((), {"s": 2.0}))),
            NBestList("u2", (Hypothesis(("b", "c"), {"s": 3.0}),)),
        ]
    )
    f = {"u1": [0.5, -1.5], "u2": [7]}
    g = {"u1": [1, 2], "u2": [3.25]}
    both = nbest.with_features({"f": f, "g": g})
    assert both == nbest.with_scores("f", f).with_scores("g", g)
    assert both.score_names() == ("s", "f", "g")
    assert [list(h.scores) for nb in both.values() for h in nb] == [["s", "f", "g"]] * 3
    assert type(both["u2"][0].scores["f"]) is float
    with pytest.raises(ValueError, match="u2: got 2 values for score 'g', expected 1"):
        nbest.with_features({"f": f, "g": {**g, "u2": [1, 2]}})


@pytest.mark.parametrize(
    ("words", "message"),
    [
        (("a b",), "contains whitespace"),
        (("",), "empty"),
        (("a b", ""), "contains whitespace"),  # a split and an empty word: the count is equal
        (("a\u00a0b",), "contains whitespace"),
        (("\ufeff",), "U\\+FEFF"),  # readers drop it: it would not read back
    ],
)
def test_jsonl_writer_refuses_words_that_would_not_read_back(
    words: tuple[str, ...], message: str
) -> None:
    nbest = NBest([NBestList("u", (Hypothesis(("ok",), {}), Hypothesis(words, {})))])
    out = io.StringIO()
    with pytest.raises(ValueError, match=message):
        write_jsonl_lines(nbest, out)
    assert out.getvalue() == ""  # nothing of a refused set


def test_jsonl_writer_names_a_non_finite_score_and_writes_nothing() -> None:
    good = NBestList("u1", (Hypothesis(("a",), {"s": 1.0}),))
    bad = NBestList("u2", (Hypothesis(("a",), {"s": 1.0}), Hypothesis(("b",), {"s": math.inf})))
    out = io.StringIO()
    with pytest.raises(ValueError, match="non-finite score s=inf of u2 hyp 2"):
        write_jsonl_lines(NBest([good, bad]), out)
    assert out.getvalue() == ""


def test_jsonl_round_trip(tmp_path: Path) -> None:
    nbest = NBest(
        [NBestList("u1", (Hypothesis(("é", "b"), {"s": 1e-5, "t": -0.0}, ("▁é", "b")),))],
        {"u1": ("x",)},
    )
    path = tmp_path / "a.jsonl"
    with path.open("w", encoding="utf-8") as f:
        write_jsonl_lines(nbest, f)
    back = read_jsonl(path)
    assert back == nbest and back.references == {"u1": ("x",)}


def test_paused_gc_restores_the_state_and_freezes_only_when_asked() -> None:
    assert gc.isenabled()
    before = gc.get_freeze_count()
    with paused_gc():
        assert not gc.isenabled()
    assert gc.isenabled() and gc.get_freeze_count() == before
    gc.disable()
    try:
        with paused_gc():
            pass
        assert not gc.isenabled()  # a caller who had it off keeps it off
    finally:
        gc.enable()
    freeze_after_bulk()
    try:
        junk = [[i] for i in range(100)]
        with paused_gc():
            pass
        assert gc.get_freeze_count() >= before + len(junk)
    finally:
        freeze_after_bulk(False)
        gc.unfreeze()


def test_kenlm_oov_flags_are_the_vocabulary_lookups(tmp_path: Path) -> None:
    from rescorer.lms.kenlm import KenLM
    from rescorer.ngram import NgramOptions, build_ngram

    text = tmp_path / "t.txt"
    text.write_text("the cat sat\nthe dog sat on the mat\na cat\n" * 3, encoding="utf-8")
    arpa = tmp_path / "m.arpa"
    build_ngram([text], arpa, NgramOptions(order=2, binary=None, discount_fallback=True))
    lm = KenLM(arpa)
    sentences = [("the", "cow", "sat"), (), ("zebra",), ("cat", "the", "zebra", "mat")]
    flags = lm.oov_flags(sentences)
    assert [f.tolist() for f in flags] == [
        [w not in lm._model for w in s] for s in sentences
    ]
    assert [f.tolist() for f in lm.oov_flags(sentences[::-1])] == [
        f.tolist() for f in flags[::-1]
    ]
