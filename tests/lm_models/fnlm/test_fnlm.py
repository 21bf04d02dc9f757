"""The factored NLM: eqs. 1-4, class-factored output, unknown factors, checkpoints, training."""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from rescorer.lm_models.fnlm.factors import FactorEncoder, FactorSettings, PlainWord, words_of_text
from rescorer.lm_models.fnlm.model import (
    FNLM,
    FactoredLM,
    FNLMConfig,
    flattening_weights,
    history_windows,
    load_fnlm,
    unk_share,
)
from rescorer.lm_models.fnlm.train import FNLMTrainConfig, build_lm, train_fnlm
from rescorer.lm_models.vocab import Vocabulary
from rescorer.lm_models.word_classes import (
    bigram_counts,
    brown_classes,
    class_bigram_objective,
    frequency_classes,
)

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tiny models: one thread


def randomise(model: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.5)
    return model.eval()


def make_config(**kw: object) -> FNLMConfig:
    base: dict = dict(
        vocab_size=9, factors=("word", "upos"), factor_sizes=(7, 4), order=3, embed_dim=3,
        hidden_dim=5,
    )  # fmt: skip
    base.update(kw)
    return FNLMConfig(**base)


CLASSES = (0, 2, 0, 1, 1, 2, 3, 3, 3)


def histories(config: FNLMConfig, n: int = 6, seed: int = 1) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    cols = [
        torch.randint(0, s, (n, config.order - 1, 1), generator=gen) for s in config.factor_sizes
    ]
    return torch.cat(cols, dim=2)


@pytest.mark.parametrize("classes", [(), CLASSES])
def test_output_distribution_sums_to_one(classes: tuple[int, ...]) -> None:
    model = randomise(FNLM(make_config(word_classes=classes)))
    hist = histories(model.config)
    h = model.hidden_state(hist)
    lp = model.log_probs(h)
    torch.testing.assert_close(lp.exp().sum(1), torch.ones(len(hist)), atol=1e-5, rtol=0)
    # The per-target path (only the target's class normalised) gives the same numbers.
    for target in [0, *range(2, model.config.vocab_size)]:  # not <s> (id 1), never a target
        tgt = torch.full((len(hist),), target)
        torch.testing.assert_close(model.log_prob(h, tgt), lp[:, target], atol=1e-5, rtol=0)


def test_class_factored_output_is_class_times_word_in_class() -> None:
    model = randomise(FNLM(make_config(word_classes=CLASSES)))
    h = model.hidden_state(histories(model.config, n=1))
    assert model.class_layer is not None
    p_class = F.softmax(model.class_layer(h), -1)[0]
    logits = model.out(h)[0]
    members = [i for i, c in enumerate(CLASSES) if c == 1]  # units 3 and 4
    p_in_class = F.softmax(logits[members], -1)
    expected = p_class[1] * p_in_class[0]  # P(c=1|h) P(w=3|c=1,h)
    assert model.log_probs(h)[0, 3].exp().item() == pytest.approx(expected.item(), rel=1e-5)


def plain_nlm_log_probs(
    table: torch.Tensor,
    w_ih: torch.Tensor,
    b_h: torch.Tensor,
    w_ho: torch.Tensor,
    b_o: torch.Tensor,
    history: torch.Tensor,
) -> torch.Tensor:
    """Bengio et al.'s NLM written out: rows of C for the previous words (most recent first),
    concatenated, tanh hidden layer, softmax output."""
    x = table[history].reshape(history.shape[0], -1)
    h = torch.tanh(x @ w_ih.T + b_h)
    return torch.log_softmax(h @ w_ho.T + b_o, dim=-1)


def test_words_only_fnlm_is_the_plain_nlm() -> None:
    config = make_config(factors=("word",), factor_sizes=(7,), order=4)
    model = randomise(FNLM(config))
    hist = histories(config, n=8)
    expected = plain_nlm_log_probs(
        model.embeddings[0].weight,
        model.hidden.weight,
        model.hidden.bias,
        model.out.weight,
        model.out.bias,
        hist[..., 0],
    )
    expected[:, 1] = -math.inf  # the one difference: <s> (id 1) is never predicted
    expected = expected - expected.logsumexp(-1, keepdim=True)
    torch.testing.assert_close(model.log_probs(model.hidden_state(hist)), expected)


