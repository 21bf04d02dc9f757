"""The causal Transformer LM: its outputs, its key/value cache, its training by ``rescorer train``
and its scoring by ``torch:`` (the prefix tree and streaming), each checked against a plain
whole-sentence run of the same model."""

from __future__ import annotations

import json
import random
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from rescorer.cli.main import main
from rescorer.lm_models.checkpoint import load_checkpoint, save_checkpoint
from rescorer.lm_models.lstm.train import TrainConfig, train
from rescorer.lm_models.lstm.transformer import CausalTransformerLM, TransformerConfig
from rescorer.lm_models.vocab import BOS_ID
from rescorer.lms import load_lm
from rescorer.lms.torch import TorchLM

WORDS = ["the", "a", "cat", "dog", "sat", "ran", "on", "mat", "ball", "goal", "price"]
VOCAB = ["<unk>", "<s>", "</s>", *WORDS]

pytestmark = pytest.mark.usefixtures("one_torch_thread", "restore_logging")


def make_model(classes: bool = True, seed: int = 0) -> CausalTransformerLM:
    """A tiny random model, every parameter (biases and norms too) drawn at random."""
    v = len(VOCAB)
    word_classes = tuple(i % 3 for i in range(v)) if classes else ()
    cfg = TransformerConfig(
        v, embed_dim=6, hidden_dim=8, num_layers=2, heads=2, ffn_dim=16, word_classes=word_classes
    )
    torch.manual_seed(seed)
    model = CausalTransformerLM(cfg)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.5)
    return model.eval()


def ids(words: list[str]) -> list[int]:
    index = {w: i for i, w in enumerate(VOCAB)}
    return [index.get(w, 0) for w in words]


def naive(model: CausalTransformerLM, words: list[str]) -> np.ndarray:
    """ln p of each word and </s>, the sentence run whole through ``score``."""
    x = ids(words)
    with torch.no_grad():
        out = model.score(torch.tensor([[BOS_ID, *x]]), torch.tensor([[*x, 2]]), [len(x) + 1])
    return out[0].double().numpy()


@pytest.mark.parametrize("classes", [True, False])
def test_distributions_sum_to_one_and_never_predict_the_start(classes: bool) -> None:
    model = make_model(classes)
    with torch.no_grad():
        logp = model.log_probs(torch.randint(3, len(VOCAB), (3, 7)))
    torch.testing.assert_close(logp.exp().sum(-1), torch.ones(3, 7), atol=1e-5, rtol=0)
    if classes:
        assert torch.isinf(logp[..., BOS_ID]).all()


def test_a_position_sees_only_the_units_before_it() -> None:
    model = make_model()
    x = torch.randint(3, len(VOCAB), (2, 9))
    y = x.clone()
    y[:, 5:] = torch.randint(3, len(VOCAB), (2, 4))
    y[:, 5] = (x[:, 5] - 3 + 1) % (len(VOCAB) - 3) + 3  # surely another unit at position 5
    with torch.no_grad():
        a, b = model.hidden(x), model.hidden(y)
    torch.testing.assert_close(a[:, :5], b[:, :5], atol=1e-6, rtol=0)
    assert (a[:, 5:] - b[:, 5:]).abs().amax() > 1e-3  # and the later ones do change


def test_one_step_at_a_time_with_the_cache_equals_the_whole_run() -> None:
    model = make_model()
    x = torch.randint(3, len(VOCAB), (3, 8))
    state = model.init_state(3)
    tops = []
    with torch.no_grad():
        for t in range(8):
            top, state = model.step(x[:, t : t + 1], state, model.adapt())
            tops.append(top)
        whole = model.hidden(x)
    assert tuple(state[0].shape) == (2, 3, 2, 8, 4)  # (layers, N, heads, t, d / heads)
    torch.testing.assert_close(torch.stack(tops, 1), whole, atol=1e-5, rtol=0)


def test_targets_equal_the_gathered_distributions_and_masked_positions_are_zero() -> None:
    model = make_model()
    x = torch.randint(3, len(VOCAB), (2, 6))
    tgt = torch.randint(2, len(VOCAB), (2, 6))
    mask = torch.ones(2, 6, dtype=torch.bool)
    mask[1, 4:] = False
    with torch.no_grad():
        got = model.target_log_probs(x, tgt, None, mask)
        want = model.log_probs(x).gather(2, tgt.unsqueeze(2)).squeeze(2)
    torch.testing.assert_close(got[mask], want[mask], atol=1e-5, rtol=0)
    assert (got[~mask] == 0).all()


