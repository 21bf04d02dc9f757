"""Bad inputs over every command that reads files (issue 21): one line, exit 2, no traceback.

A small real sample (12 LibriSpeech dev_clean utterances, 4 hypotheses each, with their
references and speakers) and files derived from it are the clean inputs. Each *slot* is one
input file of one command; each *corruption* replaces that file by a damaged copy. The
assertions, per case:

* no traceback (the runner catches exceptions: any exception but SystemExit fails the case);
* no click usage block;
* a corruption that makes the input wrong gives exit status 2 and exactly one ``Error:`` line
  naming the damaged file; one that may still be valid (a truncated or repeated line) gives
  exit 0, or that one line.

Then the same real files with a UTF-8 byte-order mark, CRLF, CR-only or BOM+CRLF line ends
must give the same output (and the same written files) as the clean files.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from rescorer.cli.main import main
from tests.conftest import ESPNET_DIR, TINY_ARPA

N_UTTS = 12
N_RANKS = 4

# -- the clean workspace ---------------------------------------------------------------------


def _sample_espnet(src: Path, dst: Path) -> list[str]:
    """The first N_UTTS utterances of an ESPnet set, N_RANKS hypotheses each, with references."""
    first = (src / "raw_hypotheses" / "1best_recog" / "text").read_text(encoding="utf-8")
    ids = [line.split()[0] for line in first.splitlines()[:N_UTTS]]
    keep = set(ids)
    for k in range(1, N_RANKS + 1):
        folder = dst / "raw_hypotheses" / f"{k}best_recog"
        folder.mkdir(parents=True)
        for name in ("text", "score", "scores"):
            lines = (src / "raw_hypotheses" / f"{k}best_recog" / name).read_text(encoding="utf-8")
            kept = [line for line in lines.splitlines() if line.split(maxsplit=1)[0] in keep]
            (folder / name).write_text("\n".join(kept) + "\n", encoding="utf-8")
    (dst / "references").mkdir()
    trn = (src / "references" / "ref_wer.trn").read_text(encoding="utf-8").splitlines()
    kept = [line for line in trn if line.rsplit("(", 1)[1].rstrip(")").split("-", 2)[2] in keep]
    (dst / "references" / "ref_wer.trn").write_text("\n".join(kept) + "\n", encoding="utf-8")
    spk = (src / "utt2spk").read_text(encoding="utf-8").splitlines()
    kept = [line for line in spk if line.split()[0] in keep]
    (dst / "utt2spk").write_text("\n".join(kept) + "\n", encoding="utf-8")
    return ids


def invoke(args: list[str]) -> Result:
    return CliRunner().invoke(main, ["-q", *args])


@pytest.fixture(scope="session")
def clean(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Clean input files by placeholder name (``{espnet}``, ``{trn}``, ...)."""
    if not (ESPNET_DIR / "dev_clean").is_dir():
        pytest.skip(f"LibriSpeech ESPnet N-best lists not found at {ESPNET_DIR}")
    root = tmp_path_factory.mktemp("clean")
    espnet = root / "espnet"
    ids = _sample_espnet(ESPNET_DIR / "dev_clean", espnet)
    files = {"espnet": espnet, "trn": espnet / "references" / "ref_wer.trn"}
    files["utt2spk"] = espnet / "utt2spk"
    files["hyp"] = espnet / "raw_hypotheses" / "1best_recog" / "text"
    files["hyp2"] = espnet / "raw_hypotheses" / "2best_recog" / "text"
    for fmt, name in (("jsonl", "nbest.jsonl"), ("json", "nbest.json"), ("kaldi", "kaldi")):
        result = invoke(["convert", "--nbest", str(espnet), "--to", fmt, "--out", str(root / name)])
        assert result.exit_code == 0, result.output
        files[fmt] = root / name
    files["kaldi_text"] = files["kaldi"] / "text"
    srilm3 = root / "srilm3" / f"{ids[0]}.nbest"
    srilm3.parent.mkdir()
    srilm3.write_text("-12.5 -30.25 3 A B C\n-13 -29 2 A C\n", encoding="utf-8")
    files["srilm3"] = srilm3
    srilm1 = root / "srilm1" / f"{ids[0]}.nbest"
    srilm1.parent.mkdir()
    srilm1.write_text("NBestList1.0\n(-1200) A B C\n(-1300) A C\n", encoding="utf-8")
    files["srilm1"] = srilm1
    weights = {"format": "rescorer-weights", "version": 1, "length": 0.5}
    weights["features"] = {"decoder": 1.0, "ctc": 0.5, "lm": 0.3}
    files["weights"] = root / "weights.json"
    files["weights"].write_text(json.dumps(weights) + "\n", encoding="utf-8")
    files["ctx_jsonl"] = root / "ctx.jsonl"
    files["ctx_jsonl"].write_text(
        "".join(
            json.dumps({"utt": u, "fields": {"genre": f"g{i % 2}"}}) + "\n"
            for i, u in enumerate(ids)
        ),
        encoding="utf-8",
    )
    files["ctx_tsv"] = root / "ctx.tsv"
    files["ctx_tsv"].write_text(
        "utt\tgenre\n" + "".join(f"{u}\tg{i % 2}\n" for i, u in enumerate(ids)), encoding="utf-8"
    )
    files["arpa"] = root / "tiny.arpa"
    files["arpa"].write_text(TINY_ARPA, encoding="utf-8")
    files["plain"] = root / "plain.txt"
    files["plain"].write_text("a b\nb a a\n\nb\n", encoding="utf-8")
    files["kaldi_small"] = root / "small.txt"
    files["kaldi_small"].write_text("u1 a b\nu2 b a a\nu3 b\n", encoding="utf-8")
    files["trn_small"] = root / "small.trn"
    files["trn_small"].write_text("a b\t(u1)\nb a a\t(u2)\nb\t(u3)\n", encoding="utf-8")
    files["ctx_small"] = root / "ctx_small.jsonl"
    files["ctx_small"].write_text(
        "".join(
            json.dumps({"utt": u, "genre": g}) + "\n"
            for u, g in (("u1", "x"), ("u2", "y"), ("u3", "x"))
        ),
        encoding="utf-8",
    )
    files["mix"] = root / "mix.json"
    files["mix"].write_text(
        json.dumps(
            {
                "format": "rescorer-mixture",
                "version": 1,
                "components": [
                    {"spec": f"a=kenlm:{files['arpa']}", "weight": 0.25},
                    {"spec": f"b=kenlm:{files['arpa']}", "weight": 0.75},
                ],
            }
        ),
        encoding="utf-8",
    )
    files["cache"] = root / "cache.json"
    files["cache"].write_text(
        json.dumps(
            {
                "format": "rescorer-cache",
                "version": 1,
                "base": f"kenlm:{files['arpa']}",
                "lambda": 0.25,
                "field": "genre",
            }
        ),
        encoding="utf-8",
    )
    files["requests"] = root / "requests.tsv"
    files["requests"].write_text('a\n\tb\na b\t\t{"genre": "x"}\n', encoding="utf-8")
    files["docs"] = root / "docs.jsonl"
    files["docs"].write_text(
        "".join(
            json.dumps({"id": f"d{i}", "text": ["a b", "b a a"], "fields": {"genre": "x"}}) + "\n"
            for i in range(3)
        ),
        encoding="utf-8",
    )
    files["words"] = root / "words.txt"
    files["words"].write_text("a\nb\n", encoding="utf-8")
    files["sentences"] = root / "sentences.tsv"
    files["sentences"].write_text("s1\ta b a\ns2\tb a\ns3\ta a b b\n", encoding="utf-8")
    files["corpus"] = root / "corpus.txt"
    refs = files["trn"].read_text(encoding="utf-8").splitlines()
    files["corpus"].write_text(
        "".join(line.split("\t")[0] + "\n" for line in refs), encoding="utf-8"
    )
    for name in ("results_a", "results_b"):
        files[name] = root / f"{name}.jsonl"
        args = [
            "keyboard-eval",
            "--lm",
            f"kenlm:{files['arpa']}",
            "--text",
            str(files["sentences"]),
        ]
        result = invoke([*args, "--per-sentence", str(files[name])])
        assert result.exit_code == 0, result.output
    return files


