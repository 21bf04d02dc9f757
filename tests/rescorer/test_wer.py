"""Tests for rescorer.wer: alignment, counts, corpus reports, CER, oracle, real LibriSpeech data."""

from __future__ import annotations

import math
import re
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rescorer.core.data import default_data_dir
from rescorer.core.errors import InputError
from rescorer.nbest import Hypothesis, NBest, NBestList
from rescorer.wer import (
    SPACE_TOKEN,
    ErrorCounts,
    UttResult,
    WerReport,
    align,
    char_units,
    edit_distance,
    edit_distance_batch,
    edit_distance_counts,
    hypothesis_errors,
    oracle,
    ref_lengths,
    score_corpus,
)


def w(text: str) -> list[str]:
    return text.split()


# ------------------------------------------------------------------------------------------
# ErrorCounts
# ------------------------------------------------------------------------------------------


def test_kaldi_line_exact():
    c = ErrorCounts(sub=720, dele=95, ins=110, ref_words=54402)
    assert c.errors == 925
    assert c.correct == 54402 - 720 - 95
    assert c.kaldi_line() == "%WER 1.70 [ 925 / 54402, 110 ins, 95 del, 720 sub ]"
    assert c.kaldi_line("%CER") == "%CER 1.70 [ 925 / 54402, 110 ins, 95 del, 720 sub ]"


def test_kaldi_line_rounds_to_two_decimals():
    # 1 / 3 = 33.333.. % ; 2 / 3 = 66.666.. %
    assert ErrorCounts(1, 0, 0, 3).kaldi_line().startswith("%WER 33.33 [ 1 / 3,")
    assert ErrorCounts(1, 1, 0, 3).kaldi_line().startswith("%WER 66.67 [ 2 / 3,")


def test_wer_with_zero_reference_words():
    assert ErrorCounts(0, 0, 0, 0).wer == 0.0
    assert ErrorCounts(0, 0, 3, 0).wer == math.inf
    assert ErrorCounts(0, 0, 0, 0).kaldi_line() == "%WER 0.00 [ 0 / 0, 0 ins, 0 del, 0 sub ]"


def test_counts_add_and_validate():
    total = ErrorCounts(1, 2, 3, 10) + ErrorCounts(4, 0, 1, 5)
    assert total == ErrorCounts(5, 2, 4, 15)
    assert total.wer == pytest.approx(11 / 15)
    with pytest.raises(ValueError):
        ErrorCounts(3, 3, 0, 5)  # more substituted+deleted words than reference words
    with pytest.raises(ValueError):
        ErrorCounts(-1, 0, 0, 5)


# ------------------------------------------------------------------------------------------
# align / edit_distance edge cases
# ------------------------------------------------------------------------------------------


def test_both_empty():
    a = align([], [])
    assert a.ops == ()
    assert a.counts == ErrorCounts(0, 0, 0, 0)
    assert edit_distance([], []) == ErrorCounts(0, 0, 0, 0)


def test_empty_reference_is_all_insertions():
    a = align([], w("x y"))
    assert a.ops == (("I", None, "x"), ("I", None, "y"))
    assert a.counts == ErrorCounts(0, 0, 2, 0)
    assert a.counts.wer == math.inf
    assert edit_distance([], w("x y")) == a.counts


def test_empty_hypothesis_is_all_deletions():
    a = align(w("x y z"), [])
    assert [op[0] for op in a.ops] == ["D", "D", "D"]
    assert a.counts == ErrorCounts(0, 3, 0, 3)
    assert a.counts.wer == 1.0
    assert edit_distance(w("x y z"), []) == a.counts


def test_insertions_around_a_match():
    a = align(w("a"), w("x a y"))
    assert a.ops == (("I", None, "x"), ("C", "a", "a"), ("I", None, "y"))
    assert a.counts == ErrorCounts(0, 0, 2, 1)


def test_deletions_around_a_match():
    a = align(w("x a y"), w("a"))
    assert a.ops == (("D", "x", None), ("C", "a", "a"), ("D", "y", None))
    assert a.counts == ErrorCounts(0, 2, 0, 3)


