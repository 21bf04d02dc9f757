"""``--normalize whisper``: exactly openai-whisper's ``EnglishTextNormalizer`` (issue 48).

The preset runs the ``whisper-normalizer`` package (the ``[whisper]`` extra) without the rules
that package adds to Whisper's; these tests skip, saying so, where it is not installed. The
comparison with openai-whisper itself (not a dependency of the project: it pulls numba, tiktoken
and triton) runs where it is installed (``pip install --no-build-isolation openai-whisper``).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from rescorer.normalize import PRESETS, get_normalizer, parse_spec

pytestmark = pytest.mark.usefixtures("restore_logging")

NO_PACKAGE = "whisper-normalizer is not installed (pip install 'rescorer[whisper]')"
N_LINES = 2000


def whisper_normalizer_installed() -> bool:
    try:
        import whisper_normalizer.english  # noqa: F401
    except ImportError:
        return False
    return True


needs_package = pytest.mark.skipif(not whisper_normalizer_installed(), reason=NO_PACKAGE)


@pytest.fixture(autouse=True)
def fresh_normalizers() -> None:
    get_normalizer.cache_clear()


def test_whisper_is_a_preset_that_stands_alone() -> None:
    assert "whisper" in PRESETS
    assert parse_spec("whisper") == ("whisper",)
    with pytest.raises(ValueError, match="stand alone"):
        parse_spec("whisper,lower")


# What openai-whisper 20250625's EnglishTextNormalizer gives (recorded from it).
OPENAI_WHISPER = [
    ("NOR IS MISTER QUILTER'S MANNER LESS INTERESTING THAN HIS MATTER",
     "nor is mister quilter is manner less interesting than his matter"),
    # whisper-normalizer alone turns this "cause" into "because"
    ("SIXTY EIGHT BISHOPS TWENTY TWO OF METROPOLITAN RANK DEFENDED HIS CAUSE",
     "68 bishops 22 of metropolitan rank defended his cause"),
    ("The colour of the harbour, the centre of the theatre.",
     "the color of the harbor the center of the theater"),
    ("Can you do today/tonight at 6:30? Mail jane.doe@enron.com",
     "can you do today tonight at 6 30 mail jane doe enron com"),
    # ... and these into "kind of", "do not know", "sort of", "because"
    ("I kinda dunno, sorta 'cause it's late.", "i kinda dunno sorta cause it is late"),
    ("It cost $20 million, about twenty-five percent more, in 1960s.",
     "it cost $20000000 about 25% more in 1960s"),
    ("[LAUGHTER] Mr. Smith (inaudible) uh said hmm that he won't go.",
     "mister smith said that he will not go"),
    ("I've got the second one and the 3rd of May.", "i have got the 2nd one and the 3rd of may"),
    ("one hundred and five point two kilograms", "105.2 kilograms"),
    ("Caf\u00e9 na\u00efve \u00c6gir", "cafe naive aegir"),
]  # fmt: skip


@needs_package
@pytest.mark.parametrize(("text", "expected"), OPENAI_WHISPER)
def test_whisper_gives_openai_whispers_output(text: str, expected: str) -> None:
    normalizer = get_normalizer("whisper")
    assert normalizer.name == "whisper" and not normalizer.is_identity
    assert normalizer.text(text) == expected
    assert normalizer.words(text.split()) == tuple(expected.split())


def test_whisper_without_the_package_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from rescorer.cli.main import main

    monkeypatch.setitem(sys.modules, "whisper_normalizer", None)
    monkeypatch.setitem(sys.modules, "whisper_normalizer.english", None)
    with pytest.raises(ValueError, match=r"pip install 'rescorer\[whisper\]'"):
        get_normalizer("whisper")
    get_normalizer.cache_clear()
    (tmp_path / "ref.txt").write_text("u1 hello\n")
    result = CliRunner().invoke(
        main,
        ["wer", "--ref", str(tmp_path / "ref.txt"), "--hyp", str(tmp_path / "ref.txt"),
         "--normalize", "whisper"],
    )  # fmt: skip
    assert result.exit_code == 2
    assert "rescorer[whisper]" in result.output


@pytest.mark.parametrize("command", ["wer", "tune", "rescore", "score", "keyboard-eval"])
def test_every_normalize_option_offers_whisper(command: str) -> None:
    from rescorer.cli.main import main

    result = CliRunner().invoke(main, [command, "--help"], terminal_width=200)
    assert result.exit_code == 0, result.output
    option = result.output[result.output.index("--normalize SPEC") :]
    assert "a preset (whisper, english, librispeech)" in " ".join(option.split()[:40])


@needs_package
def test_wer_with_whisper(tmp_path: Path) -> None:
    from rescorer.cli.main import main

    (tmp_path / "ref.txt").write_text("u1 THE COLOUR OF SIXTY EIGHT HOUSES\nu2 HE'S HERE\n")
    (tmp_path / "hyp.txt").write_text("u1 the color of 68 houses\nu2 he is there\n")
    result = CliRunner().invoke(
        main,
        ["wer", "--ref", str(tmp_path / "ref.txt"), "--hyp", str(tmp_path / "hyp.txt"),
         "--normalize", "whisper", "--no-summary"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "%WER 12.50 [ 1 / 8, 0 ins, 0 del, 1 sub ]" in result.output
    assert "(normalize: whisper)" in result.output


def _real_lines(data_dir: Path) -> list[str]:
    trn = data_dir / "nbest/librispeech-espnet/dev_clean/references/ref_wer.trn"
    enron = data_dir / "keyboard/enronmobile/mobile_orig.txt"
    for path in (trn, enron):
        if not path.is_file():
            pytest.skip(f"{path} not found")
    with trn.open(encoding="utf-8") as f:
        refs = [re.sub(r"\s*\([^()]*\)\s*$", "", next(f)) for _ in range(N_LINES)]
    with enron.open(encoding="utf-8") as f:
        sentences = [next(f).rstrip("\n").split("\t", 1)[1] for _ in range(N_LINES)]
    return refs + sentences


@needs_package
def test_whisper_equals_openai_whisper_on_real_data(data_dir: Path) -> None:
    """0 mismatches on the first 2,000 LibriSpeech dev_clean references and the first 2,000
    Enron mobile sentences (``english`` differs on 468 and 201 of them)."""
    reference = pytest.importorskip(
        "whisper.normalizers",
        reason="openai-whisper is not installed (pip install --no-build-isolation openai-whisper)",
    ).EnglishTextNormalizer()
    normalizer = get_normalizer("whisper")
    mismatches = [
        (line, expected, got)
        for line in _real_lines(data_dir)
        if (got := normalizer.text(line)) != (expected := " ".join(reference(line).split()))
    ]
    assert not mismatches, f"{len(mismatches)} mismatches, e.g. {mismatches[:3]}"
