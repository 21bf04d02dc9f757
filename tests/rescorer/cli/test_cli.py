"""The click command line, driven through ``CliRunner``: every command, its output and errors.

Expected numbers are counted by hand on small made-up data (see the comments next to each set);
one test checks the published figures of the real LibriSpeech N-best lists when they are present.
"""

from __future__ import annotations

import json
import math
import random
import re
from collections.abc import Callable, Sequence
from pathlib import Path

import click
import pytest
from click.testing import CliRunner, Result

from rescorer.cli.main import main
from rescorer.formats import read_nbest
from tests.rescorer.cli.commands import leaf_commands

LN10 = math.log(10.0)
Factory = Callable[..., Path]

# A set whose first hypotheses are wrong on 5 of 6 utterances while ``lm`` always ranks the
# oracle (lowest-error) hypothesis first. Each hypothesis is (text, decoder, ctc, lm); the decoder
# prefers the first one everywhere. Errors of each hypothesis against the reference are in the
# comments; reference words 6 + 2 + 3 + 4 + 3 + 6 = 24.
TUNE_REFS = {
    "spk-1": "the cat sat on the mat",
    "spk-2": "hello world",
    "spk-3": "good morning everyone",
    "spk-4": "one two three four",
    "spk-5": "please call stella",
    "spk-6": "ask her to bring these things",
}
TUNE_UTTS: list[tuple[str, list[tuple[str, float, float, float]]]] = [
    (
        "spk-1",
        [
            ("the cat sat on a mat", -1.0, -1.0, -6.0),  # 1 sub
            ("the cat sat on the mat", -2.0, -2.0, -2.0),  # 0
            ("a cat sat on the mat too", -3.0, -3.0, -8.0),  # 1 sub, 1 ins
        ],
    ),
    (
        "spk-2",
        [
            ("hello word", -1.0, -1.0, -6.0),  # 1 sub
            ("hello world", -2.0, -2.0, -2.0),  # 0
        ],
    ),
    (
        "spk-3",
        [
            ("good morning everyone", -1.0, -1.0, -2.0),  # 0
            ("good mourning everyone", -2.0, -2.0, -7.0),  # 1 sub
        ],
    ),
    (
        "spk-4",
        [
            ("one to three for", -1.0, -1.0, -6.0),  # 2 sub
            ("one two three four", -2.0, -2.0, -2.0),  # 0
            ("won two three four", -3.0, -3.0, -8.0),  # 1 sub
        ],
    ),
    (
        "spk-5",
        [
            ("please call stela", -1.0, -1.0, -6.0),  # 1 sub
            ("please tall stela", -2.0, -2.0, -7.0),  # 2 sub
            ("please call stella", -3.0, -3.0, -2.0),  # 0
        ],
    ),
    (
        "spk-6",
        [
            ("ask her to bring this things", -1.0, -1.0, -2.0),  # 1 sub (the oracle)
            ("ask her two bring these thing", -2.0, -2.0, -7.0),  # 2 sub
        ],
    ),
]
FIRST_PASS_LINE = "%WER 25.00 [ 6 / 24, 0 ins, 0 del, 6 sub ]"
ORACLE_LINE = "%WER 4.17 [ 1 / 24, 0 ins, 0 del, 1 sub ]"


# -- helpers ------------------------------------------------------------------------------------


pytestmark = pytest.mark.usefixtures("restore_logging")  # main reconfigures logging


def run(args: Sequence[object], quiet: bool = True) -> Result:
    """Invoke the CLI in-process (``-q``: no progress bars) and return the result."""
    argv = (["-q"] if quiet else []) + [str(a) for a in args]
    return CliRunner().invoke(main, argv, catch_exceptions=False)


def assert_input_error(result: Result, *fragments: str) -> str:
    """Exit status 2, one ``Error: ...`` line holding every fragment, and no traceback."""
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    assert lines[0].startswith("Error: ")
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    return lines[0]


def assert_usage_error(result: Result, *fragments: str) -> None:
    """Exit status 2 with click's usage error text holding every fragment."""
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert "Error:" in result.output
    for fragment in fragments:
        assert fragment in result.output, (fragment, result.output)


def wer_lines(output: str) -> list[str]:
    """The Kaldi-style ``%WER``/``%CER`` lines of an output (summary table included)."""
    return [line for line in output.splitlines() if line.startswith(("%WER", "%CER"))]


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def write_weights(path: Path, features: dict[str, float], length: float = 0.0) -> Path:
    obj = {"format": "rescorer-weights", "version": 1, "features": features, "length": length}
    return write(path, json.dumps(obj))


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


@pytest.fixture()
def small_wer(tmp_path: Path) -> tuple[Path, Path]:
    """References and hypotheses with hand-counted errors.

    u1: ``a b c d`` -> ``a x c d e``: 1 sub (b/x), 1 ins (e); u2: ``e f g`` -> ``f g``: 1 del.
    Total 3 errors over 7 words: 42.86 %.
    """
    ref = write(tmp_path / "ref.trn", "a b c d\t(u1)\ne f g\t(u2)\n")
    hyp = write(tmp_path / "hyp.txt", "u1 a x c d e\nu2 f g\n")
    return ref, hyp


@pytest.fixture()
def tune_set(espnet_factory: Factory) -> Path:
    return espnet_factory("dev", TUNE_UTTS, TUNE_REFS)


# -- wer ----------------------------------------------------------------------------------------


def test_wer_hyp_exact_line(small_wer: tuple[Path, Path]) -> None:
    ref, hyp = small_wer
    result = run(["wer", "--ref", ref, "--hyp", hyp])
    assert result.exit_code == 0, result.output
    expected = "%WER 42.86 [ 3 / 7, 1 ins, 1 del, 1 sub ]"
    assert result.output.splitlines()[-1] == f"{expected} {hyp}"
    assert "%SER 100.00 [ 2 / 2 ]" in result.output
    # The summary table's Sum/Avg row: Corr Sub Del Ins Err S.Err in percent of 7 words.
    sum_row = next(line for line in result.output.splitlines() if "Sum/Avg" in line)
    assert sum_row.split()[3:-1] == ["2", "7", "|", "71.4", "14.3", "14.3", "14.3", "42.9", "100.0"]


