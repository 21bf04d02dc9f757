"""Reading an export: its metadata (:class:`OnnxMeta`) and an ONNX Runtime session on a device.

numpy and ONNX Runtime only: the runtime adapter (:mod:`rescorer.lms.onnx`) and the parity
check (:mod:`rescorer.export.parity`) both open exports through here, so a decoder-side user needs
no torch.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import onnxruntime as ort

from rescorer.core.context_key import ContextField
from rescorer.core.errors import InputError
from rescorer.core.io import read_tokens
from rescorer.core.runtime import threads as process_threads
from rescorer.export.format import (
    FORMAT,
    FORMAT_VERSION,
    KEY_BLANK_ID,
    KEY_CONTEXT_DIM,
    KEY_CONTEXT_VARIABLES,
    KEY_CONTEXTS,
    KEY_EXPECTED_VECTOR,
    KEY_FORMAT,
    KEY_FORMAT_VERSION,
    KEY_HISTORY_FIELD,
    KEY_KIND,
    KEY_TOKEN_IDS,
    KEY_VECTOR_FIELD,
    KEY_VOCAB_FILE,
    KINDS,
    SCORER_KINDS,
    TOKEN_IDS,
    VECTOR_KINDS,
)

logger = logging.getLogger(__name__)

CPU = "CPUExecutionProvider"
CUDA = "CUDAExecutionProvider"
_ORT_DEFAULT_SEVERITY = 2  # ONNX Runtime's default logger severity (warning)


@dataclass(frozen=True)
class OnnxMeta:
    """The metadata properties of an export, parsed and checked."""

    # "step" | "multi" | "scorer" | "multi-scorer".
    kind: str
    # V, and the ids of <s>, </s>, <unk> and of the padding.
    vocab_size: int
    sos_id: int
    eos_id: int
    unk_id: int
    pad_id: int
    # LSTM layers and state size d (h0/c0 are (num_layers, N, hidden_size)).
    num_layers: int
    hidden_size: int
    # The model's context variables.
    fields: tuple[ContextField, ...]
    # Context records in context_id order (single-context exports: the folded one).
    contexts: tuple[dict[str, Any], ...]
    # File name of the vocabulary, in the model's folder.
    vocab_file: str
    # Whose ids x and the outputs are: "toolkit" (the model's own) or "asr" (an ASR model's
    # token set, decoder kinds only; the vocabulary file is then its tokens in id order).
    token_ids: str = "toolkit"
    # The ASR token set's blank id ("asr" exports), else None.
    blank_id: int | None = None
    # The vector kinds: the width k of the context_vector input, the context-record field a
    # vector is read from, and the vector of a record without one (the expected context).
    context_dim: int = 0
    vector_field: str = ""
    expected_vector: tuple[float, ...] = ()
    # A history model's field (its previous utterances run through the graph first); "": none.
    history: str = ""

    @property
    def multi(self) -> bool:
        return self.kind.startswith("multi")

    @property
    def vector(self) -> bool:
        """True for the kinds with a context_vector input (the context embedding per row)."""
        return self.kind in VECTOR_KINDS

    @property
    def scorer(self) -> bool:
        return self.kind in SCORER_KINDS

    @classmethod
    def from_props(cls, props: Mapping[str, str], path: Path) -> OnnxMeta:
        def get(key: str) -> str:
            if key not in props:
                raise ValueError(
                    f"{path}: metadata property {key!r} missing; expected an export of "
                    f"`rescorer export` (format {FORMAT!r})"
                )
            return props[key]

        def integer(key: str) -> int:
            try:
                return int(get(key))
            except ValueError:
                raise ValueError(
                    f"{path}: metadata {key!r}: expected an integer, got {props[key]!r}"
                ) from None

        def parsed(key: str) -> Any:
            try:
                return json.loads(get(key))
            except json.JSONDecodeError:
                raise ValueError(
                    f"{path}: metadata {key!r}: expected JSON, got {props[key]!r}"
                ) from None

        if get(KEY_FORMAT) != FORMAT:
            raise ValueError(
                f"{path}: metadata format: expected {FORMAT!r}, got {props[KEY_FORMAT]!r}"
            )
        if integer(KEY_FORMAT_VERSION) != FORMAT_VERSION:
            raise ValueError(
                f"{path}: metadata format_version: expected {FORMAT_VERSION}, "
                f"got {props[KEY_FORMAT_VERSION]!r}"
            )
        kind = get(KEY_KIND)
        if kind not in KINDS:
            raise ValueError(f"{path}: metadata export_kind: expected one of {KINDS}, got {kind!r}")
        fields = parsed(KEY_CONTEXT_VARIABLES)
        contexts = parsed(KEY_CONTEXTS)
        if not isinstance(fields, list) or not isinstance(contexts, list) or not contexts:
            raise ValueError(
                f"{path}: metadata context_variables and contexts: expected JSON lists "
                f"(contexts non-empty), got {props[KEY_CONTEXT_VARIABLES]!r}, "
                f"{props[KEY_CONTEXTS]!r}"
            )
        if not all(isinstance(c, dict) for c in contexts):
            raise ValueError(f"{path}: metadata contexts: expected a list of JSON objects")
        vocab_file = get(KEY_VOCAB_FILE)
        if not vocab_file or Path(vocab_file).name != vocab_file or vocab_file in (".", ".."):
            raise ValueError(
                f"{path}: metadata vocab_file: expected a file name in the model's folder, "
                f"got {vocab_file!r}"
            )
        token_ids = props.get(KEY_TOKEN_IDS, "toolkit")  # exports before it had none
        if token_ids not in TOKEN_IDS:
            raise ValueError(
                f"{path}: metadata {KEY_TOKEN_IDS}: expected one of {TOKEN_IDS}, got {token_ids!r}"
            )
        vector: dict[str, Any] = {}
        if kind in VECTOR_KINDS:
            dim = integer(KEY_CONTEXT_DIM)
            expected = parsed(KEY_EXPECTED_VECTOR)
            ok = isinstance(expected, list) and len(expected) == dim >= 1
            if not ok or not all(
                isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
                for x in expected
            ):
                raise ValueError(
                    f"{path}: metadata {KEY_EXPECTED_VECTOR}: expected {dim} finite numbers "
                    f"({KEY_CONTEXT_DIM}), got {props[KEY_EXPECTED_VECTOR][:80]!r}"
                )
            field = get(KEY_VECTOR_FIELD)
            if not field:
                raise ValueError(f"{path}: metadata {KEY_VECTOR_FIELD}: expected a field name")
            vector = {
                "context_dim": dim,
                "vector_field": field,
                "expected_vector": tuple(float(x) for x in expected),
            }
        history = props.get(KEY_HISTORY_FIELD, "")
        if history and kind in SCORER_KINDS:
            raise ValueError(
                f"{path}: metadata {KEY_HISTORY_FIELD} {history!r} on a {kind!r} export: a "
                "history model needs a state input (a step kind)"
            )
        return cls(
            **vector,
            history=history,
            token_ids=token_ids,
            blank_id=integer(KEY_BLANK_ID) if token_ids == "asr" else None,
            kind=kind,
            vocab_size=integer("vocab_size"),
            sos_id=integer("sos_id"),
            eos_id=integer("eos_id"),
            unk_id=integer("unk_id"),
            pad_id=integer("pad_id"),
            num_layers=integer("num_layers"),
            hidden_size=integer("hidden_size"),
            fields=tuple(ContextField.from_json(f) for f in fields),
            contexts=tuple(contexts),
            vocab_file=vocab_file,
        )


def _cuda_index(device: str) -> int:
    if device == "cuda":
        return 0
    try:
        index = int(device.split(":", 1)[1])
    except (IndexError, ValueError):
        index = -1
    if index < 0:
        raise ValueError(f"bad device {device!r}: expected auto, cpu, cuda or cuda:N")
    return index


def create_session(
    path: str | Path, device: str | None = None, threads: int | None = None
) -> tuple[ort.InferenceSession, str]:
    """An ONNX Runtime session for ``path`` on ``device`` -> (session, "cpu" | "cuda:N")."""
    device = "auto" if device is None else str(device)
    if device not in ("auto", "cpu") and not device.startswith("cuda"):
        raise ValueError(f"bad device {device!r}: expected auto, cpu, cuda or cuda:N")
    options = ort.SessionOptions()
    options.log_severity_level = 3  # errors only: no per-session warnings on stderr
    if threads is None:  # the CLI's --threads (rescorer.core.runtime), else ONNX Runtime's own
        threads = process_threads()
    if threads is not None:
        if threads < 1:
            raise ValueError(f"threads must be >= 1, got {threads}")
        options.intra_op_num_threads = threads
    index = 0 if device in ("auto", "cpu") else _cuda_index(device)
    want_cuda = device != "cpu" and CUDA in ort.get_available_providers()
    if device.startswith("cuda") and not want_cuda:
        raise ValueError(
            f"device {device!r} asked for, but this ONNX Runtime has no CUDA execution provider "
            f"(providers: {', '.join(ort.get_available_providers())})"
        )
    providers: list[Any] = [(CUDA, {"device_id": index}), CPU] if want_cuda else [CPU]
    quiet = device == "auto" and want_cuda
    if quiet:  # an expected failure to load CUDA must not print errors on stderr
        ort.set_default_logger_severity(4)
    try:
        session = ort.InferenceSession(str(path), options, providers=providers)
    except Exception as err:  # onnxruntime raises its own exception types
        raise ValueError(f"{path}: cannot load the ONNX model: {err}") from None
    finally:
        if quiet:
            ort.set_default_logger_severity(_ORT_DEFAULT_SEVERITY)
    got_cuda = CUDA in session.get_providers()
    if want_cuda and not got_cuda:
        if device != "auto":
            raise ValueError(
                f"device {device!r} asked for, but ONNX Runtime could not use CUDA here "
                f"(no GPU, or CUDA/cuDNN libraries missing)"
            )
        logger.info("%s: the CUDA execution provider is not usable here; running on the CPU", path)
    return session, (f"cuda:{index}" if got_cuda else "cpu")


def read_meta(path: str | Path) -> OnnxMeta:
    """The metadata of the export at ``path`` (a CPU session is opened to read it)."""
    session, _ = create_session(path, "cpu", 1)
    return OnnxMeta.from_props(dict(session.get_modelmeta().custom_metadata_map), Path(path))


def check_asr_tokens(path: str | Path, tokens: str | Path) -> OnnxMeta:
    """Refuse the export at ``path`` unless its ids are those of the ASR token set ``tokens``.

    ``tokens`` is the ASR model's tokens.txt (what sherpa-onnx loads beside the LM): every id
    must name the same token in the export's vocabulary file. The first difference is an
    InputError naming ``tokens`` and its line; an export in the toolkit's own ids (``<unk>`` 0)
    never matches an ASR token set (blank, ``<sos/eos>``). Returns the export's metadata.
    """
    from rescorer.lm_models.asr_tokens import (
        read_tokens_txt,  # here: onnx: scoring needs no lm_models
    )

    path = Path(path)
    meta = read_meta(path)
    asr = read_tokens_txt(tokens)
    vocab = read_tokens(path.parent / meta.vocab_file)
    hint = (
        f"{path.name} is in the toolkit's own ids; export the checkpoint trained over {asr.source}"
        f" with rescorer export --kind score-token (or nll) --tokens {asr.source}"
        if meta.token_ids != "asr"
        else f"{path.name} was exported for another ASR token set"
    )
    for i, (want, got) in enumerate(zip(asr.tokens, vocab, strict=False)):
        if want != got:
            asr.fail(i, f"token {want!r} at id {i}, but {path.name} has {got!r} at that id: {hint}")
    if len(asr.tokens) != len(vocab) or meta.token_ids != "asr":
        raise InputError(
            f"{len(asr.tokens)} tokens, but {path.name} has {len(vocab)} ids: {hint}", asr.source
        )
    return meta
