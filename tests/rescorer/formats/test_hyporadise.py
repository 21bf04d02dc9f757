"""HyPoradise / LLM-correction N-best files: a JSON array of {"input", "output", ...} records."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from rescorer.core.errors import InputError
from rescorer.formats import detect_format, read_nbest
from rescorer.formats.hyporadise import default_id, read_hyporadise, write_hyporadise
from rescorer.formats.json_formats import read_json
from rescorer.nbest import Hypothesis, NBest, NBestList

# Laid out as the HyPoradise files are (an instruction per record, one score list), with a
# record without hypotheses and one without a reference.
SAMPLE = """[
  {
    "instruction": "please find the best sentence from the following 2 sentences",
    "input": ["the cat sat", "the cat sad"],
    "output": "the cat sat",
    "score": [-0.25, -0.5]
  },
  {
    "instruction": "please find the best sentence from the following 0 sentences",
    "input": [],
    "output": "nothing heard",
    "score": []
  },
  {"instruction": "x", "input": ["hello  world"], "score": [-1], "output": null}
]
"""


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_reads_records_with_index_ids(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = write(tmp_path / "test_wsj.json", SAMPLE)
    assert detect_format(path) == "hyporadise"
    with caplog.at_level(logging.WARNING):
        nb = read_nbest(path)
    assert not caplog.records  # "instruction" is known metadata: no warning
    assert list(nb) == ["000000", "000001", "000002"]
    assert [h.words for h in nb["000000"]] == [("the", "cat", "sat"), ("the", "cat", "sad")]
    assert [dict(h.scores) for h in nb["000000"]] == [{"score": -0.25}, {"score": -0.5}]
    assert len(nb["000001"]) == 0
    assert nb["000002"][0].words == ("hello", "world")
    assert nb.references == {"000000": ("the", "cat", "sat"), "000001": ("nothing", "heard")}
    assert [default_id(k) for k in (0, 41, 999999, 1000000)] == [
        "000000",
        "000041",
        "999999",
        "1000000",
    ]


def test_ids_and_several_score_lists(tmp_path: Path) -> None:
    records = [
        {"id": "u-7", "input": ["a b", "a c"], "am_score": [-1.5, -2.0], "lm_score": [-3, -4]},
        {"id": 12, "input": ["d"], "output": "d", "am_score": [0.5], "lm_score": [-1]},
    ]
    path = write(tmp_path / "x.json", json.dumps(records))
    nb = read_hyporadise(path)
    assert list(nb) == ["u-7", "12"]
    assert dict(nb["u-7"][1].scores) == {"am_score": -2.0, "lm_score": -4.0}
    assert nb.references == {"12": ("d",)}


def test_unknown_fields_are_named_once(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    records = [{"input": ["a"], "ouput": "a", "audio": "x.wav"}, {"input": ["b"], "ouput": "b"}]
    path = write(tmp_path / "x.json", json.dumps(records))
    with caplog.at_level(logging.WARNING):
        nb = read_hyporadise(path)
    assert nb.references is None  # the misspelt "ouput" is not a reference...
    (record,) = caplog.records  # ...and the warning names it, once for the file
    assert "'audio', 'ouput'" in record.getMessage()
    assert str(path) in record.getMessage()


@pytest.mark.parametrize(
    ("text", "line", "fragment"),
    [
        ('{"u": {}}', 1, "expected a JSON array of records"),
        ("", 1, "found nothing"),
        ('[\n{"input": ["a"]},\n\n{"input": "a b"}\n]', 4, "record 1: 'input' is a string"),
        ('[\n{"input": ["a"]},\n{"output": "a"}]', 3, "record 1: no 'input'"),
        ('[\n {"input": ["a", "b"],\n  "score": [1]}\n]', 2, "'score' has 1 values for 2"),
        ('[{"input": ["a"], "score": ["x"]}]', 1, "'score': expected a number"),
        ('[{"input": ["a"], "score": [NaN]}]', 1, "non-finite"),
        ('[{"input": [1]}]', 1, "record 0: input: expected a string"),
        ('[{"input": ["a"], "output": ["a"]}]', 1, "record 0: output: expected a string"),
        ('[\n{"input": ["a"]},\n{"input": ["b"], "id": "u"}\n]', 3, "record 1 has 'id' but"),
        ('[\n{"input": ["a"], "id": "u"},\n{"input": ["b"]}\n]', 3, "record 1 has no 'id'"),
        (
            '[\n{"input": [], "id": "u"},\n{"input": [], "id": "u"}]',
            3,
            "(first in the record on line 2)",
        ),
        ('[{"input": [], "id": "a b"}]', 1, "bad utterance id 'a b'"),
        ('[{"input": [], "id": true}]', 1, "id: expected a string"),
        ('[\n{"input": ["a"]}\n{"input": ["b"]}]', 3, "expected ',' or ']' after a record"),
        ('[\n{"input": ["a"]},\n{"input": ["b",]}\n]', 3, "invalid JSON"),
        ('[{"input": ["a"], "input": ["b"]}]', 1, "duplicate JSON key 'input'"),
        ('[{"input": []}]\n\n[]', 3, "text after the closing ']'"),
        ('[{"input": []}', 1, "found the end of the file"),
        ("[1]", 1, "record 0: expected an object, got a number"),
    ],
)
def test_errors_name_the_line_of_the_record(
    tmp_path: Path, text: str, line: int, fragment: str
) -> None:
    path = write(tmp_path / "bad.json", text)
    with pytest.raises(InputError) as info:
        read_hyporadise(path)
    assert (info.value.path, info.value.line) == (str(path), line), str(info.value)
    assert fragment in info.value.message


def test_empty_array_and_bom(tmp_path: Path) -> None:
    assert len(read_hyporadise(write(tmp_path / "e.json", " [ ] \n"))) == 0
    bom = write(tmp_path / "b", '\ufeff[{"input": ["a"]}]')
    assert detect_format(bom) == "hyporadise"
    assert list(read_nbest(bom)) == ["000000"]


def test_json_reader_points_to_hyporadise(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="an array of records is the hyporadise format"):
        read_json(write(tmp_path / "x.json", "[]"))


def test_write_round_trip_one_record_per_line(tmp_path: Path) -> None:
    nb = NBest(
        [
            NBestList("u1", (Hypothesis(("A", "B"), {"am": -1.5, "lm": 0.1 + 0.2}),
                             Hypothesis((), {"lm": -7.0, "am": -1e-320}))),
            NBestList("u2", ()),
            NBestList("u3", (Hypothesis(("ÉTÉ",), {}, tokens=("▁É", "TÉ")),)),
        ],
        references={"u1": ("A", "B"), "u2": ()},
    )  # fmt: skip
    path = tmp_path / "out"
    write_hyporadise(nb, path)
    lines = path.read_text(encoding="utf-8").splitlines()
    assert lines[0] == "[" and lines[-1] == "]" and len(lines) == 5
    assert json.loads(lines[1].rstrip(",")) == {
        "id": "u1",
        "input": ["A B", ""],
        "output": "A B",
        "am": [-1.5, -1e-320],
        "lm": [0.1 + 0.2, -7.0],
    }
    back = read_nbest(path)  # detected by content
    assert list(back) == list(nb)
    assert [h.words for h in back["u1"]] == [h.words for h in nb["u1"]]
    assert [dict(h.scores) for h in back["u1"]] == [dict(h.scores) for h in nb["u1"]]
    assert back["u3"][0].tokens is None  # the layout has no tokens
    assert back.references == nb.references


def test_writer_refuses_what_it_cannot_hold(tmp_path: Path) -> None:
    ragged = NBest([NBestList("u", (Hypothesis(("a",), {"am": 1}), Hypothesis(("b",), {})))])
    with pytest.raises(ValueError, match="hypothesis 2 has scores"):
        write_hyporadise(ragged, tmp_path / "x.json")
    clash = NBest([NBestList("u", (Hypothesis(("a",), {"output": 1}),))])
    with pytest.raises(ValueError, match="clashes"):
        write_hyporadise(clash, tmp_path / "x.json")
    assert not (tmp_path / "x.json").exists()
    write_hyporadise(NBest([]), tmp_path / "empty.json")
    assert (tmp_path / "empty.json").read_text() == "[]\n"
