"""Next-word prediction and completion (rescorer.predict) and the `predict` command."""

from __future__ import annotations

import json
import math
import random
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner, Result

from rescorer.cli.main import main
from rescorer.core.errors import InputError
from rescorer.lm_models.checkpoint import save_checkpoint
from rescorer.lm_models.lstm.context import ContextVariable
from rescorer.lm_models.lstm.model import ContextLSTM, LSTMConfig
from rescorer.lms import load_lm
from rescorer.lms.kenlm import KenLM
from rescorer.predict import (
    InterpolatedModel,
    KenLMNextWord,
    NativeNextWord,
    Predictor,
    PrefixIndex,
    ScoringNextWord,
    TorchNextWord,
    TypingConsole,
    build_predictor,
    em_mixture_weights,
    next_word_model,
    predict_stream,
    read_arpa_unigrams,
    read_requests,
    read_word_list,
    shared_vocabulary,
    unk_share,
    vocabulary_case,
)

LN10 = math.log(10.0)


class ArrayModel:
    """A NextWordModel with a fixed random distribution per history length."""

    name = "array"

    def __init__(self, words: Sequence[str], seed: int = 0, ties: bool = False) -> None:
        self.words = tuple(words)
        rng = np.random.default_rng(seed)
        self.tables = []
        for _ in range(4):
            scores = rng.normal(size=len(words))
            if ties:
                scores = np.round(scores, 0)  # many equal values
            self.tables.append(scores - np.log(np.exp(scores).sum()))

    def vocabulary(self) -> Sequence[str]:
        return self.words

    def start(self, context: object = None) -> int:
        return 0

    def step(self, state: int, word: str) -> int:
        return min(state + 1, 3)

    def next_logprobs(self, state: int) -> np.ndarray:
        return self.tables[state]


def random_words(rng: random.Random, n: int) -> list[str]:
    words: set[str] = set()
    while len(words) < n:
        words.add("".join(rng.choice("abcde") for _ in range(rng.randint(1, 5))))
    return sorted(words, key=lambda _: rng.random())


# -- prefix index and completion ------------------------------------------------------------------


def test_prefix_index_spans() -> None:
    words = ["the", "then", "they", "a", "them", "th", "tea", "\U0010ffffz", "\U0010ffff"]
    index = PrefixIndex(words)
    got = lambda p: sorted(words[i] for i in index.candidates(p))  # noqa: E731
    assert got("th") == ["th", "the", "them", "then", "they"]
    assert got("the") == ["the", "them", "then", "they"]
    assert got("then") == ["then"]
    assert got("thx") == [] and got("z") == []
    assert got("") == sorted(words)
    assert got("\U0010ffff") == ["\U0010ffff", "\U0010ffffz"]  # no character above it
    for i, w in enumerate(words):
        assert index.sorted_words[index.position[i]] == w


@pytest.mark.parametrize("ties", [False, True])
def test_completion_only_prefix_words_in_probability_order(ties: bool) -> None:
    rng = random.Random(1)
    words = random_words(rng, 300)
    predictor = Predictor(ArrayModel(words, seed=2, ties=ties))
    session = predictor.session()
    session.commit("abc")
    lp = dict(zip(words, predictor.model.next_logprobs(1), strict=True))
    for prefix in ["", "a", "ab", "abc", "e", "dd", "eeeee", "q"]:
        for k in (1, 3, 5, 50):
            got = session.suggest(prefix, k)
            matching = [w for w in words if w.startswith(prefix)]
            # brute force: every word with the prefix, best first, ties alphabetical
            expected = sorted(matching, key=lambda w: (-lp[w], w))[:k]
            assert [s.word for s in got] == expected
            assert all(s.word.startswith(prefix) for s in got)
            probs = [s.logprob for s in got]
            assert probs == sorted(probs, reverse=True)
            assert [s.logprob for s in got] == pytest.approx([lp[w] for w in expected])


def test_rank_matches_suggestions() -> None:
    words = random_words(random.Random(3), 60)
    session = Predictor(ArrayModel(words, ties=True)).session()
    order = [s.word for s in session.suggest("", len(words))]
    assert sorted(order) == sorted(words)
    for i, w in enumerate(order, start=1):
        assert session.rank(w) == i
    assert session.rank("not-a-word") is None