def test_identical():
    ref = w("the quick brown fox")
    a = align(ref, ref)
    assert all(op[0] == "C" for op in a.ops)
    assert a.counts == ErrorCounts(0, 0, 0, 4)
    assert a.counts.wer == 0.0


def test_classic_example_hand_counted():
    # REF: the cat sat on the mat
    # HYP: the cat sit on     mat today
    # sat->sit is a substitution, the second "the" is deleted, "today" is inserted:
    # 1 S + 1 D + 1 I = 3 errors over 6 reference words (50 %).
    ref, hyp = w("the cat sat on the mat"), w("the cat sit on mat today")
    a = align(ref, hyp)
    assert a.ops == (
        ("C", "the", "the"),
        ("C", "cat", "cat"),
        ("S", "sat", "sit"),
        ("C", "on", "on"),
        ("D", "the", None),
        ("C", "mat", "mat"),
        ("I", None, "today"),
    )
    assert a.counts == ErrorCounts(sub=1, dele=1, ins=1, ref_words=6)
    assert a.counts.wer == 0.5
    assert edit_distance(ref, hyp) == a.counts


def test_tie_break_prefers_correct_words_by_default():
    # "a b" -> "b c": two substitutions, or delete a / match b / insert c; both are 2 errors.
    a = align(w("a b"), w("b c"))
    assert a.ops == (("D", "a", None), ("C", "b", "b"), ("I", None, "c"))
    assert a.counts == ErrorCounts(0, 1, 1, 2)
    s = align(w("a b"), w("b c"), tie_break="substitution")
    assert s.ops == (("S", "a", "b"), ("S", "b", "c"))
    assert s.counts == ErrorCounts(2, 0, 0, 2)
    # Same in the classic example's tail: "on the mat" vs "on mat today".
    assert edit_distance(w("the mat"), w("mat today"), "substitution") == ErrorCounts(2, 0, 0, 2)
    assert edit_distance(w("the mat"), w("mat today")) == ErrorCounts(0, 1, 1, 2)


def test_tie_break_positions_are_deterministic():
    # Equal counts, different positions: the backtrace prefers the diagonal at the end.
    assert align(w("a"), w("x y")).ops == (("I", None, "x"), ("S", "a", "y"))
    assert align(w("a a"), w("a")).ops == (("D", "a", None), ("C", "a", "a"))
    first = align(w("a b c a b"), w("b a c b a"))
    for _ in range(3):
        assert align(w("a b c a b"), w("b a c b a")) == first


def test_unknown_tie_break_rejected():
    with pytest.raises(ValueError):
        edit_distance(w("a"), w("b"), tie_break="kaldi")


def test_pretty():
    text = align(w("a bb c"), w("a x")).pretty()
    lines = text.splitlines()
    assert lines[0].startswith("REF:") and lines[1].startswith("HYP:")
    assert "***" in lines[1]


def test_edit_distance_batch_matches_single_and_shares_references():
    ref = w("a b c d")
    pairs = [(ref, w("a b c d")), (ref, w("a c d")), ([], w("x")), (w("p q"), []), (ref, [])]
    out = edit_distance_batch(pairs)
    assert out.shape == (5, 4)
    for row, (r, h) in zip(out, pairs, strict=True):
        assert ErrorCounts(*map(int, row)) == edit_distance(r, h)
    assert edit_distance_batch([]).shape == (0, 4)


# ------------------------------------------------------------------------------------------
# Property tests against an independent plain-Python DP
# ------------------------------------------------------------------------------------------


