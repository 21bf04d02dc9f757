"""Building n-gram models with KenLM's ``lmplz`` and ``build_binary``.

The programs are found, or built once from the kenlm source package into a user cache, by
:mod:`rescorer.kenlm_tools`.

The output's name says its format, as KenLM users name their files (:func:`model_format`):
``.arpa`` is ARPA text, ``.arpa.gz`` gzipped ARPA text, ``.bin``, ``.binary``, ``.klm`` and
``.mmap`` a KenLM binary (``build_binary``'s trie or probing structure). The training text is
plain (one sentence per line), Kaldi ``id words``, ``id<TAB>sentence`` (tsv) or sclite trn
(:data:`TRAINING_TEXT_FORMATS`), optionally normalised as ``wer``, ``rescore`` and
``keyboard-eval`` normalise (``--normalize``, :mod:`rescorer.normalize`).
"""

from __future__ import annotations

import contextlib
import ctypes
import gzip
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
from rescorer.normalize import get_normalizer
from rescorer.refs import TRN_ID

logger = logging.getLogger(__name__)

BINARY_TYPES = ("trie", "probing")
# Names of the output, by format (the name of a KenLM binary varies: these are the usual ones)
ARPA_SUFFIXES = (".arpa", ".arpa.gz")
BINARY_SUFFIXES = (".bin", ".binary", ".klm", ".mmap")
TRAINING_TEXT_FORMATS = ("plain", "kaldi", "tsv", "trn")
"""Training text: a sentence per line; Kaldi ``id words``; ``id<TAB>sentence``; sclite trn
(``words (id)``). The ids are dropped: lmplz sees the words only."""
# Words lmplz refuses in its text (unless --skip-symbols)
SPECIAL_WORDS = frozenset({"<s>", "</s>", "<unk>"})
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
    # Layout of the training texts (TRAINING_TEXT_FORMATS); the ids are dropped.
    text_format: str = "plain"
    # Text normaliser spec applied to every sentence (rescorer.normalize; "none": as written).
    normalize: str = "none"

    def __post_init__(self) -> None:
        check_memory(self.memory)
        if self.text_format not in TRAINING_TEXT_FORMATS:
            raise ValueError(
                f"text_format must be one of {TRAINING_TEXT_FORMATS}, got {self.text_format!r}"
            )
        get_normalizer(self.normalize)  # ValueError for a bad spec
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


def model_format(out: str | Path, arpa: bool | None = None) -> str:
    """The format the output's name asks for: ``"arpa"``, ``"arpa.gz"`` or ``"binary"``.

    ``arpa`` True (``--arpa``) asks for ARPA text whatever the name, except a binary's name;
    a name of no known format is refused unless ``arpa`` is True. ValueError (one line, naming
    the suffixes expected) for a name that contradicts ``arpa`` or says no format.
    """
    name = Path(out).name.lower()
    expected = (
        f"expected a name ending in {' or '.join(ARPA_SUFFIXES)} (ARPA text) or "
        f"{', '.join(BINARY_SUFFIXES)} (KenLM binary)"
    )
    if name.endswith(".arpa.gz"):
        return "arpa.gz"
    if name.endswith(".arpa"):
        return "arpa"
    if name.endswith(BINARY_SUFFIXES):
        if arpa:
            raise ValueError(
                f"{out}: --arpa writes ARPA text but the name is a binary's; {expected}"
            )
        return "binary"
    if arpa:
        return "arpa"
    raise ValueError(f"{out}: cannot tell the model format from the name: {expected}")


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


# How long the wait for a KenLM program stays in one system call. A ^C or SIGTERM that the kernel
# hands to another thread (numpy's OpenBLAS threads, a progress bar's) runs Python's handler
# there, and that does not wake the main thread blocked reading the program's output: coming
# back to the interpreter this often lets the handler's exception be raised where it is caught.
_WAIT_SLICE_SECONDS = 0.25


def _communicate(child: subprocess.Popen) -> tuple[str, str]:
    """``child.communicate()`` in slices (see :data:`_WAIT_SLICE_SECONDS`); no output is lost
    between them (``communicate`` resumes after a ``TimeoutExpired``)."""
    while True:
        try:
            return child.communicate(timeout=_WAIT_SLICE_SECONDS)
        except subprocess.TimeoutExpired:
            continue


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
                stdout, stderr = _communicate(child)
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
            logger.debug("%s: %s", Path(cmd[0]).name, _toolkit_flags(line))
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