def test_vocabulary_case_and_mapping() -> None:
    assert vocabulary_case(["the", "i'm", "3"]) == "lower"
    assert vocabulary_case(["THE", "I'M"]) == "upper"
    assert vocabulary_case(["The", "the"]) == "none"
    assert vocabulary_case(["3", "-"]) == "none"
    predictor = Predictor(ArrayModel(["the", "then", "a"]))
    assert predictor.case == "lower"
    assert {s.word for s in predictor.session().suggest("TH", 5)} == {"the", "then"}
    assert predictor.word_id("Then") == 1
    assert Predictor(ArrayModel(["the", "then"]), case="none").word_id("Then") is None


# -- models ---------------------------------------------------------------------------------------


def test_kenlm_next_logprobs_by_hand_and_cached(tiny_arpa: Path) -> None:
    lm = KenLM(tiny_arpa)
    model = KenLMNextWord(lm, ["a", "b", "zebra"])
    s0 = model.start()
    # after <s>: a 10^-0.30103; b bow(<s>) + p(b); zebra: bow(<s>) + p(<unk>)
    assert model.next_logprobs(s0) == pytest.approx(
        np.array([-0.30103, -0.30103 - 0.52288, -0.30103 - 1.0]) * LN10
    )
    sa = model.step(s0, "a")
    assert model.next_logprobs(sa) == pytest.approx(
        np.array([-0.1 - 0.52288, -0.39794, -1.1]) * LN10
    )
    # the state after "b a" is the state after "a": one computation
    sba = model.step(model.step(s0, "b"), "a")
    before = model.misses
    model.next_logprobs(sba)
    assert model.misses == before and model.hits >= 1
    # streaming scores agree with whole-sentence scores
    full = lm.token_logprobs([["a", "b"]])[0]
    assert model.next_logprobs(s0)[0] + model.next_logprobs(sa)[1] == pytest.approx(full[:2].sum())


def test_unknown_words_share_the_unk_mass(tiny_arpa: Path) -> None:
    np.testing.assert_allclose(
        unk_share([False, True, True, False, True]),
        [0, -math.log(3), -math.log(3), 0, -math.log(3)],
    )
    assert unk_share([False, True]).tolist() == [0.0, 0.0]  # one unknown word keeps it all
    lm = KenLM(tiny_arpa)
    model = KenLMNextWord(lm, ["a", "zebra", "b", "yak", "gnu"])
    # after <s>: a 10^-0.30103; b bow(<s>) + p(b); the three unknown words bow(<s>) + p(<unk>)
    # shared three ways, so together they hold p(<unk>) once
    unk = (-0.30103 - 1.0) * LN10 - math.log(3)
    want = np.array([-0.30103 * LN10, unk, (-0.30103 - 0.52288) * LN10, unk, unk])
    s0 = model.start()
    np.testing.assert_allclose(model.next_logprobs(s0), want, atol=1e-6)
    np.testing.assert_allclose(
        model.next_logprobs_subset(s0, np.array([3, 2])), want[[3, 2]], atol=1e-6
    )
    # the generic adapter agrees (it finds the unknown words through oov_flags)
    generic = ScoringNextWord(KenLM(tiny_arpa), ["a", "zebra", "b", "yak", "gnu"])
    np.testing.assert_allclose(generic.next_logprobs(generic.start()), want, atol=1e-6)


def test_completion_scores_only_the_prefix_candidates(tiny_arpa: Path) -> None:
    words = ["a", "b", "ab", "ba", "bb"]
    lm = KenLM(tiny_arpa)
    model = KenLMNextWord(lm, words)
    calls: list[int] = []
    after = lm.logprobs_after
    lm.logprobs_after = lambda s, u: calls.append(len(u)) or after(s, u)  # type: ignore[method-assign]
    session = Predictor(model).session()
    session.commit("a")
    got = session.suggest("b", 5)
    assert calls == [3]  # b, ba, bb: not the whole vocabulary
    full = Predictor(KenLMNextWord(KenLM(tiny_arpa), words)).session()
    full.commit("a")
    full.sorted_logprobs()
    assert got == full.suggest("b", 5)
    # linear mixtures score subsets too; the values are the mixture's
    mix = Predictor(InterpolatedModel([model, KenLMNextWord(KenLM(tiny_arpa), words)], [1, 3]))
    ms = mix.session()
    ms.commit("a")
    assert [(s.word, round(s.logprob, 9)) for s in ms.suggest("b", 5)] == [
        (s.word, round(s.logprob, 9)) for s in got
    ]


