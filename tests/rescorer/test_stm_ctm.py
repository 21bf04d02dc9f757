"""sclite stm references and ctm hypotheses (:mod:`rescorer.formats.sclite`), NeMo manifests
(:mod:`rescorer.formats.nemo`) and the refusal of files that look like another format.

The hand-made cases give their expected counts, derived by hand in the comments, under
sclite's rule (SCTK ``src/sclite/stm2ctm.c``, ``segment_hyp_for_utt``): a segment takes the next
ctm words of its channel whose midpoint is before its end; the channel's last segment takes the
rest. The parity tests write an stm and a ctm from the LibriSpeech references and 1-best
hypotheses and check that they score exactly as the trn and Kaldi texts do.
"""

from __future__ import annotations

import random
from fractions import Fraction
from pathlib import Path

import pytest

from rescorer.core.errors import InputError
from rescorer.formats import detect_format, nemo
from rescorer.formats.json_formats import read_json, read_jsonl
from rescorer.formats.sclite import read_ctm, read_stm, read_stm_ctm
from rescorer.formats.sniff import looks_like_ctm, looks_like_stm
from rescorer.refs import (
    detect_reference_format,
    read_hypothesis_text,
    read_kaldi_text,
    read_references,
    read_trn,
    read_utt2spk,
)
from rescorer.wer import ErrorCounts, score_corpus


def write(tmp_path: Path, name: str, content: str) -> Path:
    path = tmp_path / name
    path.write_text(content)
    return path


def counts(tmp_path: Path, stm: str, ctm: str) -> tuple[ErrorCounts, dict[str, ErrorCounts]]:
    """Total and per-speaker counts of a ctm against an stm."""
    cut = read_stm_ctm(write(tmp_path, "r.stm", stm), write(tmp_path, "h.ctm", ctm))
    report = score_corpus(cut.refs, cut.hyps, cut.speakers)
    return report.total, report.by_speaker()


def c(cor: int = 0, sub: int = 0, dele: int = 0, ins: int = 0) -> tuple[int, int, int, int]:
    return (cor, sub, dele, ins)


def csdi(e: ErrorCounts) -> tuple[int, int, int, int]:
    return (e.correct, e.sub, e.dele, e.ins)


# -- reading ---------------------------------------------------------------------------------


def test_read_stm_fields_label_comments(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "a.stm",
        ';; LABEL "O" "Overall" "All segments"\n'
        "\n"
        "f1 A spk1 0.10 2.03 <o,f0,male> uh huh yes\n"
        "** comment information\n"
        "f1 A spk1 2.10 3.04\n",
    )
    first, second = read_stm(path)
    assert (first.file, first.channel, first.speaker) == ("f1", "A", "spk1")
    assert (first.begin, first.end) == (Fraction("0.10"), Fraction("2.03"))
    assert first.labels == ("o", "f0", "male")
    assert first.words == ("uh", "huh", "yes")
    assert first.line == 3
    assert second.words == () and second.labels == () and not second.ignored
    assert read_stm(write(tmp_path, "i.stm", "f A s 0 1 ignore_time_segment_in_scoring\n"))[
        0
    ].ignored


