"""References (sclite trn, Kaldi text) and utt2spk."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rescorer.core.errors import InputError
from rescorer.refs import (
    detect_reference_format,
    read_kaldi_text,
    read_references,
    read_trn,
    read_utt2spk,
    split_espnet_id,
    write_kaldi_text,
    write_trn,
)
from tests.paths import REPO


def data_dir() -> Path:
    return Path(os.environ.get("RESCORER_DATA", REPO.parent / "shared" / "data"))


def write(tmp_path: Path, name: str, content: str) -> Path:
    path = tmp_path / name
    path.write_text(content)
    return path


def test_split_espnet_id() -> None:
    assert split_espnet_id("1272-128104-1272-128104-0000") == ("1272-128104", "1272-128104-0000")
    assert split_espnet_id("spk1-spk1-utt") == ("spk1", "spk1-utt")
    assert split_espnet_id("a-a-a-a") == ("a", "a-a-a")
    assert split_espnet_id("-x--x-y") == ("-x", "-x-y")
    assert split_espnet_id("utt1") is None
    assert split_espnet_id("a-b-c") is None
    assert split_espnet_id("a-a-") is None


def test_trn_styles(tmp_path: Path) -> None:
    espnet = write(tmp_path, "e.trn", "A B\t(s1-s1-u1)\n\t(s1-s1-u2)\nC (D)  (s2-x-s2-x-u3)\n")
    assert read_trn(espnet) == {"s1-u1": ("A", "B"), "s1-u2": (), "s2-x-u3": ("C", "(D)")}
    assert read_trn(espnet, "espnet") == read_trn(espnet)
    assert list(read_trn(espnet, "full")) == ["s1-s1-u1", "s1-s1-u2", "s2-x-s2-x-u3"]
    mixed = write(tmp_path, "m.trn", "A (s1-s1-u1)\nB (plain)\n")
    assert list(read_trn(mixed)) == ["s1-s1-u1", "plain"]  # auto keeps all full
    with pytest.raises(InputError, match="ESPnet style") as info:
        read_trn(mixed, "espnet")
    assert (info.value.path, info.value.line) == (str(mixed), 2)
    with pytest.raises(ValueError, match="id_style"):
        read_trn(mixed, "short")


@pytest.mark.parametrize(
    ("content", "line", "needle"),
    [
        ("A B (u1)\nC D\n", 2, "expected 'words (id)'"),
        ("A (u1)\nB (u1)\n", 2, "duplicate id 'u1' (first on line 1)"),
        ("A ()\n", 1, "expected 'words (id)'"),
        ("A (u 1)\n", 1, "expected 'words (id)'"),
    ],
)
def test_trn_errors(tmp_path: Path, content: str, line: int, needle: str) -> None:
    path = write(tmp_path, "r.trn", content)
    with pytest.raises(InputError) as info:
        read_trn(path, "full")
    assert (info.value.path, info.value.line) == (str(path), line)
    assert needle in str(info.value)


def test_kaldi_text(tmp_path: Path) -> None:
    path = write(tmp_path, "text", "u1 A B\nu2\n\nu3  C\n")
    assert read_kaldi_text(path) == {"u1": ("A", "B"), "u2": (), "u3": ("C",)}
    dup = write(tmp_path, "dup", "u1 A\nu1 B\n")
    with pytest.raises(InputError, match="duplicate") as info:
        read_kaldi_text(dup)
    assert info.value.line == 2


def test_read_references_detects(tmp_path: Path) -> None:
    trn = write(tmp_path, "refs", "A B (u1)\n")
    text = write(tmp_path, "text", "u1 A B\n")
    named = write(tmp_path, "x.trn", "\n")
    assert detect_reference_format(trn) == "trn"
    assert detect_reference_format(text) == "kaldi"
    assert detect_reference_format(named) == "trn"
    assert read_references(trn) == read_references(text) == {"u1": ("A", "B")}
    assert read_references(text, "kaldi") == {"u1": ("A", "B")}
    with pytest.raises(ValueError, match="unknown reference format"):
        read_references(text, "sgml")
    with pytest.raises(InputError, match="scored against a ctm hypothesis"):
        read_references(text, "stm")  # an stm has segments, not ids (wer: --hyp X.ctm)


def test_utt2spk(tmp_path: Path) -> None:
    assert read_utt2spk(write(tmp_path, "a", "u1 s1\nu2 s2\n")) == {"u1": "s1", "u2": "s2"}
    for content, needle in [("u1\n", "got 1 fields"), ("u1 s1 x\n", "got 3 fields")]:
        with pytest.raises(InputError, match=needle) as info:
            read_utt2spk(write(tmp_path, "b", content))
        assert info.value.line == 1
    with pytest.raises(InputError, match="duplicate"):
        read_utt2spk(write(tmp_path, "c", "u1 s\nu1 s\n"))


def test_writers_round_trip(tmp_path: Path) -> None:
    refs = {"s1-u1": ("A", "B"), "s1-u2": (), "s2-u3": ("C",)}
    write_kaldi_text(tmp_path / "text", refs)
    assert (tmp_path / "text").read_text() == "s1-u1 A B\ns1-u2\ns2-u3 C\n"
    assert read_kaldi_text(tmp_path / "text") == refs
    write_trn(tmp_path / "plain.trn", refs)
    assert read_trn(tmp_path / "plain.trn", "full") == refs
    speakers = {"s1-u1": "s1", "s1-u2": "s1", "s2-u3": "s2"}
    write_trn(tmp_path / "e.trn", refs, speakers)
    assert (tmp_path / "e.trn").read_text().splitlines()[0] == "A B\t(s1-s1-u1)"
    assert read_trn(tmp_path / "e.trn") == refs
    with pytest.raises(ValueError, match="does not start with its speaker"):
        write_trn(tmp_path / "bad.trn", {"u1": ("A",)}, {"u1": "s9"})
    with pytest.raises(ValueError, match="no speaker"):
        write_trn(tmp_path / "bad.trn", {"u1": ("A",)}, {})
    with pytest.raises(ValueError, match="whitespace"):
        write_kaldi_text(tmp_path / "bad", {"u 1": ()})


@pytest.mark.parametrize(
    ("name", "n_utts", "n_words"), [("dev_clean", 2703, 54402), ("dev_other", 2864, 50948)]
)
def test_real_references(name: str, n_utts: int, n_words: int) -> None:
    folder = data_dir() / "nbest" / "librispeech-espnet" / name
    if not folder.is_dir():
        pytest.skip(f"real ESPnet data not found at {folder} (set RESCORER_DATA)")
    refs = read_trn(folder / "references" / "ref_wer.trn")
    assert len(refs) == n_utts
    assert sum(len(w) for w in refs.values()) == n_words
    hyp_ids = [
        line.split(maxsplit=1)[0]
        for line in (folder / "raw_hypotheses" / "1best_recog" / "text").read_text().splitlines()
    ]
    assert list(refs) == hyp_ids
    spk = read_utt2spk(folder / "utt2spk")
    assert set(spk) == set(refs)
    assert all(utt.startswith(spk[utt] + "-") for utt in refs)


def test_match_references_drops_empty_extras_and_allowed_ones() -> None:
    from rescorer.refs import match_references

    refs = {"u3": ("x",), "u1": ("a",), "u5": (), "u2": ("b", "c")}
    matched = match_references(refs, ["u1", "u2"], allow_extra=True)
    assert list(matched.refs) == ["u1", "u2"]  # the references' order, extras dropped
    assert (matched.extra_empty, matched.extra_nonempty) == (("u5",), ("u3",))
    with pytest.raises(InputError, match=r"r.trn: reference ids do not match those of h: 1 extra"):
        match_references(refs, ["u1", "u2"], path="r.trn", against="h")
    only_empty = match_references({"u1": ("a",), "u5": ()}, ["u1"])
    assert only_empty.refs == {"u1": ("a",)} and only_empty.extra_empty == ("u5",)
    with pytest.raises(InputError, match=r"1 missing id\(s\): u9$"):
        match_references(refs, ["u1", "u9"], allow_extra=True)