def test_input_concatenates_positions_then_factors() -> None:
    """eq. 3: <M(f1_{t-1}) M(f2_{t-1}) M(f1_{t-2}) M(f2_{t-2})>."""
    model = randomise(FNLM(make_config()))
    hist = torch.tensor([[[1, 2], [3, 0]]])  # t-1: word 1, upos 2; t-2: word 3, upos 0
    words, tags = model.embeddings[0].weight, model.embeddings[1].weight
    expected = torch.cat([words[1], tags[2], words[3], tags[0]])
    torch.testing.assert_close(model.input_vector(hist)[0], expected)


def test_unknown_factor_gets_the_strategy_vector_known_ones_stay() -> None:
    model = randomise(FNLM(make_config()))
    words = model.embeddings[0].weight
    tags = model.embeddings[1].weight
    hist = torch.tensor([[[-1, 2], [3, -1]]])  # unknown word at t-1, unknown tag at t-2
    d = model.config.embed_dim
    for strategy, word_vec, tag_vec in [
        ("null", torch.zeros(d), torch.zeros(d)),
        ("all", words[1:].mean(0), tags[1:].mean(0)),  # row 0 (<s>) is not a value
        ("tail", words[-1], tags[-1]),  # ceil(10 % of 6 or 3 values) = the last row
        ("least", words[-1], tags[-1]),
    ]:
        i = model.input_vector(hist, strategy)[0]
        torch.testing.assert_close(i[:d], word_vec)
        torch.testing.assert_close(i[d : 2 * d], tags[2])  # the known tag of the unknown word
        torch.testing.assert_close(i[2 * d : 3 * d], words[3])
        torch.testing.assert_close(i[3 * d :], tag_vec)


def test_history_windows() -> None:
    ids = np.array([[5, 50], [6, 60], [7, 70]])
    windows = history_windows(ids, order=3)
    assert windows.shape == (4, 2, 2)
    assert windows[0].tolist() == [[0, 0], [0, 0]]  # first word: <s> <s>
    assert windows[1].tolist() == [[5, 50], [0, 0]]
    assert windows[3].tolist() == [[7, 70], [6, 60]]  # </s> after the last two words


def test_count_flattening_eq4() -> None:
    # Pattern A seen 4 times, B twice, C once (C_min = 1), alpha = 0.5:
    # C'(A) = 0.5 + 2 = 2.5 -> 2.5/4 per occurrence; C'(B) = 0.5 + 1 = 1.5 -> 0.75; C'(C) = 1.
    patterns = np.array([[1, 1], [2, 2], [1, 1], [3, 3], [1, 1], [2, 2], [1, 1]])
    w = flattening_weights(patterns, 0.5)
    assert w.tolist() == pytest.approx([0.625, 0.75, 0.625, 1.0, 0.625, 0.75, 0.625])
    assert flattening_weights(patterns, 0.0).tolist() == [1.0] * 7


def test_unk_share_good_turing() -> None:
    counts = {"a": 1, "b": 1, "c": 1, "d": 2, "e": 5}  # n1 = 3, n2 = 1
    assert unk_share(counts, 2) == pytest.approx(3 / (3 + 2 * 1))
    assert unk_share(counts, 1) == 1.0


def test_frequency_classes() -> None:
    # sqrt masses 4, 3, 2, 1, 0 -> shares 0.4, 0.7, 0.9, 1.0 cut into 3 classes
    assert frequency_classes([16, 9, 4, 1, 0], 3) == [0, 1, 2, 2, 2]
    assert frequency_classes([1, 1, 1, 1], 2, power=1.0) == [0, 0, 1, 1]
    assert frequency_classes([5, 3], 10) == [0, 1]  # no empty classes


def test_brown_exchange_finds_the_obvious_classes() -> None:
    """Words 2-4 are always followed by one of 5-7 and those by one of 2-4: with two classes,
    {2,3,4} against {5,6,7} maximises the class bigram likelihood (frequency binning, the
    starting point, mixes them)."""
    rng = np.random.default_rng(0)
    seqs = [
        [int(rng.integers(2, 5)) if i % 2 == 0 else int(rng.integers(5, 8)) for i in range(8)]
        for _ in range(100)
    ]
    counts = np.bincount(np.concatenate(seqs), minlength=8).tolist()
    init = frequency_classes(counts, 2)
    assert len({init[i] for i in (2, 3, 4)}) == 2 or len({init[i] for i in (5, 6, 7)}) == 2
    classes = brown_classes(seqs, counts, num_classes=2, iterations=10)
    assert len({classes[i] for i in (2, 3, 4)}) == 1
    assert len({classes[i] for i in (5, 6, 7)}) == 1
    assert classes[2] != classes[5]
    bigrams = bigram_counts(seqs, 8)
    assert class_bigram_objective(classes, bigrams) > class_bigram_objective(init, bigrams)