def test_arpa_vocabulary_and_word_lists(tiny_arpa: Path, tmp_path: Path) -> None:
    assert read_arpa_unigrams(tiny_arpa) == ["<unk>", "<s>", "</s>", "a", "b"]
    binary = tmp_path / "x.bin"
    binary.write_bytes(b"mmap lm http://kheafield.com/code format version 5\n\0\0")
    assert read_arpa_unigrams(binary) is None
    assert shared_vocabulary([KenLM(tiny_arpa)]) == ["a", "b"]
    wl = tmp_path / "words.txt"
    wl.write_text("<unk>\nthe 12\na\n\nthe\n", encoding="utf-8")
    assert read_word_list(wl) == ["the", "a"]
    assert shared_vocabulary([], ["b", "<s>", "a", "b"]) == ["b", "a"]
    with pytest.raises(ValueError, match="no vocabulary"):
        shared_vocabulary([object()])


def test_interpolation_by_hand() -> None:
    class Fixed:
        def __init__(self, name: str, probs: Sequence[float]) -> None:
            self.name, self.probs = name, np.log(probs)

        def vocabulary(self) -> Sequence[str]:
            return ("x", "y", "z")

        def start(self, context: object = None) -> None:
            return None

        def step(self, state: None, word: str) -> None:
            return None

        def next_logprobs(self, state: None) -> np.ndarray:
            return self.probs

    p1, p2 = [0.5, 0.3, 0.2], [0.1, 0.1, 0.6]
    lin = InterpolatedModel([Fixed("a", p1), Fixed("b", p2)], [3.0, 1.0], "linear")
    assert np.exp(lin.next_logprobs(lin.start())) == pytest.approx([0.4, 0.25, 0.3])
    log = InterpolatedModel([Fixed("a", p1), Fixed("b", p2)], [0.5, 0.5], "loglinear")
    geo = np.sqrt(np.array(p1) * np.array(p2))
    assert np.exp(log.next_logprobs(log.start())) == pytest.approx(geo / geo.sum())
    with pytest.raises(ValueError, match="positive"):
        InterpolatedModel([Fixed("a", p1)], [0.0])
    with pytest.raises(ValueError, match="mix mode"):
        InterpolatedModel([Fixed("a", p1)], None, "max")


def test_em_mixture_weights_by_hand() -> None:
    # tokens: p1 = (0.8, 0.2), p2 = (0.2, 0.4); d/dw sum ln(w p1 + (1-w) p2) = 0 at w = 5/6
    lp = np.log([[0.8, 0.2], [0.2, 0.4]])
    w = em_mixture_weights(lp, iterations=2000, tol=1e-12)
    assert w == pytest.approx([5 / 6, 1 / 6], abs=1e-6)


class Opaque:
    """A LanguageModel that hides what it wraps: the generic adapter must cope."""

    units = "word"

    def __init__(self, lm: KenLM) -> None:
        self.lm, self.name = lm, "opaque"

    def token_logprobs(self, sentences, contexts=None):  # type: ignore[no-untyped-def]
        return self.lm.token_logprobs(sentences, contexts)

    def sentence_logprobs(self, sentences, contexts=None):  # type: ignore[no-untyped-def]
        return self.lm.sentence_logprobs(sentences, contexts)

    def oov_flags(self, sentences):  # type: ignore[no-untyped-def]
        return self.lm.oov_flags(sentences)

    def start(self, context=None):  # type: ignore[no-untyped-def]
        return self.lm.start(context)

    def advance(self, states, tokens):  # type: ignore[no-untyped-def]
        return self.lm.advance(states, tokens)


def test_generic_adapter_equals_kenlm_adapter(tiny_arpa: Path) -> None:
    lm = KenLM(tiny_arpa)
    generic = ScoringNextWord(Opaque(lm), ["a", "b", "c"], chunk=2)
    assert isinstance(next_word_model(Opaque(lm), ["a"]), ScoringNextWord)
    direct = next_word_model(lm, ["a", "b", "c"])
    assert isinstance(direct, KenLMNextWord)
    g, d = generic.start(), direct.start()
    for word in ["a", "b", "b"]:
        assert generic.next_logprobs(g) == pytest.approx(direct.next_logprobs(d))
        g, d = generic.step(g, word), direct.step(d, word)