def test_wer_no_summary_and_kaldi_refs(tmp_path: Path, small_wer: tuple[Path, Path]) -> None:
    _, hyp = small_wer
    ref = write(tmp_path / "ref.txt", "u1 a b c d\nu2 e f g\n")  # Kaldi text references
    result = run(["wer", "--ref", ref, "--hyp", hyp, "--no-summary"])
    assert result.exit_code == 0, result.output
    assert result.output == f"%WER 42.86 [ 3 / 7, 1 ins, 1 del, 1 sub ] {hyp}\n"


def test_wer_cer(tmp_path: Path) -> None:
    # Characters with <space> between words: "hello world" is 11 units; hallo/hello is 1 sub.
    ref = write(tmp_path / "ref.trn", "hello world\t(u1)\n")
    hyp = write(tmp_path / "hyp.txt", "u1 hallo world\n")
    word = run(["wer", "--ref", ref, "--hyp", hyp, "--no-summary"])
    assert word.output.startswith("%WER 50.00 [ 1 / 2, 0 ins, 0 del, 1 sub ]")
    char = run(["wer", "--ref", ref, "--hyp", hyp, "--cer"])
    assert char.exit_code == 0, char.output
    assert char.output.splitlines()[-1] == f"%CER 9.09 [ 1 / 11, 0 ins, 0 del, 1 sub ] {hyp}"
    assert "# Chr" in char.output


def test_wer_nbest_first_and_oracle(espnet_factory: Factory) -> None:
    # spk-1 ref "the cat sat": first "the cat sad" (1 sub), oracle hyp 2 (0 errors).
    # spk-2 ref "hello world": first is exact.
    # spk-3 ref "good morning all": first "good mourning" (1 sub, 1 del); hyps 2 (1 ins) and
    # 3 (1 del) tie at one error and the oracle takes the earlier one, hyp 2.
    dev = espnet_factory(
        "dev",
        [
            (
                "spk-1",
                [
                    ("the cat sad", -1.0, -1.0, -1.0),
                    ("the cat sat", -2.0, -2.0, -2.0),
                    ("a cat", -3.0, -3.0, -3.0),
                ],
            ),
            ("spk-2", [("hello world", -1.0, -1.0, -1.0), ("hello word", -2.0, -2.0, -2.0)]),
            (
                "spk-3",
                [
                    ("good mourning", -1.0, -1.0, -1.0),
                    ("good morning all too", -2.0, -2.0, -2.0),
                    ("good morning", -3.0, -3.0, -3.0),
                ],
            ),
        ],
        {"spk-1": "the cat sat", "spk-2": "hello world", "spk-3": "good morning all"},
    )
    ref = dev / "references" / "ref_wer.trn"
    result = run(["wer", "--ref", ref, "--nbest", dev, "--oracle", "--no-summary"])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == [
        f"%WER 37.50 [ 3 / 8, 0 ins, 1 del, 2 sub ] {dev} (first hypotheses)",
        "%WER 12.50 [ 1 / 8, 1 ins, 0 del, 0 sub ] oracle over 3-best",
    ]


def test_wer_per_utt_table(tmp_path: Path, small_wer: tuple[Path, Path]) -> None:
    ref, hyp = small_wer
    table = tmp_path / "out" / "per_utt.txt"
    result = run(["wer", "--ref", ref, "--hyp", hyp, "--per-utt", table])
    assert result.exit_code == 0, result.output
    rows = [line.split() for line in table.read_text(encoding="utf-8").splitlines()]
    assert rows == [
        ["utt_id", "speaker", "#Wrd", "Corr", "Sub", "Del", "Ins", "Err", "WER%"],
        ["u1", "-", "4", "3", "1", "0", "1", "2", "50.00"],
        ["u2", "-", "3", "2", "0", "1", "0", "1", "33.33"],
    ]


def test_wer_utt2spk_rows(tmp_path: Path, small_wer: tuple[Path, Path]) -> None:
    ref, hyp = small_wer
    # A map of a larger corpus is fine (u9 is not scored).
    utt2spk = write(tmp_path / "utt2spk", "u1 spkA\nu2 spkB\nu9 spkC\n")
    result = run(["wer", "--ref", ref, "--hyp", hyp, "--utt2spk", utt2spk])
    assert result.exit_code == 0, result.output
    rows = {
        line.split()[1]: line.split()[3:]
        for line in result.output.splitlines()
        if line.startswith("| ")
    }
    assert rows["spkA"] == ["1", "4", "|", "75.0", "25.0", "0.0", "25.0", "50.0", "100.0", "|"]
    assert rows["spkB"] == ["1", "3", "|", "66.7", "0.0", "33.3", "0.0", "33.3", "100.0", "|"]
    assert "spkC" not in rows and "(none)" not in rows


def test_wer_utt2spk_missing_speaker(tmp_path: Path, small_wer: tuple[Path, Path]) -> None:
    ref, hyp = small_wer
    utt2spk = write(tmp_path / "utt2spk", "u1 spkA\n")
    result = run(["wer", "--ref", ref, "--hyp", hyp, "--utt2spk", utt2spk])
    assert_input_error(result, str(utt2spk), "u2")


def test_wer_compare(tmp_path: Path, small_wer: tuple[Path, Path]) -> None:
    ref, hyp = small_wer
    other = write(tmp_path / "b.txt", "u1 a b c d\nu2 e f x\n")  # 1 sub in u2 only
    result = run(["wer", "--ref", ref, "--hyp", hyp, "--compare", other, "--no-summary"])
    assert result.exit_code == 0, result.output
    out = result.output.splitlines()
    assert out[1] == f"%WER 14.29 [ 1 / 7, 0 ins, 0 del, 1 sub ] {other}"
    assert "A: %WER 42.86 [ 3 / 7, 1 ins, 1 del, 1 sub ]" in out
    assert "B: %WER 14.29 [ 1 / 7, 0 ins, 0 del, 1 sub ]" in out
    assert any(
        line.startswith("difference B - A: -28.57 % absolute")
        and "B better on 1, worse on 0" in line
        for line in out
    )
    assert any(line.startswith("verdict ") for line in out)


