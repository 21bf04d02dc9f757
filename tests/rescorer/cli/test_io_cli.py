"""Inputs and scoring options of the CLI (CliRunner): HyPoradise-style JSON and references
embedded in N-best files, --normalize, trn hypotheses (--hyp-format) and wer --align.

Expected numbers are counted by hand on small made-up data (comments next to each set); the
last tests check the real LibriSpeech lists when they are present.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rescorer.formats import read_nbest
from rescorer.refs import read_kaldi_text, read_utt2spk, write_trn
from tests.rescorer.cli.test_cli import (
    FIRST_PASS_LINE,
    ORACLE_LINE,
    TUNE_REFS,
    TUNE_UTTS,
    Factory,
    assert_input_error,
    assert_usage_error,
    read_jsonl,
    run,
    write,
)

pytestmark = pytest.mark.usefixtures("restore_logging")  # main reconfigures logging

# Three records as HyPoradise writes them (no ids: 000000, 000001, 000002). First hypotheses:
# a/the substituted (000000), word/world substituted (000001), correct (000002): 2 errors over
# 6 + 2 + 3 = 11 words; each list holds its reference, so the oracle makes none.
RECORDS = [
    {
        "instruction": "pick the best",
        "input": ["the cat sat on a mat", "the cat sat on the mat"],
        "output": "the cat sat on the mat",
        "score": [-1.0, -2.0],
    },
    {
        "instruction": "pick the best",
        "input": ["hello word", "hello world", "hullo world"],
        "output": "hello world",
        "score": [-1.0, -1.5, -3.0],
    },
    {
        "instruction": "pick the best",
        "input": ["good morning everyone"],
        "output": "good morning everyone",
        "score": [-0.5],
    },
]


def hyporadise(path: Path, records: list[dict]) -> Path:
    return write(path, json.dumps(records, indent=2))


@pytest.fixture()
def records_file(tmp_path: Path) -> Path:
    return hyporadise(tmp_path / "test_wsj.json", RECORDS)


def tune_records(normalize_me: bool = False) -> list[dict]:
    """TUNE_UTTS as hyporadise records with ids and decoder/ctc/lm score lists. With
    ``normalize_me`` the references are written in capitals with punctuation, which only a
    normaliser (lower,punct) brings back to the hypotheses' form."""
    out = []
    for utt, hyps in TUNE_UTTS:
        ref = TUNE_REFS[utt]
        if normalize_me:
            ref = ref.upper().replace(" ", ", ", 1) + "."
        out.append(
            {
                "id": utt,
                "input": [h[0] for h in hyps],
                "output": ref,
                "decoder": [h[1] for h in hyps],
                "ctc": [h[2] for h in hyps],
                "lm": [h[3] for h in hyps],
            }
        )
    return out


# -- references embedded in N-best files ------------------------------------------------------


def test_wer_one_best_and_oracle_from_hyporadise_without_ref(records_file: Path) -> None:
    result = run(["wer", "--nbest", records_file, "--oracle", "--no-summary"])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == [
        f"%WER 18.18 [ 2 / 11, 0 ins, 0 del, 2 sub ] {records_file} (first hypotheses)",
        "%WER 0.00 [ 0 / 11, 0 ins, 0 del, 0 sub ] oracle over 3-best",
    ]


def test_ref_wins_over_embedded_references(tmp_path: Path, records_file: Path) -> None:
    # This reference of 000000 is its first hypothesis: only word/world is left, 1 of 11.
    ref = write(
        tmp_path / "ref.trn",
        "the cat sat on a mat\t(000000)\nhello world\t(000001)\ngood morning everyone\t(000002)\n",
    )
    result = run(["wer", "--nbest", records_file, "--ref", ref, "--no-summary"])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == [
        f"%WER 9.09 [ 1 / 11, 0 ins, 0 del, 1 sub ] {records_file} (first hypotheses)"
    ]


def test_no_references_anywhere_is_the_usual_error(tmp_path: Path) -> None:
    bare = hyporadise(tmp_path / "bare.json", [{"input": ["a b"]}, {"input": ["c"]}])
    for args in (
        ["wer", "--nbest", bare],
        ["tune", "--nbest", bare, "--out", tmp_path / "w.json"],
    ):
        assert_usage_error(run(args), "give --ref", f"{bare} hold no references")
    assert_usage_error(run(["wer", "--hyp", write(tmp_path / "h.txt", "u a\n")]), "--ref")
    assert not (tmp_path / "w.json").exists()