class NativeKen(Opaque):
    """A LanguageModel with the optional extension: vocabulary() and next_logprobs(state)."""

    def vocabulary(self) -> Sequence[str]:
        return ["<unk>", "b", "a"]

    def next_logprobs(self, state: object) -> np.ndarray:
        return self.lm.logprobs_after(state, ["<unk>", "b", "a"])


def test_native_extension_is_used(tiny_arpa: Path) -> None:
    lm = KenLM(tiny_arpa)
    words = ["a", "b", "zebra"]
    native = next_word_model(NativeKen(lm), words)
    assert isinstance(native, NativeNextWord)
    direct = next_word_model(lm, words)
    n, d = native.start(), direct.start()
    for word in ["a", "b"]:  # zebra: the native model's <unk>, as KenLM scores it
        assert native.next_logprobs(n) == pytest.approx(direct.next_logprobs(d))
        n, d = native.step(n, word), direct.step(d, word)


# -- torch checkpoints ----------------------------------------------------------------------------

TORCH_WORDS = ["the", "a", "cat", "dog", "sat", "ran", "on", "mat"]
TORCH_VOCAB = ["<unk>", "<s>", "</s>", *TORCH_WORDS]


pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tiny models: one thread


@pytest.fixture(scope="module")
def torch_ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    genre = ContextVariable.categorical("genre", ["news", "sport"], [3, 1], embed_dim=3)
    cfg = LSTMConfig(
        vocab_size=len(TORCH_VOCAB), embed_dim=6, hidden_dim=8, num_layers=1, mode="factor",
        context_dim=4, context_vars=(genre,), rank=2,
    )  # fmt: skip
    torch.manual_seed(0)
    model = ContextLSTM(cfg)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape) * 0.5)
    return save_checkpoint(tmp_path_factory.mktemp("predict") / "lstm", model.eval(), TORCH_VOCAB)


@pytest.mark.parametrize("context", [None, {"genre": "sport"}])
def test_torch_distribution_matches_sentence_scores(torch_ckpt: Path, context: dict | None) -> None:
    lm = load_lm(f"torch:{torch_ckpt}", device="cpu")
    words = [*TORCH_WORDS, "zebra"]  # zebra: the model's <unk>
    predictor = build_predictor([lm], words=words)
    assert isinstance(predictor.model, TorchNextWord)
    session = predictor.session(context)
    history = ["the", "cat", "sat"]
    for i in range(len(history) + 1):
        lp = predictor.model.next_logprobs(session._state)
        for j, w in enumerate(words):
            sent = [*history[:i], w]
            want = lm.token_logprobs([sent], [context])[0][i]
            assert lp[j] == pytest.approx(want, abs=1e-5), (sent, context)
        # two unknown words share p(<unk>): each gets half of it
        pair = build_predictor([lm], words=[*words, "yak"])
        pair_session = pair.session(context)
        for w in history[:i]:
            pair_session.commit(w)
        plp = pair.model.next_logprobs(pair_session._state)
        assert plp[-1] == plp[-2] == pytest.approx(lp[-1] - math.log(2), abs=1e-9)
        if i < len(history):
            session.commit(history[i])
    assert predictor.predict(history, "", 3, context) == session.suggest("", 3)


def test_interpolated_kenlm_and_torch(torch_ckpt: Path, tiny_arpa: Path) -> None:
    torch_lm = load_lm(f"torch:{torch_ckpt}", device="cpu")
    ken = load_lm(f"kenlm:{tiny_arpa}")
    predictor = build_predictor([ken, torch_lm], [0.25, 0.75], "linear")
    assert list(predictor.words) == ["a", "b", *[w for w in TORCH_WORDS if w != "a"]]
    got = predictor.model.next_logprobs(predictor.model.start())
    k_alone = build_predictor([ken], words=predictor.words).session().sorted_logprobs()
    t_alone = build_predictor([torch_lm], words=predictor.words).session().sorted_logprobs()
    order = predictor.index.order
    mixed = np.log(0.25 * np.exp(k_alone) + 0.75 * np.exp(t_alone))
    assert got[order] == pytest.approx(mixed)


# -- batch and interactive ------------------------------------------------------------------------