# -- slots: one input file of one command ------------------------------------------------------


@dataclass(frozen=True)
class Slot:
    """``args`` with ``{name}`` placeholders; ``target`` is the one corrupted (``inner``: a file
    inside a folder input); ``kind`` picks the kind-specific corruptions."""

    id: str
    args: tuple[str, ...]
    target: str
    inner: str | None = None
    kind: str = "text"
    writes: str | None = None  # an output placeholder whose file is compared in the variants
    optional: bool = False  # the file may be absent (then a folder or device there is ignored)
    empty_ok: bool = False  # an empty file is valid input (an utterance without hypotheses)


ESPNET_TEXT = "raw_hypotheses/1best_recog/text"
LM = "kenlm:{arpa}"

SLOTS = (
    Slot("wer-ref", ("wer", "--ref", "{trn}", "--hyp", "{hyp}"), "trn"),
    Slot("wer-hyp", ("wer", "--ref", "{trn}", "--hyp", "{hyp}"), "hyp"),
    Slot("wer-compare", ("wer", "--ref", "{trn}", "--hyp", "{hyp}", "--compare", "{hyp2}"), "hyp2"),
    Slot(
        "wer-utt2spk",
        ("wer", "--ref", "{trn}", "--hyp", "{hyp}", "--utt2spk", "{utt2spk}"),
        "utt2spk",
    ),
    Slot(
        "wer-espnet-text",
        ("wer", "--ref", "{trn}", "--nbest", "{espnet}", "--oracle"),
        "espnet",
        ESPNET_TEXT,
    ),
    Slot(
        "wer-espnet-score",
        ("wer", "--ref", "{trn}", "--nbest", "{espnet}"),
        "espnet",
        "raw_hypotheses/2best_recog/score",
        kind="espnet-score",
        optional=True,
    ),
    Slot(
        "wer-espnet-scores",
        ("wer", "--ref", "{trn}", "--nbest", "{espnet}"),
        "espnet",
        "raw_hypotheses/1best_recog/scores",
        kind="espnet-scores",
        optional=True,
    ),
    Slot(
        "wer-jsonl",
        ("wer", "--ref", "{trn}", "--nbest", "{jsonl}", "--oracle"),
        "jsonl",
        kind="jsonl",
    ),
    Slot("wer-json", ("wer", "--ref", "{trn}", "--nbest", "{json}"), "json", kind="json"),
    Slot("wer-kaldi-text", ("wer", "--ref", "{trn}", "--nbest", "{kaldi}"), "kaldi", "text"),
    Slot(
        "wer-kaldi-cost",
        ("wer", "--ref", "{trn}", "--nbest", "{kaldi}"),
        "kaldi",
        "lm_cost",
        kind="cost",
        optional=True,
    ),
    Slot(
        "convert-srilm3",
        ("convert", "--nbest", "{srilm3}", "--format", "srilm3", "--to", "jsonl", "--out", "{out}"),
        "srilm3",
        kind="srilm3",
        writes="out",
        empty_ok=True,
    ),
    Slot(
        "convert-srilm1",
        ("convert", "--nbest", "{srilm1}", "--format", "srilm1", "--to", "jsonl", "--out", "{out}"),
        "srilm1",
        writes="out",
    ),
    Slot(
        "convert-jsonl",
        ("convert", "--nbest", "{jsonl}", "--to", "json", "--out", "{out}"),
        "jsonl",
        kind="jsonl",
        writes="out",
    ),
    Slot(
        "score-nbest",
        ("score", "--nbest", "{jsonl}", "--lm", LM, "--out", "{out}"),
        "jsonl",
        kind="jsonl",
        writes="out",
    ),
    Slot(
        "score-arpa",
        ("score", "--nbest", "{jsonl}", "--lm", LM, "--out", "{out}"),
        "arpa",
        kind="arpa",
        writes="out",
    ),
    Slot(
        "score-context",
        ("score", "--nbest", "{jsonl}", "--lm", LM, "--context", "{ctx_jsonl}", "--out", "{out}"),
        "ctx_jsonl",
        kind="jsonl",
        writes="out",
    ),
    Slot(
        "score-context-tsv",
        ("score", "--nbest", "{jsonl}", "--lm", LM, "--context", "{ctx_tsv}", "--out", "{out}"),
        "ctx_tsv",
        writes="out",
    ),
    Slot(
        "tune-ref",
        ("tune", "--nbest", "{espnet}", "--ref", "{trn}", "--restarts", "0", "--out", "{out}"),
        "trn",
    ),
    Slot(
        "tune-init",
        (
            "tune",
            "--nbest",
            "{espnet}",
            "--ref",
            "{trn}",
            "--features",
            "decoder,ctc,lm",
            "--restarts",
            "0",
            "--init",
            "{weights}",
            "--out",
            "{out}",
        ),
        "weights",
        kind="json",
    ),
    Slot(
        "rescore-weights",
        (
            "rescore",
            "--nbest",
            "{espnet}",
            "--weights",
            "{weights}",
            "--ref",
            "{trn}",
            "--out",
            "{outdir}",
        ),
        "weights",
        kind="json",
    ),
    Slot(
        "rescore-ref",
        (
            "rescore",
            "--nbest",
            "{espnet}",
            "--weights",
            "{weights}",
            "--ref",
            "{trn}",
            "--out",
            "{outdir}",
        ),
        "trn",
    ),
    Slot(
        "rescore-utt2spk",
        (
            "rescore",
            "--nbest",
            "{espnet}",
            "--weights",
            "{weights}",
            "--ref",
            "{trn}",
            "--utt2spk",
            "{utt2spk}",
            "--out",
            "{outdir}",
        ),
        "utt2spk",
    ),
    Slot(
        "rescore-espnet",
        ("rescore", "--nbest", "{espnet}", "--weights", "{weights}", "--out", "{outdir}"),
        "espnet",
        ESPNET_TEXT,
    ),
    Slot("ppl-plain", ("ppl", "--lm", LM, "--text", "{plain}"), "plain"),
    Slot(
        "ppl-kaldi",
        ("ppl", "--lm", LM, "--text", "{kaldi_small}", "--text-format", "kaldi"),
        "kaldi_small",
    ),
    Slot(
        "ppl-trn", ("ppl", "--lm", LM, "--text", "{trn_small}", "--text-format", "trn"), "trn_small"
    ),
    Slot(
        "ppl-context",
        (
            "ppl",
            "--lm",
            LM,
            "--text",
            "{kaldi_small}",
            "--text-format",
            "kaldi",
            "--context",
            "{ctx_small}",
        ),
        "ctx_small",
        kind="jsonl",
    ),
    Slot("ppl-arpa", ("ppl", "--lm", LM, "--text", "{plain}"), "arpa", kind="arpa"),
    Slot("ppl-mix", ("ppl", "--lm", "mix:{mix}", "--text", "{plain}"), "mix", kind="json"),
    Slot("ppl-cache", ("ppl", "--lm", "cache:{cache}", "--text", "{plain}"), "cache", kind="json"),
    Slot(
        "ngram-build",
        (
            "ngram",
            "build",
            "--text",
            "{corpus}",
            "--order",
            "2",
            "--discount-fallback",
            "--arpa",
            "--out",
            "{out}",
        ),
        "corpus",
        writes="out",
    ),
    Slot("corpus-shard", ("corpus", "shard", "{plain}", "{outdir}", "--shards", "2"), "plain"),
    Slot(
        "corpus-shard-jsonl",
        ("corpus", "shard", "{docs}", "{outdir}", "--shards", "2", "--format", "jsonl"),
        "docs",
        kind="jsonl",
    ),
    Slot(
        "predict-input",
        ("predict", "--lm", LM, "--input", "{requests}", "--out", "{out}"),
        "requests",
        writes="out",
        empty_ok=True,  # blank lines are requests (sentence starts); an empty file is refused
    ),
    Slot(
        "predict-vocab",
        ("predict", "--lm", LM, "--vocab", "{words}", "--input", "{requests}", "--out", "{out}"),
        "words",
        writes="out",
    ),
    Slot("keyboard-eval-text", ("keyboard-eval", "--lm", LM, "--text", "{sentences}"), "sentences"),
    Slot(
        "keyboard-eval-vocab",
        ("keyboard-eval", "--lm", LM, "--vocab", "{words}", "--text", "{sentences}"),
        "words",
    ),
    Slot(
        "keyboard-eval-compare",
        ("keyboard-eval", "--lm", LM, "--text", "{sentences}", "--compare", "{results_a}"),
        "results_a",
        kind="jsonl",
    ),
    Slot(
        "keyboard-compare",
        ("keyboard-compare", "{results_a}", "{results_b}"),
        "results_b",
        kind="jsonl",
    ),
    Slot(
        "context-build-nbest",
        ("context", "build", "--nbest", "{espnet}", "--out", "{out}"),
        "espnet",
        ESPNET_TEXT,
        writes="out",
    ),
    Slot(
        "context-build-from",
        ("context", "build", "--nbest", "{espnet}", "--from", "{hyp}", "--out", "{out}"),
        "hyp",
        writes="out",
    ),
)


