"""``torch:`` models with a class-factored output score N-best lists with the same exact
probabilities as training and ``ppl`` (prefix tree, batching and contexts included)."""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from rescorer.lm_models.checkpoint import save_checkpoint
from rescorer.lm_models.lstm.model import ContextLSTM
from rescorer.lm_models.word_classes import shortlist_classes
from rescorer.lms import load_lm
from rescorer.lms.torch import TorchLM
from tests.rescorer.lms.test_torch import CONTEXTS, VOCAB, WORDS, make_model, naive_logprobs


def class_model(mode: str) -> ContextLSTM:
    base = make_model(mode)
    counts = [0, 0, 50] + [100 - 5 * i for i in range(len(WORDS))]  # <s> never predicted
    classes = tuple(shortlist_classes(counts, 4, 3))
    model = ContextLSTM(replace(base.config, word_classes=classes))
    gen = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.4)
    return model.eval()


def test_class_output_scores_equal_the_model_and_sum_to_one(tmp_path: Path) -> None:
    for mode in ("factor", "unadapted"):
        model = class_model(mode)
        lm = load_lm(f"torch:{save_checkpoint(tmp_path / mode, model, VOCAB)}", device="cpu")
        assert isinstance(lm, TorchLM)
        rng = random.Random(0)
        sentences = [[rng.choice(WORDS) for _ in range(rng.randint(0, 6))] for _ in range(40)]
        contexts = [CONTEXTS[i % len(CONTEXTS)] for i in range(40)] if mode == "factor" else None
        got = lm.token_logprobs(sentences, contexts)
        for i, (words, lp) in enumerate(zip(sentences, got, strict=True)):
            ctx = None if contexts is None else contexts[i]
            np.testing.assert_allclose(lp, naive_logprobs(model, words, ctx), atol=1e-5)
        state = lm.start(contexts[0] if contexts else None)
        every = np.array([lm.advance([state], [w])[0][0] for w in [*WORDS, "</s>", "<unk>"]])
        assert abs(np.exp(every).sum() - 1.0) < 1e-5  # all units but the never-predicted <s>
