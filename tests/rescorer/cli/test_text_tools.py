"""Issue 48 (items 5 and 6): the text tools around n-grams and conversion, as users hit them.

* ``ngram build``: the --out name says the format (``x.arpa`` never holds a binary); training
  text as Kaldi ``id words``, ``id<TAB>sentence`` or trn, normalised by ``--normalize``; a
  ``<s>`` in the text is one line naming file:line and the toolkit's ``--skip-symbols``.
* ``ngram vocab``: a KenLM model's words (ARPA, gzipped ARPA, trie and probing binaries), which
  is also where ``predict``/``keyboard-eval`` take a binary's vocabulary from; a binary without
  words gets an error that names ``ngram vocab``.
* ``convert --to text|trn`` writes the references a JSON N-best file holds; ``--rename OLD=NEW``
  lets ``--to srilm1/srilm3`` write lists whose scores have other names.
* ``-q`` silences KenLM's C++ banner (measured in a subprocess: it writes to fd 2);
  keyboard-eval's OOV warning does not advise ``--normalize`` after one was given.
"""

from __future__ import annotations

import gzip
import os
import random
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from rescorer.cli.main import main
from rescorer.kenlm_tools import lookup
from rescorer.lms.kenlm import read_arpa_unigrams

kenlm = pytest.importorskip("kenlm")
needs_lmplz = pytest.mark.skipif(
    lookup("lmplz") is None or lookup("build_binary") is None,
    reason="KenLM's lmplz/build_binary not installed (`rescorer ngram setup` builds them)",
)
ROOT = Path(__file__).resolve().parents[3]
SPECIAL = {"<s>", "</s>", "<unk>"}


def run(args: Sequence[object], quiet: bool = True) -> Result:
    argv = (["-q"] if quiet else []) + [str(a) for a in args]
    return CliRunner().invoke(main, argv, catch_exceptions=False)


def one_line_error(result: Result, *fragments: str) -> str:
    """Exit 2, one ``Error:`` line holding every fragment, no traceback."""
    assert result.exit_code == 2, result.output
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.output
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    return lines[0]


