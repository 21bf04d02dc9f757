"""The one output layer: every file or set of files the toolkit writes goes through here.

* :func:`check_output_file` / :func:`check_output_dir` refuse, before anything is computed or
  written, a target that is a directory (or a file where a folder is wanted), a device, FIFO or
  socket, a read-only file, or a place under a file or in a folder without write permission:
  an :class:`~rescorer.core.errors.OutputError` naming the path.
* A symbolic link is written *through*: the file it points to is replaced and the link stays a
  link (a dangling link creates its target).
* :func:`atomic_write` (an open file) and :func:`atomic_path` (a path for an external program)
  write a temporary file beside the target and rename it into place, so a reader sees the old
  file or the new one, never half of one. A new file gets the permissions the umask allows
  (``0666 & ~umask``); a replaced file keeps its mode.
* :func:`atomic_dir` writes a set of files into a temporary sibling folder and swaps it in with
  one atomic exchange (``renameat2(RENAME_EXCHANGE)``; where the system has none, two renames
  that the next run completes, and :func:`interrupted_swap` tells a reader where the old set
  is meanwhile), so a kill leaves the old set or the new set, never a mix.
  Files of the old folder that the set does not own are carried into the new one (hard links).
  A mount point, the current folder, or a folder of other files or folders is never swapped:
  the set is built inside it and renamed into place entry by entry.
* Temporary names are ``.<name>.<pid>.<random>.rescorer-tmp``: removed on every exception
  (``KeyboardInterrupt`` too); after ``kill -9`` the next write of any target in the same folder
  removes those whose process is gone (:func:`clean_stale`). Write errors (disk full, ...)
  become an ``OutputError``.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import re
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

from rescorer.core.errors import OutputError
from rescorer.core.io import file_kind

# ctypes, json, secrets, shutil and tempfile are imported in the functions that use them: every
# command imports this module, and `rescorer wer` writes no file (its start-up, issue 50).

logger = logging.getLogger(__name__)

TEMP_SUFFIX = ".rescorer-tmp"
"""Suffix of every temporary file and folder the output layer makes."""
OLD_SUFFIX = ".rescorer-old"
"""Suffix of a folder's previous set while two plain renames swap it (no atomic exchange)."""

_TOKEN_CHARS = "abcdefghijklmnopqrstuvwxyz0123456789_"
_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def _reason(err: OSError) -> str:
    if err.errno in (errno.ENOSPC, errno.EDQUOT):
        return "no space left on the device (or quota exceeded)"
    if err.errno == errno.EFBIG:
        return "file too large for the device or the process's file-size limit"
    return err.strerror or str(err)


def _stat(path: Path) -> os.stat_result | None:
    try:
        return os.stat(path)
    except FileNotFoundError:
        return None
    except NotADirectoryError:
        raise OutputError(
            "cannot write here: a part of the path above it is a file", path
        ) from None
    except OSError as err:
        raise OutputError(f"cannot write here: {_reason(err)}", path) from None


def _check_parent(path: Path, shown: Path) -> None:
    """The nearest existing folder above ``path`` must be a folder we may create files in."""
    parent = path.parent
    while True:
        st = _stat(parent)
        if st is not None:
            break
        parent = parent.parent
    if not stat.S_ISDIR(st.st_mode):
        raise OutputError(
            f"cannot write here: {parent} is {file_kind(st.st_mode)}, not a folder", shown
        )
    if not os.access(parent, os.W_OK | os.X_OK):
        raise OutputError(f"cannot write here: no permission to create files in {parent}", shown)


def check_output_file(path: str | Path) -> Path:
    """The file that writing ``path`` replaces (symlinks followed); see the module docstring."""
    shown = Path(path)
    target = Path(os.path.realpath(shown))
    st = _stat(target)
    if st is not None:
        if stat.S_ISDIR(st.st_mode):
            raise OutputError("expected a file to write, got a directory", shown)
        if not stat.S_ISREG(st.st_mode):
            raise OutputError(
                f"refusing to replace {file_kind(st.st_mode)} by a regular file", shown
            )
        if not os.access(target, os.W_OK):
            raise OutputError("cannot write: the file is read-only", shown)
    _check_parent(target, shown)
    return target