def test_wer_compare_mismatched_ids(tmp_path: Path, small_wer: tuple[Path, Path]) -> None:
    ref, hyp = small_wer
    other = write(tmp_path / "b.txt", "u1 a b c d\nu3 e f g\n")
    result = run(["wer", "--ref", ref, "--hyp", hyp, "--compare", other])
    assert result.exit_code == 2
    last = result.output.strip().splitlines()[-1]
    assert last.startswith(f"Error: {other}: ") and "u2" in last and "u3" in last


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ([], "exactly one of --hyp or --nbest"),
        (["--hyp", "HYP", "--nbest", "NBEST"], "exactly one of --hyp or --nbest"),
        (["--hyp", "HYP", "--oracle"], "--oracle needs --nbest"),
    ],
)
def test_wer_usage_errors(
    tmp_path: Path, small_wer: tuple[Path, Path], extra: list[str], message: str
) -> None:
    ref, hyp = small_wer
    nbest = write(tmp_path / "n.jsonl", '{"utt": "u1", "hyps": [{"text": "a"}]}\n')
    args = [{"HYP": str(hyp), "NBEST": str(nbest)}.get(a, a) for a in extra]
    result = run(["wer", "--ref", ref, *args])
    assert_usage_error(result, message)
    assert "%WER" not in result.output


def test_wer_oracle_with_cer_is_refused_before_output(espnet_factory: Factory) -> None:
    dev = espnet_factory("dev", [("spk-1", [("a b", -1.0, -1.0, -1.0)])], {"spk-1": "a b"})
    ref = dev / "references" / "ref_wer.trn"
    result = run(["wer", "--ref", ref, "--nbest", dev, "--oracle", "--cer"])
    assert_usage_error(result, "--oracle")
    assert "%CER" not in result.output  # refused up front, not after printing the CER


def test_wer_ref_required(small_wer: tuple[Path, Path]) -> None:
    _, hyp = small_wer
    assert_usage_error(run(["wer", "--hyp", hyp]), "--ref")


# -- input errors: one line, file and line number, exit 2 ----------------------------------------


def test_malformed_trn_line(tmp_path: Path, small_wer: tuple[Path, Path]) -> None:
    _, hyp = small_wer
    ref = write(tmp_path / "bad.trn", "a b c d\t(u1)\ne f g u2\n")
    result = run(["wer", "--ref", ref, "--hyp", hyp])
    assert_input_error(result, f"{ref}:2:", "expected 'words (id)'", "e f g u2")


def test_malformed_nbest_line_jsonl(tmp_path: Path) -> None:
    ref = write(tmp_path / "ref.txt", "u1 a\nu2 b\n")
    nbest = write(
        tmp_path / "bad.jsonl",
        '{"utt": "u1", "hyps": [{"text": "a", "scores": {"am": -1.0}}]}\n'
        '{"utt": "u2", "hyps": [{"text": "b", "scores": {"am": -1.0}}\n',
    )
    result = run(["wer", "--ref", ref, "--nbest", nbest])
    assert_input_error(result, f"{nbest}:2:", "invalid JSON")


def test_malformed_nbest_line_espnet(espnet_factory: Factory) -> None:
    dev = espnet_factory(
        "dev",
        [("spk-1", [("a b", -1.0, -1.0, -1.0)]), ("spk-2", [("b", -1.0, -1.0, -1.0)])],
        {"spk-1": "a b", "spk-2": "b"},
    )
    score = dev / "raw_hypotheses" / "1best_recog" / "score"
    write(score, "spk-1 tensor(-1.0)\nspk-2 tensor(oops)\n")
    result = run(["wer", "--ref", dev / "references" / "ref_wer.trn", "--nbest", dev])
    assert_input_error(result, f"{score}:2:", "not a number", "oops")


def test_mismatched_ids_name_missing_and_extra(tmp_path: Path) -> None:
    ref = write(tmp_path / "ref.trn", "a\t(u1)\nb\t(u2)\nc\t(u3)\n")
    hyp = write(tmp_path / "hyp.txt", "u1 a\nu2 b\nu7 c\n")
    line = assert_input_error(run(["wer", "--ref", ref, "--hyp", hyp]), str(ref))
    assert re.search(r"1 missing id\(s\): u7\b", line), line
    assert re.search(r"1 extra id\(s\): u3\b", line), line


def test_non_utf8_file(tmp_path: Path, small_wer: tuple[Path, Path]) -> None:
    ref, _ = small_wer
    hyp = tmp_path / "latin1.txt"
    hyp.write_bytes("u1 a b c d\nu2 caf\u00e9 f g\n".encode("latin-1"))
    assert_input_error(run(["wer", "--ref", ref, "--hyp", hyp]), f"{hyp}:2:", "not UTF-8")


def test_missing_file_is_one_line(tmp_path: Path, small_wer: tuple[Path, Path]) -> None:
    ref, _ = small_wer
    result = run(["wer", "--ref", ref, "--hyp", tmp_path / "nope.txt"])
    assert_input_error(result, f"{tmp_path / 'nope.txt'}: ", "expected an existing file")


# -- tune ---------------------------------------------------------------------------------------


def test_tune_finds_the_known_optimum_and_rescore_agrees(tmp_path: Path, tune_set: Path) -> None:
    ref = tune_set / "references" / "ref_wer.trn"
    out = tmp_path / "w.json"
    result = run(
        ["tune", "--nbest", tune_set, "--ref", ref, "--features", "decoder,lm", "--out", out]
    )
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0] == "initial %WER 25.00 [ 6 / 24 ]"  # decoder only = the first-pass order
    assert lines[1].startswith("tuned   %WER 4.17 [ 1 / 24 ]")  # the oracle: lm everywhere
    assert lines[-1] == f"wrote {out}"

    data = json.loads(out.read_text(encoding="utf-8"))
    assert data["format"] == "rescorer-weights"
    assert list(data["features"]) == ["decoder", "lm"]
    assert data["features"]["decoder"] == 1.0  # the anchor
    assert data["features"]["lm"] > 0
    meta = data["meta"]
    assert (meta["dev_errors"], meta["initial_errors"], meta["dev_ref_words"]) == (1, 6, 24)
    assert meta["nbest"] == str(tune_set) and meta["ref"] == str(ref) and meta["lms"] == {}

    outdir = tmp_path / "rescored"
    result = run(["rescore", "--nbest", tune_set, "--ref", ref, "--weights", out, "--out", outdir])
    assert result.exit_code == 0, result.output
    assert f"{FIRST_PASS_LINE} first pass" in result.output.splitlines()
    assert f"{ORACLE_LINE} rescored" in result.output.splitlines()
    # ... and `wer` on the rescored 1-best counts the same errors as tuning did.
    result = run(["wer", "--ref", ref, "--hyp", outdir / "1best.txt", "--no-summary"])
    m = re.match(r"%WER \S+ \[ (\d+) / (\d+),", result.output)
    assert m is not None, result.output
    assert (int(m.group(1)), int(m.group(2))) == (meta["dev_errors"], meta["dev_ref_words"])


