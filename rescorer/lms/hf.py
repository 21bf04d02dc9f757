"""HuggingFace causal language models behind the LanguageModel contract (``hf:DIR``).

:class:`HFCausalLM` loads any local ``transformers`` causal-LM checkpoint (GPT-2 family, Llama
family, ...: ``AutoModelForCausalLM`` and ``AutoTokenizer`` from the folder, nothing
downloaded, safetensors weights only -- a ``pytorch_model.bin`` is a pickle and is refused) and
scores word hypotheses through the model's own tokenizer.

Sentence convention: a hypothesis ``w1 .. wn`` is the text ``"w1 w2 .. wn"`` (words joined by
single spaces, after the case mapping below), tokenised without special tokens; the model reads
the tokenizer's BOS token first (its EOS token when it has no BOS, as GPT-2) and the sentence
ends with its EOS token::

    log P(sentence) = sum_pieces log P(piece | BOS, earlier pieces) + log P(EOS | BOS, pieces)

A word's value is the sum of its pieces' log-probabilities (a piece belongs to the word its last
character falls in; a piece of spaces only, to the next word), and the last value is the EOS
term, as for the toolkit's subword models; no word is unknown. Hypotheses are scored in batches
of about ``batch_tokens`` padded tokens (right padding, attention mask), sorted by length, on
CUDA when available.

Sentences longer than the model's context: the model reads ``L`` positions at most (the
config's ``n_positions``, ``max_position_embeddings``, ... -- no limit when the config names
none). A sentence whose ``BOS + pieces`` exceed ``L`` is scored in overlapping windows, the usual
sliding-window evaluation with a stride ``S = L // 2``: window ``k`` reads the positions
``[k*S, k*S + L)`` of ``BOS p1 .. pn`` (the last window may be shorter) and scores only the
targets no earlier window scored. So the first window scores its first ``L`` targets with full
context from BOS, and every later target is predicted from at least ``L - S`` (about ``L/2``)
positions of left context; later windows start with a piece, not with BOS. Sentences that fit
take the ordinary path above, unchanged.

Prefix caching (``prefix_cache``, on by default): the N-best hypotheses of one utterance share
long prefixes. The sentences of a call are sorted by their piece ids (so that hypotheses sharing a
prefix become neighbours, whatever the input order) and neighbours are grouped greedily while they
share at least :data:`MIN_PREFIX_PIECES` pieces and the group's saving, ``(members - 1) *
shared`` positions, does not fall by taking one more member. A group runs ``BOS + prefix[:-1]``
once, keeping the model's key/value cache (that pass scores the prefix pieces); each member then
runs only ``prefix[-1] + suffix`` on top of the cache. The last prefix piece is read again in
every member's row: its output predicts the first suffix piece (or EOS when the member is the
prefix alone), and no row is empty -- one extra position per member. To keep forward calls few,
groups are packed into bundles whose members' rows fill about ``batch_tokens`` padded positions:
one batch runs the bundle's prefixes (right padded), the next all its members' rows, each on its
own prefix (the cache gathered to one prefix per row, the attention mask covering that prefix's
real positions and the row's, positions numbered on from the prefix's length -- so the model must
take ``position_ids``; for one that does not, caching is turned off with an INFO line). Values
equal the uncached ones up to float rounding (about 1e-5 nats a sentence in float32). Sentences
in no group and sentences too long for the model take the paths above. Measured on CPU
(``bench/bench_hf.py``, ``bench/results/hf.md``: a 4-layer, 256-wide random GPT-2, 100 dev_other
30-best lists in one call, one thread): caching runs 0.74 of the positions (0.82 with padding)
and takes 0.85 to 0.9 of the time, hence on by default; ``prefix_cache=False`` gives the plain
padded batches alone.

:attr:`HFCausalLM.stats` counts the positions scored against those run through the model (with
and without padding), to see what caching and windows cost or save.

Case: ASR output is often upper case (LibriSpeech) while these models saw mixed-case text.
``case="auto"`` lower-cases sentences written entirely in capitals and leaves the rest as they
are; ``none``, ``lower`` and ``upper`` force a mapping.

All scores are natural-log probabilities.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rescorer.core.device import resolve_device
from rescorer.lms.base import check_advance, loader, positive
from rescorer.lms.contract import Context
from rescorer.text import CASE_MODES, case_function

logger = logging.getLogger(__name__)

DEFAULT_BATCH_TOKENS = 2048
DEFAULT_PREFIX_CACHE = True  # pays on CPU already (bench/results/hf.md)
# Shortest prefix a group caches. A group's prefix pass is padded to its bundle's longest prefix
# and its members' rows to its widest rest, so short shared prefixes save little; groups of 4
# pieces and more ran slower than of 8 or more, which ran the fewest positions; 16 was about as
# fast (bench/bench_hf.py).
MIN_PREFIX_PIECES = 8
# Config fields that bound the positions a model reads, by family (GPT-2: n_positions, n_ctx;
# Llama and most others: max_position_embeddings).
POSITION_LIMIT_FIELDS = ("n_positions", "max_position_embeddings", "n_ctx", "max_sequence_length")


@dataclass(frozen=True)
class HFState:
    """A streaming state: the words scored so far (the model is re-run over them)."""

    words: tuple[str, ...]


@dataclass(frozen=True)
class HFStats:
    """Positions scored by :meth:`HFCausalLM.token_logprobs` vs. positions run by the model."""

    # Sentences scored.
    sentences: int = 0
    # Targets scored: len(pieces) + 1 (EOS) per sentence, what one full pass per sentence runs.
    scored: int = 0
    # Positions run through the model, padding left out (window overlaps and cached prefixes
    # counted as run).
    computed: int = 0
    # Positions run through the model, padding included (what the batches cost).
    padded: int = 0

    def describe(self) -> str:
        return (
            f"{self.sentences} sentences, {self.scored} positions scored, {self.computed} run "
            f"({self.padded} with padding)"
        )


@dataclass(frozen=True)
class _Row:
    """One row of a batch: the model reads ``inputs``; ``targets[t]`` is scored at ``t``."""

    inputs: tuple[int, ...]
    targets: tuple[int, ...]


@dataclass(frozen=True)
class _Past:
    """What the rows of a batch continue: a prefix batch's key/value cache (G rows, right
    padded), each prefix's length, and for each row of the batch the prefix it continues."""

    cache: Any
    lengths: Sequence[int]
    owner: Sequence[int]