def check_output_dir(path: str | Path) -> Path:
    """The folder that writing a set of files at ``path`` replaces (symlinks followed)."""
    shown = Path(path)
    target = Path(os.path.realpath(shown))
    st = _stat(target)
    if st is not None and not stat.S_ISDIR(st.st_mode):
        raise OutputError(f"expected a folder to write into, got {file_kind(st.st_mode)}", shown)
    _check_parent(target, shown)
    return target


def _umask() -> int:
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _mode_for(target: Path, new_mode: int) -> int:
    """The existing target's permission bits, else ``new_mode`` less the umask."""
    try:
        return stat.S_IMODE(os.stat(target).st_mode)
    except OSError:
        return new_mode & ~_umask()


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _remove(path: Path) -> None:
    import shutil

    with contextlib.suppress(FileNotFoundError):
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink()


def temp_pattern(name: str) -> re.Pattern[str]:
    """Names of the temporary files and folders made for a target called ``name``."""
    suffixes = f"({re.escape(TEMP_SUFFIX)}|{re.escape(OLD_SUFFIX)})"
    return re.compile(rf"^\.{re.escape(name)}\.([0-9]+)\.[a-z0-9_]{{8}}{suffixes}$")


_ANY_TEMP = re.compile(
    rf"^\.(.+)\.([0-9]+)\.[a-z0-9_]{{8}}({re.escape(TEMP_SUFFIX)}|{re.escape(OLD_SUFFIX)})$"
)
"""The temporaries of any target: ``.<name>.<pid>.<8 chars><suffix>``."""


def _stale_in(folder: Path) -> list[tuple[Path, str, str]]:
    """``(entry, target name, suffix)`` of the temporaries in ``folder``, of any target, whose
    process is gone."""
    try:
        entries = sorted(folder.iterdir())
    except OSError:
        return []
    matches = ((entry, _ANY_TEMP.match(entry.name)) for entry in entries)
    return [
        (entry, m.group(1), m.group(3)) for entry, m in matches if m and not _alive(int(m.group(2)))
    ]


def interrupted_swap(target: Path) -> Path | None:
    """The previous set of a missing ``target`` that a run killed between the two renames of
    :func:`atomic_dir`'s fallback swap left beside it (None: ``target`` exists, or no such set).

    For readers: the next write of ``target`` (:func:`clean_stale`) renames it back.
    """
    if os.path.lexists(target):
        return None
    return next(
        (
            entry
            for entry, name, suffix in _stale_in(target.parent)
            if name == target.name and suffix == OLD_SUFFIX
        ),
        None,
    )


_FRESH: set[Path] = set()
"""Temporary set folders this process made and still fills: no dead process wrote into them,
so their files are written without a scan for stale temporaries (one scan per file made
writing N files quadratic)."""


def clean_stale(target: Path) -> None:
    """Remove the temporaries that killed runs left beside ``target`` (those of any target in
    its folder: the next run of any command writing there cleans up); put back a set lost
    mid-swap.

    A temporary whose process is alive (on this machine) is left alone. Safe to run from
    several processes at once (the ranks of a training run starting).
    """
    if target.parent in _FRESH:
        return
    for entry, name, suffix in _stale_in(target.parent):
        original = entry.parent / name
        if suffix == OLD_SUFFIX and not os.path.lexists(original):
            logger.warning("restoring %s from %s (a run was killed mid-swap)", original, entry.name)
            with contextlib.suppress(FileNotFoundError):  # another process restored it first
                os.rename(entry, original)
            continue
        logger.info("removing %s, left by a killed run", entry)
        _remove(entry)


def _temp_prefix(target: Path) -> str:
    return f".{target.name}.{os.getpid()}."