def test_read_ctm_fields(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "a.ctm",
        ";;  comments\n7654 A 11.34 0.2 YES -6.763\n7654 A 12.00 0.34 YOU NA\n7654 B 1 .5 I\n",
    )
    yes, you, i = read_ctm(path)
    assert (yes.file, yes.channel, yes.word, yes.confidence, yes.line) == (
        "7654",
        "A",
        "YES",
        -6.763,
        2,
    )
    assert yes.midpoint == Fraction("11.44")
    assert you.confidence is None and i.confidence is None
    assert i.midpoint == Fraction("1.25")


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        ("f1 A spk1 0.0\n", "expected an stm segment"),
        ("f1 A spk1 zero 1.0 a\n", "begin time"),
        ("f1 A spk1 0 nan a\n", "end time"),
        ("f1 A spk1 2.0 1.0 a\n", "ends .* before it begins"),
        ("f1 A spk1 -1 1.0 a\n", "at least 0"),
        ("f1 A spk1 0 1 <o,f0 a\n", "expected a label"),
        ("f1 A spk1 0 1 i've { um / uh } so\n", "alternation"),
        ("f1 A spk1 0 1 i am a (farmer)\n", "optional word"),
        (";; only a comment\n", "no stm segments"),
    ],
)
def test_bad_stm_lines(tmp_path: Path, content: str, needle: str) -> None:
    path = write(tmp_path, "bad.stm", "f0 A s 0 1 ok\n" + content)
    if content.startswith(";;"):
        path = write(tmp_path, "bad.stm", content)
    with pytest.raises(InputError, match=needle) as info:
        read_stm(path)
    assert info.value.path == str(path)
    assert "\n" not in str(info.value)
    if not content.startswith(";;"):
        assert info.value.line == 2


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        ("f1 A 0.0 0.1\n", "expected a ctm word"),
        ("f1 A 0.0 0.1 w 0.9 x\n", "expected a ctm word"),
        ("f1 A x 0.1 w\n", "begin time"),
        ("f1 A 0.0 -0.1 w\n", "at least 0"),
        ("f1 A 0.0 inf w\n", "duration"),
        ("f1 A 0.0 0.1 w high\n", "confidence"),
        ("f1 A * * <ALT_BEGIN>\n", "begin time"),
        ("f1 A 0 1 <ALT_BEGIN>\n", "alternations"),
    ],
)
def test_bad_ctm_lines(tmp_path: Path, content: str, needle: str) -> None:
    path = write(tmp_path, "bad.ctm", "f0 A 0 1 ok\n" + content)
    with pytest.raises(InputError, match=needle) as info:
        read_ctm(path)
    assert (info.value.path, info.value.line) == (str(path), 2)
    assert "\n" not in str(info.value)


# -- sclite's rules, by hand ----------------------------------------------------------------


def test_ignore_time_segment_in_scoring(tmp_path: Path) -> None:
    # Segments [0,2) "a b", [2,4) ignored, [4,6) "c d". Midpoints: a .75, b 1.25 -> segment 1
    # (C=2); x 2.75, y 3.25 -> the ignored segment, dropped; c 4.75, e 5.25 -> segment 3
    # ("c d" against "c e": C=1 S=1). Total C=3 S=1 D=0 I=0 over 4 reference words.
    stm = (
        ";; a comment\n"
        "f1 A s1 0 2 a b\n"
        "f1 A s1 2 4 IGNORE_TIME_SEGMENT_IN_SCORING\n"
        "f1 A s1 4 6 c d\n"
    )
    ctm = (
        "f1 A 0.5 0.5 a\nf1 A 1.0 0.5 b\nf1 A 2.5 0.5 x\nf1 A 3.0 0.5 y\n"
        "f1 A 4.5 0.5 c\nf1 A 5.0 0.5 e\n"
    )
    total, _ = counts(tmp_path, stm, ctm)
    assert csdi(total) == c(3, 1, 0, 0) and total.ref_words == 4
    cut = read_stm_ctm(tmp_path / "r.stm", tmp_path / "h.ctm")
    assert list(cut.refs) == ["s1-000", "s1-001"]  # sclite's ids; the ignored one not counted
    assert (cut.ignored_segments, cut.dropped_words) == (1, 2)


def test_empty_segment_is_scored(tmp_path: Path) -> None:
    # [0,2) has no words: the hypothesis "uh" (midpoint 0.75) is an insertion (I=1);
    # [2,4) "yes" against "yes": C=1. Total C=1 I=1 over 1 reference word: WER 100 %.
    stm = "f1 A s1 0 2\nf1 A s1 2 4 yes\n"
    ctm = "f1 A 0.5 0.5 uh\nf1 A 2.5 0.5 yes\n"
    total, _ = counts(tmp_path, stm, ctm)
    assert csdi(total) == c(1, 0, 0, 1) and total.ref_words == 1


