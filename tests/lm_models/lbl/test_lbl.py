"""The multiplicative attribute LBL (Kiros et al. 2014): eqs. 1-6, attribute vectors, inference,
conditional similarity, sampling, checkpoints and training."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.func import functional_call

from rescorer.lm_models.lbl.model import (
    LBL,
    MISSING,
    AttributeSpec,
    LBLConfig,
    history_windows,
    load_lbl,
    save_lbl,
)
from rescorer.lm_models.lbl.train import (
    InferenceOptions,
    LBLTrainConfig,
    attribute_loglik,
    attribute_vector,
    conditional_neighbours,
    encode_sentences,
    fit_logistic_regression,
    infer_attributes,
    neighbours_under,
    sample_sentences,
    score_rows,
    train_lbl,
)
from rescorer.lm_models.vocab import BOS_ID, EOS_ID, UNK_ID, Vocabulary

WORDS = ["the", "a", "cat", "dog", "sat", "ran", "on", "mat", "god", "church", "war", "news"]
VOCAB = Vocabulary(["<unk>", "<s>", "</s>", *WORDS])  # V = 15
GENRE = AttributeSpec("genre", ("news", "religion", "fiction"), 3)
DOC = AttributeSpec("doc", ("d1", "d2", "d3", "d4"), 2)


pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tiny models: one thread


def randomise(model: LBL, seed: int = 0, scale: float = 0.5) -> LBL:
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=gen, dtype=p.dtype) * scale)
    return model.eval()


def make(**kw: object) -> LBL:
    base: dict = dict(vocab_size=len(VOCAB), order=4, embed_dim=5, factors=6,
                      attributes=(GENRE, DOC))  # fmt: skip
    base.update(kw)
    return randomise(LBL(LBLConfig(**base)))


def histories(n: int = 7, order: int = 4, seed: int = 1) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, len(VOCAB), (n, order - 1), generator=gen)


def test_history_windows_by_hand() -> None:
    got = history_windows([5, 6, 7], order=3)
    # targets 5, 6, 7, </s>; most recent history word first, <s> (1) before the start.
    assert got.tolist() == [[1, 1], [5, 1], [6, 5], [7, 6]]


def test_plain_lbl_is_eqs_1_and_2_by_hand() -> None:
    model = make(factors=0, attributes=())
    hist = histories(3)
    r, c, b = model.R.detach().numpy(), model.context.detach().numpy(), model.bias.detach().numpy()
    expected = np.zeros((3, len(VOCAB)))
    for row in range(3):
        r_hat = sum(c[i] @ r[int(hist[row, i])] for i in range(3))  # eq. 1
        scores = np.array([r_hat @ r[j] + b[j] for j in range(len(VOCAB))])
        scores[BOS_ID] = -np.inf
        expected[row] = scores - np.log(np.exp(scores - scores.max()).sum()) - scores.max()
    got = model.log_probs(hist).detach().numpy()
    finite = np.isfinite(expected)
    np.testing.assert_allclose(got[finite], expected[finite], atol=1e-5)
    assert np.all(np.isneginf(got[:, BOS_ID]))


def test_factored_tensor_equals_explicit_contraction() -> None:
    model = make()
    tensor = model.full_tensor().detach()  # (V, K, D), eq. 3 unfactored
    x = torch.rand(GENRE.dim + DOC.dim)
    explicit = torch.einsum("vkd,d->vk", tensor, x)  # T^x = sum_d x_d T^(d)
    torch.testing.assert_close(model.word_matrix(x).detach(), explicit, atol=1e-5, rtol=1e-5)
    # Element by element on a few entries, straight from W^fk, W^fd, W^fv.
    wfk, wfd, wfv = model.W_fk.detach(), model.W_fd.detach(), model.W_fv.detach()
    for v, k, d in [(0, 0, 0), (3, 4, 2), (14, 1, 4)]:
        by_hand = sum(float(wfv[f, v] * wfk[f, k] * wfd[f, d]) for f in range(6))
        assert float(tensor[v, k, d]) == pytest.approx(by_hand, abs=1e-6)
    # The network's output scores are T^x r_hat + b (eq. 5 = the tensor applied to r_hat).
    hist = histories()
    r_hat = model.predict(hist)
    x_rows = x.expand(len(hist), -1)
    logits = model.logits(r_hat, x=x_rows).detach()
    by_tensor = r_hat.detach() @ explicit.T + model.bias.detach()
    finite = torch.isfinite(logits)
    torch.testing.assert_close(logits[finite], by_tensor[finite], atol=1e-5, rtol=1e-5)


def test_history_uses_folded_embeddings() -> None:
    model = make()
    e = model.W_fk.detach().T @ model.W_fv.detach()  # E = (W^fk)^T W^fv, K x V
    hist = histories(3)
    c = model.context.detach()
    expected = torch.stack([sum(c[i] @ e[:, hist[b, i]] for i in range(3)) for b in range(3)])
    torch.testing.assert_close(model.predict(hist).detach(), expected, atol=1e-5, rtol=1e-5)


def test_constant_attribute_reduces_to_folded_lbl() -> None:
    """With W^fd x = 1 the gated model is the plain LBL with R = E^T = W^fv^T W^fk."""
    model = make()
    x = torch.rand(GENRE.dim + DOC.dim) + 0.5
    with torch.no_grad():
        model.W_fd.copy_(torch.ones(6, len(x)) / x.sum())  # every factor's gate is 1
    plain = make(factors=0, attributes=())
    with torch.no_grad():
        plain.R.copy_(model.W_fv.T @ model.W_fk)
        plain.context.copy_(model.context)
        plain.bias.copy_(model.bias)
    hist = histories()
    got = model.log_probs(hist, x=x.expand(len(hist), -1)).detach()
    want = plain.log_probs(hist).detach()
    finite = torch.isfinite(want)
    torch.testing.assert_close(got[finite], want[finite], atol=1e-5, rtol=1e-5)
    # A model without attributes has the constant gate built in: the same plain LBL.
    ungated = make(attributes=())
    with torch.no_grad():
        for name in ("W_fk", "W_fv", "context", "bias"):
            getattr(ungated, name).copy_(getattr(model, name))
    torch.testing.assert_close(ungated.log_probs(hist).detach()[finite], want[finite])


def test_distribution_sums_to_one_and_bos_is_never_predicted() -> None:
    model = make()
    attrs = torch.tensor([[0, 1], [2, MISSING], [MISSING, MISSING]] * 2 + [[1, 3]])
    lp = model.log_probs(histories(), attrs=attrs).detach()
    torch.testing.assert_close(lp.exp().sum(1), torch.ones(len(lp)), atol=1e-5, rtol=0)
    assert bool(torch.isneginf(lp[:, BOS_ID]).all())


@pytest.mark.parametrize("kind", ["plain", "gated"])
def test_forward_equals_the_full_distribution_at_the_targets(kind: str) -> None:
    """The training forward pass reads the targets out of blocks of the softmax (no (B, V)
    tensor): the same log-probabilities and gradients as log_probs gathered at the targets."""
    model = make(factors=0, attributes=()) if kind == "plain" else make()
    model.train()
    n = 600  # more rows than one block of the blocked softmax
    gen = torch.Generator().manual_seed(3)
    hist = torch.randint(0, len(VOCAB), (n, 3), generator=gen)
    targets = torch.randint(0, len(VOCAB), (n,), generator=gen)
    targets[targets == BOS_ID] = EOS_ID  # <s> is never a target
    attrs = None if kind == "plain" else torch.randint(-1, 3, (n, 2), generator=gen)
    got = model(hist, targets, attrs=attrs)
    (got * torch.linspace(0.5, 1.5, n)).sum().backward()
    grads = {k: p.grad.clone() for k, p in model.named_parameters()}
    model.zero_grad()
    want = model.log_probs(hist, attrs).gather(1, targets[:, None])[:, 0]
    (want * torch.linspace(0.5, 1.5, n)).sum().backward()
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    for k, p in model.named_parameters():
        torch.testing.assert_close(grads[k], p.grad, atol=1e-4, rtol=1e-4, msg=k)


def test_attribute_vector_lookup_relu_concatenation_and_expected_value() -> None:
    model = make()
    with torch.no_grad():
        model.lookups[0][1] = torch.tensor([-1.0, 2.0, 0.5])  # genre "religion"
    x = model.attribute_vector(torch.tensor([[1, 2], [MISSING, 0]])).detach()
    assert x[0, :3].tolist() == pytest.approx([0.0, 2.0, 0.5])  # rectified
    torch.testing.assert_close(x[0, 3:], torch.relu(model.lookups[1][2]).detach())
    expected_genre = torch.relu(model.lookups[0]).mean(0).detach()
    torch.testing.assert_close(x[1, :3], expected_genre)
    no_relu = make(relu=False)
    with torch.no_grad():
        no_relu.lookups[0][1] = torch.tensor([-1.0, 2.0, 0.5])
    assert no_relu.attribute_vector(torch.tensor([[1, 0]]))[0, :3].tolist() == pytest.approx(
        [-1.0, 2.0, 0.5]
    )
    # A record -> x: unknown values and fields are missing; overrides replace one slice.
    rec = attribute_vector(model, {"genre": "religion", "doc": "unseen", "speaker": "s1"})
    torch.testing.assert_close(rec, torch.cat([x[0, :3], model.expected_attribute(1).detach()]))


def test_gradients_match_finite_differences() -> None:
    model = make().double()
    params = {k: v.detach().clone().requires_grad_(True) for k, v in model.named_parameters()}
    names = list(params)
    hist = histories(5)
    targets = torch.tensor([0, 2, 3, 9, 14])
    attrs = torch.tensor([[0, 1], [1, MISSING], [2, 3], [MISSING, 0], [1, 2]])

    def loss(*tensors: torch.Tensor) -> torch.Tensor:
        out = functional_call(model, dict(zip(names, tensors, strict=True)), (hist, targets, attrs))
        return out.sum()

    # Lookup rows near 0 make the rectifier's kink a finite-difference hazard: keep them away.
    for name in names:
        if name.startswith("lookups"):
            with torch.no_grad():
                params[name].copy_(params[name].abs() + 0.2)
    assert torch.autograd.gradcheck(loss, tuple(params[n] for n in names), atol=1e-6)


def test_unshared_vocabularies_restrict_the_softmax_to_the_value_block() -> None:
    lang = AttributeSpec("lang", ("en", "fr"), 2)
    #            <unk> <s> </s>  the a cat dog sat ran on mat god church war news
    blocks = (-1, -1, -1, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1)
    model = make(attributes=(lang,), vocab_attribute="lang", word_blocks=blocks)
    hist = histories(4)
    lp = model.log_probs(hist, attrs=torch.tensor([[0], [1], [MISSING], [0]])).detach()
    torch.testing.assert_close(lp.exp().sum(1), torch.ones(4), atol=1e-5, rtol=0)
    en = torch.tensor([b in (-1, 0) for b in blocks]) & (torch.arange(15) != BOS_ID)
    fr = torch.tensor([b in (-1, 1) for b in blocks]) & (torch.arange(15) != BOS_ID)
    assert bool(torch.isneginf(lp[0, ~en]).all()) and bool(torch.isfinite(lp[0, en]).all())
    assert bool(torch.isneginf(lp[1, ~fr]).all()) and bool(torch.isfinite(lp[1, fr]).all())
    assert int(torch.isfinite(lp[2]).sum()) == 14  # value unknown: every word but <s>
    # Within its block the language's distribution is the shared model renormalised (eq. 6).
    shared = make(attributes=(lang,))
    with torch.no_grad():
        for (_, p), (_, q) in zip(shared.named_parameters(), model.named_parameters(), strict=True):
            p.copy_(q)
    full = shared.log_probs(hist[:1], attrs=torch.tensor([[0]])).detach()[0]
    torch.testing.assert_close(lp[0, en], full[en] - torch.logsumexp(full[en], 0))
    with pytest.raises(ValueError, match="word_blocks"):
        LBLConfig(vocab_size=15, attributes=(lang,), vocab_attribute="lang", word_blocks=(0,) * 3)
    with pytest.raises(ValueError, match="not an attribute"):
        LBLConfig(vocab_size=15, attributes=(lang,), vocab_attribute="genre", word_blocks=blocks)


def test_config_validation_and_json_round_trip() -> None:
    cfg = LBLConfig(vocab_size=15, order=3, embed_dim=4, factors=5, attributes=(GENRE, DOC))
    assert LBLConfig.from_json(json.loads(json.dumps(cfg.to_json()))) == cfg
    assert cfg.attr_dim == 5 and cfg.slices() == [slice(0, 3), slice(3, 5)]
    with pytest.raises(ValueError, match="need factors > 0"):
        LBLConfig(vocab_size=15, factors=0, attributes=(GENRE,))
    with pytest.raises(ValueError, match="order"):
        LBLConfig(vocab_size=15, order=1)
    with pytest.raises(ValueError, match="unknown LBL config key"):
        LBLConfig.from_json({**cfg.to_json(), "hidden": 3})
    with pytest.raises(ValueError, match="distinct"):
        AttributeSpec("genre", ("a", "a"), 2)


def test_checkpoint_round_trip(tmp_path: Path) -> None:
    model = make()
    save_lbl(tmp_path / "ckpt", model, VOCAB, {"note": "test"})
    loaded, vocab = load_lbl(tmp_path / "ckpt")
    assert vocab == VOCAB and loaded.config == model.config
    hist = histories()
    attrs = torch.tensor([[0, 1]] * len(hist))
    torch.testing.assert_close(loaded.log_probs(hist, attrs), model.log_probs(hist, attrs))
    config = json.loads((tmp_path / "ckpt" / "config.json").read_text())
    assert config["model_type"] == "lbl"
    assert config["config"]["attributes"][0] == {
        "name": "genre",
        "values": ["news", "religion", "fiction"],
        "dim": 3,
    }
    # Strict loading: a config that does not fit the weights is refused.
    config["config"]["factors"] = 7
    (tmp_path / "ckpt" / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="shape"):
        load_lbl(tmp_path / "ckpt")


def planted_model(seed: int = 0) -> LBL:
    """A small model whose attribute strongly changes the distribution (identifiable x)."""
    attr = AttributeSpec("a", ("v0", "v1"), 4)
    model = LBL(LBLConfig(vocab_size=len(VOCAB), order=3, embed_dim=6, factors=8,
                          attributes=(attr,)))  # fmt: skip
    return randomise(model, seed, scale=0.5)


def test_inference_recovers_a_planted_attribute_vector() -> None:
    model = planted_model()
    planted = torch.tensor([1.2, 0.1, 0.8, 0.5])
    sentences = sample_sentences(model, VOCAB, planted, n=300, max_words=50, seed=3, allow_unk=True)
    rows = encode_sentences(model.config, VOCAB, sentences)  # attribute missing in the rows
    rows = type(rows)(rows.history, rows.targets, rows.attrs, np.zeros_like(rows.doc_index), ())
    assert len(rows.targets) > 2000
    result = infer_attributes(model, rows, "a", InferenceOptions(steps=100, lr=0.05))
    got = torch.from_numpy(result.vectors[0])
    cosine = float(torch.nn.functional.cosine_similarity(got, planted, dim=0))
    assert cosine > 0.97, (got, planted)
    assert float((got - planted).norm() / planted.norm()) < 0.25
    # The loss falls, converges, and the fit is at least as good as the planted vector's.
    losses = result.losses[:, 0]
    assert losses[-1] < losses[0] - 0.05
    assert abs(losses[-1] - losses[-10]) < 1e-3
    with torch.no_grad():
        x = planted.expand(len(rows.targets), -1)
        h, t = torch.from_numpy(rows.history), torch.from_numpy(rows.targets)
        at_planted = -float(model(h, t, x=x).mean())
    assert losses[-1] <= at_planted + 1e-4
    assert 0 < result.steps_to_converge(0.01)[0] < 100


def test_inference_is_per_text_and_generative_loglik_matches_scoring() -> None:
    model = planted_model(seed=1)
    sentences = [["the", "cat", "sat"], ["a", "dog", "ran", "on", "the", "mat"], ["war", "news"]]
    rows = encode_sentences(model.config, VOCAB, sentences)
    # Two texts at once equal each text on its own (the vectors do not interact).
    both = infer_attributes(model, rows, "a", InferenceOptions(steps=5))
    keep = rows.doc_index == 1
    alone_rows = type(rows)(
        rows.history[keep], rows.targets[keep], rows.attrs[keep], np.zeros(int(keep.sum()), int), ()
    )
    alone = infer_attributes(model, alone_rows, "a", InferenceOptions(steps=5))
    np.testing.assert_allclose(both.vectors[1], alone.vectors[0], atol=1e-5)
    # attribute_loglik (factored shortcut) = scoring the rows with each value's id.
    table = attribute_loglik(model, rows, "a")
    for v in range(2):
        fixed = type(rows)(
            rows.history, rows.targets, np.full_like(rows.attrs, v), rows.doc_index, ()
        )
        scored = score_rows(model, fixed)
        per_text = np.bincount(rows.doc_index, weights=scored)
        np.testing.assert_allclose(table[:, v], per_text, atol=1e-4)


def test_conditional_neighbours_by_hand() -> None:
    model = make()
    x_a = attribute_vector(model, {"genre": "news"})
    x_b = attribute_vector(model, {"genre": "religion"})
    t = model.word_matrix(x_a).detach().numpy()
    t = t / np.linalg.norm(t, axis=1, keepdims=True)
    cat = VOCAB.token_id("cat")
    sims = t @ t[cat]
    ranked = [VOCAB.token(int(i)) for i in np.argsort(-sims) if int(i) not in (0, 1, 2, cat)]
    assert [w for w, _ in neighbours_under(model, VOCAB, "cat", x_a, top=5)] == ranked[:5]
    nb = conditional_neighbours(model, VOCAB, "cat", x_a, x_b, top=6, show=3)
    assert set(nb.common) <= set(nb.top_a) & set(nb.top_b)
    assert not set(nb.unique_a) & set(nb.top_b) and not set(nb.unique_b) & set(nb.top_a)
    same = conditional_neighbours(model, VOCAB, "cat", x_a, x_a, top=6, show=6)
    assert same.unique_a == () and same.unique_b == () and len(same.common) == 6
    with pytest.raises(ValueError, match="not in the model's vocabulary"):
        neighbours_under(model, VOCAB, "zebra", x_a)


def test_sampling_is_reproducible_and_follows_the_attribute() -> None:
    model = make()
    x = attribute_vector(model, {"genre": "news"})
    a = sample_sentences(model, VOCAB, x, n=4, max_words=8, seed=5)
    assert a == sample_sentences(model, VOCAB, x, n=4, max_words=8, seed=5)
    assert all(0 < len(s) <= 8 or s == [] for s in a)
    assert all(w in WORDS for s in a for w in s)  # no <unk>, <s>, </s> inside
    # A degenerate attribute: a huge bias on one word makes every sample that word.
    with torch.no_grad():
        model.bias[VOCAB.token_id("war")] = 50.0
    assert sample_sentences(model, VOCAB, x, n=2, max_words=3, seed=0) == [["war"] * 3] * 2


def test_logistic_regression_separates_clusters() -> None:
    rng = np.random.default_rng(0)
    centres = np.array([[3.0, 0.0], [0.0, 3.0], [-3.0, -3.0]])
    labels = rng.integers(0, 3, 90)
    feats = centres[labels] + rng.normal(size=(90, 2)) * 0.3
    clf = fit_logistic_regression(feats, labels, 3)
    assert (clf.predict(feats) == labels).all()


def write_jsonl(path: Path, n_docs: int, seed: int) -> Path:
    """Documents of two genres with different word habits."""
    rng = np.random.default_rng(seed)
    lines = []
    for i in range(n_docs):
        genre = ("news", "religion")[i % 2]
        pool = ["war", "news", "the", "dog"] if genre == "news" else ["god", "church", "the", "a"]
        text = "\n".join(" ".join(rng.choice(pool, size=rng.integers(1, 3))) for _ in range(8))
        lines.append(json.dumps({"id": f"d{i}", "text": text, "fields": {"genre": genre}}))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_training_smoke(tmp_path: Path) -> None:
    corpus = write_jsonl(tmp_path / "docs.jsonl", 20, 0)
    cfg = LBLTrainConfig.from_json(
        {
            "data": {"corpus": "jsonl", "path": str(corpus), "attributes": ["genre", "doc"],
                     "max_vocab": None, "split": [0.6, 0.2, 0.2]},
            "model": {"order": 3, "embed_dim": 6, "factors": 6,
                      "attr_dims": {"genre": 3, "doc": 2}},
            "train": {"epochs": 12, "batch_size": 32, "lr": 0.1, "patience": 12,
                      "attribute_dropout": 0.3},
        }
    )  # fmt: skip
    result = train_lbl(cfg, tmp_path, tmp_path / "out", progress=False)
    assert result.epochs[-1].train_loss < result.epochs[0].train_loss
    model, vocab = load_lbl(tmp_path / "out")
    assert [a.name for a in model.config.attributes] == ["genre", "doc"]
    assert model.config.attributes[0].values == ("news", "religion")
    meta = json.loads((tmp_path / "out" / "training.json").read_text())
    assert len(meta["split"]["train"]) == 12 and meta["best_epoch"] >= 1
    assert set(meta["split"]["dev"]).isdisjoint(model.config.attributes[1].values)
    # The learned genres prefer their own first words (where only the genre tells them apart).
    rows = encode_sentences(model.config, vocab, [["god"], ["war"]])
    table = attribute_loglik(model, rows, "genre")
    assert table[0].argmax() == 1 and table[1].argmax() == 0
    assert UNK_ID == 0 and EOS_ID == 2  # the ids the encoders rely on


def test_training_with_unshared_vocabularies(tmp_path: Path) -> None:
    """Section 2.4 through the trainer: words seen under one genre only form its block, "the"
    (both genres) is shared, and each genre's softmax covers its block and the shared words."""
    corpus = write_jsonl(tmp_path / "docs.jsonl", 20, 0)
    cfg = LBLTrainConfig.from_json(
        {
            "data": {"corpus": "jsonl", "path": str(corpus), "attributes": ["genre"],
                     "max_vocab": None, "split": [0.6, 0.2, 0.2]},
            "model": {"order": 3, "embed_dim": 6, "factors": 6, "attr_dims": 3,
                      "vocab_attribute": "genre"},
            "train": {"epochs": 3, "batch_size": 32, "lr": 0.05, "attribute_dropout": 0.5},
        }
    )  # fmt: skip
    result = train_lbl(cfg, tmp_path, tmp_path / "out", progress=False)
    model, vocab = load_lbl(tmp_path / "out")
    blocks = dict(zip(vocab.tokens, model.config.word_blocks, strict=True))
    assert {w: blocks[w] for w in ("war", "dog", "god", "a", "the", "</s>", "<unk>")} == {
        "war": 0,
        "dog": 0,
        "god": 1,
        "a": 1,
        "the": -1,
        "</s>": -1,
        "<unk>": -1,
    }
    assert result.epochs[-1].train_loss < result.epochs[0].train_loss
    rows = encode_sentences(model.config, vocab, [["war", "god"]], [{"genre": "news"}])
    logp = score_rows(model, rows)
    with torch.no_grad():
        dist = model.log_probs(torch.from_numpy(rows.history[:1]), torch.tensor([[0]])).exp()
        unk = model.log_probs(torch.from_numpy(rows.history[1:2]), torch.tensor([[0]]))[0, UNK_ID]
    # "god" is not a news word: in a news text it is out of vocabulary, scored as <unk>.
    assert logp[1] == pytest.approx(float(unk)) and math.isfinite(logp[0])
    news = [vocab.token_id(w) for w in ("war", "news", "dog", "the", "</s>", "<unk>")]
    assert float(dist[0, news].sum()) == pytest.approx(1.0, abs=1e-5)
    with pytest.raises(ValueError, match="vocab_attribute 'lang' must be one of"):
        LBLTrainConfig.from_json(
            {"data": {"corpus": "brown", "path": "x", "attributes": ["genre"]},
             "model": {"vocab_attribute": "lang"}}
        )  # fmt: skip


def test_training_config_errors(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="plain LBL"):
        LBLTrainConfig.from_json(
            {"data": {"corpus": "brown", "path": "x", "attributes": ["genre"]},
             "model": {"factors": 0}}
        )  # fmt: skip
    with pytest.raises(ValueError, match="unknown model key"):
        LBLTrainConfig.from_json({"data": {"corpus": "brown", "path": "x"}, "model": {"F": 3}})
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="bad.json"):
        LBLTrainConfig.load(bad)
    assert math.isfinite(1.0)