def test_read_requests_and_stream(tmp_path: Path) -> None:
    path = tmp_path / "req.tsv"
    path.write_text('the cat\t\nthe cat sat\to\n\nthe\tc\t{"genre": "news"}\n', encoding="utf-8")
    reqs = read_requests(path)
    # the blank line 3 is a request too: the first word of a sentence (empty history)
    assert [(r.line, r.history, r.prefix, r.context) for r in reqs] == [
        (1, ("the", "cat"), "", None),
        (2, ("the", "cat", "sat"), "o", None),
        (3, (), "", None),
        (4, ("the",), "c", {"genre": "news"}),
    ]
    model = ArrayModel(["cat", "on", "of", "the", "sat"])
    steps = []
    step = model.step
    model.step = lambda s, w: steps.append(w) or step(s, w)  # type: ignore[method-assign]
    out = list(predict_stream(Predictor(model), reqs, 2))
    assert len(out) == 4 and len(out[2][1]) == 2  # one answer per line, the blank one included
    assert steps == ["the", "cat", "sat", "the"]  # line 2 reused line 1's state
    assert [s.word for s in out[1][1]] == sorted(
        ["on", "of"], key=lambda w: -model.tables[3][model.words.index(w)]
    )
    bad = tmp_path / "bad.tsv"
    bad.write_text("a\tb\t{}\tx\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"bad.tsv:1: expected 'history"):
        read_requests(bad)
    bad.write_text("a\tb\t[1]\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"bad.tsv:1: context: expected an object, got an array"):
        read_requests(bad)


def test_typing_console() -> None:
    words = ["the", "then", "cat", "car"]
    console = TypingConsole(Predictor(ArrayModel(words)), k=2)
    shown = console.feed("the ca*")
    assert shown is not None and shown.startswith("[the] ca*")
    assert {s.word for s in console.last} == {"cat", "car"}
    first = console.last[0].word
    assert console.feed("=1") is not None and console.session.history == ["the", first]
    assert "no suggestion 3" in (console.feed("=3") or "")
    assert console.feed("").startswith("(new sentence)")  # type: ignore[union-attr]
    assert console.session.history == []
    assert console.feed(":q") is None


def run(args: Sequence[object], input: str | None = None) -> Result:
    return CliRunner().invoke(main, ["-q", *map(str, args)], input=input, catch_exceptions=False)


def test_cli_interactive(tiny_arpa: Path) -> None:
    res = run(["predict", "--lm", f"kenlm:{tiny_arpa}", "-k", "2"], input="a\nb*\n=1\n\n:q\nb\n")
    assert res.exit_code == 0, res.output
    blocks = res.output.split("> ")[1:]  # each: the echoed input line, then what was shown
    # after "a": b (0.4) before a (10^-0.62288); completing "b": only b; "=1" accepts b;
    # after "a b": a and b tie, alphabetical; new sentence: a 0.5, b 0.15
    assert blocks[0].startswith("a\n[a]\n  1. b  p=0.4000\n  2. a  p=0.2383\n  (")
    assert blocks[1].startswith("b*\n[a] b*\n  1. b  p=0.4000\n  (")
    assert blocks[2].startswith("=1\n[a b]\n  1. a  p=0.1893\n  2. b  p=0.1893\n")
    assert blocks[3].startswith("\n(new sentence)\n[]\n  1. a  p=0.5000\n  2. b  p=0.1500\n")
    assert len(blocks) == 5 and blocks[4] == ":q\n"  # stopped at :q, "b" never read
    res = run(["predict", "--lm", f"kenlm:{tiny_arpa}"], input="a\n")  # end of input quits
    assert res.exit_code == 0 and "[a]" in res.output


def test_cli_batch(tiny_arpa: Path, tmp_path: Path) -> None:
    inp = tmp_path / "hist.tsv"
    inp.write_text("\na\t\na\tb\nzz\n", encoding="utf-8")
    out = tmp_path / "sugg.jsonl"
    res = run(["predict", "--lm", f"kenlm:{tiny_arpa}", "--input", inp, "--out", out, "-k", "2"])
    assert res.exit_code == 0, res.output
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["line"], r["prefix"], [s["word"] for s in r["suggestions"]]) for r in rows] == [
        (1, "", ["a", "b"]),  # the blank first line: a sentence start, P(a|<s>) > P(b|<s>)
        (2, "", ["b", "a"]),
        (3, "b", ["b"]),
        (4, "", ["a", "b"]),  # after an unknown word: <unk> backs off to the unigrams
    ]
    assert rows[1]["suggestions"][0]["prob"] == pytest.approx(0.4, abs=1e-4)
    res = run(["predict", "--lm", f"kenlm:{tiny_arpa}", "--out", out])
    assert res.exit_code == 2 and "--input" in res.output
    res = run(["predict", "--lm", f"kenlm:{tiny_arpa}", "--lm", f"kenlm:{tiny_arpa}",
               "--weights", "1", "--input", inp])  # fmt: skip
    assert res.exit_code == 2 and "expected 2 weights" in res.output
    bad = tmp_path / "bad.tsv"
    bad.write_text("a\n\ta b\n", encoding="utf-8")
    res = run(["predict", "--lm", f"kenlm:{tiny_arpa}", "--input", bad])
    assert res.exit_code == 2 and "bad.tsv:2: the partial word must be one word" in res.output


