"""The LibriSpeech recipe's count of what previous-utterance context can reach."""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

from tests.paths import REPO


def results_module() -> ModuleType:
    path = REPO / "recipes" / "librispeech_nbest" / "local" / "results.py"
    spec = importlib.util.spec_from_file_location("librispeech_results", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_reach_counts_only_earlier_utterances_of_the_same_chapter() -> None:
    reach = results_module().reach_of_context
    refs = {
        "1-10-0000": ("catalina", "sat"),
        "1-10-0001": ("catalina", "ran"),  # 'catalina' wrong here; the 1-best had it before
        "1-10-0002": ("the", "gondola"),  # 'gondola' wrong here and only said later
        "1-10-0003": ("gondola", "went"),
        "2-20-0000": ("catalina", "went"),  # another chapter: nothing earlier
    }
    hyps = {
        "1-10-0000": ("catalina", "sat"),
        "1-10-0001": ("katalina", "ran"),
        "1-10-0002": ("the", "gondolas"),
        "1-10-0003": ("gondola", "went"),
        "2-20-0000": ("katalina", "went"),
    }
    nbest = {u: [h, refs[u]] for u, h in hyps.items()}  # the reference is in every list
    nbest["1-10-0001"] = [("catalina", "ran"), ("katalina", "ran")]  # first pass: correct
    got = reach(refs, hyps, nbest, 5)
    assert got["errors"] == 3 and got["long_errors"] == 3
    # catalina in 1-10-0001 (earlier first pass of its chapter): reachable; gondola in 1-10-0002
    # is said only after it; catalina in chapter 2 has no earlier utterance.
    assert got["in_first_pass"] == 1 and got["in_nbest_and_first_pass"] == 1
    assert got["in_references"] == 1 and got["long_in_first_pass"] == 1
    shorter = reach(refs, hyps, nbest, 9)  # 'catalina' has 8 letters
    assert shorter["long_errors"] == 0 and shorter["in_first_pass"] == 1


def test_held_out_names_books_or_sentences() -> None:
    held_out = results_module().held_out
    assert held_out({"split": [0.98, 0.02, 0.0], "plain_documents": "block"}) == (
        "2% of the books held out"
    )
    assert held_out({"split": [0.99, 0.01, 0.0]}) == "1% of the book sentences held out"


def test_context_rows_are_those_of_the_context_run_only() -> None:
    m = results_module()
    folders = {key: folder for key, _, folder in m.SYSTEMS}
    assert set(folders) >= m.CONTEXT_ROWS
    # the LSTM rows of LSTM=1 stay in a table written without --context
    assert not {"3L", "3M", "4L"} & m.CONTEXT_ROWS
    for key in m.CONTEXT_ROWS:
        assert any(w in folders[key] for w in ("context", "previous", "cache")), key


def test_row_4g_shows_with_either_context_flag_and_the_others_with_their_own() -> None:
    m = results_module()
    shown = {
        flags: {key for key, _, _ in m.SYSTEMS if m.row_shown(key, *flags)}
        for flags in ((False, False), (True, False), (False, True), (True, True))
    }
    assert {"3L", "4"} <= shown[(False, False)] and not {"4G", "4CG", "4UG"} & shown[(False, False)]
    assert {"4G", "4NG", "4CG"} <= shown[(True, False)] and "4UG" not in shown[(True, False)]
    assert {"4G", "4UG"} <= shown[(False, True)] and "4CG" not in shown[(False, True)]
    assert shown[(True, True)] == shown[(True, False)] | shown[(False, True)]


def test_backward_rows_show_with_their_flag_only() -> None:
    m = results_module()
    folders = {key: folder for key, _, folder in m.SYSTEMS}
    assert set(folders) >= m.BACKWARD_ROWS
    assert all("backward" in folders[key] for key in m.BACKWARD_ROWS)
    for flags in ((False, False), (True, False), (False, True), (True, True)):
        assert not m.BACKWARD_ROWS & {k for k in folders if m.row_shown(k, *flags)}
    shown = {k for k in folders if m.row_shown(k, True, False, True)}
    assert shown >= m.BACKWARD_ROWS | m.CONTEXT_ROWS and not shown & {"3U", "4UG"}


def test_wall_time_counts_a_stage_run_again_once_with_its_latest_time(tmp_path) -> None:
    (tmp_path / "times.tsv").write_text("ngram\t30\nscore_ctx\t80\ntune\t5\nscore_ctx\t300\n")
    got = results_module().wall_time(tmp_path)
    assert got == "335 s in all (ngram 30s, tune 5s, score_ctx 300s)"
    assert results_module().wall_time(tmp_path / "none") == "unknown"


def test_reference_perplexity_reads_each_column_on_the_same_references(tmp_path) -> None:
    import json
    import math

    import pytest

    def hyp(text: str, lm: float, ours: float, oov: float = 0.0) -> dict:
        return {"text": text, "scores": {"lm": lm, "nb": ours, "nb_oov": oov}}

    lists = [  # the reference second in the first list, so the 1-best is not what counts
        {"utt": "1-10-0000", "hyps": [hyp("a b", -1.0, -1.0), hyp("a c", -3.0, -6.0)]},
        {"utt": "1-10-0001", "hyps": [hyp("x", -9.0, -9.0)]},  # the reference is not there
        {"utt": "1-10-0002", "hyps": [hyp("d", -2.0, -5.0, oov=1.0)]},  # unknown to `nb`
        {"utt": "1-10-0003", "hyps": [hyp("e f g", -5.0, -3.0)]},
    ]
    scored = tmp_path / "dev_other.jsonl"
    scored.write_text("".join(json.dumps(x) + "\n" for x in lists))
    refs = {"1-10-0000": ("a", "c"), "1-10-0001": ("y",), "1-10-0002": ("d",),
            "1-10-0003": ("e", "f", "g")}  # fmt: skip
    got = results_module().reference_perplexity(scored, refs, ("lm", "nb"))
    assert (got.utterances, got.with_oov, got.tokens) == (2, 1, 3 + 4)
    assert got.ppl["lm"] == pytest.approx(math.exp(8.0 / 7))
    assert got.ppl["nb"] == pytest.approx(math.exp(9.0 / 7))
    alone = results_module().reference_perplexity(scored, refs, ("lm",))  # no `lm_oov` column
    assert (alone.utterances, alone.tokens) == (3, 9)
    assert alone.ppl["lm"] == pytest.approx(math.exp(10.0 / 9))
    with pytest.raises(ValueError, match="no score 'ctx'"):
        results_module().reference_perplexity(scored, refs, ("lm", "ctx"))


def test_margin_lines_say_which_way_the_context_mostly_moves_the_reference() -> None:
    margin = {"cases": 10, "mean": 0.1, "median_abs": 0.2, "median_margin": 5.0}
    margin |= {"weight": 0.4, "flips": 1}
    lines = results_module().margin_lines
    (up,) = lines({**margin, "toward": 6}, "3C0")
    (down,) = lines({**margin, "toward": 4}, "3C0")
    assert "toward the reference in 6 (60%" in up and "in general (perplexity)" in up
    assert "toward the reference in 4 (40%" in down and "about as often as the reference" in down
