"""hf:DIR -- a local HuggingFace causal LM behind the contract, checked against a direct forward
pass of the same model (a tiny random GPT-2 with a byte-level BPE tokenizer built here)."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")
torch = pytest.importorskip("torch")

from rescorer.cli.main import main  # noqa: E402
from rescorer.lms import load_lm  # noqa: E402
from rescorer.lms.hf import (  # noqa: E402
    DEFAULT_BATCH_TOKENS,
    HFCausalLM,
    position_limit,
    windows,
)

TEXT = ["the cat sat on the mat", "a dog ran in the park", "he said that it was good"] * 40
SENTENCES = [
    ["THE", "CAT", "SAT", "ON", "THE", "MAT"],
    ["A", "DOG"],
    ["the", "zebra", "sat"],  # mixed case: left as it is
    [],
    ["HE", "SAID", "THAT", "IT", "WAS", "GOOD", "GOOD"],
]


def tiny_tokenizer() -> Any:
    """A byte-level BPE tokenizer trained on TEXT (GPT-2's conventions)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(
        TEXT,
        trainers.BpeTrainer(
            vocab_size=300,
            special_tokens=["<|endoftext|>"],
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        ),
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<|endoftext|>", eos_token="<|endoftext|>"
    )


def build_tiny_gpt2(out: Path) -> Path:
    """A tiny random GPT-2 (learned positions, 64 of them) with the tiny tokenizer."""
    from transformers import GPT2LMHeadModel

    fast = tiny_tokenizer()
    torch.manual_seed(0)
    config = transformers.GPT2Config(
        vocab_size=len(fast), n_positions=64, n_embd=16, n_layer=2, n_head=2,
        bos_token_id=fast.bos_token_id, eos_token_id=fast.eos_token_id,
    )  # fmt: skip
    GPT2LMHeadModel(config).save_pretrained(out, safe_serialization=True)
    fast.save_pretrained(out)
    return out


def build_tiny_llama(out: Path) -> Path:
    """A tiny random Llama (rotary positions, a limit of 64) with the tiny tokenizer."""
    from transformers import LlamaConfig, LlamaForCausalLM

    fast = tiny_tokenizer()
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(fast), hidden_size=16, intermediate_size=32, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64,
        bos_token_id=fast.bos_token_id, eos_token_id=fast.eos_token_id,
    )  # fmt: skip
    LlamaForCausalLM(config).save_pretrained(out, safe_serialization=True)
    fast.save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_gpt2(tmp_path_factory.mktemp("hf") / "tiny")