def test_tune_method_risk(tmp_path: Path, tune_set: Path) -> None:
    ref = tune_set / "references" / "ref_wer.trn"
    out = tmp_path / "w.json"
    args = ["--features", "decoder,lm", "--method", "risk", "--out", out]
    result = run(["tune", "--nbest", tune_set, "--ref", ref, *args])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[1].startswith("tuned   %WER 4.17 [ 1 / 24 ]")
    meta = json.loads(out.read_text(encoding="utf-8"))["meta"]
    assert meta["method"] == "risk" and meta["dev_errors"] == 1
    result = run(["tune", "--nbest", tune_set, "--ref", ref, "--method", "pro", "--out", out])
    assert result.exit_code == 2 and "'pro' is not one of" in result.output


def test_tune_default_features_with_kenlm(
    tmp_path: Path, espnet_factory: Factory, tiny_arpa: Path
) -> None:
    dev = espnet_factory(
        "dev",
        [
            ("spk-1", [("b a", -1.0, -1.0, -1.0), ("a b", -2.0, -2.0, -2.0)]),
            ("spk-2", [("a c", -1.0, -1.0, -1.0), ("a", -3.0, -3.0, -3.0)]),
        ],
        {"spk-1": "a b", "spk-2": "a"},
    )
    out = tmp_path / "w.json"
    spec = f"x=kenlm:{tiny_arpa}"
    result = run(
        [
            "tune",
            "--nbest",
            dev,
            "--ref",
            dev / "references" / "ref_wer.trn",
            "--lm",
            spec,
            "--restarts",
            "2",
            "--out",
            out,
        ]
    )
    assert result.exit_code == 0, result.output
    assert "x: scored 4 hypotheses, 7 words, 1 OOV (14.29%)" in result.output
    data = json.loads(out.read_text(encoding="utf-8"))
    assert list(data["features"]) == ["score", "decoder", "ctc", "lm", "x", "x_oov"]
    assert data["meta"]["lms"] == {"x": f"kenlm:{tiny_arpa}"}
    assert data["meta"]["dev_errors"] == 0  # x ranks "a b" first and x_oov penalises "c"
    for name in ("x", "x_oov"):
        assert re.search(rf"^\s+{name} [+-]", result.output, re.MULTILINE), name


def test_tune_unknown_feature(tmp_path: Path, tune_set: Path) -> None:
    ref = tune_set / "references" / "ref_wer.trn"
    out = tmp_path / "w.json"
    result = run(
        ["tune", "--nbest", tune_set, "--ref", ref, "--features", "decoder,nosuch", "--out", out]
    )
    assert_usage_error(result, "nosuch")
    assert not out.exists()


def test_tune_unknown_anchor(tmp_path: Path, tune_set: Path) -> None:
    ref = tune_set / "references" / "ref_wer.trn"
    args = ["--features", "decoder,lm", "--anchor", "ctc", "--out", tmp_path / "w.json"]
    result = run(["tune", "--nbest", tune_set, "--ref", ref, *args])
    assert_usage_error(result, "anchor", "ctc")


def test_tune_from_initial_weights(tmp_path: Path, tune_set: Path) -> None:
    ref = tune_set / "references" / "ref_wer.trn"
    init = write_weights(tmp_path / "init.json", {"decoder": 1.0, "lm": 2.0})
    out = tmp_path / "w.json"
    args = ["--features", "decoder,lm", "--init", init, "--restarts", "0", "--out", out]
    result = run(["tune", "--nbest", tune_set, "--ref", ref, *args])
    assert result.exit_code == 0, result.output
    # "initial" is the lists' own order; the initial weights already select the oracle
    # hypotheses, where the one start (restarts 0) ends.
    assert result.output.splitlines()[0] == "initial %WER 25.00 [ 6 / 24 ]"
    assert "(1 starts, best errors per start [1]," in result.output.splitlines()[1]
    assert json.loads(out.read_text(encoding="utf-8"))["meta"]["dev_errors"] == 1
    bad = write_weights(tmp_path / "len.json", {"decoder": 1.0}, length=0.5)
    args = ["--features", "decoder,lm", "--init", bad, "--no-length", "--out", out]
    assert_usage_error(run(["tune", "--nbest", tune_set, "--ref", ref, *args]), "--no-length")


# -- rescore ------------------------------------------------------------------------------------


def test_rescore_outputs(tmp_path: Path, tune_set: Path) -> None:
    ref = tune_set / "references" / "ref_wer.trn"
    weights = write_weights(tmp_path / "w.json", {"decoder": 1.0, "lm": 1.0}, length=0.25)
    outdir = tmp_path / "out"
    result = run(
        ["rescore", "--nbest", tune_set, "--ref", ref, "--weights", weights, "--out", outdir]
    )
    assert result.exit_code == 0, result.output
    out = result.output.splitlines()
    assert out[0] == f"wrote {outdir / 'nbest.jsonl'}, {outdir / '1best.txt'} and 1best.trn"
    assert out[1] == f"{FIRST_PASS_LINE} first pass"
    assert out[2] == f"{ORACLE_LINE} rescored"
    assert any(line.startswith("verdict ") for line in out)

    rows = read_jsonl(outdir / "nbest.jsonl")
    assert [r["utt"] for r in rows] == list(TUNE_REFS)
    assert all(r["ref"] == TUNE_REFS[r["utt"]] for r in rows)
    # spk-2: "hello word" -1 + -6 + 0.25 * 2 = -6.5; "hello world" -2 + -2 + 0.5 = -3.5.
    spk2 = rows[1]["hyps"]
    assert [h["text"] for h in spk2] == ["hello world", "hello word"]
    assert [h["scores"]["total"] for h in spk2] == [-3.5, -6.5]
    assert spk2[0]["scores"]["decoder"] == -2.0 and spk2[0]["scores"]["lm"] == -2.0
    for row in rows:  # reranked: totals never increase down a list
        totals = [h["scores"]["total"] for h in row["hyps"]]
        assert totals == sorted(totals, reverse=True)
    # spk-1 keeps all three hypotheses, best (the oracle) first.
    assert [h["text"] for h in rows[0]["hyps"]] == [
        "the cat sat on the mat",
        "the cat sat on a mat",
        "a cat sat on the mat too",
    ]

    oracle = {utt: words for utt, words in TUNE_REFS.items()}
    oracle["spk-6"] = "ask her to bring this things"
    expected = "".join(f"{utt} {words}\n" for utt, words in oracle.items())
    assert (outdir / "1best.txt").read_text(encoding="utf-8") == expected

    wer_txt = (outdir / "wer.txt").read_text(encoding="utf-8")
    assert "Sum/Avg" in wer_txt
    assert f"{FIRST_PASS_LINE} first pass\n{ORACLE_LINE} rescored\n" in wer_txt


