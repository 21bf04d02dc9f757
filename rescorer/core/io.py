"""The one input layer: every text file the toolkit reads goes through :func:`read_lines`.

What is accepted and what is refused (an :class:`~rescorer.core.errors.InputError` naming the
file and, where there is one, the line):

* UTF-8 text, ``.gz`` compressed or not. A UTF-8 byte-order mark at the start is dropped, and
  so is U+FEFF anywhere else (the same character: a mark repeated by a tool, files joined with
  ``cat``, or a zero-width no-break space before a word), so that such a file reads as the same
  words as its clean twin instead of ``\ufeffWORD``.
* Line ends ``\\n``, ``\\r\\n`` and a lone ``\\r`` (old Mac files) all end a line, so a CRLF or
  CR-only file gives the same lines, numbered the same way, as its LF twin.
* Refused: undecodable bytes (latin-1, binary data), a NUL byte (binary data, UTF-16 or UTF-32
  text), a UTF-16/UTF-32 byte-order mark, a line longer than :data:`MAX_LINE_BYTES`, a corrupt
  ``.gz`` stream, a folder, a device or socket, a file that cannot be opened.

Whole documents (JSON files) are read with :func:`read_text`, which joins the same lines.
Outputs are written by :mod:`rescorer.core.output`.
"""

from __future__ import annotations

import os
import stat
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from rescorer.core.errors import InputError

if TYPE_CHECKING:
    import gzip

MAX_LINE_BYTES = 256 * 2**20
"""Longest line read (bytes); a longer one is refused instead of filling the memory."""
WHOLE_FILE_BYTES = 16 * 2**20
# A .gz input that has decompressed past GZIP_CHECK_BYTES to more than MAX_GZIP_RATIO times the
# compressed bytes read is refused as a decompression bomb (text compresses 3-10x; a run of one
# repeated byte, 1000x).
GZIP_CHECK_BYTES = 2**20
MAX_GZIP_RATIO = 100
"""Plain files up to this size are read and decoded at once, larger ones line by line."""

_BOM = b"\xef\xbb\xbf"
_WIDE_BOMS = (
    (b"\xff\xfe\x00\x00", "UTF-32"),
    (b"\x00\x00\xfe\xff", "UTF-32"),
    (b"\xff\xfe", "UTF-16"),
    (b"\xfe\xff", "UTF-16"),
)


def check_input_file(path: str | Path) -> Path:
    """``path`` as a :class:`Path` when it can be read as a file, else :class:`InputError`.

    Regular files and pipes (``<(zcat x)``) are accepted; a missing path, a folder, a device
    or a socket is refused.
    """
    path = Path(path)
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        raise InputError("file not found: expected an existing file there", path) from None
    except (OSError, ValueError) as err:
        raise InputError(f"expected a readable file, got {_reason(err)}", path) from None
    if stat.S_ISDIR(mode):
        raise InputError("expected a file, got a directory", path)
    if not (stat.S_ISREG(mode) or stat.S_ISFIFO(mode)):
        raise InputError(f"expected a file, got {file_kind(mode)}", path)
    return path


def file_kind(mode: int) -> str:
    """What a ``st_mode`` is, in words (``a directory``, ``a FIFO``, ...)."""
    kinds = (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISLNK, "a symbolic link"),
        (stat.S_ISREG, "a regular file"),
    )
    return next((name for test, name in kinds if test(mode)), "a special file")


def _reason(err: BaseException) -> str:
    """The OS's reason of ``err`` without the repeated file name."""
    return getattr(err, "strerror", None) or str(err)


_ZWNBSP = "\ufeff"  # what a UTF-8 byte-order mark decodes to


