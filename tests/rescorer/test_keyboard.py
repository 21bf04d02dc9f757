"""Keystroke simulation (rescorer.keyboard) on sentences counted by hand, and its CLI.

The convention (module docstring of rescorer.keyboard): every word costs its letters and one
space without prediction; with prediction, a tap on a shown suggestion enters the word and its
space (1 keystroke) after the j letters typed so far.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner, Result

from rescorer.cli.main import main
from rescorer.core.errors import InputError
from rescorer.keyboard import (
    KeyboardOptions,
    SentenceResult,
    compare_systems,
    evaluate,
    keystrokes_by_position,
    read_sentence_results,
    read_sentences,
    sentence_baseline,
    simulate_sentence,
    word_keystrokes,
)
from rescorer.lms.kenlm import KenLM
from rescorer.predict import KenLMNextWord, Predictor

START = "<start>"


class TableModel:
    """A NextWordModel from a hand-written table: the distribution depends on the last word."""

    name = "table"

    def __init__(self, words: Sequence[str], table: Mapping[str, Mapping[str, float]]) -> None:
        self.words = tuple(words)
        self.table = table
        self.steps: list[str] = []

    def vocabulary(self) -> Sequence[str]:
        return self.words

    def start(self, context: object = None) -> str:
        return START

    def step(self, state: str, word: str) -> str:
        self.steps.append(word)
        return word

    def next_logprobs(self, state: str) -> np.ndarray:
        probs = self.table.get(state, {})
        return np.log([probs.get(w, 1e-6) for w in self.words])


WORDS = ["i", "in", "its", "on", "one", "way", "we", "will", "with"]
TABLE = {
    # before "on": i .30, we .20, one .15, on .10, then .05 each (alphabetical among ties)
    START: {"i": 0.30, "we": 0.20, "one": 0.15, "on": 0.10, "in": 0.05, "its": 0.05,
            "will": 0.05, "with": 0.05, "way": 0.05},
    "on": {"its": 0.40, "i": 0.10, "way": 0.10, "we": 0.10},
    # "way" ties with "i" at .10 and comes after it alphabetically: rank 5
    "its": {"we": 0.30, "will": 0.20, "with": 0.15, "way": 0.10, "i": 0.10},
}  # fmt: skip


@pytest.fixture()
def table_predictor() -> Predictor:
    return Predictor(TableModel(WORDS, TABLE))


def test_word_keystrokes_by_hand() -> None:
    # a 3-letter word first shown (rank 1) after 2 letters: w, a, tap = 3
    assert word_keystrokes(3, [None, 4, 1], 1) == 3
    assert word_keystrokes(3, [None, 4, 1], 5) == 2  # rank 4 after one letter: w, tap
    assert word_keystrokes(3, [5, 4, 1], 5) == 1  # shown before any letter: tap
    assert word_keystrokes(3, [None, None, None], 5) == 4  # never: 3 letters + space
    assert word_keystrokes(2, [None], 1) == 3  # stopped early = not shown later
    assert word_keystrokes(1, [None, 1], 1) == 2  # a rank after the last letter is ignored
    assert word_keystrokes(3, [None, None, None], 5, space=False) == 3  # a last word, typed
    assert word_keystrokes(3, [None, 4, 1], 1, space=False) == 3  # tapped: as before
    assert sentence_baseline(["on", "its", "way"]) == 10  # no space after "way"
    assert sentence_baseline(["on", "its", "way"], final_space=True) == 11
    assert sentence_baseline([]) == 0


@pytest.mark.parametrize("final_space", [False, True])
def test_on_its_way_counted_by_hand(table_predictor: Predictor, final_space: bool) -> None:
    """ "on its way" (baseline 3 + 4 + 3 = 10, with the final space 11), ranks read off TABLE:

    on:  before any letter rank 4 (i, we, one, on); after "o" rank 2 (one, on)
         k=1: never first -> o n space = 3; k=3: o tap = 2; k=5: tap = 1
    its: rank 1 before any letter -> 1 for every k
    way: before any letter rank 5 (we, will, with, i, way: tie with i, alphabetical);
         after "w" rank 4 (we, will, with, way); after "wa" rank 1
         k=1 and k=3: w a tap = 3; k=5: tap = 1
    used: k=1 3+1+3 = 7, k=3 2+1+3 = 6, k=5 1+1+1 = 3.
    Before the first letter: top-1 and top-3 hit only "its"; MRR (1/4 + 1 + 1/5) / 3.
    """
    options = KeyboardOptions(ks=(1, 3, 5), accuracy_ks=(1, 3), final_space=final_space)
    r = simulate_sentence(table_predictor, "s1", ["on", "its", "way"], options=options)
    base = 11 if final_space else 10
    assert r.baseline == base
    assert dict(r.keystrokes) == {1: 7, 3: 6, 5: 3}  # "way" is tapped: its space is free
    assert dict(r.hits) == {1: 1, 3: 1}
    assert r.reciprocal_rank == pytest.approx(1 / 4 + 1 + 1 / 5)
    assert r.oov == 0
    assert r.ks(1) == pytest.approx(1 - 7 / base)
    assert r.ks(3) == pytest.approx(1 - 6 / base)
    assert r.ks(5) == pytest.approx(1 - 3 / base)
    # word by word, as counted above: what each word cost, and what it costs unpredicted
    assert dict(r.word_keystrokes or {}) == {1: (3, 1, 3), 3: (2, 1, 3), 5: (1, 1, 1)}
    assert r.word_baseline == (3, 4, 4 if final_space else 3)


@pytest.mark.parametrize("final_space", [False, True])
def test_oov_word_costs_its_letters(table_predictor: Predictor, final_space: bool) -> None:
    # "zebra" is not in the vocabulary: its 5 letters (and the final space, when counted) for
    # every k, rank 0 in MRR. "on" first: k=1 3, k=3 2 (as above).
    options = KeyboardOptions(ks=(1, 3), accuracy_ks=(1,), final_space=final_space)
    r = simulate_sentence(table_predictor, "s2", ["on", "zebra"], options=options)
    zebra = 6 if final_space else 5
    assert r.baseline == 3 + zebra
    assert dict(r.keystrokes) == {1: 3 + zebra, 3: 2 + zebra}
    assert r.oov == 1
    assert r.reciprocal_rank == pytest.approx(1 / 4)


def test_case_is_mapped_and_lengths_count_as_typed(table_predictor: Predictor) -> None:
    # the vocabulary is lower case: "On" is "on"; its letters count as typed (2)
    r = simulate_sentence(table_predictor, "s", ["On", "ITS"], options=KeyboardOptions(ks=(1,)))
    assert r.baseline == 3 + 3
    assert r.keystrokes[1] == 3 + 1


def test_history_is_the_intended_words(table_predictor: Predictor) -> None:
    model = table_predictor.model
    assert isinstance(model, TableModel)
    simulate_sentence(table_predictor, "s", ["on", "its", "way"])
    assert model.steps == ["on", "its"]  # one model step per word; none after the last


def test_evaluate_totals_and_latency(table_predictor: Predictor) -> None:
    sentences = [("a", ("on", "its", "way")), ("b", ("on", "zebra"))]
    ev = evaluate(table_predictor, sentences, options=KeyboardOptions(ks=(1, 3)))
    rep = ev.report
    assert rep.sentences == 2 and rep.words == 5 and rep.oov == 1
    assert rep.baseline == 10 + 8 and not rep.final_space
    assert dict(rep.keystrokes) == {1: 7 + 8, 3: 6 + 7}
    assert rep.ks(1) == pytest.approx(1 - 15 / 18)
    assert rep.to_json()["final_space"] is False
    assert rep.accuracy(1) == pytest.approx(1 / 5)
    assert rep.mrr == pytest.approx((1 / 4 + 1 + 1 / 5 + 1 / 4) / 5)
    assert rep.latency.count > 0 and rep.latency.p95_ms >= rep.latency.p50_ms >= 0
    assert rep.word_start_latency.count == 5  # one list at the start of every word
    assert rep.latency_cpu.count == rep.latency.count and rep.word_start_latency_cpu.count == 5
    assert [r.id for r in ev.sentences] == ["a", "b"]


def test_kenlm_bigram_by_hand(tiny_arpa: Path) -> None:
    """The tiny bigram of conftest (log10): after <s> a 0.5, b 10^(-0.30103-0.52288) = 0.15;
    after a: b 0.4, a 10^(-0.1-0.52288); after b: a and b tie at 10^(-0.2-0.52288).

    "a b": a first, then b first: 1 + 1 = 2 of 3 (no space after the last word) at every k.
    "b a": b second before any letter (k=1: 1 letter + space = 2; k=3: 1); then a (tie with b,
    alphabetical) first: 1. k=1: 3 of 3, k=3: 2 of 3.
    """
    lm = KenLM(tiny_arpa)
    predictor = Predictor(KenLMNextWord(lm, ["a", "b"]))
    opts = KeyboardOptions(ks=(1, 3), accuracy_ks=(1,))
    ab = simulate_sentence(predictor, "ab", ["a", "b"], options=opts)
    ba = simulate_sentence(predictor, "ba", ["b", "a"], options=opts)
    assert dict(ab.keystrokes) == {1: 2, 3: 2}
    assert dict(ba.keystrokes) == {1: 3, 3: 2}
    assert dict(ba.hits) == {1: 1}
    assert ba.reciprocal_rank == pytest.approx(1 / 2 + 1)
    lp = predictor.session().sorted_logprobs()
    assert lp == pytest.approx([math.log(0.5), (-0.30103 - 0.52288) * math.log(10)])


def test_options_validation() -> None:
    with pytest.raises(ValueError, match="ks"):
        KeyboardOptions(ks=(0, 1))
    assert KeyboardOptions(ks=(5, 1, 1)).ks == (1, 5)


# -- files and comparison -------------------------------------------------------------------------


def test_read_sentences_formats(tmp_path: Path) -> None:
    tsv = tmp_path / "t.txt"
    tsv.write_text("m1\tthanks i will\nm2\t  \nm3\ton its way \n", encoding="utf-8")
    assert read_sentences(tsv) == [("m1", ("thanks", "i", "will")), ("m3", ("on", "its", "way"))]
    plain = tmp_path / "p.txt"
    plain.write_text("on its way\n\nsee you\n", encoding="utf-8")
    assert read_sentences(plain) == [("1", ("on", "its", "way")), ("3", ("see", "you"))]
    assert read_sentences(plain, "kaldi") == [("on", ("its", "way")), ("see", ("you",))]
    bad = tmp_path / "bad.txt"
    bad.write_text("m1\ta b\nm1\tc d\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"bad.txt:2: duplicate sentence id 'm1'"):
        read_sentences(bad)
    cols = tmp_path / "cols.txt"
    cols.write_text("m1\ta\tb\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"cols.txt:1: expected 'id<TAB>sentence'"):
        read_sentences(cols)


def _result(sid: str, baseline: int, used: int) -> SentenceResult:
    return SentenceResult(sid, 2, baseline, {1: used}, {1: 0}, 0.0, 0)


def test_compare_systems_counts_and_direction() -> None:
    a = [_result(f"s{i}", 10, 8) for i in range(12)]
    b = [_result(f"s{i}", 10, 8 - (i < 10)) for i in range(12)]  # B saves one on 10 sentences
    cmp = compare_systems(a, list(reversed(b)), 1, names=("A", "B"))
    assert cmp.n == 12 and cmp.b_better == 10 and cmp.b_worse == 0
    assert cmp.ks_a == pytest.approx(0.2) and cmp.ks_b == pytest.approx(1 - 86 / 120)
    assert cmp.matched_pairs.statistic > 0 and cmp.verdict == "better"
    assert cmp.sign.p_value == pytest.approx(2 / 1024)  # 10 of 10, two-sided
    assert cmp.bootstrap.observed == pytest.approx(-10 / 120)  # used_B - used_A over baseline
    assert "B is better than A" in cmp.summary()
    with pytest.raises(InputError, match="missing id"):
        compare_systems(a, b[:-1], 1)
    with pytest.raises(InputError, match="baseline"):
        compare_systems(a, [_result(f"s{i}", 11, 8) for i in range(12)], 1)


def _worded(sid: str, used: Sequence[int], base: Sequence[int] = (3, 4, 3)) -> SentenceResult:
    """A 3-word sentence typed at k=1 with ``used[i]`` keystrokes on word i."""
    return SentenceResult(
        sid, len(used), sum(base), {1: sum(used)}, {1: 0}, 0.0, 0,
        word_keystrokes={1: tuple(used)}, word_baseline=tuple(base),
    )  # fmt: skip


def test_keystrokes_by_position_adds_up_to_the_difference() -> None:
    """Two sentences of 3 words (baseline 3 + 4 + 3 = 10 each). A uses 3, 4, 3 (nothing
    predicted) on both; B saves 2 on the first word of both and 1 on the third of one.
    Bands 1, 2-: first words 6 -> 2 of 6, the rest 14 -> 13 of 14; contributions 4/20 and
    1/20 of the 20 baseline keystrokes, which sum to the whole difference 5/20."""
    a = [_worded("s1", (3, 4, 3)), _worded("s2", (3, 4, 3))]
    b = [_worded("s1", (1, 4, 3)), _worded("s2", (1, 4, 2))]
    bands = keystrokes_by_position(a, list(reversed(b)), 1, starts=(1, 2))
    assert [(g.label, g.words, g.baseline, g.used_a, g.used_b) for g in bands] == [
        ("1", 2, 6, 6, 2),
        ("2+", 4, 14, 14, 13),
    ]
    assert bands[0].ks_a == 0.0 and bands[0].ks_b == pytest.approx(4 / 6)
    assert [g.contribution for g in bands] == pytest.approx([4 / 20, 1 / 20])
    cmp = compare_systems(a, b, 1)
    assert sum(g.contribution for g in bands) == pytest.approx(cmp.difference)
    # the default bands: 1, 2, 3, 4-5, 6-10, 11+ (empty ones left out)
    assert [g.label for g in keystrokes_by_position(a, b, 1)] == ["1", "2", "3"]
    with pytest.raises(InputError, match="word by word"):
        keystrokes_by_position([_result("s1", 10, 8)], [_result("s1", 10, 7)], 1)
    with pytest.raises(ValueError, match="starts"):
        keystrokes_by_position(a, b, 1, starts=(2, 3))


def test_sentence_results_round_trip(tmp_path: Path) -> None:
    from rescorer.keyboard import write_sentence_results

    r = SentenceResult("x", 3, 11, {1: 7, 3: 6}, {1: 1}, 1.45, 0)
    path = tmp_path / "r.jsonl"
    write_sentence_results(path, [r])
    assert read_sentence_results(path) == [r]
    worded = _worded("y", (1, 4, 2))
    write_sentence_results(path, [r, worded])
    assert read_sentence_results(path) == [r, worded]
    row = worded.to_json()
    for key, value, said in [
        ("word_keystrokes", {"1": [1, 4, 1]}, "sum to keystrokes"),
        ("word_keystrokes", {"1": [1, 5, 1]}, "between 1 and"),
        ("word_keystrokes", {"1": [1, 4]}, "one per word"),
        ("word_keystrokes", {"3": [1, 4, 2]}, "the same k"),
        ("word_baseline", [3, 4, 2, 1], "one per word"),
        ("word_baseline", [3, 4, 4], "sum to the baseline"),
        ("word_baseline", None, "both or neither"),
    ]:
        bad = {**row, key: value}
        if value is None:
            del bad[key]
        path.write_text(json.dumps(bad) + "\n", encoding="utf-8")
        with pytest.raises(InputError, match=said):
            read_sentence_results(path)
    path.write_text('{"id": "x"}\n', encoding="utf-8")
    with pytest.raises(InputError, match=r"r.jsonl:1: not a per-sentence keyboard result"):
        read_sentence_results(path)


# -- CLI ------------------------------------------------------------------------------------------


def run(args: Sequence[object], input: str | None = None) -> Result:
    return CliRunner().invoke(main, ["-q", *map(str, args)], input=input, catch_exceptions=False)


def test_cli_keyboard_eval_and_compare(tiny_arpa: Path, tmp_path: Path) -> None:
    text = tmp_path / "test.tsv"
    text.write_text("ab\ta b\nba\tb a\n", encoding="utf-8")
    out = tmp_path / "per.jsonl"
    report = tmp_path / "report.json"
    res = run(
        ["keyboard-eval", "--lm", f"kenlm:{tiny_arpa}", "--text", text, "-k", "1,3",
         "--accuracy", "1", "--per-sentence", out, "--report", report]
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    # (2 + 3) of 6 and (2 + 2) of 6 used: no space after a sentence's last word
    assert "k=1 16.67%, k=3 33.33% (baseline 6 keystrokes, no space after" in res.output
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["id"], r["baseline"], r["keystrokes"]) for r in rows] == [
        ("ab", 3, {"1": 2, "3": 2}),
        ("ba", 3, {"1": 3, "3": 2}),
    ]
    rep = json.loads(report.read_text())
    assert rep["ks"] == pytest.approx({"1": 1 / 6, "3": 1 / 3}) and rep["accuracy"] == {"1": 0.75}
    assert rep["latency_ms"]["count"] > 0 and rep["final_space"] is False
    res = run(["keyboard-compare", out, out, "-k", "1"])
    assert res.exit_code == 0 and "difference per.jsonl - per.jsonl +0.00 points" in res.output
    # by word position, k=1: first words a (tap, 1 of 2) and b (b space, 2 of 2): 3 of 4 used,
    # KS 25 %; second words a and b tapped, 1 of 1 each (a last word has no space): KS 0
    res = run(["keyboard-compare", out, out, "-k", "1", "--by-position"])
    assert res.exit_code == 0, res.output
    table = res.output.split("KS by word position at k=1")[1].splitlines()
    assert table[2].split() == ["1", "2", "4", "25.00%", "25.00%", "+0.00", "+0.00"]
    assert table[3].split() == ["2", "2", "2", "0.00%", "0.00%", "+0.00", "+0.00"]
    old = tmp_path / "old.jsonl"  # written before the per-word counts were
    old.write_text(
        "".join(
            json.dumps({k: v for k, v in r.items() if not k.startswith("word_")}) + "\n"
            for r in rows
        ),
        encoding="utf-8",
    )
    res = run(["keyboard-compare", old, out, "-k", "1", "--by-position"])
    assert res.exit_code == 2 and "old.jsonl" in res.output and "word by word" in res.output
    assert "Traceback" not in res.output
    # --final-space: each sentence's last word costs its space too (of 8)
    spaced = tmp_path / "spaced.jsonl"
    res = run(
        ["keyboard-eval", "--lm", f"kenlm:{tiny_arpa}", "--text", text, "-k", "1,3",
         "--final-space", "--per-sentence", spaced]
    )  # fmt: skip
    assert res.exit_code == 0 and "k=1 37.50%, k=3 50.00% (baseline 8 keystrokes, a space" in (
        res.output
    )
    res = run(["keyboard-compare", out, spaced, "-k", "1"])  # conventions differ: refused
    assert res.exit_code == 2 and "same --final-space setting" in res.output
    res = run(["keyboard-eval", "--lm", f"kenlm:{tiny_arpa}", "--text", text, "--compare", out])
    assert res.exit_code == 0 and res.output.count("verdict") == 2  # k = 1, 3 (no 5 in `out`)


def test_cli_keyboard_eval_bad_input(tiny_arpa: Path, tmp_path: Path) -> None:
    text = tmp_path / "bad.tsv"
    text.write_text("a\ta b\nb\tb\ta\n", encoding="utf-8")
    res = run(["keyboard-eval", "--lm", f"kenlm:{tiny_arpa}", "--text", text])
    assert res.exit_code == 2
    assert "bad.tsv:2: expected 'id<TAB>sentence'" in res.output
    assert "Traceback" not in res.output
    res = run(["keyboard-eval", "--lm", f"kenlm:{tiny_arpa}", "--text", text, "-k", "0"])
    assert res.exit_code == 2


def test_cli_keyboard_eval_warns_about_unknown_words_and_normalises(
    tiny_arpa: Path, tmp_path: Path
) -> None:
    """Raw text (capitals, punctuation) puts test words outside the vocabulary: a warning says
    so, and --normalize applies the scoring normalisers to the test text."""
    text = tmp_path / "test.tsv"
    text.write_text("s1\tA b.\ns2\tB, a\n", encoding="utf-8")
    raw = run(["keyboard-eval", "--lm", f"kenlm:{tiny_arpa}", "--text", text, "-k", "1"])
    assert raw.exit_code == 0, raw.output
    # the model's case mapping finds "A" and "B"; "b." and "B," stay unknown
    assert "warning: 50.0% of the test words are outside the 2-word vocabulary" in raw.output
    fixed = run(
        ["keyboard-eval", "--lm", f"kenlm:{tiny_arpa}", "--text", text, "-k", "1",
         "--normalize", "lower,punct"]
    )  # fmt: skip
    assert fixed.exit_code == 0, fixed.output
    assert "0.00% outside the 2-word vocabulary" in fixed.output and "warning" not in fixed.output
    assert "k=1 16.67%" in fixed.output  # the same sentences as the clean test above
    assert "(normalize: punct,lower)" in fixed.output


def test_cli_keyboard_eval_records_the_normaliser(tiny_arpa: Path, tmp_path: Path) -> None:
    """The normaliser is in the report and in every per-sentence result, and runs over raw and
    normalised text are not compared (lower-casing alone keeps every baseline the same)."""
    text = tmp_path / "test.tsv"
    text.write_text("s1\tA b\ns2\tB a\n", encoding="utf-8")
    common = ["keyboard-eval", "--lm", f"kenlm:{tiny_arpa}", "--text", text, "-k", "1"]
    raw = run([*common, "--per-sentence", tmp_path / "raw.jsonl", "--report", tmp_path / "r.json"])
    low = run([*common, "--per-sentence", tmp_path / "low.jsonl", "--report", tmp_path / "l.json",
               "--normalize", "lower"])  # fmt: skip
    assert raw.exit_code == 0 and low.exit_code == 0, raw.output + low.output
    assert json.loads((tmp_path / "r.json").read_text())["normalize"] == "none"
    assert json.loads((tmp_path / "l.json").read_text())["normalize"] == "lower"
    rows = [json.loads(line) for line in (tmp_path / "low.jsonl").read_text().splitlines()]
    assert [r["normalize"] for r in rows] == ["lower", "lower"]
    assert [r["baseline"] for r in rows] == [
        json.loads(line)["baseline"] for line in (tmp_path / "raw.jsonl").read_text().splitlines()
    ]
    mixed = run(["keyboard-compare", tmp_path / "raw.jsonl", tmp_path / "low.jsonl"])
    assert mixed.exit_code == 2
    assert "normalised with 'none' in A but 'lower' in B" in mixed.output
    same = run(["keyboard-compare", tmp_path / "low.jsonl", tmp_path / "low.jsonl"])
    assert same.exit_code == 0, same.output
    # keyboard-eval's help says what its --normalize applies to
    assert "the test text before typing it" in run(["keyboard-eval", "--help"]).output