def test_embedded_references_must_cover_every_utterance(tmp_path: Path) -> None:
    lists = write(
        tmp_path / "x.jsonl",
        '{"utt": "a", "hyps": [{"text": "x"}], "ref": "x"}\n'
        '{"utt": "b", "hyps": [{"text": "y"}]}\n',
    )
    assert_input_error(
        run(["wer", "--nbest", lists]),
        f"{lists}: embedded reference ids do not match: 1 missing id(s): b",
    )


def test_hyporadise_errors_are_one_line(tmp_path: Path) -> None:
    bad = write(tmp_path / "bad.json", '[\n{"input": ["a"]},\n{"input": ["b"], "score": [1, 2]}\n]')
    assert_input_error(run(["wer", "--nbest", bad]), f"{bad}:3: record 1: 'score' has 2 values")


def test_tune_and_rescore_with_embedded_references(tmp_path: Path) -> None:
    dev = hyporadise(tmp_path / "dev.json", tune_records())
    weights = tmp_path / "w.json"
    result = run(["tune", "--nbest", dev, "--features", "decoder,lm", "--out", weights])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[0] == "initial %WER 25.00 [ 6 / 24 ]"
    assert result.output.splitlines()[1].startswith("tuned   %WER 4.17 [ 1 / 24 ]")
    meta = json.loads(weights.read_text(encoding="utf-8"))["meta"]
    assert meta["ref"] == f"{dev} (embedded)" and meta["normalize"] == "none"

    out = tmp_path / "out"
    result = run(["rescore", "--nbest", dev, "--weights", weights, "--out", out])
    assert result.exit_code == 0, result.output
    assert f"{FIRST_PASS_LINE} first pass" in result.output.splitlines()
    assert f"{ORACLE_LINE} rescored" in result.output.splitlines()
    assert f"{ORACLE_LINE} rescored" in (out / "wer.txt").read_text(encoding="utf-8")
    rows = read_jsonl(out / "nbest.jsonl")
    assert rows[0]["ref"] == TUNE_REFS["spk-1"]  # the references travel with the lists


def test_convert_embeds_references(tmp_path: Path, espnet_factory: Factory) -> None:
    dev = espnet_factory("dev", TUNE_UTTS, TUNE_REFS)
    ref = dev / "references" / "ref_wer.trn"
    out = tmp_path / "dev.json"
    result = run(["convert", "--nbest", dev, "--ref", ref, "--to", "hyporadise", "--out", out])
    assert result.exit_code == 0, result.output
    nb = read_nbest(out)
    assert nb.references == {u: tuple(t.split()) for u, t in TUNE_REFS.items()}
    assert [h.scores["lm"] for h in nb["spk-2"]] == [-6.0, -2.0]
    result = run(["wer", "--nbest", out, "--oracle", "--no-summary"])
    assert result.output.splitlines() == [
        f"{FIRST_PASS_LINE} {out} (first hypotheses)",
        f"{ORACLE_LINE} oracle over 3-best",
    ]
    assert_usage_error(
        run(["convert", "--nbest", dev, "--ref", ref, "--to", "kaldi", "--out", tmp_path / "k"]),
        "the kaldi format has no place for references",
    )
    wrong = write(tmp_path / "wrong.trn", "a\t(x)\n")
    assert_input_error(
        run(["convert", "--nbest", dev, "--ref", wrong, "--to", "jsonl", "--out", out]),
        "reference ids do not match",
    )


# -- --normalize --------------------------------------------------------------------------------


@pytest.fixture()
def messy(tmp_path: Path) -> tuple[Path, Path]:
    """ref ``Hello, World! It's well-known.`` (4 raw words), hyp ``hello world its well known``.

    raw: 4 substitutions + 1 insertion = 5 errors over 4 words; lower,punct: it's/its and
    wellknown/well substituted, known inserted: 3 over 4; hyphen,punct,lower and english:
    it's/its only, 1 over 5 (english keeps 's).
    """
    ref = write(tmp_path / "ref.trn", "Hello, World! It's well-known.\t(u1)\n")
    hyp = write(tmp_path / "hyp.txt", "u1 hello world its well known\n")
    return ref, hyp


