"""KenLM n-gram models (ARPA or binary) behind the LanguageModel contract (``kenlm:PATH``).

KenLM returns log10 probabilities; :meth:`KenLM._ln` is the one place in the toolkit that turns
them into natural logs.

Loading an ARPA file, KenLM's C++ prints a progress bar and "Loading the LM will be faster if
you build a binary file." on stderr; with ``rescorer -q`` (:func:`rescorer.core.runtime.quiet`)
the model is loaded with both turned off.

A model's words (:func:`kenlm_words`): an ARPA file's unigrams, or the strings a KenLM binary
stores at its end (``build_binary`` writes them unless run with ``-v``; the header says so).
"""

from __future__ import annotations

import contextlib
import gzip
import itertools
import logging
import mmap
import struct
import tempfile
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from rescorer.core import runtime
from rescorer.core.constants import BOS, EOS, LN10
from rescorer.core.errors import InputError
from rescorer.core.io import read_lines
from rescorer.lms.contract import Context, LanguageModel, LMSpec
from rescorer.text import CASE_MODES, case_function, choose_case

logger = logging.getLogger(__name__)

ARPA_HEADER = b"\\data\\"
_UTF8_BOM = b"\xef\xbb\xbf"
# KenLM's binary header (lm/binary_format.cc, format version 5): the 88-byte Sanity block that
# starts with this magic, then FixedWidthParameters (order: uint8 at 88, has_vocabulary: bool
# at 100), then the n-gram counts as uint64 from 108.
BINARY_MAGIC = b"mmap lm http://kheafield.com/code format version 5\n\0"
_ORDER_AT, _HAS_VOCAB_AT, _COUNTS_AT = 88, 100, 108
_ARPA_COMPLAIN_NONE = 2  # lm::ngram::Config::ARPALoadComplain NONE


