"""KenLM's ``lmplz`` and ``build_binary``: found, or built once from the kenlm source package.

No registry package ships these two programs (the kenlm wheels on PyPI hold the Python module
only), so a pip install of the toolkit cannot bring them. The first ``rescorer ngram build`` (or
``rescorer ngram setup``) downloads the kenlm source package from PyPI, pinned by version and
SHA-256, and compiles the two programs into a user cache, where every later run finds them:

    ``$RESCORER_CACHE/kenlm-<version>/bin``   (default ``$XDG_CACHE_HOME/rescorer``, else
                                            ``~/.cache/rescorer``)

Building needs what KenLM's own build needs: cmake, a C++ compiler, Boost (program_options,
system, thread, and the test headers its CMakeLists asks for) and zlib; a missing one is named
in a one-line error with the Debian/Ubuntu packages that provide it. The programs are looked up
first in ``$RESCORER_KENLM_BIN``, next to the running interpreter (``sys.prefix/bin``), on
``PATH``, then in the cache; ``RESCORER_KENLM_BUILD=0`` turns the build off (lookup only).
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from rescorer.core.errors import KenLMToolError
from rescorer.core.io import sha256_of

logger = logging.getLogger(__name__)

PROGRAMS = ("lmplz", "build_binary")
KENLM_VERSION = "0.3.0"
KENLM_URL = (
    "https://files.pythonhosted.org/packages/02/6e/"
    "f4e159cef39ea4ef2244b4aa32857d447d60a5d0ee269e1b1f8d3723c03e/kenlm-0.3.0.tar.gz"
)
KENLM_SHA256 = "c4628bb9fb63c8a6f9240035b8b037385cfc404cb72e933cf48878291edac1e8"
# KenLM's own default; orders up to this are what ngram build accepts
KENLM_MAX_ORDER = 6
APT_PACKAGES = (
    "cmake g++ libboost-program-options-dev libboost-system-dev libboost-thread-dev "
    "libboost-test-dev zlib1g-dev libbz2-dev liblzma-dev"
)


def cache_root() -> Path:
    """The toolkit's user cache: ``$RESCORER_CACHE``, else ``$XDG_CACHE_HOME/rescorer``."""
    env = os.environ.get("RESCORER_CACHE")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "rescorer"


def cache_bin() -> Path:
    """Where the built programs live: ``<cache>/kenlm-<version>/bin``."""
    return cache_root() / f"kenlm-{KENLM_VERSION}" / "bin"


def _executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def lookup(name: str) -> Path | None:
    """The program ``name`` where it is already installed, or None."""
    if name not in PROGRAMS:
        raise ValueError(f"unknown KenLM program {name!r} (expected one of {', '.join(PROGRAMS)})")
    places = []
    env_dir = os.environ.get("RESCORER_KENLM_BIN")
    if env_dir:
        places.append(Path(env_dir) / name)
    places.append(Path(sys.prefix) / "bin" / name)
    for place in places:
        if _executable(place):
            return place
    found = shutil.which(name)
    if found:
        return Path(found)
    cached = cache_bin() / name
    return cached if _executable(cached) else None


def find_program(name: str, build: bool | None = None) -> Path:
    """Path of ``lmplz`` or ``build_binary``, built into the cache first when it is nowhere.

    ``build`` None follows ``$RESCORER_KENLM_BUILD`` (default on).
    """
    found = lookup(name)
    if found is not None:
        return found
    if build is None:
        build = os.environ.get("RESCORER_KENLM_BUILD", "1") != "0"
    if not build:
        raise KenLMToolError(
            f"KenLM program {name!r} not found (looked in $RESCORER_KENLM_BIN, {sys.prefix}/bin, "
            f"PATH and {cache_bin()}); `rescorer ngram setup` builds it"
        )
    build_programs()
    return cache_bin() / name


def _missing_build_tools() -> list[str]:
    missing = [tool for tool in ("cmake", "make") if shutil.which(tool) is None]
    if not any(shutil.which(cxx) for cxx in ("c++", "g++", "clang++")):
        missing.append("a C++ compiler")
    return missing