@pytest.mark.parametrize(
    ("spec", "line"),
    [
        ("none", "%WER 125.00 [ 5 / 4, 1 ins, 0 del, 4 sub ]"),
        ("lower,punct", "%WER 75.00 [ 3 / 4, 1 ins, 0 del, 2 sub ]"),
        ("punct,lower,hyphen", "%WER 20.00 [ 1 / 5, 0 ins, 0 del, 1 sub ]"),
        ("english", "%WER 20.00 [ 1 / 5, 0 ins, 0 del, 1 sub ]"),
        ("upper,hyphen,punct", "%WER 20.00 [ 1 / 5, 0 ins, 0 del, 1 sub ]"),
    ],
)
def test_wer_normalize(messy: tuple[Path, Path], spec: str, line: str) -> None:
    ref, hyp = messy
    result = run(["wer", "--ref", ref, "--hyp", hyp, "--normalize", spec])
    assert result.exit_code == 0, result.output
    canonical = {
        "lower,punct": "punct,lower",
        "punct,lower,hyphen": "hyphen,punct,lower",
        "upper,hyphen,punct": "hyphen,punct,upper",
    }
    tag = "" if spec == "none" else f" (normalize: {canonical.get(spec, spec)})"
    assert result.output.splitlines()[-1] == f"{line} {hyp}{tag}"


def test_wer_normalize_compare_and_bad_spec(messy: tuple[Path, Path], tmp_path: Path) -> None:
    ref, hyp = messy
    other = write(tmp_path / "b.txt", "u1 HELLO WORLD IT'S WELL KNOWN\n")
    result = run(["wer", "--ref", ref, "--hyp", hyp, "--compare", other, "--normalize", "english"])
    assert result.exit_code == 0, result.output
    assert f"%WER 0.00 [ 0 / 5, 0 ins, 0 del, 0 sub ] {other} (normalize: english)" in result.output
    table = tmp_path / "utt.txt"
    result = run(["wer", "--ref", ref, "--hyp", hyp, "--per-utt", table, "--normalize", "english"])
    assert result.exit_code == 0, result.output
    lines = table.read_text(encoding="utf-8").splitlines()
    assert lines[0] == "# normalize: english"
    assert lines[2].split() == ["u1", "-", "5", "4", "1", "0", "0", "1", "20.00"]
    assert_usage_error(
        run(["wer", "--ref", ref, "--hyp", hyp, "--normalize", "lowercase"]),
        "unknown text normaliser 'lowercase'",
    )
    assert_usage_error(
        run(["wer", "--ref", ref, "--hyp", hyp, "--normalize", "english,lower"]), "stand alone"
    )