def test_two_channels_of_one_file(tmp_path: Path) -> None:
    # Both channels span [0,2); the words of A never go to B. A: "hello there" against
    # "hello there" (C=2); B: "hi you" against "hi me" (C=1 S=1). Speakers apart.
    stm = "f1 A spkA 0 2 hello there\nf1 B spkB 0 2 hi you\n"
    ctm = "f1 A 0.2 0.5 hello\nf1 B 0.2 0.5 hi\nf1 A 1.0 0.5 there\nf1 B 1.0 0.5 me\n"
    total, speakers = counts(tmp_path, stm, ctm)
    assert csdi(total) == c(3, 1, 0, 0)
    assert csdi(speakers["spkA"]) == c(2, 0, 0, 0)
    assert csdi(speakers["spkB"]) == c(1, 1, 0, 0)


def test_word_exactly_on_a_boundary_goes_to_the_next_segment(tmp_path: Path) -> None:
    # Segments [0,2) "a" and [2,4) "b". "b" spans 1.5..2.5: its midpoint is exactly 2.0, the
    # first segment's end; sclite closes a segment at the first word with midpoint >= end, so
    # "b" belongs to the second segment: C=2, no error. (Had it stayed in the first: I=1 there
    # and D=1 in the second.)
    stm = "f1 A s1 0 2 a\nf1 A s1 2 4 b\n"
    total, _ = counts(tmp_path, stm, "f1 A 0.5 0.5 a\nf1 A 1.5 1.0 b\n")
    assert csdi(total) == c(2, 0, 0, 0)
    # One hundredth earlier (midpoint 1.99) it is the first segment's: "a" against "a b" is
    # C=1 I=1, "b" against nothing D=1.
    total, _ = counts(tmp_path, stm, "f1 A 0.5 0.5 a\nf1 A 1.49 1.0 b\n")
    assert csdi(total) == c(1, 0, 1, 1)


def test_words_outside_every_segment(tmp_path: Path) -> None:
    # Segments [1,2) "a" and [3,4) "b". "x" (midpoint 0.1) is before the first segment: the
    # first segment takes it (C=1 I=1). "y" (midpoint 2.5) is in the gap: the next segment
    # takes it; "z" (midpoint 5.1) is after the last: the last segment takes it ("y b z"
    # against "b": C=1 I=2). Total C=2 I=3.
    stm = "f1 A s1 1 2 a\nf1 A s1 3 4 b\n"
    ctm = "f1 A 0.0 0.2 x\nf1 A 1.2 0.5 a\nf1 A 2.4 0.2 y\nf1 A 3.2 0.5 b\nf1 A 5.0 0.2 z\n"
    total, _ = counts(tmp_path, stm, ctm)
    assert csdi(total) == c(2, 0, 0, 3)


def test_gap_words_before_an_ignored_segment_are_dropped(tmp_path: Path) -> None:
    # [0,1) "a", [2,3) ignored. "y" (midpoint 1.5, in the gap) goes to the next segment, the
    # ignored one, and is dropped with it; so is "z" after the last (ignored) segment. C=1.
    stm = "f1 A s1 0 1 a\nf1 A s1 2 3 IGNORE_TIME_SEGMENT_IN_SCORING\n"
    ctm = "f1 A 0.2 0.5 a\nf1 A 1.4 0.2 y\nf1 A 4.0 0.2 z\n"
    total, _ = counts(tmp_path, stm, ctm)
    assert csdi(total) == c(1, 0, 0, 0) and total.ref_words == 1


def test_label_and_comments_are_not_words(tmp_path: Path) -> None:
    # The label <o,f0,male> is not a word and ';;' lines are comments: "the cat" against
    # "the cat", C=2.
    stm = ';; LABEL "O" "Overall" "All"\nf1 A s1 0 2 <o,f0,male> the cat\n;; end\n'
    ctm = ";; hypothesis\nf1 A 0.1 0.4 the\n;; more\nf1 A 0.6 0.4 cat 0.93\n"
    total, _ = counts(tmp_path, stm, ctm)
    assert csdi(total) == c(2, 0, 0, 0) and total.ref_words == 2


