"""Training factored neural LMs (:mod:`lm_models.fnlm.model`) from a JSON config.

    rescorer fnlm-train CONFIG.json --out DIR        (or python -m lm_models.fnlm.train ...)

The config has three sections, each a frozen dataclass below (every field documented):

```json
{"data":  {"corpus": "conllu", "train": "ud/UD_Turkish-IMST/tr_imst-ud-train.conllu",
           "dev": "ud/UD_Turkish-IMST/tr_imst-ud-dev.conllu", "unit": "token",
           "factors": ["word", "lemma", "upos", "feats"], "language": "tr"},
 "model": {"order": 4, "embed_dim": 32, "hidden_dim": 64, "output": "classes",
           "classes": "frequency", "num_classes": 64},
 "train": {"epochs": 20, "batch_size": 128, "lr": 0.002, "l2": 1e-5, "flatten_alpha": 0.05}}
```

Corpora: ``conllu`` (train and dev files), ``plain`` (one sentence per line, words split on
whitespace; train and dev files) and ``brown`` (the tagged Brown folder, tags as the ``xpos``
factor, split by document into train/dev with ``split``). Paths are relative to the data folder
unless absolute.

Training (section 5 of the paper): Adam on the weighted negative log-likelihood of every token
(its words and ``</s>``), each occurrence weighted by count flattening (eq. 4,
:func:`lm_models.fnlm.model.flattening_weights`), plus ``l2`` times the sum of squared weights of
the dense layers (W_ih, W_ho and the class layer; biases and the embedding tables are not
penalised: under Adam an L2 pull on rarely seen embedding rows would drive them to zero between
their visits). Dropout on the input and hidden layers is an option (off by default; not in
the paper). After each epoch the dev perplexity (``train.select_by``: "no_unk", the tokens whose
word was seen in training, or "with_unk", every token; the config's unknown-factor strategy
for unknown history words) decides: the best weights are kept, the learning rate is multiplied
by ``lr_decay`` after an epoch without improvement, and training stops after ``patience`` such
epochs. The output folder is the checkpoint of the best epoch
(usable as ``fnlm:DIR``), with ``training.json`` holding the epoch log.
"""

from __future__ import annotations

import logging
import math
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from lm_models.conllu import read_conllu
from lm_models.corpora import read_brown_tagged, split_documents
from lm_models.distributed import (
    all_sum,
    init_world,
    process_device,
    rank_seed,
    seed_process,
    share_slices,
)
from lm_models.fnlm.factors import (
    FactorEncoder,
    FactorSettings,
    Lexicon,
    WordLike,
    check_strategy,
    needs_annotation,
    words_of_conllu,
    words_of_tagged,
    words_of_text,
)
from lm_models.fnlm.model import FNLM, FactoredLM, FNLMConfig, flattening_weights, unk_share
from lm_models.training import (
    DevResult,
    FitOptions,
    SectionedConfig,
    Step,
    TrainRun,
    config_training_main,
    fit,
)
from lm_models.vocab import BOS, EOS, SPECIAL_TOKENS, UNK, Vocabulary
from lm_models.word_classes import brown_classes, frequency_classes
from rescorer.core.io import read_lines

logger = logging.getLogger(__name__)

CORPORA = ("conllu", "plain", "brown")
UNITS = ("token", "word")


# -- configuration ----------------------------------------------------------------------------


@dataclass(frozen=True)
class FNLMDataConfig:
    """What to train on and which factors to read."""

    # "conllu", "plain" or "brown".
    corpus: str
    # Training file (conllu, plain) or the Brown folder.
    train: str
    # Dev file for early stopping (conllu, plain); None for brown (document split instead).
    dev: str | None = None
    # CoNLL-U units: "token" (surface tokens, a multiword token is one word) or "word".
    unit: str = "token"
    # Leave out punctuation (UPOS PUNCT when annotated, else tokens without letters or digits).
    drop_punct: bool = False
    # Factor types (lm_models.fnlm.factors); ["word"] is the plain word NLM.
    factors: tuple[str, ...] = ("word",)
    # Lower-case words and lemmas.
    lower: bool = True
    # Casing and stemming rules ("tr", "en"; "" generic).
    language: str = ""
    # Output words: training words seen this often; rarer ones train <unk> (lm_models.fnlm.model).
    output_min_count: int = 2
    # Input factor values: seen this often in training; rarer ones are unknown in training as
    # well and get the model's unknown-factor vector (1: every training value known, as in the
    # paper; 2: the network also learns what to make of unknown factors).
    input_min_count: int = 1
    # Brown only: train/dev/test fractions of the documents and the split's seed.
    split: tuple[float, float, float] = (0.8, 0.1, 0.1)
    split_seed: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "factors", tuple(self.factors))
        object.__setattr__(self, "split", tuple(self.split))
        if self.corpus not in CORPORA:
            raise ValueError(f"corpus must be one of {CORPORA}, got {self.corpus!r}")
        if self.unit not in UNITS:
            raise ValueError(f"unit must be one of {UNITS}, got {self.unit!r}")
        if self.corpus != "brown" and self.dev is None:
            raise ValueError(f"corpus {self.corpus!r} needs a dev file for early stopping")
        if self.output_min_count < 1 or self.input_min_count < 1:
            raise ValueError(
                "output_min_count and input_min_count must be >= 1, got "
                f"{self.output_min_count}, {self.input_min_count}"
            )
        self.settings()  # validates the factors

    def settings(self) -> FactorSettings:
        return FactorSettings(self.factors, self.lower, self.language)


