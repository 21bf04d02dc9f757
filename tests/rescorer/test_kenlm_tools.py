"""KenLM's programs for a pip install: found where installed, else built once into a user cache."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from rescorer import kenlm_tools
from rescorer.cli.main import main
from rescorer.core.errors import KenLMToolError
from tests.paths import REPO


@pytest.fixture
def nowhere(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No KenLM program installed anywhere: an empty PATH, prefix and cache."""
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.delenv("RESCORER_KENLM_BIN", raising=False)
    monkeypatch.delenv("RESCORER_KENLM_BUILD", raising=False)
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.setattr("sys.prefix", str(empty))
    monkeypatch.setenv("RESCORER_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_cache_places(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("RESCORER_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert kenlm_tools.cache_bin() == tmp_path / "xdg" / "rescorer" / "kenlm-0.3.0" / "bin"
    monkeypatch.setenv("RESCORER_CACHE", str(tmp_path / "mine"))
    assert kenlm_tools.cache_bin() == tmp_path / "mine" / "kenlm-0.3.0" / "bin"


def test_cached_programs_are_found(nowhere: Path) -> None:
    target = kenlm_tools.cache_bin()
    target.mkdir(parents=True)
    for name in kenlm_tools.PROGRAMS:
        (target / name).write_text("#!/bin/sh\n")
        (target / name).chmod(0o755)
    assert kenlm_tools.find_program("lmplz") == target / "lmplz"
    with pytest.raises(ValueError, match="unknown KenLM program 'kenlm'"):
        kenlm_tools.lookup("kenlm")


def test_missing_build_tools_named_in_one_line(nowhere: Path, tmp_path: Path) -> None:
    text = tmp_path / "t.txt"
    text.write_text("a b c\n")
    result = CliRunner().invoke(main, ["ngram", "build", "--text", str(text), "--out", "x.bin"])
    assert result.exit_code == 1
    message = result.output.strip()
    assert message.count("\n") == 0, message
    assert "needs cmake, make, a C++ compiler" in message
    assert "libboost-program-options-dev" in message
    assert not (nowhere / "kenlm-0.3.0" / "kenlm-0.3.0.tar.gz").exists()


def test_lookup_only_when_the_build_is_off(nowhere: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RESCORER_KENLM_BUILD", "0")
    with pytest.raises(KenLMToolError, match="`rescorer ngram setup` builds it"):
        kenlm_tools.find_program("build_binary")


def test_a_download_with_the_wrong_checksum_is_refused(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fake = tmp_path / "kenlm.tar.gz"
    fake.write_bytes(b"not the kenlm package")
    monkeypatch.setattr(kenlm_tools, "KENLM_URL", fake.as_uri())
    dest = tmp_path / "cache" / "kenlm-0.3.0.tar.gz"
    dest.parent.mkdir()
    with pytest.raises(KenLMToolError, match="download refused"):
        kenlm_tools._download(dest)
    assert not dest.exists() and not dest.with_name(dest.name + ".part").exists()


@pytest.mark.slow
def test_first_use_builds_working_programs(
    nowhere: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real build (minutes): from the pinned package, as a pip user's first ngram build."""
    tarball = next(iter(sorted((REPO / ".cache").glob("**/kenlm-0.3.0.tar.gz"))), None)
    if tarball is None:
        pytest.skip("no kenlm-0.3.0.tar.gz under .cache (scripts/setup.sh downloads it)")
    monkeypatch.setenv("PATH", "/usr/local/bin:/usr/bin:/bin")  # the system's, not the venv's
    for tool in ("cmake", "make", "g++"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed")
    assert kenlm_tools.lookup("lmplz") is None
    root = kenlm_tools.cache_bin().parent
    root.mkdir(parents=True)
    shutil.copy(tarball, root / tarball.name)  # no download in the test
    text = tmp_path / "t.txt"
    text.write_text("".join(f"w{i % 7} w{i % 5} w{i % 3}\n" for i in range(300)))
    out = tmp_path / "3gram.bin"
    args = ["ngram", "build", "--text", str(text), "--order", "3", "--discount-fallback"]
    result = CliRunner().invoke(main, [*args, "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "building KenLM's lmplz and build_binary" in result.output  # the CLI's log on stderr
    assert kenlm_tools.lookup("lmplz") == kenlm_tools.cache_bin() / "lmplz"
    assert out.stat().st_size > 0
    setup = CliRunner().invoke(main, ["-q", "ngram", "setup"])
    assert setup.output.splitlines() == [
        f"{name}: {kenlm_tools.cache_bin() / name}" for name in kenlm_tools.PROGRAMS
    ]