def test_unsorted_files_are_sorted_by_time(tmp_path: Path) -> None:
    # sclite requires files sorted by time; these are not: sorted, "a b" / "c" score C=3.
    stm = "f1 A s1 2 4 c\nf1 A s1 0 2 a b\n"
    ctm = "f1 A 2.5 0.5 c\nf1 A 1.0 0.5 b\nf1 A 0.5 0.5 a\n"
    total, _ = counts(tmp_path, stm, ctm)
    assert csdi(total) == c(3, 0, 0, 0)


def test_channel_without_words_is_deletions(tmp_path: Path) -> None:
    # Channel B has no ctm words: its two words are deletions (D=2); A is right (C=1).
    total, _ = counts(tmp_path, "f1 A s1 0 2 a\nf1 B s2 0 2 b c\n", "f1 A 0.5 0.5 a\n")
    assert csdi(total) == c(1, 0, 2, 0)


def test_ctm_channel_not_in_the_stm_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="file 'f2' channel 'A' has no segment") as info:
        counts(tmp_path, "f1 A s1 0 2 a\n", "f1 A 0.5 0.5 a\nf2 A 0.5 0.5 b\n")
    assert (info.value.path, info.value.line) == (str(tmp_path / "h.ctm"), 2)


# -- refusing what looks like another format -------------------------------------------------

STM = "f1 A spk1 0.0 2.0 the cat sat\nf1 A spk1 2.0 4.0 on the mat\n"
CTM = "f1 A 0.1 0.3 the\nf1 A 0.5 0.3 cat\n"
MANIFEST = (
    '{"audio_filepath": "/data/utt1.wav", "duration": 1.5, "text": "a b", "pred_text": "a c"}\n'
    '{"audio_filepath": "/data/utt2.flac", "text": "d", "pred_text": ""}\n'
)


def test_looks_like() -> None:
    assert looks_like_stm("f1 A spk1 0.0 2.0 the cat") and looks_like_stm("f A s 1 1")
    assert not looks_like_stm("f1 A spk1 2.0 1.0 the")  # ends before it begins
    assert not looks_like_stm("utt1 THE YEAR NINETEEN TEN")
    assert looks_like_ctm("f1 A 0.1 0.3 the") and looks_like_ctm("f1 A 0.1 0.3 the NA")
    assert not looks_like_ctm("f1 A 0.1 0.3 the cat")
    assert not looks_like_ctm("utt1 I nan inf words")


@pytest.mark.parametrize(
    ("content", "line", "needle"),
    [
        (
            STM,
            1,
            "sclite stm reference .*, not (Kaldi text|sclite trn): give --ref-format stm",
        ),
        (";; header\n" + STM, 2, "looks like an sclite stm reference"),
        (";; only comments\n", 1, "looks like sclite stm or ctm"),
        (CTM, 1, "looks like an sclite ctm hypothesis .*give it as --hyp with --hyp-format ctm"),
        ("f A 1 2.0 3.0\n", 1, "stm or ctm"),  # both shapes: both named
        (MANIFEST, 1, "looks like a NeMo manifest .*give --ref-format nemo"),
        ('{"utt": "u1", "hyps": []}\n', 1, "is a JSON line.*--nbest"),
    ],
)
def test_kaldi_or_trn_that_looks_like_another_format(
    tmp_path: Path, content: str, line: int, needle: str
) -> None:
    path = write(tmp_path, "refs", content)
    for read in (read_kaldi_text, read_trn, read_references):
        with pytest.raises(InputError, match=needle) as info:
            read(path)
        assert (info.value.path, info.value.line) == (str(path), line)
    with pytest.raises(InputError, match="--hyp|--nbest"):
        read_hypothesis_text(path, "kaldi")