def position_limit(config: Any) -> int | None:
    """The most positions the model reads, from its (text) config; None when it names none."""
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    for field in POSITION_LIMIT_FIELDS:
        value = getattr(text, field, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


def windows(n: int, limit: int) -> list[tuple[int, int, int]]:
    """Sliding windows over ``n`` positions, at most ``limit`` long, stride ``limit // 2``.

    Each is ``(begin, end, first)``: the window reads ``[begin, end)`` and scores the targets
    ``[first, end)``, those no earlier window scored (see the module docstring).
    """
    stride = max(limit // 2, 1)
    out: list[tuple[int, int, int]] = []
    begin = done = 0
    while done < n:
        end = min(begin + limit, n)
        out.append((begin, end, done))
        done, begin = end, begin + stride
    return out


def common_prefix(a: Sequence[int], b: Sequence[int], at_most: int) -> int:
    """Length of the common prefix of ``a`` and ``b``, capped at ``at_most``."""
    n = min(len(a), len(b), at_most)
    for k in range(n):
        if a[k] != b[k]:
            return k
    return n


def full_row(seq: Sequence[int], bos: int, eos: int) -> _Row:
    """The ordinary row of a sentence: BOS + pieces, scoring the pieces then EOS."""
    return _Row((bos, *seq), (*seq, eos))


class HFCausalLM:
    """A local HuggingFace causal LM (see the module docstring for the conventions).

    ``prefix_cache`` turns prefix caching on; ``min_prefix`` is the shortest shared prefix (in
    pieces) a group caches (:data:`MIN_PREFIX_PIECES`); ``max_positions`` the model's position
    limit read from its config (None: no limit).
    """

    units = "subword"

    def __init__(
        self,
        path: str | Path,
        name: str | None = None,
        case: str = "auto",
        device: str | None = None,
        batch_tokens: int = DEFAULT_BATCH_TOKENS,
        prefix_cache: bool = DEFAULT_PREFIX_CACHE,
    ) -> None:
        path = Path(path)
        if case not in CASE_MODES:
            raise ValueError(f"case must be one of {CASE_MODES}, got {case!r}")
        if not path.is_dir():
            raise ValueError(f"hf: expected a local transformers model folder, got {path}")
        if not any(path.glob("*.safetensors")):
            raise ValueError(
                f"{path}: no *.safetensors weights; pickled weights (pytorch_model.bin) are not "
                "loaded -- save the model with save_pretrained(..., safe_serialization=True)"
            )
        if not isinstance(prefix_cache, bool):
            raise ValueError(f"prefix_cache must be True or False, got {prefix_cache!r}")
        try:
            import torch
            from transformers import AutoModelForCausalLM, AutoTokenizer
            from transformers.utils import logging as hf_logging
        except ImportError as err:
            raise ValueError(f"hf: models need the transformers package: {err}") from None
        hf_logging.disable_progress_bar()  # library calls draw no progress bars
        self._torch = torch
        self.path = path
        self.name = name or path.name or "hf"
        self.case = case
        self.batch_tokens = positive("batch_tokens", batch_tokens)
        self.prefix_cache = prefix_cache
        self.min_prefix = MIN_PREFIX_PIECES
        self.device = resolve_device(device)
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
            model = AutoModelForCausalLM.from_pretrained(
                str(path), local_files_only=True, use_safetensors=True
            )
        except (OSError, ValueError) as err:
            raise ValueError(f"{path}: cannot load a transformers causal LM: {err}") from None
        if not getattr(self.tokenizer, "is_fast", False):
            raise ValueError(f"{path}: a fast tokenizer (tokenizer.json) is needed for offsets")
        eos = self.tokenizer.eos_token_id
        bos = self.tokenizer.bos_token_id if self.tokenizer.bos_token_id is not None else eos
        if eos is None or bos is None:
            raise ValueError(f"{path}: the tokenizer has no EOS token to end sentences with")
        self.bos_id, self.eos_id = int(bos), int(eos)
        self.model = model.to(self.device).eval()
        self.max_positions = position_limit(model.config)
        # transformers 5.2x renamed the forward's past_key_values argument (and output) to cache
        params = inspect.signature(model.forward).parameters
        self._cache_arg = "cache" if "cache" in params else "past_key_values"
        if self.prefix_cache and "position_ids" not in params:
            # rows on a cached prefix number their positions on from their own prefix's length
            logger.info("hf %s: no prefix caching, the model takes no position_ids", self.name)
            self.prefix_cache = False
        self.reset_stats()
        logger.info("loaded hf model %s on %s", path, self.device)

    # -- text ------------------------------------------------------------------------------------
    def _cased(self, words: Sequence[str]) -> list[str]:
        mode = self.case
        if mode == "auto":
            letters = "".join(words)
            mode = "lower" if letters.isupper() else "none"
        fn = case_function(mode)
        return [fn(w) for w in words]

    def pieces(self, words: Sequence[str]) -> tuple[list[int], list[int]]:
        """The sentence's token ids and, for each, the index of the word it belongs to."""
        words = self._cased(words)
        text = " ".join(words)
        enc = self.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        ends = np.cumsum([len(w) + 1 for w in words]) - 1  # end (exclusive) of each word
        owner = []
        for start, end in enc["offset_mapping"]:
            last = max(start, end - 1)
            owner.append(int(np.searchsorted(ends, last, side="right")))
        ids = [int(i) for i in enc["input_ids"]]
        return ids, [min(o, max(len(words) - 1, 0)) for o in owner]

    # -- scoring ---------------------------------------------------------------------------------
    @property
    def stats(self) -> HFStats:
        """Totals of every scoring call since loading (or :meth:`reset_stats`)."""
        return HFStats(*self._stats)

    def reset_stats(self) -> None:
        self._stats = [0, 0, 0, 0]  # HFStats' fields, in order

    def token_logprobs(
        self,
        sentences: Sequence[Sequence[str]],
        contexts: Sequence[Context | None] | None = None,
    ) -> list[np.ndarray]:
        """Per sentence, each word's log-probability (its pieces summed), then EOS's."""
        encoded = [self.pieces(s) for s in sentences]
        piece_lp = self._piece_logprobs([ids for ids, _ in encoded])
        out = []
        for (ids, owner), lp, words in zip(encoded, piece_lp, sentences, strict=True):
            values = np.zeros(len(words) + 1, dtype=np.float64)
            np.add.at(values, np.asarray(owner, dtype=np.int64), lp[: len(ids)])
            values[-1] = lp[len(ids)]
            out.append(values)
        return out

    def sentence_logprobs(
        self,
        sentences: Sequence[Sequence[str]],
        contexts: Sequence[Context | None] | None = None,
    ) -> np.ndarray:
        return np.array([v.sum() for v in self.token_logprobs(sentences, contexts)])

    def _piece_logprobs(self, sequences: Sequence[Sequence[int]]) -> list[np.ndarray]:
        """log P of each piece and of EOS after BOS + pieces (len + 1 values per sentence)."""
        out: list[np.ndarray] = [np.empty(0)] * len(sequences)
        limit = self.max_positions
        fits = [i for i, s in enumerate(sequences) if limit is None or len(s) + 1 <= limit]
        too_long = sorted(set(range(len(sequences))) - set(fits))
        groups: list[tuple[list[int], int]] = []
        if self.prefix_cache:  # sorted by piece ids: sentences sharing a prefix are neighbours
            groups = self._prefix_groups(sequences, sorted(fits, key=lambda i: sequences[i]))
        grouped = {i for members, _ in groups for i in members}
        alone = [i for i in fits if i not in grouped]
        rows = [full_row(sequences[i], self.bos_id, self.eos_id) for i in alone]
        for i, lp in zip(alone, self._run_rows(rows), strict=True):
            out[i] = lp
        for i, lp in self._score_groups(sequences, groups).items():
            out[i] = lp
        if too_long:
            self._score_windows(sequences, too_long, out)
        self._stats[0] += len(sequences)
        self._stats[1] += sum(len(s) + 1 for s in sequences)
        return out

    # -- prefix caching --------------------------------------------------------------------------
    def _prefix_groups(
        self, sequences: Sequence[Sequence[int]], order: Sequence[int]
    ) -> list[tuple[list[int], int]]:
        """Groups of neighbours in ``order`` worth caching: ``(members, shared pieces)``.

        A sentence joins the current group when it shares at least ``min_prefix`` pieces with
        the group's prefix and the group's saving, ``(members - 1) * shared``, does not fall
        (one sentence sharing little would otherwise shrink a long prefix for all the others).
        """
        found: list[tuple[list[int], int]] = []
        if not order:
            return found
        members, shared = [order[0]], len(sequences[order[0]])
        for i in order[1:]:
            common = common_prefix(sequences[members[0]], sequences[i], shared)
            if common >= self.min_prefix and len(members) * common >= (len(members) - 1) * shared:
                members.append(i)
                shared = common
                continue
            found.append((members, shared))
            members, shared = [i], len(sequences[i])
        found.append((members, shared))
        least = max(self.min_prefix, 1)  # a group re-reads its last prefix piece: one at least
        return [(m, s) for m, s in found if len(m) >= 2 and s >= least]

    def _score_groups(
        self, sequences: Sequence[Sequence[int]], groups: Sequence[tuple[list[int], int]]
    ) -> dict[int, np.ndarray]:
        """Values of the grouped sentences, a bundle of groups at a time: the bundle's prefixes
        in one batch, then all its members' rests in one batch on top of their cache."""
        out: dict[int, np.ndarray] = {}
        for bundle in self._bundles(sequences, groups):
            prefixes = [sequences[members[0]][:shared] for members, shared in bundle]
            # BOS + prefix[:-1] scores every prefix piece and caches len(prefix) positions
            heads = [_Row((self.bos_id, *prefix[:-1]), tuple(prefix)) for prefix in prefixes]
            head_lp, cache = self._forward(heads, keep=True)  # (G, longest prefix)
            # each member's row re-reads its last prefix piece: that output scores the first
            # suffix piece, or EOS for a member that is the prefix alone
            rows, owner, member = [], [], []
            for g, ((members, shared), prefix) in enumerate(zip(bundle, prefixes, strict=True)):
                for i in members:
                    rest = tuple(sequences[i][shared:])
                    rows.append(_Row((prefix[-1], *rest), (*rest, self.eos_id)))
                    owner.append(g)
                    member.append(i)
            past = _Past(cache, [len(prefix) for prefix in prefixes], owner)
            tails, _ = self._forward(rows, past)  # (rows, longest rest + 1)
            for r, (i, g) in enumerate(zip(member, owner, strict=True)):
                shared, n = len(prefixes[g]), len(rows[r].inputs)
                out[i] = np.concatenate([head_lp[g, :shared], tails[r, :n]])
        return out

    def _bundles(
        self, sequences: Sequence[Sequence[int]], groups: Sequence[tuple[list[int], int]]
    ) -> list[list[tuple[list[int], int]]]:
        """Groups packed into bundles whose members' rows, and whose prefixes, fill about
        ``batch_tokens`` padded positions each; a group too big for one batch is cut into parts,
        each running its prefix."""
        parts: list[tuple[list[int], int, int]] = []  # members, shared, widest row
        for members, shared in groups:
            part: list[int] = []
            widest = 0
            for i in members:
                width = len(sequences[i]) - shared + 1
                if part and (len(part) + 1) * max(widest, width) > self.batch_tokens:
                    parts.append((part, shared, widest))
                    part, widest = [], 0
                part.append(i)
                widest = max(widest, width)
            parts.append((part, shared, widest))
        parts.sort(key=lambda part: (part[2], part[1]))  # like widths share a batch: less padding
        bundles: list[list[tuple[list[int], int]]] = []
        bundle: list[tuple[list[int], int]] = []
        rows = longest = 0  # the bundle's rows, and its longest prefix
        for members, shared, widest in parts:  # sorted: this part's rows are the widest yet
            longest = max(longest, shared)
            if bundle and (
                (rows + len(members)) * widest > self.batch_tokens
                or (len(bundle) + 1) * longest > self.batch_tokens
            ):
                bundles.append(bundle)
                bundle, rows, longest = [], 0, shared
            bundle.append((members, shared))
            rows += len(members)
        return [*bundles, bundle] if bundle else bundles

    # -- long sentences --------------------------------------------------------------------------
    def _score_windows(
        self, sequences: Sequence[Sequence[int]], indices: Sequence[int], out: list[np.ndarray]
    ) -> None:
        """Values of sentences longer than the model's limit, in sliding windows (into out)."""
        assert self.max_positions is not None
        rows: list[_Row] = []
        keep: list[tuple[int, int]] = []  # per row: its sentence, and its first scored target
        for i in indices:
            row = full_row(sequences[i], self.bos_id, self.eos_id)
            for begin, end, first in windows(len(row.inputs), self.max_positions):
                rows.append(_Row(row.inputs[begin:end], row.targets[begin:end]))
                keep.append((i, first - begin))
        parts: dict[int, list[np.ndarray]] = {i: [] for i in indices}
        for (i, skip), lp in zip(keep, self._run_rows(rows), strict=True):
            parts[i].append(lp[skip:])  # rows of a sentence come in window order
        for i in indices:
            out[i] = np.concatenate(parts[i])
        logger.info(
            "hf %s: %d sentence(s) longer than the model's %d positions, scored in %d windows "
            "(stride %d)",
            self.name, len(indices), self.max_positions, len(rows), max(self.max_positions // 2, 1),
        )  # fmt: skip

    # -- batches ---------------------------------------------------------------------------------
    def _run_rows(self, rows: Sequence[_Row]) -> list[np.ndarray]:
        """Each row's target log-probs, rows batched by about ``batch_tokens`` padded tokens
        (sorted by length, so rows of a batch pad little)."""
        order = sorted(range(len(rows)), key=lambda i: len(rows[i].inputs))
        out: list[np.ndarray] = [np.empty(0)] * len(rows)
        start = 0
        while start < len(order):
            stop = start + 1
            while stop < len(order):
                width = len(rows[order[stop]].inputs)  # sorted: the last one is the widest
                if (stop - start + 1) * width > self.batch_tokens:
                    break
                stop += 1
            picked, _ = self._forward([rows[i] for i in order[start:stop]])
            for r, i in enumerate(order[start:stop]):
                out[i] = picked[r, : len(rows[i].inputs)]
            start = stop
        return out

    def _forward(
        self, rows: Sequence[_Row], past: _Past | None = None, keep: bool = False
    ) -> tuple[np.ndarray, Any]:
        """One padded batch: its (B, T) target log-probs (float64), and with ``keep`` the
        model's key/value cache (else None).

        Rows are right-padded with EOS (masked out). On top of ``past``, row ``r`` reads the
        cached prefix ``past.owner[r]`` first: the cache is gathered to one prefix per row (it
        is used once, so in place), the attention mask covers that prefix's real positions and
        the row's, and the row's positions are numbered on from the prefix's length (its padded
        slots repeat its last real position, so none passes the model's limit).
        """
        torch = self._torch
        b, t = len(rows), max(len(row.inputs) for row in rows)
        inputs = torch.full((b, t), self.eos_id, dtype=torch.long)  # (B, T)
        targets = torch.full((b, t), self.eos_id, dtype=torch.long)  # (B, T)
        mask = torch.zeros((b, t), dtype=torch.long)  # (B, T), 1 on real positions
        for r, row in enumerate(rows):
            n = len(row.inputs)
            inputs[r, :n] = torch.tensor(row.inputs, dtype=torch.long)
            targets[r, :n] = torch.tensor(row.targets, dtype=torch.long)
            mask[r, :n] = 1
        kwargs: dict[str, Any] = {"use_cache": keep or past is not None}
        if past is not None:
            owner = torch.tensor(past.owner, dtype=torch.long)  # (B,)
            lengths = torch.tensor(past.lengths, dtype=torch.long)[owner]  # (B,)
            past.cache.batch_select_indices(owner.to(self.device))  # (G, ..) -> (B, ..)
            cached = torch.arange(max(past.lengths)) < lengths[:, None]  # (B, P): real past
            mask = torch.cat([cached.long(), mask], dim=1)  # (B, P + T)
            kwargs[self._cache_arg] = past.cache
            # a row's padded slots repeat its last real position: numbered on, they could run
            # past a model's learned positions (a long prefix's short rows in a bundle whose
            # widest row is long) although every real position fits
            widths = torch.tensor([len(row.inputs) for row in rows], dtype=torch.long)  # (B,)
            last = lengths + widths - 1  # (B,): each row's last real position
            positions = torch.minimum(lengths[:, None] + torch.arange(t), last[:, None])
            kwargs["position_ids"] = positions.to(self.device)  # (B, T)
        with torch.inference_mode():
            result = self.model(
                input_ids=inputs.to(self.device), attention_mask=mask.to(self.device), **kwargs
            )
            lp = torch.log_softmax(result.logits.float(), dim=-1)  # (B, T, V)
            picked = lp.gather(2, targets.to(self.device).unsqueeze(2)).squeeze(2)  # (B, T)
        self._stats[2] += sum(len(row.inputs) for row in rows)
        self._stats[3] += b * t
        # the output field follows the argument's name (see __init__)
        return picked.double().cpu().numpy(), result.get(self._cache_arg) if keep else None

    def oov_flags(self, sentences: Sequence[Sequence[str]]) -> list[np.ndarray]:
        """No word is unknown to a model over subword pieces."""
        return [np.zeros(len(s), dtype=bool) for s in sentences]

    # -- streaming (the prefix is re-scored: simple and consistent with token_logprobs) ----------
    def start(self, context: Context | None = None) -> HFState:
        return HFState(())

    def advance(
        self, states: Sequence[HFState], tokens: Sequence[str]
    ) -> tuple[np.ndarray, list[HFState]]:
        check_advance(states, tokens)
        out = np.empty(len(tokens), dtype=np.float64)
        new: list[HFState] = []
        for i, (state, token) in enumerate(zip(states, tokens, strict=True)):
            if token == "</s>":
                out[i] = self.token_logprobs([state.words])[0][-1]
                new.append(state)
                continue
            words = (*state.words, token)
            out[i] = self.token_logprobs([words])[0][-2]
            new.append(HFState(words))
        return out, new

    def describe(self) -> dict[str, Any]:
        return {
            "units": self.units,
            "device": str(self.device),
            "case": self.case,
            "prefix_cache": self.prefix_cache,
        }

    def __repr__(self) -> str:
        return f"HFCausalLM({str(self.path)!r}, device={str(self.device)!r})"


load_hf_lm = loader(HFCausalLM, "device", "batch_tokens", "prefix_cache")
