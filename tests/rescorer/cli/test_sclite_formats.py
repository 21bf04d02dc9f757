"""``rescorer wer`` with sclite stm references, ctm hypotheses and NeMo manifests (issue 48).

Each trap of the issue first: a file of one format read as another used to give a wrong WER or
an error about something else (an stm read as Kaldi text counted its channel, speaker and times
as words); now it is read right, or refused with one line naming the file, the line, what it
looks like and the option to pass (exit status 2, no traceback).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from rescorer.cli.main import main
from rescorer.refs import read_kaldi_text, read_trn, read_utt2spk
from tests.rescorer.cli.test_cli import assert_input_error
from tests.rescorer.test_stm_ctm import MANIFEST, _write_stm_ctm

pytestmark = pytest.mark.usefixtures("restore_logging")

# The toy case of the issue: read as Kaldi text, "A spk1 0.0 2.0" were 4 more reference words.
STM = "utt1 A spk1 0.0 2.0 the cat sat\nutt2 A spk1 0.0 2.0 on the mat\n"
KALDI_HYP = "utt1 the cat sat\nutt2 on a mat\n"
CTM = (
    "utt1 A 0.1 0.3 the\nutt1 A 0.5 0.3 cat\nutt1 A 1.0 0.3 sat\n"
    "utt2 A 0.1 0.3 on\nutt2 A 0.5 0.3 a\nutt2 A 1.0 0.3 mat\n"
)


def run(args: Sequence[object], quiet: bool = True) -> Result:
    argv = (["-q"] if quiet else []) + [str(a) for a in args]
    return CliRunner().invoke(main, argv, catch_exceptions=False)


def write(tmp_path: Path, name: str, content: str) -> Path:
    path = tmp_path / name
    path.write_text(content)
    return path


def wer_line(result: Result) -> str:
    assert result.exit_code == 0, result.output
    return next(line for line in result.output.splitlines() if line.startswith("%WER"))


# -- the traps -------------------------------------------------------------------------------


def test_stm_without_header_is_not_read_as_kaldi_text(tmp_path: Path) -> None:
    ref = write(tmp_path, "ref.txt", STM)
    hyp = write(tmp_path, "hyp.txt", KALDI_HYP)
    assert_input_error(
        run(["wer", "--ref", ref, "--hyp", hyp]),
        f"{ref}:1:",
        "looks like an sclite stm reference",
        "--ref-format stm",
    )
    # named .stm, or with --ref-format stm, it is an stm: a Kaldi hypothesis is refused
    for args in (["--ref", write(tmp_path, "ref.stm", STM)], ["--ref", ref, "--ref-format", "stm"]):
        assert_input_error(
            run(["wer", *args, "--hyp", hyp]),
            str(hyp),
            "scored against an sclite ctm hypothesis (--hyp-format ctm",
        )


def test_stm_with_header_names_the_format(tmp_path: Path) -> None:
    ref = write(tmp_path, "ref", ";; sclite stm\n" + STM)
    hyp = write(tmp_path, "hyp", KALDI_HYP)
    assert_input_error(
        run(["wer", "--ref", ref, "--hyp", hyp]), f"{ref}:2:", "stm", "--ref-format stm"
    )


def test_ctm_hypothesis_names_the_format(tmp_path: Path) -> None:
    ref = write(tmp_path, "ref.trn", "the cat sat (utt1)\non the mat (utt2)\n")
    hyp = write(tmp_path, "hyp", CTM)
    assert_input_error(
        run(["wer", "--ref", ref, "--hyp", hyp]), f"{hyp}:1:", "sclite ctm", "--hyp-format ctm"
    )
    # a ctm (by name or option) needs an stm reference
    ctm = write(tmp_path, "hyp.ctm", CTM)
    for args in (["--hyp", ctm], ["--hyp", hyp, "--hyp-format", "ctm"]):
        assert_input_error(
            run(["wer", "--ref", ref, *args]),
            str(ref),
            "a ctm hypothesis is scored against an sclite stm reference (--ref-format stm)",
        )


def test_nemo_manifest_as_kaldi_is_refused(tmp_path: Path) -> None:
    manifest = write(tmp_path, "manifest.txt", MANIFEST)
    assert_input_error(
        run(["wer", "--ref", manifest, "--hyp", manifest]),
        f"{manifest}:1:",
        "looks like a NeMo manifest",
        "--hyp-format nemo",
    )
    assert_input_error(
        run(["wer", "--ref", manifest, "--hyp", manifest, "--hyp-format", "nemo"]),
        f"{manifest}:1:",
        "looks like a NeMo manifest",
        "--ref-format nemo",
    )


@pytest.mark.parametrize("name", ["manifest.json", "manifest.jsonl"])
def test_nemo_manifest_as_nbest_is_refused(tmp_path: Path, name: str) -> None:
    manifest = write(tmp_path, name, MANIFEST)
    for fmt in ("auto", "json", "jsonl"):
        assert_input_error(
            run(["wer", "--nbest", manifest, "--format", fmt]),
            str(manifest),
            "a NeMo manifest holds one hypothesis per utterance ('pred_text'), not N-best lists",
        )


# -- read right ------------------------------------------------------------------------------


def test_stm_and_ctm(tmp_path: Path) -> None:
    # utt2: "on the mat" against "on a mat": 1 substitution in 6 words
    ref = write(tmp_path, "ref.stm", STM)
    hyp = write(tmp_path, "hyp.ctm", CTM)
    expected = "%WER 16.67 [ 1 / 6, 0 ins, 0 del, 1 sub ]"
    assert wer_line(run(["wer", "--ref", ref, "--hyp", hyp])).startswith(expected)
    plain_ref = write(tmp_path, "r", ";; x\n" + STM)
    plain_hyp = write(tmp_path, "h", CTM)
    args = ["--ref", plain_ref, "--ref-format", "stm", "--hyp", plain_hyp, "--hyp-format", "ctm"]
    result = run(["wer", *args])
    assert wer_line(result).startswith(expected)
    assert re.search(r"\| spk1 +\| +2 +6 \|", result.output)  # the stm's speaker column
    # --compare takes a second ctm, cut into the same segments
    other = write(tmp_path, "other.ctm", CTM.replace(" a\n", " the\n"))
    result = run(["wer", "--ref", ref, "--hyp", hyp, "--compare", other, "--no-summary"])
    assert result.exit_code == 0, result.output
    assert "%WER 0.00 [ 0 / 6, 0 ins, 0 del, 0 sub ]" in result.output
    assert_input_error(
        run(["wer", "--ref", ref, "--hyp", hyp, "--compare", write(tmp_path, "c", KALDI_HYP)]),
        "scored against an sclite ctm hypothesis",
    )
    result = run(["wer", "--ref", ref, "--hyp", hyp, "--utt2spk", write(tmp_path, "u", "")])
    assert result.exit_code == 2 and "the stm names the speakers" in result.output


def test_stm_and_ctm_bad_lines(tmp_path: Path) -> None:
    ref = write(tmp_path, "ref.stm", STM + "utt3 A spk1 0.0\n")
    hyp = write(tmp_path, "hyp.ctm", CTM)
    assert_input_error(run(["wer", "--ref", ref, "--hyp", hyp]), f"{ref}:3:", "stm segment")
    ref = write(tmp_path, "ref.stm", STM)
    hyp = write(tmp_path, "hyp.ctm", CTM + "utt2 A 1.5 x mat\n")
    assert_input_error(run(["wer", "--ref", ref, "--hyp", hyp]), f"{hyp}:7:", "duration")
    hyp = write(tmp_path, "hyp.ctm", CTM + "utt9 A 1.5 0.1 mat\n")
    assert_input_error(
        run(["wer", "--ref", ref, "--hyp", hyp]), f"{hyp}:7:", "file 'utt9' channel 'A'"
    )


def test_stm_with_nbest_is_refused(tmp_path: Path) -> None:
    lists = write(tmp_path, "lists.jsonl", '{"utt": "utt1", "hyps": [{"text": "the cat"}]}\n')
    assert_input_error(
        run(["wer", "--ref", write(tmp_path, "ref.stm", STM), "--nbest", lists]),
        "an stm reference is scored against a ctm hypothesis",
    )


def test_nemo_manifest_both_sides(tmp_path: Path) -> None:
    # utt1 "a b" against "a c" (1 sub), utt2 "d" against "" (1 del): 2 errors in 3 words
    manifest = write(tmp_path, "manifest.json", MANIFEST)
    expected = "%WER 66.67 [ 2 / 3, 0 ins, 1 del, 1 sub ]"
    result = run(["-v", "wer", "--ref", manifest, "--hyp", manifest], quiet=False)
    assert wer_line(result).startswith(expected)
    assert f"{manifest}: read as a NeMo manifest" in result.output  # the note, with -v
    other = write(tmp_path, "m", MANIFEST)
    args = ["--ref", other, "--ref-format", "nemo", "--hyp", other, "--hyp-format", "nemo"]
    assert wer_line(run(["wer", *args])).startswith(expected)
    # a manifest's references against a Kaldi hypothesis, ids from the stems
    hyp = write(tmp_path, "hyp.txt", "utt1 a b\nutt2 d\n")
    assert wer_line(run(["wer", "--ref", manifest, "--hyp", hyp])).startswith("%WER 0.00")
    # ... and N-best lists, whose first hypotheses are "a c" and "d"
    lists = write(
        tmp_path,
        "lists.jsonl",
        '{"utt": "utt1", "hyps": [{"text": "a c"}, {"text": "a b"}]}\n'
        '{"utt": "utt2", "hyps": [{"text": "d"}]}\n',
    )
    result = run(["wer", "--ref", manifest, "--nbest", lists, "--oracle"])
    assert wer_line(result).startswith("%WER 33.33 [ 1 / 3, 0 ins, 0 del, 1 sub ]")
    assert "%WER 0.00 [ 0 / 3, 0 ins, 0 del, 0 sub ] oracle over 2-best" in result.output
    keyed = write(
        tmp_path,
        "keyed.jsonl",
        '{"audio_filepath": "a/x.wav", "utt": "u1", "text": "a b", "pred_text": "a b"}\n'
        '{"audio_filepath": "b/x.wav", "utt": "u2", "text": "c", "pred_text": "d"}\n',
    )
    assert_input_error(
        run(["wer", "--ref", keyed, "--hyp", keyed]), f"{keyed}:2:", "duplicate utterance id 'x'"
    )
    table = tmp_path / "per_utt.txt"
    result = run(["wer", "--ref", keyed, "--hyp", keyed, "--id-key", "utt", "--per-utt", table])
    assert wer_line(result).startswith("%WER 33.33 [ 1 / 3, 0 ins, 0 del, 1 sub ]")
    assert "u2" in table.read_text()


# -- parity with the trn scoring on real data -----------------------------------------------


def test_stm_ctm_parity_with_trn_on_dev_clean(espnet_dir: Path, tmp_path: Path) -> None:
    base = espnet_dir / "dev_clean"
    trn = base / "references" / "ref_wer.trn"
    text = base / "raw_hypotheses" / "1best_recog" / "text"
    utt2spk = base / "utt2spk"
    refs, hyps, spk = read_trn(trn), read_kaldi_text(text), read_utt2spk(utt2spk)
    _write_stm_ctm(refs, hyps, spk, tmp_path / "dev.stm", tmp_path / "dev.ctm", seed=2)
    by_trn = run(["wer", "--ref", trn, "--hyp", text, "--utt2spk", utt2spk])
    by_stm = run(["wer", "--ref", tmp_path / "dev.stm", "--hyp", tmp_path / "dev.ctm"])
    assert by_trn.exit_code == 0 and by_stm.exit_code == 0, by_stm.output

    def table(result: Result) -> list[str]:  # the summary and the %WER, %SER figures
        return [re.sub(r"\].*", "]", line) for line in result.output.splitlines()]

    assert table(by_stm) == table(by_trn)
    assert wer_line(by_stm).startswith("%WER 1.70 [ 925 / 54402, 92 ins, 86 del, 747 sub ]")