def _decode(raw: bytes, path: Path, lineno: int) -> str:
    """One raw line as text (U+FEFF dropped), or InputError naming the line."""
    if b"\x00" in raw:
        raise InputError(
            "not UTF-8 text: expected UTF-8, found a NUL byte (binary data, or UTF-16/UTF-32 text)",
            path,
            lineno,
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        byte = raw[err.start]
        raise InputError(
            f"not UTF-8 text: expected UTF-8, found byte 0x{byte:02X} at byte {err.start + 1} of "
            "the line (latin-1 or binary data?)",
            path,
            lineno,
        ) from None
    return text.replace(_ZWNBSP, "") if _ZWNBSP in text else text


def _first_line(raw: bytes, path: Path) -> bytes:
    """The first raw line without a UTF-8 byte-order mark; UTF-16/32 marks are refused."""
    if raw.startswith(_BOM):
        return raw[len(_BOM) :]
    for mark, name in _WIDE_BOMS:
        if raw.startswith(mark):
            raise InputError(
                f"not UTF-8 text: expected UTF-8, found a {name} byte-order mark (convert with "
                f"iconv -f {name} -t UTF-8)",
                path,
                1,
            )
    return raw


def read_lines(path: str | Path) -> Iterator[tuple[int, str]]:
    """Yield ``(line_number, line)`` with 1-based numbers and the line end stripped.

    See the module docstring for what is accepted; everything else raises
    :class:`InputError` naming the file and the line it was found on.
    """
    path = check_input_file(path)
    text = _whole_text(path)
    if text is not None:
        yield from _split_lines(text)
        return
    compressed = path.name.endswith(".gz")
    if compressed:  # gzip and hashlib are imported where used (start-up of `rescorer wer`)
        import gzip

        opener, corrupt = gzip.open, (gzip.BadGzipFile, EOFError, zlib.error)
    else:
        opener, corrupt = open, ()
    lineno = 0
    try:
        with opener(path, "rb") as f:
            unchecked = 0  # bytes decompressed since the last look at the ratio
            while raw := f.readline(MAX_LINE_BYTES + 1):
                unchecked += len(raw)
                if compressed and unchecked >= GZIP_CHECK_BYTES:
                    _check_ratio(f, path, lineno + 1)
                    unchecked = 0
                if len(raw) > MAX_LINE_BYTES:
                    raise InputError(
                        f"expected lines of at most {MAX_LINE_BYTES // 2**20} MiB, found a "
                        "longer one (binary data?)",
                        path,
                        lineno + 1,
                    )
                if lineno == 0:
                    raw = _first_line(raw, path)
                text = _decode(raw, path, lineno + 1)
                if text.endswith("\n"):
                    text = text[:-1]
                if text.endswith("\r"):
                    text = text[:-1]
                if "\r" not in text:
                    lineno += 1
                    yield lineno, text
                    continue
                for piece in text.split("\r"):  # CR-only line ends: one line per piece
                    lineno += 1
                    yield lineno, piece
    except corrupt as err:
        raise InputError(f"corrupt gzip data: expected a gzip stream ({err})", path) from None
    except OSError as err:
        raise InputError(f"cannot read the file: {_reason(err)}", path) from None


def plain_lines(path: str | Path) -> list[str] | None:
    """The lines of a small plain file at C speed, when it has nothing :func:`read_lines` would
    treat apart (a ``.gz`` file, a large one, a byte to refuse, a CR line end); None otherwise,
    and the caller reads it with :func:`read_lines`, which names any problem. Line ``i`` of the
    file is ``lines[i - 1]``."""
    path = check_input_file(path)
    text = _whole_text(path)
    if text is None or "\r" in text:
        return None
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()  # the end of the last line, or an empty file
    return lines


def _check_ratio(f: gzip.GzipFile, path: Path, lineno: int) -> None:
    """InputError when ``f`` has decompressed to more than :data:`MAX_GZIP_RATIO` times the
    compressed bytes read so far."""
    read = max(f.fileobj.tell(), 1) if f.fileobj is not None else 1
    if f.tell() > MAX_GZIP_RATIO * read:
        raise InputError(
            f"decompresses to more than {MAX_GZIP_RATIO} times its size ({f.tell() / 2**20:.0f} "
            f"MiB from {read / 2**10:.0f} KiB so far): refused as a decompression bomb; if the "
            "text is real, decompress it first (plain files have no such bound)",
            path,
            lineno,
        )


def _whole_text(path: Path) -> str | None:
    """A small plain file's text decoded at once (the common case, several times faster than
    line by line); None when :func:`read_lines` must go line by line: a ``.gz`` file, a pipe,
    a large file, or one with anything to refuse, whose error the line-by-line path names."""
    if path.name.endswith(".gz"):
        return None
    try:
        # A pipe is never opened here: opening and closing it would pair with its writer, which
        # then dies of a broken pipe, and the line-by-line path's open would wait forever.
        if not stat.S_ISREG(path.stat().st_mode):
            return None
        with open(path, "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                return None
            raw = f.read(WHOLE_FILE_BYTES + 1)
    except OSError:
        return None  # the line-by-line path reports it
    if len(raw) > WHOLE_FILE_BYTES or b"\x00" in raw:
        return None
    if raw.startswith(_BOM):
        raw = raw[len(_BOM) :]
    elif any(raw.startswith(mark) for mark, _ in _WIDE_BOMS):
        return None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return text.replace(_ZWNBSP, "") if _ZWNBSP in text else text


def _split_lines(text: str) -> Iterator[tuple[int, str]]:
    """``(line_number, line)`` of a whole text, exactly as the line-by-line path gives them."""
    pieces = text.split("\n")
    if pieces[-1] == "":
        pieces.pop()  # the end of the last line, or an empty file
    lineno = 0
    for piece in pieces:
        if piece.endswith("\r"):
            piece = piece[:-1]
        if "\r" not in piece:
            lineno += 1
            yield lineno, piece
            continue
        for part in piece.split("\r"):  # CR-only line ends
            lineno += 1
            yield lineno, part


def read_tokens(path: str | Path) -> list[str]:
    """A vocabulary file: one token per line, every line a token; a repeated token is refused."""
    tokens: list[str] = []
    first: dict[str, int] = {}
    for lineno, token in read_lines(path):
        if token in first:
            raise InputError(
                f"expected each token once, got {token!r} again (first on line {first[token]})",
                path,
                lineno,
            )
        first[token] = lineno
        tokens.append(token)
    return tokens


def read_text(path: str | Path) -> str:
    """The whole text of ``path`` through :func:`read_lines`: lines joined by ``\\n``."""
    return "\n".join(line for _, line in read_lines(path))


def sha256_of(path: str | Path, chunk: int = 2**20) -> str:
    """The SHA-256 of a file's bytes (hex), read ``chunk`` bytes at a time."""
    import hashlib

    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            digest.update(block)
    return digest.hexdigest()
