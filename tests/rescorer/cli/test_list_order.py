"""Lists without first-pass scores (the ``rank`` feature) and ``--max-nbest K`` (issue 48).

The lists below carry no score: their order is all the first pass left. A unigram model
(``UNIGRAM_ARPA``; its one bigram never occurs here, KenLM wants at least a bigram model) knows
something the order does not (it prefers ``d`` to ``y`` by 2 log10 units) and is wrong where the
order is right (it prefers ``x`` to ``c`` by 0.3). The list order makes 2 errors, the model
alone 3, and the order with the model beside it none.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import click
import pytest
from click.testing import CliRunner, Result

from rescorer.cli.main import COMMANDS, main
from tests.paths import REPO

pytestmark = pytest.mark.usefixtures("restore_logging")  # main reconfigures logging

# utterance -> (reference, hypotheses in list order); errors of each in the comments
LISTS: dict[str, tuple[str, list[str]]] = {
    "u0": ("a b c", ["a b c", "a b x"]),  # 0, 1   the model prefers x (wrong)
    "u1": ("a b d", ["a b y", "a b d"]),  # 1, 0   the model prefers d (right)
    "u2": ("c d", ["c d", "x d"]),  # 0, 1      the model prefers x (wrong)
    "u3": ("a d", ["a y", "a d", "a x"]),  # 1, 0, 1  the model prefers d (right)
    "u4": ("b c", ["b c", "b x"]),  # 0, 1      the model prefers x (wrong)
}
REF_WORDS = 12
LIST_ORDER_LINE = "%WER 16.67 [ 2 / 12 ]"  # tune's short form: u1 and u3
LIST_ORDER_KALDI = "%WER 16.67 [ 2 / 12, 0 ins, 0 del, 2 sub ]"
UNIGRAM_ARPA = """\\data\\
ngram 1=9
ngram 2=1

\\1-grams:
-1.0\t<unk>\t0
-99\t<s>\t0
-1.0\t</s>\t0
-1.0\ta\t0
-1.0\tb\t0
-1.5\tc\t0
-1.0\td\t0
-1.2\tx\t0
-3.0\ty\t0

\\2-grams:
-1.0\ta a