def test_bad_configs_and_inputs_say_what_was_expected() -> None:
    with pytest.raises(ValueError, match="multiple of heads"):
        TransformerConfig(20, hidden_dim=10, heads=4)
    with pytest.raises(ValueError, match="expected 20 classes"):
        TransformerConfig(20, word_classes=(0, 1))
    with pytest.raises(ValueError, match="expected a LongTensor"):
        make_model().hidden(torch.zeros(2, 3))


def test_inputs_longer_than_the_position_table_compute_their_positions() -> None:
    model = make_model()
    short = CausalTransformerLM(replace(model.config, max_positions=8)).eval()
    short.load_state_dict(model.state_dict())  # the table is a buffer, not a weight
    x = torch.randint(3, len(VOCAB), (2, 20))
    with torch.no_grad():
        torch.testing.assert_close(short.hidden(x), model.hidden(x), atol=1e-6, rtol=0)
        state = short.init_state(2)
        for t in range(20):  # and one position at a time past the table
            top, state = short.step(x[:, t : t + 1], state, short.adapt())
    torch.testing.assert_close(top, model.hidden(x)[:, -1], atol=1e-5, rtol=0)


# -- through the LanguageModel contract (torch:) -------------------------------------------


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_checkpoint(tmp_path_factory.mktemp("transformer") / "tf", make_model(), VOCAB)


def test_checkpoint_round_trips(ckpt: Path) -> None:
    loaded, tokens, _ = load_checkpoint(ckpt)
    assert isinstance(loaded, CausalTransformerLM) and tokens == VOCAB
    assert loaded.config == make_model().config
    x = torch.randint(3, len(VOCAB), (2, 5))
    with torch.no_grad():
        torch.testing.assert_close(loaded.log_probs(x), make_model().log_probs(x))


def test_prefix_tree_scores_equal_whole_sentences(ckpt: Path) -> None:
    lm = load_lm(f"torch:{ckpt}", device="cpu")
    assert isinstance(lm, TorchLM)
    rng = random.Random(0)
    base = [rng.choice(WORDS) for _ in range(7)]
    sentences = [base, base[:4], [*base[:5], "zebra"], [], base[:4] + ["mat", "on"], ["dog"]]
    got = lm.token_logprobs(sentences)
    for words, values in zip(sentences, got, strict=True):
        np.testing.assert_allclose(values, naive(make_model(), words), atol=1e-5, rtol=0)
    assert lm.stats.computed_steps < lm.stats.naive_steps  # the shared prefixes ran once
    assert lm.oov_flags([[*base[:5], "zebra"]])[0].tolist() == [False] * 5 + [True]


def test_streaming_sentences_of_different_lengths_in_one_call(ckpt: Path) -> None:
    lm = load_lm(f"torch:{ckpt}", device="cpu")
    sentences = [["the", "cat", "sat"], ["a"], ["dog", "ran", "on", "the", "mat"]]
    whole = lm.token_logprobs(sentences)
    states = [lm.start(), lm.start(), lm.start()]
    # the first sentence runs ahead by two words, so one advance call mixes cache lengths
    for w in ["the", "cat"]:
        _, (states[0],) = lm.advance([states[0]], [w])
    values, states = lm.advance(states, ["sat", "a", "dog"])
    np.testing.assert_allclose(values, [whole[0][2], whole[1][0], whole[2][0]], atol=1e-5, rtol=0)


# -- training ------------------------------------------------------------------------------------


def write_corpus(path: Path, n: int = 200, seed: int = 0) -> Path:
    """Sentences of a fixed pattern: 'the' is always followed by an animal, then a verb."""
    rng = random.Random(seed)
    lines = []
    for _ in range(n):
        lines.append(
            " ".join(
                ["the", rng.choice(["cat", "dog"]), rng.choice(["sat", "ran"]), "on", "the", "mat"]
            )
        )
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def transformer_config(corpus: Path, **model: object) -> dict:
    return {
        "data": {"corpus": "plain", "path": str(corpus), "split": [0.8, 0.2, 0.0]},
        "model": {
            "mode": "unadapted",
            "arch": "transformer",
            "embed_dim": 8,
            "hidden_dim": 16,
            "num_layers": 2,
            "heads": 2,
            "ffn_dim": 32,
            "dropout": 0.0,
            "num_classes": 2,
            **model,
        },
        "train": {"epochs": 4, "batch_tokens": 200, "lr": 0.01, "device": "cpu"},
    }