def test_kaldi_text_with_numbers_is_still_kaldi(tmp_path: Path) -> None:
    # One line shaped like a ctm among ordinary ones is text, not a ctm.
    path = write(tmp_path, "text", "u1 IN 1 2 DAYS\nu2 THE CAT\n")
    assert read_references(path) == {"u1": ("IN", "1", "2", "DAYS"), "u2": ("THE", "CAT")}


def test_detect_by_name(tmp_path: Path) -> None:
    assert detect_reference_format(write(tmp_path, "x.stm", STM)) == "stm"
    assert detect_reference_format(write(tmp_path, "x.ctm", CTM)) == "ctm"
    assert detect_reference_format(write(tmp_path, "m.json", MANIFEST)) == "nemo"
    assert detect_reference_format(write(tmp_path, "m.jsonl", MANIFEST)) == "nemo"
    with pytest.raises(InputError, match="scored against a ctm hypothesis"):
        read_references(tmp_path / "x.stm")
    with pytest.raises(InputError, match="it is not a reference"):
        read_references(tmp_path / "x.ctm")
    with pytest.raises(ValueError, match="unknown reference format"):
        read_references(tmp_path / "x.stm", "sgml")


# -- NeMo manifests -------------------------------------------------------------------------


def test_manifest_references_and_hypotheses(tmp_path: Path) -> None:
    path = write(tmp_path, "m.json", MANIFEST)
    assert read_references(path) == {"utt1": ("a", "b"), "utt2": ("d",)}
    assert read_hypothesis_text(path) == {"utt1": ("a", "c"), "utt2": ()}
    assert nemo.read_manifest(path, "pred_text") == read_hypothesis_text(path, "nemo")
    keyed = write(
        tmp_path,
        "k.txt",
        '{"audio_filepath": "a/x.wav", "id": "u-1", "text": "a"}\n'
        '{"audio_filepath": "b/x.wav", "id": 7, "text": "b"}\n',
    )
    assert read_references(keyed, "nemo", id_key="id") == {"u-1": ("a",), "7": ("b",)}


@pytest.mark.parametrize(
    ("content", "kwargs", "line", "needle"),
    [
        (
            '{"audio_filepath": "a/x.wav", "text": "a"}\n'
            '{"audio_filepath": "b/x.flac", "text": "b"}\n',
            {},
            2,
            "duplicate utterance id 'x' \\(first on line 1; ids are the file stem.*--id-key",
        ),
        ('{"audio_filepath": "x.wav", "text": "a"}\n{"text": "b"}\n', {}, 2, "no 'audio_filepath'"),
        (
            '{"audio_filepath": "x.wav", "text": "a"}\n{"audio_filepath": "y.wav"}\n',
            {},
            2,
            "no 'text'",
        ),
        ('{"audio_filepath": "x.wav", "text": 3}\n', {}, 1, "text: expected a string"),
        ('{"audio_filepath": "", "text": "a"}\n', {}, 1, "has no file name"),
        ('{"audio_filepath": "x y.wav", "text": "a"}\n', {}, 1, "bad utterance id"),
        ('{"audio_filepath": "x.wav", "text": "a"\n', {}, 1, "invalid JSON"),
        ('["x.wav", "a"]\n', {}, 1, "expected a JSON object"),
        (
            '{"audio_filepath": "x.wav", "text": "a"}\n',
            {"id_key": "id"},
            1,
            "no 'id' \\(--id-key\\)",
        ),
        (
            '{"audio_filepath": "x.wav", "id": 1, "text": "a"}\n'
            '{"audio_filepath": "y.wav", "id": "1", "text": "b"}\n',
            {"id_key": "id"},
            2,
            "duplicate utterance id '1' .*--id-key id",
        ),
    ],
)
def test_bad_manifests(
    tmp_path: Path, content: str, kwargs: dict[str, str], line: int, needle: str
) -> None:
    path = write(tmp_path, "m.jsonl", content)
    with pytest.raises(InputError, match=needle) as info:
        read_references(path, "nemo", **kwargs)
    assert (info.value.path, info.value.line) == (str(path), line)
    assert "\n" not in str(info.value)


