"""The Python API (`from rescorer import ...`), `python -m rescorer` and `--version`."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

import rescorer
from rescorer.cli.main import main, run

# utterance ids "spk-rest" as in ESPnet (the trn ids are "spk-spk-rest")
UTTS = [
    ("spk-u1", [("a b a", -3, -4, -2), ("a b b", -3.2, -3.5, -2.5), ("b b", -4, -3, -3)]),
    ("spk-u2", [("b a", -2, -2.5, -1.5), ("b a a", -2.1, -2, -2.2), ("a", -3.5, -3, -1)]),
    ("spk-u3", [("a a", -1, -1.5, -1.1), ("a", -1.2, -1.1, -0.9), ("a a b", -2.5, -2.2, -1.9)]),
]
REFS = {"spk-u1": "a b b", "spk-u2": "b a a", "spk-u3": "a a"}


def test_import_is_light() -> None:
    code = (
        "import sys, rescorer\n"
        "heavy = [m for m in ('numpy', 'torch', 'click', 'onnxruntime') if m in sys.modules]\n"
        "print(','.join(heavy) or 'LIGHT')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "LIGHT"


def test_names_resolve_to_the_library_functions() -> None:
    from rescorer.formats import read_nbest
    from rescorer.tune import tune

    assert rescorer.read_nbest is read_nbest and rescorer.tune_weights is tune
    assert set(rescorer.__all__) <= set(dir(rescorer))
    assert isinstance(rescorer.__version__, str) and rescorer.__version__
    with pytest.raises(AttributeError, match="no attribute 'rescore_everything'"):
        rescorer.rescore_everything  # noqa: B018


def test_rescoring_in_a_few_lines_equals_the_cli(
    espnet_factory: Callable[..., Path],
    tiny_arpa: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from rescorer import (
        add_lm_scores,
        load_lm,
        one_best,
        read_nbest,
        read_references,
        score_corpus,
        tune_weights,
    )

    root = espnet_factory("dev", UTTS, REFS)
    dev = read_nbest(root)
    refs = read_references(root / "references" / "ref_wer.trn")
    dev, report = add_lm_scores(dev, load_lm(f"kenlm:{tiny_arpa}"), "tiny")
    assert capsys.readouterr().err == ""  # library calls draw no progress bar unless asked
    add_lm_scores(dev, load_lm(f"kenlm:{tiny_arpa}"), "again", progress=True)
    assert "scoring with again" in capsys.readouterr().err
    result = tune_weights(dev, refs, ["decoder", "ctc", "tiny"])
    wer = score_corpus(refs, one_best(dev, result.weights))
    assert wer.total.errors == result.errors and report.sentences == 9
    # the CLI's tune on the same data reports the same errors
    out = tmp_path / "w.json"
    cli = CliRunner().invoke(
        main,
        ["-q", "tune", "--nbest", str(root), "--ref", str(root / "references" / "ref_wer.trn"),
         "--lm", f"tiny=kenlm:{tiny_arpa}", "--features", "decoder,ctc,tiny", "--no-lm-oov",
         "--out", str(out)],
    )  # fmt: skip
    assert cli.exit_code == 0, cli.output
    assert f"{result.errors} errors" in cli.output or f"[ {result.errors} /" in cli.output


def test_version_and_the_module_entry_point_in_process() -> None:
    """``--version`` through CliRunner, and ``python -m rescorer`` runs the same command group
    (the subprocess test below runs it for real)."""
    import rescorer.__main__ as entry

    out = CliRunner().invoke(main, ["--version"])
    assert out.exit_code == 0 and out.output.strip() == f"rescorer, version {rescorer.__version__}"
    assert entry.run is run  # the program: main, with bulk steps freezing what they made
    helped = CliRunner().invoke(main, ["wer", "--help"])
    assert helped.exit_code == 0 and "Word error rate" in helped.output


def test_python_dash_m_and_version() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "rescorer", "--version"], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == f"rescorer, version {rescorer.__version__}"
    res = subprocess.run(
        [sys.executable, "-m", "rescorer", "wer", "--help"], capture_output=True, text=True
    )
    assert res.returncode == 0 and "Word error rate" in res.stdout
