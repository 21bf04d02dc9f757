"""ONNX exports of the context LSTM behind the LanguageModel contract (``onnx:MODEL.onnx``).

:class:`OnnxLM` runs a file written by ``rescorer export`` (:mod:`rescorer.export.exporter`) with
ONNX Runtime and numpy only -- no torch, no :mod:`lm_models` -- so it works wherever ONNX Runtime
does. Everything it needs is in the file's metadata properties and the vocabulary file beside it
(metadata ``vocab_file``):

* ``export_kind`` decides how it scores. A step model (``step``, ``multi``, ``vector-step``)
  scores through a prefix-shared forest, as ``torch:`` models do
  (:mod:`rescorer.lms.prefix_tree`): the sentences of one run context (context id, context
  vector and history) form a prefix tree, the trees run together one depth at a time, each
  depth's distinct prefixes one step of the graph (at most ``batch_tokens`` per run) from their
  parents' states, and each distinct (prefix, next word) pair's log-probability is picked from
  the ``log_softmax`` output. A sentence scorer (``scorer``, ``multi-scorer``,
  ``vector-scorer``) has no state to share a prefix through: it gives the per-token
  log-probabilities of whole sentences, in batches of one context and similar length (sorted by
  context id, then length; at most ``batch_tokens`` padded positions per run), padded with
  ``</s>``. Streaming (:meth:`OnnxLM.start` / :meth:`OnnxLM.advance`, and
  :meth:`OnnxLM.next_logprobs` for the whole next-token distribution) needs a step model; a
  scorer raises ValueError naming the file.
* A multi-context FactorCell export gathers the context's W' once when every row of a run has
  the same context id and once per row otherwise: its runs (a scorer's batches, a step model's
  chunks of a depth) are of one context each. The other kinds run mixed contexts together.
* Words map to ids through the vocabulary with the case mapping and ``<unk>`` for unknown words,
  exactly as for ``torch:`` models (:class:`rescorer.lms.word_vocab.WordVocab`).
* Context records are normalised by the rules of ``torch:`` models
  (:class:`rescorer.core.context_key.ContextKeys`: unknown fields ignored, unseen values missing).
  A multi-context export maps a record to the ``context_id`` of the identical record in its
  metadata ``contexts`` list; a record that is not there gets context 0 (the expected context)
  with a warning logged once. A single-context export has its context folded in: records that
  differ from it are scored with it anyway, with a warning logged once. A vector export
  (``vector-step``, ``vector-scorer``) reads each record's context embedding from the field its
  metadata names (``context_vector_field``; ``rescorer context vectors`` writes it, once per
  utterance), a record without one gets ``expected_context_vector``, and sentences of any
  contexts share a batch (every row its own vector).

Execution provider: ``device`` ``auto`` (default) uses CUDA when ONNX Runtime can, else the CPU;
``cpu`` and ``cuda`` / ``cuda:N`` force one. The GPU build of ONNX Runtime lists CUDA even on a
machine without a GPU, so ``auto`` decides from the providers the created session actually got
and logs one line when it falls back to the CPU; ``cuda`` that cannot be had is a ValueError.

All scores are natural-log probabilities.
"""

from __future__ import annotations

import logging
import math
import os
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rescorer.core.context_key import (
    ContextField,
    ContextKey,
    ContextKeys,
    history_lines,
    without_field,
)
from rescorer.core.io import read_tokens
from rescorer.export.format import (
    INPUTS,
    NLL_KIND,
    OUTPUTS,
    SCORE_TOKEN_KIND,
)
from rescorer.export.runtime import OnnxMeta, create_session
from rescorer.lms.base import WordLM, check_advance, loader
from rescorer.lms.contract import Context
from rescorer.lms.prefix_tree import PrefixForest, flat_output, pack_forests
from rescorer.lms.word_vocab import WordVocab
from rescorer.text import CASE_MODES

logger = logging.getLogger(__name__)

STEP_CACHE = 64  # single-state step outputs kept for prediction (see OnnxLM._step)
DEFAULT_BATCH_TOKENS = 4096
MAX_TREES = 256  # prefix trees (run contexts) batched together in one forest