# -- corruptions --------------------------------------------------------------------------------

Damage = Callable[[Path], None]


def _rewrite(fn: Callable[[bytes], bytes]) -> Damage:
    def damage(path: Path) -> None:
        path.write_bytes(fn(path.read_bytes()))

    return damage


def _missing(path: Path) -> None:
    _remove(path)


def _directory(path: Path) -> None:
    _remove(path)
    path.mkdir()


def _device(path: Path) -> None:
    _remove(path)
    path.symlink_to("/dev/null")


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink()


def _insert_line(n: int, new: bytes) -> Callable[[bytes], bytes]:
    """Put ``new`` as line ``n`` (1-based) of the content."""

    def fn(data: bytes) -> bytes:
        lines = data.splitlines(keepends=True)
        return b"".join(lines[: n - 1]) + new + b"\n" + b"".join(lines[n - 1 :])

    return fn


def _first_line_repeated(data: bytes) -> bytes:
    first = data.splitlines(keepends=True)[0]
    return data + (first if first.endswith(b"\n") else first + b"\n")


# (id, damage, the input is certainly wrong)
GENERIC: tuple[tuple[str, Damage, bool], ...] = (
    ("missing", _missing, True),
    ("directory", _directory, True),
    ("device", _device, True),
    ("empty", _rewrite(lambda d: b""), True),
    ("blank", _rewrite(lambda d: b" \n\t\n\n"), True),
    ("binary", _rewrite(lambda d: bytes(range(256)) * 4), True),
    ("utf16", _rewrite(lambda d: d.decode("utf-8").encode("utf-16")), True),
    ("utf16le-no-bom", _rewrite(lambda d: d.decode("utf-8").encode("utf-16-le")), True),
    ("latin1-line2", _rewrite(_insert_line(2, "caf\u00e9 na\u00efve".encode("latin-1"))), True),
    ("nul-line2", _rewrite(_insert_line(2, b"a\x00b")), True),
    ("gzip-bytes", _rewrite(lambda d: b"\x1f\x8b\x08\x00garbage"), True),
    ("truncated", _rewrite(lambda d: d[: len(d) // 2]), False),
    ("long-line", _rewrite(_insert_line(2, b"x" * 300_000)), False),
    ("repeated-line", _rewrite(_first_line_repeated), False),
)

_DEEP = b"[" * 5000 + b"]" * 5000
_BIG_INT = b"7" * 5000

KIND_SPECIFIC: dict[str, tuple[tuple[str, Damage, bool], ...]] = {
    "json": (
        ("deep", _rewrite(lambda d: _DEEP), True),
        (
            "deep-inside",
            _rewrite(lambda d: d.replace(b"{", b'{"z": ' + b"[" * 200 + b"]" * 200 + b", ", 1)),
            True,
        ),
        ("duplicate-key", _rewrite(lambda d: d.replace(b"{", b'{"version": 1, ', 1)), True),
        ("nan", _rewrite(lambda d: d.replace(b"0.5", b"NaN").replace(b"0.25", b"NaN")), True),
        (
            "overflow",
            _rewrite(lambda d: d.replace(b"0.5", b"1e400").replace(b"0.25", b"1e400")),
            True,
        ),
        (
            "big-int",
            _rewrite(lambda d: d.replace(b"0.5", _BIG_INT).replace(b"0.25", _BIG_INT)),
            True,
        ),
        ("array", _rewrite(lambda d: b"[1, 2]\n"), True),
    ),
    "jsonl": (
        ("deep", _rewrite(_insert_line(1, _DEEP)), True),
        ("duplicate-key", _rewrite(_insert_line(1, b'{"utt": "x", "utt": "y"}')), True),
        ("nan", _rewrite(_insert_line(1, b'{"utt": NaN}')), True),
        ("big-int", _rewrite(_insert_line(1, b'{"utt": ' + _BIG_INT + b"}")), True),
        ("not-object", _rewrite(_insert_line(1, b"[1]")), True),
    ),
    "srilm3": (
        ("score-1e308", _rewrite(lambda d: d.replace(b"-12.5", b"1e308", 1)), True),
        (
            "nwords-400-digits",
            _rewrite(lambda d: d.replace(b" 3 ", b" " + b"9" * 400 + b" ", 1)),
            True,
        ),
        ("nan", _rewrite(lambda d: d.replace(b"-12.5", b"nan", 1)), True),
    ),
    "espnet-score": (
        ("nan", _rewrite(lambda d: d.replace(b"tensor(", b"tensor(nan", 1)), True),
        ("1e400", _rewrite(lambda d: d.replace(b"tensor(-", b"tensor(1e400 -", 1)), True),
    ),
    "espnet-scores": (
        (
            "deep",
            _rewrite(lambda d: d.replace(b"{", b'{"x": ' + b"[" * 3000 + b"]" * 3000 + b", ", 1)),
            True,
        ),
        (
            "duplicate-key",
            _rewrite(lambda d: d.replace(b'{"decoder"', b'{"ctc": 1, "decoder"', 1)),
            True,
        ),
        ("overflow", _rewrite(lambda d: d.replace(b'"tensor(', b'"tensor(1e999', 1)), True),
    ),
    "cost": (
        ("1e400", _rewrite(lambda d: _insert_line(1, d.split(b" ")[0] + b" 1e400")(d)), True),
        ("rank-5000-digits", _rewrite(_insert_line(1, b"x-" + _BIG_INT + b" 1.0")), True),
    ),
    "arpa": (
        ("binary", _rewrite(lambda d: b"\\data\\\n" + bytes(range(256)) * 8), True),
        ("latin1", _rewrite(lambda d: d.replace(b"\ta\t", "\t\u00e9\t".encode("latin-1"))), False),
    ),
}

CASES = [
    pytest.param(slot, damage, certain, id=f"{slot.id}-{name}")
    for slot in SLOTS
    for name, damage, certain in (*GENERIC, *KIND_SPECIFIC.get(slot.kind, ()))
]


def _materialise(slot: Slot, clean: dict[str, Path], tmp: Path) -> tuple[list[str], Path]:
    """The slot's arguments over a private copy of its target; returns (args, damaged path)."""
    src = clean[slot.target]
    copy = tmp / "input" / src.name
    copy.parent.mkdir(parents=True)
    if src.is_dir():
        shutil.copytree(src, copy)
    else:
        shutil.copyfile(src, copy)
    paths = {**{k: str(v) for k, v in clean.items()}, slot.target: str(copy)}
    paths["out"] = str(tmp / "out" / "result")
    paths["outdir"] = str(tmp / "outdir")
    args = [a.format(**paths) for a in slot.args]
    return args, (copy / slot.inner if slot.inner else copy)


def _check_one_line(result: Result, damaged: Path) -> None:
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(
        result.exception
    )
    assert "Traceback" not in result.output
    assert "Usage:" not in result.output, result.output
    assert result.exit_code == 2, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1, result.output
    assert result.output.rstrip("\n").endswith(errors[0]), result.output
    assert str(damaged) in errors[0] or str(damaged.parent) in errors[0], errors[0]


@pytest.mark.bad_input("traceback")
@pytest.mark.parametrize(("slot", "damage", "certain"), CASES)
def test_bad_input(
    slot: Slot, damage: Damage, certain: bool, clean: dict[str, Path], tmp_path: Path
) -> None:
    args, damaged = _materialise(slot, clean, tmp_path)
    damage(damaged)
    result = invoke(args)
    if slot.optional and damage in (_missing, _directory, _device):
        certain = False
    if slot.empty_ok and damaged.is_file() and not damaged.read_bytes().strip():
        certain = False
    if certain or result.exit_code != 0:
        _check_one_line(result, damaged)


@pytest.mark.parametrize("slot", SLOTS, ids=lambda s: s.id)
def test_clean_input_runs(slot: Slot, clean: dict[str, Path], tmp_path: Path) -> None:
    """Every slot's clean invocation works, so the damaged ones fail for the damage."""
    args, _ = _materialise(slot, clean, tmp_path)
    result = invoke(args)
    assert result.exit_code == 0, result.output


# -- BOM and line-end variants give the same results ---------------------------------------------

VARIANTS = {
    "bom": lambda d: b"\xef\xbb\xbf" + d,
    "crlf": lambda d: d.replace(b"\n", b"\r\n"),
    "cr": lambda d: d.replace(b"\n", b"\r"),
    "bom-crlf": lambda d: b"\xef\xbb\xbf" + d.replace(b"\n", b"\r\n"),
}


def _run_normalised(
    slot: Slot, clean: dict[str, Path], tmp: Path, variant: str | None
) -> tuple[str, bytes | None]:
    args, target = _materialise(slot, clean, tmp)
    if variant is not None:
        target.write_bytes(VARIANTS[variant](target.read_bytes()))
    result = invoke(args)
    assert result.exit_code == 0, result.output
    copy = tmp / "input"
    output = result.output.replace(str(copy), "<INPUT>").replace(str(tmp), "<TMP>")
    output = _TIMES.sub("<T>", "".join(_KEEP.findall(output)))
    written = None
    if slot.writes:
        written = Path(args[args.index("--out") + 1]).read_bytes()
        written = _TIMES_B.sub(b"<T>", written.replace(str(copy).encode(), b"<INPUT>"))
    return output, written


# Timings differ from run to run; the WARNING about an ARPA read through an LF copy is expected.
_KEEP = re.compile(r"^(?!WARNING ).*\n?", re.MULTILINE)
_TIMES = re.compile(r"[0-9.]+ ms|[0-9.]+ ?s\b")
_TIMES_B = re.compile(rb'"(ms|seconds|latency_ms)": [0-9.e-]+')


@pytest.mark.bad_input("silent")
@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("slot", SLOTS, ids=lambda s: s.id)
def test_bom_and_line_ends_give_identical_results(
    slot: Slot, variant: str, clean: dict[str, Path], tmp_path: Path
) -> None:
    base = _run_normalised(slot, clean, tmp_path / "clean", None)
    assert _run_normalised(slot, clean, tmp_path / variant, variant) == base


@pytest.mark.bad_input("silent")
def test_crlf_trn_reference_is_not_a_word_error(clean: dict[str, Path], tmp_path: Path) -> None:
    """The issue's case: a BOM in a trn reference added a word error (WER 1.98 -> 2.20)."""
    ref = tmp_path / "ref.trn"
    ref.write_bytes(b"\xef\xbb\xbf" + clean["trn"].read_bytes().replace(b"\n", b"\r\n"))
    with_bom = invoke(["wer", "--ref", str(ref), "--hyp", str(clean["hyp"]), "--no-summary"])
    plain = invoke(["wer", "--ref", str(clean["trn"]), "--hyp", str(clean["hyp"]), "--no-summary"])
    assert with_bom.exit_code == plain.exit_code == 0
    assert with_bom.output.split("[")[1] == plain.output.split("[")[1]


@pytest.mark.bad_input("silent")
def test_cr_only_lines_are_lines(clean: dict[str, Path], tmp_path: Path) -> None:
    """CR-only line ends used to merge a whole file into one line ("1 sentences")."""
    text = tmp_path / "cr.txt"
    text.write_bytes(clean["plain"].read_bytes().replace(b"\n", b"\r"))
    result = invoke(["ppl", "--lm", f"kenlm:{clean['arpa']}", "--text", str(text)])
    assert result.exit_code == 0 and result.output.startswith("3 sentences, 6 words"), result.output


@pytest.mark.bad_input("traceback")
def test_special_input_files(clean: dict[str, Path], tmp_path: Path) -> None:
    """A FIFO holding a reference is read (process substitution); a socket is refused."""
    import socket

    fifo = tmp_path / "ref.fifo"
    os.mkfifo(fifo)
    pid = os.fork()
    if pid == 0:  # the writer
        try:
            with open(fifo, "wb") as f:
                f.write(clean["trn"].read_bytes())
        finally:
            os._exit(0)
    result = invoke(["wer", "--ref", str(fifo), "--ref-format", "trn", "--hyp", str(clean["hyp"])])
    os.waitpid(pid, 0)
    assert result.exit_code == 0, result.output
    sock_path = tmp_path / "s.sock"
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(sock_path))
        result = invoke(["wer", "--ref", str(sock_path), "--hyp", str(clean["hyp"])])
    _check_one_line(result, sock_path)
    assert "got a socket" in result.output