\\end\\
"""


def rank_value(position: int) -> float:
    """The rank feature of the hypothesis at 0-based ``position``: minus log(1 + position)."""
    return -math.log1p(position)


def run(args: Sequence[object], quiet: bool = True) -> Result:
    argv = (["-q"] if quiet else []) + [str(a) for a in args]
    return CliRunner().invoke(main, argv, catch_exceptions=False)


def records(scores: dict[str, list[list[float]]] | None = None) -> list[dict]:
    """The lists as HyPoradise records (with their references), with ``scores[name][k]`` as
    the per-hypothesis score ``name`` of list k when given."""
    out = []
    for k, (utt, (ref, hyps)) in enumerate(LISTS.items()):
        rec: dict = {"input": hyps, "output": ref, "id": utt}
        for name, values in (scores or {}).items():
            rec[name] = values[k]
        out.append(rec)
    return out


@pytest.fixture()
def unscored(tmp_path: Path) -> Path:
    path = tmp_path / "unscored.json"
    path.write_text(json.dumps(records()), encoding="utf-8")
    return path


@pytest.fixture()
def unigram(tmp_path: Path) -> Path:
    path = tmp_path / "uni.arpa"
    path.write_text(UNIGRAM_ARPA, encoding="utf-8")
    return path


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def line_with(output: str, start: str) -> str:
    lines = [line for line in output.splitlines() if line.startswith(start)]
    assert len(lines) == 1, output
    return lines[0]


# -- the rank feature ---------------------------------------------------------------------------


def test_score_adds_rank_to_lists_without_scores(tmp_path: Path, unscored: Path, unigram: Path):
    out = tmp_path / "scored.jsonl"
    result = run(["score", "--nbest", unscored, "--lm", f"uni=kenlm:{unigram}", "--out", out])
    assert result.exit_code == 0, result.output
    assert "with features ['rank', 'uni', 'uni_oov']" in result.output
    for line, (_, hyps) in zip(read_jsonl(out), LISTS.values(), strict=True):
        ranks = [h["scores"]["rank"] for h in line["hyps"]]
        assert ranks == pytest.approx([rank_value(i) for i in range(len(hyps))])
    off = tmp_path / "off.jsonl"
    result = run(
        ["score", "--nbest", unscored, "--lm", f"uni=kenlm:{unigram}", "--no-rank", "--out", off]
    )
    assert result.exit_code == 0, result.output
    assert "with features ['uni', 'uni_oov']" in result.output


def test_tune_unscored_lists_starts_from_their_order(
    tmp_path: Path, unscored: Path, unigram: Path
) -> None:
    weights = tmp_path / "w.json"
    result = run(
        ["tune", "--nbest", unscored, "--lm", f"uni=kenlm:{unigram}", "--out", weights],
        quiet=False,
    )
    assert result.exit_code == 0, result.output
    assert line_with(result.output, "initial").startswith(f"initial %WER 16.67 [ 2 / {REF_WORDS} ]")
    assert line_with(result.output, "tuned").startswith(f"tuned   %WER 0.00 [ 0 / {REF_WORDS} ]")
    assert "WARNING" not in result.output
    assert "rank" in result.output  # the note on the feature, and its weight
    w = json.loads(weights.read_text())
    assert list(w["features"]) == ["rank", "uni", "uni_oov"]
    assert w["features"]["rank"] == 1.0  # the anchor: the search starts from the list order
    assert w["meta"]["initial_errors"] == 2 and w["meta"]["dev_errors"] == 0
    # rescore computes the rank of the same lists again and gets the tuned choice
    out = tmp_path / "rescored"
    result = run(
        [
            "rescore", "--nbest", unscored, "--lm", f"uni=kenlm:{unigram}", "--weights",
            weights, "--out", out,
        ]
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert f"{LIST_ORDER_KALDI} first pass" in result.output
    assert "%WER 0.00 [ 0 / 12, 0 ins, 0 del, 0 sub ] rescored" in result.output
    lists = read_jsonl(out / "nbest.jsonl")
    assert all("rank" in h["scores"] for nb in lists for h in nb["hyps"])


def test_tune_without_rank_warns_when_worse_than_the_list_order(
    tmp_path: Path, unscored: Path, unigram: Path
) -> None:
    weights = tmp_path / "w.json"
    result = run(
        ["tune", "--nbest", unscored, "--lm", f"uni=kenlm:{unigram}", "--no-rank", "--out",
         weights]
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert line_with(result.output, "initial").startswith(f"initial {LIST_ORDER_LINE}")
    assert line_with(result.output, "tuned").startswith(f"tuned   %WER 25.00 [ 3 / {REF_WORDS} ]")
    warning = [line for line in result.output.splitlines() if "WARNING" in line]
    assert len(warning) == 1, result.output
    assert "3 errors" in warning[0] and "2" in warning[0] and "list" in warning[0]
    assert "rank" not in json.loads(weights.read_text())["features"]


def test_tune_unscored_lists_alone(tmp_path: Path, unscored: Path) -> None:
    """No --lm: the order is the only feature (today: 'need at least one feature')."""
    weights = tmp_path / "w.json"
    result = run(["tune", "--nbest", unscored, "--out", weights])
    assert result.exit_code == 0, result.output
    assert line_with(result.output, "initial").startswith(f"initial {LIST_ORDER_LINE}")
    assert json.loads(weights.read_text())["features"] == {"rank": 1.0}


def test_initial_is_the_list_order_for_scored_lists_too(tmp_path: Path) -> None:
    """A scored list: 'initial' is its first hypotheses, not the anchor feature alone; a tuned
    result worse than that is a warning."""
    # `bad` ranks a wrong hypothesis first in every list whose order is right, `good` the reverse
    bad = [[-1.0, 0.0], [0.0, -1.0], [-1.0, 0.0], [0.0, -1.0, -2.0], [-1.0, 0.0]]
    path = tmp_path / "scored.json"
    path.write_text(json.dumps(records({"bad": bad})), encoding="utf-8")
    weights = tmp_path / "w.json"
    result = run(["tune", "--nbest", path, "--features", "bad", "--no-length", "--out", weights])
    assert result.exit_code == 0, result.output
    assert line_with(result.output, "initial").startswith(f"initial {LIST_ORDER_LINE}")
    tuned = line_with(result.output, "tuned")
    assert tuned.startswith("tuned   %WER 41.67 [ 5 / 12 ]"), tuned
    warning = [line for line in result.output.splitlines() if "WARNING" in line]
    assert len(warning) == 1 and "5 errors" in warning[0], result.output
    # a scored list gets no rank unless asked for
    assert "rank" not in json.loads(weights.read_text())["features"]


def test_rank_on_request_and_in_weights(tmp_path: Path, unigram: Path) -> None:
    """--rank adds the order to scored lists; weights naming rank make rescore add it."""
    scores = [[-1.0] * len(h) for _, h in LISTS.values()]  # a score with no information
    path = tmp_path / "flat.json"
    path.write_text(json.dumps(records({"flat": scores})), encoding="utf-8")
    out = tmp_path / "s.jsonl"
    result = run(["score", "--nbest", path, "--lm", f"uni=kenlm:{unigram}", "--out", out])
    assert result.exit_code == 0, result.output
    assert "with features ['flat', 'uni', 'uni_oov']" in result.output  # scored: no rank
    result = run(["score", "--nbest", path, "--lm", f"uni=kenlm:{unigram}", "--rank", "--out", out])
    assert result.exit_code == 0, result.output
    assert "with features ['flat', 'rank', 'uni', 'uni_oov']" in result.output
    weights = tmp_path / "w.json"
    result = run(["tune", "--nbest", path, "--features", "rank,flat", "--out", weights])
    assert result.exit_code == 0, result.output
    assert json.loads(weights.read_text())["features"]["rank"] == 1.0
    result = run(["rescore", "--nbest", path, "--weights", weights, "--out", tmp_path / "r"])
    assert result.exit_code == 0, result.output
    assert f"{LIST_ORDER_KALDI} rescored" in result.output
    result = run(
        ["rescore", "--nbest", path, "--weights", weights, "--no-rank", "--out", tmp_path / "r2"]
    )
    assert result.exit_code == 2 and "rank" in result.output


def test_rank_name_clashes(tmp_path: Path, unscored: Path, unigram: Path) -> None:
    ranked = tmp_path / "ranked.json"
    ranked.write_text(
        json.dumps(records({"rank": [[0.0, -1.0], [0.0, -1.0], [0.0, -1.0], [0.0, -1.0, -2.0],
                                     [0.0, -1.0]]})),
        encoding="utf-8",
    )  # fmt: skip
    result = run(["score", "--nbest", ranked, "--lm", f"uni=kenlm:{unigram}", "--rank", "--out",
                  tmp_path / "o.jsonl"])  # fmt: skip
    assert result.exit_code == 2 and "rank" in result.output, result.output
    # the lists' own `rank` is kept as it is by default
    result = run(["score", "--nbest", ranked, "--lm", f"uni=kenlm:{unigram}", "--out",
                  tmp_path / "o.jsonl"])  # fmt: skip
    assert result.exit_code == 0, result.output
    assert read_jsonl(tmp_path / "o.jsonl")[3]["hyps"][2]["scores"]["rank"] == -2.0
    result = run(["score", "--nbest", unscored, "--lm", f"rank=kenlm:{unigram}", "--out",
                  tmp_path / "o2.jsonl"])  # fmt: skip
    assert result.exit_code == 2 and "rank" in result.output, result.output


# -- --max-nbest --------------------------------------------------------------------------------


def _commands() -> list[click.Command]:
    out: list[click.Command] = []
    ctx = click.Context(main)
    for name in COMMANDS:
        cmd = main.get_command(ctx, name)
        assert cmd is not None
        if isinstance(cmd, click.Group):
            out += [cmd.get_command(ctx, sub) for sub in cmd.list_commands(ctx)]  # type: ignore[misc]
        else:
            out.append(cmd)
    return out


def test_every_command_that_reads_lists_has_max_nbest() -> None:
    readers = [c for c in _commands() if any(p.name == "nbest_path" for p in c.params)]
    assert {c.name for c in readers} >= {"wer", "score", "tune", "rescore", "convert", "build"}
    for command in readers:
        option = [p for p in command.params if p.name == "max_nbest"]
        assert option, f"{command.name} reads N-best lists but has no --max-nbest"
        assert "--max-nbest" in option[0].opts


@pytest.mark.parametrize(
    ("k", "errors", "used"), [(1, "%WER 16.67 [ 2 / 12, 0 ins, 0 del, 2 sub ]", 1),
                              (2, "%WER 0.00 [ 0 / 12, 0 ins, 0 del, 0 sub ]", 2),
                              (50, "%WER 0.00 [ 0 / 12, 0 ins, 0 del, 0 sub ]", 3)]
)  # fmt: skip
def test_wer_oracle_names_the_k_used(unscored: Path, k: int, errors: str, used: int) -> None:
    result = run(["wer", "--nbest", unscored, "--oracle", "--no-summary", "--max-nbest", k])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[-1] == f"{errors} oracle over {used}-best"


def test_max_nbest_cuts_lists_as_they_are_read(tmp_path: Path, unscored: Path) -> None:
    jsonl = tmp_path / "all.jsonl"
    assert run(["convert", "--nbest", unscored, "--to", "jsonl", "--out", jsonl]).exit_code == 0
    for src in (unscored, jsonl):  # read whole, and read lazily
        out = tmp_path / f"cut_{src.suffix[1:]}.jsonl"
        result = run(["convert", "--nbest", src, "--max-nbest", 2, "--to", "jsonl", "--out", out])
        assert result.exit_code == 0, result.output
        lines = read_jsonl(out)
        assert [len(nb["hyps"]) for nb in lines] == [2, 2, 2, 2, 2]
        assert [h["text"] for h in lines[3]["hyps"]] == ["a y", "a d"]
        result = run(["wer", "--nbest", src, "--oracle", "--no-summary", "--max-nbest", 1])
        assert result.output.splitlines()[-1].endswith("oracle over 1-best"), result.output


def test_max_nbest_on_tune_rescore_score(tmp_path: Path, unscored: Path, unigram: Path) -> None:
    # u3's third hypothesis has a score file line of its own: cut after the folder is read
    folder = tmp_path / "extra"
    folder.mkdir()
    for utt, (_, hyps) in LISTS.items():
        (folder / utt).write_text("".join(f"{-i}\n" for i in range(len(hyps))))
    out = tmp_path / "s.jsonl"
    result = run(
        ["score", "--nbest", unscored, "--extra-scores", f"order={folder}", "--lm",
         f"uni=kenlm:{unigram}", "--max-nbest", 2, "--out", out]
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert [len(nb["hyps"]) for nb in read_jsonl(out)] == [2, 2, 2, 2, 2]
    weights = tmp_path / "w.json"
    result = run(
        ["tune", "--nbest", unscored, "--lm", f"uni=kenlm:{unigram}", "--max-nbest", 1, "--out",
         weights]
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert line_with(result.output, "tuned").startswith(f"tuned   {LIST_ORDER_LINE}")
    assert json.loads(weights.read_text())["meta"]["max_nbest"] == 1
    result = run(
        ["rescore", "--nbest", unscored, "--lm", f"uni=kenlm:{unigram}", "--weights", weights,
         "--max-nbest", 1, "--out", tmp_path / "r"]
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert f"{LIST_ORDER_KALDI} rescored" in result.output
    assert all(len(nb["hyps"]) == 1 for nb in read_jsonl(tmp_path / "r" / "nbest.jsonl"))


def test_max_nbest_must_be_positive(unscored: Path) -> None:
    result = run(["wer", "--nbest", unscored, "--max-nbest", 0])
    assert result.exit_code == 2 and "'--max-nbest': 0 is not in the range x>=1" in result.output
    hyp = unscored.with_name("hyp.txt")
    hyp.write_text("u0 a b c\n", encoding="utf-8")
    result = run(["wer", "--hyp", hyp, "--ref", hyp, "--max-nbest", 2])
    assert result.exit_code == 2 and "--max-nbest goes with --nbest" in result.output


# -- the measurement of issue 48, on the real lists -----------------------------------------------


@pytest.mark.slow
def test_librispeech_lists_without_scores(tmp_path: Path, espnet_dir: Path) -> None:
    """dev_clean and dev_other as HyPoradise files without their scores, a 3-gram on five of
    the novels beside their order: tuned on dev_clean, dev_other stays within 0.1 % of the
    lists' own 3.61 % (<= 3.71 %, 1890 errors), where the model alone gave 8.46 % (issue 48,
    with the recipe's 4-gram; docs/guide/rescoring.md has the table). About a minute.
    """
    books = espnet_dir.parent.parent / "corpora" / "gutenberg"
    if not books.is_dir():
        pytest.skip(f"Gutenberg novels not found at {books}")
    sets = {}
    for name in ("dev_clean", "dev_other"):
        src, scored = espnet_dir / name, tmp_path / f"{name}.scored.json"
        ref = src / "references" / "ref_wer.trn"
        result = run(["convert", "--nbest", src, "--ref", ref, "--to", "hyporadise", "--out",
                      scored])  # fmt: skip
        assert result.exit_code == 0, result.output
        keep = ("input", "output", "id")
        bare = [{k: r[k] for k in keep} for r in json.loads(scored.read_text(encoding="utf-8"))]
        sets[name] = tmp_path / f"{name}.json"
        sets[name].write_text(json.dumps(bare), encoding="utf-8")
    novels = tmp_path / "novels"
    novels.mkdir()
    for book in sorted(books.glob("*.txt"))[:5]:
        (novels / book.name).symlink_to(book)
    text = tmp_path / "books.txt"
    script = REPO / "recipes" / "librispeech_nbest" / "local" / "normalise_books.py"
    subprocess.run([sys.executable, script, novels, text], check=True, capture_output=True)
    lm = tmp_path / "3gram.bin"
    result = run(["ngram", "build", "--text", text, "--order", "3", "--out", lm])
    assert result.exit_code == 0, result.output
    scored = {}
    for name, path in sets.items():
        scored[name] = tmp_path / f"{name}.jsonl"
        result = run(["score", "--nbest", path, "--lm", f"3gram=kenlm:{lm}", "--out",
                      scored[name]], quiet=False)  # fmt: skip
        assert result.exit_code == 0, result.output
        assert "their order is the feature 'rank'" in result.output
        assert "with features ['rank', '3gram', '3gram_oov']" in result.output
    weights = tmp_path / "w.json"
    result = run(["tune", "--nbest", scored["dev_clean"], "--out", weights], quiet=False)
    assert result.exit_code == 0, result.output
    assert "initial %WER 1.70 [ 925 / 54402 ]" in result.output  # the lists' own order
    assert "the lists' own order" not in result.output  # no warning: not worse than it
    assert json.loads(weights.read_text())["features"]["rank"] == 1.0
    result = run(["rescore", "--nbest", scored["dev_other"], "--weights", weights, "--out",
                  tmp_path / "rescored"])  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "%WER 3.61 [ 1840 / 50948, 160 ins, 155 del, 1525 sub ] first pass" in result.output
    rescored = [line for line in result.output.splitlines() if line.endswith(" rescored")]
    assert len(rescored) == 1 and int(rescored[0].split()[3]) <= 1890, result.output  # 3.71 %
    # the model alone, as before: far worse than the order, and said so
    result = run(["tune", "--nbest", scored["dev_clean"], "--features", "3gram,3gram_oov",
                  "--out", tmp_path / "w_lm.json"], quiet=False)  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "more than the 925 of the lists' own order" in result.output