def test_import_is_light() -> None:
    """`import rescorer.predict` must not pull torch in (only torch models need it)."""
    import subprocess

    code = "import sys, rescorer.predict, rescorer.keyboard; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_predictable_logprobs_keeps_the_words_every_model_knows(
    tiny_arpa: Path, tmp_path: Path
) -> None:
    """The EM columns of keyboard mixtures: words in the vocabulary that no model flags as
    unknown, each model's own log-probability, ``</s>`` never."""
    from rescorer.lms.kenlm import KenLM
    from rescorer.predict import predictable_logprobs

    narrow = tmp_path / "narrow.arpa"  # knows only "a"
    narrow.write_text(
        "\\data\\\nngram 1=4\nngram 2=1\n\n\\1-grams:\n-1.0\t<unk>\t0\n-99\t<s>\t0\n"
        "-0.5\t</s>\t0\n-0.3\ta\t0\n\n\\2-grams:\n-0.2\t<s> a\n\n\\end\\\n",
        encoding="utf-8",
    )
    models = [KenLM(tiny_arpa), KenLM(narrow)]
    sentences = [("a", "b", "c"), ("b", "a"), ()]
    lp = predictable_logprobs(models, sentences, vocabulary={"a", "b"})
    # kept: "a" of sentence 1 and "a" of sentence 2 ("b" is unknown to narrow, "c" to both)
    want = [
        [models[k].token_logprobs(sentences)[0][0], models[k].token_logprobs(sentences)[1][1]]
        for k in range(2)
    ]
    assert lp.shape == (2, 2)
    assert lp.tolist() == want
    assert predictable_logprobs(models, sentences, vocabulary={"b"}).shape == (2, 0)


# -- a cache over a fast adapter --------------------------------------------------------------


@pytest.mark.parametrize("context", [None, {"genre": "sport", "previous": "Cat mat zebra the cat"}])
def test_a_cache_predicts_over_its_base_models_own_adapter(
    torch_ckpt: Path, context: dict | None
) -> None:
    """`cache:` over a torch LSTM: the LSTM's one-step adapter, mixed with the context's cache;
    in-vocabulary words equal the cache's own scores, unknown words share the base's <unk> before
    the cache adds its mass (so the distribution over the words sums as the base's does)."""
    from rescorer.lms.cache import CacheLM

    base = load_lm(f"torch:{torch_ckpt}", device="cpu")
    lm = CacheLM(base, 0.25, name="c")
    words = [*TORCH_WORDS, "zebra", "yak"]  # zebra (cached) and yak: the LSTM's <unk>
    model = next_word_model(lm, words)
    assert not isinstance(model, ScoringNextWord)  # one LSTM step per word, not one per candidate
    state = model.start(context)
    history = ["the", "cat"]
    cache = lm.cache(context)
    for i in range(len(history) + 1):
        lp = model.next_logprobs(state)
        for j, w in enumerate(TORCH_WORDS):
            want = lm.token_logprobs([[*history[:i], w]], [context])[0][i]
            assert lp[j] == pytest.approx(want, abs=1e-5), (w, context)
        unk = base.token_logprobs([[*history[:i], "zebra"]], [context])[0][i]
        for j, w in ((-2, "zebra"), (-1, "yak")):
            want = math.log(
                (0.75 if len(cache) else 1.0) * math.exp(unk) / 2 + 0.25 * cache.prob(w)
            )
            assert lp[j] == pytest.approx(want, abs=1e-5), (w, context)
        if i < len(history):
            state = model.step(state, history[i])
    predictor = build_predictor([lm], words=words)
    lp = model.next_logprobs(model.step(model.start(context), "the"))
    want = [words[j] for j in np.argsort(-lp, kind="stable")[:3]]
    assert [s.word for s in predictor.predict(["the"], "", 3, context)] == want