def test_rescore_without_ref(tmp_path: Path, tune_set: Path) -> None:
    # decoder only, with a large word bonus: spk-1 picks its 7-word hypothesis 3.
    weights = write_weights(tmp_path / "w.json", {"decoder": 1.0}, length=3.0)
    outdir = tmp_path / "out"
    outdir.mkdir()
    (outdir / "wer.txt").write_text("stale report of an earlier run\n")
    refused = run(
        [
            "rescore",
            "--nbest",
            tune_set,
            "--weights",
            weights,
            "--out",
            outdir,
            "--utt2spk",
            weights,
        ]
    )
    assert refused.exit_code == 2 and "--utt2spk is only used with --ref" in refused.output
    result = run(["rescore", "--nbest", tune_set, "--weights", weights, "--out", outdir])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == [
        f"wrote {outdir / 'nbest.jsonl'}, {outdir / '1best.txt'} and 1best.trn"
    ]
    assert not (outdir / "wer.txt").exists()
    first = (outdir / "1best.txt").read_text(encoding="utf-8").splitlines()[0]
    assert first == "spk-1 a cat sat on the mat too"
    rows = read_jsonl(outdir / "nbest.jsonl")
    assert "ref" not in rows[0] or rows[0]["ref"] is None
    # -3 + 3 * 7 = 18
    assert rows[0]["hyps"][0]["scores"]["total"] == 18.0


def test_rescore_with_kenlm_feature(
    tmp_path: Path, espnet_factory: Factory, tiny_arpa: Path
) -> None:
    dev = espnet_factory(
        "dev",
        [("spk-1", [("b a", -1.0, -1.0, -1.0), ("a b", -2.0, -2.0, -2.0), ("a c b", -3, -3, -3)])],
    )
    weights = write_weights(tmp_path / "w.json", {"x": 1.0})
    outdir = tmp_path / "out"
    args = ["--lm", f"x=kenlm:{tiny_arpa}", "--weights", weights, "--out", outdir]
    result = run(["rescore", "--nbest", dev, *args])
    assert result.exit_code == 0, result.output
    hyps = {h["text"]: h["scores"] for h in read_jsonl(outdir / "nbest.jsonl")[0]["hyps"]}
    # log10 p: "a b" -0.30103 - 0.39794 - 0.2; "b a" (-0.30103 - 0.52288) + (-0.2 - 0.52288) - 0.5;
    # "a c b" -0.30103 + (-0.1 - 1.0 for <unk>) - 0.52288 - 0.2 (backoff of <unk> is 0).
    expected = {"a b": -0.89897, "b a": -2.04679, "a c b": -2.12391}
    for text, log10 in expected.items():
        assert hyps[text]["x"] == pytest.approx(log10 * LN10, abs=1e-5)
        assert hyps[text]["total"] == pytest.approx(log10 * LN10, abs=1e-5)
    assert {t: s["x_oov"] for t, s in hyps.items()} == {"a b": 0.0, "b a": 0.0, "a c b": 1.0}
    assert (outdir / "1best.txt").read_text(encoding="utf-8") == "spk-1 a b\n"


def test_rescore_absent_feature_leaves_outputs(tmp_path: Path, tune_set: Path) -> None:
    outdir = tmp_path / "out"
    outdir.mkdir()
    old = write(outdir / "1best.txt", "OLD\n")
    weights = write_weights(tmp_path / "w.json", {"decoder": 1.0, "nosuch": 0.5})
    result = run(["rescore", "--nbest", tune_set, "--weights", weights, "--out", outdir])
    assert_usage_error(result, "nosuch")
    assert old.read_text(encoding="utf-8") == "OLD\n"
    assert sorted(p.name for p in outdir.iterdir()) == ["1best.txt"]


def test_rescore_weights_not_json(tmp_path: Path, tune_set: Path) -> None:
    outdir = tmp_path / "out"
    outdir.mkdir()
    write(outdir / "1best.txt", "OLD\n")
    weights = write(tmp_path / "w.json", "decoder 1.0\n")
    result = run(["rescore", "--nbest", tune_set, "--weights", weights, "--out", outdir])
    assert_input_error(result, f"{weights}:1: ", "invalid JSON")
    assert (outdir / "1best.txt").read_text(encoding="utf-8") == "OLD\n"


def test_rescore_weights_wrong_format_tag(tmp_path: Path, tune_set: Path) -> None:
    weights = write(tmp_path / "w.json", json.dumps({"features": {"decoder": 1.0}}))
    result = run(["rescore", "--nbest", tune_set, "--weights", weights, "--out", tmp_path / "o"])
    assert_input_error(result, str(weights), "rescorer-weights")
    assert not (tmp_path / "o").exists()