@dataclass(frozen=True)
class FNLMModelOptions:
    """Architecture (the factor vocabularies and output words come from the data)."""

    # n of the n-gram (the paper uses 3 to 7).
    order: int = 4
    # Embedding width per factor, hidden units (the paper: d 32-64, 45-64 hidden units).
    embed_dim: int = 32
    hidden_dim: int = 64
    # "classes" (class-factored output) or "full" (one softmax over all output words).
    output: str = "classes"
    # Class assignment: "frequency" (binning) or "brown" (exchange algorithm).
    classes: str = "frequency"
    # Number of classes (at most; frequency binning can give fewer).
    num_classes: int = 64
    # Exchange-algorithm passes for "brown".
    brown_iterations: int = 5
    # Dropout on the input and hidden layers in training (not in the paper; 0 = off).
    dropout: float = 0.0
    # Default unknown-factor strategy: "null", "all", "tail" or "least".
    unk_strategy: str = "least"

    def __post_init__(self) -> None:
        if self.output not in ("classes", "full"):
            raise ValueError(f"output must be 'classes' or 'full', got {self.output!r}")
        if self.classes not in ("frequency", "brown"):
            raise ValueError(f"classes must be 'frequency' or 'brown', got {self.classes!r}")
        if self.num_classes < 1:
            raise ValueError(f"num_classes must be >= 1, got {self.num_classes}")
        check_strategy(self.unk_strategy)


@dataclass(frozen=True)
class FNLMTrainOptions:
    """Optimisation."""

    # Most epochs; training stops earlier after `patience` epochs without a better dev ppl.
    epochs: int = 20
    patience: int = 3
    # Samples (tokens) per step, Adam learning rate, its factor after an epoch without gain.
    batch_size: int = 128
    lr: float = 2e-3
    lr_decay: float = 0.5
    # L2 weight of the dense layers' squared weights (the paper's lambda).
    l2: float = 1e-5
    # Count flattening alpha of eq. 4 (0: plain counts).
    flatten_alpha: float = 0.05
    seed: int = 0
    # "cpu", "cuda", "auto" ...
    device: str = "cpu"
    # Stop each epoch after this many steps (None: all); for smoke tests.
    max_steps_per_epoch: int | None = None
    # Dev perplexity that selects the epoch: "no_unk" (tokens whose word was seen in training)
    # or "with_unk" (every token, unknown words as <unk>); see lm_models.fnlm.evaluate.
    select_by: str = "no_unk"

    def __post_init__(self) -> None:
        if self.epochs < 1 or self.batch_size < 1 or self.patience < 1:
            raise ValueError("epochs, batch_size and patience must be >= 1")
        if self.lr <= 0 or not 0 < self.lr_decay <= 1 or self.l2 < 0:
            raise ValueError(
                f"need lr > 0, 0 < lr_decay <= 1, l2 >= 0; got {self.lr}, {self.lr_decay}, "
                f"{self.l2}"
            )
        if not 0 <= self.flatten_alpha <= 1:
            raise ValueError(f"flatten_alpha must be in [0, 1], got {self.flatten_alpha}")
        if self.select_by not in ("no_unk", "with_unk"):
            raise ValueError(f"select_by must be 'no_unk' or 'with_unk', got {self.select_by!r}")


@dataclass(frozen=True)
class FNLMTrainConfig(SectionedConfig):
    """A whole training run."""

    data: FNLMDataConfig
    model: FNLMModelOptions = field(default_factory=FNLMModelOptions)
    train: FNLMTrainOptions = field(default_factory=FNLMTrainOptions)


# -- data -------------------------------------------------------------------------------------


