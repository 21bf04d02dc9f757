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

Prefix cache (``prefix_cache=True``, the default): the sentences of one call are sorted by
their pieces and cut into groups that share at least ``MIN_SHARED_PIECES`` first pieces (an
N-best list's hypotheses mostly share their start); a group runs BOS + its shared pieces once
and all its remainders in one padded batch on the cached keys and values. The values equal
one pass per sentence up to float32 rounding (~1e-5 nats). Measured on 100 dev_other 30-best
lists (``bench/results/hf.md``): 77 % of the pieces fed, 1.1x faster on a CPU with a small
GPT-2, where the extra forward call per group costs about what the shared pieces save; the
saving grows with the model's cost per token.

Long sentences: a model reads at most ``L = max_positions`` tokens (GPT-2's ``n_positions``, a
Llama's ``max_position_embeddings``; no limit when its config names none). A sentence whose
BOS + pieces are longer is scored in overlapping windows, the usual sliding-window evaluation:
window k covers input positions ``[k * stride, k * stride + L)`` with ``stride = L // 2``
(cut at the sentence's end) and scores the targets that no earlier window scored, so every
piece keeps at least ``L - stride`` tokens of left context. Windows after the first start
mid-sentence, without BOS. A piece's context depends on its position only, never on how long
the sentence goes on, so streaming (:meth:`HFCausalLM.advance`) gives the same values. Sentences
that fit are scored in one pass, as above.

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
# Consecutive sentences (an N-best list's hypotheses) sharing at least this many leading pieces
# run the shared part once and their remainders on its cached keys and values.
MIN_SHARED_PIECES = 4


@dataclass(frozen=True)
class HFState:
    """A streaming state: the words scored so far (the model is re-run over them)."""

    words: tuple[str, ...]


class HFCausalLM:
    """A local HuggingFace causal LM (see the module docstring for the conventions)."""

    units = "subword"

    def __init__(
        self,
        path: str | Path,
        name: str | None = None,
        case: str = "auto",
        device: str | None = None,
        batch_tokens: int = DEFAULT_BATCH_TOKENS,
        prefix_cache: bool = True,
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
        self.prefix_cache = bool(prefix_cache)
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
        self.max_positions = _max_positions(model.config)
        # transformers >= 5.2x takes the cache as `cache`, earlier versions as `past_key_values`
        takes = inspect.signature(model.forward).parameters
        self._cache_arg = "cache" if "cache" in takes else "past_key_values"
        self.model = model.to(self.device).eval()
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
        """log P of each piece and of EOS after BOS + pieces, batched by padded tokens; the
        sentences longer than the model's context in windows (:meth:`_windowed`)."""
        torch = self._torch
        out: list[np.ndarray] = [np.empty(0)] * len(sequences)
        limit = self.max_positions
        long = [i for i, s in enumerate(sequences) if limit is not None and len(s) + 1 > limit]
        if long:
            logger.info(
                "%d of %d sentence(s) longer than the model's %d positions: scored in windows",
                len(long), len(sequences), limit,
            )  # fmt: skip
            for i in long:
                out[i] = self._windowed(sequences[i])
        skip = set(long)
        if self.prefix_cache:
            for group in _shared_runs(sequences, skip, MIN_SHARED_PIECES):
                # at most about batch_tokens padded tokens in one remainder batch
                rows = max(2, self.batch_tokens // (max(len(sequences[i]) for i in group) + 1))
                for first in range(0, len(group), rows):
                    chunk = group[first : first + rows]
                    for i, values in zip(chunk, self._shared(chunk, sequences), strict=True):
                        out[i] = values
                skip.update(group)
        order = sorted(
            (i for i in range(len(sequences)) if i not in skip), key=lambda i: len(sequences[i])
        )
        start = 0
        while start < len(order):
            width = len(sequences[order[start]]) + 1
            stop = start + 1
            while stop < len(order):
                width = len(sequences[order[stop]]) + 1  # sorted: the last one is the widest
                if (stop - start + 1) * width > self.batch_tokens:
                    break
                stop += 1
            batch = [sequences[i] for i in order[start:stop]]
            t = max(len(s) for s in batch) + 1
            inputs = torch.full((len(batch), t), self.eos_id, dtype=torch.long)
            targets = torch.full((len(batch), t), self.eos_id, dtype=torch.long)
            mask = torch.zeros((len(batch), t), dtype=torch.long)
            for r, seq in enumerate(batch):
                n = len(seq)
                inputs[r, : n + 1] = torch.tensor([self.bos_id, *seq], dtype=torch.long)
                targets[r, :n] = torch.tensor(list(seq), dtype=torch.long)
                mask[r, : n + 1] = 1
            with torch.inference_mode():
                logits = self.model(
                    input_ids=inputs.to(self.device), attention_mask=mask.to(self.device)
                ).logits.float()
                lp = torch.log_softmax(logits, dim=-1)
                picked = lp.gather(2, targets.to(self.device).unsqueeze(2)).squeeze(2)
            picked_np = picked.double().cpu().numpy()
            for r, i in enumerate(order[start:stop]):
                out[i] = picked_np[r, : len(sequences[i]) + 1]
            start = stop
        return out

    def _shared(self, group: Sequence[int], sequences: Sequence[Sequence[int]]) -> list[np.ndarray]:
        """log P of each piece and of EOS for sentences ``group`` that share their first pieces:
        BOS + the shared pieces in one pass, then every remainder in one padded batch on the
        cached keys and values of that pass (the same values as one pass each, up to float
        rounding)."""
        torch = self._torch
        seqs = [sequences[i] for i in group]
        m = _common_prefix(seqs)
        prefix = torch.tensor([[self.bos_id, *seqs[0][:m]]], dtype=torch.long)  # (1, m + 1)
        with torch.inference_mode():
            first = self.model(input_ids=prefix.to(self.device), use_cache=True)
            head = torch.log_softmax(first.logits[0].float(), dim=-1)  # (m + 1, V)
            shared = head[torch.arange(m), prefix[0, 1:].to(self.device)].double().cpu().numpy()
            after_prefix = head[m].double().cpu().numpy()  # (V,): what follows the shared part
            rests = [s[m:] for s in seqs]
            width = max(len(r) for r in rests)
            tails: np.ndarray | None = None
            if width:
                g = len(seqs)
                inputs = torch.full((g, width), self.eos_id, dtype=torch.long)  # (G, W)
                targets = torch.full((g, width), self.eos_id, dtype=torch.long)
                mask = torch.zeros((g, m + 1 + width), dtype=torch.long)  # past + remainder
                mask[:, : m + 1] = 1
                for r, rest in enumerate(rests):
                    n = len(rest)  # 0: the shared part is the whole sentence
                    if n:
                        inputs[r, :n] = torch.tensor(list(rest), dtype=torch.long)
                        targets[r, : n - 1] = torch.tensor(list(rest[1:]), dtype=torch.long)
                        mask[r, m + 1 : m + 1 + n] = 1
                cache = _output_cache(first)
                cache.batch_repeat_interleave(g)  # (1, ...) -> (G, ...) keys and values
                logits = self.model(
                    input_ids=inputs.to(self.device),
                    attention_mask=mask.to(self.device),
                    use_cache=True,
                    **{self._cache_arg: cache},
                ).logits.float()
                lp = torch.log_softmax(logits, dim=-1)  # (G, W, V)
                tails = lp.gather(2, targets.to(self.device).unsqueeze(2)).squeeze(2)
                tails = tails.double().cpu().numpy()  # (G, W): P(rest[j + 1] or EOS | ..)
        out = []
        for r, rest in enumerate(rests):
            n = len(rest)
            values = np.empty(m + n + 1, dtype=np.float64)
            values[:m] = shared
            values[m] = after_prefix[rest[0] if n else self.eos_id]
            if n:
                assert tails is not None
                values[m + 1 :] = tails[r, :n]
            out.append(values)
        return out

    def _windowed(self, seq: Sequence[int]) -> np.ndarray:
        """log P of each piece and of EOS of one sentence longer than the model's context, in
        windows of ``max_positions`` tokens (the module docstring states the convention)."""
        torch = self._torch
        assert self.max_positions is not None
        inputs = [self.bos_id, *seq]  # (T,): what each target is predicted after
        targets = [*seq, self.eos_id]  # (T,)
        limit, total = self.max_positions, len(inputs)
        stride = max(1, limit // 2)
        # Window k: inputs [k * stride, end_k), end_k = min(k * stride + limit, total); it scores
        # the targets [end_{k-1}, end_k) (from 0 for the first).
        starts = range(0, total - limit + stride, stride)
        ends = [min(start + limit, total) for start in starts]
        rows = torch.full((len(ends), limit), self.eos_id, dtype=torch.long)  # (W, L), padded
        picks = torch.full((len(ends), limit), self.eos_id, dtype=torch.long)  # (W, L)
        mask = torch.zeros((len(ends), limit), dtype=torch.long)
        for k, (start, end) in enumerate(zip(starts, ends, strict=True)):
            rows[k, : end - start] = torch.tensor(inputs[start:end], dtype=torch.long)
            picks[k, : end - start] = torch.tensor(targets[start:end], dtype=torch.long)
            mask[k, : end - start] = 1
        out = np.empty(total, dtype=np.float64)
        per_batch = max(1, self.batch_tokens // limit)
        for first in range(0, len(ends), per_batch):
            sl = slice(first, first + per_batch)
            with torch.inference_mode():
                logits = self.model(
                    input_ids=rows[sl].to(self.device), attention_mask=mask[sl].to(self.device)
                ).logits.float()
                lp = torch.log_softmax(logits, dim=-1)
                wanted = picks[sl].to(self.device).unsqueeze(2)
                picked = lp.gather(2, wanted).squeeze(2).double().cpu().numpy()  # (w, L)
            for r, k in enumerate(range(first, first + len(picked))):
                done = 0 if k == 0 else ends[k - 1]
                out[done : ends[k]] = picked[r, done - starts[k] : ends[k] - starts[k]]
        return out

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
        return {"units": self.units, "device": str(self.device), "case": self.case}

    def __repr__(self) -> str:
        return f"HFCausalLM({str(self.path)!r}, device={str(self.device)!r})"


def _output_cache(output: Any) -> Any:
    """The keys and values a forward pass with ``use_cache=True`` returned."""
    cache = getattr(output, "cache", None)
    return cache if cache is not None else output.past_key_values


def _common_prefix(seqs: Sequence[Sequence[int]]) -> int:
    """The number of leading pieces all of ``seqs`` share."""
    first, n = seqs[0], min(len(s) for s in seqs)
    for k in range(n):
        if any(s[k] != first[k] for s in seqs[1:]):
            return k
    return n


def _shared_runs(sequences: Sequence[Sequence[int]], skip: set[int], least: int) -> list[list[int]]:
    """Groups of two or more sentences (not in ``skip``) whose common first pieces number at
    least ``least``: the sentences in the order of their pieces, cut where the shared start of
    the group so far would fall below ``least`` (an N-best list's hypotheses mostly fall into
    a few groups, whatever their order in the call)."""
    order = sorted((i for i in range(len(sequences)) if i not in skip), key=lambda i: sequences[i])
    runs: list[list[int]] = []
    run: list[int] = []
    shared = 0
    for i in order:
        grown = min(shared, _common_prefix([sequences[run[0]], sequences[i]])) if run else 0
        if run and grown >= least:
            run.append(i)
            shared = grown
            continue
        if len(run) > 1:
            runs.append(run)
        run, shared = [i], len(sequences[i])
    if len(run) > 1:
        runs.append(run)
    return runs


def _max_positions(config: Any) -> int | None:
    """The longest input a transformers config allows (None: it names no limit)."""
    for key in ("n_positions", "max_position_embeddings", "n_ctx", "max_sequence_length"):
        value = getattr(config, key, None)
        if isinstance(value, int) and value > 1:
            return value
    return None


load_hf_lm = loader(HFCausalLM, "device", "batch_tokens", "prefix_cache")
