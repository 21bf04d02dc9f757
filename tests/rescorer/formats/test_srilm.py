"""SRILM N-best formats: bytelog/log10 conversions, file/folder/list inputs, writers."""

from __future__ import annotations

import gzip
import math
from pathlib import Path

import pytest

from rescorer.core.constants import BYTELOG_TO_LN, LN10
from rescorer.core.errors import InputError
from rescorer.formats.srilm import (
    read_srilm1,
    read_srilm2,
    read_srilm3,
    utt_id_from_path,
    write_srilm1,
    write_srilm3,
)
from rescorer.nbest import Hypothesis, NBest, NBestList
from tests.paths import NBEST_FIXTURES

FIXTURES = NBEST_FIXTURES

# Hand-computed: ln(1.0001) = 9.99950003333e-05, so one bytelog = 1024 * that = 0.102394880341 nat.
ONE_BYTELOG_NAT = 0.102394880341
# ln(10) = 2.302585092994


def test_bytelog_constant_matches_the_man_page() -> None:
    # bytelog = round(log_1.0001(p) / 1024)  =>  ln p = bytelog * 1024 * ln(1.0001)
    assert pytest.approx(ONE_BYTELOG_NAT, abs=1e-12) == BYTELOG_TO_LN
    # SRILM's code (Prob.h BytelogToLogP) uses 1024 / 10000.5, which agrees to ~1e-9 relative
    assert pytest.approx(1024 / 10000.5, rel=1e-9) == BYTELOG_TO_LN
    # a probability of 1.0001 ** (-1024 * 1000) is -1000 bytelog
    assert pytest.approx(-1024000 * math.log(1.0001)) == -1000 * BYTELOG_TO_LN


def test_srilm1_folder() -> None:
    nb = read_srilm1(FIXTURES / "srilm1_dir")
    assert list(nb) == ["sw_4019_A", "utt.2"]  # name order; .nbest and .score stripped
    hyps = nb["sw_4019_A"].hyps
    assert [h.words for h in hyps] == [("THE", "CAT", "SAT"), ("THE", "CAT", "SAD"), ()]
    assert hyps[0].scores["score"] == pytest.approx(-102.394880341, abs=1e-8)
    assert hyps[1].scores["score"] == pytest.approx(-1024 * ONE_BYTELOG_NAT, abs=1e-8)
    assert hyps[2].scores["score"] == 0.0
    assert nb["utt.2"][0].scores["score"] == pytest.approx(-209.704714939, abs=1e-8)


def test_srilm1_single_file() -> None:
    nb = read_srilm1(FIXTURES / "srilm1_dir" / "utt.2.score")
    assert list(nb) == ["utt.2"]


def test_srilm2_sums_word_scores_and_skips_subword_units() -> None:
    nb = read_srilm2(FIXTURES / "srilm2" / "utt9.nbest")
    first, second = nb["utt9"].hyps
    # <s>, </s> and -pau- dropped; phones hh/ax inside HELLO skipped
    assert first.words == ("HELLO", "WORLD")
    assert second.words == ("HELLO",)
    assert first.scores["score"] == pytest.approx(-1500 * ONE_BYTELOG_NAT)
    assert first.scores["acoustic"] == pytest.approx(-1000 * ONE_BYTELOG_NAT)  # -100-600-300+0
    assert first.scores["lm"] == pytest.approx(-500 * ONE_BYTELOG_NAT)  # 0-300-200+0
    assert second.scores["acoustic"] == pytest.approx(-1200 * ONE_BYTELOG_NAT)
    assert second.scores["lm"] == pytest.approx(-51.1974401705)


def test_srilm3_file_list_order_and_log10() -> None:
    nb = read_srilm3(FIXTURES / "srilm3_dir")  # read through its nbest.list
    assert list(nb) == ["s3b", "s3a"]
    a = nb["s3a"].hyps
    assert a[0].words == ("THE", "CAT")
    assert a[0].scores["acoustic"] == pytest.approx(-28.7823136624, abs=1e-9)  # -12.5 * ln 10
    assert a[0].scores["lm"] == pytest.approx(-7.4834015522, abs=1e-9)  # -3.25 * ln 10
    assert a[0].scores["nwords"] == 2.0
    assert a[1].words == ("THE", "CAT", "SAT")
    assert a[2].words == () and a[2].scores["acoustic"] == 0.0
    same = read_srilm3(FIXTURES / "srilm3_dir" / "nbest.list")
    assert dict(same) == dict(nb)