def is_punct(word: WordLike) -> bool:
    """UPOS PUNCT (every part of a multiword token) when annotated, else no letter or digit."""
    if word.upos is not None and word.upos != "_":
        return all(p == "PUNCT" for p in word.upos.split("+"))
    return not any(c.isalnum() for c in word.form)


def read_sentences(
    path: str | Path, corpus: str, unit: str = "token", drop_punct: bool = False
) -> list[list[WordLike]]:
    """Sentences of a CoNLL-U or plain-text file as words with annotation (empty ones dropped)."""
    if corpus == "conllu":
        sentences = [words_of_conllu(s, unit) for s in read_conllu(path)]
    elif corpus == "plain":
        sentences = [words_of_text(line.split()) for _, line in read_lines(path)]
    else:
        raise ValueError(f"corpus must be 'conllu' or 'plain' for a file, got {corpus!r}")
    if drop_punct:
        sentences = [[w for w in s if not is_punct(w)] for s in sentences]
    return [s for s in sentences if s]


def _resolve(path: str, data_dir: Path) -> Path:
    return Path(path) if Path(path).is_absolute() else data_dir / path


def read_train_dev(
    dc: FNLMDataConfig, data_dir: Path
) -> tuple[list[list[WordLike]], list[list[WordLike]]]:
    """Training and dev sentences of a data config."""
    if dc.corpus == "brown":
        docs = read_brown_tagged(_resolve(dc.train, data_dir), lower=False, drop_punct=False)
        train_docs, dev_docs, _ = split_documents(docs, dc.split, None, dc.split_seed)
        train, dev = (
            [words_of_tagged(s) for d in part for s in d.tagged_sentences()]
            for part in (train_docs, dev_docs)
        )
        if dc.drop_punct:
            train = [[w for w in s if not is_punct(w)] for s in train]
            dev = [[w for w in s if not is_punct(w)] for s in dev]
        return [s for s in train if s], [s for s in dev if s]
    assert dc.dev is not None
    return (
        read_sentences(_resolve(dc.train, data_dir), dc.corpus, dc.unit, dc.drop_punct),
        read_sentences(_resolve(dc.dev, data_dir), dc.corpus, dc.unit, dc.drop_punct),
    )


def build_lm(
    cfg: FNLMTrainConfig, train: Sequence[Sequence[WordLike]]
) -> tuple[FactoredLM, dict[str, Any]]:
    """A freshly initialised FactoredLM for the training sentences, and a data summary."""
    settings = cfg.data.settings()
    tokens = [[settings.token(w) for w in s] for s in train]
    counts = Counter(t for s in tokens for t in s)
    min_count = cfg.data.output_min_count
    frequent = sorted((w for w, c in counts.items() if c >= min_count and w not in SPECIAL_TOKENS),
                      key=lambda w: (-counts[w], w))  # fmt: skip
    rare_tokens = sum(c for w, c in counts.items() if c < min_count)
    unit_counts = [rare_tokens, 0, len(tokens), *(counts[w] for w in frequent)]
    vocab = Vocabulary([UNK, BOS, EOS, *frequent], unit_counts)
    m = cfg.model
    word_classes: list[int] = []
    if m.output == "classes":
        if m.classes == "frequency":
            word_classes = frequency_classes(unit_counts, m.num_classes)
        else:
            ids = [[vocab.bos_id, *vocab.encode(s), vocab.eos_id] for s in tokens]
            word_classes = brown_classes(
                ids, unit_counts, m.num_classes, m.brown_iterations, fixed=[vocab.bos_id]
            )
    encoder = FactorEncoder.fit(settings, train, cfg.data.input_min_count)
    config = FNLMConfig(
        vocab_size=len(vocab),
        factors=settings.factors,
        factor_sizes=encoder.sizes,
        order=m.order,
        embed_dim=m.embed_dim,
        hidden_dim=m.hidden_dim,
        word_classes=tuple(word_classes),
        lower=settings.lower,
        language=settings.language,
        dropout=m.dropout,
        unk_strategy=m.unk_strategy,
        unk_share=unk_share(counts, min_count),
        rare_types=sum(1 for c in counts.values() if c < min_count),
    )
    torch.manual_seed(cfg.train.seed)
    # Plain text (N-best hypotheses) has no annotation: the lexicon gives it the training one.
    lexicon = None
    if any(needs_annotation(f) for f in settings.factors):
        lexicon = Lexicon.fit(settings.language, train)
    lm = FactoredLM(FNLM(config), vocab, encoder, counts, lexicon)
    summary = {
        "train_sentences": len(tokens),
        "train_words": sum(counts.values()),
        "word_types": len(counts),
        "output_units": len(vocab),
        "classes": config.num_classes,
        "factor_values": dict(zip(settings.factors, encoder.sizes, strict=True)),
        "unk_share": config.unk_share,
        "rare_types": config.rare_types,
        "parameters": lm.model.num_parameters(),
        "lexicon_words": 0 if lexicon is None else len(lexicon),
    }
    return lm, summary