def test_rescore_bad_utt2spk_leaves_outputs(tmp_path: Path, tune_set: Path) -> None:
    ref = tune_set / "references" / "ref_wer.trn"
    outdir = tmp_path / "out"
    outdir.mkdir()
    olds = {name: write(outdir / name, f"OLD {name}\n") for name in ("nbest.jsonl", "1best.txt")}
    olds["wer.txt"] = write(outdir / "wer.txt", "OLD wer.txt\n")
    utt2spk = write(tmp_path / "utt2spk", "spk-1 A\n")  # no speaker for the other utterances
    weights = write_weights(tmp_path / "w.json", {"decoder": 1.0, "lm": 1.0})
    args = ["--ref", ref, "--utt2spk", utt2spk, "--weights", weights, "--out", outdir]
    result = run(["rescore", "--nbest", tune_set, *args])
    assert_input_error(result, str(utt2spk), "spk-2")
    for name, path in olds.items():
        assert path.read_text(encoding="utf-8") == f"OLD {name}\n"


# -- ppl ----------------------------------------------------------------------------------------


def _ppl_numbers(output: str) -> tuple[str, float, int, float]:
    first, logprob, ppl = output.splitlines()[:3]
    m = re.fullmatch(r"logprob \(ln\) (\S+) over (\d+) tokens incl\. </s>, .*", logprob)
    assert m is not None, output
    p = re.fullmatch(r"ppl (\S+)", ppl)
    assert p is not None, output
    return first, float(m.group(1)), int(m.group(2)), float(p.group(1))


# log10 of "a b" and "b a" under the tiny ARPA, worked out in test_rescore_with_kenlm_feature.
AB_BA_LOG10 = -0.30103 - 0.39794 - 0.2 + (-0.30103 - 0.52288) + (-0.2 - 0.52288) - 0.5


@pytest.mark.parametrize(
    ("fmt", "text"),
    [
        ("plain", "a b\n\nb a\n"),  # the blank line is not a sentence
        ("kaldi", "u1 a b\nu2 b a\n"),
        ("trn", "a b\t(u1)\nb a\t(u2)\n"),
    ],
)
def test_ppl_hand_computed(tmp_path: Path, tiny_arpa: Path, fmt: str, text: str) -> None:
    path = write(tmp_path / f"text.{fmt}", text)
    args = ["ppl", "--lm", f"kenlm:{tiny_arpa}", "--text", path]
    result = run([*args, "--text-format", fmt] if fmt != "plain" else args)
    assert result.exit_code == 0, result.output
    first, total, tokens, ppl = _ppl_numbers(result.output)
    assert first == "2 sentences, 4 words, 0 OOVs (0.00%)"
    expected = AB_BA_LOG10 * LN10  # -6.7829
    assert f"{total:.2f}" == f"{expected:.2f}" == "-6.78"
    assert tokens == 6
    assert ppl == pytest.approx(math.exp(-expected / 6), abs=0.005)
    assert result.output.splitlines()[3].endswith("over 6 tokens")  # no OOVs to leave out


def test_ppl_oov(tmp_path: Path, tiny_arpa: Path) -> None:
    path = write(tmp_path / "oov.txt", "a c b\n")
    result = run(["ppl", "--lm", f"kenlm:{tiny_arpa}", "--text", path])
    assert result.exit_code == 0, result.output
    first, total, tokens, _ = _ppl_numbers(result.output)
    assert first == "1 sentences, 3 words, 1 OOVs (33.33%)"
    assert f"{total:.2f}" == f"{-2.12391 * LN10:.2f}"
    assert tokens == 4
    # Without the OOV: a, b and </s>: -0.30103 - 0.52288 - 0.2 (log10) over 3 tokens.
    known = math.exp(1.02391 * LN10 / 3)
    assert result.output.splitlines()[3] == f"ppl excluding OOVs {known:.2f} over 3 tokens"


def test_ppl_errors(tmp_path: Path, tiny_arpa: Path) -> None:
    empty = write(tmp_path / "empty.txt", "\n\n")
    assert_input_error(run(["ppl", "--lm", f"kenlm:{tiny_arpa}", "--text", empty]), "no sentences")
    text = write(tmp_path / "t.txt", "a b\n")
    missing = run(["ppl", "--lm", f"kenlm:{tmp_path / 'none.arpa'}", "--text", text])
    assert_input_error(missing, "none.arpa: model file not found")
    unknown_kind = run(["ppl", "--lm", f"nosuchkind:{tiny_arpa}", "--text", text])
    assert_usage_error(unknown_kind, "nosuchkind")
    bad_trn = write(tmp_path / "bad.trn", "a b\n")
    result = run(["ppl", "--lm", f"kenlm:{tiny_arpa}", "--text", bad_trn, "--text-format", "trn"])
    assert_input_error(result, f"{bad_trn}:1:")


# -- ngram build --------------------------------------------------------------------------------


@pytest.fixture()
def corpus(tmp_path: Path) -> tuple[Path, set[str]]:
    """300 pseudo-random sentences over 40 words (fixed seed) and the words they use."""
    rng = random.Random(20240601)
    words = [f"w{i:02d}" for i in range(40)]
    lines = [" ".join(rng.choices(words, k=rng.randint(3, 9))) for _ in range(300)]
    path = write(tmp_path / "corpus.txt", "\n".join(lines) + "\n")
    return path, {w for line in lines for w in line.split()}


def test_ngram_build_arpa(tmp_path: Path, corpus: tuple[Path, set[str]]) -> None:
    text, vocab = corpus
    out = tmp_path / "lm" / "3gram.arpa"
    result = run(
        [
            "ngram",
            "build",
            "--text",
            text,
            "--order",
            "3",
            "--arpa",
            "--discount-fallback",
            "--memory",
            "64M",
            "--out",
            out,
        ]
    )
    assert result.exit_code == 0, result.output
    assert result.output.startswith(f"wrote {out} (")
    head = out.read_text(encoding="utf-8").split("\n\n", 2)[0]
    counts = dict(re.findall(r"^ngram (\d)=(\d+)$", head, re.MULTILINE))
    assert sorted(counts) == ["1", "2", "3"]
    assert int(counts["1"]) == len(vocab) + 3  # + <s>, </s>, <unk>
    assert not list(out.parent.glob(".*"))  # no temporary files left behind


def test_ngram_build_binary(tmp_path: Path, corpus: tuple[Path, set[str]]) -> None:
    kenlm = pytest.importorskip("kenlm")
    text, vocab = corpus
    extra = write(tmp_path / "extra.txt", "w00 w01 zz\n")  # two texts are concatenated
    out = tmp_path / "3gram.bin"
    args = ["--text", text, "--text", extra, "--order", "3", "--discount-fallback"]
    result = run(["ngram", "build", *args, "--memory", "64M", "--out", out])
    assert result.exit_code == 0, result.output
    assert not out.read_bytes()[:64].lstrip().startswith(b"\\data\\")
    model = kenlm.Model(str(out))
    assert model.order == 3
    assert "zz" in model and "w00" in model and "nope" not in model
    assert all(w in model for w in vocab)


