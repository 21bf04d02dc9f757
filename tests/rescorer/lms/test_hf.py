"""hf:DIR -- a local HuggingFace causal LM behind the contract, checked against a direct forward
pass of the same model (a tiny random GPT-2 with a byte-level BPE tokenizer built here)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")
torch = pytest.importorskip("torch")

from rescorer.cli.main import main  # noqa: E402
from rescorer.lms import load_lm  # noqa: E402
from rescorer.lms.hf import HFCausalLM  # noqa: E402

TEXT = ["the cat sat on the mat", "a dog ran in the park", "he said that it was good"] * 40
SENTENCES = [
    ["THE", "CAT", "SAT", "ON", "THE", "MAT"],
    ["A", "DOG"],
    ["the", "zebra", "sat"],  # mixed case: left as it is
    [],
    ["HE", "SAID", "THAT", "IT", "WAS", "GOOD", "GOOD"],
]


def build_tiny_gpt2(out: Path) -> Path:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import GPT2LMHeadModel, PreTrainedTokenizerFast

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
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<|endoftext|>", eos_token="<|endoftext|>"
    )
    torch.manual_seed(0)
    config = transformers.GPT2Config(
        vocab_size=len(fast), n_positions=64, n_embd=16, n_layer=2, n_head=2,
        bos_token_id=fast.bos_token_id, eos_token_id=fast.eos_token_id,
    )  # fmt: skip
    GPT2LMHeadModel(config).save_pretrained(out, safe_serialization=True)
    fast.save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_gpt2(tmp_path_factory.mktemp("hf") / "tiny")


def direct(path: Path, words: list[str]) -> tuple[float, list[float]]:
    """Sentence and per-word log-probs by a plain forward pass: BOS + pieces, then EOS;
    each word tokenised on its own (with its leading space after the first word)."""
    tok = transformers.AutoTokenizer.from_pretrained(str(path))
    model = transformers.AutoModelForCausalLM.from_pretrained(str(path)).eval()
    words = [w.lower() for w in words] if "".join(words).isupper() else list(words)
    per_word = [
        tok(("" if i == 0 else " ") + w, add_special_tokens=False).input_ids
        for i, w in enumerate(words)
    ]
    ids = [p for piece in per_word for p in piece]
    full = torch.tensor([[tok.bos_token_id, *ids]])
    with torch.no_grad():
        lp = torch.log_softmax(model(full).logits[0].double(), -1)
    targets = [*ids, tok.eos_token_id]
    values = [float(lp[t, target]) for t, target in enumerate(targets)]
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


LONG = ("the cat sat on the mat and a dog ran in the park " * 8).split()  # ~100 pieces


def windowed_by_hand(path: Path, lm: HFCausalLM, words: list[str]) -> np.ndarray:
    """Each target's log-prob from its own forward pass over the window that scores it: targets
    before L with everything before them (from BOS), target p >= L in the first window
    [k * stride, k * stride + L) that reaches past p."""
    model = transformers.AutoModelForCausalLM.from_pretrained(str(path)).eval()
    ids, _ = lm.pieces(words)
    inputs, targets = [lm.bos_id, *ids], [*ids, lm.eos_id]
    limit, stride = model.config.n_positions, model.config.n_positions // 2
    values = []
    for p, target in enumerate(targets):
        # the first window k * stride + L that reaches past p
        start = 0 if p < limit else stride * -(-(p + 1 - limit) // stride)
        window = torch.tensor([inputs[start : p + 1]])  # causal: later tokens change nothing
        with torch.no_grad():
            lp = torch.log_softmax(model(window).logits[0, -1].double(), -1)
        values.append(float(lp[target]))
    return np.array(values)


def test_sentences_longer_than_the_context_are_scored_in_windows(tiny: Path) -> None:
    lm = HFCausalLM(tiny, device="cpu")
    assert lm.max_positions == 64
    ids, owner = lm.pieces(LONG)
    assert len(ids) + 1 > 64 + 32  # three windows: ends at 64, 96 and the sentence's end
    want = windowed_by_hand(tiny, lm, LONG)
    got = lm._piece_logprobs([ids])[0]
    np.testing.assert_allclose(got, want, atol=1e-4, rtol=0)
    # with the short sentences in one call: every one as it is alone, in its place
    mixed = [*SENTENCES[:2], LONG, SENTENCES[4]]
    values = lm.token_logprobs(mixed)
    np.testing.assert_allclose(values[2].sum(), want.sum(), atol=1e-3, rtol=0)
    shorts = [*SENTENCES[:2], SENTENCES[4]]
    for got_short, words in zip([values[0], values[1], values[3]], shorts, strict=True):
        np.testing.assert_allclose(got_short, direct(tiny, words)[1], atol=1e-4, rtol=0)
    # word values: the pieces summed per word, EOS last
    expected_words = np.zeros(len(LONG) + 1)
    np.add.at(expected_words, np.asarray(owner), want[: len(ids)])
    expected_words[-1] = want[-1]
    np.testing.assert_allclose(values[2], expected_words, atol=1e-4, rtol=0)
    # streaming gives the same sentence value
    states, total = [lm.start()], 0.0
    for w in [*LONG, "</s>"]:
        step, states = lm.advance(states, [w])
        total += float(step[0])
    assert total == pytest.approx(float(want.sum()), abs=1e-3)


def test_a_sentence_that_just_fits_takes_one_pass(tiny: Path) -> None:
    lm = HFCausalLM(tiny, device="cpu")
    words = ["the"] * 63
    assert len(lm.pieces(words)[0]) + 1 == 64  # BOS + 63 pieces: the model's whole context
    np.testing.assert_allclose(lm.token_logprobs([words])[0], direct(tiny, words)[1], atol=1e-4)


NBEST = [
    "THE CAT SAT ON THE MAT AND A DOG RAN",  # list 1: four hypotheses sharing a long start
    "THE CAT SAT ON THE MAT AND A DOG RUN",
    "THE CAT SAT ON THE MAT",  # the shared part itself (nothing after it)
    "THE CAT SAT ON THE MAT AND THE DOG RAN IN THE PARK",
    "A DOG RAN IN THE PARK",  # list 2: one hypothesis
    "HE SAID THAT IT WAS GOOD",  # list 3: two sharing the start
    "HE SAID THAT IT WAS",
]


def test_prefix_cache_gives_the_values_of_one_pass_each(
    tiny: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Hypotheses that share their start (an N-best list) run it once and their remainders on
    its cached keys and values: the same values as without the cache."""
    from rescorer.lms import hf

    sentences = [h.split() for h in NBEST]
    plain = HFCausalLM(tiny, device="cpu", prefix_cache=False).token_logprobs(sentences)
    cached_lm = HFCausalLM(tiny, device="cpu")
    groups: list[list[int]] = []
    original = HFCausalLM._shared

    def spy(self: HFCausalLM, group: list[int], sequences: list) -> list:
        groups.append(list(group))
        return original(self, group, sequences)

    monkeypatch.setattr(HFCausalLM, "_shared", spy)
    cached = cached_lm.token_logprobs(sentences)
    assert sorted(sorted(g) for g in groups) == [[0, 1, 2, 3], [5, 6]]  # the lone one: plain
    for a, b, words in zip(cached, plain, sentences, strict=True):
        np.testing.assert_allclose(a, b, atol=2e-5, rtol=0)
        np.testing.assert_allclose(a, direct(tiny, words)[1], atol=1e-4, rtol=0)
    # a group wider than batch_tokens is scored in parts (each with its own shared start)
    small = HFCausalLM(tiny, device="cpu", batch_tokens=16).token_logprobs(sentences)
    for a, b in zip(small, plain, strict=True):
        np.testing.assert_allclose(a, b, atol=2e-5, rtol=0)
    assert len(groups) > 4  # the first group of 4 went in parts (with the spy still on)
    # groups form whatever the order; a long sentence is windowed, never in a group
    groups.clear()
    mixed = [sentences[0], LONG, sentences[5], sentences[1], sentences[2]]
    got = cached_lm.token_logprobs(mixed)
    assert sorted(sorted(g) for g in groups) == [[0, 3, 4]]
    np.testing.assert_allclose(got[1], cached_lm.token_logprobs([LONG])[0], atol=1e-5)
    # the option reaches the model through a spec's options
    assert load_lm(f"hf:{tiny}", prefix_cache=False).prefix_cache is False
    assert hf.MIN_SHARED_PIECES >= 1


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
