"""Export a :class:`rescorer.lm_models.lstm.model.ContextLSTM` checkpoint to ONNX, its contexts
folded in.

The architecture comes from the checkpoint (:func:`rescorer.lm_models.checkpoint.load_checkpoint`);
the context-dependent weights from :meth:`ContextLSTM.adapt` of each context record: W' = W + A and
b' = V c + b of every layer, and the output bias b_out + Q c + one-hot biases. The graph itself
(:mod:`rescorer.export.graph`) is then a plain LSTM. Six kinds of export (:data:`KINDS`):

=============  =====================================================================  ========
kind           inputs -> outputs                                                      contexts
=============  =====================================================================  ========
step           x (N, L), h0, c0 (layers, N, d) -> log_softmax (N, L, V), next_h0,     one
               next_c0 (sequence form of the icefall RNN LM inputs; c0 = memory m)
multi          the same + context_id (N,) int64                                       many
scorer         x (N, L) = <s> w1..wn </s> padded, x_lens (N,) = n + 2                 one
               -> token_logprobs (N, L-1), sentence_logprob (N,)
multi-scorer   the same + context_id (N,)                                             many
nll            x (N, L) = w1..wn padded with 0 (no <s>, </s>), x_lens (N,) = n         one
               -> nll (N,) = -log P(<s> w1..wn </s>) (icefall's state-less RNN LM, the
               form sherpa-onnx's offline LM rescoring loads)
score-token    x (N, L), h0, c0 (layers, N, d) -> log_softmax (N, V) = log p of the     one
               token after x's last position, next_h0, next_c0 (icefall's
               score_token_onnx, the form sherpa-onnx's online LM loads; L = 1 there)
vector-step    step's inputs + context_vector (N, k) float32: the context embedding c,   any
               a row's own (computed once per utterance, e.g. from the previous
               utterances' text: ``rescorer context vectors``)
vector-scorer  scorer's inputs + context_vector (N, k)                                any
=============  =====================================================================  ========

The vector kinds (:mod:`rescorer.export.graph`'s vector form) keep the unadapted weights and the
context parts (V, Z_L, Z_R, Q) and adapt per row from the input vector in the graph, so a decoder
can give every utterance its own context without an export per context; they carry the metadata
``context_dim`` (k), ``context_vector_field`` (the context-record field ``onnx:`` scoring reads
the vector from) and ``expected_context_vector`` (c with every variable missing: the vector of
a record without one). A model with one-hot softmax biases has none (they need the categorical
values, not c).

The decoder kinds (score-token, nll) can speak an ASR model's token ids (``asr_tokens``, from
the checkpoint's ``asr_tokens.txt`` or a tokens.txt; :mod:`rescorer.lm_models.asr_tokens`): the
graph maps the input ids to the model's units and, for score-token, gives the log-probabilities per
ASR id (the blank -inf); the vocabulary file is then the ASR's tokens in id order, and
``vocab_size``, ``sos_id``, ``eos_id``, ``unk_id`` (-1 when there is none) and ``blank_id`` are
the ASR's (``token_ids`` = ``asr``; ``toolkit`` for every other export).

Multi-context exports stack the weights that depend on the context (W' for FactorCell, b' for
ConcatCell and FactorCell, the output bias always) over C contexts and gather them by
``context_id``. Context 0 is always the expected context (every field missing). By default the
context set is every combination of the categorical variables' values, each variable also
missing (so partial records have their own id): prod(n_j + 1) contexts. A model with a numerical
variable needs an explicit list of records (a JSONL file, :func:`read_context_records`).

Metadata properties (strings; JSON where noted) describe the export completely, so that the
``.onnx`` file and its vocabulary file are all a user needs: ``model_type``, ``format``,
``format_version`` (and ``version``, icefall's key), ``export_kind``, ``vocab_size``, ``sos_id``,
``eos_id``, ``unk_id``, ``pad_id``, ``token_ids``, ``num_layers``, ``hidden_size``,
``embedding_dim``, ``mode``,
``layer_norm``, ``context_variables`` (JSON list of {name, kind, values | dim}), ``contexts``
(JSON list of records, index = context id), ``num_contexts``, ``vocab_file`` (the vocabulary's
file name, in the model's folder: one token per line, line i = id i), ``log_base`` (``e``),
and icefall's descriptive keys ``model_author``, ``url`` and ``comment``.

Files are written to a temporary name in the destination folder and renamed into place.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import torch

from rescorer.core.context_key import ContextField, numbers
from rescorer.core.errors import InputError
from rescorer.core.io import read_lines
from rescorer.core.json_input import parse_json
from rescorer.core.output import atomic_write
from rescorer.export.format import (
    DECODER_KINDS,
    FORMAT,
    FORMAT_VERSION,
    HISTORY_KINDS,
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
    LOG_BASE,
    NLL_KIND,
    SCORE_TOKEN_KIND,
    SCORER_KINDS,
    VECTOR_FIELD,
    VECTOR_KINDS,
)
from rescorer.export.graph import (
    OPSET,
    ClassOutputWeights,
    ContextAdaptation,
    LayerWeights,
    LSTMWeights,
    make_model,
    nll_graph,
    score_token_graph,
    scorer_graph,
    step_graph,
)
from rescorer.lm_models.asr_tokens import AsrTokens, checkpoint_asr_tokens
from rescorer.lm_models.checkpoint import load_checkpoint
from rescorer.lm_models.lstm.context import ContextVariable
from rescorer.lm_models.lstm.model import ContextLSTM
from rescorer.lm_models.vocab import BOS_ID, EOS_ID, SPECIAL_TOKENS, UNK_ID

logger = logging.getLogger(__name__)

PAD_ID = EOS_ID  # what the toolkit pads scorer inputs with (any id works: padding is masked)
# Protobuf refuses messages of 2 GiB or more; keep a margin for the graph itself.
MAX_MODEL_BYTES = 2**31 - 2**26

Record = dict[str, Any]


@dataclass(frozen=True)
class ExportOptions:
    """What :func:`export_model` writes."""

    # One of KINDS: "step", "multi", "scorer", "multi-scorer", "nll", "score-token" (see the
    # module docstring).
    kind: str = "step"
    # Single-context kinds: the record folded in ({"genre": "news"}); None = expected context.
    context: Mapping[str, Any] | None = None
    # Multi-context kinds: the records to stack (the expected context is always added, at id 0);
    # None = every combination of categorical values (an error with a numerical variable).
    contexts: tuple[Mapping[str, Any], ...] | None = None
    # ONNX opset of the graphs (17 or later: LayerNormalization).
    opset: int = OPSET
    # Largest number of contexts a multi-context export may stack.
    max_contexts: int = 4096
    # icefall's descriptive metadata: who made the model, and where it is described.
    author: str = "rescorer"
    url: str = ""
    # Decoder kinds (score-token, nll): the ASR token set whose ids the graph takes and gives
    # (the model must have been trained over it); None: the model's own ids.
    asr_tokens: AsrTokens | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"export kind must be one of {KINDS}, got {self.kind!r}")
        if self.asr_tokens is not None and self.kind not in DECODER_KINDS:
            raise ValueError(
                f"ASR token ids are for the kinds a decoder loads {DECODER_KINDS}; kind "
                f"{self.kind!r} keeps the model's own ids (for onnx: models)"
            )
        if self.contexts is not None:
            object.__setattr__(self, "contexts", tuple(self.contexts))
            if not self.multi:
                raise ValueError(
                    f"a list of contexts is for the multi-context kinds (multi, multi-scorer); "
                    f"kind {self.kind!r} folds one context (give it as `context`)"
                )
        if self.context is not None and self.vector:
            raise ValueError(
                f"kind {self.kind!r} takes the context embedding as an input (context_vector): "
                "it folds no context; give none"
            )
        if self.context is not None and self.multi:
            raise ValueError(
                f"kind {self.kind!r} stacks many contexts: give `contexts` (or none for all "
                f"combinations), not a single `context`"
            )
        if not isinstance(self.opset, int) or self.opset < OPSET:
            raise ValueError(f"opset: expected an integer >= {OPSET}, got {self.opset!r}")
        if self.max_contexts < 1:
            raise ValueError(f"max_contexts must be >= 1, got {self.max_contexts}")

    @property
    def multi(self) -> bool:
        """True for the kinds with a context_id input."""
        return self.kind.startswith("multi")

    @property
    def scorer(self) -> bool:
        """True for the sentence scorers (no state in or out)."""
        return self.kind in SCORER_KINDS

    @property
    def vector(self) -> bool:
        """True for the kinds with a context_vector input."""
        return self.kind in VECTOR_KINDS


@dataclass(frozen=True)
class ExportResult:
    """What :func:`export_model` wrote."""

    # The .onnx file.
    path: Path
    # The vocabulary file beside it (one token per line, line i = id i).
    vocab_path: Path
    # The export kind (see KINDS).
    kind: str
    # Context records in context_id order; the one folded context for single-context kinds.
    contexts: tuple[Record, ...]
    # Size of the .onnx file in bytes.
    size_bytes: int
    # The metadata properties written into the model.
    metadata: Mapping[str, str] = field(default_factory=dict)


# -- contexts ---------------------------------------------------------------------------------


def _allowed(var: ContextVariable) -> str:
    if var.kind == "numerical":
        return f"{var.dim} number(s)"
    if var.kind == "text":
        return "a string"
    shown = ", ".join(repr(v) for v in var.values[:30])
    more = f", ... ({len(var.values)} in all)" if len(var.values) > 30 else ""
    return f"one of {shown}{more}"


def normalise_record(model: ContextLSTM, record: Mapping[str, Any] | None) -> Record:
    """``record`` checked against the model's variables, in their order; missing fields left out.

    Strict, unlike scoring: an unknown field or value is a ValueError naming the allowed ones.
    Categorical values become strings, numerical ones lists of floats; text stays a string.
    """
    if record is None:
        return {}
    if not isinstance(record, Mapping):
        raise ValueError(
            f"context record: expected a mapping of field -> value, got {type(record).__name__}"
        )
    variables = {v.name: v for v in model.config.context_vars}
    unknown = [str(k) for k in record if k not in variables]
    if unknown:
        known = sorted(variables) or "none: the model is unadapted"
        raise ValueError(
            f"unknown context field(s) {unknown}; the model's context variables are {known}"
        )
    out: Record = {}
    for var in model.config.context_vars:
        value = record.get(var.name)
        if value is None or (isinstance(value, str) and not value.strip()):
            continue
        if var.kind == "categorical":
            key = str(value) if isinstance(value, int) and not isinstance(value, bool) else value
            if key not in var.values:
                raise ValueError(
                    f"context variable {var.name!r}: unknown value {value!r}; "
                    f"expected {_allowed(var)}"
                )
            out[var.name] = key
        elif var.kind == "text":
            if not isinstance(value, str):
                raise ValueError(
                    f"context variable {var.name!r}: expected {_allowed(var)}, got {value!r:.40}"
                )
            out[var.name] = value
        else:
            out[var.name] = list(numbers(var.name, var.dim, value))
    return out


def _record_key(record: Record) -> str:
    return json.dumps(record, sort_keys=True)


def all_context_records(model: ContextLSTM, limit: int = 4096) -> list[Record]:
    """Every combination of categorical values, each variable also missing; expected first."""
    variables = model.config.context_vars
    numerical = [v.name for v in variables if v.kind != "categorical"]
    if numerical:
        raise ValueError(
            f"context variable(s) {numerical} are numerical (or text): their values cannot be "
            "enumerated; give the contexts to export as a JSONL file of records (--contexts "
            "FILE.jsonl)"
        )
    count = 1
    for v in variables:
        count *= len(v.values) + 1
    if count > limit:
        raise ValueError(
            f"all combinations of the context values make {count} contexts, more than "
            f"{limit}; give the contexts to export as a JSONL file of records "
            f"(--contexts FILE.jsonl)"
        )
    choices = [[None, *v.values] for v in variables]
    records = []
    for combo in itertools.product(*choices):
        records.append(
            {v.name: value for v, value in zip(variables, combo, strict=True) if value is not None}
        )
    return records  # the all-None combination comes first: the expected context


def context_records(
    model: ContextLSTM, records: Sequence[Mapping[str, Any] | None] | None, limit: int = 4096
) -> list[Record]:
    """The context set of a multi-context export: expected context at id 0, no duplicates."""
    if records is None:
        return all_context_records(model, limit)
    out: list[Record] = [{}]
    seen = {_record_key({})}
    for i, record in enumerate(records):
        try:
            rec = normalise_record(model, record)
        except ValueError as err:
            raise ValueError(f"context record {i + 1}: {err}") from None
        key = _record_key(rec)
        if key in seen:
            logger.info("context record %d (%s) is already in the set; skipped", i + 1, key)
            continue
        seen.add(key)
        out.append(rec)
    if len(out) > limit:
        raise ValueError(f"{len(out)} contexts, more than the limit of {limit}")
    return out


def read_context_records(
    path: str | os.PathLike[str], model: ContextLSTM | None = None
) -> list[Record]:
    """Context records from a JSONL file: one JSON object ``{field: value}`` per line.

    Blank lines are skipped. A line that is not a JSON object is an InputError naming the file
    and line; so is a record the ``model`` (when given) does not accept (:func:`normalise_record`).
    """
    path = Path(path)
    records: list[Record] = []
    for lineno, line in read_lines(path):
        if not line.strip():
            continue
        record = parse_json(line, path, lineno)
        if not isinstance(record, dict):
            raise InputError(
                f"expected a JSON object {{field: value}}, got {type(record).__name__}",
                path,
                lineno,
            )
        if model is not None:
            try:
                record = normalise_record(model, record)
            except ValueError as err:
                raise InputError(str(err), path, lineno) from None
        records.append(record)
    if not records:
        raise InputError("no context records in it", path)
    return records


# -- weights ----------------------------------------------------------------------------------


def _np(t: torch.Tensor) -> np.ndarray:
    return t.detach().to(device="cpu", dtype=torch.float32).numpy()


@torch.no_grad()
def lstm_weights(model: ContextLSTM, records: Sequence[Record], multi: bool) -> LSTMWeights:
    """The plain-LSTM weights of ``model`` under ``records`` (one record unless ``multi``).

    Multi-context weights stack only what depends on the context: W' for FactorCell, b' for
    ConcatCell and FactorCell, and the output bias (always, so context_id is always used).
    """
    if not records:
        raise ValueError("expected at least one context record, got none")
    if not multi and len(records) != 1:
        raise ValueError(f"a single-context export folds one record, got {len(records)}")
    mode = model.config.mode
    adapted = [model.adapt([dict(r)]) if model.adaptive else model.adapt(None) for r in records]
    stack_w = multi and mode == "factor"
    stack_b = multi and mode in ("concat", "factor")
    layers = []
    for i, cell in enumerate(model.cells):
        weight = (
            np.stack([_np(a.layers[i][0]) for a in adapted])
            if stack_w
            else _np(adapted[0].layers[i][0])
        )  # (C, 3d, a) | (3d, a)
        bias = (
            np.stack([_np(a.layers[i][1]) for a in adapted])
            if stack_b
            else _np(adapted[0].layers[i][1])
        )  # (C, 3d) | (3d,)
        gain = None if cell.ln_gain is None else _np(cell.ln_gain)
        shift = None if cell.ln_shift is None else _np(cell.ln_shift)
        layers.append(LayerWeights(weight, bias, gain, shift))
    out_bias = (
        np.stack([_np(a.output_bias) for a in adapted]) if multi else _np(adapted[0].output_bias)
    )  # (C, V) | (V,)
    return _with_output(model, tuple(layers), out_bias)


def _with_output(
    model: ContextLSTM,
    layers: tuple[LayerWeights, ...],
    output_bias: np.ndarray,
    adaptation: ContextAdaptation | None = None,
) -> LSTMWeights:
    """``layers`` and ``output_bias`` with the model's embeddings and output layer."""
    embedding = _np(model.embedding.weight)
    out_emb = embedding if model.output_embedding is None else _np(model.output_embedding)
    projection = None if model.L is None else _np(model.L.weight)  # (e, d)
    co = model.class_output
    class_output = None
    if co is not None:
        class_output = ClassOutputWeights(
            grouped=co.grouped.cpu().numpy(),
            segment_sizes=tuple(co.segment_sizes),
            single_classes=co.class_of[co.single_words].cpu().numpy(),
            cluster_classes=np.array(co.clusters, dtype=np.int64),
            class_slot=co.class_slot.cpu().numpy(),
            class_weight=_np(co.class_layer.weight),
            class_bias=_np(co.class_layer.bias),
            never=co.never.cpu().numpy(),
        )
    return LSTMWeights(
        embedding, out_emb, projection, layers, output_bias, class_output, adaptation,
        never=tuple(model.never.tolist()),
    )  # fmt: skip