def test_manifest_is_not_an_nbest_set(tmp_path: Path) -> None:
    for name in ("m.json", "m.jsonl", "m.txt"):
        path = write(tmp_path, name, MANIFEST)
        with pytest.raises(InputError, match="not N-best lists: score it with `rescorer wer"):
            detect_format(path)
    with pytest.raises(InputError, match="not N-best lists") as info:
        read_jsonl(tmp_path / "m.json")
    assert info.value.line == 1
    with pytest.raises(InputError, match="not N-best lists"):
        read_json(tmp_path / "m.json")  # two lines: not one JSON document
    with pytest.raises(InputError, match="not N-best lists"):
        read_json(write(tmp_path, "one.json", MANIFEST.splitlines()[0]))


# -- parity with trn scoring on LibriSpeech -------------------------------------------------


def _write_stm_ctm(
    refs: dict[str, tuple[str, ...]],
    hyps: dict[str, tuple[str, ...]],
    spk: dict[str, str],
    stm: Path,
    ctm: Path,
    seed: int,
) -> dict[str, str]:
    """One stm segment per utterance, the utterances of a speaker one after the other in one
    file (channel 1), a 0.5 s gap between segments; the hypothesis words evenly spaced, one
    second each, over a segment of max(len(hyp), 1) seconds (every midpoint inside it). The ctm
    lines are shuffled (they are sorted on reading). Returns utterance -> segment name."""
    start: dict[str, Fraction] = {}
    count: dict[str, int] = {}
    names = {}
    stm_lines = [";; parity test: one segment per utterance\n"]
    ctm_lines = []
    for utt, ref in refs.items():
        speaker = spk[utt]
        file = f"{speaker}-audio"
        begin = start.get(file, Fraction(0))
        hyp = hyps[utt]
        end = begin + max(len(hyp), 1)
        stm_lines.append(f"{file} 1 {speaker} {float(begin)} {float(end)} {' '.join(ref)}\n")
        for j, word in enumerate(hyp):
            ctm_lines.append(f"{file} 1 {float(begin + j)} 1.0 {word} 0.9\n")
        start[file] = end + Fraction(1, 2)
        n = count.get(speaker, 0)
        count[speaker] = n + 1
        names[utt] = f"{speaker}-{n:03d}"
    random.Random(seed).shuffle(ctm_lines)
    stm.write_text("".join(stm_lines))
    ctm.write_text("".join(ctm_lines))
    return names


@pytest.mark.parametrize("subset", ["dev_clean", "dev_other"])
def test_parity_with_trn_scoring(espnet_dir: Path, tmp_path: Path, subset: str) -> None:
    base = espnet_dir / subset
    refs = read_trn(base / "references" / "ref_wer.trn")
    hyps = read_kaldi_text(base / "raw_hypotheses" / "1best_recog" / "text")
    spk = read_utt2spk(base / "utt2spk")
    expected = score_corpus(refs, hyps, spk)
    names = _write_stm_ctm(refs, hyps, spk, tmp_path / "r.stm", tmp_path / "h.ctm", seed=1)
    cut = read_stm_ctm(tmp_path / "r.stm", tmp_path / "h.ctm")
    assert cut.refs == {names[u]: refs[u] for u in refs}
    assert cut.hyps == {names[u]: hyps[u] for u in refs}
    got = score_corpus(cut.refs, cut.hyps, cut.speakers)
    assert csdi(got.total) == csdi(expected.total)
    assert got.total.ref_words == expected.total.ref_words
    assert {s: csdi(e) for s, e in got.by_speaker().items()} == {
        s: csdi(e) for s, e in expected.by_speaker().items()
    }
    per_utt = {u.utt_id: csdi(u.counts) for u in got.utterances}
    assert all(per_utt[names[u.utt_id]] == csdi(u.counts) for u in expected.utterances)
    if subset == "dev_clean":  # the sclite report of the set (result_wer.txt): 925 errors
        assert got.total.errors == 925