def test_ngram_build_errors(tmp_path: Path, corpus: tuple[Path, set[str]]) -> None:
    text, _ = corpus
    out = tmp_path / "lm.arpa"
    pruned = run(["ngram", "build", "--text", text, "--order", "3", "--prune", "1,1", "--out", out])
    assert_usage_error(pruned, "unigrams cannot be pruned")
    too_many = run(
        ["ngram", "build", "--text", text, "--order", "2", "--prune", "0,1,1", "--out", out]
    )
    assert_usage_error(too_many, "3 thresholds")
    not_ints = run(["ngram", "build", "--text", text, "--prune", "0,x", "--out", out])
    assert_usage_error(not_ints, "comma-separated integers")
    missing = run(["ngram", "build", "--text", tmp_path / "none.txt", "--out", out])
    assert_input_error(missing, f"{tmp_path / 'none.txt'}: ", "expected an existing file")
    order = run(["ngram", "build", "--text", text, "--order", "7", "--out", out])
    assert_usage_error(order, "--order")
    assert not out.exists()


# -- convert ------------------------------------------------------------------------------------


def test_convert_round_trip(tmp_path: Path, tune_set: Path) -> None:
    jsonl = tmp_path / "set.jsonl"
    result = run(["convert", "--nbest", tune_set, "--to", "jsonl", "--out", jsonl])
    assert result.exit_code == 0, result.output
    assert result.output == f"wrote 6 lists to {jsonl} (jsonl)\n"
    kaldi_dir = tmp_path / "kaldi"
    result = run(["convert", "--nbest", jsonl, "--to", "kaldi", "--out", kaldi_dir])
    assert result.exit_code == 0, result.output
    assert (kaldi_dir / "lm_cost").is_file()

    original = read_nbest(tune_set, "espnet")
    back = read_nbest(kaldi_dir, "kaldi")
    assert list(back) == list(original)
    for utt, nb in original.items():
        assert [h.words for h in back[utt]] == [h.words for h in nb]
        assert [dict(h.scores) for h in back[utt]] == [dict(h.scores) for h in nb]
    # Spot check by hand: spk-4's hypothesis 3 from TUNE_UTTS (score = 0.6 d + 0.4 c + 0.6 l).
    hyp = back["spk-4"][2]
    assert hyp.text == "won two three four"
    assert (hyp.scores["decoder"], hyp.scores["ctc"], hyp.scores["lm"]) == (-3.0, -3.0, -8.0)
    assert hyp.scores["score"] == pytest.approx(0.6 * -3 + 0.4 * -3 + 0.6 * -8)
    # Kaldi stores costs: the negated scores.
    first_cost = (kaldi_dir / "lm_cost").read_text(encoding="utf-8").split("\n", 1)[0]
    assert first_cost.split() == ["spk-1-1", "6.0"]


def test_convert_errors(tmp_path: Path, tune_set: Path) -> None:
    result = run(["convert", "--nbest", tune_set, "--to", "srilm2", "--out", tmp_path / "x"])
    assert_usage_error(result, "--to")
    bad = write(tmp_path / "bad.jsonl", '{"utt": "u1", "hyps": 3}\n')
    result = run(["convert", "--nbest", bad, "--to", "json", "--out", tmp_path / "x.json"])
    assert_input_error(result, f"{bad}:1:", "'hyps' must be a list")


# -- help ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "example"),
    [
        (["wer"], "rescorer wer --ref DEV/references/ref_wer.trn --hyp"),
        (["tune"], "rescorer tune --nbest DEV"),
        (["rescore"], "rescorer rescore --nbest DEV"),
        (["ppl"], "rescorer ppl --lm kenlm:4gram.bin"),
        (["ngram", "build"], "rescorer ngram build --text books.txt"),
        (["convert"], "rescorer convert --nbest"),
    ],
)
def test_help_shows_example(command: list[str], example: str) -> None:
    for flag in ("--help", "-h"):
        result = run([*command, flag], quiet=False)
        assert result.exit_code == 0, result.output
        assert result.output.startswith(f"Usage: main {' '.join(command)} [OPTIONS]")
        assert "Example" in result.output
        assert example in result.output


def test_group_help() -> None:
    result = run(["--help"], quiet=False)
    assert result.exit_code == 0
    for name in ("wer", "tune", "rescore", "ppl", "ngram", "convert"):
        assert re.search(rf"^\s+{name}\s", result.output, re.MULTILINE), name
    result = run(["ngram", "--help"], quiet=False)
    assert result.exit_code == 0 and re.search(r"^\s+build\s", result.output, re.MULTILINE)


# -- the real data ------------------------------------------------------------------------------


def test_real_data_wer_and_oracle(espnet_dir: Path) -> None:
    dev_clean = espnet_dir / "dev_clean"
    result = run(
        [
            "wer",
            "--ref",
            dev_clean / "references" / "ref_wer.trn",
            "--hyp",
            dev_clean / "raw_hypotheses" / "1best_recog" / "text",
            "--no-summary",
        ]
    )
    assert result.exit_code == 0, result.output
    assert wer_lines(result.output) == [
        f"%WER 1.70 [ 925 / 54402, 92 ins, 86 del, 747 sub ] "
        f"{dev_clean / 'raw_hypotheses' / '1best_recog' / 'text'}"
    ]
    dev_other = espnet_dir / "dev_other"
    ref = dev_other / "references" / "ref_wer.trn"
    result = run(["wer", "--ref", ref, "--nbest", dev_other, "--oracle", "--no-summary"])
    assert result.exit_code == 0, result.output
    assert wer_lines(result.output) == [
        f"%WER 3.61 [ 1840 / 50948, 160 ins, 155 del, 1525 sub ] {dev_other} (first hypotheses)",
        "%WER 1.76 [ 899 / 50948, 63 ins, 56 del, 780 sub ] oracle over 30-best",
    ]


