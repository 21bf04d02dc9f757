"""rescorer.core.output.write_report: a report written whole or not at all."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from rescorer.core.errors import OutputError
from rescorer.core.output import atomic_dir, atomic_write, write_report


def test_write_report_replaces_the_file_and_returns_its_text(tmp_path: Path) -> None:
    out = tmp_path / "r.md"
    out.write_text("old report\n")
    text = write_report(out, ["# title", "", "| a | b |"])
    assert text == "# title\n\n| a | b |" == out.read_text()
    assert [p.name for p in tmp_path.iterdir()] == ["r.md"]  # no temporary file left


def test_write_report_under_a_file_is_refused_and_changes_nothing(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("a file\n")
    with pytest.raises(OutputError, match="a part of the path above it is a file"):
        write_report(tmp_path / "f" / "r.md", ["x"])
    assert [p.name for p in tmp_path.iterdir()] == ["f"]
    assert (tmp_path / "f").read_text() == "a file\n"


# -- atomic_dir: a folder the toolkit did not make is written into, never swapped (issues 51/52)


def _owned(name: str) -> bool:
    return name in ("a.txt", "b.txt")


def _write_set(target: Path, text: str, names: tuple[str, ...] = ("a.txt", "b.txt")) -> None:
    with atomic_dir(target, owned=_owned) as folder:
        for name in names:
            (folder / name).write_text(text)


def _no_temporaries(*folders: Path) -> None:
    for folder in folders:
        left = [p.name for p in folder.iterdir() if "rescorer-" in p.name]
        assert left == [], left


def test_a_folder_of_other_files_is_written_into_not_replaced(tmp_path: Path) -> None:
    """`--out .` or a user's folder: the set's files land beside the others; the folder itself
    (its inode) and every entry it did not write stay (no hard-link copies in a new folder)."""
    target = tmp_path / "mine"
    (target / "src").mkdir(parents=True)
    (target / "src" / "main.py").write_text("print('mine')\n")
    before = (target.stat().st_ino, (target / "src" / "main.py").stat().st_ino)
    _write_set(target, "new")
    assert (target.stat().st_ino, (target / "src" / "main.py").stat().st_ino) == before
    assert (target / "a.txt").read_text() == "new" and (target / "b.txt").read_text() == "new"
    _no_temporaries(target, tmp_path)
    # a second run replaces its own files, drops its own stale ones, keeps the user's
    _write_set(target, "newer", names=("a.txt",))
    assert sorted(p.name for p in target.iterdir()) == ["a.txt", "src"]
    assert (target / "a.txt").read_text() == "newer"
    assert (target.stat().st_ino, (target / "src" / "main.py").stat().st_ino) == before


def test_the_current_folder_is_never_swapped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "here"
    _write_set(target, "old")  # a previous output of the same command, nothing else
    inode = target.stat().st_ino
    monkeypatch.chdir(target)
    _write_set(Path("."), "new")
    assert target.stat().st_ino == inode and os.getcwd() == str(target)
    assert (target / "a.txt").read_text() == "new"
    _no_temporaries(target, tmp_path)


@contextlib.contextmanager
def _tmpfs(where: Path, size: str) -> Iterator[Path]:
    where.mkdir()
    proc = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "none", str(where)], capture_output=True
    )
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({proc.stderr.decode().strip() or 'not root'})")
    try:
        yield where
    finally:
        subprocess.run(["umount", str(where)], check=False)


def test_a_mount_point_is_written_into_not_swapped(tmp_path: Path) -> None:
    """issue 52: with a filesystem mounted at the output folder, the swap emptied it and left the
    mount under a hidden temporary name; now the set is written inside the mount."""
    with _tmpfs(tmp_path / "mnt", "4m") as mnt:
        _write_set(mnt, "old")
        (mnt / "theirs.txt").write_text("not the set's\n")
        _write_set(mnt, "new")
        assert os.path.ismount(mnt)
        assert sorted(p.name for p in mnt.iterdir()) == ["a.txt", "b.txt", "theirs.txt"]
        assert (mnt / "a.txt").read_text() == "new"
        _no_temporaries(mnt, tmp_path)


def test_a_full_disk_names_the_output_not_a_temporary(tmp_path: Path) -> None:
    """issue 52: the error of a set's file that cannot be written names the output path."""
    with _tmpfs(tmp_path / "small", "64k") as small:
        out = small / "out"
        with (
            pytest.raises(OutputError) as info,
            atomic_dir(out) as folder,
            atomic_write(folder / "big.txt") as fh,
        ):
            fh.write("x" * 2**20)
        message = str(info.value)
        assert str(out / "big.txt") in message and "rescorer-tmp" not in message, message
        assert "no space left" in message
        _no_temporaries(small)


def test_a_set_of_many_files_scans_its_folder_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Writing N files into a set listed the set's folder once per file (N^2: 2,703 SRILM lists
    took 25 s, 65 of 72 profiled seconds in the scan for stale temporaries). A folder this
    process has just made holds no temporaries of dead processes: it is not scanned."""
    import rescorer.core.output as output

    scans: list[Path] = []
    real = output._stale_in
    monkeypatch.setattr(output, "_stale_in", lambda folder: scans.append(folder) or real(folder))
    with atomic_dir(tmp_path / "set") as folder:
        for i in range(200):
            with atomic_write(folder / f"u{i}") as fh:
                fh.write("x\n")
    assert len(list((tmp_path / "set").iterdir())) == 200
    assert len(scans) <= 3, len(scans)


def test_a_closed_pipe_ends_the_command_quietly(tmp_path: Path) -> None:
    """`rescorer ... | head` printed "Error: Broken pipe" (and exit 2) when head closed."""
    import sys

    ref, spk = tmp_path / "ref.txt", tmp_path / "utt2spk"
    ref.write_text("".join(f"u{i} a b c\n" for i in range(20000)))
    spk.write_text("".join(f"u{i} s{i}\n" for i in range(20000)))  # a 20,000-row table
    wer = f'"{sys.executable}" -m rescorer wer --ref {ref} --hyp {ref} --utt2spk {spk}'
    proc = subprocess.run(["bash", "-c", f"{wer} | head -1"], capture_output=True, text=True)
    assert "Broken pipe" not in proc.stderr and "Error" not in proc.stderr, proc.stderr
    assert proc.stdout.count("\n") == 1
