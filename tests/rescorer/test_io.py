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


def test_a_decompression_bomb_is_refused_in_seconds(tmp_path: Path) -> None:
    """issue 52: 256 MiB of newlines in a 255 KiB .gz kept `wer` busy for 523 s; a .gz that
    decompresses past :data:`io.MAX_GZIP_RATIO` times its size is refused once it is past
    :data:`io.GZIP_CHECK_BYTES`, naming the file."""
    import subprocess
    import sys

    bomb = tmp_path / "ref.txt.gz"
    bomb.write_bytes(gzip.compress(b"\n" * (256 * 2**20), compresslevel=9))
    assert bomb.stat().st_size < 300 * 2**10
    hyp = tmp_path / "hyp.txt"
    hyp.write_text("u1 a\n")
    cmd = [sys.executable, "-m", "rescorer", "wer", "--ref", str(bomb), "--hyp", str(hyp)]
    try:  # seconds, not minutes (a generous bound: 2 shared cores)
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("wer still reading the decompression bomb after 60 s")
    assert proc.returncode == 2, proc.stderr
    assert "ref.txt.gz" in proc.stderr and "decompresses to more than" in proc.stderr
    assert proc.stderr.count("\n") == 1, proc.stderr


def test_ordinary_compressed_text_is_read_whole(tmp_path: Path) -> None:
    """The bound leaves real compressed text alone: 40 MiB of varied lines (ratio < 10)."""
    lines = [f"utt{i:07d} {' '.join(str(i * j % 9973) for j in range(12))}" for i in range(500_000)]
    path = tmp_path / "big.txt.gz"
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    n = sum(1 for _ in io.read_lines(path))
    assert n == len(lines)