class KenLM:
    """A KenLM n-gram model (ARPA or binary) behind the LanguageModel contract.

    Sentences are scored with ``<s>`` context and ``</s>`` at the end. Words unknown to the model
    are scored with its ``<unk>`` probability and counted as OOV. Words are mapped to the model's
    case first (``case="auto"`` decides from the data, see :func:`rescorer.text.choose_case`).

    Hypotheses of one N-best list share prefixes; :meth:`token_logprobs` visits sentences in
    sorted order and reuses the states of the longest prefix shared with the previous sentence,
    so a shared prefix is scored once.
    """

    units = "word"

    def __init__(self, path: str | Path, name: str | None = None, case: str = "auto"):
        import kenlm  # imported here: the module is compiled, keep `import rescorer` light

        path = Path(path)
        if not path.exists():
            raise ValueError(f"KenLM model not found: {path}")
        if case not in CASE_MODES:
            raise ValueError(f"case must be one of {CASE_MODES}, got {case!r}")
        logger.info("loading KenLM model %s", path)
        config = kenlm.Config()
        if runtime.quiet():  # no progress bar, no "build a binary" advice on stderr
            config.show_progress = False
            config.arpa_complain = _ARPA_COMPLAIN_NONE
        with normalised_arpa(path) as readable:
            try:
                self._model = kenlm.Model(str(readable), config)
            except (OSError, RuntimeError, ValueError) as err:  # ValueError: undecodable text
                raise InputError(
                    f"expected a KenLM model (ARPA text or binary), got an error: {err}", path
                ) from None
        self._kenlm = kenlm
        self.name = name or path.name.split(".")[0]
        self.path = path
        self.order: int = self._model.order
        self._case = case
        self._map: Callable[[str], str] | None = None if case == "auto" else case_function(case)
        self._vocab_cache: dict[str, bool] = {}
        # Written word -> True when unknown under the case mapping in use (set once, below).
        self._oov_cache: dict[str, bool] = {}

    # -- log base conversion: the single place KenLM's log10 becomes natural log ---------------
    @staticmethod
    def _ln(log10_value: Any) -> Any:
        return log10_value * LN10

    # -- vocabulary and case ---------------------------------------------------------------------
    def _in_vocab(self, word: str) -> bool:
        hit = self._vocab_cache.get(word)
        if hit is None:
            hit = word in self._model
            self._vocab_cache[word] = hit
        return hit

    def _mapping(self, sentences: Sequence[Sequence[str]]) -> Callable[[str], str]:
        if self._map is None:
            mode = choose_case((w for s in sentences for w in s), self._in_vocab)
            self._case = mode
            self._map = case_function(mode)
        return self._map

    @property
    def case(self) -> str:
        """The case mapping in use (``auto`` until the first sentences decided it)."""
        return self._case

    def to_units(self, words: Sequence[str]) -> list[str]:
        """The model's tokens for ``words`` (case-mapped; no ``</s>``)."""
        fn = self._mapping([words])
        return [fn(w) for w in words]

    def oov_flags(self, sentences: Sequence[Sequence[str]]) -> list[np.ndarray]:
        # One vocabulary look-up per distinct written word; then one C-speed pass over all the
        # words, cut into the sentences.
        fn = self._mapping(sentences)
        cache = self._oov_cache
        for words in sentences:
            for w in words:
                if w not in cache:
                    cache[w] = not self._in_vocab(fn(w))
        lengths = list(map(len, sentences))
        flat = np.fromiter(
            map(cache.__getitem__, itertools.chain.from_iterable(sentences)),
            dtype=bool,
            count=sum(lengths),
        )
        ends = list(itertools.accumulate(lengths))
        return [flat[end - n : end] for n, end in zip(lengths, ends, strict=True)]

    # -- scoring ---------------------------------------------------------------------------------
    def token_logprobs(
        self,
        sentences: Sequence[Sequence[str]],
        contexts: Sequence[Context | None] | None = None,
    ) -> list[np.ndarray]:
        # Contexts are accepted for the common contract; an n-gram model ignores them.
        mapped = self._mapped(sentences)
        if not mapped:
            return []
        # Visit sentences in sorted order and keep the states of the previous one: the prefix
        # it shares with the next is not looked up again. pool[i] is the state after i words.
        order = sorted(range(len(mapped)), key=mapped.__getitem__)
        State = self._kenlm.State
        pool = [State() for _ in range(max(map(len, mapped)) + 1)]
        end = State()
        self._model.BeginSentenceWrite(pool[0])
        base_score = self._model.BaseScore
        logps = [0.0] * len(pool)
        out: list[np.ndarray] = [np.empty(0)] * len(mapped)
        prev: tuple[str, ...] = ()
        for idx in order:
            words = mapped[idx]
            n = len(words)
            shared, limit = 0, min(len(prev), n)
            while shared < limit and prev[shared] == words[shared]:
                shared += 1
            for i in range(shared, n):
                logps[i] = base_score(pool[i], words[i], pool[i + 1])
            logps[n] = base_score(pool[n], EOS, end)
            out[idx] = self._ln(np.array(logps[: n + 1], dtype=np.float64))
            prev = words
        return out

    def sentence_logprobs(
        self,
        sentences: Sequence[Sequence[str]],
        contexts: Sequence[Context | None] | None = None,
    ) -> np.ndarray:
        # KenLM's own loop in C++ is the fastest way to whole-sentence totals; it accumulates
        # in single precision, so totals can differ from the token sums by ~1e-4 nats.
        score = self._model.score
        totals = np.fromiter(
            (score(" ".join(words), bos=True, eos=True) for words in self._mapped(sentences)),
            dtype=np.float64,
            count=len(sentences),
        )
        return self._ln(totals)

    def _mapped(self, sentences: Sequence[Sequence[str]]) -> list[tuple[str, ...]]:
        fn = self._mapping(sentences)
        if self._case == "none":
            return [tuple(words) for words in sentences]
        return [tuple(fn(w) for w in words) for words in sentences]

    # -- streaming -------------------------------------------------------------------------------
    def start(self, context: Context | None = None) -> Any:
        state = self._kenlm.State()
        self._model.BeginSentenceWrite(state)
        return state

    def advance(self, states: Sequence[Any], tokens: Sequence[str]) -> tuple[np.ndarray, list]:
        if len(states) != len(tokens):
            raise ValueError(f"got {len(states)} states but {len(tokens)} tokens")
        fn = self._map or case_function("none")
        out = np.empty(len(tokens), dtype=np.float64)
        new_states = []
        for i, (state, tok) in enumerate(zip(states, tokens, strict=True)):
            nxt = self._kenlm.State()
            word = tok if tok in (BOS, EOS) else fn(tok)
            out[i] = self._ln(self._model.BaseScore(state, word, nxt))
            new_states.append(nxt)
        return out, new_states

    def logprobs_after(self, state: Any, units: Sequence[str]) -> np.ndarray:
        """Natural-log probability of each of ``units`` right after the streaming ``state``.

        ``units`` are the model's tokens (already case-mapped, see :meth:`to_units`); unknown
        ones get the ``<unk>`` probability. Used for next-word prediction over a vocabulary
        (:mod:`rescorer.predict`): one call scores every candidate, states are not kept.
        """
        scratch = self._kenlm.State()
        base_score = self._model.BaseScore
        log10 = np.fromiter(
            (base_score(state, w, scratch) for w in units), dtype=np.float64, count=len(units)
        )
        return self._ln(log10)

    def __repr__(self) -> str:
        return f"KenLM({str(self.path)!r}, order={self.order}, case={self._case!r})"


def read_head(path: Path, size: int = 4096) -> bytes:
    """The first ``size`` bytes of ``path`` (decompressed for ``.gz``)."""
    opener = gzip.open if path.name.endswith(".gz") else open
    try:
        with opener(path, "rb") as f:
            return f.read(size)
    except (OSError, EOFError, zlib.error) as err:
        raise InputError(f"cannot read the model file ({err})", path) from None


def is_arpa_text(head: bytes) -> bool:
    """Whether a file starting with ``head`` is ARPA text (``\\data\\`` after a byte-order mark
    and blank lines); KenLM binaries are not."""
    return head.removeprefix(_UTF8_BOM).lstrip().startswith(ARPA_HEADER)


