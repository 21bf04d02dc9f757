"""What a finished (or running) LSTM training run is, for results tables: read, never trained.

:meth:`TrainingSummary.of` reads a training folder (``best/`` and ``last/`` as
:func:`rescorer.lm_models.lstm.train.train` writes them): the architecture and output layer from the
config, the parameter count from the weights file's tensor shapes (no model is built), and the
tokens, time and device of every epoch so far from ``best/training.json`` (or, for runs
before it held them, ``last/trainer.json``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from safetensors import safe_open

from rescorer.lm_models.checkpoint import TOKENIZER_FILE, TRAINING_FILE, VOCAB_FILE, WEIGHTS_FILE


def output_layer(model: dict[str, Any], sampled: int = 0) -> str:
    """The output layer of a config's ``model`` section, in words."""
    if model.get("shortlist"):
        return (
            f"a class-factored softmax ({model['shortlist']:,} frequent units each a class, "
            f"{model['num_classes']} clusters of the rest)"
        )
    if model.get("num_classes"):
        return f"a class-factored softmax ({model['num_classes']} frequency classes)"
    return f"a sampled softmax of {sampled}" if sampled else "the full softmax"


@dataclass(frozen=True)
class TrainingSummary:
    """A training run of :mod:`rescorer.lm_models.lstm.train`, as its folder records it."""

    # The config's sections (data, model, train) as trained.
    config: dict[str, Any]
    # Units of the vocabulary (specials included) and what they are ("words", "unigram pieces").
    vocab_size: int
    units: str
    parameters: int
    # Epochs run so far, tokens seen and training seconds in all (dev evaluation left out);
    # None when the folder keeps no epoch log.
    epochs: int | None
    tokens: int | None
    seconds: float | None
    device: str
    # The best checkpoint's dev perplexity and epoch.
    dev_ppl: float
    best_epoch: int

    @property
    def tokens_per_second(self) -> float | None:
        if self.tokens is None or self.seconds is None:
            return None
        return self.tokens / max(self.seconds, 1e-9)

    def training_words(self) -> str:
        """'N epoch(s): T tokens seen, H h, R tokens/s on DEVICE' (what is known of it)."""
        if self.epochs is None or self.tokens is None or self.seconds is None:
            return f"on {self.device} (its epoch log was not kept with the checkpoint)"
        return (
            f"{self.epochs} epoch(s): {self.tokens:,} tokens seen, {self.seconds / 3600:.2f} h, "
            f"{self.tokens_per_second:,.0f} tokens/s on {self.device}"
        )

    @property
    def output(self) -> str:
        return output_layer(self.config["model"], self.config["train"].get("sampled_softmax", 0))

    @classmethod
    def of(cls, run_dir: str | Path) -> TrainingSummary:
        run = Path(run_dir)
        best = run / "best"
        meta = json.loads((best / TRAINING_FILE).read_text(encoding="utf-8"))
        # The epoch log: every epoch in last/, those up to the best in best/ (a run copied
        # without last/); None when neither holds one (best/ of a run before 2026-11-24 alone).
        trainer = run / "last" / "trainer.json"
        log: list[dict[str, Any]] | None = meta.get("log")
        if trainer.exists():
            log = json.loads(trainer.read_text(encoding="utf-8"))["log"]
        with safe_open(str(best / WEIGHTS_FILE), "np") as f:
            shapes = [f.get_slice(k).get_shape() for k in f.keys()]  # noqa: SIM118 (not a dict)
        tokenizer = meta["config"]["data"].get("tokenizer")
        return cls(
            config=meta["config"],
            vocab_size=len((best / VOCAB_FILE).read_text(encoding="utf-8").splitlines()),
            units="words"
            if tokenizer is None and not (best / TOKENIZER_FILE).exists()
            else f"{(tokenizer or {}).get('kind', 'subword')} pieces",
            parameters=int(sum(np.prod(s) for s in shapes)),
            epochs=None if log is None else len(log),
            tokens=None if log is None else int(sum(e["tokens"] for e in log)),
            seconds=None if log is None else float(sum(e["seconds"] for e in log)),
            device=str(meta.get("device", "?")),
            dev_ppl=float(meta["dev_ppl"]),
            best_epoch=int(meta["epoch"]),
        )