@torch.no_grad()
def vector_weights(model: ContextLSTM) -> LSTMWeights:
    """The vector form's weights: the unadapted W, b, b_out and the context parts V, Z_L, Z_R
    and Q, applied in the graph from the context embedding given as an input."""
    try:
        model.check_vector_form()  # the context embedding alone must adapt it
    except ValueError as err:
        raise ValueError(
            f"{err} (the vector kinds take only the embedding; export step/scorer or "
            "multi/multi-scorer instead)"
        ) from None
    assert model.Q is not None
    layers = []
    for cell in model.cells:
        gain = None if cell.ln_gain is None else _np(cell.ln_gain)
        shift = None if cell.ln_shift is None else _np(cell.ln_shift)
        layers.append(LayerWeights(_np(cell.W), _np(cell.b), gain, shift))
    adaptation = ContextAdaptation(
        V=tuple(None if cell.V is None else _np(cell.V) for cell in model.cells),
        Z_L=tuple(None if cell.Z_L is None else _np(cell.Z_L) for cell in model.cells),
        Z_R=tuple(None if cell.Z_R is None else _np(cell.Z_R) for cell in model.cells),
        Q=_np(model.Q),
    )
    return _with_output(model, tuple(layers), _np(model.b_out), adaptation)


@torch.no_grad()
def expected_vector(model: ContextLSTM) -> list[float]:
    """c of a record with every variable missing (the expected context embedding)."""
    return [float(x) for x in model.context_embedding(None, batch_size=1)[0].float().cpu()]


