"""ESPnet N-best folders: reader, writer, errors, and the real LibriSpeech dev_clean set."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from rescorer.core.errors import InputError
from rescorer.formats import read_nbest
from rescorer.formats.espnet import read_espnet, write_espnet
from rescorer.nbest import Hypothesis, NBest, NBestList
from tests.paths import NBEST_FIXTURES, REPO

FIXTURES = NBEST_FIXTURES


def data_dir() -> Path:
    return Path(os.environ.get("RESCORER_DATA", REPO.parent / "shared" / "data"))


def make_set(root: Path, ranks: dict[int, dict[str, str]]) -> Path:
    """Write ``root/raw_hypotheses/<k>best_recog/<file>`` from ``{k: {file: content}}``."""
    for k, files in ranks.items():
        folder = root / "raw_hypotheses" / f"{k}best_recog"
        folder.mkdir(parents=True, exist_ok=True)
        for name, content in files.items():
            (folder / name).write_text(content, encoding="utf-8")
    return root


def test_reads_fixture_set() -> None:
    nb = read_espnet(FIXTURES / "espnet_small")
    assert list(nb) == ["uttA", "uttB"]  # order of 1best_recog/text
    a, b = nb["uttA"], nb["uttB"]
    assert [h.words for h in a] == [("HELLO", "WORLD"), (), ("HELLO", "WORD")]
    assert [h.words for h in b] == [("GOOD", "MORNING"), ("GOOD", "MOURNING")]
    assert dict(a[0].scores) == {"score": -1.5, "decoder": -0.5, "ctc": -1.0, "lm": -7.25}
    assert b[0].scores["ctc"] == -4.7440e-05
    assert b[0].scores["lm"] == -120.0
    # plain JSON numbers are accepted next to tensor(...) strings
    assert dict(b[1].scores) == {"score": -3.5, "decoder": -1.25, "ctc": -2.0, "lm": -9.5}
    assert a[0].tokens is None
    assert nb.references is None


def test_accepts_the_raw_hypotheses_folder_too() -> None:
    whole = read_espnet(FIXTURES / "espnet_small")
    inner = read_espnet(FIXTURES / "espnet_small" / "raw_hypotheses")
    assert dict(whole) == dict(inner)


def test_ranks_sort_numerically(tmp_path: Path) -> None:
    ranks = {k: {"text": f"u W{k}\n", "score": f"u tensor(-{k}.5)\n"} for k in range(1, 12)}
    nb = read_espnet(make_set(tmp_path, ranks))
    assert [h.words[0] for h in nb["u"]] == [f"W{k}" for k in range(1, 12)]
    assert nb["u"][9].scores["score"] == -10.5


def test_tokens_and_plain_number_score(tmp_path: Path) -> None:
    make_set(
        tmp_path,
        {
            1: {
                "text": "a HI THERE\nb\n",
                "score": "a -1\nb 2.5e-3\n",
                "token": "a ▁HI ▁THERE\nb\n",
            },
        },
    )
    nb = read_espnet(tmp_path)
    assert nb["a"][0].tokens == ("▁HI", "▁THERE")
    assert nb["b"][0].tokens == ()
    assert nb["b"][0].words == ()
    assert nb["b"][0].scores["score"] == 0.0025


def test_tensor_with_device_argument(tmp_path: Path) -> None:
    make_set(tmp_path, {1: {"text": "a X\n", "score": "a tensor(-3.25, device='cuda:0')\n"}})
    assert read_espnet(tmp_path)["a"][0].scores["score"] == -3.25


@pytest.mark.parametrize(
    ("files", "bad_file", "line", "needle"),
    [
        ({"text": "a X\na Y\n"}, "text", 2, "duplicate utterance id 'a'"),
        ({"text": "a X\n", "score": "a tensor(nan)\n"}, "score", 1, "non-finite"),
        ({"text": "a X\nb Y\n", "score": "a -1\nb\n"}, "score", 2, "missing score"),
        ({"text": "a X\n", "score": "a tensor(abc)\n"}, "score", 1, "not a number"),
        ({"text": "a X\n", "scores": 'a {"lm": }\n'}, "scores", 1, "not valid JSON"),
        ({"text": "a X\n", "scores": "a [1, 2]\n"}, "scores", 1, "JSON object"),
        ({"text": "a X\n", "scores": 'a {"lm": true}\n'}, "scores", 1, "number or"),
        ({"text": "a X\n", "scores": 'a {"lm": "inf"}\n'}, "scores", 1, "non-finite"),
        ({"text": "a X\n", "score": "a -1\n", "scores": 'a {"score": -2}\n'}, "scores", 1, "both"),
    ],
)
def test_malformed_lines_name_file_and_line(
    tmp_path: Path, files: dict[str, str], bad_file: str, line: int, needle: str
) -> None:
    make_set(tmp_path, {1: files})
    with pytest.raises(InputError) as info:
        read_espnet(tmp_path)
    err = info.value
    assert err.path == str(tmp_path / "raw_hypotheses" / "1best_recog" / bad_file)
    assert err.line == line
    assert needle in str(err)
    assert str(err).startswith(f"{err.path}:{line}: ")


def test_id_mismatch_names_missing_and_extra(tmp_path: Path) -> None:
    make_set(tmp_path, {1: {"text": "a X\nb Y\n", "score": "a -1\nc -2\n"}})
    with pytest.raises(InputError) as info:
        read_espnet(tmp_path)
    msg = str(info.value)
    assert "1best_recog/score" in msg
    assert "missing id(s): b" in msg and "extra id(s): c" in msg


def test_token_ids_must_match(tmp_path: Path) -> None:
    make_set(tmp_path, {1: {"text": "a X\nb Y\n", "token": "a x\n"}})
    with pytest.raises(InputError, match=r"token.*missing id\(s\): b"):
        read_espnet(tmp_path)


def test_utterance_missing_from_higher_rank_is_fine(tmp_path: Path) -> None:
    make_set(tmp_path, {1: {"text": "a X\nb Y\n"}, 2: {"text": "b Z\n"}})
    nb = read_espnet(tmp_path)
    assert [len(nb[u]) for u in nb] == [1, 2]


def test_utterance_skipping_a_rank_is_an_error(tmp_path: Path) -> None:
    make_set(tmp_path, {1: {"text": "a X\nb Y\n"}, 2: {"text": "b Z\n"}, 3: {"text": "a W\n"}})
    with pytest.raises(InputError, match="has hypothesis 3 but is not in 2best_recog") as info:
        read_espnet(tmp_path)
    assert info.value.path.endswith("3best_recog/text")


def test_utterance_not_in_1best_is_an_error(tmp_path: Path) -> None:
    make_set(tmp_path, {1: {"text": "a X\n"}, 2: {"text": "b Z\n"}})
    with pytest.raises(InputError, match="'b'.*not in 1best_recog"):
        read_espnet(tmp_path)


def test_missing_rank_folder(tmp_path: Path) -> None:
    make_set(tmp_path, {1: {"text": "a X\n"}, 3: {"text": "a Z\n"}})
    with pytest.raises(InputError, match="2best_recog is missing"):
        read_espnet(tmp_path)


def test_rank_zero_is_named_as_such(tmp_path: Path) -> None:
    """Ranks count from 1: a ``0best_recog`` is named, not reported as a missing 1best_recog."""
    for ranks in ({0: {"text": "a X\n"}, 1: {"text": "a Y\n"}}, {0: {"text": "a X\n"}}):
        make_set(tmp_path, ranks)
        with pytest.raises(InputError, match="0best_recog: ranks count from 1") as info:
            read_espnet(tmp_path)
        assert "1best_recog is missing" not in str(info.value)


def test_no_rank_folders(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no <k>best_recog") as info:
        read_espnet(tmp_path)
    assert str(tmp_path) in str(info.value)
    with pytest.raises(InputError, match="set folder"):
        read_espnet(tmp_path / "nope")


def test_missing_text_file(tmp_path: Path) -> None:
    make_set(tmp_path, {1: {"score": "a -1\n"}})
    with pytest.raises(InputError, match="no text file"):
        read_espnet(tmp_path)


def test_non_utf8_text(tmp_path: Path) -> None:
    make_set(tmp_path, {1: {"text": "a X\n"}})
    bad = tmp_path / "raw_hypotheses" / "1best_recog" / "text"
    bad.write_bytes(b"a X\nb \xff\xfe\n")
    with pytest.raises(InputError, match="not UTF-8") as info:
        read_espnet(tmp_path)
    assert info.value.path == str(bad)


def test_non_utf8_text_line_number(tmp_path: Path) -> None:
    make_set(tmp_path, {1: {"text": "a X\n"}})
    (tmp_path / "raw_hypotheses" / "1best_recog" / "text").write_bytes(b"a X\nb \xff\xfe\n")
    with pytest.raises(InputError) as info:
        read_espnet(tmp_path)
    assert info.value.line == 2


# --- writer -----------------------------------------------------------------------------------


def sample() -> NBest:
    return NBest(
        [
            NBestList(
                "u1",
                (
                    Hypothesis(("A", "B"), {"score": -1.1, "decoder": -0.1, "lm": -2.0}),
                    Hypothesis((), {"score": -5.0, "decoder": 1e-300, "lm": -2.5}),
                ),
            ),
            NBestList("u2", (Hypothesis(("C",), {"score": -0.3333333333333333, "lm": -1.0}),)),
        ]
    )


def test_round_trip_is_exact(tmp_path: Path) -> None:
    nb = sample()
    write_espnet(nb, tmp_path / "out")
    back = read_espnet(tmp_path / "out")
    assert dict(back) == dict(nb)
    text = (tmp_path / "out" / "raw_hypotheses" / "2best_recog" / "text").read_text()
    assert text == "u1\n"
    score = (tmp_path / "out" / "raw_hypotheses" / "1best_recog" / "score").read_text()
    assert score.splitlines()[0] == "u1 tensor(-1.1)"


def test_round_trip_tokens_and_partial_score(tmp_path: Path) -> None:
    nb = NBest(
        [
            NBestList("a", (Hypothesis(("X",), {"score": -1.0}, ("x",)),)),
            NBestList("b", (Hypothesis(("Y",), {"lm": -2.0}, ()),)),
        ]
    )
    write_espnet(nb, tmp_path)
    assert dict(read_espnet(tmp_path)) == dict(nb)


def test_writer_removes_stale_files(tmp_path: Path) -> None:
    write_espnet(sample(), tmp_path)
    tokens = NBest([NBestList("u9", (Hypothesis(("Z",), {"score": -1.0}, ("z",)),))])
    write_espnet(tokens, tmp_path)
    plain = NBest([NBestList("u3", (Hypothesis(("Q",), {"score": -1.0}),))])
    write_espnet(plain, tmp_path)
    assert dict(read_espnet(tmp_path)) == dict(plain)
    assert not (tmp_path / "raw_hypotheses" / "2best_recog").exists()


def test_writer_refuses_what_would_not_read_back(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="whitespace"):
        write_espnet(NBest([NBestList("a b", (Hypothesis(("X",)),))]), tmp_path)
    with pytest.raises(ValueError, match="no hypotheses"):
        write_espnet(NBest([NBestList("a", ())]), tmp_path)
    mixed = NBest(
        [
            NBestList("a", (Hypothesis(("X",), {}, ("x",)),)),
            NBestList("b", (Hypothesis(("Y",), {}, None),)),
        ]
    )
    with pytest.raises(ValueError, match="tokens"):
        write_espnet(mixed, tmp_path)


# --- the real data ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def dev_clean() -> tuple[NBest, float]:
    folder = data_dir() / "nbest" / "librispeech-espnet" / "dev_clean"
    if not folder.is_dir():
        pytest.skip(f"real ESPnet data not found at {folder} (set RESCORER_DATA)")
    start = time.perf_counter()
    nb = read_nbest(folder)
    return nb, time.perf_counter() - start


def test_real_dev_clean_shape(dev_clean: tuple[NBest, float]) -> None:
    nb, seconds = dev_clean
    assert len(nb) == 2703
    assert {len(v) for v in nb.values()} == {30}
    assert seconds < 15, f"reading dev_clean took {seconds:.1f} s"
    empty = [(u, i) for u, v in nb.items() for i, h in enumerate(v) if not h.words]
    assert empty == [("3081-166546-0008", 1), ("3081-166546-0073", 1)]  # both in 2best_recog
    assert nb.score_names() == ("score", "decoder", "ctc", "lm")


def test_real_dev_clean_first_utterance(dev_clean: tuple[NBest, float]) -> None:
    nb, _ = dev_clean
    first_id = next(iter(nb))
    assert first_id == "1272-128104-0000"
    hyp = nb[first_id][0]
    assert dict(hyp.scores) == {
        "score": -46.6314,
        "decoder": -0.3654,
        "ctc": -0.0041,
        "lm": -77.3508,
    }
    assert hyp.text == (
        "MISTER QUILTER IS THE APOSTLE OF THE MIDDLE CLASSES AND WE ARE GLAD TO WELCOME HIS GOSPEL"
    )


@pytest.mark.slow
def test_real_dev_clean_round_trip(dev_clean: tuple[NBest, float], tmp_path: Path) -> None:
    nb, _ = dev_clean
    write_espnet(nb, tmp_path / "copy")
    assert dict(read_espnet(tmp_path / "copy")) == dict(nb)