def test_tune_rescore_score_normalize(tmp_path: Path, tiny_arpa: Path) -> None:
    dev = hyporadise(tmp_path / "dev.json", tune_records(normalize_me=True))
    weights = tmp_path / "w.json"
    args = ["tune", "--nbest", dev, "--features", "decoder,lm", "--out", weights]
    raw = run(args)  # capitals and commas: every first hypothesis is wrong, even the oracle
    assert raw.exit_code == 0 and raw.output.splitlines()[0] == "initial %WER 100.00 [ 24 / 24 ]"
    result = run([*args, "--normalize", "lower,punct"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0] == "initial %WER 25.00 [ 6 / 24 ] (normalize: punct,lower)"
    assert lines[1].startswith("tuned   %WER 4.17 [ 1 / 24 ]") and lines[1].endswith(
        "(normalize: punct,lower)"
    )
    assert json.loads(weights.read_text(encoding="utf-8"))["meta"]["normalize"] == "punct,lower"

    out = tmp_path / "out"
    rescore = ["rescore", "--nbest", dev, "--weights", weights, "--out", out]
    result = run([*rescore, "--normalize", "lower,punct"])
    assert result.exit_code == 0, result.output
    assert f"{ORACLE_LINE} rescored (normalize: punct,lower)" in result.output.splitlines()
    assert f"{ORACLE_LINE} rescored (normalize: punct,lower)" in (out / "wer.txt").read_text()
    assert read_jsonl(out / "nbest.jsonl")[0]["ref"] == TUNE_REFS["spk-1"]  # normalised
    result = run(rescore)
    assert "was tuned with --normalize punct,lower, this rescoring uses none" in result.output

    # score: the models score the normalised words. Upper-case "A B" is out of the tiny
    # model's vocabulary with --lm-case none, "a b" is in it.
    lists = hyporadise(tmp_path / "ab.json", [{"id": "u", "input": ["A B"], "output": "A, B"}])
    scored = tmp_path / "s.jsonl"
    base = ["score", "--nbest", lists, "--lm", f"x=kenlm:{tiny_arpa}", "--lm-case", "none"]
    assert run([*base, "--out", scored]).exit_code == 0
    assert read_jsonl(scored)[0]["hyps"][0]["scores"]["x_oov"] == 2
    result = run([*base, "--out", scored, "--normalize", "lower,punct"])
    assert result.exit_code == 0, result.output
    assert result.output.strip().endswith("(normalize: punct,lower)")
    (row,) = read_jsonl(scored)
    assert row["hyps"][0]["text"] == "a b" and row["ref"] == "a b"
    assert row["hyps"][0]["scores"]["x_oov"] == 0


# -- trn hypotheses and --align ----------------------------------------------------------------


@pytest.fixture()
def trn_pair(tmp_path: Path) -> tuple[Path, Path]:
    """ESPnet-style trn files; u1: ``he b c d`` -> ``he x c d e`` (1 sub, 1 ins), u2:
    ``he f g`` -> ``he g`` (1 del): 3 errors over 7 words. Every hypothesis line starts with
    the same word, which a Kaldi reading takes for a repeated utterance id."""
    ref = write(tmp_path / "ref.trn", "he b c d\t(s-s-u1)\nhe f g\t(s-s-u2)\n")
    hyp = write(tmp_path / "hyp", "he x c d e\t(s-s-u1)\nhe g\t(s-s-u2)\n")
    return ref, hyp


def test_wer_reads_trn_hypotheses(trn_pair: tuple[Path, Path], tmp_path: Path) -> None:
    ref, hyp = trn_pair
    line = f"%WER 42.86 [ 3 / 7, 1 ins, 1 del, 1 sub ] {hyp}"
    for fmt in ("auto", "trn"):
        result = run(["wer", "--ref", ref, "--hyp", hyp, "--hyp-format", fmt, "--no-summary"])
        assert result.exit_code == 0, result.output
        assert result.output.splitlines() == [line]
    assert_input_error(
        run(["wer", "--ref", ref, "--hyp", hyp, "--hyp-format", "kaldi"]),
        f"{hyp}:2: duplicate utterance id 'he' (first on line 1)",
    )
    kaldi = write(tmp_path / "b.txt", "s-u1 he b c d\ns-u2 he f g\n")  # --compare, other format
    result = run(["wer", "--ref", ref, "--hyp", hyp, "--compare", kaldi])
    assert result.exit_code == 0, result.output
    assert f"%WER 0.00 [ 0 / 7, 0 ins, 0 del, 0 sub ] {kaldi}" in result.output


def test_wer_align(trn_pair: tuple[Path, Path], tmp_path: Path) -> None:
    ref, hyp = trn_pair
    pra = tmp_path / "out" / "hyp.pra"
    result = run(["wer", "--ref", ref, "--hyp", hyp, "--align", pra, "--no-summary"])
    assert result.exit_code == 0, result.output
    assert pra.read_text(encoding="utf-8") == (
        f"# %WER 42.86 [ 3 / 7, 1 ins, 1 del, 1 sub ] {hyp}\n"
        "# normalize: none\n"
        "\n"
        "id: s-u1\n"
        "Scores: (#C #S #D #I) 3 1 0 1\n"
        "REF:  he b c d ***\n"
        "HYP:  he x c d e\n"
        "Eval:    S     I\n"
        "\n"
        "id: s-u2\n"
        "Scores: (#C #S #D #I) 2 0 1 0\n"
        "REF:  he f   g\n"
        "HYP:  he *** g\n"
        "Eval:    D\n"
        "\n"
        "CONFUSION PAIRS (REF ==> HYP): 1 substitutions, 1 pairs\n"
        "    1:      1  ->  b ==> x\n"
        "\n"
        "DELETIONS (REF): 1 in all, 1 distinct\n"
        "    1:      1  ->  f\n"
        "\n"
        "INSERTIONS (HYP): 1 in all, 1 distinct\n"
        "    1:      1  ->  e\n"
    )
    assert sorted(p.name for p in pra.parent.iterdir()) == ["hyp.pra"]  # no temporary left


def test_wer_align_nbest_normalized_and_cer(records_file: Path, tmp_path: Path) -> None:
    pra = tmp_path / "a.pra"
    result = run(["wer", "--nbest", records_file, "--align", pra, "--normalize", "upper"])
    assert result.exit_code == 0, result.output
    text = pra.read_text(encoding="utf-8")
    assert "# normalize: upper\n" in text
    assert (
        "id: 000001\nScores: (#C #S #D #I) 1 1 0 0\nREF:  HELLO WORLD\nHYP:  HELLO WORD\n" in text
    )
    assert "    1:      1  ->  THE ==> A\n    2:      1  ->  WORLD ==> WORD\n" in text
    result = run(["wer", "--nbest", records_file, "--align", pra, "--cer"])
    assert result.exit_code == 0, result.output
    assert (  # hello world -> hello word: l deleted
        "Scores: (#C #S #D #I) 10 0 1 0\n"
        "REF:  h e l l o <space> w o r l   d\n"
        "HYP:  h e l l o <space> w o r *** d\n"
        "Eval:                         D\n"
    ) in pra.read_text(encoding="utf-8")


# -- real data ----------------------------------------------------------------------------------


def test_real_hyporadise_list_without_ref(espnet_dir: Path, tmp_path: Path) -> None:
    """dev_other converted to a HyPoradise-style file with its references: the README's
    1-best and oracle figures straight from the file, then normalised."""
    dev = espnet_dir / "dev_other"
    records = tmp_path / "dev_other.json"
    ref = dev / "references" / "ref_wer.trn"
    convert = ["convert", "--nbest", dev, "--ref", ref, "--to", "hyporadise", "--out", records]
    assert run(convert).exit_code == 0
    result = run(["wer", "--nbest", records, "--oracle", "--no-summary"])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == [
        f"%WER 3.61 [ 1840 / 50948, 160 ins, 155 del, 1525 sub ] {records} (first hypotheses)",
        "%WER 1.76 [ 899 / 50948, 63 ins, 56 del, 780 sub ] oracle over 30-best",
    ]
    result = run(["wer", "--nbest", records, "--oracle", "--no-summary", "--normalize", "english"])
    assert result.output.splitlines() == [
        f"%WER 3.54 [ 1813 / 51227, 165 ins, 150 del, 1498 sub ] {records} (first hypotheses)"
        " (normalize: english)",
        "%WER 1.75 [ 897 / 51227, 64 ins, 59 del, 774 sub ] oracle over 30-best"
        " (normalize: english)",
    ]


def test_real_trn_hypotheses_and_alignment(espnet_dir: Path, tmp_path: Path) -> None:
    """An ESPnet-style hyp.trn of dev_clean (ids (speaker-utterance), 'HE' starting many
    lines): read as trn, scored as the Kaldi 1-best text is, and aligned with the same counts."""
    dev = espnet_dir / "dev_clean"
    hyp = tmp_path / "hyp.trn"
    write_trn(hyp, read_kaldi_text(dev / "raw_hypotheses" / "1best_recog" / "text"),
              read_utt2spk(dev / "utt2spk"))  # fmt: skip
    pra = tmp_path / "hyp.pra"
    args = ["wer", "--ref", dev / "references" / "ref_wer.trn", "--hyp", hyp, "--no-summary"]
    result = run([*args, "--align", pra])
    assert result.exit_code == 0, result.output
    assert result.output == f"%WER 1.70 [ 925 / 54402, 92 ins, 86 del, 747 sub ] {hyp}\n"
    text = pra.read_text(encoding="utf-8")
    assert text.count("\nid: ") == 2703
    assert "CONFUSION PAIRS (REF ==> HYP): 747 substitutions" in text
    assert "DELETIONS (REF): 86 in all" in text and "INSERTIONS (HYP): 92 in all" in text
    scores = [line.split()[-4:] for line in text.splitlines() if line.startswith("Scores:")]
    assert sum(int(s[1]) + int(s[2]) + int(s[3]) for s in scores) == 925
    assert "REF:  NOR IS MISTER QUILTER'S MANNER LESS INTERESTING THAN HIS MATTER\n" in text
    assert_input_error(run([*args, "--hyp-format", "kaldi"]), "duplicate utterance id 'HE'")
