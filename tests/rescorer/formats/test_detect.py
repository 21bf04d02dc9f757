"""Format registry, detection, read_nbest/write_nbest and writer->reader round trips."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from rescorer.core.constants import NBEST_FORMATS
from rescorer.core.errors import InputError
from rescorer.formats import READERS, WRITERS, detect_format, read_nbest, write_nbest
from rescorer.nbest import Hypothesis, NBest, NBestList
from tests.paths import NBEST_FIXTURES

FIXTURES = NBEST_FIXTURES


def test_registry() -> None:
    assert set(READERS) == {
        "espnet",
        "srilm1",
        "srilm2",
        "srilm3",
        "kaldi",
        "json",
        "jsonl",
        "hyporadise",
    }
    assert set(WRITERS) == set(READERS) - {"srilm2"}
    assert type(READERS) is dict and type(WRITERS) is dict
    assert tuple(READERS) == NBEST_FORMATS  # the names option choices use without the readers


def test_the_package_imports_its_registry_on_first_use() -> None:
    # A fresh interpreter: importing one format's module (as rescorer.refs does) leaves the
    # registry and the other formats unimported; naming READERS imports them.
    code = (
        "import sys, rescorer.formats._common as c, rescorer.formats as f\n"
        "assert 'rescorer.formats.registry' not in sys.modules\n"
        "assert 'rescorer.formats.espnet' not in sys.modules\n"
        "assert f.READERS['espnet'].__module__ == 'rescorer.formats.espnet'\n"
        "from rescorer.formats import read_nbest\n"
        "assert read_nbest.__module__ == 'rescorer.formats.registry'\n"
        "try:\n    f.NOT_THERE\nexcept AttributeError as e:\n    print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "module 'rescorer.formats' has no attribute 'NOT_THERE'"


@pytest.mark.parametrize(
    ("path", "fmt"),
    [
        ("espnet_small", "espnet"),
        ("espnet_small/raw_hypotheses", "espnet"),
        ("kaldi_small", "kaldi"),
        ("srilm1_dir", "srilm1"),
        ("srilm1_dir/utt.2.score", "srilm1"),
        ("srilm2", "srilm2"),
        ("srilm2/utt9.nbest", "srilm2"),
        ("srilm3_dir", "srilm3"),
        ("srilm3_dir/nbest.list", "srilm3"),
        ("srilm3_dir/s3a.nbest", "srilm3"),
        ("small.json", "json"),
        ("small.jsonl", "jsonl"),
    ],
)
def test_detects_fixtures(path: str, fmt: str) -> None:
    assert detect_format(FIXTURES / path) == fmt
    nb = read_nbest(FIXTURES / path)
    assert len(nb) > 0
    assert dict(read_nbest(FIXTURES / path, fmt)) == dict(nb)


def test_detects_json_by_content(tmp_path: Path) -> None:
    (tmp_path / "a").write_text('{"utt": "x", "hyps": []}\n')
    (tmp_path / "b").write_text('{\n "x": {}\n}\n')
    (tmp_path / "c").write_text('{"x": {"hyp1": {"text": "A"}}}\n')
    (tmp_path / "d").write_text('\n  [{"input": ["A"]}]\n')
    (tmp_path / "e.json").write_text('\n[\n {"input": ["A"]}]\n')
    (tmp_path / "f.json").write_text("")  # left to the json reader to refuse
    assert [detect_format(tmp_path / n) for n in ("a", "b", "c", "d", "e.json", "f.json")] == [
        "jsonl",
        "json",
        "json",
        "hyporadise",
        "hyporadise",
        "json",
    ]


def test_cannot_tell(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("\n\nhello world\n")
    with pytest.raises(InputError, match="'hello world' is not JSON") as info:
        detect_format(tmp_path / "f")
    assert (info.value.path, info.value.line) == (str(tmp_path / "f"), 3)
    (tmp_path / "e").write_text("")
    with pytest.raises(InputError, match="empty file"):
        detect_format(tmp_path / "e")
    with pytest.raises(InputError, match="no such file"):
        detect_format(tmp_path / "missing")
    d = tmp_path / "d"
    d.mkdir()
    (d / "x").write_text("just words\n")
    with pytest.raises(InputError, match="first non-empty file x starts 'just words'"):
        detect_format(d)
    (tmp_path / "list").write_text("d/x\n")
    with pytest.raises(InputError, match="file list"):
        detect_format(tmp_path / "list")


def test_one_kbest_folder_is_refused_with_advice() -> None:
    with pytest.raises(InputError, match="give the set folder"):
        detect_format(FIXTURES / "espnet_small" / "raw_hypotheses" / "1best_recog")


def test_unknown_format_names() -> None:
    with pytest.raises(InputError, match="unknown N-best format 'xml'"):
        read_nbest(FIXTURES / "small.json", "xml")
    with pytest.raises(ValueError, match="no writer for N-best format 'srilm2'"):
        write_nbest(NBest([]), FIXTURES / "never", "srilm2")


def rich() -> NBest:
    return NBest(
        [
            NBestList(
                "spk-1",
                (
                    Hypothesis(("A", "B"), {"acoustic": -10.25, "lm": -3.5, "score": -13.75}),
                    Hypothesis((), {"acoustic": -11.0, "lm": -2.5, "score": -13.5}),
                ),
            ),
            NBestList("u.2", (Hypothesis(("É",), {"acoustic": -1.0, "lm": 0.0, "score": -1.0}),)),
        ]
    )


@pytest.mark.parametrize("fmt", sorted(WRITERS))
def test_round_trip_every_writer(tmp_path: Path, fmt: str) -> None:
    nb = rich()
    target = tmp_path / ("out." + fmt if fmt.startswith("json") else "out")
    write_nbest(nb, target, fmt)
    assert detect_format(target) == fmt
    back = read_nbest(target)
    assert list(back) == list(nb)
    for utt in nb:
        for h, g in zip(nb[utt], back[utt], strict=True):
            assert g.words == h.words
            for name, value in g.scores.items():
                if name == "nwords":
                    assert value == len(h.words)
                elif fmt == "srilm1":  # bytelog integers: within half a bytelog
                    assert abs(value - h.scores[name]) <= 0.0512
                else:
                    assert value == pytest.approx(h.scores[name], rel=1e-15)
            if fmt in ("espnet", "kaldi", "json", "jsonl", "hyporadise"):
                assert g == h  # exact