def corpus(path: Path, n: int = 300, seed: int = 7) -> tuple[Path, set[str]]:
    rng = random.Random(seed)
    words = [f"w{i:02d}" for i in range(30)]
    lines = [" ".join(rng.choices(words, k=rng.randint(3, 9))) for _ in range(n)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path, {w for line in lines for w in line.split()}


def build(text: Path, out: Path, *extra: object) -> Result:
    args = ["ngram", "build", "--text", text, "--order", "3", "--discount-fallback"]
    return run([*args, "--memory", "64M", *extra, "--out", out])


def is_arpa(path: Path) -> bool:
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rb") as f:
        return f.read(6) == b"\\data\\"


# -- ngram build: the name says the format -----------------------------------------------------


@needs_lmplz
def test_out_name_says_the_model_format(tmp_path: Path) -> None:
    """`--out x.arpa` wrote a KenLM binary: now .arpa is ARPA text, .arpa.gz gzipped ARPA,
    .bin/.binary/.klm/.mmap a binary; any other name is refused in one line (unless --arpa)."""
    text, vocab = corpus(tmp_path / "t.txt")
    for name, arpa in [("m.arpa", True), ("m.arpa.gz", True), ("m.klm", False), ("m.bin", False)]:
        out = tmp_path / name
        result = build(text, out)
        assert result.exit_code == 0, result.output
        assert is_arpa(out) is arpa, name
        assert kenlm.Model(str(out)).order == 3
        if name.endswith(".gz"):
            assert len(read_arpa_unigrams(out) or []) == len(vocab) + 3
    line = one_line_error(build(text, tmp_path / "m.lm"), "m.lm", ".arpa", ".bin", ".klm")
    assert "cannot tell the model format" in line
    assert not (tmp_path / "m.lm").exists()
    one_line_error(build(text, tmp_path / "x.bin", "--arpa"), "x.bin", "--arpa")
    assert not (tmp_path / "x.bin").exists()
    odd = tmp_path / "model.lm"  # --arpa says the format: any name
    assert build(text, odd, "--arpa").exit_code == 0
    assert is_arpa(odd)


def test_library_refuses_a_name_that_contradicts_the_options(tmp_path: Path) -> None:
    from rescorer.ngram import NgramOptions, build_ngram, model_format

    text, _ = corpus(tmp_path / "t.txt")
    with pytest.raises(ValueError, match="ARPA file's"):
        build_ngram([text], tmp_path / "m.arpa", NgramOptions(order=2))  # binary="trie"
    with pytest.raises(ValueError, match="binary's"):
        build_ngram([text], tmp_path / "m.bin", NgramOptions(order=2, binary=None))
    assert model_format("A.ARPA") == "arpa" and model_format("x.binary") == "binary"


# -- ngram build: text formats and normalisation -------------------------------------------------


@needs_lmplz
@pytest.mark.parametrize(
    ("fmt", "lines"),
    [
        ("tsv", ["e1\tThe cat, sat.", "e2\tA dog's bone!", "e3\tThe CAT ran"]),
        ("kaldi", ["u-1 The cat, sat.", "u-2 A dog's bone!", "u-3 The CAT ran"]),
        ("trn", ["The cat, sat.\t(s1-u1)", "A dog's bone!\t(s1-u2)", "The CAT ran (s1-u3)"]),
    ],
)
def test_text_format_drops_ids_and_normalize_matches_wer(
    tmp_path: Path, fmt: str, lines: list[str]
) -> None:
    """`ngram build` read `id<TAB>sentence` as words (the id a word of the model) and could not
    normalise: --text-format drops the ids, --normalize is wer's normaliser."""
    text = tmp_path / f"train.{fmt}"
    text.write_text("\n".join(lines * 20) + "\n", encoding="utf-8")
    out = tmp_path / "m.arpa"
    result = build(text, out, "--text-format", fmt, "--normalize", "english")
    assert result.exit_code == 0, result.output
    words = set(read_arpa_unigrams(out) or []) - SPECIAL
    assert words == {"the", "cat", "sat", "a", "dog's", "bone", "ran"}


@needs_lmplz
def test_bad_training_lines_are_one_line_errors(tmp_path: Path) -> None:
    tsv = tmp_path / "t.tsv"
    tsv.write_text("e1\tthe cat\ne2 no tab here\n", encoding="utf-8")
    one_line_error(build(tsv, tmp_path / "m.arpa", "--text-format", "tsv"), "t.tsv:2", "id<TAB>")
    trn = tmp_path / "t.trn"
    trn.write_text("the cat (u1)\nno id\n", encoding="utf-8")
    one_line_error(build(trn, tmp_path / "m.arpa", "--text-format", "trn"), "t.trn:2", "(id)")
    assert not (tmp_path / "m.arpa").exists()


@needs_lmplz
def test_special_words_name_the_toolkits_flag(tmp_path: Path) -> None:
    """lmplz's "Pass --skip_symbols" named a flag the toolkit spells --skip-symbols, after a
    KenLM tool error with no line number: now one line with file:line, checked before lmplz."""
    text, _ = corpus(tmp_path / "t.txt", 50)
    with open(text, "a", encoding="utf-8") as f:
        f.write("the cat <s> sat\n")
    line = one_line_error(build(text, tmp_path / "m.arpa"), "t.txt:51", "'<s>'", "--skip-symbols")
    assert "--skip_symbols" not in line
    assert build(text, tmp_path / "m.arpa", "--skip-symbols").exit_code == 0


def test_lmplz_advice_names_the_toolkits_flags() -> None:
    from rescorer.ngram import _toolkit_flags

    said = "Pass --skip_symbols to convert these symbols to whitespace."
    assert _toolkit_flags(said) == "Pass --skip-symbols to convert these symbols to whitespace."


# -- ngram vocab -----------------------------------------------------------------------------


@needs_lmplz
def test_ngram_vocab_of_arpa_and_binaries(tmp_path: Path) -> None:
    """keyboard-eval with a binary needed --vocab and no command wrote one."""
    text, vocab = corpus(tmp_path / "t.txt")
    lists = {}
    for name, extra in [
        ("m.arpa", ()),
        ("m.arpa.gz", ()),
        ("t.bin", ()),
        ("p.bin", ("--binary-type", "probing")),
    ]:
        assert build(text, tmp_path / name, *extra).exit_code == 0
        out = tmp_path / f"{name}.words"
        result = run(["ngram", "vocab", tmp_path / name, "--out", out])
        assert result.exit_code == 0, result.output
        assert f"wrote {len(vocab)} words to {out}" in result.output
        lists[name] = out.read_text(encoding="utf-8").split("\n")[:-1]
        assert set(lists[name]) == vocab, name
    assert lists["m.arpa"] == lists["m.arpa.gz"]
    one_line_error(run(["ngram", "vocab", text, "--out", tmp_path / "v.txt"]), "t.txt", "KenLM")
    same = run(["ngram", "vocab", tmp_path / "m.arpa", "--out", tmp_path / "m.arpa"])
    assert same.exit_code == 2 and "never overwrites an input" in same.output


@needs_lmplz
def test_keyboard_eval_takes_a_binarys_words_or_names_ngram_vocab(tmp_path: Path) -> None:
    from rescorer.kenlm_tools import find_program

    text, _ = corpus(tmp_path / "t.txt")
    test = tmp_path / "test.txt"
    test.write_text("w01 w02 w03\nw04 w05 w06 w07\n", encoding="utf-8")
    arpa, binary, bare = tmp_path / "m.arpa", tmp_path / "m.bin", tmp_path / "bare.bin"
    assert build(text, arpa).exit_code == 0
    assert build(text, binary).exit_code == 0
    args = ["keyboard-eval", "--text", test]
    by_arpa = run([*args, "--lm", f"kenlm:{arpa}"])
    by_binary = run([*args, "--lm", f"kenlm:{binary}"])
    assert by_binary.exit_code == 0, by_binary.output
    assert "30-word vocabulary" in by_binary.output
    assert (
        by_arpa.output.splitlines()[0].split(":")[1]
        == by_binary.output.splitlines()[0].split(":")[1]
    )
    # a binary without its words (build_binary -v): the error names the command making a list
    build_binary = find_program("build_binary")
    subprocess.run([build_binary, "-v", arpa, bare], check=True, capture_output=True)
    line = one_line_error(run([*args, "--lm", f"kenlm:{bare}"]), "--vocab", "rescorer ngram vocab")
    assert "no vocabulary" in line
    gone = run(["ngram", "vocab", bare, "--out", tmp_path / "v.txt"])
    one_line_error(gone, "bare.bin", "build_binary -v")


# -- convert -----------------------------------------------------------------------------------


def hyporadise(path: Path) -> Path:
    path.write_text(
        '[{"id": "u1", "input": ["the cat sat", "a cat sat"], "output": "the cat sat",'
        ' "am_score": [-1.5, -2.0], "lm_score": [-3.0, -3.5]},\n'
        ' {"id": "u2", "input": ["hello world"], "output": "hello word",'
        ' "am_score": [-0.5], "lm_score": [-1.0]}]\n',
        encoding="utf-8",
    )
    return path


def test_convert_to_text_and_trn_writes_the_references(tmp_path: Path) -> None:
    """HyPoradise references were dropped by every non-JSON target."""
    nbest = hyporadise(tmp_path / "hp.json")
    text, trn = tmp_path / "refs.txt", tmp_path / "refs.trn"
    result = run(["convert", "--nbest", nbest, "--to", "text", "--out", text])
    assert result.exit_code == 0, result.output
    assert text.read_text(encoding="utf-8") == "u1 the cat sat\nu2 hello word\n"
    assert run(["convert", "--nbest", nbest, "--to", "trn", "--out", trn]).exit_code == 0
    assert trn.read_text(encoding="utf-8") == "the cat sat\t(u1)\nhello word\t(u2)\n"
    # a format without references: one line saying where references come from
    bare = tmp_path / "bare.json"
    bare.write_text('[{"id": "u1", "input": ["a b"], "score": [-1.0]}]\n', encoding="utf-8")
    one_line_error(
        run(["convert", "--nbest", bare, "--to", "text", "--out", tmp_path / "r.txt"]),
        "no references",
        "--ref",
    )


def test_convert_rename_scores_for_srilm(tmp_path: Path) -> None:
    """`--to srilm3` needs scores named acoustic and lm, `--to srilm1` one named score."""
    from rescorer.formats import read_nbest

    nbest = hyporadise(tmp_path / "hp.json")
    s3, s1 = tmp_path / "s3", tmp_path / "s1"
    base = ["convert", "--nbest", nbest]
    one_line_error(run([*base, "--to", "srilm3", "--out", s3]), "no score 'acoustic'")
    renames = ["--rename", "am_score=acoustic", "--rename", "lm_score=lm"]
    result = run([*base, *renames, "--to", "srilm3", "--out", s3])
    assert result.exit_code == 0, result.output
    back = read_nbest(s3, "srilm3")
    assert back["u1"][1].scores["acoustic"] == pytest.approx(-2.0)
    assert back["u2"][0].scores["lm"] == pytest.approx(-1.0)
    assert run([*base, "--rename", "am_score=score", "--to", "srilm1", "--out", s1]).exit_code == 0
    assert (s1 / "u1.nbest").read_text(encoding="utf-8").splitlines()[1].endswith("the cat sat")
    out = tmp_path / "x.jsonl"
    for rename, fragment in [
        ("nope=x", "no such score"),
        ("am_score=lm_score", "already has a score 'lm_score'"),
        ("am_score", "expected OLD=NEW"),
        ("=acoustic", "expected OLD=NEW"),
        ("am_score=", "expected OLD=NEW"),
    ]:
        one_line_error(run([*base, "--rename", rename, "--to", "jsonl", "--out", out]), fragment)
    swap = run([*base, "--rename", "am_score=lm_score", "--rename", "lm_score=am_score",
                "--to", "jsonl", "--out", out])  # fmt: skip
    assert swap.exit_code == 0, swap.output
    assert read_nbest(out, "jsonl")["u1"][0].scores["lm_score"] == pytest.approx(-1.5)
    dup = run([*base, "--rename", "am_score=a", "--rename", "lm_score=a", "--to", "jsonl",
               "--out", out])  # fmt: skip
    one_line_error(dup, "two scores renamed to 'a'")


# -- quiet and advice ----------------------------------------------------------------------------


@needs_lmplz
def test_quiet_silences_kenlms_loading_banner(tmp_path: Path) -> None:
    """KenLM's C++ writes "Loading the LM will be faster..." and a progress bar to fd 2 when it
    reads ARPA text: measured in a subprocess, it is gone under -q and there without it."""
    text, _ = corpus(tmp_path / "t.txt")
    arpa = tmp_path / "m.arpa"
    assert build(text, arpa).exit_code == 0
    env = {**os.environ, "PYTHONPATH": str(ROOT)}

    def stderr(*flags: str) -> str:
        cmd = [sys.executable, "-m", "rescorer", *flags, "ppl", "--lm", f"kenlm:{arpa}"]
        proc = subprocess.run([*cmd, "--text", str(text)], capture_output=True, text=True, env=env)
        assert proc.returncode == 0, proc.stderr
        return proc.stderr

    assert "Loading the LM will be faster" in stderr()
    assert stderr("-q") == ""


@needs_lmplz
def test_oov_warning_does_not_advise_a_normalize_already_given(tmp_path: Path) -> None:
    text, _ = corpus(tmp_path / "t.txt")
    arpa = tmp_path / "m.arpa"
    assert build(text, arpa).exit_code == 0
    test = tmp_path / "test.txt"
    test.write_text("w01 zz yy xx\nw02 qq rr\n", encoding="utf-8")
    args = ["keyboard-eval", "--lm", f"kenlm:{arpa}", "--text", test]
    raw = run(args)
    assert raw.exit_code == 0, raw.output
    assert "e.g. --normalize english" in raw.stderr
    lowered = run([*args, "--normalize", "lower"])
    assert lowered.exit_code == 0, lowered.output
    assert "outside the 30-word vocabulary" in lowered.stderr
    assert "e.g. --normalize english" not in lowered.stderr
    assert "--normalize lower" in lowered.stderr and "ngram build --normalize" in lowered.stderr