def test_folder_without_list_is_sorted_by_name(tmp_path: Path) -> None:
    for name in ["b.nbest", "a.nbest", ".hidden"]:
        (tmp_path / name).write_text("-1 -2 1 X\n")
    assert list(read_srilm3(tmp_path)) == ["a", "b"]


def test_file_list_relative_to_its_folder_and_gz(tmp_path: Path) -> None:
    sub = tmp_path / "lists"
    sub.mkdir()
    data = tmp_path / "data"
    data.mkdir()
    with gzip.open(data / "utt7.nbest.gz", "wt") as f:
        f.write("NBestList1.0\n(-10) A B\n")
    (data / "utt8").write_text("NBestList1.0\n(-20) C\n")
    (sub / "my.list").write_text(f"../data/utt7.nbest.gz\n{data / 'utt8'}\n")
    nb = read_srilm1(sub / "my.list")
    assert list(nb) == ["utt7", "utt8"]
    assert nb["utt7"][0].scores["score"] == pytest.approx(-10 * BYTELOG_TO_LN)


def test_corrupt_gz_names_the_file(tmp_path: Path) -> None:
    (tmp_path / "u.nbest.gz").write_bytes(b"NBestList1.0\n")
    with pytest.raises(InputError, match="corrupt gzip|cannot read file") as info:
        read_srilm1(tmp_path)
    assert info.value.path == str(tmp_path / "u.nbest.gz")


def test_file_list_missing_entry(tmp_path: Path) -> None:
    (tmp_path / "a").write_text("NBestList1.0\n(-1) X\n")
    (tmp_path / "l.txt").write_text("a\nb\n")
    with pytest.raises(InputError, match="'b' not found") as info:
        read_srilm1(tmp_path / "l.txt")
    assert (info.value.path, info.value.line) == (str(tmp_path / "l.txt"), 2)


def test_duplicate_utterance_ids(tmp_path: Path) -> None:
    (tmp_path / "a.nbest").write_text("NBestList1.0\n(-1) X\n")
    (tmp_path / "a.score").write_text("NBestList1.0\n(-1) X\n")
    with pytest.raises(InputError, match="utterance id 'a'"):
        read_srilm1(tmp_path)


@pytest.mark.parametrize(
    ("reader", "content", "line", "needle"),
    [
        (read_srilm1, "(-1) X\n", 1, "header 'NBestList1.0'"),
        (read_srilm1, "NBestList2.0\n(-1) X\n", 1, "header"),
        (read_srilm1, "NBestList1.0\n(-1) X\n-5 Y\n", 3, "'(score)'"),
        (read_srilm1, "NBestList1.0\n\n(x) Y\n", 3, "not a number"),
        (read_srilm1, "NBestList1.0\n(nan) Y\n", 2, "non-finite"),
        (read_srilm1, "", None, "empty file"),
        (read_srilm2, "NBestList2.0\n(-1) X ( st: 0 et: 1 g: 0 a: -1 ) Y\n", 2, "groups of 11"),
        (read_srilm2, "NBestList2.0\n(-1) X ( st: 0 et: 1 g: 0 b: -1 )\n", 2, "expected 'a:'"),
        (read_srilm2, "NBestList2.0\n(-1) X ( st: 0 et: 1 g: q a: -1 )\n", 2, "g: (LM"),
        (read_srilm3, "-1 -2 1 X\n-1 -2 Y\n", 2, "whole number"),
        (read_srilm3, "-1 -2\n", 1, "ascore lscore nwords"),
        (read_srilm3, "-1 x 1 A\n", 1, "LM log10"),
        (read_srilm3, "NBestList1.0\n(-1) X\n", 1, "not the 3-column"),
        (read_srilm3, "-1 -2 -1 X\n", 1, "whole number"),
    ],
)
def test_malformed_lines(tmp_path: Path, reader, content: str, line, needle: str) -> None:
    path = tmp_path / "u1.nbest"
    path.write_text(content)
    with pytest.raises(InputError) as info:
        reader(path)
    assert info.value.path == str(path)
    assert info.value.line == line
    assert needle in str(info.value)


def test_id_stripping() -> None:
    assert utt_id_from_path(Path("d/sw_1.nbest.gz")) == "sw_1"
    assert utt_id_from_path(Path("utt.1.score")) == "utt.1"
    assert utt_id_from_path(Path("utt.1")) == "utt.1"
    assert utt_id_from_path(Path("x.txt.gz")) == "x"
    assert utt_id_from_path(Path("x.tar")) == "x.tar"


