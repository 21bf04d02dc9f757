"""The neural cache (``ncache:``): Grave et al.'s continuous cache over a torch LSTM's states.

Scores are checked against the paper's formula computed here directly from the model's
top-layer outputs and full softmax, one sentence at a time.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from rescorer.cli.main import main
from rescorer.core.errors import InputError
from rescorer.lm_models.checkpoint import save_checkpoint
from rescorer.lms import load_lm
from rescorer.lms.neural_cache import NeuralCache, NeuralCacheSpec
from rescorer.lms.torch import TorchLM
from tests.rescorer.lms.test_torch import VOCAB, make_model

pytestmark = pytest.mark.usefixtures("one_torch_thread", "restore_logging")

THETA, LAM = 0.7, 0.3
CACHE = "the dog ran\na cat sat on the mat"


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    model = make_model("unadapted", seed=3)
    return save_checkpoint(tmp_path_factory.mktemp("ncache") / "lstm", model, VOCAB)


def cached_lm(ckpt: Path, theta: float = THETA, lam: float = LAM, **kw: object) -> TorchLM:
    lm = load_lm(f"torch:{ckpt}", device="cpu")
    assert isinstance(lm, TorchLM)
    lm.attach_cache(NeuralCache(theta, lam, **kw))  # type: ignore[arg-type]
    return lm


def ids_of(words: Sequence[str]) -> list[int]:
    return [VOCAB.index(w) if w in VOCAB else 0 for w in words]


def expected(lm: TorchLM, words: Sequence[str], cache_text: str) -> np.ndarray:
    """Eq. 2-3 of Grave et al. by hand: every cached word w_i with the output that predicted
    it (each line a sentence from <s>), then each position of the sentence mixed."""
    model = lm.model
    keys, units = [], []
    with torch.no_grad():
        for line in cache_text.splitlines():
            x = ids_of(line.split())
            h = model.hidden(torch.tensor([[1, *x[:-1]]]))[0]  # h[t] predicted x[t]
            for t, unit in enumerate(x):
                if unit not in (0, 2):
                    keys.append(h[t])
                    units.append(unit)
        x = ids_of(words)
        h = model.hidden(torch.tensor([[1, *x]]))[0]  # (T + 1, d)
        logits = model.output_logits(h[None])[0]  # (T + 1, V)
        logits[:, 1] = -math.inf  # <s> is never predicted
        p_lm = torch.softmax(logits, dim=-1)  # (T + 1, V)
        out = []
        for t, target in enumerate([*x, 2]):
            p = (1 - LAM) * float(p_lm[t, target])
            if keys:
                att = torch.softmax(THETA * (torch.stack(keys) @ h[t]), dim=0)
                p += LAM * float(sum(a for a, u in zip(att, units, strict=True) if u == target))
            out.append(math.log(p))
    return np.array(out)


SENTENCES = [["the", "cat", "sat"], ["the", "cat", "ran"], ["a", "dog"], ["zebra", "on", "the"]]


def test_scores_are_the_paper_formula(ckpt: Path) -> None:
    lm = cached_lm(ckpt)
    contexts = [{"cache": CACHE}] * len(SENTENCES)
    got = lm.token_logprobs(SENTENCES, contexts)
    for words, values in zip(SENTENCES, got, strict=True):
        np.testing.assert_allclose(values, expected(lm, words, CACHE), atol=1e-5)


def test_no_context_or_an_empty_cache_is_the_base_model_exactly(ckpt: Path) -> None:
    base = load_lm(f"torch:{ckpt}", device="cpu")
    lm = cached_lm(ckpt)
    plain = base.token_logprobs(SENTENCES)
    for contexts in (None, [None] * 4, [{"cache": ""}] * 4, [{"cache": "zebra\n"}] * 4):
        for a, b in zip(lm.token_logprobs(SENTENCES, contexts), plain, strict=True):
            np.testing.assert_array_equal(a, b)  # "zebra" is <unk>: nothing is cached


def test_a_cache_per_utterance_in_one_forest_equals_each_alone(ckpt: Path) -> None:
    lm = cached_lm(ckpt)
    caches = ["the dog ran", "a cat sat on the mat\nthe dog", "", "mat mat mat"]
    together = lm.token_logprobs(SENTENCES, [{"cache": c} for c in caches])
    for words, cache, values in zip(SENTENCES, caches, together, strict=True):
        alone = cached_lm(ckpt).token_logprobs([words], [{"cache": cache}])[0]
        np.testing.assert_allclose(values, alone, atol=1e-6)
        if cache:
            np.testing.assert_allclose(values, expected(lm, words, cache), atol=1e-5)


def test_the_cache_share_sums_to_lambda_over_the_vocabulary(ckpt: Path) -> None:
    """(1 - lambda) of the LSTM's mass plus all of lambda: over every word, <unk> and </s>
    (the random test model also gives <s> some mass, which the LSTM's share keeps)."""
    base = load_lm(f"torch:{ckpt}", device="cpu")
    lm = cached_lm(ckpt)
    tokens = ["zebra", *VOCAB[3:], "</s>"]  # "zebra": <unk>, never cached
    sums = []
    for model, context in ((base, None), (lm, {"cache": CACHE})):
        _, (state,) = model.advance([model.start(context)], ["the"])
        values, _ = model.advance([state] * len(tokens), tokens)
        sums.append(math.fsum(np.exp(values)))
        if model is lm:
            cached = values[tokens.index("dog")]
        else:
            kept = values[tokens.index("dog")] + math.log(1 - LAM)
    assert sums[1] == pytest.approx((1 - LAM) * sums[0] + LAM, abs=1e-6)
    assert cached > kept  # a cached word gains over the base's kept share


def test_streaming_equals_the_batch_scores(ckpt: Path) -> None:
    lm = cached_lm(ckpt)
    context = {"cache": CACHE}
    for words in SENTENCES:
        state, values = lm.start(context), []
        for token in [*words, "</s>"]:
            v, (state,) = lm.advance([state], [token])
            values.append(v[0])
        np.testing.assert_allclose(values, lm.token_logprobs([words], [context])[0], atol=1e-6)


def test_max_words_keeps_the_last_cached_units(ckpt: Path) -> None:
    lm = cached_lm(ckpt, max_words=3)
    got = lm.token_logprobs([["the", "mat"]], [{"cache": "the dog ran\non the mat"}])[0]
    np.testing.assert_allclose(got, expected(lm, ["the", "mat"], "on the mat"), atol=1e-5)


def test_options_are_checked() -> None:
    for theta, lam, field, max_words, message in [
        (-1.0, 0.1, "cache", 10, "theta"),
        (float("nan"), 0.1, "cache", 10, "theta"),
        (0.5, 0.0, "cache", 10, "lambda"),
        (0.5, 1.0, "cache", 10, "lambda"),
        (0.5, 0.1, "", 10, "field"),
        (0.5, 0.1, "cache", 0, "max_words"),
    ]:
        with pytest.raises(ValueError, match=message):
            NeuralCache(theta, lam, field, max_words)


def test_spec_file_round_trip_relative_base_and_cli_score(ckpt: Path, tmp_path: Path) -> None:
    path = tmp_path / "nc.json"
    spec = NeuralCacheSpec(f"nb=torch:{ckpt}", THETA, LAM, "previous", 50)
    spec.save(path)
    assert NeuralCacheSpec.load(path) == spec
    lm = load_lm(f"nc=ncache:{path}", device="cpu")
    assert isinstance(lm, TorchLM) and lm.name == "nc" and lm.cache is not None
    assert lm.cache.max_words == 50 and lm.cache.field == "previous"
    nbest = tmp_path / "n.jsonl"
    lists = [{"utt": "u1", "hyps": [{"text": "the cat sat", "scores": {"am": -1.0}}]}]
    nbest.write_text("".join(json.dumps(x) + "\n" for x in lists))
    ctx = tmp_path / "ctx.jsonl"
    ctx.write_text(json.dumps({"utt": "u1", "fields": {"previous": CACHE}}) + "\n")
    out = tmp_path / "out.jsonl"
    result = CliRunner().invoke(
        main,
        ["-q", "score", "--nbest", str(nbest), "--lm", f"nc=ncache:{path}",
         "--context", str(ctx), "--out", str(out)],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    score = json.loads(out.read_text())["hyps"][0]["scores"]["nc"]
    assert score == pytest.approx(expected(lm, ["the", "cat", "sat"], CACHE).sum(), abs=1e-5)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{", "JSON"),
        ('{"format": "rescorer-neural-cache", "version": 1, "theta": 1, "lambda": 0.1}', "base"),
        (
            '{"format": "rescorer-neural-cache", "version": 1, "base": "torch:x", "theta": 1, '
            '"lambda": 2}',
            "lambda",
        ),  # fmt: skip
        (
            '{"format": "rescorer-neural-cache", "version": 1, "base": "torch:x", "theta": "a", '
            '"lambda": 0.1}',
            "theta",
        ),  # fmt: skip
    ],
)
def test_bad_spec_files_name_the_file(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(InputError, match=message) as err:
        NeuralCacheSpec.load(path)
    assert "bad.json" in str(err.value)


def test_a_base_that_is_not_a_torch_lstm_is_refused(tmp_path: Path, tiny_arpa: Path) -> None:
    path = tmp_path / "nc.json"
    NeuralCacheSpec(f"kenlm:{tiny_arpa}", THETA, LAM).save(path)
    with pytest.raises(InputError, match="torch: base"):
        load_lm(f"ncache:{path}")


def test_memories_built_again_after_clear_give_the_same_scores(ckpt: Path) -> None:
    lm = cached_lm(ckpt)
    contexts = [{"cache": CACHE}, {"cache": "the dog ran"}, None, {"cache": CACHE}]
    first = lm.token_logprobs(SENTENCES, contexts)
    assert lm.cache is not None
    lm.cache.clear()
    for a, b in zip(lm.token_logprobs(SENTENCES, contexts), first, strict=True):
        np.testing.assert_array_equal(a, b)


def test_an_adapted_model_reads_the_cache_under_each_records_own_weights(tmp_path: Path) -> None:
    ckpt = save_checkpoint(tmp_path / "factor", make_model("factor", seed=5), VOCAB)
    contexts = [{"genre": "news", "cache": CACHE}, {"genre": "sport", "cache": CACHE}]
    words = [["the", "cat", "sat"]] * 2
    together = cached_lm(ckpt).token_logprobs(words, contexts)
    for w, ctx, values in zip(words, contexts, together, strict=True):
        np.testing.assert_allclose(values, cached_lm(ckpt).token_logprobs([w], [ctx])[0], atol=1e-6)
    assert not np.allclose(together[0], together[1])  # the genres' weights differ