def _nbytes(w: LSTMWeights) -> int:
    arrays = [w.embedding, w.output_embedding, w.projection, w.output_bias]
    if w.class_output is not None:
        arrays += [w.class_output.class_weight, w.class_output.class_bias]
    for layer in w.layers:
        arrays += [layer.weight, layer.bias, layer.ln_gain, layer.ln_shift]
    return sum(a.nbytes for a in arrays if a is not None)


# -- export -----------------------------------------------------------------------------------


def vocab_path_for(out: str | os.PathLike[str]) -> Path:
    """The vocabulary file written beside ``out``: ``lm.onnx`` -> ``lm.vocab.txt``."""
    out = Path(out)
    stem = out.name[: -len(".onnx")] if out.name.endswith(".onnx") else out.name
    return out.with_name(stem + ".vocab.txt")


def export_metadata(
    model: ContextLSTM,
    kind: str,
    records: Sequence[Record],
    vocab_file: str,
    asr_tokens: AsrTokens | None = None,
) -> dict[str, str]:
    """The metadata properties of an export (see the module docstring)."""
    cfg = model.config
    fields = [ContextField(v.name, v.kind, v.values, v.dim).to_json() for v in cfg.context_vars]
    folded = "expected context" if records == [{}] else json.dumps(records[0])
    comment = f"{cfg.mode} context LSTM, {kind} export, " + (
        f"{len(records)} contexts by context_id" if kind.startswith("multi") else folded
    )
    ids = {
        "vocab_size": str(cfg.vocab_size),
        "sos_id": str(BOS_ID),
        "eos_id": str(EOS_ID),
        "unk_id": str(UNK_ID),
        "pad_id": str(PAD_ID),
        KEY_TOKEN_IDS: "toolkit",
    }
    if asr_tokens is not None:
        comment += f", ids of the ASR tokens ({len(asr_tokens)}, blank {asr_tokens.blank_id})"
        ids = {
            "vocab_size": str(len(asr_tokens)),
            "sos_id": str(asr_tokens.sos_id),
            "eos_id": str(asr_tokens.eos_id),
            "unk_id": str(-1 if asr_tokens.unk_id is None else asr_tokens.unk_id),
            "pad_id": str(asr_tokens.blank_id),
            KEY_TOKEN_IDS: "asr",
            KEY_BLANK_ID: str(asr_tokens.blank_id),
        }
    return {
        "model_type": "context_lstm",
        KEY_FORMAT: FORMAT,
        KEY_FORMAT_VERSION: str(FORMAT_VERSION),
        "version": str(FORMAT_VERSION),
        KEY_KIND: kind,
        "comment": comment,
        **ids,
        "num_layers": str(cfg.num_layers),
        "hidden_size": str(cfg.hidden_dim),
        "embedding_dim": str(cfg.embed_dim),
        "mode": cfg.mode,
        "layer_norm": "true" if cfg.layer_norm else "false",
        KEY_CONTEXT_VARIABLES: json.dumps(fields),
        KEY_CONTEXTS: json.dumps(list(records)),
        "num_contexts": str(len(records)),
        KEY_VOCAB_FILE: vocab_file,
        "log_base": LOG_BASE,
        **({KEY_HISTORY_FIELD: cfg.history} if cfg.history else {}),
    }