def test_score_then_tune_and_rescore_without_lm(
    tmp_path: Path, espnet_factory: Factory, tiny_arpa: Path
) -> None:
    dev = espnet_factory(
        "dev",
        [("spk-1", [("b a", -1.0, -1.0, -1.0), ("a b", -2.0, -2.0, -2.0), ("a c b", -3, -3, -3)])],
        {"spk-1": "a b"},
    )
    scored = tmp_path / "scored.jsonl"
    ref = dev / "references" / "ref_wer.trn"
    result = run(
        ["score", "--nbest", dev, "--lm", f"x=kenlm:{tiny_arpa}", "--ref", ref, "--out", scored]
    )
    assert result.exit_code == 0, result.output
    (row,) = read_jsonl(scored)
    assert [h["text"] for h in row["hyps"]] == ["b a", "a b", "a c b"]  # the lists' own order
    assert row["hyps"][1]["scores"]["x"] == pytest.approx(-0.89897 * LN10, abs=1e-5)
    assert row["ref"] == "a b"
    weights = write_weights(tmp_path / "w.json", {"x": 1.0})
    out = tmp_path / "out"
    result = run(["rescore", "--nbest", scored, "--ref", ref, "--weights", weights, "--out", out])
    assert result.exit_code == 0, result.output
    assert (out / "1best.txt").read_text(encoding="utf-8") == "spk-1 a b\n"
    assert run(["score", "--nbest", dev, "--out", scored]).exit_code == 2  # no --lm


def test_empty_inputs_are_errors(tmp_path: Path, tiny_arpa: Path) -> None:
    empty = write(tmp_path / "empty.jsonl", "")
    for args in (
        ["score", "--nbest", empty, "--lm", f"kenlm:{tiny_arpa}", "--out", tmp_path / "o.jsonl"],
        ["convert", "--nbest", empty, "--to", "kaldi", "--out", tmp_path / "k"],
    ):
        result = run(args)
        assert result.exit_code == 2, result.output
        assert f"{empty}: no N-best lists in it" in result.output
    assert not (tmp_path / "o.jsonl").exists()


def test_light_commands_import_no_heavy_package() -> None:
    """`wer`, `convert`, `tune` and `rescore` with KenLM never need torch, ONNX or sentencepiece:
    the CLI imports them only inside the commands and loaders that do (start-up time)."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from click.testing import CliRunner\n"
        "from rescorer.cli.main import main\n"
        "for cmd in ('wer', 'convert', 'tune', 'rescore', 'score', 'context'):\n"
        "    assert CliRunner().invoke(main, [cmd, '--help']).exit_code == 0, cmd\n"
        "heavy = ('torch', 'onnx', 'onnxruntime', 'sentencepiece', 'transformers', 'lm_models')\n"
        "print(sorted(m for m in heavy if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_wer_on_a_trn_and_a_kaldi_text_imports_no_format_it_does_not_read(
    tmp_path: Path,
) -> None:
    """`rescorer wer --ref X.trn --hyp Y` (the start-up jiwer is compared with, issue 50) reads
    two texts: it imports neither the N-best registry and readers, nor sclite's stm/ctm reader,
    nor numpy, json or gzip; an stm/ctm pair imports the sclite reader."""
    import ast
    import subprocess
    import sys

    ref = write(tmp_path / "ref.trn", "the cat sat\t(a-1)\nhello\t(a-2)\n")
    hyp = write(tmp_path / "hyp.txt", "a-1 the cat sad\na-2 hello\n")
    stm = write(tmp_path / "ref.stm", "f 1 spk 0.0 1.0 the cat\n")
    ctm = write(tmp_path / "hyp.ctm", "f 1 0.1 0.2 the\nf 1 0.5 0.2 cat\n")
    heavy = (
        "rescorer.formats.registry",
        "rescorer.formats.espnet",
        "rescorer.formats.sclite",
        "rescorer.nbest",
        "numpy",
        "json",
        "gzip",
    )
    code = (
        "import sys\n"
        "from rescorer.cli.main import run\n"
        "sys.argv = ['rescorer', 'wer', '--no-summary'] + sys.argv[1:]\n"
        "try:\n    run()\nexcept SystemExit as e:\n    assert not e.code, e.code\n"
        f"print(sorted(m for m in {heavy!r} if m in sys.modules))"
    )

    def loaded(*args: Path) -> list[str]:
        argv = [sys.executable, "-c", code, "--ref", str(args[0]), "--hyp", str(args[1])]
        out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
        assert out.startswith("%WER "), out
        return ast.literal_eval(out.splitlines()[-1])

    assert loaded(ref, hyp) == []
    assert "rescorer.formats.sclite" in loaded(stm, ctm)


@pytest.mark.parametrize(
    "args",
    [
        ["fnlm-eval", "--model", "{missing}", "--text", "{file}"],
        ["fnlm-train", "{file}", "--train-shards", "{file}", "--out", "{out}"],
        ["export", "{missing}", "{out}.onnx"],
    ],
)
def test_a_folder_argument_that_is_not_a_folder_is_one_line(
    args: list[str], tmp_path: Path
) -> None:
    """Checkpoint and shard folders: a missing path or a file is an input error naming the
    path, not a usage block."""
    (tmp_path / "f.json").write_text("{}\n", encoding="utf-8")
    names = {"missing": tmp_path / "nowhere", "file": tmp_path / "f.json", "out": tmp_path / "o"}
    result = run([a.format(**names) for a in args])
    found = "a file" if "--train-shards" in args else "nothing"
    assert_input_error(result, "expected an existing folder", f"found {found} there")


def test_every_seed_option_takes_only_a_generator_seed() -> None:
    """A seed numpy and torch cannot take (-1, 2**70) is refused naming --seed (issues 51/52),
    not by numpy's "expected non-negative integer" or a traceback."""
    seeded = [(n, p) for n, c in leaf_commands() for p in c.params if p.name == "seed"]
    assert len(seeded) >= 5
    for name, param in seeded:
        assert isinstance(param.type, click.IntRange), name
        assert (param.type.min, param.type.max) == (0, 2**32 - 1), name
    for value in ("-1", str(2**70)):
        result = CliRunner().invoke(main, ["keyboard-compare", "a", "b", "--seed", value])
        assert result.exit_code == 2
        assert "Invalid value for '--seed'" in result.output