# -- with data -----------------------------------------------------------------------------------

TRAIN = [
    "the cat sat on the mat",
    "the dog sat on the rug",
    "a cat ran to the dog",
    "the dog ran to a cat",
    "a bird sat on the cat",
]


def tiny_lm(min_count: int = 2, classes: str = "frequency") -> FactoredLM:
    cfg = FNLMTrainConfig.from_json(
        {
            "data": {
                "corpus": "plain",
                "train": "x",
                "dev": "x",
                "factors": ["word", "suffix2", "shape"],
                "output_min_count": min_count,
            },
            "model": {"order": 3, "embed_dim": 4, "hidden_dim": 6, "num_classes": 3,
                      "classes": classes},
        }
    )  # fmt: skip
    lm, _ = build_lm(cfg, [words_of_text(s.split()) for s in TRAIN])
    randomise(lm.model)
    return lm


def test_words_of_all_kinds_sum_to_one() -> None:
    """P(frequent words) + P(rare training words) + P(OOV event) = 1 after any history."""
    lm = tiny_lm()
    rare = [w for w, c in lm.word_counts.items() if c < 2]
    assert sorted(rare) == ["bird", "mat", "rug"]
    assert lm.config.rare_types == 3
    assert lm.config.unk_share == pytest.approx(3 / (3 + 2 * 2))  # n1 = 3, n2 = 2 (ran, to)
    for history in (["the"], ["a", "cat"], ["zebra", "on"]):
        words = words_of_text(history)
        hist = torch.from_numpy(history_windows(lm.encoder.encode(words), 3)[-1:])
        lp = lm.model.log_probs(lm.model.hidden_state(hist))[0].double()
        frequent = [i for i, t in enumerate(lm.vocab.tokens) if t not in ("<unk>", "<s>")]
        total = lp[frequent].exp().sum().item()
        for w in rare:
            unit, extra, oov = lm.target(w)
            assert not oov
            total += math.exp(lp[unit].item() + extra)
        unit, extra, oov = lm.target("zebra")
        assert oov
        total += math.exp(lp[unit].item() + extra)
        assert total == pytest.approx(1.0, abs=1e-6)
        assert lp[1].item() == -math.inf  # <s> is never predicted


def test_token_logprobs_flags_and_oov() -> None:
    lm = tiny_lm()
    sentences = [words_of_text(["the", "zebra", "sat"]), words_of_text(["mat"])]
    enc = lm.encode(sentences)
    assert enc.lengths == (4, 2)
    assert enc.oov.tolist() == [False, True, False, False, False, False]
    lps = lm.token_logprobs(sentences)
    assert [len(x) for x in lps] == [4, 2]
    assert all(np.isfinite(x).all() and (x < 0).all() for x in lps)
    # Strategies change the scores after the unknown word only.
    null = lm.token_logprobs(sentences, "null")[0]
    least = lm.token_logprobs(sentences, "least")[0]
    assert null[:2] == pytest.approx(least[:2])
    assert null[2] != pytest.approx(least[2])


def test_rare_input_values_are_unknown_in_training_with_input_min_count() -> None:
    cfg = FNLMTrainConfig.from_json(
        {
            "data": {"corpus": "plain", "train": "x", "dev": "x", "factors": ["word", "suffix1"],
                     "input_min_count": 2},
            "model": {"order": 3, "embed_dim": 4, "hidden_dim": 6, "num_classes": 3},
        }
    )  # fmt: skip
    sentences = [words_of_text(s.split()) for s in TRAIN]
    lm, _ = build_lm(cfg, sentences)
    assert "bird" not in lm.encoder.vocabs[0].values  # seen once: unknown as an input
    assert lm.is_known("bird")  # but a training word (scored through <unk>)
    enc = lm.encode(sentences)
    assert (enc.history[..., 0] == -1).any()
    loss = -lm.model(torch.from_numpy(enc.history), torch.from_numpy(enc.targets)).mean()
    loss.backward()  # the unknown-factor vector is part of the graph
    assert lm.model.embeddings[0].weight.grad is not None and torch.isfinite(loss)


