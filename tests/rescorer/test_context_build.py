"""Context files from the system's own text of the previous utterances (issue 16, item 1)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from rescorer.context_build import ContextBuildOptions, build_contexts, utt_place, write_contexts
from rescorer.contexts import read_contexts
from tests.conftest import write_espnet_set
from tests.rescorer.cli.test_cli import assert_input_error, run


def chapter_texts() -> dict[str, tuple[str, ...]]:
    """Two chapters of one speaker and one of another; each 1-best names its utterance."""
    ids = [f"11-100-{i:04d}" for i in range(5)] + [f"11-200-{i:04d}" for i in range(3)]
    ids += [f"22-300-{i:04d}" for i in (0, 1, 2, 10)]  # 10 after 2: numbers compare as numbers
    return {u: (f"W{u.replace('-', '_')}",) for u in ids}


def words_of(record: dict[str, str]) -> list[str]:
    return record.get("previous", "").split()


def test_previous_utterances_of_the_same_recording_only_and_in_order() -> None:
    texts = chapter_texts()
    ctx = build_contexts(texts, ContextBuildOptions(previous=2))
    assert "previous" not in ctx["11-100-0000"]  # a recording's first utterance: missing
    assert words_of(ctx["11-100-0001"]) == ["W11_100_0000"]
    assert words_of(ctx["11-100-0004"]) == [
        "W11_100_0002",
        "W11_100_0003",
    ]  # the last 2, oldest first
    assert "previous" not in ctx["11-200-0000"]  # a new chapter of the same speaker starts afresh
    assert words_of(ctx["22-300-0010"]) == ["W22_300_0001", "W22_300_0002"]
    assert ctx["22-300-0002"]["speaker"] == "22" and ctx["22-300-0002"]["recording"] == "22-300"
    assert list(ctx) == list(texts)  # the input's order


def test_no_look_ahead_whatever_the_order_of_the_input() -> None:
    texts = chapter_texts()
    items = list(texts.items())
    random.Random(0).shuffle(items)
    ctx = build_contexts(dict(items), ContextBuildOptions(previous=50))
    for utt, record in ctx.items():
        here = utt_place(utt)
        for word in words_of(record):
            other = word[1:].replace("_", "-")  # the utterance this word came from
            there = utt_place(other)
            assert there.recording == here.recording and there.position < here.position
    # and everything earlier is there: a recording's k-th utterance sees k earlier ones
    assert len(words_of(ctx["11-100-0004"])) == 4 and len(words_of(ctx["22-300-0010"])) == 3


def test_grouping_by_speaker_runs_across_that_speaker_s_recordings() -> None:
    ctx = build_contexts(chapter_texts(), ContextBuildOptions(previous=2, group_by="speaker"))
    assert words_of(ctx["11-200-0000"]) == ["W11_100_0003", "W11_100_0004"]
    assert "previous" not in ctx["22-300-0000"]
    chapter = build_contexts(chapter_texts(), ContextBuildOptions(group_by="chapter"))
    assert chapter == build_contexts(chapter_texts(), ContextBuildOptions(group_by="recording"))


def test_a_cache_field_spans_more_utterances_beside_the_previous_ones() -> None:
    texts = chapter_texts()
    ctx = build_contexts(texts, ContextBuildOptions(previous=1, cache=3))
    alone = build_contexts(texts, ContextBuildOptions(previous=1))
    for utt, record in ctx.items():
        assert record.get("previous") == alone[utt].get("previous")  # unchanged by the cache
        assert {k: v for k, v in record.items() if k != "cache"} == alone[utt]
    assert "cache" not in ctx["11-100-0000"]
    assert ctx["11-100-0004"]["cache"].split("\n") == [
        "W11_100_0001",
        "W11_100_0002",
        "W11_100_0003",
    ]
    assert ctx["11-100-0004"]["previous"] == "W11_100_0003"
    named = build_contexts(texts, ContextBuildOptions(previous=1, cache=2, cache_field="chapter"))
    assert named["11-100-0004"]["chapter"] == "W11_100_0002\nW11_100_0003"


def test_options_and_ids_are_checked() -> None:
    with pytest.raises(ValueError, match="cache must be an integer >= 0"):
        ContextBuildOptions(cache=-1)
    with pytest.raises(ValueError, match="cache_field must be a name other than"):
        ContextBuildOptions(cache=5, cache_field="previous")
    with pytest.raises(ValueError, match="previous must be an integer >= 1"):
        ContextBuildOptions(previous=0)
    with pytest.raises(ValueError, match="group_by must be one of"):
        ContextBuildOptions(group_by="file")
    with pytest.raises(ValueError, match="expected speaker-recording-position"):
        build_contexts({"utt1": ("a",)})


def test_written_file_reads_back(tmp_path: Path) -> None:
    ctx = build_contexts(chapter_texts(), ContextBuildOptions(previous=1, metadata=False))
    write_contexts(tmp_path / "c.jsonl", ctx)
    assert read_contexts(tmp_path / "c.jsonl") == ctx
    assert ctx["11-100-0000"] == {}


def nbest_set(root: Path) -> Path:
    # first hypotheses "first N", second "second N"; references "ref N" never used
    utts = [
        (f"7-70-{i:04d}", [(f"first {i}", -1.0, -1.0, -1.0), (f"second {i}", -2.0, -2.0, -2.0)])
        for i in range(4)
    ]
    return write_espnet_set(root, utts, {u: f"ref {u}" for u, _ in utts})


def test_cli_first_pass_and_rescored(tmp_path: Path) -> None:
    nbest = nbest_set(tmp_path / "dev")
    out = tmp_path / "ctx.jsonl"
    result = run(["context", "build", "--nbest", nbest, "--previous", "2", "--out", out])
    assert result.exit_code == 0, result.output
    summary = f"wrote {out}: 4 utterances, 3 with previous text, 1 recording(s)"
    assert result.output.strip() == summary
    ctx = read_contexts(out)
    # the list's first hypotheses, one line per utterance (a history model reads them apart)
    assert ctx["7-70-0003"]["previous"] == "first 1\nfirst 2"
    assert "ref" not in out.read_text(encoding="utf-8")
    one_best = tmp_path / "rescored"
    one_best.mkdir()
    (one_best / "1best.txt").write_text(
        "".join(f"7-70-{i:04d} second {i}\n" for i in range(4)), encoding="utf-8"
    )
    result = run(["context", "build", "--nbest", nbest, "--from", one_best, "--out", out])
    assert result.exit_code == 0, result.output
    assert read_contexts(out)["7-70-0003"]["previous"] == "second 0\nsecond 1\nsecond 2"


def test_cli_bad_input(tmp_path: Path) -> None:
    nbest = nbest_set(tmp_path / "dev")
    out = tmp_path / "ctx.jsonl"
    result = run(["context", "build", "--nbest", nbest, "--from", tmp_path / "nope", "--out", out])
    # one line naming the missing path, exit 2 (the input layer's check, before anything runs)
    assert result.exit_code == 2 and "nope: file not found" in result.output
    assert "Traceback" not in result.output and "Usage:" not in result.output
    partial = tmp_path / "1best.txt"
    partial.write_text("7-70-0000 a\n", encoding="utf-8")
    result = run(["context", "build", "--nbest", nbest, "--from", partial, "--out", out])
    assert_input_error(result, "1best.txt", "ids do not match")
    assert not out.exists()  # nothing half-written
    odd = tmp_path / "odd.jsonl"
    odd.write_text('{"utt": "x", "hyps": [{"text": "a", "scores": {"s": 1}}]}\n')
    result = run(["context", "build", "--nbest", odd, "--out", out])
    assert_input_error(result, "odd.jsonl", "utterance id 'x'", "speaker-recording-position")
    assert not out.exists()
