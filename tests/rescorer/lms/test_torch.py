"""TorchLM: checkpoints of lm_models behind the LanguageModel contract, and the CLI around it.

Scores of the prefix-shared, context-grouped, depth-batched scorer are checked against a plain
sentence-by-sentence ``ContextLSTM.score`` of the same checkpoint.
"""

from __future__ import annotations

import json
import logging
import math
import random
import re
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner, Result

from rescorer.cli.main import main
from rescorer.features import add_lm_scores
from rescorer.lm_models.checkpoint import load_checkpoint, save_checkpoint
from rescorer.lm_models.lstm.context import ContextVariable
from rescorer.lm_models.lstm.model import ContextLSTM, LSTMConfig
from rescorer.lms import LOADERS, load_lm
from rescorer.lms.contract import LanguageModel
from rescorer.lms.torch import TorchLM, TorchLMState
from rescorer.nbest import Hypothesis, NBest, NBestList

WORDS = ["the", "a", "cat", "dog", "sat", "ran", "on", "mat", "news", "ball", "goal", "price"]
VOCAB = ["<unk>", "<s>", "</s>", *WORDS]
GENRE = ContextVariable.categorical(
    "genre", ["news", "sport"], [3, 1], embed_dim=3, one_hot_bias=True
)
CONTEXTS: list[dict[str, str] | None] = [{"genre": "news"}, {"genre": "sport"}, None, {}]


# tiny models: one thread; main reconfigures the root logger: restored after each test
pytestmark = pytest.mark.usefixtures("one_torch_thread", "restore_logging")


def make_model(mode: str = "factor", seed: int = 0, **config: object) -> ContextLSTM:
    """A tiny random model; ``config``: further LSTMConfig fields (e.g. history)."""
    kwargs: dict = dict(
        vocab_size=len(VOCAB), embed_dim=6, hidden_dim=8, num_layers=2, mode=mode, layer_norm=True
    )
    kwargs.update(config)
    if mode != "unadapted":
        kwargs.update(context_dim=4, context_vars=(GENRE,), rank=2 if mode == "factor" else 0)
    torch.manual_seed(seed)
    model = ContextLSTM(LSTMConfig(**kwargs))
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():  # random values everywhere, zero-initialised biases included
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.4)
    return model.eval()


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_checkpoint(tmp_path_factory.mktemp("torch_lm") / "factor", make_model(), VOCAB)


@pytest.fixture(scope="module")
def lm(ckpt: Path) -> TorchLM:
    model = load_lm(f"torch:{ckpt}", device="cpu")
    assert isinstance(model, TorchLM)
    return model


def naive_logprobs(
    model: ContextLSTM, words: Sequence[str], context: dict[str, str] | None
) -> np.ndarray:
    """One sentence at a time, straight through ContextLSTM.score (no sharing, no locking)."""
    index = {w: i for i, w in enumerate(VOCAB)}
    ids = [index.get(w, 0) for w in words]
    inputs = torch.tensor([[1, *ids]])
    targets = torch.tensor([[*ids, 2]])
    with torch.no_grad():
        scores = model.score(inputs, targets, torch.tensor([len(ids) + 1]), [context])
    return scores[0].double().numpy()


