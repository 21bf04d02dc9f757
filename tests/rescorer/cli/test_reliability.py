"""Reliability, second pass (issue 51): the cases an outside probe found, one test each.

Every case failed before its fix (the issue's note lists what each printed before and after).
Each carries its class (``@pytest.mark.bad_input``, see :mod:`tests.bad_input_classes`):

* silent: keyboard-compare's impossible records, a zero-width no-break space (or a second
  byte-order mark) in any text, fnlm-eval with a checkpoint's word list shorter than its
  vocabulary, ``context vectors --field`` empty or clashing, ``mix-weights`` with a name twice,
  ``ngram build`` on text with blank lines;
* traceback: tune with 1e308 in a score or an initial weight (a hang), keyboard-eval on one
  huge word (a hang), classify/inspect of an LBL or Transformer checkpoint, ``lbl-sample
  --temperature nan|inf``, ``lbl-infer --lr inf|1e308``, ``train`` resuming a run of another
  config;
* usage: rescore with weights naming a feature the lists lack (4 ways), ``export`` of an LBL,
  ``lbl-similar`` with an unknown word in ``--queries``;
* tool: ``ngram build`` options and texts that crashed lmplz (fixed in the first pass; here as
  cases of the class);
* interrupted: temporaries of killed runs removed by the next run of any command writing in the
  folder, no lmplz left when ``ngram build`` is killed (``-m slow``: at random moments);
* full-disk: ``train`` into an existing run folder on a small tmpfs filled before the run.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from rescorer.cli.main import main
from rescorer.core.io import read_lines
from rescorer.core.output import TEMP_SUFFIX
from tests.bad_input_classes import CLASSES
from tests.conftest import TINY_ARPA
from tests.paths import NBEST_FIXTURES, REPO

pytestmark = pytest.mark.usefixtures("restore_logging")

ENV = {**os.environ, "PYTHONPATH": str(REPO)}


def invoke(*args: str) -> Result:
    return CliRunner().invoke(main, ["-q", *args])


def one_line(result: Result, *names: str | Path) -> str:
    """The run failed with exit status 2 and one ``Error:`` line naming each of ``names``: no
    traceback, no usage block, nothing else printed. Returns the line."""
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(
        result.exception
    )
    assert "Traceback" not in result.output, result.output
    assert "Usage:" not in result.output, result.output
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.output
    for name in names:
        assert str(name) in lines[0], (name, lines[0])
    return lines[0]


def refused(result: Result) -> str:
    """Exit status 2 and an ``Error:`` line, no traceback (a bad option value may show click's
    usage block: that is its convention for usage errors)."""
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(
        result.exception
    )
    assert "Traceback" not in result.output, result.output
    assert result.exit_code == 2, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1, result.output
    return errors[0]


def run_process(args: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    """``python -m rescorer -q ARGS`` in a child process; fails the test after ``timeout`` s."""
    try:
        return subprocess.run(
            [sys.executable, "-m", "rescorer", "-q", *args],
            env=ENV,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"rescorer {' '.join(args[:1])} still running after {timeout:.0f} s (a hang)")


@pytest.fixture()
def arpa(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.arpa"
    path.write_text(TINY_ARPA, encoding="utf-8")
    return path


def test_every_class_has_cases(request: pytest.FixtureRequest) -> None:
    """The suite's report (tests/bad_input_classes.py) over this file: every class is here."""
    from tests.bad_input_classes import collected, counts

    here = [item for item in collected(request.config) if item.path == Path(__file__)]
    table = counts(here)
    assert set(table) == set(CLASSES), table


# == silent wrong answers =========================================================================

# -- keyboard-compare: records that cannot be ------------------------------------------------------

RECORDS = [
    {"id": "s1", "words": 3, "baseline": 5, "keystrokes": {"1": 3, "3": 3, "5": 3},
     "hits": {"1": 3, "3": 3}, "reciprocal_rank": 3.0, "oov": 0, "normalize": "none"},
    {"id": "s2", "words": 2, "baseline": 3, "keystrokes": {"1": 3, "3": 2, "5": 2},
     "hits": {"1": 1, "3": 2}, "reciprocal_rank": 1.5, "oov": 0, "normalize": "none"},
    {"id": "s3", "words": 4, "baseline": 7, "keystrokes": {"1": 5, "3": 4, "5": 4},
     "hits": {"1": 2, "3": 4}, "reciprocal_rank": 3.0, "oov": 0, "normalize": "none"},
]  # fmt: skip


