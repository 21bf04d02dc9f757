"""Neural language models of :mod:`lm_models` behind the LanguageModel contract (``torch:DIR``).

:class:`TorchLM` loads a checkpoint folder (see :mod:`rescorer.lm_models.checkpoint`) and scores
word sequences with it. Words map to ids through the checkpoint's vocabulary (after the case
mapping, as for KenLM); a word not in it is scored as ``<unk>`` and flagged by
:meth:`TorchLM.oov_flags`. A checkpoint with a tokenizer (``tokenizer.model``,
:mod:`rescorer.lm_models.tokenizer`) is a subword model (``units == "subword"``): each word is cut
into pieces, the prefix tree below runs over the pieces, and a word's value is the sum of its
pieces' log-probabilities; no word is unknown.

How a batch of sentences is scored (the N-best lists of many utterances at once):

1. Sentences are grouped by their context record. Each distinct context gets its adapted weights
   once (``ContextLSTM.adapt`` of that one record: W' = W + A, b', and the output bias
   b_out + Q c + one-hot biases -- exactly what ``ContextLSTM.lock`` folds into a plain model,
   without copying the embeddings), so the per-token cost is that of an unadapted LSTM. The
   weights are cached per context (least recently used ones are dropped beyond ``max_contexts``).
   A group of at least ``batch_nodes`` sentences is scored this way on its own.
2. Within a group the sentences are inserted into a prefix tree (trie): one node per distinct
   prefix ``<s> w1 .. wk``. The tree is run breadth-first, one depth at a time: all nodes of one
   depth (across sentences and utterances) go through one length-1 ``forward`` call, their
   parents' states gathered from the previous depth's output. A node's output distribution scores
   its children's words and, for sentences that end there, ``</s>``. So the shared prefixes of
   N-best hypotheses are computed once, and each distinct (prefix, next word) pair is scored
   once. :attr:`TorchLM.stats` counts the LSTM steps computed against the steps of a
   per-sentence run (``len(words) + 1`` each).
3. Groups too small to fill a batch (many contexts, e.g. a context per utterance built from the
   previous utterances) are run together as a forest: their trees go through the same
   depth-by-depth calls, each node under its own context's weights (``ContextLSTM.adapt`` of up
   to ``max_contexts`` records at once, the FactorCell's A kept factored; output biases taken
   per row inside the blocked output layer). So scoring stays batched and prefix-shared when
   every utterance has a different context.

Context records are mappings of field -> value (``{"genre": "news"}``) or None, normalised by
:class:`rescorer.core.context_key.ContextKeys` (shared with ``onnx:`` models). Fields the model
does not declare are ignored (logged once); a categorical value it never saw in training is
treated as missing (logged once), as training does
(:func:`rescorer.lm_models.lstm.data.context_record`); missing fields use the model's expected
context embedding. A text field (e.g. ``previous``, the previous utterances' 1-best of ``rescorer
context build``) is a context of its own per distinct text: each utterance's text is embedded once
(the vectors are cached per string) and adapted once, with its hypotheses' prefixes shared, in
forests as above.

A history model (trained with ``data.history``: runs of consecutive sentences read as one
sequence; ``LSTMConfig.history`` names its field, ``previous``) reads the field's text itself
instead of embedding it: each line (an earlier utterance, as ``rescorer context build`` writes
them) is run through the LSTM as ``<s> w1 .. wn``, and the sentence's tree starts from the state
this leaves (its root's parent), not from zeros. The history is computed once per utterance,
batched across the forest's roots, and is not scored; an empty or missing history is the
zero state, i.e. the sentence alone.

A neural cache (``ncache:``, :mod:`rescorer.lms.neural_cache`, attached with
:meth:`TorchLM.attach_cache`) mixes a continuous cache of a context text into every value: its
field groups sentences like any context (one memory per utterance, the forest batched as above),
and each scored (node, word) pair takes its root's memory.

A causal Transformer checkpoint (:mod:`rescorer.lm_models.lstm.transformer`, no context) is scored
the same way: its state is the key/value cache of the positions read, which grows by one position
per depth, so the nodes of one depth stack into one batch as the LSTM's states do.

All scores are natural-log probabilities.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch
from torch import Tensor

from rescorer.core.context_key import (
    ContextField,
    ContextKey,
    ContextKeys,
    history_lines,
    without_field,
)
from rescorer.core.device import resolve_device
from rescorer.lm_models.checkpoint import TOKENIZER_FILE, load_checkpoint
from rescorer.lm_models.lstm.model import AdaptedWeights, ContextLSTM
from rescorer.lm_models.lstm.transformer import CausalTransformerLM
from rescorer.lm_models.tokenizer import SubwordTokenizer
from rescorer.lm_models.vocab import BOS_ID, EOS_ID, SPECIAL_TOKENS
from rescorer.lms.base import WordLM, check_advance, loader
from rescorer.lms.contract import Context
from rescorer.lms.prefix_tree import PrefixForest, flat_output, pack_forests
from rescorer.lms.word_vocab import SubwordVocab, WordVocab
from rescorer.text import CASE_MODES

logger = logging.getLogger(__name__)

DEFAULT_BATCH_NODES = 2048
DEFAULT_MAX_CONTEXTS = 256


class StateCache(Protocol):
    """What :meth:`TorchLM.attach_cache` takes (:class:`rescorer.lms.neural_cache.NeuralCache`):
    a memory per context built from the model, mixed into the values of the states it scores."""

    # The context field whose text fills the memory.
    field: str

    def memory(self, lm: TorchLM, key: ContextKey) -> Any: ...

    def mix(self, values: Tensor, top: Tensor, targets: Tensor, memory: Any) -> Tensor: ...


@dataclass(frozen=True)
class SharingStats:
    """LSTM steps computed by :meth:`TorchLM.token_logprobs` vs. steps without prefix sharing."""

    # Sentences scored.
    sentences: int = 0
    # LSTM steps run: one per distinct prefix (the start node included) per context group.
    computed_steps: int = 0
    # Steps a sentence-by-sentence run would take: len(words) + 1 per sentence.
    naive_steps: int = 0

    @property
    def saved_fraction(self) -> float:
        """Fraction of the naive steps that sharing avoided (0 when nothing was scored)."""
        return 1.0 - self.computed_steps / self.naive_steps if self.naive_steps else 0.0

    def describe(self) -> str:
        return (
            f"{self.computed_steps} of {self.naive_steps} LSTM steps computed for "
            f"{self.sentences} sentences ({100 * self.saved_fraction:.1f}% saved by prefix sharing)"
        )


@dataclass(frozen=True)
class TorchLMState:
    """A streaming state: the LSTM state before the pending input token, and the context.

    ``h`` and ``m`` are (layers, d) tensors; ``token`` is the id of the input not yet consumed
    (``<s>`` at the start, then the last scored token). :meth:`TorchLM.advance` runs one step on
    it and scores the next token with the resulting distribution.
    """

    context: ContextKey
    h: Tensor
    m: Tensor
    token: int


class TorchLM(WordLM):
    """A :class:`rescorer.lm_models.lstm.model.ContextLSTM` (or a context-free
    :class:`rescorer.lm_models.lstm.transformer.CausalTransformerLM`) checkpoint behind the
    LanguageModel contract.

    ``path`` is a checkpoint folder; ``device`` None or ``auto`` picks CUDA when available;
    ``case`` maps words into the vocabulary (``auto`` decides from the first sentences scored);
    ``batch_nodes`` caps the prefix-tree nodes in one forward call (memory is about
    ``batch_nodes * vocab_size`` floats); ``max_contexts`` caps the cached adapted weights and
    the contexts batched together in one forest.
    """

    units = "word"

    def __init__(
        self,
        path: str | Path,
        name: str | None = None,
        case: str = "auto",
        device: str | torch.device | None = None,
        batch_nodes: int = DEFAULT_BATCH_NODES,
        max_contexts: int = DEFAULT_MAX_CONTEXTS,
    ) -> None:
        path = Path(path)
        if case not in CASE_MODES:
            raise ValueError(f"case must be one of {CASE_MODES}, got {case!r}")
        if batch_nodes < 1:
            raise ValueError(f"batch_nodes must be >= 1, got {batch_nodes}")
        if max_contexts < 1:
            raise ValueError(f"max_contexts must be >= 1, got {max_contexts}")
        if not path.is_dir():
            raise ValueError(f"torch model checkpoint folder not found: {path}")
        self.device = resolve_device(device)
        logger.info("loading torch checkpoint %s on %s", path, self.device)
        model, tokens, meta = load_checkpoint(path, self.device)
        if not isinstance(model, ContextLSTM | CausalTransformerLM):
            raise ValueError(
                f"{path}: a {type(model).__name__} checkpoint; TorchLM scores ContextLSTM and "
                "CausalTransformerLM models"
            )
        if tuple(tokens[:3]) != SPECIAL_TOKENS:
            raise ValueError(
                f"{path}: vocabulary must start with {list(SPECIAL_TOKENS)}, got {tokens[:3]}"
            )
        self._model = model.eval()
        self.meta = meta
        self.name = name or path.name.split(".")[0] or "torch"
        self.path = path
        self.vocab_tokens: tuple[str, ...] = tuple(tokens)
        self.words: WordVocab | SubwordVocab
        if SubwordTokenizer.present(path):  # a subword model: words are cut into its pieces
            tokenizer = SubwordTokenizer.load(path)
            if tokenizer.pieces != self.vocab_tokens:
                raise ValueError(
                    f"{path}: {TOKENIZER_FILE} has {len(tokenizer)} pieces that are not the "
                    f"{len(tokens)} tokens of its vocab.txt"
                )
            self.words = SubwordVocab(tokenizer, case)
            self.units = "subword"
        else:
            self.words = WordVocab(tokens, case)
        self.batch_nodes = batch_nodes
        self.max_contexts = max_contexts
        # A history model's field (its text read by the LSTM, not embedded); "" for none.
        self.history = model.config.history
        self._fields: list[Any] = list(model.config.context_vars)
        if self.history:
            self._fields.append(ContextField(self.history, "text"))
        self._contexts = ContextKeys(self._fields, self.name, logger)
        # A neural cache of a context text (``ncache:``, :meth:`attach_cache`), or None.
        self.cache: StateCache | None = None
        self._weights: OrderedDict[ContextKey, AdaptedWeights] = OrderedDict()
        self._sentences = self._computed = self._naive = 0

    # -- vocabulary and case ---------------------------------------------------------------------
    @property
    def model(self) -> ContextLSTM | CausalTransformerLM:
        """The loaded model (eval mode)."""
        return self._model

    def _ids(self, sentences: Sequence[Sequence[str]]) -> tuple[list[list[int]], list[list[int]]]:
        """Each sentence's unit ids, and how many units each of its words has (all 1 for a word
        model; a subword model's pieces)."""
        per_word = self.words.word_ids(sentences)
        ids = [[i for word in words for i in word] for words in per_word]
        return ids, [[len(word) for word in words] for words in per_word]

    # -- contexts --------------------------------------------------------------------------------
    def context_key(self, record: Context | None) -> ContextKey:
        """``record`` reduced to the model's fields, unknown values dropped (so: missing)."""
        return self._contexts.key(record)

    def attach_cache(self, cache: StateCache) -> None:
        """Score with ``cache`` (:mod:`rescorer.lms.neural_cache`) mixed into every value; its
        field becomes a context field of this model (the weights do not depend on it)."""
        self.cache = cache
        if cache.field not in {f.name for f in self._fields}:
            self._fields.append(ContextField(cache.field, "text"))
            self._contexts = ContextKeys(self._fields, self.name, logger)

    def _model_key(self, key: ContextKey) -> ContextKey:
        """``key`` without a history model's history field or a neural cache's field: what the
        weights depend on."""
        key = without_field(key, self.history)
        return without_field(key, self.cache.field) if self.cache is not None else key

    def _history_ids(self, key: ContextKey) -> list[int]:
        """The unit ids a history model reads before the sentence: ``<s>`` and the units of each
        line of the key's history text, in order ([] without one)."""
        ids, _ = self._ids(history_lines(key, self.history))
        return [i for sentence in ids for i in (BOS_ID, *sentence)]

    def _history_states(
        self, keys: Sequence[ContextKey], weights: AdaptedWeights
    ) -> tuple[Tensor, Tensor]:
        """The LSTM state after each key's history, (layers, n, d) twice (zeros without one).

        The histories run together one position at a time, each row only while it has units
        left; with weights adapted to several contexts (``weights.rows``), row i is context i.
        """
        n, device = len(keys), self.device
        h, m = self._model.init_state(n)
        histories = [self._history_ids(key) for key in keys]
        longest = max((len(x) for x in histories), default=0)
        if longest == 0:
            return h, m
        tokens = torch.zeros(n, longest, dtype=torch.long)
        for i, ids in enumerate(histories):
            tokens[i, : len(ids)] = torch.tensor(ids, dtype=torch.long)
        tokens = tokens.to(device)
        lengths = torch.tensor([len(x) for x in histories], device=device)
        several = weights.rows is not None
        for t in range(longest):
            rows = (lengths > t).nonzero(as_tuple=True)[0]
            self._computed += len(rows)
            of = rows if several else None
            _, (h_new, m_new) = self._model.step(
                tokens[rows, t : t + 1], (h[:, rows], m[:, rows]), weights, of
            )
            h[:, rows] = h_new
            m[:, rows] = m_new
        return h, m

    def context_vectors(self, contexts: Sequence[Context | None]) -> np.ndarray:
        """The context embedding c of each record, (n, k) float32, computed once per distinct
        record (after the model's normalisation, :meth:`context_key`): the ``context_vector``
        that an ONNX vector export (``vector-step``, ``vector-scorer``) takes."""
        if not self._model.adaptive:
            raise ValueError(f"{self.path}: an unadapted model has no context embedding")
        keys = [self._model_key(k) for k in self._keys(len(contexts), contexts)]
        rows = {key: i for i, key in enumerate(dict.fromkeys(keys))}
        if not rows:
            return np.zeros((0, self._model.config.context_dim), dtype=np.float32)
        with torch.inference_mode():
            c = self._model.context_embedding([dict(key) for key in rows], len(rows))
        return c.float().cpu().numpy()[[rows[key] for key in keys]]

    def _adapted(self, key: ContextKey) -> AdaptedWeights:
        key = self._model_key(key)
        weights = self._weights.get(key)
        if weights is not None:
            self._weights.move_to_end(key)
            return weights
        with torch.inference_mode():
            if self._model.adaptive:
                weights = self._model.adapt([dict(key)])
            else:
                weights = self._model.adapt(None)
        self._weights[key] = weights
        if len(self._weights) > self.max_contexts:
            self._weights.popitem(last=False)
        return weights

    def _keys(self, n: int, contexts: Sequence[Context | None] | None) -> list[ContextKey]:
        return self._contexts.keys(n, contexts)

    # -- scoring ---------------------------------------------------------------------------------
    @property
    def stats(self) -> SharingStats:
        """Totals of every :meth:`token_logprobs` call since loading (or :meth:`reset_stats`)."""
        return SharingStats(self._sentences, self._computed, self._naive)

    def reset_stats(self) -> None:
        self._sentences = self._computed = self._naive = 0

    def token_logprobs(
        self,
        sentences: Sequence[Sequence[str]],
        contexts: Sequence[Context | None] | None = None,
    ) -> list[np.ndarray]:
        """Natural-log probability of each word and of the final ``</s>``, per sentence.

        A subword model's word value is the sum of its pieces' log-probabilities (each given the
        pieces before it), so the values are word log-probabilities either way.
        """
        ids, spans = self._ids(sentences)
        keys = self._keys(len(ids), contexts)
        if not ids:
            return []
        offsets, flat = flat_output(ids)
        groups: dict[ContextKey, list[int]] = {}
        for i, key in enumerate(keys):
            groups.setdefault(key, []).append(i)
        with torch.inference_mode():
            for forest in self._forests(groups):
                self._score_forest(forest, ids, offsets, flat)
        self._sentences += len(ids)
        self._naive += int(offsets[-1])
        return [_word_sums(flat[offsets[i] : offsets[i + 1]], spans[i]) for i in range(len(ids))]

    def sentence_logprobs(
        self,
        sentences: Sequence[Sequence[str]],
        contexts: Sequence[Context | None] | None = None,
    ) -> np.ndarray:
        return np.array(
            [lp.sum() for lp in self.token_logprobs(sentences, contexts)], dtype=np.float64
        )

    def _forests(
        self, groups: dict[ContextKey, list[int]]
    ) -> list[list[tuple[ContextKey, list[int]]]]:
        """Context groups packed into forests (:func:`rescorer.lms.prefix_tree.pack_forests`):
        a group of at least ``batch_nodes`` sentences is scored with its context folded into
        shared weights (a plain LSTM's cost per step); smaller ones, up to ``max_contexts`` per
        forest, each prefix-tree node under its own context's weights."""
        per_context = self._model.adaptive or bool(self.history) or self.cache is not None
        return pack_forests(groups, self.batch_nodes, self.max_contexts, per_context)

    def _forest_weights(self, keys: Sequence[ContextKey]) -> AdaptedWeights:
        """One context (a history model's histories aside): its cached shared weights; several:
        ``adapt`` of all, one row each."""
        model_keys = [self._model_key(key) for key in keys]
        if len(set(model_keys)) == 1:
            return self._adapted(model_keys[0])
        return self._model.adapt([dict(key) for key in model_keys])

    def _score_forest(
        self,
        forest: Sequence[tuple[ContextKey, Sequence[int]]],
        ids: Sequence[Sequence[int]],
        offsets: np.ndarray,
        flat: np.ndarray,
    ) -> None:
        """Score the sentences of ``forest`` (context groups) of ``ids``, writing into ``flat``.

        Each context has its own prefix tree (:class:`rescorer.lms.prefix_tree.PrefixForest`);
        the trees run together, one depth at a time, at most ``batch_nodes`` nodes per step,
        each node from its parent's state; each distinct (node, target) pair is scored once.
        """
        model, device = self._model, self.device
        trees = PrefixForest(
            [members for _, members in forest],
            ids,
            offsets,
            BOS_ID,
            EOS_ID,
            len(self.vocab_tokens),
            root_states=bool(self.history),  # each root reads the state its history leaves
        )
        weights = self._forest_weights([key for key, _ in forest])
        several = weights.rows is not None  # a row of weights per context
        if self.history:
            h_prev, m_prev = self._history_states([key for key, _ in forest], weights)
        else:  # every root reads the zero state
            h_prev, m_prev = model.init_state(1)
        cache = self.cache
        memories = [cache.memory(self, key) for key, _ in forest] if cache is not None else []
        for depth in trees.depths:
            self._computed += len(depth)
            par = torch.from_numpy(depth.parents).to(device)
            inp = torch.from_numpy(depth.inputs).to(device).unsqueeze(1)
            of = torch.from_numpy(depth.ctx).to(device) if several else None
            values = np.empty(len(depth.nodes), dtype=np.float64)  # one per distinct pair
            h_out, m_out = [], []
            for a, b in depth.chunks(self.batch_nodes):
                idx = par[a:b]
                state = (h_prev[:, idx], m_prev[:, idx])
                chunk_ctx = of[a:b] if of is not None else None
                top, (h, m) = model.step(inp[a:b], state, weights, chunk_ctx)  # (n, d)
                h_out.append(h)
                m_out.append(m)
                lo, hi = depth.pairs(a, b)
                if hi > lo:
                    sel_rows = torch.as_tensor(depth.nodes[lo:hi] - a, device=device)
                    sel_tgts = torch.as_tensor(depth.targets[lo:hi], device=device)
                    vals = model.log_probs_at(top, sel_rows, sel_tgts, weights, chunk_ctx)
                    if cache is not None:  # each row with its own root's memory
                        roots = depth.ctx[depth.nodes[lo:hi]]
                        for root in np.unique(roots):
                            j = torch.as_tensor(np.nonzero(roots == root)[0], device=device)
                            vals[j] = cache.mix(
                                vals[j], top[sel_rows[j]], sel_tgts[j], memories[root]
                            )
                    values[lo:hi] = vals.double().cpu().numpy()
            depth.write(values, flat)
            h_prev = torch.cat(h_out, dim=1) if len(h_out) > 1 else h_out[0]
            m_prev = torch.cat(m_out, dim=1) if len(m_out) > 1 else m_out[0]

    # -- streaming -------------------------------------------------------------------------------
    def start(self, context: Context | None = None) -> TorchLMState:
        key = self.context_key(context)
        with torch.inference_mode():
            h, m = self._history_states([key], self._adapted(key))  # zeros without a history
        return TorchLMState(key, h[:, 0], m[:, 0], BOS_ID)

    def advance(
        self, states: Sequence[TorchLMState], tokens: Sequence[str]
    ) -> tuple[np.ndarray, list[TorchLMState]]:
        """Score ``tokens[i]`` after ``states[i]``: natural-log probs and the next states.

        Tokens are words (case-mapped as in :meth:`token_logprobs`; with ``case="auto"`` not yet
        decided, the first call's tokens decide it) or ``</s>``. A subword model runs a word's
        pieces one step each and returns their sum (the word's log-probability).
        """
        check_advance(states, tokens)
        for i, state in enumerate(states):
            if not isinstance(state, TorchLMState):
                raise ValueError(
                    f"state {i}: expected a TorchLMState from start()/advance(), "
                    f"got {type(state).__name__}"
                )
        unit_lists = self.words.token_id_lists(tokens)  # a word model: one unit per token
        out = np.zeros(len(tokens), dtype=np.float64)
        current = list(states)
        for k in range(max((len(u) for u in unit_lists), default=0)):
            active = [i for i, units in enumerate(unit_lists) if len(units) > k]
            values, stepped = self._step(
                [current[i] for i in active], [unit_lists[i][k] for i in active]
            )
            out[active] += values
            for i, state in zip(active, stepped, strict=True):
                current[i] = state
        return out, current

    def _step(
        self, states: Sequence[TorchLMState], target_ids: Sequence[int]
    ) -> tuple[np.ndarray, list[TorchLMState]]:
        """One unit per state: its log-probability after the state, and the states after it."""
        out = np.empty(len(target_ids), dtype=np.float64)
        new_states: list[TorchLMState | None] = [None] * len(target_ids)
        # Grouped by context and by the state's shape: a Transformer's cache grows with the
        # positions read, so only states of sentences equally far along stack into one batch.
        groups: dict[tuple[ContextKey, tuple[int, ...]], list[int]] = {}
        for i, state in enumerate(states):
            groups.setdefault((state.context, tuple(state.h.shape)), []).append(i)
        with torch.inference_mode():
            for (key, _), members in groups.items():
                h0 = torch.stack([states[i].h for i in members], dim=1)  # (layers, n, d)
                m0 = torch.stack([states[i].m for i in members], dim=1)
                inp = torch.tensor(
                    [[states[i].token] for i in members], dtype=torch.long, device=self.device
                )
                weights = self._adapted(key)
                top, (h, m) = self._model.step(inp, (h0, m0), weights)
                tgt = torch.tensor([target_ids[i] for i in members], device=self.device)
                rows = torch.arange(len(members), device=self.device)
                vals = self._model.log_probs_at(top, rows, tgt, weights)
                if self.cache is not None:
                    vals = self.cache.mix(vals, top, tgt, self.cache.memory(self, key))
                out[members] = vals.double().cpu().numpy()
                for j, i in enumerate(members):
                    new_states[i] = TorchLMState(key, h[:, j], m[:, j], target_ids[i])
        return out, new_states  # type: ignore[return-value]

    def describe(self) -> dict[str, Any]:
        cfg = self._model.config
        return {
            "mode": cfg.mode,
            "units": self.units,
            "vocab": cfg.vocab_size,
            "device": str(self.device),
            "case": self.case,
        }


def _word_sums(unit_logprobs: np.ndarray, spans: Sequence[int]) -> np.ndarray:
    """Per word, the sum of its units' values (``spans``: units per word), then ``</s>``."""
    if all(n == 1 for n in spans):
        return unit_logprobs.copy()
    starts = np.cumsum([0, *spans[:-1]])
    return np.append(np.add.reduceat(unit_logprobs[:-1], starts), unit_logprobs[-1])


load_torch_lm = loader(TorchLM, "device", "batch_nodes")
