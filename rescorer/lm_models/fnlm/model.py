"""Factored neural language model (Alexandrescu & Kirchhoff 2006, "Factored Neural Language
Models", UWEETR-2006-0014), a feed-forward n-gram NLM over word factors.

The network (section 5, Fig. 3), for the word w_t after the history w_{t-1} .. w_{t-n+1}:

- eq. 3, input:  i = <M(f^1_{t-1}) M(f^2_{t-1}) .. M(f^K_{t-1}) M(f^1_{t-2}) ..>, the embedding
  of every factor of every history word, concatenated position by position (most recent word
  first). Each factor type has its own table (disjoint row sets of M), all of width ``embed_dim``
  (the paper's uniform M; it defers non-uniform widths to future work).
- eq. 2, hidden: h = tanh(W_ih i + B_h).
- eq. 1, output: o = softmax(W_ho h + B_o) over the output words; or, with word classes
  (section 5, "we first group words into classes ... P(w_t) = P(c_t) x P(w_t|c_t)"),
  P(w|h) = P(c(w)|h) P(w|c(w),h), two softmaxes: over the classes, and over the words of w's
  class (a "flat" hierarchy).

With ``factors=("word",)`` this is the NLM of Bengio et al. (section 2, Fig. 1) exactly.

Unknown factors in the history (section 6) get a vector derived from the known values of their
type at evaluation time (:func:`rescorer.lm_models.fnlm.factors.unknown_vector`: NULL, ALL, TAIL,
LEAST); known factors of an unknown word are used as they are.

Output vocabulary and unknown words. The output units are the training words seen at least
``output_min_count`` times (the *frequent* words), ``</s>``, and ``<unk>``, which in training
stands for every rarer word, so the model learns how likely a rare-or-new word is after each
history. A word then gets (natural logs):

- frequent word w:                      ln P(w|h)
- rare training word (count below the threshold): ln P(<unk>|h) + ln((1 - beta) / n_rare)
- word never seen in training (OOV):     ln P(<unk>|h) + ln beta

so the probabilities of all training words plus the OOV event sum to 1. ``beta`` (the config's
``unk_share``) is the Good-Turing share of unseen words in the rare mass: with n_r the number of
word types seen r times and threshold t, beta = n_1 / (n_1 + sum_{r=1}^{t-1} (r+1) n_{r+1})
(the expected mass of new words is n_1/N, of words seen r times (r+1) n_{r+1}/N). Training
words of any count are known *input* values; only never-seen words are unknown in a history.

All log-probabilities are natural logs.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from rescorer.core.errors import InputError
from rescorer.core.io import read_lines
from rescorer.core.json_input import json_fields
from rescorer.lm_models.checkpoint import load_checkpoint, register_model_type, save_checkpoint
from rescorer.lm_models.fnlm.factors import (
    FIRST_VALUE_ID,
    FactorEncoder,
    FactorSettings,
    FactorVocab,
    Lexicon,
    WordLike,
    check_strategy,
    unknown_vector,
)
from rescorer.lm_models.output import ClassFactoredSoftmax, FullSoftmax
from rescorer.lm_models.vocab import BOS, BOS_ID, EOS, EOS_ID, UNK, UNK_ID, Vocabulary

logger = logging.getLogger(__name__)

MIN_ORDER, MAX_ORDER = 2, 10
EMBED_INIT_STD = 0.1
MIN_UNK_SHARE = 0.01
SCORE_BUDGET = 2**24  # floats of output work per scoring batch


@dataclass(frozen=True)
class FNLMConfig:
    """Architecture of an FNLM and what it needs to turn words into inputs and targets."""

    # Output units: <unk>, <s>, </s> and the frequent training words.
    vocab_size: int
    # Factor types read at every history position (rescorer.lm_models.fnlm.factors), in input order.
    factors: tuple[str, ...]
    # Known values of each factor type, <s> padding included (rows of its embedding table).
    factor_sizes: tuple[int, ...]
    # n of the n-gram: the history is the n-1 previous words.
    order: int = 4
    # Embedding width of every factor (the columns of M).
    embed_dim: int = 32
    # Hidden layer size (eq. 2).
    hidden_dim: int = 64
    # Class of each output unit for the class-factored output; () = full softmax.
    word_classes: tuple[int, ...] = ()
    # Factor extraction settings: lower-case words, language of the casing/stemming rules.
    lower: bool = True
    language: str = ""
    # Dropout on the input vector i and the hidden layer h in training (0: none, the paper's
    # setting; an addition that fights the over-fitting of small corpora).
    dropout: float = 0.0
    # Unknown-factor strategy used when none is given at evaluation ("null|all|tail|least").
    unk_strategy: str = "least"
    # beta: share of P(<unk>|h) that goes to never-seen words (module docstring).
    unk_share: float = 1.0
    # Number of rare training word types sharing the rest of P(<unk>|h).
    rare_types: int = 0

    def __post_init__(self) -> None:
        for name in ("factors", "factor_sizes", "word_classes"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        self.settings()  # validates the factor names
        if len(self.factor_sizes) != len(self.factors):
            raise ValueError(
                f"{len(self.factor_sizes)} factor sizes for {len(self.factors)} factors"
            )
        if any(s < 1 for s in self.factor_sizes):
            raise ValueError(f"factor sizes must be >= 1, got {list(self.factor_sizes)}")
        if not MIN_ORDER <= self.order <= MAX_ORDER:
            raise ValueError(f"order must be in {MIN_ORDER}..{MAX_ORDER}, got {self.order}")
        if self.vocab_size < 3 or self.embed_dim < 1 or self.hidden_dim < 1:
            raise ValueError(
                "vocab_size must be >= 3 and embed_dim, hidden_dim >= 1, got "
                f"{self.vocab_size}, {self.embed_dim}, {self.hidden_dim}"
            )
        if self.word_classes:
            if len(self.word_classes) != self.vocab_size:
                raise ValueError(
                    f"word_classes has {len(self.word_classes)} entries, expected vocab_size="
                    f"{self.vocab_size}"
                )
            n = max(self.word_classes) + 1
            if min(self.word_classes) < 0 or len(set(self.word_classes)) != n:
                raise ValueError("word classes must be numbered 0..C-1 without gaps")
        check_strategy(self.unk_strategy)
        if not 0 <= self.dropout < 1:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")
        if not 0 < self.unk_share <= 1:
            raise ValueError(f"unk_share must be in (0, 1], got {self.unk_share}")
        if self.rare_types < 0:
            raise ValueError(f"rare_types must be >= 0, got {self.rare_types}")

    @property
    def num_classes(self) -> int:
        """Output classes (0: full softmax)."""
        return max(self.word_classes) + 1 if self.word_classes else 0

    def settings(self) -> FactorSettings:
        return FactorSettings(self.factors, self.lower, self.language)

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        for k, v in out.items():
            if isinstance(v, tuple):
                out[k] = list(v)
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> FNLMConfig:
        return cls(**json_fields(cls, data, "FNLM config"))


class FNLM(nn.Module):
    """The network of eqs. 1-3 (see the module docstring); ``FNLM(config)``."""

    # Checkpoints written before the shared output layer (rescorer.lm_models.output) load unchanged.
    RENAMED_TENSORS = {
        "class_out.weight": "output.class_layer.weight",
        "class_out.bias": "output.class_layer.bias",
    }

    def __init__(self, config: FNLMConfig) -> None:
        super().__init__()
        self.config = config
        d = config.embed_dim
        # M: one table per factor type (disjoint row subsets of the paper's single matrix).
        self.embeddings = nn.ModuleList(nn.Embedding(size, d) for size in config.factor_sizes)
        for emb in self.embeddings:
            nn.init.normal_(emb.weight, std=EMBED_INIT_STD)
        in_dim = (config.order - 1) * len(config.factors) * d
        self.hidden = nn.Linear(in_dim, config.hidden_dim)  # W_ih, B_h (eq. 2)
        self.dropout = nn.Dropout(config.dropout)
        self.out = nn.Linear(config.hidden_dim, config.vocab_size)  # W_ho, B_o (eq. 1)
        # The output layer (rescorer.lm_models.output): the full softmax, or the class-factored one
        # of section 5 with a row of its own per class. <s> is an output unit only to keep the ids
        # shared with the inputs; it is never a target, so it gets no probability.
        self.output: FullSoftmax | ClassFactoredSoftmax
        if config.word_classes:
            bos_class = config.word_classes[BOS_ID]
            if config.word_classes.count(bos_class) < 2:
                raise ValueError("<s> (never predicted) must share its class with other words")
            self.output = ClassFactoredSoftmax(
                config.word_classes, config.hidden_dim, never=(BOS_ID,), tie_singletons=False
            )
        else:
            self.output = FullSoftmax(config.vocab_size, never=(BOS_ID,))

    @property
    def class_layer(self) -> nn.Linear | None:
        """The class layer of a class-factored output (None for the full softmax)."""
        return self.output.class_layer if isinstance(self.output, ClassFactoredSoftmax) else None

    # -- eqs. 3 and 2 ----------------------------------------------------------------------------
    def input_vector(self, history: Tensor, strategy: str | None = None) -> Tensor:
        """eq. 3: ``history`` (B, n-1, K) factor ids, most recent word first -> (B, (n-1)*K*d).

        Ids < 0 are unknown values: they get the ``strategy`` vector of their factor type.
        """
        b, positions, k = history.shape
        if positions != self.config.order - 1 or k != len(self.embeddings):
            raise ValueError(
                f"history must be (batch, {self.config.order - 1}, {len(self.embeddings)}), "
                f"got {tuple(history.shape)}"
            )
        parts = []
        for j, emb in enumerate(self.embeddings):
            ids = history[..., j]
            unknown = ids < 0
            if bool(unknown.any()):
                strategy = check_strategy(strategy or self.config.unk_strategy)
                # Section 6: derived from the known values of the same type (not <s>).
                vec = unknown_vector(emb.weight[FIRST_VALUE_ID:], strategy)
                parts.append(torch.where(unknown.unsqueeze(-1), vec, emb(ids.clamp(min=0))))
            else:
                parts.append(emb(ids))
        # (B, n-1, K, d): position-major, then factor: the order of eq. 3.
        return torch.stack(parts, dim=2).reshape(b, -1)

    def hidden_state(self, history: Tensor, strategy: str | None = None) -> Tensor:
        """eq. 2: h = tanh(W_ih i + B_h)."""
        i = self.dropout(self.input_vector(history, strategy))
        return self.dropout(torch.tanh(self.hidden(i)))

    # -- eq. 1, full or class-factored -----------------------------------------------------------
    def log_prob(self, h: Tensor, targets: Tensor) -> Tensor:
        """ln P(target|h) for each row: (B, H), (B,) -> (B,).

        With classes only the target's class is normalised over (the speed-up of section 5).
        """
        return self.output.log_prob(h, targets, self.out.weight, self.out.bias)

    def log_probs(self, h: Tensor) -> Tensor:
        """ln P(w|h) for every output unit: (B, H) -> (B, V)."""
        return self.output.log_probs(h, self.out.weight, self.out.bias)

    def forward(self, history: Tensor, targets: Tensor, strategy: str | None = None) -> Tensor:
        """ln P(target | history) per row."""
        return self.log_prob(self.hidden_state(history, strategy), targets)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())


# -- count flattening (eq. 4) ---------------------------------------------------------------------


def flattening_weights(patterns: np.ndarray, alpha: float) -> np.ndarray:
    """Per-occurrence training weights from eq. 4, C'(p) = alpha C_min + (1 - alpha) C(p).

    ``patterns`` is (N, D): one row per training sample (its history factor ids and target).
    A pattern seen C(p) times gets total weight C'(p), so each occurrence weighs C'(p)/C(p):
    frequent patterns are damped, rare ones keep weight about 1 (section 5, against the model
    "locking onto the most frequent input patterns").
    """
    if not 0 <= alpha <= 1:
        raise ValueError(f"alpha must be in [0, 1], got {alpha}")
    if len(patterns) == 0:
        return np.zeros(0)
    _, inverse, counts = np.unique(patterns, axis=0, return_inverse=True, return_counts=True)
    return flattened(counts[inverse.reshape(-1)], int(counts.min()), alpha)


def flattened(counts: np.ndarray, smallest: int, alpha: float) -> np.ndarray:
    """Eq. 4's weight of each occurrence of a pattern seen ``counts`` times in the training
    corpus whose rarest pattern is seen ``smallest`` times: C'(p) / C(p) (float64)."""
    c = np.asarray(counts).astype(np.float64)
    return (alpha * smallest + (1 - alpha) * c) / c