def _reference_dp(ref, hyp, tie_break):
    """Lexicographic DP over (errors, secondary) tuples, written independently of wer.py."""
    n, m = len(ref), len(hyp)
    # cost = (errors, secondary, sub, dele, ins); secondary = subs ("correct") or -subs.
    sign = 1 if tie_break == "correct" else -1
    inf = (10**9,)
    d = [[inf] * (m + 1) for _ in range(n + 1)]
    d[0][0] = (0, 0, 0, 0, 0)
    for i in range(n + 1):
        for j in range(m + 1):
            if i == 0 and j == 0:
                continue
            cands = []
            if i and j:
                e, s2, s, dl, ins = d[i - 1][j - 1]
                if ref[i - 1] == hyp[j - 1]:
                    cands.append((e, s2, s, dl, ins))
                else:
                    cands.append((e + 1, s2 + sign, s + 1, dl, ins))
            if i:
                e, s2, s, dl, ins = d[i - 1][j]
                cands.append((e + 1, s2, s, dl + 1, ins))
            if j:
                e, s2, s, dl, ins = d[i][j - 1]
                cands.append((e + 1, s2, s, dl, ins + 1))
            d[i][j] = min(cands, key=lambda c: (c[0], c[1]))
    _, _, s, dl, ins = d[n][m]
    return ErrorCounts(s, dl, ins, n)


seqs = st.lists(st.sampled_from("abcd"), max_size=12)


@settings(max_examples=300, deadline=None)
@given(seqs, seqs, st.sampled_from(["correct", "substitution"]))
def test_align_and_edit_distance_agree(ref, hyp, tie_break):
    a = align(ref, hyp, tie_break)
    assert a.counts == edit_distance(ref, hyp, tie_break)
    assert a.counts == _reference_dp(ref, hyp, tie_break)
    # The ops spell out both sequences, and codes are consistent with the words.
    assert [r for _, r, _ in a.ops if r is not None] == ref
    assert [h for _, _, h in a.ops if h is not None] == hyp
    for code, r, h in a.ops:
        assert (code == "C") == (r is not None and h is not None and r == h)
        assert (code == "S") == (r is not None and h is not None and r != h)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(seqs, seqs), max_size=40))
def test_batch_agrees_with_single(pairs):
    out = edit_distance_batch(pairs)
    for row, (r, h) in zip(out, pairs, strict=True):
        assert ErrorCounts(*map(int, row)) == _reference_dp(r, h, "correct")


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(seqs, seqs), max_size=20),
    st.sampled_from(["correct", "substitution"]),
    st.sampled_from([0, 4, 400]),
)
def test_trimmed_python_counts_equal_the_reference_dp(pairs, tie_break, cells):
    """Prefix/suffix trimming and the small Python DP give the exact counts (split included),
    whichever pairs go to the batched numpy path (``cells`` moves the threshold)."""
    import rescorer.wer as wer

    old = wer.SMALL_PAIR_CELLS, wer.PYTHON_CELL_BUDGET
    wer.SMALL_PAIR_CELLS, wer.PYTHON_CELL_BUDGET = cells, 0  # numpy is loaded here anyway
    try:
        out = edit_distance_counts(pairs, tie_break)
    finally:
        wer.SMALL_PAIR_CELLS, wer.PYTHON_CELL_BUDGET = old
    for row, (r, h) in zip(out, pairs, strict=True):
        assert ErrorCounts(*row) == _reference_dp(r, h, tie_break)