def _write_records(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def _set(line: int, key: str, value: object, inner: str | None = None) -> Callable:
    def damage(records: list[dict]) -> tuple[list[dict], int]:
        if inner is None:
            records[line - 1][key] = value
        else:
            records[line - 1][key][inner] = value
        return records, line

    return damage


def _again(conflicting: bool) -> Callable:
    def damage(records: list[dict]) -> tuple[list[dict], int]:
        copy = json.loads(json.dumps(records[0]))
        if conflicting:
            copy["keystrokes"]["1"] = 4
        return [*records, copy], len(records) + 1

    return damage


IMPOSSIBLE = {
    "duplicate-id": _again(False),
    "duplicate-id-conflicting": _again(True),
    "negative-keystrokes": _set(2, "keystrokes", -1, "1"),
    "keystrokes-above-baseline": _set(2, "keystrokes", 9, "1"),
    "float-keystrokes": _set(2, "keystrokes", 2.5, "3"),
    "string-reciprocal-rank": _set(2, "reciprocal_rank", "1.5"),
    "hits-above-words": _set(2, "hits", 3, "3"),
}


@pytest.mark.bad_input("silent")
@pytest.mark.parametrize("case", sorted(IMPOSSIBLE))
def test_keyboard_compare_refuses_impossible_records(case: str, tmp_path: Path) -> None:
    a = _write_records(tmp_path / "a.jsonl", json.loads(json.dumps(RECORDS)))
    records, line = IMPOSSIBLE[case](json.loads(json.dumps(RECORDS)))
    b = _write_records(tmp_path / "b.jsonl", records)
    assert invoke("keyboard-compare", str(a), str(a)).exit_code == 0
    one_line(invoke("keyboard-compare", str(a), str(b)), f"{b}:{line}:")
    one_line(invoke("keyboard-compare", str(b), str(a)), f"{b}:{line}:")


@pytest.mark.bad_input("silent")
def test_keyboard_runs_with_different_final_space_are_not_compared(
    arpa: Path, tmp_path: Path
) -> None:
    """Two texts whose sentence has the same baseline, one typed with --final-space: the
    baselines cannot tell; the records say how each run was typed."""
    with_space = tmp_path / "t1.tsv"
    with_space.write_text("s1\ta b\n", encoding="utf-8")  # 1 + 1 + 1 + 1 = 4
    without = tmp_path / "t2.tsv"
    without.write_text("s1\ta bb\n", encoding="utf-8")  # 1 + 1 + 2 = 4
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    lm = f"kenlm:{arpa}"
    ok = invoke("keyboard-eval", "--lm", lm, "--text", str(with_space), "--final-space",
                "--per-sentence", str(a))  # fmt: skip
    assert ok.exit_code == 0, ok.output
    ok = invoke("keyboard-eval", "--lm", lm, "--text", str(without), "--per-sentence", str(b))
    assert ok.exit_code == 0, ok.output
    assert json.loads(a.read_text())["baseline"] == json.loads(b.read_text())["baseline"] == 4
    line = one_line(invoke("keyboard-compare", str(a), str(b)))
    assert "--final-space" in line
    line = refused(invoke("keyboard-eval", "--lm", lm, "--text", str(without), "--compare", str(a)))
    assert "--final-space" in line


# -- a zero-width no-break space, or a byte-order mark twice: the same text -----------------------

ZWNBSP = "\ufeff"
REF = "A B C\t(u1)\nB A\t(u2)\nC C A B\t(u3)\n"
HYP = "u1 A B C\nu2 B B\nu3 C A B\n"


def _double_bom(text: str) -> str:
    return ZWNBSP + ZWNBSP + text


def _line_start(text: str) -> str:  # at the start of line 2 (e.g. files joined with cat)
    lines = text.splitlines(keepends=True)
    return lines[0] + ZWNBSP + "".join(lines[1:])


def _before_word(text: str) -> str:  # before the second field of line 1
    first, rest = text.split(" ", 1)
    return f"{first} {ZWNBSP}{rest}"


def _bom_and_space(text: str) -> str:  # a mark, a space, another mark, then the first word
    return ZWNBSP + " " + ZWNBSP + text


INVISIBLE = {
    "double-bom": _double_bom,
    "zwnbsp-line-start": _line_start,
    "zwnbsp-before-word": _before_word,
    "bom-space-zwnbsp": _bom_and_space,
}


@pytest.mark.bad_input("silent")
@pytest.mark.parametrize("which", ["ref", "hyp"])
@pytest.mark.parametrize("variant", sorted(INVISIBLE))
def test_wer_reads_invisible_marks_as_nothing(variant: str, which: str, tmp_path: Path) -> None:
    ref, hyp = tmp_path / "ref.trn", tmp_path / "hyp.txt"
    ref.write_text(REF, encoding="utf-8")
    hyp.write_text(HYP, encoding="utf-8")
    clean = invoke("wer", "--ref", str(ref), "--hyp", str(hyp))
    assert clean.exit_code == 0, clean.output
    target = ref if which == "ref" else hyp
    target.write_text(INVISIBLE[variant](target.read_text(encoding="utf-8")), encoding="utf-8")
    marked = invoke("wer", "--ref", str(ref), "--hyp", str(hyp))
    assert marked.exit_code == 0, marked.output
    assert marked.output == clean.output


@pytest.mark.bad_input("silent")
@pytest.mark.parametrize("compressed", [False, True], ids=["plain", "gzip"])
@pytest.mark.parametrize("variant", sorted(INVISIBLE))
def test_every_reader_drops_invisible_marks(variant: str, compressed: bool, tmp_path: Path) -> None:
    """The one text reader (both of its paths: a small file at once, a .gz line by line)."""
    text = INVISIBLE[variant](HYP)
    path = tmp_path / ("t.txt.gz" if compressed else "t.txt")
    raw = text.encode("utf-8")
    path.write_bytes(gzip.compress(raw) if compressed else raw)
    words = [(n, line.split()) for n, line in read_lines(path)]
    assert words == [(n, line.split()) for n, line in enumerate(HYP.splitlines(), 1)]


# -- fnlm-eval: a checkpoint whose word list is shorter than its vocabulary -----------------------


@pytest.fixture(scope="module")
def fnlm_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.rescorer.cli.test_fnlm_cli import train_plain

    return train_plain(tmp_path_factory.mktemp("fnlm"), ["word", "suffix1", "shape"])


@pytest.mark.bad_input("silent")
@pytest.mark.parametrize("name", ["words.txt", "vocab.txt"])
def test_fnlm_eval_refuses_a_word_list_shorter_than_the_model(
    name: str, fnlm_model: Path, tmp_path: Path
) -> None:
    model = tmp_path / "model"
    shutil.copytree(fnlm_model, model)
    lines = (model / name).read_text(encoding="utf-8").splitlines(keepends=True)
    keep = [ln for ln in lines if ln.rstrip("\n").split("\t")[0] != "a"]  # a vocabulary word
    assert len(keep) == len(lines) - 1
    (model / name).write_text("".join(keep), encoding="utf-8")
    text = fnlm_model.parent / "dev.txt"
    ok = invoke("fnlm-eval", "--model", str(fnlm_model), "--text", str(text), "--format", "plain")
    assert ok.exit_code == 0, ok.output
    result = invoke("fnlm-eval", "--model", str(model), "--text", str(text), "--format", "plain")
    one_line(result, model / name)


# -- context vectors --field ----------------------------------------------------------------------

LSTM_CONFIG = {
    "data": {"corpus": "jsonl", "path": "c.jsonl", "context_fields": ["topic"],
             "stratify_by": "topic", "split": [0.7, 0.3, 0.0], "vocab_size": 100},
    "model": {"mode": "factor", "embed_dim": 16, "hidden_dim": 24, "context_dim": 4, "rank": 2,
              "context_embed_dim": 4, "dropout": 0.0},
    "train": {"epochs": 1, "batch_tokens": 120, "lr": 0.02, "patience": 5, "device": "cpu"},
}  # fmt: skip


def write_lstm_config(path: Path, corpus: Path, **changes: dict) -> Path:
    cfg = json.loads(json.dumps(LSTM_CONFIG))
    cfg["data"]["path"] = str(corpus)
    for section, values in changes.items():
        cfg[section].update(values)
    path.write_text(json.dumps(cfg), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def lstm_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A one-epoch FactorCell run folder (best/, last/, config.json, split.json)."""
    from tests.lm_models.lstm.test_train import write_corpus

    root = tmp_path_factory.mktemp("lstm")
    config = write_lstm_config(root / "lstm.json", write_corpus(root / "c.jsonl"))
    result = invoke("train", str(config), "--out", str(root / "run"))
    assert result.exit_code == 0, result.output
    return root / "run"


@pytest.mark.bad_input("silent")
@pytest.mark.parametrize(
    ("field", "why"),
    [("", "empty"), (" ", "empty"), ("topic", "context variable"), ("speaker", "already")],
    ids=["empty", "blank", "model-variable", "record-field"],
)
def test_context_vectors_field_must_be_a_new_name(
    field: str, why: str, lstm_run: Path, tmp_path: Path
) -> None:
    contexts = tmp_path / "ctx.jsonl"
    contexts.write_text(
        '{"utt": "u1", "fields": {"topic": "sport", "speaker": "s1"}}\n'
        '{"utt": "u2", "fields": {"topic": "money", "speaker": "s2"}}\n',
        encoding="utf-8",
    )
    out = tmp_path / "vec.jsonl"
    args = ["context", "vectors", "--model", str(lstm_run / "best"), "--context", str(contexts)]
    ok = invoke(*args, "--out", str(out))
    assert ok.exit_code == 0, ok.output
    out.unlink()
    line = refused(invoke(*args, "--field", field, "--out", str(out)))
    assert why in line, line
    assert not out.exists()


# -- mix-weights with a name twice -----------------------------------------------------------------


@pytest.mark.bad_input("silent")
def test_mix_weights_refuses_a_name_twice(arpa: Path, tmp_path: Path) -> None:
    text = tmp_path / "dev.txt"
    text.write_text("a b\nb a a\n", encoding="utf-8")
    out = tmp_path / "mix.json"
    lm = f"kenlm:{arpa}"
    ok = invoke("mix-weights", "--lm", f"x={lm}", "--lm", f"y={lm}", "--text", str(text),
                "--out", str(out))  # fmt: skip
    assert ok.exit_code == 0, ok.output
    out.unlink()
    result = invoke("mix-weights", "--lm", f"x={lm}", "--lm", f"x={lm}", "--text", str(text),
                    "--out", str(out))  # fmt: skip
    assert "'x'" in one_line(result)
    assert not out.exists()


# -- ngram build: blank lines are no sentences -----------------------------------------------------


@pytest.mark.bad_input("silent")
@pytest.mark.parametrize("blank", ["\n", " \t \n", "\r\n"], ids=["empty", "spaces", "crlf"])
def test_ngram_build_skips_blank_lines(blank: str, tmp_path: Path) -> None:
    lines = ["a b c", "b a", "c c a b", "a", "b c"]
    clean, spaced = tmp_path / "clean.txt", tmp_path / "blank.txt"
    clean.write_text("\n".join(lines) + "\n", encoding="utf-8")
    spaced.write_text(blank + (blank + blank).join(lines) + "\n" + blank, encoding="utf-8")
    models = []
    for text in (clean, spaced):
        out = tmp_path / f"{text.stem}.arpa"
        result = invoke("ngram", "build", "--text", str(text), "--order", "2",
                        "--discount-fallback", "--arpa", "--out", str(out))  # fmt: skip
        assert result.exit_code == 0, result.output
        models.append(out.read_bytes())
    assert models[0] == models[1]


# == tracebacks and hangs ==========================================================================


@pytest.fixture(scope="module")
def small_set(tmp_path_factory: pytest.TempPathFactory, espnet_dir: Path) -> Path:
    """12 real dev_clean utterances, 4 hypotheses each, with references."""
    from tests.rescorer.cli.test_kill import sample_espnet

    return sample_espnet(espnet_dir / "dev_clean", tmp_path_factory.mktemp("set") / "s", 0, 12, 4)


def _weights(path: Path, features: dict[str, float]) -> Path:
    doc = {"format": "rescorer-weights", "version": 1, "features": features, "length": 0.0}
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


# (case, --init weights or None, the lm score of the first hypothesis or None, expected exit,
#  a phrase of the refusal)
TUNE_EXTREMES = [
    ("init-anchor-1e308", {"decoder": 1e308, "ctc": 1.0, "lm": 0.3}, None, 0, None),
    ("init-other-1e308", {"decoder": 1.0, "ctc": 1e308, "lm": 0.3}, None, 2, "'ctc'"),
    ("init-other-1e-308", {"decoder": 1e-308, "ctc": 1.0, "lm": 0.3}, None, 2, "'ctc'"),
    ("score-1e308", None, "1e308", 2, "'lm'"),
    ("score-minus-1e308", None, "-1e308", 2, "'lm'"),
]


@pytest.mark.bad_input("traceback")
@pytest.mark.parametrize(
    ("init", "score", "status", "phrase"),
    [pytest.param(*case[1:], id=case[0]) for case in TUNE_EXTREMES],
)
def test_tune_with_extreme_numbers_ends(
    init: dict[str, float] | None,
    score: str | None,
    status: int,
    phrase: str | None,
    small_set: Path,
    tmp_path: Path,
) -> None:
    nbest = tmp_path / "set"
    shutil.copytree(small_set, nbest)
    args = ["tune", "--nbest", str(nbest), "--ref", str(nbest / "references" / "ref_wer.trn"),
            "--features", "decoder,ctc,lm", "--out", str(tmp_path / "w.json")]  # fmt: skip
    if init is not None:
        args += ["--init", str(_weights(tmp_path / "init.json", init))]
    if score is not None:
        scores = nbest / "raw_hypotheses" / "1best_recog" / "scores"
        lines = scores.read_text(encoding="utf-8").splitlines(keepends=True)
        utt, rest = lines[0].split(" ", 1)
        record = json.loads(rest)
        record["lm"] = f"tensor({score})"
        lines[0] = f"{utt} {json.dumps(record)}\n"
        scores.write_text("".join(lines), encoding="utf-8")
    proc = run_process(args, timeout=90)
    output = proc.stdout + proc.stderr
    assert "Traceback" not in output, output
    assert proc.returncode == status, output
    if status == 2:
        errors = [line for line in output.splitlines() if line.startswith("Error: ")]
        assert len(errors) == 1 and phrase in errors[0], output


@pytest.mark.bad_input("traceback")
def test_keyboard_eval_on_one_huge_word_ends(arpa: Path, tmp_path: Path) -> None:
    text = tmp_path / "huge.tsv"
    huge = "x" * 200_000
    text.write_text(f"s1\ta {huge} b\ns2\tb a\n", encoding="utf-8")
    out = tmp_path / "per.jsonl"
    args = ["keyboard-eval", "--lm", f"kenlm:{arpa}", "--text", str(text), "--per-sentence",
            str(out)]  # fmt: skip
    proc = run_process(args, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    first = json.loads(out.read_text(encoding="utf-8").splitlines()[0])
    # the huge word is never suggested: every letter and its space are typed
    assert first["baseline"] == 1 + 1 + len(huge) + 1 + 1
    assert all(v >= len(huge) + 1 for v in first["keystrokes"].values())


@pytest.fixture(scope="module")
def lbl_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.rescorer.cli.test_lbl_cli import make_checkpoint

    return make_checkpoint(tmp_path_factory.mktemp("lbl") / "lbl")


@pytest.fixture(scope="module")
def transformer_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from rescorer.lm_models.checkpoint import save_checkpoint
    from rescorer.lm_models.lstm.transformer import CausalTransformerLM, TransformerConfig

    tokens = ["<unk>", "<s>", "</s>", "a", "b"]
    model = CausalTransformerLM(
        TransformerConfig(
            vocab_size=len(tokens), embed_dim=8, hidden_dim=8, num_layers=1, heads=2, ffn_dim=8
        )
    )
    path = tmp_path_factory.mktemp("tf") / "tf"
    save_checkpoint(path, model, tokens)
    return path


@pytest.mark.bad_input("traceback")
@pytest.mark.parametrize("command", ["classify", "inspect"])
@pytest.mark.parametrize("family", ["lbl", "transformer"])
def test_classify_and_inspect_refuse_other_families(
    command: str, family: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    model = request.getfixturevalue(f"{family}_model")
    docs = tmp_path / "docs.jsonl"
    docs.write_text('{"id": "d1", "text": ["the cat sat"], "fields": {"genre": "news"}}\n')
    args = ["--model", str(model), "--field", "genre"]
    if command == "classify":
        args += ["--docs", str(docs)]
    line = one_line(invoke(command, *args), model)
    assert "rescorer train" in line


@pytest.mark.bad_input("traceback")
@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "1e400"])
def test_lbl_sample_temperature_must_be_finite(value: str, lbl_model: Path) -> None:
    result = invoke("lbl-sample", "--model", str(lbl_model), "--temperature", value)
    assert "--temperature" in refused(result)


@pytest.mark.bad_input("traceback")
@pytest.mark.parametrize("value", ["1e-300", "1e300"])
def test_lbl_sample_at_extreme_temperatures(value: str, lbl_model: Path) -> None:
    result = invoke("lbl-sample", "--model", str(lbl_model), "--temperature", value, "-n", "2")
    assert result.exit_code == 0 and result.exception is None, result.output
    assert len(result.output.splitlines()) == 2


@pytest.mark.bad_input("traceback")
@pytest.mark.parametrize("value", ["inf", "nan", "1e308", "1e39"])
def test_lbl_infer_lr_gives_numbers_or_one_line(
    value: str, lbl_model: Path, tmp_path: Path
) -> None:
    texts = tmp_path / "t.jsonl"
    texts.write_text(
        json.dumps({"id": "t1", "text": "the cat sat\na dog ran", "fields": {"doc": "d1"}}) + "\n"
    )
    result = invoke("lbl-infer", "--model", str(lbl_model), "--text", str(texts), "--attribute",
                    "genre", "--lr", value)  # fmt: skip
    line = refused(result)
    assert "--lr" in line
    assert "nan" not in result.output.replace(value, "")


@pytest.mark.bad_input("traceback")
def test_train_resuming_a_run_of_another_config(lstm_run: Path, tmp_path: Path) -> None:
    from tests.rescorer.cli.test_kill import snapshot

    run = tmp_path / "run"
    shutil.copytree(lstm_run, run)
    before = snapshot(run)
    corpus = lstm_run.parent / "c.jsonl"
    other = write_lstm_config(tmp_path / "other.json", corpus, model={"embed_dim": 8})
    line = one_line(invoke("train", str(other), "--out", str(run)), run)
    assert "another config" in line and "--no-resume" in line and "--out" in line
    assert snapshot(run) == before


# == usage blocks for data errors ==================================================================

ESPNET_SMALL = NBEST_FIXTURES / "espnet_small"


@pytest.mark.bad_input("usage")
@pytest.mark.parametrize(
    ("features", "extra"),
    [
        ({"decoder": 1.0, "nope": 0.5}, []),
        ({"decoder": 1.0, "tiny": 0.5}, []),
        ({"decoder": 1.0, "tiny": 0.5, "tiny_oov": -1.0}, ["--lm", "tiny=kenlm:{arpa}",
                                                            "--no-lm-oov"]),
        ({"decoder": 1.0, "nope": 0.5}, ["--objective", "posterior", "--posterior-scale", "1"]),
    ],
    ids=["unknown", "lm-not-given", "oov-feature-off", "posterior"],
)  # fmt: skip
def test_rescore_weights_naming_a_missing_feature(
    features: dict[str, float], extra: list[str], arpa: Path, tmp_path: Path
) -> None:
    weights = _weights(tmp_path / "w.json", features)
    out = tmp_path / "out"
    args = ["rescore", "--nbest", str(ESPNET_SMALL), "--weights", str(weights), "--out", str(out)]
    result = invoke(*args, *(a.format(arpa=arpa) for a in extra))
    one_line(result, weights)
    assert not out.exists()


@pytest.mark.bad_input("usage")
def test_export_of_an_lbl_checkpoint(lbl_model: Path, tmp_path: Path) -> None:
    out = tmp_path / "m.onnx"
    line = one_line(invoke("export", str(lbl_model), str(out)), lbl_model)
    assert "lbl-export" in line
    assert not out.exists()


@pytest.mark.bad_input("usage")
def test_lbl_similar_with_an_unknown_query_word(lbl_model: Path, tmp_path: Path) -> None:
    queries = tmp_path / "q.txt"
    queries.write_text("cat\nzebra\n", encoding="utf-8")
    args = ["lbl-similar", "--model", str(lbl_model), "--a", "genre=news", "--b", "genre=religion"]
    assert invoke(*args, "--word", "cat").exit_code == 0
    assert "'zebra'" in one_line(invoke(*args, "--queries", str(queries)), f"{queries}:2:")


# == raw tool failures (fixed in the first pass; the class's cases) ================================


@pytest.mark.bad_input("tool")
@pytest.mark.parametrize(
    ("memory", "text"),
    [("lots", "a b c\n"), ("-1G", "a b c\n"), ("0", "a b c\n"), ("100000T", "a b c\n"),
     ("1G --help", "a b c\n"), ("1G", "word\n"), ("1G", ". , ; !\n")],
    ids=["memory-word", "memory-negative", "memory-zero", "memory-huge", "memory-extra-args",
         "one-word", "symbols-only"],
)  # fmt: skip
def test_ngram_build_refuses_what_lmplz_cannot_take(memory: str, text: str, tmp_path: Path) -> None:
    corpus = tmp_path / "text.txt"
    corpus.write_text(text, encoding="utf-8")
    out = tmp_path / "m.arpa"
    args = ["ngram", "build", "--text", str(corpus), "--memory", memory, "--arpa",
            "--out", str(out)]  # fmt: skip
    line = one_line(invoke(*args))
    assert "lmplz failed" not in line
    assert not out.exists()


# == interrupted runs ==============================================================================


def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


@contextlib.contextmanager
def _live_pid() -> Iterator[int]:
    proc = subprocess.Popen(["sleep", "60"])
    try:
        yield proc.pid
    finally:
        proc.kill()
        proc.wait()


def _temporaries(folder: Path) -> list[str]:
    return sorted(e.name for e in folder.iterdir() if e.name.endswith(TEMP_SUFFIX))


WRITERS = {
    "convert": ["convert", "--nbest", str(ESPNET_SMALL), "--to", "jsonl", "--out", "{d}/new.jsonl"],
    "rescore": ["rescore", "--nbest", str(ESPNET_SMALL), "--weights", "{w}", "--out", "{d}/res"],
    "ngram-build": ["ngram", "build", "--text", "{t}", "--order", "2", "--discount-fallback",
                    "--arpa", "--out", "{d}/m.arpa"],
    "wer": ["wer", "--ref", "{r}", "--hyp", "{h}", "--per-utt", "{d}/per_utt.txt"],
}  # fmt: skip


@pytest.mark.bad_input("interrupted")
@pytest.mark.parametrize("command", sorted(WRITERS))
def test_any_writer_removes_what_killed_runs_left_in_its_folder(
    command: str, tmp_path: Path
) -> None:
    folder = tmp_path / "out"
    folder.mkdir()
    dead = _dead_pid()
    left = [
        f".nbest.jsonl.{dead}.abcdefgh{TEMP_SUFFIX}",  # a file of another command's output
        f".rescored.{dead}.ijkl_mno{TEMP_SUFFIX}",  # a folder (a set being written)
        f".lm.arpa.{dead}.qrstuvwx{TEMP_SUFFIX}",  # ngram build's work folder
        f".best.{dead}.zz00yy11.rescorer-old",  # a set moved aside, its target still there
    ]
    (folder / left[0]).write_text("half\n")
    for name in left[1:]:
        (folder / name).mkdir()
        (folder / name / "part").write_text("half\n")
    (folder / "best").mkdir()
    mine = [".notes.txt", f".keep.{dead}.abcdefgh.tmp"]  # not the toolkit's names
    for name in mine:
        (folder / name).write_text("mine\n")
    ref, hyp = tmp_path / "ref.trn", tmp_path / "hyp.txt"
    ref.write_text("HELLO WORLD\t(uttA)\nGOOD MORNING\t(uttB)\n")
    hyp.write_text("uttA HELLO WORLD\nuttB GOOD MORNING\n")
    text = tmp_path / "t.txt"
    text.write_text("a b c\nb a\nc a b\n")
    weights = _weights(tmp_path / "w.json", {"decoder": 1.0, "ctc": 0.5})
    with _live_pid() as live:
        running = f".other.{live}.abcdefgh{TEMP_SUFFIX}"  # a live process's: left alone
        (folder / running).write_text("busy\n")
        fields = {"d": folder, "w": weights, "t": text, "r": ref, "h": hyp}
        result = invoke(*(a.format(**fields) for a in WRITERS[command]))
        assert result.exit_code == 0, result.output
        assert _temporaries(folder) == [running]
    assert not any(name in os.listdir(folder) for name in left)
    assert all((folder / name).read_text() == "mine\n" for name in mine)
    assert (folder / "best").is_dir()


def _children(pid: int, name: str) -> list[int]:
    """Live processes called ``name`` whose parent is ``pid``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        with contextlib.suppress(OSError):
            stat = Path(f"/proc/{entry}/stat").read_text()
            comm = stat[stat.index("(") + 1 : stat.rindex(")")]
            fields = stat[stat.rindex(")") + 2 :].split()
            if comm == name and int(fields[1]) == pid and fields[0] != "Z":
                found.append(int(entry))
    return found


def _running(pid: int) -> bool:
    """``pid`` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2 :].split()[0] != "Z"


def _random_text(path: Path, lines: int, seed: int = 0) -> Path:
    rng = random.Random(seed)
    words = [f"w{i}" for i in range(3000)]
    with open(path, "w", encoding="utf-8") as f:
        for _ in range(lines):
            f.write(" ".join(rng.choice(words) for _ in range(rng.randint(3, 12))) + "\n")
    return path


def _ngram_cmd(text: Path, out: Path) -> list[str]:
    return [sys.executable, "-m", "rescorer", "-q", "ngram", "build", "--text", str(text),
            "--order", "3", "--memory", "100M", "--discount-fallback", "--arpa",
            "--out", str(out)]  # fmt: skip


def _silent_lmplz(folder: Path) -> dict[str, str]:
    """An ``lmplz`` that writes nothing and never ends (as the real one in a long quiet phase,
    which no broken pipe stops), and the environment that makes ``ngram build`` run it."""
    folder.mkdir()
    fake = folder / "lmplz"
    fake.write_text("#!/bin/sh\ntrap '' PIPE\nwhile :; do sleep 0.05; done\n")
    fake.chmod(0o755)
    return {**ENV, "RESCORER_KENLM_BIN": str(folder)}


def _default_sigint() -> None:
    """In a child: ^C as in a terminal. A suite started in the background (`nohup ... &`, some
    CI runners) ignores SIGINT, children inherit that, and Python then keeps it ignored."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _start_until_lmplz(cmd: list[str], env: dict[str, str]) -> tuple[subprocess.Popen, list[int]]:
    """Start ``cmd``; return once its lmplz child runs: (the process, lmplz's pids)."""
    proc = subprocess.Popen(
        cmd,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        preexec_fn=_default_sigint,
    )
    t0 = time.monotonic()
    while not (kids := _children(proc.pid, "lmplz")):
        assert proc.poll() is None, "ngram build ended before lmplz started"
        assert time.monotonic() - t0 < 60, "lmplz never started"
        time.sleep(0.005)
    return proc, kids


def _wait_gone(pids: list[int], seconds: float) -> list[int]:
    """The ``pids`` still running after up to ``seconds`` s (those are then killed)."""
    end = time.monotonic() + seconds
    while (alive := [p for p in pids if _running(p)]) and time.monotonic() < end:
        time.sleep(0.01)
    for pid in alive:  # not left running after a failure
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return alive


@pytest.mark.bad_input("interrupted")
def test_killed_ngram_build_leaves_no_lmplz(tmp_path: Path) -> None:
    text = _random_text(tmp_path / "text.txt", 100)
    proc, kids = _start_until_lmplz(
        _ngram_cmd(text, tmp_path / "m.arpa"), _silent_lmplz(tmp_path / "bin")
    )
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert _wait_gone(kids, 2.0) == [], "lmplz outlived the killed ngram build"


@pytest.mark.bad_input("interrupted")
@pytest.mark.parametrize(
    "sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT], ids=lambda s: signal.Signals(s).name
)
def test_ngram_build_stopped_by_a_signal_stops_lmplz(sig: int, tmp_path: Path) -> None:
    """SIGTERM, SIGHUP and ^C end the build: lmplz is ended with it, its folder removed."""
    text = _random_text(tmp_path / "text.txt", 100)
    out = tmp_path / "m.arpa"
    proc, kids = _start_until_lmplz(_ngram_cmd(text, out), _silent_lmplz(tmp_path / "bin"))
    proc.send_signal(sig)
    proc.wait(timeout=30)
    assert _wait_gone(kids, 2.0) == []
    assert proc.returncode != 0 and not out.exists()
    assert _temporaries(tmp_path) == []


@pytest.mark.slow
@pytest.mark.bad_input("interrupted")
def test_ngram_build_killed_at_random_moments(tmp_path: Path) -> None:
    """kill -9 at random moments (>= 10): no lmplz survives, the next run starts by removing
    what the killed ones left, and the model is the old one or the new one."""
    from tests.rescorer.cli.test_kill import leftovers

    text = _random_text(tmp_path / "text.txt", 60_000)
    work = tmp_path / "work"
    work.mkdir()
    out = work / "m.arpa"
    out.write_text("old\n")
    cmd = _ngram_cmd(text, out)
    t0 = time.monotonic()
    subprocess.run(cmd, env=ENV, check=True, capture_output=True)
    seconds = time.monotonic() - t0
    new = out.read_bytes()
    rng = random.Random(51)
    killed: set[int] = set()
    for _ in range(12):
        out.write_text("old\n")
        before = set(leftovers(work, out.name).values())
        proc = subprocess.Popen(cmd, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + rng.uniform(0.0, seconds)
        kids: set[int] = set()
        started = False  # this run made its work folder (it had cleaned up by then)
        while time.monotonic() < deadline and proc.poll() is None:
            kids.update(_children(proc.pid, "lmplz"))
            started = started or proc.pid in leftovers(work, out.name).values()
            time.sleep(0.002)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert _wait_gone(sorted(kids), 1.0) == [], "lmplz outlived the killed build"
        assert out.read_bytes() in (b"old\n", new)
        left = set(leftovers(work, out.name).values())
        if started:  # the earlier runs' leftovers were gone before this one wrote
            assert left <= {proc.pid}, (before, left)
        assert left <= killed | {proc.pid}
        killed.add(proc.pid)
    subprocess.run(cmd, env=ENV, check=True, capture_output=True)
    assert out.read_bytes() == new
    assert _temporaries(work) == []


# == full disk =====================================================================================


@pytest.fixture()
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A 2 MiB tmpfs of its own (skipped where the machine does not allow mounting one)."""
    mount = tmp_path / "fs"
    mount.mkdir()
    proc = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "none", str(mount)],
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {proc.stderr.strip() or proc.returncode}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def _fill(fs: Path, leave: int) -> None:
    """Fill ``fs`` up to ``leave`` bytes free."""
    st = os.statvfs(fs)
    free = st.f_bavail * st.f_frsize
    with open(fs / "filler", "wb") as f:
        f.write(b"\0" * max(free - leave, 0))


def _size(folder: Path) -> int:
    return sum((p.stat().st_size + 4095) // 4096 * 4096 for p in folder.rglob("*") if p.is_file())


@pytest.mark.bad_input("full-disk")
@pytest.mark.parametrize("resume", [False, True], ids=["new-run", "resumed"])
@pytest.mark.parametrize("leave", ["none", "half-best", "best-and-half-last"])
def test_train_on_a_full_disk(
    leave: str, resume: bool, lstm_run: Path, small_fs: Path, tmp_path: Path
) -> None:
    from rescorer.lm_models.checkpoint import load_checkpoint
    from tests.rescorer.cli.test_kill import snapshot

    run = small_fs / "run"
    shutil.copytree(lstm_run, run)
    best, last = _size(run / "best"), _size(run / "last")
    _fill(small_fs, {"none": 0, "half-best": best // 2, "best-and-half-last": best + last // 2}[
        leave])  # fmt: skip
    before = snapshot(run)
    corpus = lstm_run.parent / "c.jsonl"
    config = write_lstm_config(tmp_path / "c.json", corpus, train={"epochs": 2 if resume else 1})
    args = ["train", str(config), "--out", str(run)] + ([] if resume else ["--no-resume"])
    line = one_line(invoke(*args))
    assert "no space left" in line, line
    assert _temporaries(run) == []
    if not resume:  # the earlier run is whole, as it was
        assert snapshot(run) == before
        return
    # resumed: each checkpoint is a whole one (the previous epoch's or the new one's)
    for name in ("best", "last"):
        load_checkpoint(run / name)
    epoch = json.loads((run / "last" / "trainer.json").read_text())["epoch"]
    assert epoch in (1, 2)
    if epoch == 1:
        assert {k: v for k, v in snapshot(run).items() if k.startswith("last")} == {
            k: v for k, v in before.items() if k.startswith("last")
        }


def test_ctrl_c_handled_on_another_thread_still_stops_a_kenlm_tool(tmp_path: Path) -> None:
    """A ^C that the kernel hands to another thread (numpy's OpenBLAS threads, a progress bar's)
    runs Python's handler there, which does not wake the main thread blocked reading the tool's
    output: the wait must come back to the interpreter often enough to raise it. Seen once as a
    30-second hang of `test_ngram_build_stopped_by_a_signal_stops_lmplz[SIGINT]` on a loaded
    machine."""
    _silent_lmplz(tmp_path / "bin")
    code = (
        "import signal, sys, threading, time\n"
        "from rescorer import ngram\n"
        "def interrupt():\n"
        "    time.sleep(1.0)\n"
        "    signal.pthread_kill(threading.get_ident(), signal.SIGINT)  # this thread's\n"
        "threading.Thread(target=interrupt, daemon=True).start()\n"
        "try:\n"
        f"    ngram._run([{str(tmp_path / 'bin' / 'lmplz')!r}])\n"
        "except KeyboardInterrupt:\n"
        "    print('interrupted')\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=20,
        env=ENV,
        preexec_fn=_default_sigint,
    )
    assert proc.stdout.strip() == "interrupted", proc.stderr