def pattern_keys(patterns: np.ndarray) -> np.ndarray:
    """Each row of ``patterns`` (N, D) as one value (numpy ``void`` of its int64 bytes), so
    that patterns sort, compare and count as one column (as np.unique(axis=0) counts rows)."""
    rows = np.ascontiguousarray(patterns, dtype=np.int64)
    return rows.view(np.dtype((np.void, 8 * rows.shape[1]))).reshape(len(rows))


# -- words to inputs and targets -------------------------------------------------------------------


def unk_share(word_counts: Mapping[str, int], min_count: int) -> float:
    """beta of the module docstring from the training word counts and the output threshold."""
    if min_count <= 1:
        return 1.0  # no rare words: all of P(<unk>|h) is for unseen ones
    n = np.bincount(np.fromiter(word_counts.values(), dtype=np.int64), minlength=min_count + 1)
    rare_mass = sum((r + 1) * n[r + 1] for r in range(1, min_count))
    if n[1] + rare_mass == 0:
        return 0.5
    # Kept off 0 and 1 so that neither rare nor unseen words get probability 0 (tiny corpora).
    return float(np.clip(n[1] / (n[1] + rare_mass), MIN_UNK_SHARE, 1 - MIN_UNK_SHARE))


def history_windows(ids: np.ndarray, order: int) -> np.ndarray:
    """(T, K) factor ids of a sentence -> (T+1, order-1, K) histories of its T+1 targets.

    Row t holds the words before target t (the last target is ``</s>``), most recent first;
    positions before the sentence start hold the ``<s>`` id 0.
    """
    t, k = ids.shape
    padded = np.concatenate([np.zeros((order - 1, k), dtype=np.int64), ids])
    # Target t's history: padded rows t+order-2 down to t (word t-1 down to t-order+1).
    rows = np.arange(t + 1)[:, None] + np.arange(order - 2, -1, -1)[None, :]
    return padded[rows]


