"""Building n-grams with lmplz/build_binary through the library."""

from __future__ import annotations

import random
from pathlib import Path

import kenlm
import pytest

from rescorer.core.errors import InputError
from rescorer.ngram import KenLMToolError, NgramOptions, build_ngram, find_program


def corpus(tmp_path: Path, n: int = 400) -> Path:
    rng = random.Random(0)
    words = [f"w{i}" for i in range(30)]
    path = tmp_path / "text.txt"
    path.write_text(
        "\n".join(" ".join(rng.choice(words) for _ in range(rng.randint(3, 9))) for _ in range(n))
        + "\n"
    )
    return path


def arpa_counts(path: Path) -> dict[int, int]:
    counts = {}
    for line in path.read_text().splitlines():
        if line.startswith("ngram "):
            order, count = line[6:].split("=")
            counts[int(order)] = int(count)
        if line.startswith("\\1-grams"):
            break
    return counts


def test_arpa_has_every_word(tmp_path: Path) -> None:
    out = build_ngram(
        [corpus(tmp_path)],
        tmp_path / "m.arpa",
        NgramOptions(order=3, binary=None, discount_fallback=True),
    )
    counts = arpa_counts(out)
    assert counts[1] == 30 + 3  # the words, <s>, </s>, <unk>
    assert sorted(counts) == [1, 2, 3]
    assert not list(tmp_path.glob(".ngram-*"))  # temp folder cleaned up


def test_binary_loads_and_pruning_shrinks(tmp_path: Path) -> None:
    text = corpus(tmp_path, 2000)
    full = build_ngram(
        [text], tmp_path / "full.arpa", NgramOptions(order=3, binary=None, discount_fallback=True)
    )
    pruned = build_ngram(
        [text],
        tmp_path / "pruned.arpa",
        NgramOptions(order=3, binary=None, prune=(0, 0, 1), discount_fallback=True),
    )
    assert arpa_counts(pruned)[3] < arpa_counts(full)[3]
    assert arpa_counts(pruned)[1] == arpa_counts(full)[1]
    binary = build_ngram(
        [text, text], tmp_path / "m.bin", NgramOptions(order=3, discount_fallback=True)
    )
    model = kenlm.Model(str(binary))
    assert model.order == 3
    assert "w3" in model and "zzz" not in model


def test_failed_build_keeps_the_old_model(tmp_path: Path) -> None:
    out = tmp_path / "m.arpa"
    out.write_text("old model\n")
    bad = tmp_path / "bad.txt"
    bad.write_text("a <unk> b\n")  # lmplz refuses <unk> in text without --skip_symbols
    # refused before lmplz runs, naming the file, the line and the toolkit's flag
    with pytest.raises(InputError, match=r"bad.txt:1: .*'<unk>'.*--skip-symbols"):
        build_ngram([bad], out, NgramOptions(order=2, binary=None, discount_fallback=True))
    assert out.read_text() == "old model\n"


def test_options_are_checked() -> None:
    with pytest.raises(ValueError, match="between 1 and 6"):
        NgramOptions(order=7)
    with pytest.raises(ValueError, match="unigrams cannot be pruned"):
        NgramOptions(order=3, prune=(1, 1))
    with pytest.raises(ValueError, match="must not decrease"):
        NgramOptions(order=3, prune=(0, 2, 1))
    with pytest.raises(ValueError, match="thresholds but the order"):
        NgramOptions(order=2, prune=(0, 0, 1))
    with pytest.raises(ValueError, match="binary must be one of"):
        NgramOptions(binary="hash")


def test_program_lookup(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert find_program("lmplz").name == "lmplz"
    monkeypatch.setenv("RESCORER_KENLM_BIN", str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr("sys.prefix", str(tmp_path))
    monkeypatch.setenv("RESCORER_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("RESCORER_KENLM_BUILD", "0")
    with pytest.raises(KenLMToolError, match="rescorer ngram setup"):
        find_program("lmplz")


@pytest.mark.parametrize("memory", ["lots", "-1G", "0", "0%", "101%", "100000T", "1G --help", ""])
def test_memory_is_checked_before_lmplz_runs(tmp_path: Path, memory: str) -> None:
    """lmplz's -S value never reaches the program unchecked (issue 51): one line, exit 2."""
    from click.testing import CliRunner

    from rescorer.cli.main import main

    out = tmp_path / "m.bin"
    args = ["ngram", "build", "--text", str(corpus(tmp_path)), "--memory", memory]
    result = CliRunner().invoke(main, [*args, "--out", str(out)])
    assert result.exit_code == 2, result.output
    assert result.output.count("\n") == 1 and "--memory" in result.output, result.output
    assert not out.exists()
    for fine in ("2G", "500M", "40%", "1.5G", "64M"):
        assert NgramOptions(memory=fine).memory == fine


def test_too_little_text_says_what_to_do_in_one_line(tmp_path: Path) -> None:
    """lmplz's Kneser-Ney discounts cannot be estimated on a tiny text: the toolkit's own flag
    is named (not lmplz's --discount_fallback), in one line naming the text, exit 2."""
    from click.testing import CliRunner

    from rescorer.cli.main import main

    text = tmp_path / "tiny.txt"
    text.write_text("a b c\nb c d\n")
    result = CliRunner().invoke(main, ["ngram", "build", "--text", str(text), "--out", "t.bin"])
    assert result.exit_code == 2, result.output
    assert result.output.count("\n") == 1, result.output
    assert "tiny.txt" in result.output and "--discount-fallback" in result.output
    assert "--discount_fallback" not in result.output