def nbest_like(
    rng: random.Random, n_utts: int, n_hyps: int, length: int
) -> tuple[list[list[str]], list[dict[str, str] | None]]:
    """Hypotheses of each utterance: a base sentence with 1-3 edits (substitute/insert/delete)."""
    sentences, contexts = [], []
    for _ in range(n_utts):
        base = [rng.choice(WORDS) for _ in range(rng.randint(length // 2, length))]
        context = rng.choice(CONTEXTS)
        for _ in range(n_hyps):
            hyp = list(base)
            for _ in range(rng.randint(1, 3)):
                op, pos = rng.random(), rng.randrange(len(hyp) + 1)
                if op < 0.6 and pos < len(hyp):
                    hyp[pos] = rng.choice([*WORDS, "zebra"])
                elif op < 0.8:
                    hyp.insert(pos, rng.choice(WORDS))
                elif hyp:
                    del hyp[min(pos, len(hyp) - 1)]
            sentences.append(hyp)
            contexts.append(context)
    return sentences, contexts


def distinct_prefixes(sentences: Sequence[Sequence[str]], contexts: Sequence[object]) -> int:
    """Trie nodes (empty prefix included) over sentences grouped by context (None == {})."""
    prefixes = set()
    for words, ctx in zip(sentences, contexts, strict=True):
        key = json.dumps(ctx or {}, sort_keys=True)
        for k in range(len(words) + 1):
            prefixes.add((key, tuple(words[:k])))
    return len(prefixes)


# -- the model --------------------------------------------------------------------------------


def test_registered_without_importing_torch(ckpt: Path) -> None:
    assert "torch" in LOADERS
    code = (
        "import sys, rescorer, rescorer.lms.contract, rescorer.cli.main, rescorer.features\n"
        "import rescorer.contexts\n"
        "assert 'rescorer.lms.contract' in sys.modules\n"
        "print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
    lm = load_lm(f"mine=torch:{ckpt}", case="none", device="cpu")
    assert isinstance(lm, LanguageModel) and isinstance(lm, TorchLM)
    assert lm.name == "mine" and lm.units == "word" and lm.case == "none"


def test_shared_batched_scores_equal_naive(lm: TorchLM) -> None:
    rng = random.Random(1)
    sentences, contexts = nbest_like(rng, n_utts=12, n_hyps=6, length=9)
    sentences += [[], [], ["cat"], ["zebra", "zebra"]]
    contexts += [None, {"genre": "sport"}, {"genre": "news"}, None]
    order = list(range(len(sentences)))
    rng.shuffle(order)  # groups interleaved: results must come back in input order
    sentences = [sentences[i] for i in order]
    contexts = [contexts[i] for i in order]
    got = lm.token_logprobs(sentences, contexts)
    assert len(got) == len(sentences)
    totals = lm.sentence_logprobs(sentences, contexts)
    for words, ctx, lp, total in zip(sentences, contexts, got, totals, strict=True):
        ref = naive_logprobs(lm.model, words, ctx)
        assert lp.dtype == np.float64 and lp.shape == (len(words) + 1,)
        np.testing.assert_allclose(lp, ref, atol=1e-5, rtol=0)
        assert total == pytest.approx(lp.sum(), abs=1e-9)
    # The context matters for this model, so a wrong grouping could not pass the check above.
    news = lm.sentence_logprobs([["the", "cat"]], [{"genre": "news"}])
    sport = lm.sentence_logprobs([["the", "cat"]], [{"genre": "sport"}])
    assert abs(news[0] - sport[0]) > 1e-3


def test_small_forward_batches_give_the_same_scores(ckpt: Path, lm: TorchLM) -> None:
    sentences, contexts = nbest_like(random.Random(2), n_utts=4, n_hyps=5, length=7)
    chunked = TorchLM(ckpt, device="cpu", batch_nodes=2, max_contexts=1)
    for a, b in zip(
        chunked.token_logprobs(sentences, contexts),
        lm.token_logprobs(sentences, contexts),
        strict=True,
    ):
        np.testing.assert_allclose(a, b, atol=1e-6, rtol=0)


@pytest.mark.parametrize(
    ("mode", "classes"),
    [("factor", False), ("concat", False), ("softmax_bias", False), ("softmax_bias", True)],
)
def test_a_context_per_utterance_is_scored_as_a_batched_forest(
    tmp_path: Path, mode: str, classes: bool
) -> None:
    """Every utterance under its own context (a numerical vector, as a previous-utterance
    embedding): small groups are batched together, each node under its own context's weights
    and output bias; the scores equal a sentence-by-sentence run with each record."""
    from dataclasses import replace

    vec = ContextVariable.numerical("prev", dim=3)
    torch.manual_seed(3)
    model = ContextLSTM(
        LSTMConfig(
            vocab_size=len(VOCAB),
            embed_dim=6,
            hidden_dim=8,
            num_layers=2,
            mode=mode,
            context_dim=4,
            context_vars=(vec, GENRE),
            rank=2 if mode == "factor" else 0,
        )
    )
    if classes:  # the class-factored output: its bias per context is a row of the table
        model = ContextLSTM(
            replace(model.config, word_classes=[0, 0, 1] + [2 + i % 3 for i in range(12)])
        )
    gen = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.4)
    path = save_checkpoint(tmp_path / mode, model.eval(), VOCAB)
    rng = random.Random(4)
    sentences, _ = nbest_like(rng, n_utts=9, n_hyps=5, length=8)
    contexts: list[dict | None] = []
    for _ in range(9):
        record = {
            "prev": [rng.uniform(-2, 2) for _ in range(3)],
            "genre": rng.choice(["news", "sport"]),
        }
        contexts += [record] * 5
    contexts[-5:] = [None] * 5  # an utterance without context: the expected embedding
    # batch_nodes=20: a group of 5 sentences is small (a forest), except when max_contexts=1
    for max_contexts in (4, 256, 1):
        lm = TorchLM(path, device="cpu", batch_nodes=20, max_contexts=max_contexts)
        got = lm.token_logprobs(sentences, contexts)
        for words, ctx, lp in zip(sentences, contexts, got, strict=True):
            np.testing.assert_allclose(lp, naive_logprobs(lm.model, words, ctx), atol=1e-5, rtol=0)
        assert len(lm._forests({(i,): [i] for i in range(9)})) == -(-9 // max_contexts)  # type: ignore[arg-type]
    # the contexts differ enough to matter: a forest mixing them up could not pass
    first = lm.sentence_logprobs([sentences[0]], [contexts[0]])
    other = lm.sentence_logprobs([sentences[0]], [contexts[5]])
    assert abs(first[0] - other[0]) > 1e-3


PREVIOUS = ContextVariable.text("previous", "hash:8", 8, [0.05 * i for i in range(8)])


def text_checkpoint(tmp_path: Path, mode: str = "factor") -> Path:
    """A model whose context is the previous utterances' text (hash-embedded), random weights."""
    torch.manual_seed(5)
    model = ContextLSTM(
        LSTMConfig(
            vocab_size=len(VOCAB),
            embed_dim=6,
            hidden_dim=8,
            mode=mode,
            context_dim=4,
            rank=2 if mode == "factor" else 0,
            context_vars=(PREVIOUS,),
        )
    )
    gen = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.4)
    return save_checkpoint(tmp_path / f"text_{mode}", model.eval(), VOCAB)


def test_a_previous_text_per_utterance_is_one_adaptation_with_shared_prefixes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rescorer.lm_models.lstm import context as context_module

    monkeypatch.setattr(context_module, "_TEXT_CACHES", {})
    path = text_checkpoint(tmp_path)
    config = json.loads((path / "config.json").read_text())["config"]
    assert config["context_vars"][0]["encoder"] == "hash:8"  # data, not a pickled object
    rng = random.Random(8)
    sentences, _ = nbest_like(rng, n_utts=8, n_hyps=5, length=8)
    texts = [" ".join(rng.choice(WORDS) for _ in range(6)) for _ in range(6)]
    records: list[dict | None] = [{"previous": t} for t in texts] + [{"previous": ""}, None]
    contexts = [r for r in records for _ in range(5)]  # one record per utterance's hypotheses
    lm = TorchLM(path, device="cpu", batch_nodes=20)
    adapted: list[int] = []
    adapt = lm.model.adapt
    monkeypatch.setattr(
        lm.model, "adapt", lambda c, *a, **k: adapted.append(len(c)) or adapt(c, *a, **k)
    )
    embedded: list[str] = []
    cache = context_module.text_encoder("hash:8")
    embed = cache.embedder.embed
    monkeypatch.setattr(cache.embedder, "embed", lambda t: embedded.extend(t) or embed(t))
    got = lm.token_logprobs(sentences, contexts)
    # one adaptation per utterance (the last two share the expected context), each text
    # embedded once, and the hypotheses of an utterance share their prefixes
    assert sum(adapted) == 7 and sorted(embedded) == sorted(texts)
    keys = [lm.context_key(c) for c in contexts]
    assert lm.stats.computed_steps == distinct_prefixes(sentences, [dict(k) for k in keys])
    for words, ctx, lp in zip(sentences, contexts, got, strict=True):
        np.testing.assert_allclose(lp, naive_logprobs(lm.model, words, ctx), atol=1e-5, rtol=0)
    # an empty previous text is the expected context; a real one changes the scores
    s = [sentences[0]]
    empty = lm.sentence_logprobs(s, [{"previous": ""}])
    assert empty == pytest.approx(lm.sentence_logprobs(s, [None]), abs=0)
    assert empty == pytest.approx(lm.sentence_logprobs(s, [{"previous": "  "}]), abs=0)
    assert abs(lm.sentence_logprobs(s, [{"previous": texts[0]}])[0] - empty[0]) > 1e-3


def test_cli_context_build_then_score_and_ppl_with_a_previous_text_model(tmp_path: Path) -> None:
    from rescorer.contexts import read_contexts
    from tests.conftest import write_espnet_set

    path = text_checkpoint(tmp_path)
    rng = random.Random(2)
    utts = [
        (f"7-70-{i:04d}", [(" ".join(rng.choice(WORDS) for _ in range(4)), -1.0, -1.0, -1.0)] * 3)
        for i in range(60)
    ]
    nbest = write_espnet_set(tmp_path / "dev", utts, {u: h[0][0] for u, h in utts})
    ctx = tmp_path / "ctx.jsonl"
    assert (
        run(["context", "build", "--nbest", nbest, "--previous", "2", "--out", ctx]).exit_code == 0
    )
    scored = tmp_path / "scored.jsonl"
    result = run(
        ["score", "--nbest", nbest, "--lm", f"nlm=torch:{path}", "--context", ctx,
         "--device", "cpu", "--out", scored]
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    records = read_contexts(ctx)
    assert records["7-70-0002"]["previous"] == f"{utts[0][1][0][0]}\n{utts[1][1][0][0]}"
    lm = TorchLM(path, device="cpu")
    rows = [json.loads(line) for line in scored.read_text().splitlines()]
    for row in rows:
        want = lm.sentence_logprobs([row["hyps"][0]["text"].split()], [records[row["utt"]]])
        assert row["hyps"][0]["scores"]["nlm"] == pytest.approx(want[0], abs=1e-5)
    # ppl: a text field of a value per sentence is summed up as present / missing
    ref = tmp_path / "ref.txt"
    ref.write_text("".join(f"{u} {h[0][0]}\n" for u, h in utts), encoding="utf-8")
    result = run(
        ["ppl", "--lm", f"torch:{path}", "--text", ref, "--text-format", "kaldi", "--context",
         ctx, "--device", "cpu"]
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "  previous=<any of 59 values>: ppl" in result.output  # 59 distinct texts
    assert "  previous=<missing>: ppl " in result.output and "1 sentences" in result.output
    assert "  recording=7-70: ppl " in result.output  # a field of few values: per value
    assert sum(line.startswith("  previous=") for line in result.output.splitlines()) == 2


def test_empty_sentence_scores_just_the_end(lm: TorchLM) -> None:
    (lp,) = lm.token_logprobs([[]], [{"genre": "news"}])
    assert lp.shape == (1,)
    np.testing.assert_allclose(lp, naive_logprobs(lm.model, [], {"genre": "news"}), atol=1e-6)
    assert lm.token_logprobs([]) == [] and lm.sentence_logprobs([]).shape == (0,)


def test_oov_words_are_flagged_and_scored_as_unk(lm: TorchLM) -> None:
    flags = lm.oov_flags([["the", "zebra", "cat", "<unk>"]])
    assert flags[0].tolist() == [False, True, False, False]
    a, b = lm.token_logprobs([["the", "zebra", "cat"], ["the", "<unk>", "cat"]])
    np.testing.assert_allclose(a, b, atol=0, rtol=0)
    np.testing.assert_allclose(a, naive_logprobs(lm.model, ["the", "<unk>", "cat"], None))


def test_prefix_sharing_counts(ckpt: Path) -> None:
    lm = TorchLM(ckpt, device="cpu")
    sentences, contexts = nbest_like(random.Random(3), n_utts=6, n_hyps=30, length=16)
    lm.token_logprobs(sentences, contexts)
    stats = lm.stats
    naive = sum(len(s) + 1 for s in sentences)
    assert stats.sentences == len(sentences) and stats.naive_steps == naive
    assert stats.computed_steps == distinct_prefixes(sentences, contexts)
    assert stats.computed_steps < 0.7 * naive  # 30-best lists share many of their prefixes
    assert 0.3 < stats.saved_fraction < 1.0 and "saved by prefix sharing" in stats.describe()
    lm.reset_stats()
    assert lm.stats.computed_steps == lm.stats.naive_steps == 0


def test_streaming_equals_whole_sentences(lm: TorchLM) -> None:
    sentences = [["the", "cat", "sat"], ["a", "zebra"], [], ["the", "cat", "ran", "on", "mat"]]
    contexts = [{"genre": "news"}, None, {"genre": "sport"}, {"genre": "sport"}]
    whole = lm.token_logprobs(sentences, contexts)
    states = [lm.start(c) for c in contexts]
    assert all(isinstance(s, TorchLMState) for s in states)
    got: list[list[float]] = [[] for _ in sentences]
    live = list(range(len(sentences)))
    step = 0
    while live:  # advance every unfinished sentence together, mixed contexts in one call
        toks = [sentences[i][step] if step < len(sentences[i]) else "</s>" for i in live]
        logps, new = lm.advance([states[i] for i in live], toks)
        for i, lp, st in zip(live, logps, new, strict=True):
            got[i].append(float(lp))
            states[i] = st
        live = [i for i in live if step < len(sentences[i])]
        step += 1
    for g, w in zip(got, whole, strict=True):
        np.testing.assert_allclose(g, w, atol=1e-5, rtol=0)
    with pytest.raises(ValueError, match="states but"):
        lm.advance([lm.start()], [])


def test_unknown_fields_ignored_unknown_values_missing(
    lm: TorchLM, caplog: pytest.LogCaptureFixture
) -> None:
    words = [["the", "dog", "ran"]]
    base = lm.sentence_logprobs(words, [None])
    with caplog.at_level(logging.INFO, logger="rescorer.lms.torch"):
        odd_value = lm.sentence_logprobs(words, [{"genre": "weather"}])
        odd_field = lm.sentence_logprobs(words, [{"genre": "news", "speaker": "s1"}])
    assert odd_value == pytest.approx(base, abs=1e-9)
    assert odd_field == pytest.approx(lm.sentence_logprobs(words, [{"genre": "news"}]), abs=1e-9)
    assert "'weather' was not seen in training" in caplog.text
    assert "'speaker' is not one of the model's" in caplog.text
    with pytest.raises(ValueError, match="2 contexts for 1 sentences"):
        lm.token_logprobs(words, [None, None])


def test_case_auto_maps_upper_case_words(ckpt: Path, lm: TorchLM) -> None:
    upper = TorchLM(ckpt, device="cpu")
    got = upper.token_logprobs([["THE", "CAT", "SAT"]], [{"genre": "news"}])
    assert upper.case == "lower"
    assert upper.oov_flags([["THE", "ZEBRA"]])[0].tolist() == [False, True]
    want = lm.token_logprobs([["the", "cat", "sat"]], [{"genre": "news"}])
    np.testing.assert_allclose(got[0], want[0], atol=0, rtol=0)


def test_unadapted_checkpoint_ignores_contexts(tmp_path: Path) -> None:
    path = save_checkpoint(tmp_path / "plain", make_model("unadapted", seed=4), VOCAB)
    lm = TorchLM(path, device="cpu")
    words = [["a", "dog", "sat"], ["a", "dog"]]
    a = lm.token_logprobs(words, [{"genre": "news"}, None])
    model, _, _ = load_checkpoint(path)
    for w, lp in zip(words, a, strict=True):
        np.testing.assert_allclose(lp, naive_logprobs(model, w, None), atol=1e-5, rtol=0)
    assert lm.stats.computed_steps == 4  # root, a, a dog, a dog sat: one group for both


def test_add_lm_scores_with_contexts(lm: TorchLM) -> None:
    hyps = {
        "u1": [("the cat sat", -1.0), ("the cat sat on", -2.0), ("the zebra", -3.0)],
        "u2": [("a ball goal", -1.0), ("a ball", -1.5)],
    }
    nbest = NBest(
        [
            NBestList(u, tuple(Hypothesis(tuple(t.split()), {"am": s}) for t, s in hs))
            for u, hs in hyps.items()
        ]
    )
    contexts = {"u1": {"genre": "news"}, "u2": {"genre": "sport"}}
    scored, report = add_lm_scores(nbest, lm, "nlm", contexts=contexts, progress=False)
    assert report.sentences == 5 and report.words == 14 and report.oov_words == 1
    for utt, hs in hyps.items():
        want = lm.sentence_logprobs([t.split() for t, _ in hs], [contexts[utt]] * len(hs))
        got = [h.scores["nlm"] for h in scored[utt]]
        np.testing.assert_allclose(got, want, atol=1e-9)
    assert [h.scores["nlm_oov"] for h in scored["u1"]] == [0.0, 0.0, 1.0]


# -- the command line -------------------------------------------------------------------------


def run(args: Sequence[object]) -> Result:
    return CliRunner().invoke(main, ["-q", *map(str, args)], catch_exceptions=False)


NBEST_UTTS = {
    "u1": ["the cat sat on the mat", "the cat sat on a mat", "a cat sat on the mat"],
    "u2": ["the ball goal", "the ball", "a price goal"],
    "u3": ["news", "the news", ""],
}
REFS = {"u1": "the cat sat on the mat", "u2": "the ball goal", "u3": "the news"}
CONTEXT_TSV = "utt\tgenre\tspeaker\nu1\tnews\ts1\nu2\tsport\ts2\nu3\t\ts1\n"


@pytest.fixture()
def cli_set(tmp_path: Path) -> dict[str, Path]:
    rows = []
    for utt, texts in NBEST_UTTS.items():
        hyps = [{"text": t, "scores": {"am": -float(k)}} for k, t in enumerate(texts)]
        rows.append(json.dumps({"utt": utt, "hyps": hyps}))
    nbest = tmp_path / "set.jsonl"
    nbest.write_text("\n".join(rows) + "\n", encoding="utf-8")
    ref = tmp_path / "ref.txt"
    ref.write_text("".join(f"{u} {t}\n" for u, t in REFS.items()), encoding="utf-8")
    ctx = tmp_path / "ctx.tsv"
    ctx.write_text(CONTEXT_TSV, encoding="utf-8")
    bad = tmp_path / "bad.jsonl"  # u3 missing, u9 extra
    bad.write_text('{"utt": "u1", "genre": "news"}\n{"utt": "u2"}\n{"utt": "u9"}\n')
    return {"nbest": nbest, "ref": ref, "ctx": ctx, "bad": bad}


def expected_contexts() -> dict[str, dict[str, str]]:
    return {
        "u1": {"genre": "news", "speaker": "s1"},
        "u2": {"genre": "sport", "speaker": "s2"},
        "u3": {"speaker": "s1"},
    }


def test_cli_ppl_with_context(tmp_path: Path, ckpt: Path, lm: TorchLM, cli_set: dict) -> None:
    result = run(
        [
            "ppl",
            "--lm",
            f"torch:{ckpt}",
            "--text",
            cli_set["ref"],
            "--text-format",
            "kaldi",
            "--context",
            cli_set["ctx"],
            "--device",
            "cpu",
        ]
    )
    assert result.exit_code == 0, result.output
    ctx = expected_contexts()
    total = sum(lm.sentence_logprobs([REFS[u].split()], [ctx[u]])[0] for u in ("u1", "u2", "u3"))
    assert f"logprob (ln) {total:.2f} over 14 tokens" in result.output
    # Per context value: u1 (news) has 6 words + </s>; speaker s1 covers u1 and u3.
    news = lm.sentence_logprobs([REFS["u1"].split()], [ctx["u1"]])[0]
    assert f"  genre=news: ppl {math.exp(-news / 7):.2f} over 7 tokens, 1 sentences" in (
        result.output
    )
    assert "  speaker=s1: " in result.output and "over 10 tokens, 2 sentences" in result.output
    no_ctx = run(
        ["ppl", "--lm", f"torch:{ckpt}", "--text", cli_set["ref"], "--text-format", "kaldi"]
    )
    assert no_ctx.exit_code == 0 and no_ctx.output != result.output


def test_cli_ppl_context_errors(ckpt: Path, cli_set: dict) -> None:
    plain = run(
        ["ppl", "--lm", f"torch:{ckpt}", "--text", cli_set["ref"], "--context", cli_set["ctx"]]
    )
    assert plain.exit_code == 2 and "--context needs utterance ids" in plain.output
    bad = run(
        [
            "ppl",
            "--lm",
            f"torch:{ckpt}",
            "--text",
            cli_set["ref"],
            "--text-format",
            "kaldi",
            "--context",
            cli_set["bad"],
        ]
    )
    assert bad.exit_code == 2 and "Traceback" not in bad.output
    assert "missing id(s): u3" in bad.output and "extra id(s): u9" in bad.output


def test_cli_tune_and_rescore_with_torch_lm_and_contexts(
    tmp_path: Path, ckpt: Path, lm: TorchLM, cli_set: dict
) -> None:
    weights = tmp_path / "w.json"
    result = run(
        [
            "tune",
            "--nbest",
            cli_set["nbest"],
            "--ref",
            cli_set["ref"],
            "--lm",
            f"nlm=torch:{ckpt}",
            "--context",
            cli_set["ctx"],
            "--device",
            "cpu",
            "--restarts",
            "1",
            "--out",
            weights,
        ]
    )
    assert result.exit_code == 0, result.output
    assert set(json.loads(weights.read_text())["features"]) == {"am", "nlm", "nlm_oov"}
    out = tmp_path / "out"
    result = run(
        [
            "rescore",
            "--nbest",
            cli_set["nbest"],
            "--lm",
            f"nlm=torch:{ckpt}",
            "--context",
            cli_set["ctx"],
            "--weights",
            weights,
            "--out",
            out,
        ]
    )
    assert result.exit_code == 0, result.output
    ctx = expected_contexts()
    rows = [json.loads(line) for line in (out / "nbest.jsonl").read_text().splitlines()]
    for row in rows:
        for hyp in row["hyps"]:
            want = lm.sentence_logprobs([hyp["text"].split()], [ctx[row["utt"]]])[0]
            assert hyp["scores"]["nlm"] == pytest.approx(want, abs=1e-5)
    # Ids of the context file must match the N-best ids exactly.
    result = run(
        [
            "rescore",
            "--nbest",
            cli_set["nbest"],
            "--lm",
            f"nlm=torch:{ckpt}",
            "--context",
            cli_set["bad"],
            "--weights",
            weights,
            "--out",
            tmp_path / "out2",
        ]
    )
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "context ids do not match" in result.output and "u9" in result.output
    assert not (tmp_path / "out2").exists()


def write_corpus(path: Path, n_docs: int = 12, seed: int = 0) -> Path:
    rng = random.Random(seed)
    topics = {"sport": ["ball", "goal"], "news": ["news", "price"]}
    with open(path, "w", encoding="utf-8") as f:
        for i in range(n_docs):
            topic = "sport" if i % 2 else "news"
            text = [
                " ".join(rng.choice(topics[topic] + WORDS[:4]) for _ in range(rng.randint(2, 5)))
                for _ in range(3)
            ]
            f.write(json.dumps({"id": f"d{i}", "text": text, "fields": {"genre": topic}}) + "\n")
    return path


def test_cli_train_writes_a_usable_checkpoint(tmp_path: Path) -> None:
    corpus = write_corpus(tmp_path / "corpus.jsonl")
    config = {
        "data": {
            "corpus": "jsonl",
            "path": corpus.name,
            "context_fields": ["genre"],
            "stratify_by": "genre",
            "split": [0.7, 0.3, 0.0],
            "vocab_size": 50,
        },
        "model": {
            "mode": "factor",
            "embed_dim": 8,
            "hidden_dim": 8,
            "context_dim": 2,
            "rank": 1,
            "context_embed_dim": 2,
            "dropout": 0.0,
        },
        "train": {"epochs": 1, "batch_tokens": 60, "device": "cpu"},
    }
    cfg = tmp_path / "cfg.json"
    cfg.write_text(json.dumps(config), encoding="utf-8")
    out = tmp_path / "model"
    args = ["train", str(cfg), "--out", str(out), "--data-dir", str(tmp_path), "--no-resume"]
    result = CliRunner().invoke(main, args, catch_exceptions=False)  # default verbosity
    assert result.exit_code == 0, result.output
    assert "best dev perplexity" in result.output and "at epoch 1" in result.output
    # a line per epoch at the default verbosity, with its dev perplexity; none with --quiet
    assert re.search(r"LSTM epoch 1: train loss [\d.]+, dev [\d.]+", result.output), result.output
    quiet = run(["train", cfg, "--out", tmp_path / "q", "--data-dir", tmp_path])
    assert quiet.exit_code == 0 and "LSTM epoch 1" not in quiet.output
    lm = TorchLM(out / "best", device="cpu")
    (lp,) = lm.token_logprobs([["the", "ball"]], [{"genre": "sport"}])
    assert lp.shape == (3,) and np.all(lp < 0) and math.isfinite(float(lp.sum()))

    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"data": {"corpus": "nope", "path": "x"}}), encoding="utf-8")
    result = run(["train", bad, "--out", tmp_path / "m2", "--data-dir", tmp_path])
    assert result.exit_code == 2 and "corpus must be one of" in result.output
    assert "Traceback" not in result.output


def test_bad_options_are_value_errors(ckpt: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="bad device 'foo'"):
        TorchLM(ckpt, device="foo")
    with pytest.raises(ValueError, match="case must be one of"):
        TorchLM(ckpt, case="title")
    with pytest.raises(ValueError, match="checkpoint folder not found"):
        TorchLM(tmp_path / "nope")