@dataclass(frozen=True)
class EncodedTokens:
    """Every token of some sentences (their words and ``</s>``), ready for the network."""

    # (N, n-1, K) history factor ids; -1 where a factor value is unknown.
    history: np.ndarray
    # (N,) output unit of each token (<unk> for rare and never-seen words).
    targets: np.ndarray
    # (N,) ln term added to ln P(target|h): rare share, OOV share, or 0.
    log_extra: np.ndarray
    # (N,) True where the word was never seen in training (scored as <unk>).
    oov: np.ndarray
    # Tokens per sentence (words + 1).
    lengths: tuple[int, ...]

    def rows(self, rows: slice | np.ndarray) -> EncodedTokens:
        """Some of the tokens (sentence lengths dropped)."""
        return EncodedTokens(
            self.history[rows], self.targets[rows], self.log_extra[rows], self.oov[rows], ()
        )


class FactoredLM:
    """An FNLM with its factor encoder, output vocabulary and training word counts."""

    def __init__(
        self,
        model: FNLM,
        vocab: Vocabulary,
        encoder: FactorEncoder,
        word_counts: Mapping[str, int],
        lexicon: Lexicon | None = None,
    ) -> None:
        cfg = model.config
        if len(vocab) != cfg.vocab_size:
            raise ValueError(f"vocabulary has {len(vocab)} units, config says {cfg.vocab_size}")
        if encoder.sizes != cfg.factor_sizes or encoder.settings != cfg.settings():
            raise ValueError("factor vocabularies do not match the model config")
        self.model = model
        self.vocab = vocab
        self.encoder = encoder
        self.word_counts = dict(word_counts)
        # Each training word's annotation, for plain text (None: the model needs none, or the
        # checkpoint predates lexicons).
        self.lexicon = lexicon
        rare = sum(1 for w in self.word_counts if w not in vocab)
        if rare != cfg.rare_types:
            raise ValueError(f"{rare} rare training words, config says {cfg.rare_types}")
        if rare and cfg.unk_share >= 1:
            raise ValueError(f"unk_share must be below 1 when there are rare words ({rare})")
        self._log_rare = math.log((1 - cfg.unk_share) / rare) if rare else 0.0
        self._log_oov = math.log(cfg.unk_share)

    @property
    def config(self) -> FNLMConfig:
        return self.model.config

    def token(self, word: WordLike) -> str:
        return self.encoder.settings.token(word)

    def is_known(self, token: str) -> bool:
        """True for a word seen in training (any count)."""
        return token in self.word_counts

    def target(self, token: str) -> tuple[int, float, bool]:
        """``(output unit, ln extra term, oov)`` of a token (``</s>`` included)."""
        if token == EOS:
            return EOS_ID, 0.0, False
        unit = self.vocab.token_id(token)
        if unit != UNK_ID and unit != BOS_ID:
            return unit, 0.0, False
        if token in self.word_counts:
            return UNK_ID, self._log_rare, False
        return UNK_ID, self._log_oov, True

    def encode(self, sentences: Sequence[Sequence[WordLike]]) -> EncodedTokens:
        order = self.config.order
        hist, targets, extra, oov, lengths = [], [], [], [], []
        for words in sentences:
            hist.append(history_windows(self.encoder.encode(words), order))
            for tok in [*(self.token(w) for w in words), EOS]:
                unit, ext, is_oov = self.target(tok)
                targets.append(unit)
                extra.append(ext)
                oov.append(is_oov)
            lengths.append(len(words) + 1)
        k = len(self.config.factors)
        return EncodedTokens(
            np.concatenate(hist) if hist else np.zeros((0, order - 1, k), dtype=np.int64),
            np.asarray(targets, dtype=np.int64),
            np.asarray(extra, dtype=np.float64),
            np.asarray(oov, dtype=bool),
            tuple(lengths),
        )

    def score_rows(self, batch_size: int = 4096) -> int:
        """Rows per batch of :meth:`score_encoded`: at most ``batch_size``, fewer so that the
        per-batch output work (the logits of a class, or of the vocabulary) stays bounded."""
        output = self.model.output
        width = max(output.sizes) if isinstance(output, ClassFactoredSoftmax) else output.vocab_size
        return max(1, min(batch_size, SCORE_BUDGET // width))

    @torch.no_grad()
    def score_encoded(
        self, enc: EncodedTokens, strategy: str | None = None, batch_size: int = 4096
    ) -> np.ndarray:
        """ln P of every encoded token (natural log), rare/OOV terms included."""
        model = self.model
        was_training = model.training
        model.eval()
        device = next(model.parameters()).device
        batch_size = self.score_rows(batch_size)
        out = np.empty(len(enc.targets), dtype=np.float64)
        for lo in range(0, len(out), batch_size):
            hist = torch.from_numpy(enc.history[lo : lo + batch_size]).to(device)
            tgt = torch.from_numpy(enc.targets[lo : lo + batch_size]).to(device)
            out[lo : lo + len(tgt)] = model(hist, tgt, strategy).double().cpu().numpy()
        model.train(was_training)
        return out + enc.log_extra

    def token_logprobs(
        self, sentences: Sequence[Sequence[WordLike]], strategy: str | None = None
    ) -> list[np.ndarray]:
        """Per sentence, ln P of each word and of ``</s>``."""
        enc = self.encode(sentences)
        flat = self.score_encoded(enc, strategy)
        bounds = np.cumsum((0, *enc.lengths))
        return [flat[a:b] for a, b in zip(bounds[:-1], bounds[1:], strict=True)]

    # -- checkpoints -----------------------------------------------------------------------------
    def save(self, path: str | Path, training_meta: Mapping[str, Any] | None = None) -> Path:
        """A checkpoint folder (rescorer.lm_models.checkpoint): config, ``vocab.txt`` (output
        units), safetensors weights, plus ``words.txt`` (training word counts), ``factor<i>.txt``
        (the known values of factor i with their counts, in id order) and, for a model with
        annotation factors, ``lexicon.txt`` (:class:`~rescorer.lm_models.fnlm.factors.Lexicon`)."""

        ranked = sorted(self.word_counts.items(), key=lambda wc: (-wc[1], wc[0]))
        extra = {WORDS_FILE: "".join(f"{w}\t{c}\n" for w, c in ranked)}
        for i, vocab in enumerate(self.encoder.vocabs):
            extra[factor_file(i)] = vocab.to_text()
        if self.lexicon is not None:
            extra[LEXICON_FILE] = self.lexicon.to_text()
        return save_checkpoint(path, self.model, self.vocab.tokens, training_meta, extra)


WORDS_FILE = "words.txt"
LEXICON_FILE = "lexicon.txt"


def factor_file(i: int) -> str:
    """File name of the i-th factor vocabulary in a checkpoint folder."""
    return f"factor{i}.txt"


def _read_word_counts(path: Path) -> dict[str, int]:
    counts: dict[str, int] = {}
    for lineno, line in read_lines(path):
        word, tab, count = line.rpartition("\t")
        if not tab or not word or not count.isdigit():
            raise InputError(f"expected 'word<TAB>count', got {line!r}", path, lineno)
        if word in counts:
            raise InputError(f"word {word!r} listed twice", path, lineno)
        counts[word] = int(count)
    return counts


def load_fnlm(path: str | Path, device: str | torch.device = "cpu") -> FactoredLM:
    """Read a checkpoint written by :meth:`FactoredLM.save` (strict: every file must match)."""

    path = Path(path)
    model, tokens, _ = load_checkpoint(path, device=device)
    if not isinstance(model, FNLM):
        raise ValueError(f"{path}: a {type(model).__name__} checkpoint, expected an FNLM")
    cfg = model.config
    vocabs = []
    for i, name in enumerate(cfg.factors):
        vocab = FactorVocab.load(path / factor_file(i), name)
        if len(vocab) != cfg.factor_sizes[i]:
            raise ValueError(
                f"{path / factor_file(i)}: {len(vocab)} values, config says {cfg.factor_sizes[i]}"
            )
        vocabs.append(vocab)
    encoder = FactorEncoder(cfg.settings(), vocabs)
    lexicon = None
    if (path / LEXICON_FILE).exists():
        lexicon = Lexicon.load(path / LEXICON_FILE, cfg.language)
    counts = _read_word_counts(path / WORDS_FILE)
    # Every output word was seen in training: one missing from the counts would be scored as
    # known but counted as unknown (a wrong "no unk" perplexity), so the two files must agree.
    unseen = [t for t in tokens if t not in counts and t not in (UNK, BOS, EOS)]
    if unseen:
        raise ValueError(
            f"{path / WORDS_FILE}: lists {len(counts)} training words but not {len(unseen)} of "
            f"the model's {len(tokens)}-token vocabulary ({', '.join(map(repr, unseen[:5]))}"
            f"{' ...' if len(unseen) > 5 else ''}): expected the checkpoint's own word counts"
        )
    return FactoredLM(model, Vocabulary(tokens), encoder, counts, lexicon)


register_model_type("fnlm", FNLMConfig, FNLM)