@dataclass(frozen=True)
class OnnxLMState:
    """A streaming state: the LSTM state before the pending input token, and the context.

    ``h`` and ``m`` are (layers, d) float32 arrays; ``token`` is the id of the input not yet
    consumed (``<s>`` at the start, then the last scored token).
    """

    context_id: int
    h: np.ndarray
    m: np.ndarray
    token: int
    # A vector export's context embedding (k,) float32; None for the other kinds.
    vector: np.ndarray | None = None


class OnnxLM(WordLM):
    """An ONNX export (:mod:`rescorer.export.exporter`) behind the LanguageModel contract.

    ``path`` is the ``.onnx`` file (its vocabulary file is found through the metadata);
    ``device`` ``auto`` / None, ``cpu``, ``cuda`` or ``cuda:N``; ``case`` maps words into the
    vocabulary (``auto`` decides from the first sentences scored); ``batch_tokens`` caps the
    positions of one run (a scorer's padded positions, a step model's prefix-tree nodes; memory
    is about ``batch_tokens * vocab_size`` floats); ``threads`` sets ONNX Runtime's intra-op
    threads (default: its own choice); ``prefix_tree`` False: a step model scores each sentence
    in full, in padded batches as a scorer does (the path before the prefix tree, for
    comparison).
    """

    units = "word"

    def __init__(
        self,
        path: str | Path,
        name: str | None = None,
        case: str = "auto",
        device: str | None = None,
        batch_tokens: int = DEFAULT_BATCH_TOKENS,
        threads: int | None = None,
        prefix_tree: bool = True,
    ) -> None:
        path = Path(path)
        if case not in CASE_MODES:
            raise ValueError(f"case must be one of {CASE_MODES}, got {case!r}")
        if batch_tokens < 1:
            raise ValueError(f"batch_tokens must be >= 1, got {batch_tokens}")
        if not path.is_file():
            raise ValueError(f"ONNX model file not found: {path}")
        self.session, self.device = create_session(path, device, threads)
        props = dict(self.session.get_modelmeta().custom_metadata_map)
        self.meta = OnnxMeta.from_props(props, path)
        if self.meta.kind == NLL_KIND:
            raise ValueError(
                f"{path}: an {NLL_KIND!r} export is the state-less form for sherpa-onnx's "
                "offline LM rescoring (sentence totals only); score with a step or scorer "
                "export of the same checkpoint (rescorer export --kind step or scorer)"
            )
        if self.meta.kind == SCORE_TOKEN_KIND:
            raise ValueError(
                f"{path}: a {SCORE_TOKEN_KIND!r} export is the single-step form for sherpa-onnx's "
                "online LM and icefall (the next token's log-probabilities only, in "
                f"{'an ASR model' if self.meta.token_ids == 'asr' else 'the model'}'s ids); score "
                "with a step or scorer export of the same checkpoint (rescorer export --kind step "
                "or scorer)"
            )
        self._check_signature(path)
        self.name = name or path.name.split(".")[0] or "onnx"
        self.path = path
        self.batch_tokens = batch_tokens
        self.prefix_tree = prefix_tree and not self.meta.scorer
        # A multi-context FactorCell graph gathers W' per row unless a run has one context id.
        self._one_context_runs = self.meta.multi and props.get("mode") == "factor"
        tokens = self._read_vocab(path)
        self.vocab_tokens: tuple[str, ...] = tuple(tokens)
        self.words = WordVocab(tokens, case, unk_id=self.meta.unk_id)
        fields = self.meta.fields
        if self.meta.vector:  # one numerical field: the context embedding
            fields = (ContextField(self.meta.vector_field, "numerical", dim=self.meta.context_dim),)
        self.history = self.meta.history  # a history model's field ("": none)
        if self.history:
            fields = (*fields, ContextField(self.history, "text"))
        self._keys = ContextKeys(fields, self.name, logger)
        self._expected = np.array(self.meta.expected_vector, dtype=np.float32)
        self._ids: dict[ContextKey, int] = {}
        for i, record in enumerate(self.meta.contexts):
            self._ids.setdefault(self._keys.key(record), i)
        self._folded = self._keys.key(self.meta.contexts[0])
        self._step_cache: OrderedDict[int, tuple[OnnxLMState, np.ndarray, np.ndarray, np.ndarray]]
        self._step_cache = OrderedDict()
        logger.info(
            "loaded ONNX %s export %s on %s (%d context(s))",
            self.meta.kind,
            path,
            self.device,
            len(self.meta.contexts),
        )

    def _check_signature(self, path: Path) -> None:
        inputs = [i.name for i in self.session.get_inputs()]
        outputs = [o.name for o in self.session.get_outputs()]
        kind = self.meta.kind
        if inputs != INPUTS[kind] or outputs != OUTPUTS[kind]:
            raise ValueError(
                f"{path}: a {kind!r} export must have inputs {INPUTS[kind]} and outputs "
                f"{OUTPUTS[kind]}, got {inputs} and {outputs}"
            )

    def _read_vocab(self, path: Path) -> list[str]:
        vocab_path = path.parent / self.meta.vocab_file
        if not vocab_path.is_file():
            raise ValueError(
                f"{path}: its vocabulary file {vocab_path} is missing (metadata vocab_file); "
                f"an export is the .onnx file plus that file"
            )
        tokens = read_tokens(vocab_path)
        if len(tokens) != self.meta.vocab_size:
            raise ValueError(
                f"{vocab_path}: has {len(tokens)} tokens but {path.name} says "
                f"vocab_size={self.meta.vocab_size}"
            )
        return tokens

    # -- vocabulary and case ---------------------------------------------------------------------
    # -- contexts --------------------------------------------------------------------------------
    @property
    def contexts(self) -> tuple[dict[str, Any], ...]:
        """The export's context records, in context_id order."""
        return self.meta.contexts

    def context_key(self, record: Context | None) -> ContextKey:
        """``record`` reduced to the model's fields, unknown values dropped (so: missing)."""
        return self._keys.key(record)

    def _history_ids(self, key: ContextKey) -> list[int]:
        """A history model's input before the sentence: ``<s>`` and the ids of each non-empty
        line of the key's history text ([] without one), as ``torch:`` models read it."""
        lines = history_lines(key, self.history)
        return [i for ids in self.words.ids(lines) for i in (self.meta.sos_id, *ids)]

    def _context_id(self, key: ContextKey) -> int:
        key = without_field(key, self.history)
        if not self.meta.multi:
            if key != self._folded:
                self._keys.log_once(
                    logging.WARNING,
                    ("folded", repr(key)),
                    "%s: exported for the context %s; context %s is scored with it",
                    self.name,
                    dict(self._folded) or "(expected)",
                    dict(key) or "(expected)",
                )
            return 0
        cid = self._ids.get(key)
        if cid is None:
            self._keys.log_once(
                logging.WARNING,
                ("unknown", repr(key)),
                "%s: context %s is not one of the %d exported; using context 0 (expected)",
                self.name,
                dict(key),
                len(self.meta.contexts),
            )
            return 0
        return cid

    def context_vectors(self, n: int, contexts: Sequence[Context | None] | None) -> np.ndarray:
        """A vector export: the context embedding of each of ``n`` sentences, (n, k) float32
        (the expected one where a record has none)."""
        if not self.meta.vector:
            raise ValueError(f"{self.path}: a {self.meta.kind!r} export takes no context vectors")
        out = np.empty((n, self.meta.context_dim), dtype=np.float32)
        for i, key in enumerate(self._keys.keys(n, contexts)):
            vector = dict(key).get(self.meta.vector_field)
            out[i] = self._expected if vector is None else vector
        return out

    def context_ids(self, n: int, contexts: Sequence[Context | None] | None) -> np.ndarray:
        """The context_id of each of ``n`` sentences (int64, (n,)); 0 for a vector export."""
        if contexts is None or self.meta.vector:
            return np.zeros(n, dtype=np.int64)
        keys = self._keys.keys(n, contexts)
        cache: dict[ContextKey, int] = {}
        out = np.empty(n, dtype=np.int64)
        for i, key in enumerate(keys):
            cid = cache.get(key)
            if cid is None:
                cid = cache[key] = self._context_id(key)
            out[i] = cid
        return out

    # -- scoring ---------------------------------------------------------------------------------
    def _batches(
        self, order: Sequence[int], lengths: Sequence[int], cids: np.ndarray
    ) -> list[list[int]]:
        """Runs of ``order`` with at most ``batch_tokens`` padded positions and one context."""
        batches: list[list[int]] = []
        current: list[int] = []
        for i in order:
            width = lengths[i] + 2  # <s> words </s>
            if current and (
                (len(current) + 1) * width > self.batch_tokens or cids[i] != cids[current[0]]
            ):
                batches.append(current)
                current = []
            current.append(i)
        if current:
            batches.append(current)
        return batches

    def token_logprobs(
        self,
        sentences: Sequence[Sequence[str]],
        contexts: Sequence[Context | None] | None = None,
    ) -> list[np.ndarray]:
        """Natural-log probability of each word and of the final ``</s>``, per sentence."""
        ids = self.words.ids(sentences)
        cids = self.context_ids(len(ids), contexts)
        vectors = self.context_vectors(len(ids), contexts) if self.meta.vector else None
        if not ids:
            return []
        # A history model: each sentence's run starts with its previous utterances (scored, not
        # kept: only the sentence's own positions are returned).
        history: list[list[int]] = [[] for _ in ids]
        if self.history and contexts is not None:
            keys = self._keys.keys(len(ids), contexts)
            seen: dict[ContextKey, list[int]] = {}
            for i, key in enumerate(keys):
                if key not in seen:
                    seen[key] = self._history_ids(key)
                history[i] = seen[key]
        if self.prefix_tree:  # a step model: prefix-shared forests
            return self._score_trees(ids, cids, vectors, history)
        # A sentence scorer has no state input to carry a shared prefix: it scores each
        # sentence in full, in padded batches (and so does a step model with prefix_tree=False).
        lengths = [len(s) + len(h) for s, h in zip(ids, history, strict=True)]
        # By context, then by length: a batch of one context runs the graph's shared-weight
        # path (multi-context FactorCell exports gather W' once instead of once per row).
        order = sorted(range(len(ids)), key=lambda i: (cids[i], lengths[i]))
        out: list[np.ndarray] = [np.empty(0)] * len(ids)
        for batch in self._batches(order, lengths, cids):
            rows = [ids[i] for i in batch]
            vecs = None if vectors is None else vectors[batch]
            prefixes = [history[i] for i in batch]
            scored = self._score_batch(rows, cids[batch], vecs, prefixes)
            for i, values in zip(batch, scored, strict=True):
                out[i] = values
        return out

    def _score_trees(
        self,
        ids: Sequence[Sequence[int]],
        cids: np.ndarray,
        vectors: np.ndarray | None,
        history: Sequence[Sequence[int]],
    ) -> list[np.ndarray]:
        """A step model: each sentence's per-token log-probs, through prefix-shared forests.

        Sentences of the same run context (context id, context vector, history) share a tree;
        the trees are packed into forests as ``torch:`` packs its context groups.
        """
        offsets, flat = flat_output(ids)
        groups: dict[tuple[int, bytes, tuple[int, ...]], list[int]] = {}
        for i in range(len(ids)):
            vector = b"" if vectors is None else vectors[i].tobytes()
            groups.setdefault((int(cids[i]), vector, tuple(history[i])), []).append(i)
        per_context = self.meta.multi or self.meta.vector or bool(self.history)
        for forest in pack_forests(groups, self.batch_tokens, MAX_TREES, per_context):
            self._score_forest(
                [members for _, members in forest], ids, offsets, flat, cids, vectors, history
            )
        return [flat[offsets[i] : offsets[i + 1]].copy() for i in range(len(ids))]

    def _score_forest(
        self,
        trees: Sequence[Sequence[int]],
        ids: Sequence[Sequence[int]],
        offsets: np.ndarray,
        flat: np.ndarray,
        cids: np.ndarray,
        vectors: np.ndarray | None,
        history: Sequence[Sequence[int]],
    ) -> None:
        """Score the sentences of ``trees`` (sentence numbers per run context) into ``flat``:
        one depth at a time, each chunk of a depth's nodes one run of the step graph from the
        parents' states, each distinct (node, target) pair picked from its ``log_softmax``."""
        meta = self.meta
        forest = PrefixForest(
            trees, ids, offsets, meta.sos_id, meta.eos_id, meta.vocab_size, root_states=True
        )
        first = [members[0] for members in trees]  # what a tree's context is read from
        tree_cids = cids[first]
        tree_vectors = None if vectors is None else vectors[first]
        h, c = self._history_states([history[i] for i in first], tree_cids, tree_vectors)
        for depth in forest.depths:
            values = np.empty(len(depth.nodes), dtype=np.float64)  # one per distinct pair
            h_out, c_out = [], []
            for a, b in depth.chunks(self.batch_tokens, self._one_context_runs):
                idx, tree = depth.parents[a:b], depth.ctx[a:b]
                vecs = None if tree_vectors is None else tree_vectors[tree]
                feed = self._inputs(
                    depth.inputs[a:b, None], h[:, idx], c[:, idx], tree_cids[tree], vecs
                )
                log_probs, h_new, c_new = self.session.run(None, feed)  # (n, 1, V), (l, n, d) x 2
                lo, hi = depth.pairs(a, b)
                values[lo:hi] = log_probs[depth.nodes[lo:hi] - a, 0, depth.targets[lo:hi]]
                h_out.append(h_new)
                c_out.append(c_new)
            depth.write(values, flat)
            h = np.concatenate(h_out, axis=1) if len(h_out) > 1 else h_out[0]
            c = np.concatenate(c_out, axis=1) if len(c_out) > 1 else c_out[0]

    def _history_states(
        self, prefixes: Sequence[Sequence[int]], cids: np.ndarray, vectors: np.ndarray | None
    ) -> tuple[np.ndarray, np.ndarray]:
        """The state after each of ``prefixes`` (a history model's previous utterances), run
        from the zero state with its row's context: (layers, n, d) float32 twice (zeros for an
        empty one). Prefixes of one length run together (and of one context where
        mixed-context runs cost more), at most ``batch_tokens`` positions per run."""
        meta = self.meta
        shape = (meta.num_layers, len(prefixes), meta.hidden_size)
        h, c = np.zeros(shape, dtype=np.float32), np.zeros(shape, dtype=np.float32)
        runs: dict[tuple[int, int], list[int]] = {}
        for i, prefix in enumerate(prefixes):
            if prefix:
                cid = int(cids[i]) if self._one_context_runs else 0
                runs.setdefault((len(prefix), cid), []).append(i)
        for (length, _), rows in runs.items():
            step = max(1, self.batch_tokens // length)
            for a in range(0, len(rows), step):
                chunk = rows[a : a + step]
                x = np.array([prefixes[i] for i in chunk], dtype=np.int64)  # (n, L)
                zeros = np.zeros((meta.num_layers, len(chunk), meta.hidden_size), np.float32)
                vecs = None if vectors is None else vectors[chunk]
                feed = self._inputs(x, zeros, zeros, cids[chunk], vecs)
                h[:, chunk], c[:, chunk] = self.session.run(["next_h0", "next_c0"], feed)
        return h, c

    def _inputs(
        self,
        x: np.ndarray,
        h: np.ndarray,
        c: np.ndarray,
        cids: np.ndarray,
        vectors: np.ndarray | None,
    ) -> dict[str, np.ndarray]:
        """A step graph's inputs: ``x`` (N, L) from the states ``h``, ``c`` (layers, N, d), with
        each row's context id (a multi kind) or context vector (a vector kind)."""
        feed = {"x": x, "h0": h, "c0": c}
        if self.meta.multi:
            feed["context_id"] = np.asarray(cids, dtype=np.int64)
        if self.meta.vector:
            feed["context_vector"] = vectors  # type: ignore[assignment]
        return feed

    def _score_batch(
        self,
        rows: Sequence[Sequence[int]],
        cids: np.ndarray,
        vectors: np.ndarray | None = None,
        prefixes: Sequence[Sequence[int]] | None = None,
    ) -> list[np.ndarray]:
        """Each row's per-token log-probs (its words and ``</s>``); ``prefixes`` (step kinds):
        ids run before each row's ``<s>`` (a history model's previous utterances)."""
        meta = self.meta
        n = len(rows)
        pre = [len(p) for p in prefixes] if prefixes is not None else [0] * n
        width = max(len(r) + k for r, k in zip(rows, pre, strict=True)) + 2
        x = np.full((n, width), meta.pad_id, dtype=np.int64)  # [prefix] <s> w1 .. wn </s> pad..
        for j, r in enumerate(rows):
            k = pre[j]
            if k:
                x[j, :k] = prefixes[j]  # type: ignore[index]
            x[j, k] = meta.sos_id
            x[j, k + 1 : k + 1 + len(r)] = r
            x[j, k + 1 + len(r)] = meta.eos_id
        lens = np.array([len(r) + 2 for r in rows], dtype=np.int64)
        if meta.scorer:
            feed = {"x": x, "x_lens": lens}
            if meta.multi:
                feed["context_id"] = cids
            if vectors is not None:
                feed["context_vector"] = vectors
            (scores,) = self.session.run(["token_logprobs"], feed)  # (n, L-1)
        else:  # a step model run over the whole sentences (prefix_tree=False)
            zeros = np.zeros((meta.num_layers, n, meta.hidden_size), dtype=np.float32)
            feed = self._inputs(np.ascontiguousarray(x[:, :-1]), zeros, zeros, cids, vectors)
            (log_probs,) = self.session.run(["log_softmax"], feed)  # (n, L-1, V)
            scores = np.take_along_axis(log_probs, x[:, 1:, None], axis=2)[..., 0]  # (n, L-1)
        return [
            scores[j, pre[j] : pre[j] + len(r) + 1].astype(np.float64) for j, r in enumerate(rows)
        ]

    def sentence_logprobs(
        self,
        sentences: Sequence[Sequence[str]],
        contexts: Sequence[Context | None] | None = None,
    ) -> np.ndarray:
        return np.array(
            [lp.sum() for lp in self.token_logprobs(sentences, contexts)], dtype=np.float64
        )

    # -- streaming -------------------------------------------------------------------------------
    def _need_step(self) -> None:
        if self.meta.scorer:
            raise ValueError(
                f"{self.path}: a {self.meta.kind!r} export scores whole sentences only; "
                f"start/advance need a step model (rescorer export --kind step or multi)"
            )

    def start(self, context: Context | None = None) -> OnnxLMState:
        """The state before the first word; ``context`` None: context 0, without a warning."""
        self._need_step()
        cid = 0 if context is None else int(self.context_ids(1, [context])[0])
        vectors = self.context_vectors(1, [context]) if self.meta.vector else None
        history = self._history_ids(self.context_key(context)) if context is not None else []
        # A history model: its previous utterances in one run, their state kept (else zeros).
        h, m = self._history_states([history], np.array([cid]), vectors)
        vector = None if vectors is None else vectors[0]
        return OnnxLMState(cid, h[:, 0], m[:, 0], self.meta.sos_id, vector)

    def advance(
        self, states: Sequence[OnnxLMState], tokens: Sequence[str]
    ) -> tuple[np.ndarray, list[OnnxLMState]]:
        """Score ``tokens[i]`` after ``states[i]``: natural-log probs and the next states.

        Tokens are words (case-mapped as in :meth:`token_logprobs`) or ``</s>``.
        """
        self._need_step()
        check_advance(states, tokens)
        for i, state in enumerate(states):
            if not isinstance(state, OnnxLMState):
                raise ValueError(
                    f"state {i}: expected an OnnxLMState from start()/advance(), "
                    f"got {type(state).__name__}"
                )
        if not states:
            return np.empty(0, dtype=np.float64), []
        target = np.array(self.words.token_ids(tokens), dtype=np.int64)
        log_probs, h, m = self._step(states)  # (N, V), (layers, N, d) x 2
        out = log_probs[np.arange(len(states)), target].astype(np.float64)
        new_states = [
            OnnxLMState(s.context_id, h[:, j].copy(), m[:, j].copy(), int(target[j]), s.vector)
            for j, s in enumerate(states)
        ]
        return out, new_states

    def _step(self, states: Sequence[OnnxLMState]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Consume each state's pending token: log-probs (N, V) and the next h, m (layers, N, d).

        The outputs of the last :data:`STEP_CACHE` single-state steps are kept (keyed by the
        state object), so prediction, which asks :meth:`next_logprobs` and then :meth:`advance`
        of the same state, runs the network once per typed word.
        """
        if len(states) == 1:
            hit = self._step_cache.get(id(states[0]))
            if hit is not None and hit[0] is states[0]:
                return hit[1], hit[2], hit[3]
        x = np.array([[s.token] for s in states], dtype=np.int64)  # (N, 1)
        log_probs, h, m = self.session.run(None, self._feed(states, x))  # (N, 1, V), (l, N, d) x 2
        log_probs = log_probs[:, 0]
        if len(states) == 1:
            self._step_cache[id(states[0])] = (states[0], log_probs, h, m)
            if len(self._step_cache) > STEP_CACHE:
                self._step_cache.popitem(last=False)
        return log_probs, h, m

    def _feed(self, states: Sequence[OnnxLMState], x: np.ndarray) -> dict[str, np.ndarray]:
        """A step graph's inputs: ``x`` (N, L) run from each state's h, m and context."""
        return self._inputs(
            x,
            np.stack([s.h for s in states], axis=1),  # (layers, N, d)
            np.stack([s.m for s in states], axis=1),
            np.array([s.context_id for s in states], dtype=np.int64),
            np.stack([s.vector for s in states]) if self.meta.vector else None,  # type: ignore[misc]
        )

    # -- next-word distributions (the optional extension used by rescorer.predict) ------------
    def vocabulary(self) -> tuple[str, ...]:
        """The model's tokens, in id order (``next_logprobs`` indexes them)."""
        return self.vocab_tokens

    def next_logprobs(self, state: OnnxLMState) -> np.ndarray:
        """Natural-log probabilities of every token of :meth:`vocabulary` after ``state``."""
        self._need_step()
        if not isinstance(state, OnnxLMState):
            raise ValueError(f"expected an OnnxLMState, got {type(state).__name__}")
        return self._step([state])[0][0].astype(np.float64)

    def describe(self) -> dict[str, Any]:
        meta = self.meta
        return {
            "kind": meta.kind,
            "vocab": meta.vocab_size,
            "device": self.device,
            "case": self.case,
        }


load_onnx_lm = loader(OnnxLM, "device", "batch_tokens")


@dataclass(frozen=True)
class PerplexityChange:
    """Perplexities of a float32 model and its int8 model on the same text."""

    # Perplexity (natural-log based, </s> included) of the float32 model.
    ppl_fp32: float
    # Perplexity of the int8 model.
    ppl_int8: float
    # Tokens scored (words + one </s> per sentence).
    tokens: int
    # Largest absolute difference of a token log-probability between the two (nats).
    max_token_diff: float

    @property
    def relative_change(self) -> float:
        """(ppl_int8 - ppl_fp32) / ppl_fp32."""
        return (self.ppl_int8 - self.ppl_fp32) / self.ppl_fp32

    def describe(self) -> str:
        return (
            f"perplexity {self.ppl_fp32:.3f} (float32) -> {self.ppl_int8:.3f} (int8), "
            f"{100 * self.relative_change:+.2f}% over {self.tokens} tokens; largest token "
            f"log-prob change {self.max_token_diff:.4f} nats"
        )


def perplexity_change(
    fp32: str | os.PathLike[str],
    int8: str | os.PathLike[str],
    sentences: Sequence[Sequence[str]],
    contexts: Sequence[Mapping[str, Any] | None] | None = None,
    device: str | None = "cpu",
) -> PerplexityChange:
    """Score ``sentences`` with both models (word level, ``</s>`` included)."""
    if not sentences:
        raise ValueError("perplexity_change: expected some sentences, got none")
    a = OnnxLM(fp32, device=device).token_logprobs(sentences, contexts)
    b = OnnxLM(int8, device=device).token_logprobs(sentences, contexts)
    tokens = sum(len(x) for x in a)
    total_a = sum(float(x.sum()) for x in a)
    total_b = sum(float(x.sum()) for x in b)
    diff = max(float(abs(x - y).max()) for x, y in zip(a, b, strict=True))
    return PerplexityChange(math.exp(-total_a / tokens), math.exp(-total_b / tokens), tokens, diff)
