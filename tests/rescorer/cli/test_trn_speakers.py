"""Speakers from trn ids by sclite's rule (``-i rm``: the id up to its first '-'), without
--utt2spk, and --utt2spk winning when given (issue 48)."""

from __future__ import annotations

import re
from pathlib import Path

from click.testing import CliRunner

from rescorer.cli.main import main
from rescorer.refs import trn_speakers

ROW = re.compile(r"^\s*\|\s*(\S+)\s*\|\s*(\d+)\s+(\d+)\s*\|((?:\s*[\d.]+){6})\s*\|\s*$")


def speaker_rows(text: str) -> dict[str, list[str]]:
    """``{speaker: [#snt, #wrd, corr, sub, del, ins, err, s.err]}`` of the first table."""
    rows: dict[str, list[str]] = {}
    for line in text.splitlines():
        m = ROW.match(line)
        if m and m.group(1) not in rows:
            rows[m.group(1)] = [m.group(2), m.group(3), *m.group(4).split()]
        elif rows and "SUMMARY" in line:
            break  # the second table (counts) of sclite's report
    return rows


def test_trn_speakers_rule() -> None:
    assert trn_speakers(["1272-128104-0000", "1272-135031-0001", "174-50561-0000"]) == {
        "1272-128104-0000": "1272",
        "1272-135031-0001": "1272",
        "174-50561-0000": "174",
    }
    assert trn_speakers(["cmh_sa01", "cmh_sa02"]) is None  # no '-': no speakers named
    assert trn_speakers(["a-1", "b-1"]) is None  # one utterance each: nothing grouped
    assert trn_speakers(["-x", "-y"]) is None


def test_wer_groups_trn_speakers_as_sclite_did(espnet_dir: Path, tmp_path: Path) -> None:
    base = espnet_dir / "dev_clean"
    ref = base / "references" / "ref_wer.trn"
    result = CliRunner().invoke(main, ["wer", "--ref", str(ref), "--nbest", str(base), "--summary"])
    assert result.exit_code == 0, result.output
    ours = speaker_rows(result.output)
    sclite = speaker_rows((base / "result_wer.txt").read_text(encoding="utf-8"))
    assert len(sclite) == 41 and "Sum/Avg" in sclite  # 40 speakers and the total
    assert ours == sclite

    # --utt2spk wins: one speaker for everything
    utt2spk = tmp_path / "utt2spk"
    ids = [line.split()[0] for line in (base / "utt2spk").read_text().splitlines()]
    utt2spk.write_text("".join(f"{u} everyone\n" for u in ids), encoding="utf-8")
    result = CliRunner().invoke(
        main,
        ["wer", "--ref", str(ref), "--nbest", str(base), "--summary", "--utt2spk", str(utt2spk)],
    )
    assert result.exit_code == 0, result.output
    assert list(speaker_rows(result.output)) == ["everyone", "Sum/Avg"]


def test_rescore_writes_a_trn_with_the_references_ids(espnet_dir: Path, tmp_path: Path) -> None:
    base = espnet_dir / "dev_clean"
    ref = base / "references" / "ref_wer.trn"
    weights = tmp_path / "w.json"
    weights.write_text(
        '{"format": "rescorer-weights", "version": 1, "features": {"decoder": 1, "lm": 0.6}}',
        encoding="utf-8",
    )
    out = tmp_path / "out"
    args = ["-q", "rescore", "--nbest", str(base), "--ref", str(ref), "--weights", str(weights)]
    result = CliRunner().invoke(main, [*args, "--out", str(out)])
    assert result.exit_code == 0, result.output
    ref_ids = [line.rsplit("(", 1)[1] for line in ref.read_text().splitlines()]
    hyp_lines = (out / "1best.trn").read_text(encoding="utf-8").splitlines()
    assert sorted(line.rsplit("(", 1)[1] for line in hyp_lines) == sorted(ref_ids)
    kaldi = dict(line.partition(" ")[::2] for line in (out / "1best.txt").read_text().splitlines())
    for line in hyp_lines:  # the same hypotheses as 1best.txt
        words, _, trn_id = line.rpartition("\t(")
        assert kaldi[trn_id[:-1].split("-", 2)[2]] == words
    # and sclite-style scoring of the trn equals that of the Kaldi text
    a = CliRunner().invoke(main, ["wer", "--ref", str(ref), "--hyp", str(out / "1best.trn")])
    b = CliRunner().invoke(main, ["wer", "--ref", str(ref), "--hyp", str(out / "1best.txt")])
    assert a.exit_code == b.exit_code == 0
    assert a.output.split("]")[0] == b.output.split("]")[0]