def training_sentence(line: str, text_format: str, path: Path, lineno: int) -> str:
    """The sentence of one line of training text in ``text_format`` (its id dropped)."""
    if text_format == "plain":
        return line
    if text_format == "kaldi":
        parts = line.split(None, 1)
        return parts[1] if len(parts) > 1 else ""
    if text_format == "tsv":
        cols = line.split("\t")
        if len(cols) != 2:
            raise InputError(
                f"expected 'id<TAB>sentence' (--text-format tsv), got {len(cols)} "
                "tab-separated columns",
                path,
                lineno,
            )
        return cols[1]
    m = TRN_ID.search(line)
    if m is None:
        raise InputError(
            "expected a trn line 'words (id)' (--text-format trn), got no '(id)' at the end",
            path,
            lineno,
        )
    return line[: m.start()]


def write_corpus(
    texts: Sequence[Path],
    corpus: Path,
    text_format: str = "plain",
    normalize: str = "none",
    skip_symbols: bool = False,
) -> None:
    """The training texts as one LF-separated UTF-8 file for lmplz, read through the input
    layer: a byte-order mark and CR line ends are normalised, blank lines left out (the same
    model with or without them); binary data, UTF-16 and undecodable bytes are refused with
    file:line, and so is a text without a word. Each line's sentence is taken as
    ``text_format`` says and normalised by ``normalize``; without ``skip_symbols``, a ``<s>``,
    ``</s>`` or ``<unk>`` in it is refused with file:line (lmplz would stop at it)."""
    normalizer = get_normalizer(normalize)
    with open(corpus, "w", encoding="utf-8", newline="\n") as dst:
        for text in texts:
            words = 0
            for lineno, line in read_lines(text):
                if not line.strip():
                    continue
                sentence = training_sentence(line, text_format, text, lineno)
                if not normalizer.is_identity:
                    sentence = normalizer.text(sentence)
                tokens = sentence.split()
                if not tokens:  # a blank line is no sentence (lmplz would count "<s> </s>")
                    continue
                if not skip_symbols:
                    special = next((t for t in tokens if t in SPECIAL_WORDS), None)
                    if special is not None:
                        raise InputError(
                            f"expected no <s>, </s> or <unk> in training text "
                            f"(lmplz refuses them), got {special!r}; rerun with --skip-symbols "
                            "to read them as spaces",
                            text,
                            lineno,
                        )
                words += len(tokens)
                dst.write(" ".join(tokens) + "\n")
            if words == 0:
                raise InputError(
                    "expected training text (one sentence per line), got no words", text
                )


def build_ngram(texts: Iterable[Path], out: Path, options: NgramOptions = NgramOptions()) -> Path:
    """Train an n-gram on ``texts`` (one sentence per line, tokens split by spaces; see
    ``options.text_format`` and ``options.normalize``).

    Writes ``out`` (ARPA when ``options.binary`` is None, else a KenLM binary) through a temp file
    in the same folder, so a failed build leaves any earlier model in place. Returns ``out``.
    A name ending in ``.arpa.gz`` is written gzipped. A name that says one format
    (:func:`model_format`) while ``options`` ask for the other is a ValueError: ``x.arpa``
    never holds a binary.
    """
    texts = [check_input_file(t) for t in texts]
    if not texts:
        raise ValueError("no training text given")
    out = Path(out)
    try:
        named: str | None = model_format(out)
    except ValueError:
        named = None  # a name of no known format: the options decide (the CLI refuses it)
    if named == "binary" and options.binary is None:
        raise ValueError(f"{out}: the name is a KenLM binary's but binary=None asks for ARPA")
    if named in ("arpa", "arpa.gz") and options.binary is not None:
        raise ValueError(
            f"{out}: the name is an ARPA file's but binary={options.binary!r} asks for a "
            "binary; pass binary=None, or name it .bin"
        )
    lmplz = find_program("lmplz")
    build_binary = find_program("build_binary") if options.binary else None
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
        write_corpus(texts, corpus, options.text_format, options.normalize, options.skip_symbols)
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
        if build_binary is None and named == "arpa.gz":
            result = tmp / "model.arpa.gz"
            with open(arpa, "rb") as src, gzip.open(result, "wb") as dst:
                shutil.copyfileobj(src, dst, 2**20)
        elif build_binary is None:
            result = arpa
        else:
            result = tmp / "model.bin"
            _run([str(build_binary), "-S", options.memory, options.binary, str(arpa), str(result)])
        with atomic_path(out) as staged:
            shutil.move(str(result), staged)
    logger.info("wrote %s (%.1f MiB)", out, out.stat().st_size / 2**20)
    return out