def test_checkpoint_round_trip(tmp_path: Path) -> None:
    lm = tiny_lm(classes="brown")
    path = lm.save(tmp_path / "fnlm", {"note": "test"})
    assert sorted(p.name for p in path.iterdir()) == [
        "config.json",
        "factor0.txt",
        "factor1.txt",
        "factor2.txt",
        "model.safetensors",
        "training.json",
        "vocab.txt",
        "words.txt",
    ]
    header = json.loads((path / "config.json").read_text())
    assert header["model_type"] == "fnlm"
    assert header["config"]["factors"] == ["word", "suffix2", "shape"]
    loaded = load_fnlm(path)
    assert loaded.config == lm.config
    assert loaded.word_counts == lm.word_counts
    assert [v.values for v in loaded.encoder.vocabs] == [v.values for v in lm.encoder.vocabs]
    sentences = [words_of_text(["the", "zebra", "sat", "on", "a", "mat"])]
    for strategy in ("null", "all", "tail", "least"):
        np.testing.assert_array_equal(
            loaded.token_logprobs(sentences, strategy)[0], lm.token_logprobs(sentences, strategy)[0]
        )
    # Nothing in the folder is a pickle.
    for f in path.iterdir():
        assert not f.read_bytes().startswith(b"\x80")
    # Strict: a factor vocabulary of the wrong size is refused.
    (path / "factor1.txt").write_text("<s>\t1\n", encoding="utf-8")
    with pytest.raises(ValueError, match="factor1.txt: 1 values"):
        load_fnlm(path)


def test_config_validation() -> None:
    with pytest.raises(ValueError, match="order must be"):
        make_config(order=1)
    with pytest.raises(ValueError, match="word_classes has 3 entries"):
        make_config(word_classes=(0, 1, 0))
    with pytest.raises(ValueError, match="unknown FNLM config key"):
        FNLMConfig.from_json({**make_config().to_json(), "momentum": 0.5})
    assert FNLMConfig.from_json(make_config(word_classes=CLASSES).to_json()) == make_config(
        word_classes=CLASSES
    )


def test_encoder_and_vocab_must_match_the_config() -> None:
    lm = tiny_lm()
    other = FactorEncoder.fit(FactorSettings(("word", "suffix2", "shape")), [[PlainWord("x")]])
    with pytest.raises(ValueError, match="factor vocabularies do not match"):
        FactoredLM(lm.model, lm.vocab, other, lm.word_counts)
    with pytest.raises(ValueError, match="vocabulary has 4 units"):
        FactoredLM(lm.model, Vocabulary(["<unk>", "<s>", "</s>", "x"]), lm.encoder, lm.word_counts)


