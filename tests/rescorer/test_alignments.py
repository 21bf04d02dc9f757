"""Per-utterance alignments and confusion tables (``wer --align``), against sclite on real data."""

from __future__ import annotations

from pathlib import Path

import pytest

from rescorer.alignments import align_corpus
from rescorer.core.errors import InputError
from rescorer.refs import read_kaldi_text, read_trn, split_espnet_id
from rescorer.wer import ErrorCounts, score_corpus


def w(text: str) -> tuple[str, ...]:
    return tuple(text.split())


# u1: "a b c d" -> "a x c d e": b/x substituted, e inserted; u2: "e f g" -> "f g": e deleted;
# u3: "b b" -> "x x": b/x twice. 4 sub (3 of them b ==> x), 1 del, 1 ins over 9 words.
REFS = {"u1": w("a b c d"), "u2": w("e f g"), "u3": w("b b")}
HYPS = {"u3": w("x x"), "u1": w("a x c d e"), "u2": w("f g")}


def test_counts_tables_and_text() -> None:
    report = align_corpus(REFS, HYPS)
    assert [u.utt_id for u in report.utterances] == ["u1", "u2", "u3"]  # reference order
    assert report.total == ErrorCounts(sub=3, dele=1, ins=1, ref_words=9)
    assert report.confusion_pairs() == [(("b", "x"), 3)]
    assert report.deletions() == [("e", 1)]
    assert report.insertions() == [("e", 1)]
    text = report.render(["normalize: none"])
    assert text.startswith("# normalize: none\n\nid: u1\nScores: (#C #S #D #I) 3 1 0 1\n")
    assert "REF:  a b c d ***\nHYP:  a x c d e\nEval:   S     I\n" in text
    assert "REF:  e   f g\nHYP:  *** f g\nEval: D\n" in text
    assert (
        "CONFUSION PAIRS (REF ==> HYP): 3 substitutions, 1 pairs\n    1:      3  ->  b ==> x\n"
        in text
    )
    assert "DELETIONS (REF): 1 in all, 1 distinct\n    1:      1  ->  e\n" in text
    assert text.endswith("INSERTIONS (HYP): 1 in all, 1 distinct\n    1:      1  ->  e\n")


def test_ranking_most_frequent_first_then_string_order() -> None:
    refs = {"u": w("a b c d a b"), "v": w("z z")}
    hyps = {"u": w("x y c d x y"), "v": w("q z")}
    pairs = align_corpus(refs, hyps).confusion_pairs()
    assert pairs == [(("a", "x"), 2), (("b", "y"), 2), (("z", "q"), 1)]


def test_characters_and_errors() -> None:
    report = align_corpus({"u": w("ab cd")}, {"u": w("ab ce")}, unit="char")
    assert report.total == ErrorCounts(1, 0, 0, 5)  # a b <space> c d
    assert report.confusion_pairs() == [(("d", "e"), 1)]
    with pytest.raises(InputError, match=r"hypothesis ids do not match: 2 missing id\(s\): u2, u3"):
        align_corpus(REFS, {"u1": w("a")})
    with pytest.raises(ValueError, match="unit must be one of"):
        align_corpus(REFS, HYPS, unit="phone")
    with pytest.raises(ValueError, match="tie_break must be one of"):
        align_corpus(REFS, HYPS, tie_break="first")


def read_sclite_alignments(path: Path) -> dict[str, tuple[list[str], list[str]]]:
    """REF and HYP columns of each ``id:`` block of an sclite report (case folded, gaps '*')."""

    def cols(line: str) -> list[str]:
        return ["*" if set(t) == {"*"} else t.upper() for t in line[6:].split()]

    lines = path.read_text(encoding="utf-8").splitlines()
    out = {}
    for k, line in enumerate(lines):
        if line.startswith("id: ("):
            parts = split_espnet_id(line[5:-1])
            assert parts is not None
            assert lines[k + 2].startswith("REF:") and lines[k + 3].startswith("HYP:")
            out[parts[1]] = (cols(lines[k + 2]), cols(lines[k + 3]))
    return out


@pytest.mark.parametrize("name", ["dev_clean", "dev_other"])
def test_same_alignments_as_sclite_on_librispeech(espnet_dir: Path, name: str) -> None:
    """Every utterance is aligned word for word as ESPnet's sclite report aligns it, and the
    alignment's counts are the WER counts of that utterance."""
    root = espnet_dir / name
    refs = read_trn(root / "references" / "ref_wer.trn")
    hyps = read_kaldi_text(root / "raw_hypotheses" / "1best_recog" / "text")
    report = align_corpus(refs, hyps)
    sclite = read_sclite_alignments(root / "result_wer.txt")
    assert set(sclite) == set(refs)
    for u in report.utterances:
        ref_cols = ["*" if r is None else r for _, r, _ in u.alignment.ops]
        hyp_cols = ["*" if h is None else h for _, _, h in u.alignment.ops]
        assert (ref_cols, hyp_cols) == sclite[u.utt_id], u.utt_id
    counts = score_corpus(refs, hyps)
    assert [u.counts for u in counts.utterances] == [u.alignment.counts for u in report.utterances]
    assert report.total == counts.total
    assert report.total.errors == {"dev_clean": 925, "dev_other": 1840}[name]
    assert sum(n for _, n in report.confusion_pairs()) == report.total.sub
