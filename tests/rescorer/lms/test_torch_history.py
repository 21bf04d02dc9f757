"""History models (issue 16): an LSTM trained on runs of consecutive sentences reads the previous
utterances' text itself, its state carried into the sentence.

The prefix-shared, forest-batched scorer is checked against a plain ``ContextLSTM.score`` of the
whole run ``<s> h1 <s> h2 <s> s`` (the sentence's positions of it), which is what the model was
trained on (:func:`rescorer.lm_models.lstm.data.join_runs`).
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from rescorer.cli.main import main
from rescorer.lm_models.batching import Example
from rescorer.lm_models.checkpoint import save_checkpoint
from rescorer.lm_models.lstm.data import DataConfig, join_runs
from rescorer.lm_models.lstm.model import ContextLSTM, LSTMConfig
from rescorer.lms.torch import TorchLM
from tests.rescorer.lms.test_torch import GENRE, VOCAB, WORDS, make_model

pytestmark = pytest.mark.usefixtures("one_torch_thread", "restore_logging")

INDEX = {w: i for i, w in enumerate(VOCAB)}


def history_model(mode: str = "unadapted", seed: int = 0) -> ContextLSTM:
    """A tiny random history model (the context of a concat one: a genre)."""
    return make_model(mode, seed, history="previous")


def naive(model: ContextLSTM, words: Sequence[str], record: dict | None) -> np.ndarray:
    """The sentence's log-probs read off one plain run over its history and itself."""
    history = (record or {}).get("previous") or ""
    lines = [line.split() for line in history.splitlines() if line.split()]
    inputs: list[int] = []
    targets: list[int] = []
    for line in [*lines, list(words)]:
        ids = [INDEX.get(w, 0) for w in line]
        inputs += [1, *ids]
        targets += [*ids, 2]
    genre = {k: v for k, v in (record or {}).items() if k == "genre"} or None
    with torch.no_grad():
        scores = model.score(
            torch.tensor([inputs]), torch.tensor([targets]), torch.tensor([len(inputs)]), [genre]
        )
    return scores[0, len(inputs) - len(words) - 1 :].double().numpy()


def utterances(rng: random.Random, n: int, genres: bool) -> tuple[list[list[str]], list[dict]]:
    """N-best-like hypotheses, each utterance with its own (or no, or an empty) history."""
    sentences, records = [], []
    for u in range(n):
        lines = [
            " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 5)))
            for _ in range(rng.randint(0, 3))
        ]
        record: dict = {"previous": "\n".join(lines)} if u % 4 else {}
        if u % 7 == 3:
            record["previous"] = " \n \n"  # blank lines: no history
        if genres and u % 3:
            record["genre"] = rng.choice(["news", "sport"])
        base = [rng.choice(WORDS) for _ in range(rng.randint(2, 6))]
        for _ in range(rng.randint(1, 5)):
            hyp = list(base)
            hyp[rng.randrange(len(hyp))] = rng.choice(WORDS)
            sentences.append(hyp)
            records.append(record)  # the hypotheses of one utterance share one record
    return sentences, records


@pytest.mark.parametrize("mode", ["unadapted", "concat"])
def test_scores_equal_a_plain_run_over_history_and_sentence(tmp_path: Path, mode: str) -> None:
    model = history_model(mode, seed=3)
    lm = TorchLM(save_checkpoint(tmp_path / mode, model, VOCAB), device="cpu", batch_nodes=5)
    assert lm.history == "previous"
    sentences, records = utterances(random.Random(0), 30, genres=mode != "unadapted")
    got = lm.token_logprobs(sentences, records)
    for words, record, values in zip(sentences, records, got, strict=True):
        np.testing.assert_allclose(values, naive(model, words, record), rtol=1e-5, atol=1e-5)
    # the history changes the scores (a model that ignored it would pass the lines above only
    # where every history is empty)
    plain = lm.token_logprobs(sentences, None)
    with_history = [r.get("previous", "").strip() != "" for r in records]
    changed = [
        not np.allclose(a, b) for a, b, has in zip(got, plain, with_history, strict=True) if has
    ]
    assert changed and all(changed)
    # each history is run once per utterance (not once per hypothesis)
    lm.reset_stats()
    lm.token_logprobs(sentences, records)
    history_steps = sum(len(naive_ids(r)) for r in {id(r): r for r in records}.values())
    trie_steps = lm.stats.computed_steps - history_steps
    assert 0 < trie_steps < lm.stats.naive_steps


def naive_ids(record: dict) -> list[int]:
    lines = [line.split() for line in (record.get("previous") or "").splitlines()]
    return [i for words in lines if words for i in (1, *(INDEX[w] for w in words))]


