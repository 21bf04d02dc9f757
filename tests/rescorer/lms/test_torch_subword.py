"""A subword LSTM end to end: trained with its own tokenizer, scored word by word as its pieces.

A word's value must be the sum of its pieces' log-probabilities, computed here independently by
one ``ContextLSTM.forward`` over the whole piece sequence of each sentence.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch

from rescorer.features import add_lm_scores
from rescorer.lm_models.checkpoint import TOKENIZER_FILE, load_checkpoint
from rescorer.lm_models.lstm.train import TrainConfig, train
from rescorer.lm_models.tokenizer import SubwordTokenizer
from rescorer.lm_models.vocab import BOS_ID, EOS_ID
from rescorer.lms import load_lm
from rescorer.lms.torch import TorchLM
from rescorer.nbest import Hypothesis, NBest, NBestList
from tests.lm_models.test_tokenizer import sentences


def subword_config(corpus: Path, epochs: int) -> TrainConfig:
    return TrainConfig.from_json(
        {
            "data": {
                "corpus": "plain",
                "path": str(corpus),
                "split": [0.9, 0.1, 0.0],
                "tokenizer": {"kind": "unigram", "vocab_size": 320},
            },
            "model": {"mode": "unadapted", "embed_dim": 12, "hidden_dim": 16, "dropout": 0.0},
            "train": {"epochs": epochs, "batch_tokens": 400, "lr": 0.01, "device": "cpu"},
        }
    )


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("subword")
    corpus = folder / "text.txt"
    corpus.write_text("".join(" ".join(s) + "\n" for s in sentences(300)), encoding="utf-8")
    torch.set_num_threads(1)
    train(subword_config(corpus, 2), folder, folder / "out", progress=False)
    return folder


def piece_logprobs(lm: TorchLM, words: list[str]) -> np.ndarray:
    """ln P of every piece and of </s>, from one forward pass over the sentence's pieces."""
    tok = SubwordTokenizer.load(lm.path)
    ids = [lm.words.tokens.index(p) for p in tok.encode(words)]
    inputs = torch.tensor([[BOS_ID, *ids]])
    with torch.no_grad():
        log_probs, _ = lm.model(inputs)
    targets = torch.tensor([*ids, EOS_ID])
    return log_probs[0].gather(1, targets.unsqueeze(1)).squeeze(1).double().numpy()


def test_checkpoints_keep_the_tokenizer_and_resume_with_it(
    trained: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = trained / "out"
    for folder in (out / "best", out / "last"):
        tok = SubwordTokenizer.load(folder)
        _, tokens, _ = load_checkpoint(folder)
        assert tuple(tokens) == tok.pieces
    proto = (out / "last" / TOKENIZER_FILE).read_bytes()

    def no_training(*args: object, **kwargs: object) -> None:
        raise AssertionError("a resumed run must reuse its tokenizer, not learn a new one")

    monkeypatch.setattr(SubwordTokenizer, "train", no_training)
    result = train(subword_config(trained / "text.txt", 3), trained, out, progress=False)
    assert [e.epoch for e in result.epochs] == [1, 2, 3]
    assert (out / "last" / TOKENIZER_FILE).read_bytes() == proto


def test_word_values_are_the_sums_of_their_pieces(trained: Path) -> None:
    lm = load_lm(f"torch:{trained / 'out' / 'best'}")
    assert isinstance(lm, TorchLM) and lm.units == "subword"
    batch = [s[:6] for s in sentences(12, seed=9)] + [["kalostoing", "Ævu"], []]
    got = lm.token_logprobs(batch)
    cut_somewhere = False
    for words, values in zip(batch, got, strict=True):
        assert len(values) == len(words) + 1
        pieces = piece_logprobs(lm, words)
        spans = [len(lm.words.tokenizer.word_pieces(w)) for w in words]
        cut_somewhere |= any(n > 1 for n in spans)
        ends = np.cumsum(spans)
        expected = [pieces[e - n : e].sum() for n, e in zip(spans, ends, strict=True)]
        np.testing.assert_allclose(values, [*expected, pieces[-1]], atol=1e-5)
    assert cut_somewhere
    np.testing.assert_allclose(
        lm.sentence_logprobs(batch), [v.sum() for v in got], rtol=0, atol=1e-9
    )
    assert not any(f.any() for f in lm.oov_flags(batch))  # bytes spell "Ævu": no OOV


def test_streaming_runs_each_words_pieces(trained: Path) -> None:
    lm = load_lm(f"torch:{trained / 'out' / 'best'}")
    words = ["kalostoing", "mi", "prestovu"]
    expected = lm.token_logprobs([words])[0]
    states = [lm.start()]
    got = []
    for token in [*words, "</s>"]:
        values, states = lm.advance(states, [token])
        got.append(values[0])
    np.testing.assert_allclose(got, expected, atol=1e-5)


def test_rescoring_adds_no_oov_feature_for_a_subword_model(trained: Path) -> None:
    lm = load_lm(f"sub=torch:{trained / 'out' / 'best'}")
    hyps = [Hypothesis(("kalo", "mi"), {"am": -1.0}), Hypothesis(("Æ",), {"am": -2.0})]
    nbest = NBest([NBestList("u1", hyps)])
    scored, report = add_lm_scores(nbest, lm, "sub", progress=False)
    assert "sub" in scored.score_names() and "sub_oov" not in scored.score_names()
    assert report.oov_words == 0
    value = scored["u1"][0].scores["sub"]
    assert value == pytest.approx(float(lm.sentence_logprobs([["kalo", "mi"]])[0]))
    assert math.isfinite(scored["u1"][1].scores["sub"])