@contextlib.contextmanager
def atomic_path(path: str | Path, new_mode: int = 0o666) -> Iterator[Path]:
    """A temporary path beside ``path`` that is renamed onto it when the block succeeds.

    For external programs that write a file by name; :func:`atomic_write` opens it for you.
    """
    import tempfile

    shown = Path(path)
    target = check_output_file(shown)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise OutputError(f"cannot create the folder: {_reason(err)}", shown) from None
    clean_stale(target)
    try:
        fd, name = tempfile.mkstemp(
            prefix=_temp_prefix(target), suffix=TEMP_SUFFIX, dir=target.parent
        )
    except OSError as err:
        raise OutputError(f"cannot write: {_reason(err)}", shown) from None
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        os.chmod(tmp, _mode_for(target, new_mode))
        os.replace(tmp, target)
    except OSError as err:
        _remove(tmp)
        raise OutputError(f"cannot write: {_reason(err)}", shown) from None
    except BaseException:
        _remove(tmp)
        raise


@contextlib.contextmanager
def atomic_write(path: str | Path, mode: str = "w") -> Iterator[IO]:
    """Write ``path`` through a temporary file renamed into place on success.

    ``mode`` is ``"w"`` (UTF-8 text, ``\\n`` line ends) or ``"wb"``. Raises
    :class:`OutputError` for a target that cannot be written and for write errors; the
    previous file is then left as it was.
    """
    shown = Path(path)
    with atomic_path(shown) as tmp:
        kwargs = {} if "b" in mode else {"encoding": "utf-8", "newline": "\n"}
        try:
            f = open(tmp, mode, **kwargs)  # noqa: SIM115 - closed below, errors named
        except OSError as err:
            raise OutputError(f"cannot write: {_reason(err)}", shown) from None
        with f:
            yield f


def write_report(path: str | Path, lines: list[str]) -> str:
    """Write a report's ``lines`` (Markdown, joined by newlines) to ``path`` atomically
    (:func:`atomic_write`) and return the text (the ``bench/`` scripts print it too)."""
    text = "\n".join(lines)
    with atomic_write(path) as f:
        f.write(text)
    return text


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths atomically (Linux ``renameat2``); False where the system cannot."""
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    renameat2.argtypes = [
        ctypes.c_int,
        ctypes.c_char_p,
        ctypes.c_int,
        ctypes.c_char_p,
        ctypes.c_uint,
    ]
    done = renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE)
    if done == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), str(b))


def _carry(old: Path, new: Path, owned: Callable[[str], bool]) -> None:
    """Hard-link (or copy) the entries of ``old`` that the new set does not own into ``new``."""
    import shutil

    for entry in old.iterdir():
        if owned(entry.name) or temp_pattern(old.name).match(entry.name):
            continue
        dest = new / entry.name
        if entry.is_dir() and not entry.is_symlink():
            shutil.copytree(entry, dest, symlinks=True, copy_function=_link_or_copy)
        elif entry.is_symlink():
            os.symlink(os.readlink(entry), dest)
        else:
            _link_or_copy(str(entry), str(dest))


def _link_or_copy(src: str, dst: str) -> None:
    import shutil

    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def _swap_in(new: Path, target: Path) -> None:
    import secrets

    if not os.path.lexists(target):
        os.rename(new, target)
        return
    if _exchange(new, target):
        _remove(new)  # now the previous set
        return
    token = "".join(secrets.choice(_TOKEN_CHARS) for _ in range(8))
    old = target.parent / f"{_temp_prefix(target)}{token}{OLD_SUFFIX}"
    os.rename(target, old)
    os.rename(new, target)
    _remove(old)


def _holds_cwd(target: Path) -> bool:
    """True when ``target`` is the current folder or one above it."""
    try:
        here = Path.cwd().resolve()
        return here == target.resolve() or target.resolve() in here.parents
    except OSError:
        return False


def _written_in_place(target: Path, owned: Callable[[str], bool]) -> bool:
    """Whether the set goes into ``target`` entry by entry instead of a swap of the folder: a
    mount point, the current folder (or one above it), a folder holding only entries the set
    does not own (one the toolkit did not make, e.g. a Kaldi data folder), or one holding a
    folder the set does not own (a swap could only carry a copy of it, not the folder itself).
    A previous set with a few files of the user's beside it is swapped whole (those files
    carried as hard links: the same files)."""
    if not target.is_dir():
        return False
    if os.path.ismount(target) or _holds_cwd(target):
        return True
    temp = temp_pattern(target.name)
    foreign = [e for e in target.iterdir() if not owned(e.name) and not temp.match(e.name)]
    if any(e.is_dir() and not e.is_symlink() for e in foreign):
        return True
    return bool(foreign) and not any(owned(e.name) for e in target.iterdir())


def _move_into(built: Path, target: Path, owned: Callable[[str], bool]) -> None:
    """The entries of ``built`` (a folder inside ``target``) renamed into ``target`` one by one
    (each atomically), then the set's own entries that the new set no longer has removed."""
    new_names = {entry.name for entry in built.iterdir()}
    for name in sorted(new_names):
        src, dest = built / name, target / name
        if src.is_dir() and not src.is_symlink() and dest.is_dir() and not dest.is_symlink():
            _swap_in(src, dest)
        else:
            if dest.is_dir() and not dest.is_symlink():
                _remove(dest)
            os.replace(src, dest)
    for entry in target.iterdir():
        if owned(entry.name) and entry.name not in new_names and entry != built:
            _remove(entry)


