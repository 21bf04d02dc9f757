"""Kaldi N-best folders: text + *_cost files, costs negated into natural-log scores."""

from __future__ import annotations

from pathlib import Path

import pytest

from rescorer.core.errors import InputError
from rescorer.formats.kaldi import read_kaldi, write_kaldi
from rescorer.nbest import Hypothesis, NBest, NBestList
from tests.paths import NBEST_FIXTURES

FIXTURES = NBEST_FIXTURES


def make(folder: Path, **files: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, content in files.items():
        (folder / name).write_text(content)
    return folder


def test_reads_fixture() -> None:
    nb = read_kaldi(FIXTURES / "kaldi_small")
    assert list(nb) == ["utt1", "utt2"]
    h = nb["utt1"].hyps
    assert [x.words for x in h] == [("THE", "CAT", "SAT"), ("THE", "CAT", "SAD"), ()]
    assert dict(h[0].scores) == {"am": -120.5, "lm": -10.5}
    assert dict(h[2].scores) == {"am": -130.0, "lm": -0.0}
    assert dict(nb["utt2"][1].scores) == {"am": -49.5, "lm": -8.75}


def test_other_cost_files_and_dashes_in_ids(tmp_path: Path) -> None:
    make(
        tmp_path,
        text="spk-a-1-2 B\nspk-a-1-1 A\n",
        ac_cost="spk-a-1-1 1\nspk-a-1-2 2\n",
        rnnlm_cost="spk-a-1-2 4.5\nspk-a-1-1 3.5\n",
    )
    nb = read_kaldi(tmp_path)
    assert list(nb) == ["spk-a-1"]
    assert [h.words for h in nb["spk-a-1"]] == [("A",), ("B",)]  # by rank, not by line
    assert dict(nb["spk-a-1"][0].scores) == {"am": -1.0, "rnnlm": -3.5}


def test_text_only(tmp_path: Path) -> None:
    make(tmp_path, text="u-1 X\n")
    assert dict(read_kaldi(tmp_path)["u"][0].scores) == {}


@pytest.mark.parametrize(
    ("files", "bad", "line", "needle"),
    [
        ({"text": "u-1 X\nu-1 Y\n"}, "text", 2, "duplicate hypothesis id 'u-1'"),
        ({"text": "u-1 X\nu-01 Y\n"}, "text", 2, "rank 1 twice"),
        ({"text": "u X\n"}, "text", 1, "<uttid>-<N>"),
        ({"text": "u-0 X\n"}, "text", 1, "1-based"),
        ({"text": "u-1 X\n", "ac_cost": "u-1\n"}, "ac_cost", 1, "got 0 values"),
        ({"text": "u-1 X\n", "ac_cost": "u-1 1 2\n"}, "ac_cost", 1, "got 2 values"),
        ({"text": "u-1 X\n", "lm_cost": "u-1 nan\n"}, "lm_cost", 1, "non-finite"),
        ({"text": "u-1 X\n", "lm_cost": "u-1 1e999\n"}, "lm_cost", 1, "non-finite"),
    ],
)
def test_malformed(tmp_path: Path, files: dict[str, str], bad: str, line: int, needle: str) -> None:
    make(tmp_path, **files)
    with pytest.raises(InputError) as info:
        read_kaldi(tmp_path)
    assert (info.value.path, info.value.line) == (str(tmp_path / bad), line)
    assert needle in str(info.value)


def test_id_mismatch(tmp_path: Path) -> None:
    make(tmp_path, text="u-1 X\nu-2 Y\n", lm_cost="u-1 1\nv-1 2\n")
    with pytest.raises(InputError, match=r"missing id\(s\): u-2; 1 extra id\(s\): v-1") as info:
        read_kaldi(tmp_path)
    assert info.value.path == str(tmp_path / "lm_cost")


def test_gap_in_ranks(tmp_path: Path) -> None:
    make(tmp_path, text="u-1 X\nu-3 Y\n")
    with pytest.raises(InputError, match="missing u-2"):
        read_kaldi(tmp_path)


def test_two_files_for_one_score(tmp_path: Path) -> None:
    make(tmp_path, text="u-1 X\n", ac_cost="u-1 1\n", am_cost="u-1 1\n")
    with pytest.raises(InputError, match="both give score 'am'"):
        read_kaldi(tmp_path)


def test_not_a_folder(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="Kaldi N-best folder"):
        read_kaldi(tmp_path / "missing")
    with pytest.raises(InputError, match="no text file"):
        read_kaldi(tmp_path)


def test_round_trip(tmp_path: Path) -> None:
    nb = NBest(
        [
            NBestList(
                "u-7",
                (
                    Hypothesis(("A",), {"am": -1.25, "lm": 0.1 + 0.2, "x": 0.0}),
                    Hypothesis((), {"am": -2.0, "lm": -1e-310, "x": -0.0}),
                ),
            ),
            NBestList("v", (Hypothesis(("B", "C"), {"am": 3.0, "lm": -4.0, "x": 5.0}),)),
        ]
    )
    (tmp_path / "stale_cost").write_text("u-7-1 1\n")
    write_kaldi(nb, tmp_path)
    assert (tmp_path / "text").read_text() == "u-7-1 A\nu-7-2\nv-1 B C\n"
    assert (tmp_path / "ac_cost").read_text().splitlines()[0] == "u-7-1 1.25"
    assert not (tmp_path / "stale_cost").exists()
    assert dict(read_kaldi(tmp_path)) == dict(nb)


def test_writer_drops_partial_scores_and_refuses_ac(tmp_path: Path, caplog) -> None:
    nb = NBest(
        [
            NBestList(
                "u", (Hypothesis(("A",), {"am": -1.0, "y": 1.0}), Hypothesis(("B",), {"am": -2.0}))
            )
        ]
    )
    write_kaldi(nb, tmp_path)
    assert "not writing scores missing on some hypotheses: y" in caplog.text
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ac_cost", "text"]
    with pytest.raises(ValueError, match="'ac'"):
        write_kaldi(NBest([NBestList("u", (Hypothesis(("A",), {"ac": 1.0}),))]), tmp_path)
    with pytest.raises(ValueError, match="no hypotheses"):
        write_kaldi(NBest([NBestList("u", ())]), tmp_path)