def direct_pieces(path: Path, words: list[str], limit: int | None = None) -> tuple[list, list]:
    """Each word's pieces (tokenised on its own, with its leading space after the first word)
    and the log-probs of all pieces then EOS, by plain forward passes over BOS + pieces.

    With ``limit``, sentences longer than it are read in sliding windows (stride limit // 2):
    a window starts every stride positions, is at most ``limit`` long, and scores only the
    targets no earlier window scored."""
    tok = transformers.AutoTokenizer.from_pretrained(str(path))
    model = transformers.AutoModelForCausalLM.from_pretrained(str(path)).eval()
    words = [w.lower() for w in words] if "".join(words).isupper() else list(words)
    per_word = [
        tok(("" if i == 0 else " ") + w, add_special_tokens=False).input_ids
        for i, w in enumerate(words)
    ]
    ids = [p for piece in per_word for p in piece]
    stream, targets = [tok.bos_token_id, *ids], [*ids, tok.eos_token_id]
    width = len(stream) if limit is None else limit
    values: list[float] = []
    for begin in range(0, len(stream), max(width // 2, 1)):
        window = torch.tensor([stream[begin : begin + width]])
        with torch.no_grad():
            lp = torch.log_softmax(model(window).logits[0].double(), -1)
        for t in range(len(values), min(begin + width, len(stream))):
            values.append(float(lp[t - begin, targets[t]]))
        if len(values) == len(stream):
            break
    return per_word, values


def direct(path: Path, words: list[str], limit: int | None = None) -> tuple[float, list[float]]:
    """Sentence and per-word log-probs by plain forward passes (see direct_pieces)."""
    per_word, values = direct_pieces(path, words, limit)
    words_lp, k = [], 0
    for piece in per_word:
        words_lp.append(sum(values[k : k + len(piece)]))
        k += len(piece)
    return sum(values), [*words_lp, values[-1]]


def test_scores_equal_a_direct_forward_pass(tiny: Path) -> None:
    lm = load_lm(f"hf:{tiny}", device="cpu")
    assert isinstance(lm, HFCausalLM) and lm.units == "subword"
    got = lm.token_logprobs(SENTENCES)
    totals = lm.sentence_logprobs(SENTENCES)
    for words, values, total in zip(SENTENCES, got, totals, strict=True):
        want_total, want_words = direct(tiny, words)
        assert values.shape == (len(words) + 1,)
        np.testing.assert_allclose(values, want_words, atol=1e-4, rtol=0)
        assert total == pytest.approx(want_total, abs=1e-4)
    # batching and padding do not change a score
    one_by_one = HFCausalLM(tiny, device="cpu", batch_tokens=1)
    np.testing.assert_allclose(one_by_one.sentence_logprobs(SENTENCES), totals, atol=1e-4)
    assert all(not f.any() for f in lm.oov_flags(SENTENCES))


def test_case_and_streaming(tiny: Path) -> None:
    auto = HFCausalLM(tiny, device="cpu")
    lower = HFCausalLM(tiny, device="cpu", case="lower")
    none = HFCausalLM(tiny, device="cpu", case="none")
    caps = [["THE", "CAT"]]
    assert auto.sentence_logprobs(caps)[0] == pytest.approx(lower.sentence_logprobs(caps)[0])
    assert abs(none.sentence_logprobs(caps)[0] - auto.sentence_logprobs(caps)[0]) > 1e-3
    words = SENTENCES[0]
    states, total = [auto.start()], 0.0
    for w in [*words, "</s>"]:
        vals, states = auto.advance(states, [w])
        total += float(vals[0])
    assert total == pytest.approx(auto.sentence_logprobs([words])[0], abs=1e-4)


def test_pickled_weights_and_bad_folders_are_refused(tmp_path: Path) -> None:
    folder = tmp_path / "gpt"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    (folder / "pytorch_model.bin").write_bytes(b"a pickle")
    with pytest.raises(ValueError, match=r"no \*\.safetensors weights; pickled weights"):
        load_lm(f"hf:{folder}")
    with pytest.raises(ValueError, match="expected a local transformers model folder"):
        HFCausalLM(tmp_path / "nowhere")


def test_cli_score_tune_rescore_with_an_hf_model(
    tiny: Path, espnet_factory: Callable[..., Path], tmp_path: Path
) -> None:
    utts = [
        ("spk-u1", [("THE CAT SAT", -3, -4, -2), ("THE CAT SAD", -3.1, -3.5, -2.5)]),
        ("spk-u2", [("A DOG RAN", -2, -2.5, -1.5), ("A DOG RUN", -2.1, -2, -2.2)]),
    ]
    root = espnet_factory("dev", utts, {"spk-u1": "THE CAT SAT", "spk-u2": "A DOG RAN"})
    ref = root / "references" / "ref_wer.trn"
    scored = tmp_path / "scored.jsonl"
    run = CliRunner().invoke
    res = run(main, ["-q", "score", "--nbest", str(root), "--lm", f"gpt=hf:{tiny}",
                     "--out", str(scored)])  # fmt: skip
    assert res.exit_code == 0, res.output
    first = json.loads(scored.read_text().splitlines()[0])
    want, _ = direct(tiny, first["hyps"][0]["text"].split())
    assert first["hyps"][0]["scores"]["gpt"] == pytest.approx(want, abs=1e-4)
    assert "gpt_oov" not in first["hyps"][0]["scores"]  # subword pieces: no unknown words
    weights = tmp_path / "w.json"
    res = run(main, ["-q", "tune", "--nbest", str(scored), "--ref", str(ref),
                     "--features", "decoder,ctc,gpt", "--out", str(weights)])  # fmt: skip
    assert res.exit_code == 0, res.output
    res = run(main, ["-q", "rescore", "--nbest", str(scored), "--weights", str(weights),
                     "--ref", str(ref), "--out", str(tmp_path / "out")])  # fmt: skip
    assert res.exit_code == 0 and "%WER" in res.output, res.output


# -- sentences longer than the model's 64 positions ---------------------------------------------
PARK = ["the", "cat", "sat", "on", "the", "mat", "and", "the", "dog", "ran", "in", "the", "park"]


def sentence_of(lm: HFCausalLM, pieces: int) -> list[str]:
    """Words from TEXT whose sentence is exactly ``pieces`` pieces long."""
    vocab = sorted({w for line in TEXT for w in line.split()})
    words: list[str] = []
    while len(lm.pieces(words)[0]) < pieces:
        fits = [w for w in vocab if len(lm.pieces([*words, w])[0]) <= pieces]
        assert fits, f"no word fits after {len(lm.pieces(words)[0])} pieces"
        words.append(fits[len(words) % len(fits)])
    return words


def test_windows_score_every_target_once() -> None:
    assert windows(10, 4) == [(0, 4, 0), (2, 6, 4), (4, 8, 6), (6, 10, 8)]
    assert windows(5, 4) == [(0, 4, 0), (2, 5, 4)]  # the last window is shorter
    assert windows(4, 4) == [(0, 4, 0)]
    for n, limit in [(100, 64), (129, 64), (65, 64), (7, 1)]:
        spans = windows(n, limit)
        assert [t for _, end, first in spans for t in range(first, end)] == list(range(n))
        assert all(end - begin <= limit for begin, end, _ in spans)
        # every later target keeps limit - limit // 2 positions of left context at least
        assert all(first - begin >= limit - max(limit // 2, 1) for begin, _, first in spans[1:])


def test_position_limit_from_configs() -> None:
    assert position_limit(transformers.GPT2Config(n_positions=64)) == 64
    assert position_limit(transformers.LlamaConfig(max_position_embeddings=128)) == 128
    assert position_limit(transformers.PretrainedConfig()) is None


def test_long_sentences_are_scored_in_windows(tiny: Path, caplog: pytest.LogCaptureFixture) -> None:
    lm = HFCausalLM(tiny, device="cpu")
    assert lm.max_positions == 64
    long = PARK * 9  # 135 pieces: 136 positions with BOS, in 4 windows (stride 32)
    ids, _ = lm.pieces(long)
    assert len(ids) == 135
    with caplog.at_level(logging.INFO, logger="rescorer.lms.hf"):
        got = lm.token_logprobs([long, SENTENCES[0], long[:60]])  # long[:60]: 2 windows
    assert [r.getMessage() for r in caplog.records if "windows" in r.getMessage()] == [
        "hf tiny: 2 sentence(s) longer than the model's 64 positions, scored in 6 windows "
        "(stride 32)"
    ]
    _, want_pieces = direct_pieces(tiny, long, limit=64)
    np.testing.assert_allclose(lm._piece_logprobs([ids])[0], want_pieces, atol=1e-4, rtol=0)
    for words, values in zip([long, SENTENCES[0], long[:60]], got, strict=True):
        _, want = direct(tiny, words, limit=64)
        np.testing.assert_allclose(values, want, atol=1e-4, rtol=0)
    # the windows differ from one pass over all the pieces (were positions beyond 64 allowed)
    assert lm.stats.computed > lm.stats.scored


def test_a_sentence_at_the_limit_takes_one_pass(
    tiny: Path, caplog: pytest.LogCaptureFixture
) -> None:
    lm = HFCausalLM(tiny, device="cpu")
    at_limit = sentence_of(lm, 63)  # BOS + 63 pieces: 64 positions, the model's limit
    over = sentence_of(lm, 64)
    with caplog.at_level(logging.INFO, logger="rescorer.lms.hf"):
        got = lm.token_logprobs([at_limit])[0]
    assert not [r for r in caplog.records if "windows" in r.getMessage()]
    assert lm.stats.computed == lm.stats.scored == 64
    np.testing.assert_allclose(got, direct(tiny, at_limit)[1], atol=1e-4, rtol=0)
    # one piece more: two windows, the second scoring the last target only
    np.testing.assert_allclose(
        lm.token_logprobs([over])[0], direct(tiny, over, limit=64)[1], atol=1e-4, rtol=0
    )
    assert lm.stats.computed - 64 == 2 * 64 - 31  # windows [0, 64) and [32, 65)


def test_streaming_a_long_sentence_agrees_with_token_logprobs(tiny: Path) -> None:
    lm = HFCausalLM(tiny, device="cpu")
    words = PARK * 6  # 90 pieces
    want = lm.token_logprobs([words])[0]
    states, got = [lm.start()], []
    for w in [*words, "</s>"]:
        vals, states = lm.advance(states, [w])
        got.append(float(vals[0]))
    np.testing.assert_allclose(got, want, atol=1e-4, rtol=0)


# -- prefix caching ------------------------------------------------------------------------------
def test_prefix_cache_equals_the_uncached_path(tiny: Path) -> None:
    dog = ["a", "dog", "ran", "in", "the", "park", "and", "he", "said", "that", "it", "was", "good"]
    sentences = [
        PARK,
        PARK[:-1] + ["mat"],  # shares all but the last word
        ["he", "said"],  # distinct prefixes, alone
        PARK[:8],  # the common prefix alone: an empty suffix
        dog,  # a one-sentence "group": nothing shares its prefix
        PARK + ["and", "he", "said"],
        PARK[:9] + ["good"],
        PARK * 6,  # shares the prefix but too long for the model: windows
        PARK,  # a duplicate
        [],
        dog[:4] + PARK,
        dog[:4] + PARK[:5],
    ]
    plain = HFCausalLM(tiny, device="cpu", prefix_cache=False)
    want = plain.token_logprobs(sentences)
    want_pieces = plain._piece_logprobs([plain.pieces(s)[0] for s in sentences])
    for batch_tokens in (DEFAULT_BATCH_TOKENS, 16):  # 16: a group's rows in several batches
        cached = load_lm(f"hf:{tiny}", device="cpu", batch_tokens=batch_tokens, prefix_cache=True)
        assert isinstance(cached, HFCausalLM) and cached.prefix_cache
        ids = [cached.pieces(s)[0] for s in sentences]
        fits = sorted((i for i in range(len(ids)) if i != 7), key=lambda i: ids[i])
        groups = cached._prefix_groups(ids, fits)
        assert sorted(sorted(m) for m, _ in groups) == [[0, 1, 3, 5, 6, 8], [10, 11]]
        got = cached.token_logprobs(sentences)
        for g, w in zip(got, want, strict=True):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
        for g, w in zip(cached._piece_logprobs(ids), want_pieces, strict=True):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
        assert cached.stats.computed < plain.stats.computed
    with pytest.raises(ValueError, match="prefix_cache must be True or False, got 'yes'"):
        HFCausalLM(tiny, device="cpu", prefix_cache="yes")  # type: ignore[arg-type]


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_prefix_cache_on_bundles_mixing_long_prefixes_and_long_suffixes(
    tiny: Path, tmp_path: Path, family: str
) -> None:
    """Every sentence fits the model's 64 positions, but one bundle holds a group with a long
    shared prefix (50 of 59 pieces) and one with a short prefix and long suffixes (8 of 50):
    the padded slots of the first group's rows must not be numbered past the limit (GPT-2's
    learned positions raised IndexError), and the values equal the uncached ones."""
    path = tiny if family == "gpt2" else build_tiny_llama(tmp_path / "llama")
    plain = HFCausalLM(path, device="cpu", prefix_cache=False)
    cached = HFCausalLM(path, device="cpu", prefix_cache=True)
    assert cached.prefix_cache and cached.max_positions == 64
    rng = np.random.default_rng(0)
    vocab = len(cached.tokenizer)

    def pieces(n: int) -> list[int]:
        return [int(i) for i in rng.integers(0, vocab, n)]

    long_prefix, short_prefix = pieces(50), pieces(8)
    sequences = [
        long_prefix + pieces(9),  # 59 pieces: 60 positions with BOS
        long_prefix + pieces(9),
        short_prefix + pieces(42),  # 50 pieces, rows of 43 on an 8-piece prefix
        short_prefix + pieces(42),
        long_prefix + pieces(13),  # 63 pieces: at the limit
        long_prefix,  # the prefix alone
    ]
    order = sorted(range(len(sequences)), key=lambda i: sequences[i])
    groups = cached._prefix_groups(sequences, order)
    assert sorted(sorted(m) for m, _ in groups) == [[0, 1, 4, 5], [2, 3]]
    assert len(cached._bundles(sequences, groups)) == 1  # both groups in one bundle
    want = plain._piece_logprobs(sequences)
    got = cached._piece_logprobs(sequences)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=0, atol=1e-5)
    assert cached.stats.computed < plain.stats.computed