def test_empty_folder(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no N-best files"):
        read_srilm1(tmp_path)


# --- writers ------------------------------------------------------------------------------------


def test_srilm1_round_trip_quantises_to_bytelogs(tmp_path: Path) -> None:
    nb = NBest(
        [NBestList("u.1", (Hypothesis(("A", "B"), {"score": -10.0}), Hypothesis((), {"score": 0})))]
    )
    write_srilm1(nb, tmp_path / "out")
    assert (tmp_path / "out" / "u.1.nbest").read_text() == "NBestList1.0\n(-98) A B\n(0)\n"
    assert (tmp_path / "out" / "nbest.list").read_text() == "u.1.nbest\n"
    back = read_srilm1(tmp_path / "out")
    assert back["u.1"][0].words == ("A", "B")
    assert back["u.1"][0].scores["score"] == pytest.approx(-98 * BYTELOG_TO_LN)
    assert abs(back["u.1"][0].scores["score"] - -10.0) <= BYTELOG_TO_LN / 2


def test_srilm3_round_trip(tmp_path: Path) -> None:
    nb = NBest(
        [
            NBestList("z", (Hypothesis(("Q",), {"acoustic": -3.1, "lm": -2.2}),)),
            NBestList(
                "a",
                (
                    Hypothesis(("A", "B"), {"acoustic": -12.5 * LN10, "lm": -1.0, "nwords": 3}),
                    Hypothesis((), {"acoustic": 0.0, "lm": 0.0}),
                ),
            ),
        ]
    )
    write_srilm3(nb, tmp_path)
    line = (tmp_path / "a.nbest").read_text().splitlines()[0]
    assert line.startswith("-12.5 ") and line.endswith(" 3 A B")
    back = read_srilm3(tmp_path)
    assert list(back) == ["z", "a"]  # list order kept
    for utt in nb:
        for h, g in zip(nb[utt], back[utt], strict=True):
            assert g.words == h.words
            assert g.scores["acoustic"] == pytest.approx(
                h.scores["acoustic"], rel=1e-15, abs=1e-300
            )
            assert g.scores["lm"] == pytest.approx(h.scores["lm"], rel=1e-15, abs=1e-300)
    assert back["z"][0].scores["nwords"] == 1.0


def test_writers_refuse_bad_input(tmp_path: Path) -> None:
    no_score = NBest([NBestList("a", (Hypothesis(("X",), {"lm": -1.0}),))])
    with pytest.raises(ValueError, match="no score 'score'.*lm"):
        write_srilm1(no_score, tmp_path)
    with pytest.raises(ValueError, match="no score 'acoustic'"):
        write_srilm3(no_score, tmp_path)
    bad_id = NBest([NBestList("../x", (Hypothesis(("X",), {"score": -1.0}),))])
    with pytest.raises(ValueError, match="file name"):
        write_srilm1(bad_id, tmp_path)
    nan = NBest([NBestList("a", (Hypothesis(("X",), {"score": math.nan}),))])
    with pytest.raises(ValueError, match="non-finite"):
        write_srilm1(nan, tmp_path)


# -- score directories (--extra-scores NAME=DIR) ----------------------------------------------


def two_lists() -> NBest:
    """u1 with two hypotheses, u2 with three (scores: am)."""
    return NBest(
        [
            NBestList("u1", tuple(Hypothesis((w,), {"am": -1.0}) for w in ("a", "b"))),
            NBestList("u2", tuple(Hypothesis((w,), {"am": -2.0}) for w in ("c", "d", "e"))),
        ]
    )


def score_dir(tmp_path: Path, files: dict[str, str], name: str = "pron") -> Path:
    folder = tmp_path / name
    folder.mkdir()
    for file, text in files.items():
        if file.endswith(".gz"):
            with gzip.open(folder / file, "wt", encoding="utf-8") as f:
                f.write(text)
        else:
            (folder / file).write_text(text, encoding="utf-8")
    return folder


def test_score_dir_values_as_written_in_hypothesis_order(tmp_path: Path) -> None:
    from rescorer.formats.srilm import ScoreDir, add_score_dirs

    pron = score_dir(
        tmp_path,
        # named like N-best files (.score.gz, bare id); another utterance's file is ignored
        {"u1.score.gz": "-1.5\n\n2e-3\n", "u2": "0\n-7\n  3.25 \n", "u9.score": "1\n"},
    )
    dur = score_dir(tmp_path, {"u1.nbest": "10\n20\n", "u2.txt": "30\n40\n50\n"}, "dur")
    out = add_score_dirs(two_lists(), [ScoreDir("pron", pron), ScoreDir.parse(f"dur={dur}")])
    assert [h.scores["pron"] for h in out["u1"]] == [-1.5, 0.002]  # no log-base conversion
    assert [h.scores["pron"] for h in out["u2"]] == [0.0, -7.0, 3.25]
    assert [h.scores["dur"] for h in out["u2"]] == [30.0, 40.0, 50.0]
    assert out.score_names() == ("am", "pron", "dur")


@pytest.mark.parametrize(
    ("text", "line", "needle"),
    [
        ("1\n2\n3\n", 3, "expected 2 scores, one per hypothesis of 'u1', got more"),
        ("1\n\n", 1, "expected 2 scores, one per hypothesis of 'u1', got 1"),
        ("1\nnan\n", 2, "pron score: expected a finite number, got non-finite value 'nan'"),
        ("1\n-inf\n", 2, "expected a finite number"),
        ("1 2\n3\n", 1, "expected one number per line (the pron score of hypothesis 1), got 2"),
        ("1\nx\n", 2, "pron score: not a number: expected a number, got 'x'"),
    ],
)
def test_score_file_errors_name_file_and_line(
    tmp_path: Path, text: str, line: int, needle: str
) -> None:
    from rescorer.formats.srilm import ScoreDir, add_score_dirs

    pron = score_dir(tmp_path, {"u1.score": text, "u2.score": "1\n2\n3\n"})
    with pytest.raises(InputError) as err:
        add_score_dirs(two_lists(), [ScoreDir("pron", pron)])
    assert str(err.value).startswith(f"{pron / 'u1.score'}:{line}: "), str(err.value)
    assert needle in str(err.value)


def test_empty_score_file_names_the_file(tmp_path: Path) -> None:
    from rescorer.formats.srilm import ScoreDir, add_score_dirs

    pron = score_dir(tmp_path, {"u1": "", "u2": "1\n2\n3\n"})
    with pytest.raises(InputError, match=r"pron/u1: expected 2 scores, .* got 0$"):
        add_score_dirs(two_lists(), [ScoreDir("pron", pron)])


def test_score_dir_missing_files_duplicates_and_name_clashes(tmp_path: Path) -> None:
    from rescorer.formats.srilm import ScoreDir, add_score_dirs

    pron = score_dir(tmp_path, {"u1": "1\n2\n"})
    with pytest.raises(InputError, match=r"pron: no score file for 1 utterance\(s\) .*: u2 "):
        add_score_dirs(two_lists(), [ScoreDir("pron", pron)])
    dup = score_dir(tmp_path, {"u1": "1\n2\n", "u1.score.gz": "1\n2\n", "u2": "1\n2\n3\n"}, "d")
    with pytest.raises(InputError, match="two score files for utterance 'u1': u1 and u1.score.gz"):
        add_score_dirs(two_lists(), [ScoreDir("d", dup)])
    good = score_dir(tmp_path, {"u1": "1\n2\n", "u2": "1\n2\n3\n"}, "good")
    with pytest.raises(ValueError, match="already have a score named 'am'"):
        add_score_dirs(two_lists(), [ScoreDir("am", good)])
    with pytest.raises(ValueError, match="given twice: x"):
        add_score_dirs(two_lists(), [ScoreDir("x", good), ScoreDir("x", good)])
    with pytest.raises(ValueError, match="'length' is taken by the toolkit"):
        ScoreDir("length", good)
    with pytest.raises(ValueError, match="expected NAME=DIR, got 'pron'"):
        ScoreDir.parse("pron")
    with pytest.raises(InputError, match="expected a folder of score files"):
        add_score_dirs(two_lists(), [ScoreDir("x", tmp_path / "nope")])


@pytest.mark.parametrize("fmt", [None, "srilm1", "srilm2", "srilm3"])
def test_a_listed_file_that_is_not_nbest_is_named_not_shown(
    tmp_path: Path, fmt: str | None
) -> None:
    """issue 52: a file list naming a file outside the data (a system file, a secret) gets an
    error naming that file and the list line, never the start of the file's content."""
    from rescorer.formats import read_nbest

    secret = tmp_path / "secret.txt"
    secret.write_text("root:x:0:0:TOPSECRET:/root:/bin/bash\nmore secret\n")
    listing = tmp_path / "list.txt"
    listing.write_text(f"{secret}\n")
    with pytest.raises(InputError) as info:
        read_nbest(listing, fmt)
    message = str(info.value)
    assert "secret.txt" in message and "list.txt:1" in message, message
    assert "TOPSECRET" not in message and "root:x" not in message, message
