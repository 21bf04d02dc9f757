"""SRILM parity for N-best work (issue 18 item 4), through the command line.

Noise words (``--noise-words``, SRILM's ``-noise-vocab``), references with extra ids
(``--allow-extra-refs``), posterior (MBR) decoding (``--objective posterior``) and extra score
directories (``--extra-scores NAME=DIR``, SRILM's score directories). Every expected count is
worked out by hand in the comments.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from tests.rescorer.cli.test_cli import (
    Factory,
    assert_input_error,
    assert_usage_error,
    read_jsonl,
    run,
    wer_lines,
    write,
    write_weights,
)

pytestmark = pytest.mark.usefixtures("restore_logging")  # main reconfigures logging

# -- noise words --------------------------------------------------------------------------------

# u1: ref "a <noise> b c" vs hyp "a b c [laugh]": <noise> deleted, [laugh] inserted (2 errors,
#     4 words); without the noise words "a b c" vs "a b c": 0 errors over 3 words.
# u2: ref "d e" vs hyp "d <noise> f": <noise> inserted, e -> f (2 errors, 2 words); without the
#     noise words "d e" vs "d f": 1 substitution over 2 words.
# Raw: 4 errors / 6 words (2 ins, 1 del, 1 sub); noise words deleted: 1 / 5 (1 sub).
NOISE = "<noise>\n\n[laugh]\n"
RAW_LINE = "%WER 66.67 [ 4 / 6, 2 ins, 1 del, 1 sub ]"
NOISELESS_LINE = "%WER 20.00 [ 1 / 5, 0 ins, 0 del, 1 sub ]"


@pytest.fixture()
def noisy(tmp_path: Path) -> tuple[Path, Path, Path]:
    ref = write(tmp_path / "ref.trn", "a <noise> b c\t(u1)\nd e\t(u2)\n")
    hyp = write(tmp_path / "hyp.txt", "u1 a b c [laugh]\nu2 d <noise> f\n")
    noise = write(tmp_path / "noise.txt", NOISE)
    return ref, hyp, noise


def test_wer_noise_words_deleted_from_both_sides(noisy: tuple[Path, Path, Path]) -> None:
    ref, hyp, noise = noisy
    result = run(["wer", "--ref", ref, "--hyp", hyp, "--no-summary"])
    assert wer_lines(result.output) == [f"{RAW_LINE} {hyp}"]
    result = run(["wer", "--ref", ref, "--hyp", hyp, "--no-summary", "--noise-words", noise])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == [f"{NOISELESS_LINE} {hyp} (noise words: {noise})"]


def test_wer_noise_words_on_nbest_oracle_and_tables(
    tmp_path: Path, noisy: tuple[Path, Path, Path], espnet_factory: Factory
) -> None:
    ref, _, noise = noisy
    # The first hypotheses are those of `noisy`; the second ones, "a b c" (raw, the reference's
    # <noise> deleted; 0 without noise words) and "d <noise> e" (1 insertion, 0 without), make
    # the oracle 2 / 6 raw (1 del, 1 ins) and 0 / 5 without noise words.
    nbest = espnet_factory(
        "set",
        [
            ("u1", [("a b c [laugh]", -1.0, -1.0, -1.0), ("a b c", -2.0, -2.0, -2.0)]),
            ("u2", [("d <noise> f", -1.0, -1.0, -1.0), ("d <noise> e", -2.0, -2.0, -2.0)]),
        ],
    )
    per_utt = tmp_path / "per_utt.txt"
    align = tmp_path / "a.pra"
    args = ["wer", "--ref", ref, "--nbest", nbest, "--oracle", "--no-summary"]
    result = run([*args, "--noise-words", noise, "--per-utt", per_utt, "--align", align])
    assert result.exit_code == 0, result.output
    assert wer_lines(result.output) == [
        f"{NOISELESS_LINE} {nbest} (first hypotheses) (noise words: {noise})",
        f"%WER 0.00 [ 0 / 5, 0 ins, 0 del, 0 sub ] oracle over 2-best (noise words: {noise})",
    ]
    assert wer_lines(run(args).output)[1].startswith("%WER 33.33 [ 2 / 6, 1 ins, 1 del, 0 sub ]")
    assert per_utt.read_text().splitlines()[0] == f"# noise words: {noise}"
    pra = align.read_text()
    assert f"# noise words: {noise}" in pra.splitlines()
    assert "<noise>" not in pra and "[laugh]" not in pra  # aligned without them


def test_noise_words_file_errors(tmp_path: Path, noisy: tuple[Path, Path, Path]) -> None:
    ref, hyp, _ = noisy
    bad = write(tmp_path / "bad.txt", "<noise>\n[laugh] [cough]\n")
    result = run(["wer", "--ref", ref, "--hyp", hyp, "--noise-words", bad])
    assert_input_error(result, f"{bad}:2:", "expected one noise word per line, got 2 words")
    result = run(["wer", "--ref", ref, "--hyp", hyp, "--noise-words", tmp_path / "none.txt"])
    assert_input_error(result, "none.txt", "expected an existing file")


# u1 ref "a b": "a b <noise>" (decoder -1, lm -5) has 1 insertion, 0 without the noise word;
#               "a c" (decoder -2, lm -1) has 1 substitution either way.
# u2 ref "c d": "c d <noise>" (decoder -1, lm -5) 1 insertion, 0 without; "c d" (-2, -1) 0.
# Raw, the decoder's choice makes 2 errors and the lm's 1 (the tuned optimum); with the noise
# word deleted the decoder's choice makes 0 (the start is already the optimum). 4 words.
NOISE_TUNE = [
    ("spk-1", [("a b <noise>", -1.0, 0.0, -5.0), ("a c", -2.0, 0.0, -1.0)]),
    ("spk-2", [("c d <noise>", -1.0, 0.0, -5.0), ("c d", -2.0, 0.0, -1.0)]),
]
NOISE_TUNE_REFS = {"spk-1": "a b", "spk-2": "c d"}


def test_tune_and_rescore_count_errors_without_noise_words(
    tmp_path: Path, espnet_factory: Factory
) -> None:
    dev = espnet_factory("dev", NOISE_TUNE, NOISE_TUNE_REFS)
    ref = dev / "references" / "ref_wer.trn"
    noise = write(tmp_path / "noise.txt", "<noise>\n")
    base = ["tune", "--nbest", dev, "--ref", ref, "--features", "decoder,lm", "--no-length"]
    raw = run([*base, "--out", tmp_path / "raw.json"])
    assert raw.exit_code == 0, raw.output
    assert raw.output.splitlines()[0] == "initial %WER 50.00 [ 2 / 4 ]"
    assert raw.output.splitlines()[1].startswith("tuned   %WER 25.00 [ 1 / 4 ]")
    weights = tmp_path / "w.json"
    result = run([*base, "--noise-words", noise, "--out", weights])
    assert result.exit_code == 0, result.output
    tag = f" (noise words: {noise})"
    assert result.output.splitlines()[0] == f"initial %WER 0.00 [ 0 / 4 ]{tag}"
    assert result.output.splitlines()[1].startswith("tuned   %WER 0.00 [ 0 / 4 ]")
    meta = json.loads(weights.read_text())["meta"]
    assert meta["noise_words"] == str(noise) and meta["dev_errors"] == 0

    out = tmp_path / "rescored"
    args = ["rescore", "--nbest", dev, "--ref", ref, "--weights", weights, "--out", out]
    result = run([*args, "--noise-words", noise])
    assert result.exit_code == 0, result.output
    assert f"%WER 0.00 [ 0 / 4, 0 ins, 0 del, 0 sub ] rescored{tag}" in result.output
    # the output keeps the noise words: they are deleted for scoring only
    assert (out / "1best.txt").read_text() == "spk-1 a b <noise>\nspk-2 c d <noise>\n"
    assert "rescored (noise words" in (out / "wer.txt").read_text()
    result = run(args)
    assert "%WER 50.00 [ 2 / 4, 2 ins, 0 del, 0 sub ] rescored" in result.output


# -- references with extra ids ------------------------------------------------------------------


def test_extra_empty_reference_is_dropped(tmp_path: Path) -> None:
    # u3 has an empty reference and no hypothesis: dropped, the counts are those of u1 and u2.
    ref = write(tmp_path / "ref.trn", "a b\t(u1)\n\t(u3)\nc\t(u2)\n")
    hyp = write(tmp_path / "hyp.txt", "u1 a x\nu2 c\n")
    result = run(["wer", "--ref", ref, "--hyp", hyp, "--no-summary"])
    assert result.exit_code == 0, result.output
    assert wer_lines(result.output) == [f"%WER 33.33 [ 1 / 3, 0 ins, 0 del, 1 sub ] {hyp}"]
    result = run(["wer", "--ref", ref, "--hyp", hyp])  # the summary counts 2 sentences
    assert "%SER 50.00 [ 1 / 2 ]" in result.output


def test_extra_nonempty_reference_needs_the_flag(tmp_path: Path) -> None:
    ref = write(tmp_path / "ref.trn", "a b\t(u1)\nd e f\t(u3)\nc\t(u2)\ng\t(u4)\n\t(u5)\n")
    hyp = write(tmp_path / "hyp.txt", "u1 a x\nu2 c\n")
    line = assert_input_error(
        run(["wer", "--ref", ref, "--hyp", hyp]), str(ref), "2 extra id(s): u3, u4"
    )
    assert "u5" not in line and "--allow-extra-refs" in line
    args = ["-v", "wer", "--ref", ref, "--hyp", hyp, "--no-summary", "--allow-extra-refs"]
    result = run(args, quiet=False)
    assert result.exit_code == 0, result.output
    assert f"%WER 33.33 [ 1 / 3, 0 ins, 0 del, 1 sub ] {hyp}" in result.output
    assert "2 reference(s) without hypotheses ignored (--allow-extra-refs): u3, u4" in (
        result.output
    )
    assert "1 empty reference(s) without hypotheses dropped" in result.output


def test_missing_reference_is_refused_even_with_the_flag(tmp_path: Path) -> None:
    ref = write(tmp_path / "ref.trn", "a b\t(u1)\n\t(u3)\n")
    hyp = write(tmp_path / "hyp.txt", "u1 a x\nu2 c\n")
    line = assert_input_error(
        run(["wer", "--ref", ref, "--hyp", hyp, "--allow-extra-refs"]), "1 missing id(s): u2"
    )
    assert "extra" not in line  # the empty u3 is not the problem


def test_extra_refs_in_tune_rescore_score_convert(
    tmp_path: Path, espnet_factory: Factory, tiny_arpa: Path
) -> None:
    utts = [
        ("spk-1", [("a b", -1.0, 0.0, -2.0), ("a c", -2.0, 0.0, -1.0)]),
        ("spk-2", [("c d", -1.0, 0.0, -1.0)]),
    ]
    dev = espnet_factory("dev", utts, {"spk-1": "a b", "spk-2": "c d", "spk-9": "x y z"})
    ref = dev / "references" / "ref_wer.trn"
    w = tmp_path / "w.json"
    tune = ["tune", "--nbest", dev, "--ref", ref, "--features", "decoder,lm", "--out", w]
    assert_input_error(run(tune), "1 extra id(s): spk-9")
    result = run([*tune, "--allow-extra-refs"])
    assert result.exit_code == 0, result.output
    assert "1 reference(s) without hypotheses ignored (--allow-extra-refs): spk-9" in result.output
    assert "initial %WER 0.00 [ 0 / 4 ]" in result.output.splitlines()  # spk-9 not counted
    rescore = ["rescore", "--nbest", dev, "--ref", ref, "--weights", w, "--out", tmp_path / "r"]
    assert_input_error(run(rescore), "1 extra id(s): spk-9")
    result = run([*rescore, "--allow-extra-refs"])
    assert result.exit_code == 0, result.output
    assert "%WER 0.00 [ 0 / 4, 0 ins, 0 del, 0 sub ] first pass" in result.output
    convert = ["convert", "--nbest", dev, "--ref", ref, "--to", "jsonl"]
    assert_input_error(run([*convert, "--out", tmp_path / "c.jsonl"]), "1 extra id(s): spk-9")
    result = run([*convert, "--out", tmp_path / "c.jsonl", "--allow-extra-refs"])
    assert result.exit_code == 0, result.output
    assert [r.get("ref") for r in read_jsonl(tmp_path / "c.jsonl")] == ["a b", "c d"]
    score = ["score", "--nbest", dev, "--ref", ref, "--lm", f"kenlm:{tiny_arpa}"]
    assert_input_error(run([*score, "--out", tmp_path / "s.jsonl"]), "1 extra id(s): spk-9")
    result = run([*score, "--out", tmp_path / "s.jsonl", "--allow-extra-refs"])
    assert result.exit_code == 0, result.output
    assert [r.get("ref") for r in read_jsonl(tmp_path / "s.jsonl")] == ["a b", "c d"]


# -- posterior (minimum expected word error) decoding -------------------------------------------

# spk-1: decoder scores log 0.4, log 0.35, log 0.25 (posteriors at scale 1). With the pairwise
# distances d(h1,h2) = 1, d(h1,h3) = 2, d(h2,h3) = 1 the expected errors are h1 0.85, h2 0.65,
# h3 1.15 (tests/rescorer/test_mbr.py): the posterior choice is h2, "a x c", the reference.
# spk-2: one hypothesis, "d e" with reference "d e f" (1 deletion) whatever the objective.
# Top score: 1 + 1 = 2 errors over 6 words; posterior at scale 1 (and 0.5): 0 + 1 = 1.
POSTERIOR_SET = [
    (
        "spk-1",
        [
            ("a b c", math.log(0.4), 0.0, 0.0),
            ("a x c", math.log(0.35), 0.0, 0.0),
            ("a x c d", math.log(0.25), 0.0, 0.0),
        ],
    ),
    ("spk-2", [("d e", -1.0, 0.0, 0.0)]),
]
POSTERIOR_REFS = {"spk-1": "a x c", "spk-2": "d e f"}


def test_rescore_objective_posterior(tmp_path: Path, espnet_factory: Factory) -> None:
    dev = espnet_factory("dev", POSTERIOR_SET, POSTERIOR_REFS)
    ref = dev / "references" / "ref_wer.trn"
    weights = write(
        tmp_path / "w.json",
        json.dumps({"format": "rescorer-weights", "version": 1, "features": {"decoder": 1.0}}),
    )
    out = tmp_path / "out"
    base = ["rescore", "--nbest", dev, "--ref", ref, "--weights", weights, "--out", out]
    result = run([*base, "--objective", "posterior", "--posterior-scale", "1"])
    assert result.exit_code == 0, result.output
    assert wer_lines(result.output) == [
        "%WER 33.33 [ 2 / 6, 0 ins, 1 del, 1 sub ] first pass",
        "%WER 33.33 [ 2 / 6, 0 ins, 1 del, 1 sub ] rescored (top score)",
        "%WER 16.67 [ 1 / 6, 0 ins, 1 del, 0 sub ] rescored (posterior, scale 1)",
    ]
    assert (out / "1best.txt").read_text() == "spk-1 a x c\nspk-2 d e\n"
    rows = read_jsonl(out / "nbest.jsonl")
    first = rows[0]["hyps"]
    assert [h["text"] for h in first] == ["a x c", "a b c", "a x c d"]
    assert [h["scores"]["mbr_expected_errors"] for h in first] == pytest.approx([0.65, 0.85, 1.15])
    assert [h["scores"]["mbr_posterior"] for h in first] == pytest.approx([0.35, 0.4, 0.25])
    # a scale of 100 is the top-score choice again
    result = run([*base, "--objective", "posterior", "--posterior-scale", "100"])
    assert "%WER 33.33 [ 2 / 6, 0 ins, 1 del, 1 sub ] rescored (posterior, scale 100)" in (
        result.output
    )
    # the default objective is the top score, as before
    result = run(base)
    assert "%WER 33.33 [ 2 / 6, 0 ins, 1 del, 1 sub ] rescored" in result.output.splitlines()
    assert (out / "1best.txt").read_text() == "spk-1 a b c\nspk-2 d e\n"


def test_rescore_posterior_usage_errors(tmp_path: Path, espnet_factory: Factory) -> None:
    dev = espnet_factory("dev", POSTERIOR_SET, POSTERIOR_REFS)
    weights = write(
        tmp_path / "w.json",
        json.dumps({"format": "rescorer-weights", "version": 1, "features": {"decoder": 1.0}}),
    )
    base = ["rescore", "--nbest", dev, "--weights", weights, "--out", tmp_path / "o"]
    assert_usage_error(run([*base, "--objective", "posterior"]), "needs --posterior-scale")
    assert_usage_error(run([*base, "--posterior-scale", "2"]), "goes with --objective posterior")
    assert_usage_error(run([*base, "--objective", "posterior", "--posterior-scale", "0"]), "0")
    assert not (tmp_path / "o").exists()


def test_tune_objective_posterior_then_rescore(tmp_path: Path, espnet_factory: Factory) -> None:
    dev = espnet_factory("dev", POSTERIOR_SET, POSTERIOR_REFS)
    ref = dev / "references" / "ref_wer.trn"
    weights = tmp_path / "w.json"
    # one feature, no length: nothing to tune, the weights are decoder = 1; then the scale.
    args = ["tune", "--nbest", dev, "--ref", ref, "--features", "decoder", "--no-length"]
    result = run(
        [*args, "--objective", "posterior", "--posterior-scales", "100,0.5,1", "--out", weights]
    )
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[1].startswith("tuned   %WER 33.33 [ 2 / 6 ]")
    assert lines[2] == (
        "posterior %WER 16.67 [ 1 / 6 ] at scale 1 (fewest errors of 3 scales 0.5..100; "
        "top score: 2 errors)"
    )
    data = json.loads(weights.read_text())
    assert data["posterior_scale"] == 1.0
    assert data["meta"]["posterior"]["grid"] == [[0.5, 1], [1.0, 1], [100.0, 2]]
    assert data["meta"]["objective"] == "posterior"
    out = tmp_path / "out"
    result = run(
        ["rescore", "--nbest", dev, "--ref", ref, "--weights", weights, "--out", out,
         "--objective", "posterior"]
    )  # fmt: skip
    assert "%WER 16.67 [ 1 / 6, 0 ins, 1 del, 0 sub ] rescored (posterior, scale 1)" in (
        result.output
    )
    assert_usage_error(
        run([*args, "--posterior-scales", "1", "--out", weights]), "--objective posterior"
    )


# -- extra score directories --------------------------------------------------------------------

# SRILM 3-column lists (log10 acoustic, log10 lm, word count) and a pronunciation score folder.
# u1 (ref "a b"): "a x" has the better acoustic score but pron -5; "a b" pron 0.
# u2 (ref "c d"): "c d" has the better acoustic score and pron 0; "c y" pron -5.
# The acoustic score alone makes 1 error (u1) over 4 words; adding pron makes none.
SRILM_LISTS = {
    "u1.nbest": "-1.0 -1.0 2 a x\n-1.2 -1.0 2 a b\n",
    "u2.nbest": "-1.0 -1.0 2 c d\n-1.1 -1.0 2 c y\n",
}
PRON = {"u1.score.gz": "-5\n0\n", "u2.score": "0\n-5\n"}


@pytest.fixture()
def srilm_set(tmp_path: Path) -> tuple[Path, Path, Path]:
    import gzip

    lists = tmp_path / "nbest"
    lists.mkdir()
    for name, text in SRILM_LISTS.items():
        write(lists / name, text)
    pron = tmp_path / "pron"
    pron.mkdir()
    for name, text in PRON.items():
        if name.endswith(".gz"):
            with gzip.open(pron / name, "wt", encoding="utf-8") as f:
                f.write(text)
        else:
            write(pron / name, text)
    ref = write(tmp_path / "ref.txt", "u1 a b\nu2 c d\n")
    return lists, pron, ref


def test_extra_scores_tune_rescore_convert(
    tmp_path: Path, srilm_set: tuple[Path, Path, Path]
) -> None:
    lists, pron, ref = srilm_set
    nb = ["--nbest", lists, "--format", "srilm3"]
    weights = tmp_path / "w.json"
    result = run(
        ["tune", *nb, "--extra-scores", f"pron={pron}", "--ref", ref,
         "--features", "acoustic,pron", "--no-length", "--out", weights]
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[0] == "initial %WER 25.00 [ 1 / 4 ]"
    assert result.output.splitlines()[1].startswith("tuned   %WER 0.00 [ 0 / 4 ]")
    data = json.loads(weights.read_text())
    assert data["features"]["pron"] > 0 and data["meta"]["extra_scores"] == {"pron": str(pron)}

    out = tmp_path / "out"
    rescore = ["rescore", *nb, "--ref", ref, "--weights", weights, "--out", out]
    assert_usage_error(run(rescore), "['pron']", "--extra-scores")
    result = run([*rescore, "--extra-scores", f"pron={pron}"])
    assert result.exit_code == 0, result.output
    assert "%WER 0.00 [ 0 / 4, 0 ins, 0 del, 0 sub ] rescored" in result.output.splitlines()
    assert (out / "1best.txt").read_text() == "u1 a b\nu2 c d\n"

    result = run(["convert", *nb, "--extra-scores", f"pron={pron}", "--to", "jsonl",
                  "--out", tmp_path / "c.jsonl"])  # fmt: skip
    assert result.exit_code == 0, result.output
    rows = read_jsonl(tmp_path / "c.jsonl")
    assert [[h["scores"]["pron"] for h in r["hyps"]] for r in rows] == [[-5.0, 0.0], [0.0, -5.0]]


def test_extra_scores_errors(
    tmp_path: Path, srilm_set: tuple[Path, Path, Path], tiny_arpa: Path
) -> None:
    lists, pron, ref = srilm_set
    base = ["convert", "--nbest", lists, "--format", "srilm3", "--to", "jsonl"]
    base += ["--out", tmp_path / "c.jsonl"]
    write(pron / "u2.score", "0\n-5\n1\n")  # 3 lines for 2 hypotheses
    result = run([*base, "--extra-scores", f"pron={pron}"])
    assert_input_error(
        result, f"{pron / 'u2.score'}:3: expected 2 scores, one per hypothesis of 'u2', got more"
    )
    write(pron / "u2.score", "0\ninf\n")
    assert_input_error(
        run([*base, "--extra-scores", f"pron={pron}"]), f"{pron / 'u2.score'}:2:", "finite"
    )
    (pron / "u2.score").unlink()
    assert_input_error(
        run([*base, "--extra-scores", f"pron={pron}"]),
        f"{pron}: no score file for 1 utterance(s) of the N-best lists: u2",
    )
    assert_input_error(
        run([*base, "--extra-scores", f"lm={pron}"]), "already have a score named 'lm'"
    )
    assert_input_error(
        run([*base, "--extra-scores", f"pron={tmp_path / 'nope'}"]),
        "nope: --extra-scores pron: expected a folder of score files",
    )
    assert_usage_error(run([*base, "--extra-scores", "pron"]), "expected NAME=DIR")
    write(pron / "u2.score", "0\n-5\n")
    score = ["score", "--nbest", lists, "--format", "srilm3", "--out", tmp_path / "s.jsonl"]
    result = run([*score, "--extra-scores", f"tiny={pron}", "--lm", f"tiny=kenlm:{tiny_arpa}"])
    assert_input_error(result, "two features named 'tiny'")
    result = run([*score, "--extra-scores", f"tiny_oov={pron}", "--lm", f"tiny=kenlm:{tiny_arpa}"])
    assert_input_error(result, "two features named 'tiny_oov'")
    result = run([*score, "--extra-scores", f"pron={pron}", "--lm", f"tiny=kenlm:{tiny_arpa}"])
    assert result.exit_code == 0, result.output
    names = set(read_jsonl(tmp_path / "s.jsonl")[0]["hyps"][0]["scores"])
    assert {"pron", "tiny", "tiny_oov", "acoustic"} <= names
    assert not (tmp_path / "c.jsonl").exists()


def test_rescore_posterior_distances_ignore_noise_words(
    tmp_path: Path, espnet_factory: Factory
) -> None:
    # h1 "a b" (p 0.4), h2 "a c <n>" (0.35), h3 "a c" (0.25) at scale 1.
    # Raw distances d12 = 2, d13 = 1, d23 = 1: E = (0.95, 1.05, 0.75), h3 wins.
    # Without <n>: d12 = 1, d13 = 1, d23 = 0: E = (0.6, 0.4, 0.4), h2 and h3 tie, h2 (the higher
    # score) wins. No references: --noise-words still serves the posterior objective.
    dev = espnet_factory(
        "dev",
        [
            (
                "spk-1",
                [
                    ("a b", math.log(0.4), 0.0, 0.0),
                    ("a c <n>", math.log(0.35), 0.0, 0.0),
                    ("a c", math.log(0.25), 0.0, 0.0),
                ],
            )
        ],
    )
    weights = write_weights(tmp_path / "w.json", {"decoder": 1.0})
    noise = write(tmp_path / "noise.txt", "<n>\n")
    out = tmp_path / "out"
    base = ["rescore", "--nbest", dev, "--weights", weights, "--out", out]
    base += ["--objective", "posterior", "--posterior-scale", "1"]
    assert run(base).exit_code == 0
    assert (out / "1best.txt").read_text() == "spk-1 a c\n"
    assert run([*base, "--noise-words", noise]).exit_code == 0
    assert (out / "1best.txt").read_text() == "spk-1 a c <n>\n"
    result = run(base[:7] + ["--noise-words", noise])  # top score, no references
    assert_usage_error(result, "--noise-words is only used with --ref")