def write_text(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_training_lowers_dev_perplexity(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    nouns, verbs = ["cat", "dog", "bird", "fish"], ["sat", "ran", "ate"]
    lines = [
        f"the {rng.choice(nouns)} {rng.choice(verbs)} on the {rng.choice(nouns)}"
        for _ in range(120)
    ]
    train = write_text(tmp_path / "train.txt", lines[:100])
    dev = write_text(tmp_path / "dev.txt", lines[100:])
    cfg = FNLMTrainConfig.from_json(
        {
            "data": {"corpus": "plain", "train": str(train), "dev": str(dev),
                     "factors": ["word", "suffix1"], "output_min_count": 1},
            "model": {"order": 3, "embed_dim": 8, "hidden_dim": 16, "num_classes": 4},
            "train": {"epochs": 3, "batch_size": 32, "lr": 0.01},
        }
    )  # fmt: skip
    result = train_fnlm(cfg, tmp_path, tmp_path / "model", progress=False)
    assert (
        result.epochs[0].extra["dev_ppl_no_unk"] < 20
    )  # vocabulary of 12 words + </s>, uniform ~ 14
    assert result.best_dev_ppl < 6  # "the X V on the X": ~ 4 * 3 * 4 choices over 7 tokens
    meta = json.loads((tmp_path / "model" / "training.json").read_text())
    assert meta["best_epoch"] == result.best_epoch and meta["data"]["train_sentences"] == 100
    lm = load_fnlm(tmp_path / "model")
    assert Counter(lm.word_counts)["the"] == 200


@pytest.mark.parametrize("alpha", [0.0, 1.0])
def test_training_weighs_occurrences_by_count_flattening(tmp_path: Path, alpha: float) -> None:
    # "x a" 40 times, "x b" 4 times: without flattening the model learns P(a|x) ~ 10 P(b|x); with
    # alpha = 1 each pattern's total weight is C_min (eq. 4), so a and b after x end up alike.
    # A training loop that ignored the weights, or the config's alpha, would fail one case.
    lines = ["x a"] * 40 + ["x b"] * 4
    train = write_text(tmp_path / "train.txt", lines)
    # The checkpoint kept is the best on dev: a dev text whose word ratios are the ones each
    # objective leads to (10:1, or even), so the selection does not undo the training.
    dev = train if alpha == 0.0 else write_text(tmp_path / "dev.txt", ["x a", "x b"])
    cfg = FNLMTrainConfig.from_json(
        {
            "data": {"corpus": "plain", "train": str(train), "dev": str(dev),
                     "factors": ["word"], "output_min_count": 1},
            "model": {"order": 2, "embed_dim": 4, "hidden_dim": 8, "output": "full",
                      "dropout": 0.0},
            "train": {"epochs": 60, "batch_size": 44, "lr": 0.05, "l2": 0.0, "patience": 60,
                      "flatten_alpha": alpha},
        }
    )  # fmt: skip
    train_fnlm(cfg, tmp_path, tmp_path / "m", progress=False)
    lm = load_fnlm(tmp_path / "m")
    lp_a, lp_b = (lm.token_logprobs([[PlainWord("x"), PlainWord(w)]])[0][1] for w in "ab")
    if alpha == 0.0:
        assert lp_a - lp_b == pytest.approx(math.log(10), abs=0.3)
    else:
        assert abs(lp_a - lp_b) < 0.3


def test_brown_corpus_with_the_tag_as_a_factor(tmp_path: Path) -> None:
    brown = tmp_path / "brown"
    brown.mkdir()
    docs = {f"ca0{i}": "news" for i in range(1, 5)}
    (brown / "cats.txt").write_text("".join(f"{d} {g}\n" for d, g in docs.items()))
    for d in docs:
        (brown / d).write_text(
            "\tThe/at jury/nn said/vbd ./.\n\n\tIt/pps was/bedz Friday/nr ./.\n", encoding="utf-8"
        )
    cfg = FNLMTrainConfig.from_json(
        {
            "data": {"corpus": "brown", "train": str(brown), "factors": ["word", "xpos"],
                     "split": [0.5, 0.5, 0.0], "drop_punct": True},
            "model": {"order": 2, "embed_dim": 2, "hidden_dim": 4, "num_classes": 2},
            "train": {"epochs": 1},
        }
    )  # fmt: skip
    result = train_fnlm(cfg, tmp_path, tmp_path / "m", progress=False)
    lm = load_fnlm(result.out_dir)
    assert lm.encoder.vocabs[1].values[1:] == ("at", "bedz", "nn", "nr", "pps", "vbd")
    assert lm.word_counts == {"the": 2, "jury": 2, "said": 2, "it": 2, "was": 2, "friday": 2}


def test_checkpoints_from_before_the_shared_output_layer_still_load(tmp_path: Path) -> None:
    from safetensors.torch import load_file, save_file

    from rescorer.lm_models.checkpoint import WEIGHTS_FILE, load_checkpoint, save_checkpoint

    model = randomise(FNLM(make_config(word_classes=CLASSES)))
    tokens = [f"t{i}" for i in range(model.config.vocab_size)]
    folder = save_checkpoint(tmp_path / "ck", model, tokens)
    weights = load_file(str(folder / WEIGHTS_FILE))
    for new, old in (("output.class_layer.weight", "class_out.weight"),
                     ("output.class_layer.bias", "class_out.bias")):  # fmt: skip
        weights[old] = weights.pop(new)
    save_file(weights, str(folder / WEIGHTS_FILE), metadata={"format": "rescorer-checkpoint"})
    loaded, _, _ = load_checkpoint(folder)
    h = model.eval().hidden_state(histories(model.config, n=3))
    torch.testing.assert_close(loaded.log_probs(h), model.log_probs(h))