# -- training ---------------------------------------------------------------------------------


def _l2_penalty(model: FNLM) -> torch.Tensor:
    dense = [model.hidden.weight, model.out.weight]
    if model.class_layer is not None:
        dense.append(model.class_layer.weight)
    return sum((w * w).sum() for w in dense)  # type: ignore[return-value]


def train_fnlm(
    cfg: FNLMTrainConfig, data_dir: Path, out_dir: Path, progress: bool = True
) -> TrainRun:
    """Train per ``cfg`` and write the best epoch's checkpoint to ``out_dir``."""
    t_start = time.perf_counter()
    opts = cfg.train
    device = process_device(opts.device)
    world = init_world(device)  # under torchrun: fit trains data-parallel (lm_models.distributed)
    train_sents, dev_sents = read_train_dev(cfg.data, data_dir)
    if not train_sents or not dev_sents:
        raise ValueError(
            f"need training and dev sentences, got {len(train_sents)} and {len(dev_sents)}"
        )
    lm, summary = build_lm(cfg, train_sents)  # from every training sentence, in every process
    model = lm.model.to(device)
    seed_process(opts.seed, world)  # dropout: each process its own draws
    logger.info("FNLM data and model: %s", summary)
    enc = lm.encode(train_sents)
    del train_sents
    dev = lm.encode(dev_sents)
    n = len(enc.targets)
    patterns = np.concatenate([enc.history.reshape(n, -1), enc.targets[:, None]], axis=1)
    weights = flattening_weights(patterns, opts.flatten_alpha)  # counts over the whole corpus
    del patterns
    # This process's share of the rows (every N-th), copied so that the rest can go.
    mine = slice(world.rank, None, world.size)
    history = torch.from_numpy(np.ascontiguousarray(enc.history[mine]))
    targets = torch.from_numpy(np.ascontiguousarray(enc.targets[mine]))
    weights = torch.from_numpy(np.ascontiguousarray(weights[mine])).float()
    del enc
    rows = len(targets)

    optimizer = torch.optim.Adam(model.parameters(), lr=opts.lr)
    gen = torch.Generator().manual_seed(rank_seed(opts.seed, world))

    def epoch_batches(epoch: int) -> list[torch.Tensor]:
        return list(torch.randperm(rows, generator=gen).split(opts.batch_size))

    def step(idx: torch.Tensor) -> Step:
        hist, tgt, w = history[idx].to(device), targets[idx].to(device), weights[idx].to(device)
        nll = -(w * model(hist, tgt)).mean()
        loss = nll + opts.l2 * _l2_penalty(model) if opts.l2 > 0 else nll
        return Step(loss, float(nll.detach()) * len(idx), len(idx))

    block = lm.score_rows()

    def evaluate() -> DevResult:
        # Each process scores its blocks of the dev tokens; the sums are added over them.
        sums = np.zeros(4)  # ln P of the known tokens, their number, of every token, theirs
        for part in share_slices(len(dev.targets), block, world):
            lp = lm.score_encoded(dev.rows(part))
            known = ~dev.oov[part]
            sums += (lp[known].sum(), known.sum(), lp.sum(), len(lp))
        known_lp, n_known, all_lp, n_all = all_sum(sums, world)
        no_unk = math.exp(-known_lp / n_known) if n_known else math.nan
        with_unk = math.exp(-all_lp / max(n_all, 1))
        selected = no_unk if opts.select_by == "no_unk" else with_unk
        return DevResult(selected, {"dev_ppl_no_unk": no_unk, "dev_ppl_with_unk": with_unk})

    fit_options = FitOptions.early_stopping(opts, progress, "FNLM")
    fitted = fit(model, optimizer, step, epoch_batches, evaluate, fit_options)
    seconds = time.perf_counter() - t_start
    run = TrainRun.of(fitted, out_dir, device, summary["parameters"], seconds)
    if world.is_main:
        lm.save(out_dir, run.meta(data=summary, config=cfg.to_json(), processes=world.size))
    return run


def main(argv: Sequence[str] | None = None) -> None:
    config_training_main(
        argv, "python -m lm_models.fnlm.train", __doc__, FNLMTrainConfig.load, train_fnlm
    )


if __name__ == "__main__":
    main()