def _renamed_error(err: OutputError, tmp: Path, shown: Path) -> OutputError:
    """``err`` with the temporary folder in its path replaced by the output's own path."""
    path = err.path
    if path is not None and (path == str(tmp) or path.startswith(str(tmp) + os.sep)):
        path = str(shown) + path[len(str(tmp)) :]
    return OutputError(err.message, path, err.line)


@contextlib.contextmanager
def atomic_dir(
    path: str | Path, owned: Callable[[str], bool] = lambda _name: True
) -> Iterator[Path]:
    """Write a set of files into the folder the block gets; put it in place at ``path`` on
    success.

    ``owned(name)`` says which entries of an existing folder belong to the set (and are
    replaced or dropped); the others are carried into the new folder. A folder that is a mount
    point, the current folder (or one above it), or holds only entries the set does not own or
    a folder of its own is never swapped (:func:`_written_in_place`): the set is built inside it
    and its entries renamed into place one by one. See the module docstring.
    """
    shown = Path(path)
    target = check_output_dir(shown)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise OutputError(f"cannot create the folder: {_reason(err)}", shown) from None
    clean_stale(target)
    in_place = _written_in_place(target, owned)
    if in_place:
        clean_stale(target / target.name)  # temporaries a killed in-place write left inside
    where = target if in_place else target.parent
    import tempfile

    try:
        tmp = Path(tempfile.mkdtemp(prefix=_temp_prefix(target), suffix=TEMP_SUFFIX, dir=where))
    except OSError as err:
        raise OutputError(f"cannot write: {_reason(err)}", shown) from None
    _FRESH.add(tmp)
    try:
        os.chmod(tmp, _mode_for(target, 0o777))
        if target.is_dir() and not in_place:
            _carry(target, tmp, owned)
        yield tmp
        _FRESH.discard(tmp)
        if in_place:
            _move_into(tmp, target, owned)
            _remove(tmp)
        else:
            _swap_in(tmp, target)
    except OutputError as err:
        _remove(tmp)
        raise _renamed_error(err, tmp, shown) from None
    except OSError as err:
        _remove(tmp)
        raise OutputError(f"cannot write: {_reason(err)}", shown) from None
    except BaseException:
        _remove(tmp)
        raise
    finally:
        _FRESH.discard(tmp)


def write_format_json(path: str | Path, fmt: str, version: int, fields: dict[str, Any]) -> None:
    """A small self-describing JSON file, ``{"format": fmt, "version": version, **fields}``,
    indented, written atomically: the model and spec files that
    :func:`rescorer.core.json_input.read_format_json` reads back."""
    import json

    with atomic_write(path) as f:
        f.write(json.dumps({"format": fmt, "version": version, **fields}, indent=2) + "\n")
