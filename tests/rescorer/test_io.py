"""rescorer.core.io.read_lines: the whole-file fast path gives exactly the lines, numbers and
errors of the line-by-line path."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rescorer.core import io
from rescorer.core.errors import InputError

CASES = [
    b"",
    b"\n",
    b"a b\nc\n",
    b"a b\nc",
    b"a\r\nb\r\n",
    b"a\rb\rc",
    b"a\r\r\nb\n\n\nc\r",
    b"\xef\xbb\xbfa\nb\n",
    "é ü\n▁x\r\n".encode(),
]


def lines_both_ways(tmp_path: Path, data: bytes, monkeypatch: pytest.MonkeyPatch) -> tuple:
    path = tmp_path / "f.txt"
    path.write_bytes(data)
    fast = list(io.read_lines(path))
    with gzip.open(tmp_path / "f.txt.gz", "wb") as f:  # .gz always goes line by line
        f.write(data)
    slow = list(io.read_lines(tmp_path / "f.txt.gz"))
    monkeypatch.setattr(io, "WHOLE_FILE_BYTES", -1)  # a plain file line by line too
    slow_plain = list(io.read_lines(path))
    return fast, slow, slow_plain


@pytest.mark.parametrize("data", CASES)
def test_fast_path_equals_line_by_line(
    tmp_path: Path, data: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    fast, slow, slow_plain = lines_both_ways(tmp_path, data, monkeypatch)
    assert fast == slow == slow_plain


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["a", "b c", " ", "\n", "\r", "\r\n", "é", "\t"]), max_size=12))
def test_fast_path_equals_line_by_line_on_any_mix(tmp_path_factory, parts: list[str]) -> None:
    tmp = tmp_path_factory.mktemp("io")
    data = "".join(parts).encode()
    path = tmp / "f.txt"
    path.write_bytes(data)
    fast = list(io.read_lines(path))
    with gzip.open(tmp / "f.txt.gz", "wb") as f:
        f.write(data)
    assert fast == list(io.read_lines(tmp / "f.txt.gz"))


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"ok\nbad \xe9 latin-1\n", r"f.txt:2: not UTF-8 text: .* byte 0xE9 at byte 5"),
        (b"ok\nok\n\x00\n", r"f.txt:3: not UTF-8 text: .* NUL byte"),
        (b"\xff\xfea\x00", r"f.txt:1: .* UTF-16 byte-order mark"),
    ],
)
def test_refused_files_name_the_line(tmp_path: Path, data: bytes, message: str) -> None:
    path = tmp_path / "f.txt"
    path.write_bytes(data)
    with pytest.raises(InputError, match=message):
        list(io.read_lines(path))