def build_model(
    model: ContextLSTM,
    options: ExportOptions,
    vocab_file: str = "vocab.txt",
    model_tokens: Sequence[str] | None = None,
) -> tuple[onnx.ModelProto, list[Record]]:
    """The checked ONNX model of ``options.kind`` and its context records (not written).

    With ``options.asr_tokens``, ``model_tokens`` (the model's vocabulary) must be the LM units
    of that token set (an InputError naming its file and line otherwise).
    """
    if options.asr_tokens is not None and model_tokens is None:
        raise ValueError("an export in ASR token ids needs the model's vocabulary to check")
    if not isinstance(model, ContextLSTM):
        raise ValueError(f"expected a ContextLSTM model, got {type(model).__name__}")
    if model.config.history and options.kind not in HISTORY_KINDS:
        raise ValueError(
            f"a history model reads the previous utterances through its state (h0, c0): "
            f"expected one of the kinds {HISTORY_KINDS}, got {options.kind!r}"
        )
    if options.multi:
        records = context_records(model, options.contexts, options.max_contexts)
    else:
        records = [normalise_record(model, options.context)]
    if options.vector:
        weights = vector_weights(model)
    else:
        weights = lstm_weights(model, records, options.multi)
    size = _nbytes(weights)
    if size > MAX_MODEL_BYTES:
        raise ValueError(
            f"the export would hold {size / 2**30:.2f} GiB of weights ({len(records)} contexts); "
            f"ONNX files are limited to 2 GiB: export fewer contexts (--contexts FILE.jsonl)"
        )
    asr = options.asr_tokens
    if asr is not None:
        asr.check_vocabulary(model_tokens, "the model")
    input_map = None if asr is None else asr.input_map()
    if options.kind == NLL_KIND:
        graph = nll_graph(weights, BOS_ID, EOS_ID, input_map)
    elif options.kind == SCORE_TOKEN_KIND:
        graph = score_token_graph(weights, input_map, None if asr is None else asr.output_map())
    else:
        build = scorer_graph if options.scorer else step_graph
        graph = build(weights, with_context=options.multi)
    meta = export_metadata(model, options.kind, records, vocab_file, asr)
    meta.update(model_author=options.author, url=options.url)
    if options.vector:
        assert weights.adaptation is not None
        meta.update({
            KEY_CONTEXT_DIM: str(weights.adaptation.dim),
            KEY_VECTOR_FIELD: VECTOR_FIELD,
            KEY_EXPECTED_VECTOR: json.dumps(expected_vector(model)),
        })  # fmt: skip
        meta["comment"] = (
            f"{model.config.mode} context LSTM, {options.kind} export, the context embedding "
            f"(k={weights.adaptation.dim}) as the input context_vector"
        )
    onnx_model = make_model(graph, meta, options.opset, doc=meta["comment"])
    onnx.checker.check_model(onnx_model, full_check=True)
    return onnx_model, records


