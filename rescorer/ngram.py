"""Building n-gram models with KenLM's ``lmplz`` and ``build_binary``.

The programs are found, or built once from the kenlm source package into a user cache, by
:mod:`rescorer.kenlm_tools`.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from rescorer.core.errors import InputError, KenLMToolError
from rescorer.core.io import check_input_file, read_lines
from rescorer.core.output import TEMP_SUFFIX, atomic_path, check_output_file, clean_stale
from rescorer.kenlm_tools import find_program

logger = logging.getLogger(__name__)

BINARY_TYPES = ("trie", "probing")
# lmplz's -S: a percentage of physical memory or a size with an optional unit (bytes by default)
_MEMORY = re.compile(r"^([0-9]+(?:\.[0-9]+)?)([%bKMGT]?)$")
_UNITS = {"": 1, "b": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
# lmplz's spellings in its own advice -> the toolkit's flags
_FLAG_NAMES = {"--discount_fallback": "--discount-fallback", "--skip_symbols": "--skip-symbols"}


def physical_memory() -> int | None:
    """Bytes of physical memory, or None where the system does not say."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def check_memory(memory: str) -> str:
    """``memory`` when lmplz can take it as -S (a size within physical memory, or 1-100 %)."""
    m = _MEMORY.match(memory)
    expected = "a size such as 2G, 500M or 40% (of physical memory)"
    if m is None:
        raise ValueError(f"--memory: expected {expected}, got {memory!r}")
    value, unit = float(m.group(1)), m.group(2)
    if unit == "%":
        if not 0 < value <= 100:
            raise ValueError(f"--memory: expected a percentage in (0, 100], got {memory!r}")
        return memory
    size = value * _UNITS[unit]
    total = physical_memory()
    if size < 2**20:
        raise ValueError(f"--memory: expected {expected}, at least 1M, got {memory!r}")
    if total is not None and size > total:
        raise ValueError(
            f"--memory: {memory} is more than this machine's {total / 2**30:.1f} GiB of memory"
        )
    return memory


@dataclass(frozen=True)
class NgramOptions:
    """Options for :func:`build_ngram`, mirroring lmplz's."""

    # n-gram order (lmplz -o); KenLM is built with a maximum order of 6.
    order: int = 4
    # Count thresholds per order (lmplz --prune): n-grams of order i+1 seen <= prune[i] times
    # are dropped. Unigrams cannot be pruned, so prune[0] must be 0. Empty: no pruning.
    prune: tuple[int, ...] = ()
    # Memory for lmplz's sort (lmplz -S), e.g. "2G" or "40%".
    memory: str = "2G"
    # Use lmplz's fallback discounts when the counts-of-counts cannot give them (tiny corpora).
    discount_fallback: bool = False
    # Binary format from build_binary ("trie" is compact, "probing" is fastest); None keeps ARPA.
    binary: str | None = "trie"
    # Turn <s>, </s> and <unk> in the text into whitespace (lmplz refuses them otherwise).
    skip_symbols: bool = False
    # Folder for lmplz's temporary files (default: next to the output).
    temp_dir: Path | None = None
    # Further lmplz arguments, passed as given.
    extra_args: tuple[str, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        check_memory(self.memory)
        if not 1 <= self.order <= 6:
            raise ValueError(f"order must be between 1 and 6 (KenLM's max), got {self.order}")
        if self.prune:
            if len(self.prune) > self.order:
                raise ValueError(
                    f"prune has {len(self.prune)} thresholds but the order is {self.order}"
                )
            if self.prune[0] != 0:
                raise ValueError(f"unigrams cannot be pruned: prune[0] must be 0, got {self.prune}")
            if any(b < a for a, b in zip(self.prune, self.prune[1:], strict=False)):
                raise ValueError(f"prune thresholds must not decrease, got {self.prune}")
        if self.binary is not None and self.binary not in BINARY_TYPES:
            raise ValueError(f"binary must be one of {BINARY_TYPES} or None, got {self.binary!r}")


def _toolkit_flags(text: str) -> str:
    for theirs, ours in _FLAG_NAMES.items():
        text = text.replace(theirs, ours)
    return text


_PR_SET_PDEATHSIG = 1
_STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}


def _dies_with(parent: int) -> Callable[[], None] | None:
    """A ``preexec_fn`` that makes the child get SIGKILL when ``parent`` dies (Linux's
    ``PR_SET_PDEATHSIG``), so that a ``kill -9`` of a build leaves no lmplz running; None where
    the system has no ``prctl``."""
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up here, not in the child
    except (OSError, AttributeError):
        return None
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]

    def setup() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:  # the parent died before the call: no signal will come
            os._exit(1)

    return setup


class _Stopped(SystemExit):
    """This process got SIGTERM or SIGHUP while a tool ran (exit status 128 + the signal)."""


