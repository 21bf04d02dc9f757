"""KenLM n-gram models (ARPA or binary) behind the LanguageModel contract (``kenlm:PATH``).

KenLM returns log10 probabilities; :meth:`KenLM._ln` is the one place in the toolkit that turns
them into natural logs.
"""

from __future__ import annotations

import contextlib
import gzip
import logging
import tempfile
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from rescorer.core.constants import BOS, EOS, LN10
from rescorer.core.errors import InputError
from rescorer.core.io import read_lines
from rescorer.lms.contract import Context, LanguageModel, LMSpec
from rescorer.text import CASE_MODES, case_function, choose_case

logger = logging.getLogger(__name__)

ARPA_HEADER = b"\\data\\"
_UTF8_BOM = b"\xef\xbb\xbf"


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
        with normalised_arpa(path) as readable:
            try:
                self._model = kenlm.Model(str(readable))
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
        fn = self._mapping(sentences)
        return [
            np.array([not self._in_vocab(fn(w)) for w in words], dtype=bool) for words in sentences
        ]

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
