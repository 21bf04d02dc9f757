"""The LanguageModel contract, the KenLM adapter, and loading models from specs.

Every model the rescorer uses (n-gram, torch, onnx) satisfies :class:`LanguageModel`, so scoring
never branches on the model type. All log-probabilities are natural logs; KenLM's log10 values are
converted in :meth:`KenLM._ln`, the one place that does it.

A model is named on the command line by a spec ``KIND:PATH`` (``kenlm:4gram.bin``), optionally
prefixed by a feature name (``ngram=kenlm:4gram.bin``). :data:`LOADERS` maps each kind to its
loader: a plain dict, extended by the packages that provide more kinds.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from rescorer.constants import BOS, EOS, LN10
from rescorer.text import CASE_MODES, case_function, choose_case

logger = logging.getLogger(__name__)

Context = Mapping[str, Any]
"""A context record of named fields, e.g. ``{"genre": "news", "speaker": "1272"}``."""


@runtime_checkable
class LanguageModel(Protocol):
    """What the rescorer needs from a language model.

    ``token_logprobs`` returns, for each sentence (a sequence of *words*), the natural-log
    probability of each of the model's tokens, ending with the end-of-sentence token. Word models
    return ``len(words) + 1`` values; subword or character models return one value per unit.
    """

    name: str
    units: str  # "word" | "subword" | "char"

    def token_logprobs(
        self,
        sentences: Sequence[Sequence[str]],
        contexts: Sequence[Context | None] | None = None,
    ) -> list[np.ndarray]: ...

    def sentence_logprobs(
        self,
        sentences: Sequence[Sequence[str]],
        contexts: Sequence[Context | None] | None = None,
    ) -> np.ndarray:
        """Natural-log probability of each whole sentence, end-of-sentence included.

        Equal to the sums of :meth:`token_logprobs` up to the model's arithmetic precision; a
        model may compute it faster than the per-token values (rescoring needs only these).
        """
        ...

    def oov_flags(self, sentences: Sequence[Sequence[str]]) -> list[np.ndarray]:
        """Per sentence, a bool per word: True where the model scores it as unknown."""
        ...

    def start(self, context: Context | None = None) -> Any:
        """The state at the start of a sentence."""
        ...

    def advance(self, states: Sequence[Any], tokens: Sequence[str]) -> tuple[np.ndarray, list]:
        """Score ``tokens[i]`` after ``states[i]``: natural-log probs and the next states."""
        ...


@dataclass(frozen=True)
class LMSpec:
    """A parsed model spec ``[NAME=]KIND:PATH``."""

    # Feature name under which the model's scores appear (defaults to the file stem).
    name: str
    # Model kind, a key of LOADERS.
    kind: str
    # Path to the model file or folder.
    path: Path

    @classmethod
    def parse(cls, spec: str) -> LMSpec:
        name = None
        body = spec
        if "=" in spec.split(":", 1)[0]:
            name, body = spec.split("=", 1)
        if ":" not in body:
            raise ValueError(
                f"model spec must be KIND:PATH (kinds: {', '.join(sorted(LOADERS))}), got {spec!r}"
            )
        kind, path_str = body.split(":", 1)
        if kind not in LOADERS:
            raise ValueError(
                f"unknown model kind {kind!r} in {spec!r}; expected one of {sorted(LOADERS)}"
            )
        if not path_str:
            raise ValueError(f"model spec {spec!r} has an empty path")
        path = Path(path_str)
        if not name:
            name = path.name.split(".")[0] or kind
        return cls(name=name, kind=kind, path=path)


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
        try:
            self._model = kenlm.Model(str(path))
        except (OSError, RuntimeError) as err:
            raise ValueError(f"cannot load KenLM model {path}: {err}") from None
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


def _load_kenlm(spec: LMSpec, options: Mapping[str, Any]) -> LanguageModel:
    return KenLM(spec.path, name=spec.name, case=options.get("case", "auto"))


def _load_torch(spec: LMSpec, options: Mapping[str, Any]) -> LanguageModel:
    # Imported here: torch is heavy, and `import rescorer` must not pull it in.
    from rescorer.torch_lm import load_torch_lm

    return load_torch_lm(spec, options)


def _load_onnx(spec: LMSpec, options: Mapping[str, Any]) -> LanguageModel:
    # Imported here: onnxruntime is only needed for onnx models.
    from rescorer.onnx_lm import load_onnx_lm

    return load_onnx_lm(spec, options)


def _load_fnlm(spec: LMSpec, options: Mapping[str, Any]) -> LanguageModel:
    from rescorer.fnlm_lm import load_fnlm_lm  # torch: imported on first use

    return load_fnlm_lm(spec, options)


def _load_lbl(spec: LMSpec, options: Mapping[str, Any]) -> LanguageModel:
    from rescorer.lbl_lm import load_lbl_lm  # torch: imported on first use

    return load_lbl_lm(spec, options)


def _load_cue(spec: LMSpec, options: Mapping[str, Any]) -> LanguageModel:
    from rescorer.cue_lm import load_cue_lm  # torch: imported on first use

    return load_cue_lm(spec, options)


def _load_mix(spec: LMSpec, options: Mapping[str, Any]) -> LanguageModel:
    from rescorer.mixture import load_mixture  # it imports this module

    return load_mixture(spec, options)


LOADERS: dict[str, Callable[[LMSpec, Mapping[str, Any]], LanguageModel]] = {
    "kenlm": _load_kenlm,
    "torch": _load_torch,
    "fnlm": _load_fnlm,
    "cue": _load_cue,
    "lbl": _load_lbl,
    "mix": _load_mix,
    "onnx": _load_onnx,
}
"""Model kind -> loader; torch and onnx import their modules on first use (they are heavy)."""


def load_lm(spec: str | LMSpec, **options: Any) -> LanguageModel:
    """Load the model named by ``spec`` (``[NAME=]KIND:PATH``).

    ``options`` go to the kind's loader (``case`` for word models).
    """
    parsed = spec if isinstance(spec, LMSpec) else LMSpec.parse(spec)
    return LOADERS[parsed.kind](parsed, options)


def count_oov(lm: LanguageModel, sentences: Sequence[Sequence[str]]) -> tuple[int, int]:
    """``(oov_words, words)`` of ``sentences`` under ``lm`` (end-of-sentence not counted)."""
    flags = lm.oov_flags(sentences)
    return int(sum(f.sum() for f in flags)), int(sum(len(f) for f in flags))


def sentence_scores(
    lm: LanguageModel,
    sentences: Sequence[Sequence[str]],
    contexts: Sequence[Context | None] | None = None,
    batch_size: int = 4096,
    progress: Callable[[int], None] | None = None,
) -> np.ndarray:
    """Natural-log sentence probabilities (``</s>`` included), in batches of ``batch_size``.

    ``progress(n)`` is called after each batch with the number of sentences done in it.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    out = np.empty(len(sentences), dtype=np.float64)
    for start in range(0, len(sentences), batch_size):
        batch = sentences[start : start + batch_size]
        ctx = None if contexts is None else contexts[start : start + batch_size]
        out[start : start + len(batch)] = lm.sentence_logprobs(batch, ctx)
        if progress is not None:
            progress(len(batch))
    return out