def read_arpa_unigrams(path: str | Path) -> list[str] | None:
    """The unigram words of an ARPA file (``.gz`` too), or None when it is not ARPA text.

    KenLM binaries (and anything else that does not start with ``\\data\\``) give None.
    """
    path = Path(path)
    if not is_arpa_text(read_head(path)):
        return None
    words: list[str] = []
    in_unigrams = False
    for lineno, line in read_lines(path):
        line = line.strip()
        if line.startswith("\\"):
            if in_unigrams:
                break
            in_unigrams = line == "\\1-grams:"
            continue
        if in_unigrams and line:
            parts = line.split()
            if len(parts) < 2:
                raise InputError(f"expected 'logprob word [backoff]', got {line!r}", path, lineno)
            words.append(parts[1])
    return words


def read_binary_words(path: str | Path) -> list[str] | None:
    """The words a KenLM binary stores at its end, ``<unk>`` first, or None when ``path`` is
    not a KenLM binary (no magic). A binary built without its words (``build_binary -v``) or
    whose end does not hold them is an :class:`InputError`."""
    path = Path(path)
    try:
        with open(path, "rb") as f:
            head = f.read(_COUNTS_AT + 8)
            if not head.startswith(BINARY_MAGIC):
                return None
            if len(head) < _COUNTS_AT + 8:
                raise InputError("truncated KenLM binary header", path)
            if not head[_HAS_VOCAB_AT]:
                raise InputError(
                    "this KenLM binary holds no vocabulary (built with build_binary -v): "
                    "list the words of its ARPA file instead",
                    path,
                )
            (unigrams,) = struct.unpack_from("<Q", head, _COUNTS_AT)
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
                return _words_at_end(data, unigrams, path)
    except OSError as err:
        raise InputError(f"cannot read the model file ({err})", path) from None


def _words_at_end(data: mmap.mmap, unigrams: int, path: Path) -> list[str]:
    """The last ``unigrams`` NUL-terminated strings of ``data``, ``<unk>`` first (or the last
    ``unigrams + 1`` when KenLM added an ``<unk>`` the ARPA file did not count). The bytes
    before ``<unk>`` are the model's own, not a NUL: only the end of that string is checked."""
    bad = InputError("expected the vocabulary strings at the end of the KenLM binary", path)
    end = len(data)
    if end == 0 or data[end - 1] != 0:
        raise bad
    tokens: list[bytes] = []
    stop = end - 1  # the NUL ending the last word
    for _ in range(unigrams + 1):
        start = data.rfind(b"\0", 0, stop) + 1
        tokens.append(data[start:stop])
        if start == 0:
            break
        stop = start - 1
    tokens.reverse()
    for count in (unigrams, unigrams + 1):
        if 0 < count <= len(tokens) and tokens[-count].endswith(b"<unk>"):
            words = [b"<unk>", *tokens[len(tokens) - count + 1 :]]
            try:
                return [t.decode("utf-8") for t in words]
            except UnicodeDecodeError:
                raise bad from None
    raise bad


def kenlm_words(path: str | Path) -> list[str]:
    """The words of a KenLM model: an ARPA file's unigrams (``.gz`` too) or the words a binary
    stores (see :func:`read_binary_words`); InputError for anything else."""
    path = Path(path)
    words = read_arpa_unigrams(path)
    if words is None:
        words = read_binary_words(path)
    if words is None:
        raise InputError("expected a KenLM model (ARPA text or a KenLM binary)", path)
    return words


def _needs_normalising(path: Path) -> bool:
    """Whether ``path`` is ARPA text with a byte-order mark or CR line ends (KenLM would read
    the CR as part of every word)."""
    try:
        head = read_head(path)
    except InputError:
        return False  # not ours to judge: KenLM reports what it cannot read
    return is_arpa_text(head) and (head.startswith(_UTF8_BOM) or b"\r" in head)


@contextlib.contextmanager
def normalised_arpa(path: Path) -> Iterator[Path]:
    """``path``, or for an ARPA file with a UTF-8 byte-order mark or CRLF/CR line ends a
    temporary LF copy read through :func:`rescorer.core.io.read_lines` (which refuses NUL and
    undecodable bytes with file:line), so such a file scores exactly like its clean twin."""
    if not _needs_normalising(path):
        yield path
        return
    logger.warning(
        "%s: ARPA with a byte-order mark or CR line ends; reading a normalised copy", path
    )
    with tempfile.TemporaryDirectory(prefix="rescorer-arpa-") as tmp:
        copy = Path(tmp) / "model.arpa"
        with open(copy, "w", encoding="utf-8", newline="\n") as f:
            for _, line in read_lines(path):
                f.write(line + "\n")
        yield copy


def load_kenlm_lm(spec: LMSpec, options: Mapping[str, Any]) -> LanguageModel:
    """The ``kenlm`` loader of :data:`rescorer.lms.LOADERS` (options: case)."""
    return KenLM(spec.path, name=spec.name, case=options.get("case", "auto"))