def test_trains_to_the_pattern_and_resumes(tmp_path: Path) -> None:
    corpus = write_corpus(tmp_path / "c.txt")
    cfg = TrainConfig.from_json(transformer_config(corpus))
    result = train(cfg, tmp_path, tmp_path / "out", progress=False)
    # 7 predicted units after <s>: the, cat|dog, sat|ran, on, the, mat, </s>; two coin flips
    # per sentence: perplexity 2^(2/7) = 1.22 at best, 12 (uniform over the units) at worst
    assert result.best_dev_ppl < 1.6
    model, _, _ = load_checkpoint(tmp_path / "out" / "best")
    assert isinstance(model, CausalTransformerLM)
    more = TrainConfig.from_json(
        {
            **transformer_config(corpus),
            "train": {"epochs": 5, "batch_tokens": 200, "lr": 0.01, "device": "cpu"},
        }
    )
    resumed = train(more, tmp_path, tmp_path / "out", progress=False)
    assert [e.epoch for e in resumed.epochs] == [1, 2, 3, 4, 5]


def test_a_context_mode_or_a_history_is_refused_in_one_line(tmp_path: Path) -> None:
    corpus = write_corpus(tmp_path / "c.txt")
    with pytest.raises(ValueError, match='mode must be "unadapted"'):
        TrainConfig.from_json(transformer_config(corpus, mode="factor"))
    conf = transformer_config(corpus)
    conf["data"]["history"] = 2
    path = tmp_path / "conf.json"
    path.write_text(json.dumps(conf), encoding="utf-8")
    res = CliRunner().invoke(
        main, ["train", str(path), "--data-dir", str(tmp_path), "--out", str(tmp_path / "o")]
    )
    assert res.exit_code == 2, res.output
    assert 'arch "transformer" reads no history text' in res.output
    assert "Traceback" not in res.output


def test_export_refuses_a_transformer_in_one_line(ckpt: Path, tmp_path: Path) -> None:
    res = CliRunner().invoke(main, ["export", str(ckpt), str(tmp_path / "m.onnx")])
    assert res.exit_code == 2 and res.output.count("\n") == 1
    assert "a CausalTransformerLM checkpoint: `export` takes a context LSTM's" in res.output


@pytest.mark.parametrize("blocks", [True, False])
def test_the_full_softmax_never_predicts_the_start_in_every_path(
    blocks: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As the class-factored layer: P(<s>) = 0 and the other units sum to 1, in the whole
    distribution, the targets and the scorer's rows, with blocks (CPU) or without (GPU)."""
    if not blocks:
        monkeypatch.setattr(
            "rescorer.lm_models.lstm.transformer.uses_blocks", lambda *a, **k: False
        )
    model = make_model(classes=False)
    assert not [k for k in model.state_dict() if "never" in k]  # derived: no checkpoint change
    x = torch.randint(3, len(VOCAB), (3, 7))
    with torch.no_grad():
        logp = model.log_probs(x)
        logits = model.output_logits(model.hidden(x)).double()
        logits[..., BOS_ID] = -torch.inf
        want = torch.log_softmax(logits, -1)
        assert torch.isneginf(logp[..., BOS_ID]).all()
        torch.testing.assert_close(logp.double(), want, atol=1e-5, rtol=0)
        torch.testing.assert_close(logp.exp().sum(-1), torch.ones(3, 7), atol=1e-5, rtol=0)
        tgt = torch.randint(2, len(VOCAB), (3, 7))
        tgt[1, 2] = BOS_ID
        got = model.target_log_probs(x, tgt)
        torch.testing.assert_close(
            got.double(), want.gather(2, tgt.unsqueeze(2)).squeeze(2), atol=1e-5, rtol=0
        )
        h = model.hidden(x)[:, -1]  # (3, d)
        rows, targets = torch.tensor([0, 1, 1, 2]), torch.tensor([BOS_ID, 5, 2, 9])
        at = model.log_probs_at(h, rows, targets, model.adapt())
        torch.testing.assert_close(at.double(), want[:, -1][rows, targets], atol=1e-5, rtol=0)