def export_model(
    model: ContextLSTM,
    tokens: Sequence[str],
    out: str | os.PathLike[str],
    options: ExportOptions | None = None,
) -> ExportResult:
    """Write ``model`` as ONNX to ``out`` and its vocabulary beside it (:func:`vocab_path_for`)."""
    options = options or ExportOptions()
    out = Path(out)
    tokens = list(tokens)
    if len(tokens) != model.config.vocab_size:
        raise ValueError(
            f"vocabulary has {len(tokens)} tokens but the model's vocab_size is "
            f"{model.config.vocab_size}"
        )
    if tuple(tokens[:3]) != SPECIAL_TOKENS:
        raise ValueError(f"vocabulary must start with {list(SPECIAL_TOKENS)}, got {tokens[:3]}")
    if out.is_dir():
        raise ValueError(f"{out}: is a folder; expected the path of the .onnx file to write")
    vocab_path = vocab_path_for(out)
    onnx_model, records = build_model(model, options, vocab_path.name, tokens)
    data = onnx_model.SerializeToString()
    # The vocabulary of the graph's ids: the ASR's tokens in id order for an ASR-id export.
    listed = tokens if options.asr_tokens is None else options.asr_tokens.tokens
    with atomic_write(vocab_path) as f:
        f.write("".join(t + "\n" for t in listed))
    with atomic_write(out, "wb") as f:
        f.write(data)
    size = out.stat().st_size
    logger.info(
        "wrote %s (%s export, %d context(s), %.1f MiB) and %s",
        out,
        options.kind,
        len(records),
        size / 2**20,
        vocab_path.name,
    )
    metadata = {p.key: p.value for p in onnx_model.metadata_props}
    return ExportResult(out, vocab_path, options.kind, tuple(records), size, metadata)


def export_checkpoint(
    checkpoint: str | os.PathLike[str],
    out: str | os.PathLike[str],
    options: ExportOptions | None = None,
) -> ExportResult:
    """Load a checkpoint folder (the architecture comes from it) and :func:`export_model` it.

    A decoder kind of a checkpoint trained over an ASR token set (its ``asr_tokens.txt``) takes
    and gives that set's ids unless ``options.asr_tokens`` says otherwise.
    """
    options = options or ExportOptions()
    model, tokens, _ = load_checkpoint(checkpoint)
    if not isinstance(model, ContextLSTM):
        raise ValueError(f"{checkpoint}: a {type(model).__name__} checkpoint; expected ContextLSTM")
    if options.kind in DECODER_KINDS and options.asr_tokens is None:
        asr = checkpoint_asr_tokens(checkpoint)
        if asr is not None:
            options = replace(options, asr_tokens=asr)
    return export_model(model, tokens, out, options)