def test_no_history_is_the_sentence_alone_and_streaming_agrees(tmp_path: Path) -> None:
    model = history_model(seed=5)
    lm = TorchLM(save_checkpoint(tmp_path / "h", model, VOCAB), device="cpu")
    words = ["the", "cat", "sat", "on", "a", "mat"]
    alone = naive(model, words, None)
    for record in (None, {}, {"previous": ""}, {"previous": "\n  \n"}, {"other": "x"}):
        (values,) = lm.token_logprobs([words], [record])
        np.testing.assert_allclose(values, alone, rtol=1e-6, atol=1e-6)
    record = {"previous": "the dog ran\na ball"}
    (whole,) = lm.token_logprobs([words], [record])
    state = lm.start(record)
    streamed = []
    for token in [*words, "</s>"]:
        values, (state,) = lm.advance([state], [token])
        streamed.append(values[0])
    np.testing.assert_allclose(streamed, whole, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(whole, naive(model, words, record), rtol=1e-5, atol=1e-6)


def test_join_runs_reads_consecutive_sentences_as_one_sequence() -> None:
    examples = [Example((1, 10 + i), (10 + i, 2), {"g": "x"}) for i in range(5)]
    runs = join_runs(examples, history=1)
    assert [e.inputs for e in runs] == [(1, 10, 1, 11), (1, 12, 1, 13), (1, 14)]
    assert [e.targets for e in runs] == [(10, 2, 11, 2), (12, 2, 13, 2), (14, 2)]
    assert all(e.record == {"g": "x"} for e in runs)
    assert join_runs(examples, history=0) == examples
    with pytest.raises(ValueError, match="history"):
        join_runs(examples, history=-1)


def test_history_options_are_checked() -> None:
    base = {"corpus": "plain", "path": "x.txt", "plain_documents": "block"}
    with pytest.raises(ValueError, match="data.history: expected an integer >= 0"):
        DataConfig(**base, history=-2)
    with pytest.raises(ValueError, match="give one or the other"):
        DataConfig(**base, history=2, previous={"sentences": 2})
    with pytest.raises(ValueError, match="also in context_fields"):
        DataConfig(**{**base, "corpus": "jsonl", "plain_documents": "line"}, history=1,
                   context_fields=["previous"])  # fmt: skip
    with pytest.raises(ValueError, match="LSTMConfig.history .* context variable"):
        LSTMConfig(vocab_size=20, mode="concat", context_dim=2, context_vars=(GENRE,),
                   history="genre")  # fmt: skip


def test_training_with_history_writes_a_history_model(tmp_path: Path) -> None:
    rng = random.Random(0)
    blocks = [
        "\n".join(" ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 6))) for _ in range(6))
        for _ in range(10)
    ]
    (tmp_path / "books.txt").write_text("\n\n".join(blocks) + "\n", encoding="utf-8")
    config = {
        "data": {"corpus": "plain", "path": "books.txt", "plain_documents": "block",
                 "split": [0.8, 0.2, 0.0], "vocab_size": 50, "history": 2},
        "model": {"mode": "unadapted", "embed_dim": 8, "hidden_dim": 8},
        "train": {"epochs": 1, "batch_tokens": 80, "device": "cpu"},
    }  # fmt: skip
    cfg = tmp_path / "cfg.json"
    cfg.write_text(json.dumps(config), encoding="utf-8")
    out = tmp_path / "model"
    args = ["-q", "train", str(cfg), "--out", str(out), "--data-dir", str(tmp_path)]
    result = CliRunner().invoke(main, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    saved = json.loads((out / "best" / "config.json").read_text(encoding="utf-8"))
    assert saved["config"]["history"] == "previous"
    lm = TorchLM(out / "best", device="cpu")
    (a,) = lm.token_logprobs([["the", "cat"]], [{"previous": "a dog\nthe ball"}])
    (b,) = lm.token_logprobs([["the", "cat"]], None)
    assert a.shape == b.shape == (3,) and not np.allclose(a, b)


@pytest.mark.parametrize(("mode", "kind"), [("unadapted", "step"), ("concat", "multi")])
def test_onnx_step_export_reads_the_history_like_torch(
    tmp_path: Path, mode: str, kind: str
) -> None:
    from rescorer.export.exporter import ExportOptions, export_model
    from rescorer.lms.onnx import OnnxLM

    model = history_model(mode, seed=7)
    lm = TorchLM(save_checkpoint(tmp_path / mode, model, VOCAB), device="cpu")
    out = tmp_path / f"{mode}.onnx"
    export_model(model, VOCAB, out, ExportOptions(kind=kind))
    onnx_lm = OnnxLM(out, device="cpu", batch_tokens=40)
    assert onnx_lm.history == "previous"
    sentences, records = utterances(random.Random(4), 12, genres=mode != "unadapted")
    for got, want in zip(
        onnx_lm.token_logprobs(sentences, records), lm.token_logprobs(sentences, records),
        strict=True,
    ):  # fmt: skip
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    # the prefix tree (roots from their histories' states) = the whole padded runs
    padded = OnnxLM(out, device="cpu", batch_tokens=40, prefix_tree=False)
    for got, want in zip(
        onnx_lm.token_logprobs(sentences, records), padded.token_logprobs(sentences, records),
        strict=True,
    ):  # fmt: skip
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)
    # streaming from a history: start() runs it through the step graph
    record = next(r for r in records if r.get("previous", "").strip())
    state = onnx_lm.start(record)
    values, _ = onnx_lm.advance([state], [sentences[0][0]])
    (want,) = lm.token_logprobs([sentences[0][:1]], [record])
    assert values[0] == pytest.approx(want[0], abs=1e-4)
    with pytest.raises(ValueError, match="history model .* expected one of the kinds"):
        export_model(model, VOCAB, tmp_path / "s.onnx", ExportOptions(kind="scorer"))