@contextlib.contextmanager
def _locked(folder: Path) -> Iterator[None]:
    """One builder at a time per cache (a second waits, then finds the programs built)."""
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _download(dest: Path) -> None:
    """The pinned source package into ``dest`` (checked by SHA-256; a bad copy is removed)."""
    if dest.is_file() and sha256_of(dest) == KENLM_SHA256:
        return
    logger.info("downloading kenlm-%s source package from PyPI", KENLM_VERSION)
    part = dest.with_name(dest.name + ".part")
    try:
        with urllib.request.urlopen(KENLM_URL, timeout=120) as response, open(part, "wb") as out:
            shutil.copyfileobj(response, out)
    except OSError as err:
        part.unlink(missing_ok=True)
        raise KenLMToolError(
            f"cannot download {KENLM_URL} ({err}); put kenlm-{KENLM_VERSION}.tar.gz in "
            f"{dest.parent} by hand, or point RESCORER_KENLM_BIN at a folder holding lmplz and "
            "build_binary"
        ) from None
    digest = sha256_of(part)
    if digest != KENLM_SHA256:
        part.unlink(missing_ok=True)
        raise KenLMToolError(
            f"{KENLM_URL}: SHA-256 {digest}, expected {KENLM_SHA256}; download refused"
        )
    part.replace(dest)


def _run(cmd: list[str], cwd: Path, what: str) -> None:
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    if proc.returncode != 0:
        lines = [ln.strip() for ln in (proc.stderr + proc.stdout).splitlines() if ln.strip()]
        errors = [ln for ln in lines if "error" in ln.lower() or "could not" in ln.lower()]
        said = (errors or lines or ["no output"])[0]
        raise KenLMToolError(
            f"building KenLM's programs failed at {what} ({said}); it needs cmake, a C++ compiler, "
            f"Boost and zlib (Debian/Ubuntu: apt-get install {APT_PACKAGES})"
        )


def build_programs(jobs: int | None = None) -> Path:
    """Build ``lmplz`` and ``build_binary`` into :func:`cache_bin` (once); return that folder."""
    target = cache_bin()
    root = target.parent
    with _locked(root):
        if all(_executable(target / name) for name in PROGRAMS):
            return target
        missing = _missing_build_tools()
        if missing:
            raise KenLMToolError(
                f"KenLM's lmplz and build_binary are not installed and building them needs "
                f"{', '.join(missing)} (Debian/Ubuntu: apt-get install {APT_PACKAGES}); or point "
                "RESCORER_KENLM_BIN at a folder holding them"
            )
        tarball = root / f"kenlm-{KENLM_VERSION}.tar.gz"
        _download(tarball)
        jobs = jobs or os.cpu_count() or 2
        logger.warning(
            "building KenLM's lmplz and build_binary into %s (once; a few minutes on %d cores)",
            target,
            jobs,
        )
        with tempfile.TemporaryDirectory(prefix="kenlm-build-", dir=root) as tmp:
            src = Path(tmp) / "src"
            with tarfile.open(tarball) as archive:
                if hasattr(tarfile, "data_filter"):  # Python >= 3.10.12: no links out, no devices
                    archive.extractall(src, filter="data")
                else:  # pragma: no cover - the pinned, checksummed package only
                    archive.extractall(src)  # noqa: S202
            (top,) = [p for p in src.iterdir() if p.is_dir()]
            build = top / "build"
            build.mkdir()
            _run(
                [
                    "cmake",
                    "..",
                    "-DCMAKE_BUILD_TYPE=Release",
                    f"-DKENLM_MAX_ORDER={KENLM_MAX_ORDER}",
                ],
                build,
                "cmake",
            )
            _run(["make", f"-j{jobs}", *PROGRAMS], build, "make")
            staged = Path(tmp) / "bin"
            staged.mkdir()
            for name in PROGRAMS:
                shutil.copy2(build / "bin" / name, staged / name)
            if target.exists():
                shutil.rmtree(target)
            staged.replace(target)
        logger.warning("KenLM programs ready in %s", target)
    return target