def test_scoring_a_one_best_file_imports_no_numpy(tmp_path: Path) -> None:
    import subprocess
    import sys

    ref = tmp_path / "ref.txt"
    hyp = tmp_path / "hyp.txt"
    ref.write_text("u1 the cat sat on the mat\nu2 a b c\n", encoding="utf-8")
    hyp.write_text("u1 the cat sat in the mat\nu2 a c\n", encoding="utf-8")
    code = (
        "import sys\n"
        "from rescorer.cli.main import main\n"
        "try:\n"
        f"    main(['wer', '--ref', {str(ref)!r}, '--hyp', {str(hyp)!r}])\n"
        "except SystemExit:\n"
        "    pass\n"
        "print('NUMPY' if 'numpy' in sys.modules else 'CLEAN')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "%WER 22.22 [ 2 / 9, 0 ins, 1 del, 1 sub ]" in out.stdout
    assert out.stdout.strip().splitlines()[-1] == "CLEAN"


def test_batch_with_long_and_mixed_lengths():
    rng = np.random.default_rng(1)
    pairs = []
    for _ in range(300):
        n, m = rng.integers(0, 60, size=2)
        pairs.append((list(rng.integers(0, 5, n)), list(rng.integers(0, 5, m))))
    out = edit_distance_batch(pairs)
    for row, (r, h) in zip(out[::15], pairs[::15], strict=True):
        assert ErrorCounts(*map(int, row)) == _reference_dp(r, h, "correct")


# ------------------------------------------------------------------------------------------
# Corpus scoring
# ------------------------------------------------------------------------------------------

REFS = {"u1": w("a b c d"), "u2": w("e f"), "u3": w("g h i")}
HYPS = {"u1": w("a x c d"), "u2": w("e f"), "u3": w("g i")}
SPK = {"u1": "spk1", "u2": "spk1", "u3": "spk2"}


def _norm(text: str) -> str:
    return re.sub(r"\s+", " ", text)


def test_score_corpus_totals_and_speakers():
    rep = score_corpus(REFS, HYPS, SPK)
    assert rep.total == ErrorCounts(sub=1, dele=1, ins=0, ref_words=9)
    assert rep.sentence_errors == 2
    assert rep.ser == pytest.approx(2 / 3)
    assert [u.utt_id for u in rep.utterances] == ["u1", "u2", "u3"]
    assert rep.by_speaker() == {
        "spk1": ErrorCounts(1, 0, 0, 6),
        "spk2": ErrorCounts(0, 1, 0, 3),
    }
    assert rep.kaldi_line() == "%WER 22.22 [ 2 / 9, 0 ins, 1 del, 1 sub ]"
    assert rep.ser_line() == "%SER 66.67 [ 2 / 3 ]"


def test_summary_rows():
    summary = _norm(score_corpus(REFS, HYPS, SPK).summary())
    # spk1: 2 sentences, 6 words, 5 correct (83.3), 1 sub (16.7), S.Err 1/2.
    assert "| spk1 | 2 6 | 83.3 16.7 0.0 0.0 16.7 50.0 |" in summary
    # spk2: 1 sentence, 3 words, 1 deletion (33.3), S.Err 1/1.
    assert "| spk2 | 1 3 | 66.7 0.0 33.3 0.0 33.3 100.0 |" in summary
    # Sum/Avg: 9 words, 7 correct (77.8), 1 sub and 1 del (11.1 each), 2 of 3 sentences.
    assert "| Sum/Avg | 3 9 | 77.8 11.1 11.1 0.0 22.2 66.7 |" in summary
    assert "SPKR" in summary and "S.Err" in summary


def test_summary_without_speakers_and_utterance_table():
    rep = score_corpus(REFS, HYPS)
    assert rep.by_speaker() == {"(none)": rep.total}
    table = rep.utterance_table()
    assert len(table.splitlines()) == 4
    assert _norm(table.splitlines()[1]) == "u1 - 4 3 1 0 0 1 25.00"


def test_score_corpus_id_mismatch_names_ids():
    hyps = {"u1": w("a"), "u2": w("e f"), "u9": w("z")}
    with pytest.raises(InputError) as err:
        score_corpus(REFS, hyps)
    msg = str(err.value)
    assert "hypothesis" in msg and "u3" in msg and "u9" in msg
    assert "missing" in msg and "extra" in msg


def test_score_corpus_rejects_strings_and_missing_speakers():
    with pytest.raises(TypeError):
        score_corpus({"u": "a b"}, {"u": w("a b")})
    with pytest.raises(InputError, match="u3"):
        score_corpus(REFS, HYPS, {"u1": "s", "u2": "s"})


def test_cer_hand_example():
    assert char_units(w("AB CD")) == ("A", "B", SPACE_TOKEN, "C", "D")
    assert char_units([]) == ()
    refs = {"u1": w("AB CD"), "u2": w("XY")}
    hyps = {"u1": w("ABCD"), "u2": w("XZ")}
    rep = score_corpus(refs, hyps, unit="char")
    # u1: A B <space> C D vs A B C D -> the <space> is deleted (1 error / 5 chars).
    # u2: X Y vs X Z -> one substitution (1 error / 2 chars).
    assert rep.utterances[0].counts == ErrorCounts(0, 1, 0, 5)
    assert rep.utterances[1].counts == ErrorCounts(1, 0, 0, 2)
    assert rep.total == ErrorCounts(1, 1, 0, 7)
    assert rep.kaldi_line() == "%CER 28.57 [ 2 / 7, 0 ins, 1 del, 1 sub ]"
    # At word level u1 is one substitution plus one deletion.
    assert score_corpus(refs, hyps).utterances[0].counts == ErrorCounts(1, 1, 0, 2)
    assert ref_lengths(refs, unit="char") == {"u1": 5, "u2": 2}


def test_report_from_utterances():
    rep = WerReport.from_utterances(
        [
            UttResult("a", None, ErrorCounts(1, 0, 0, 2)),
            UttResult("b", None, ErrorCounts(0, 0, 0, 3)),
        ]
    )
    assert rep.total == ErrorCounts(1, 0, 0, 5)
    assert rep.sentence_errors == 1
    assert list(rep.errors_array()) == [1, 0]
    assert list(rep.ref_lengths_array()) == [2, 3]


# ------------------------------------------------------------------------------------------
# N-best: oracle and per-hypothesis errors
# ------------------------------------------------------------------------------------------


def _nbest(lists: dict[str, list[str]]) -> NBest:
    return NBest(
        [NBestList(u, tuple(Hypothesis(tuple(w(t))) for t in hs)) for u, hs in lists.items()]
    )


def test_oracle_and_hypothesis_errors():
    nb = _nbest({"u1": ["a x", "a b", "a b"], "u2": ["c", "c d e", ""]})
    refs = {"u1": w("a b"), "u2": w("c d")}
    errs = hypothesis_errors(nb, refs)
    assert errs["u1"].tolist() == [1, 0, 0]
    assert errs["u2"].tolist() == [1, 1, 2]
    res = oracle(nb, refs)
    assert res.best_index == {"u1": 1, "u2": 0}  # first index on ties
    assert res.report.total == ErrorCounts(0, 1, 0, 4)
    assert ref_lengths(refs) == {"u1": 2, "u2": 2}


def test_oracle_id_mismatch():
    nb = _nbest({"u1": ["a"]})
    with pytest.raises(InputError, match="u2"):
        oracle(nb, {"u1": w("a"), "u2": w("b")})
    with pytest.raises(InputError, match="u2"):
        hypothesis_errors(nb, {"u1": w("a"), "u2": w("b")})


# ------------------------------------------------------------------------------------------
# Real data: ESPnet LibriSpeech dev sets (parsed inline; refs.py is written elsewhere)
# ------------------------------------------------------------------------------------------

DATA = default_data_dir() / "nbest" / "librispeech-espnet"

EXPECTED = {
    # set: (errors, ref words, sub, del, ins) of the 1-best, as in result_wer.txt
    "dev_clean": (925, 54402, 747, 86, 92),
    "dev_other": (1840, 50948, 1525, 155, 160),
}
EXPECTED_ORACLE = {"dev_clean": (320, "0.59"), "dev_other": (899, "1.76")}


def _set_dir(name: str) -> Path:
    d = DATA / name
    if not (d / "references" / "ref_wer.trn").is_file():
        pytest.skip(f"LibriSpeech ESPnet N-best data not found at {d} (set RESCORER_DATA)")
    return d


def _read_trn(path: Path) -> tuple[dict[str, list[str]], dict[str, str]]:
    """``words (spk-uttid)`` lines -> refs and sclite speakers (first field of the id)."""
    refs, spk = {}, {}
    for line in path.read_text(encoding="utf-8").splitlines():
        cut = line.rindex("(")
        fields = line[cut + 1 : line.rindex(")")].split("-")
        utt = "-".join(fields[-3:])
        refs[utt] = line[:cut].split()
        spk[utt] = fields[0]
    return refs, spk


def _read_text(path: Path) -> dict[str, list[str]]:
    out = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        parts = line.split()
        out[parts[0]] = parts[1:]
    return out


def _read_sclite(path: Path) -> tuple[dict[str, tuple[int, int, int]], dict[str, tuple[int, ...]]]:
    """Per-utterance (S, D, I) and per-speaker count rows of an sclite result_wer.txt."""
    utts: dict[str, tuple[int, int, int]] = {}
    speakers: dict[str, tuple[int, ...]] = {}
    current = None
    row = re.compile(
        r"^\s*\|\s*(\S+)\s*\|\s*(\d+)\s+(\d+)\s*\|\s*" + r"(\d+)\s+" * 5 + r"(\d+)\s*\|"
    )
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("id: ("):
            current = "-".join(line.strip()[5:-1].split("-")[-3:])
        elif line.startswith("Scores:"):
            _, s, d, i = map(int, line.split()[-4:])
            utts[current] = (s, d, i)
        else:
            m = row.match(line)
            if m:  # counts table: SPKR | #Snt #Wrd | Corr Sub Del Ins Err S.Err
                speakers[m.group(1)] = tuple(int(x) for x in m.groups()[1:])
    return utts, speakers


@pytest.mark.parametrize("name", ["dev_clean", "dev_other"])
def test_real_1best_matches_sclite(name):
    d = _set_dir(name)
    refs, spk = _read_trn(d / "references" / "ref_wer.trn")
    hyps = _read_text(d / "raw_hypotheses" / "1best_recog" / "text")
    rep = score_corpus(refs, hyps, spk)
    errors, words, sub, dele, ins = EXPECTED[name]
    assert (rep.total.errors, rep.total.ref_words) == (errors, words)
    assert (rep.total.sub, rep.total.dele, rep.total.ins) == (sub, dele, ins)

    sclite_utts, sclite_spk = _read_sclite(d / "result_wer.txt")
    assert len(sclite_utts) == len(refs)
    ours = {u.utt_id: (u.counts.sub, u.counts.dele, u.counts.ins) for u in rep.utterances}
    assert ours == sclite_utts  # every utterance's S/D/I split equals sclite's
    by_spk = rep.by_speaker()
    for s, counts in by_spk.items():
        snt, wrd, corr, sb, dl, ins_, err, _ = sclite_spk[s]
        assert (wrd, corr, sb, dl, ins_, err) == (
            counts.ref_words,
            counts.correct,
            counts.sub,
            counts.dele,
            counts.ins,
            counts.errors,
        )
    snt, wrd, *_rest, serr = sclite_spk["Sum"]
    assert (snt, serr) == (len(rep.utterances), rep.sentence_errors)
    assert "Sum/Avg" in rep.summary()


@pytest.mark.parametrize("name", ["dev_clean", "dev_other"])
def test_real_oracle_over_30_best(name):
    d = _set_dir(name)
    refs, _ = _read_trn(d / "references" / "ref_wer.trn")
    lists: dict[str, list[Hypothesis]] = {u: [] for u in refs}
    for k in range(1, 31):
        for u, words in _read_text(d / "raw_hypotheses" / f"{k}best_recog" / "text").items():
            lists[u].append(Hypothesis(tuple(words)))
    nb = NBest([NBestList(u, tuple(hs)) for u, hs in lists.items()])
    assert nb.num_hyps() == 30 * len(refs)

    start = time.perf_counter()
    errs = hypothesis_errors(nb, refs)
    elapsed = time.perf_counter() - start
    assert elapsed < 10.0, f"hypothesis_errors took {elapsed:.2f} s"
    one_best = score_corpus(refs, {u: hs[0].words for u, hs in lists.items()})
    assert sum(int(e[0]) for e in errs.values()) == one_best.total.errors

    res = oracle(nb, refs)
    errors, pct = EXPECTED_ORACLE[name]
    assert res.report.total.errors == errors
    assert f"{100 * res.report.wer:.2f}" == pct
    assert all(int(errs[u][k]) == int(errs[u].min()) for u, k in res.best_index.items())