@contextlib.contextmanager
def _signals_stop() -> Iterator[None]:
    """SIGTERM and SIGHUP raise :class:`_Stopped` meanwhile (instead of ending the process at
    once), so that the tool is ended and the temporaries removed on the way out."""
    if threading.current_thread() is not threading.main_thread():
        yield  # handlers can only be set from the main thread
        return

    def stop(signum: int, _frame: object) -> None:
        raise _Stopped(128 + signum)

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _run(cmd: Sequence[str], stdin_path: Path | None = None, texts: Sequence[Path] = ()) -> None:
    """Run a KenLM program; it ends with this process (killed, stopped by a signal or ^C)."""
    logger.info("running: %s", " ".join(map(str, cmd)))
    stdin = open(stdin_path, "rb") if stdin_path else subprocess.DEVNULL  # noqa: SIM115
    try:
        with _signals_stop():
            # ^C, SIGTERM and SIGHUP wait (blocked) while the child starts, so that none lands
            # between the fork and `child` being known; the child gets the mask as it was
            mask = signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)
            dies_with = _dies_with(os.getpid())

            def child_setup() -> None:
                signal.pthread_sigmask(signal.SIG_SETMASK, mask)
                if dies_with is not None:
                    dies_with()

            try:
                child = subprocess.Popen(
                    [str(c) for c in cmd],
                    stdin=stdin,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                    preexec_fn=child_setup,
                )
            except BaseException:
                signal.pthread_sigmask(signal.SIG_SETMASK, mask)
                raise
            try:
                signal.pthread_sigmask(signal.SIG_SETMASK, mask)  # a pending signal lands here
                stdout, stderr = child.communicate()
            except BaseException:  # ^C, SIGTERM, SIGHUP: the tool goes too
                child.kill()
                child.wait()
                raise
        proc = subprocess.CompletedProcess(child.args, child.returncode, stdout, stderr)
    finally:
        if stdin_path:
            stdin.close()
    for line in proc.stderr.splitlines():
        if line.strip():
            logger.debug("%s: %s", Path(cmd[0]).name, line)
    if proc.returncode != 0:
        lines = [ln.strip() for ln in proc.stderr.splitlines() if ln.strip()]
        if "BadDiscountException" in proc.stderr:
            # the counts-of-counts of a small or artificial text: a data problem, said in one line
            raise InputError(
                "lmplz cannot estimate Kneser-Ney discounts from this text (too small or "
                "artificial: "
                + next((ln for ln in lines if ln.startswith("Could not")), "counts missing")
                + "); give more text, or rerun with --discount-fallback",
                texts[0] if len(texts) == 1 else None,
            )
        said = _toolkit_flags(lines[-1] if lines else "no message")
        raise KenLMToolError(
            f"{Path(cmd[0]).name} failed (exit {proc.returncode}): {said} "
            "(rerun with -vv for its whole output)"
        )


def write_corpus(texts: Sequence[Path], corpus: Path) -> None:
    """The training texts as one LF-separated UTF-8 file for lmplz, read through the input
    layer: a byte-order mark and CR line ends are normalised, blank lines left out (the same
    model with or without them); binary data, UTF-16 and undecodable bytes are refused with
    file:line, and so is a text without a word."""
    with open(corpus, "w", encoding="utf-8", newline="\n") as dst:
        for text in texts:
            words = 0
            for _, line in read_lines(text):
                n = len(line.split())
                if n == 0:  # a blank line is no sentence (lmplz would count "<s> </s>")
                    continue
                words += n
                dst.write(line + "\n")
            if words == 0:
                raise InputError(
                    "expected training text (one sentence per line), got no words", text
                )


def build_ngram(texts: Iterable[Path], out: Path, options: NgramOptions = NgramOptions()) -> Path:
    """Train an n-gram on ``texts`` (one sentence per line, tokens split by spaces).

    Writes ``out`` (ARPA when ``options.binary`` is None, else a KenLM binary) through a temp file
    in the same folder, so a failed build leaves any earlier model in place. Returns ``out``.
    """
    texts = [check_input_file(t) for t in texts]
    if not texts:
        raise ValueError("no training text given")
    lmplz = find_program("lmplz")
    build_binary = find_program("build_binary") if options.binary else None
    out = Path(out)
    check_output_file(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    # Named like the output layer's temporaries, so a killed build's folder is cleaned later:
    # here, before this build makes its own, and by any command writing in the folder.
    clean_stale(out)
    if options.temp_dir:
        clean_stale(Path(options.temp_dir) / out.name)
    with tempfile.TemporaryDirectory(
        prefix=f".{out.name}.{os.getpid()}.", suffix=TEMP_SUFFIX, dir=options.temp_dir or out.parent
    ) as tmp_str:
        tmp = Path(tmp_str)
        corpus = tmp / "corpus.txt"
        write_corpus(texts, corpus)
        arpa = tmp / "model.arpa"
        cmd: list[str] = [str(lmplz), "-o", str(options.order), "-S", options.memory]
        cmd += ["-T", str(tmp), "--arpa", str(arpa)]
        if options.prune:
            cmd += ["--prune", *map(str, options.prune)]
        if options.discount_fallback:
            cmd.append("--discount_fallback")
        if options.skip_symbols:
            cmd.append("--skip_symbols")
        cmd += list(options.extra_args)
        _run(cmd, stdin_path=corpus, texts=texts)
        if build_binary is None:
            result = arpa
        else:
            result = tmp / "model.bin"
            _run([str(build_binary), "-S", options.memory, options.binary, str(arpa), str(result)])
        with atomic_path(out) as staged:
            shutil.move(str(result), staged)
    logger.info("wrote %s (%.1f MiB)", out, out.stat().st_size / 2**20)
    return out
