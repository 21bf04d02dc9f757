"""A recipe's run leaves the checkout as it is; its results go under exp/, and the committed
results pages change only by `run.sh --publish`, which merges the run's rows into them without
deleting the others. Run here on small prepared exp/ folders (no training): the LibriSpeech
recipe's results stage (7) and the CUE recipe's (6), against the repository's own recipe
folders and against copies of them for --publish. The layout of every recipe folder: run.sh,
conf/, local/, a README, its RESULTS.md, nothing of the experiments' history."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rescorer.combine import Weights
from tests.conftest import write_espnet_set
from tests.paths import REPO

sys.path.insert(0, str(REPO / "recipes" / "common"))
import publish  # noqa: E402

LIBRI = REPO / "recipes" / "librispeech_nbest"
CUE = REPO / "recipes" / "cue_brown"

# three utterances per set: (words, decoder, ctc, lm) per hypothesis; the reference first
UTTS = {
    "a": [("the cat sat", -1.0, -2.0, -3.0), ("the hat sat", -0.5, -2.5, -3.5)],
    "b": [("a dog ran off", -2.0, -1.0, -2.0), ("a dog ran of", -1.5, -1.5, -2.5)],
    "c": [("it is here", -1.0, -1.0, -1.0), ("it's here", -0.9, -1.2, -1.5)],
}
SYSTEMS = {  # the rows of this tiny run: folder -> its 1-best hypothesis index per utterance
    "2_first_pass": {"a": 1, "b": 1, "c": 0},
    "3_4gram": {"a": 0, "b": 1, "c": 0},
    "4_all": {"a": 0, "b": 0, "c": 0},
}


def digests(*paths: Path) -> list[str]:
    return [hashlib.sha256(p.read_bytes()).hexdigest() for p in paths]


def tiny_librispeech(tmp_path: Path) -> tuple[Path, Path]:
    """A data folder with two 3-utterance ESPnet sets and an exp/ with rows 2, 3 and 4
    tuned and rescored (weights, 1-best), the books and a stand-in 4-gram."""
    data = tmp_path / "data"
    for name in ("dev_clean", "dev_other"):
        folder = data / "nbest" / "librispeech-espnet" / name
        write_espnet_set(folder, [(utt_id(name, u), hyps) for u, hyps in UTTS.items()])
        (folder / "references").mkdir()
        (folder / "references" / "ref_wer.trn").write_text(  # "(SPEAKER-CHAPTER-UTT)"
            "".join(
                f"{h[0][0]}\t({utt_id(name, u)[:5]}-{utt_id(name, u)})\n" for u, h in UTTS.items()
            )
        )
    exp = tmp_path / "exp"
    (exp / "lm").mkdir(parents=True)
    (exp / "lm" / "books.txt").write_text("THE CAT SAT\nA DOG RAN\n")
    (exp / "lm" / "4gram.bin").write_bytes(b"\0" * 1024)
    for folder, pick in SYSTEMS.items():
        feats = {"decoder": 1.0, "ctc": 0.5} | ({"4gram": 0.3} if folder != "2_first_pass" else {})
        Weights(feats, 0.0, meta={"method": "risk", "initial_errors": 3, "dev_errors": 2}).save(
            exp / folder / "weights.json"
        )
        for name in ("dev_clean", "dev_other"):
            (exp / folder / name).mkdir(parents=True)
            (exp / folder / name / "1best.txt").write_text(
                "".join(f"{utt_id(name, u)} {UTTS[u][k][0]}\n" for u, k in pick.items())
            )
    return data, exp


def utt_id(name: str, u: str) -> str:
    """LibriSpeech's SPEAKER-CHAPTER-INDEX, one speaker per set."""
    return f"{10 if name == 'dev_clean' else 11}-20-000{'abc'.index(u)}"


def run(script: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    done = subprocess.run(
        ["bash", str(script), *args],
        env={**os.environ, "OMP_NUM_THREADS": "1", **env},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def copy_recipe(src: Path, root: Path) -> Path:
    """``src`` (a recipe folder) with recipes/stages.sh and recipes/common/ under ``root``, and
    the repository's .venv linked in: a checkout to publish into."""
    (root / "recipes").mkdir(parents=True)
    shutil.copy(REPO / "recipes" / "stages.sh", root / "recipes" / "stages.sh")
    shutil.copytree(REPO / "recipes" / "common", root / "recipes" / "common")
    dst = root / "recipes" / src.name
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("exp", "__pycache__"))
    (root / ".venv").symlink_to(REPO / ".venv")
    return dst


def table_rows(text: str, header: str) -> dict[str, str]:
    section = text.split(header, 1)[1]
    rows = {}
    for line in section.splitlines()[2:]:
        if not line.startswith("|"):
            break
        rows[line.split("|")[1].strip()] = line
    return rows


def test_librispeech_results_stage_leaves_the_committed_pages_alone(tmp_path):
    data, exp = tiny_librispeech(tmp_path)
    committed = [LIBRI / "RESULTS.md", LIBRI / "README.md"]
    before = digests(*committed)
    done = run(LIBRI / "run.sh", "--stage", "7", RESCORER_DATA=str(data), EXP=str(exp))
    assert digests(*committed) == before
    text = (exp / "RESULTS.md").read_text()
    assert list(table_rows(text, "| # | system |")) == ["1", "2", "3", "4", "5"]
    assert "--publish merges them into it" in done.stderr


def test_librispeech_publish_merges_rows_and_keeps_the_others(tmp_path):
    data, exp = tiny_librispeech(tmp_path)
    recipe = copy_recipe(LIBRI, tmp_path / "checkout")
    old = (recipe / "RESULTS.md").read_text()
    old_readme = (recipe / "README.md").read_text()
    run(recipe / "run.sh", "--stage", "7", "--publish", RESCORER_DATA=str(data), EXP=str(exp))
    new = (recipe / "RESULTS.md").read_text()
    run_rows = table_rows((exp / "RESULTS.md").read_text(), "| # | system |")
    old_rows = table_rows(old, "| # | system |")
    rows = table_rows(new, "| # | system |")
    # the run's rows replace theirs; every committed row is still there, unchanged
    assert set(rows) == set(old_rows)
    for key, line in rows.items():
        assert line == (run_rows[key] if key in run_rows else old_rows[key]), key
    assert rows["2"] != old_rows["2"]  # the tiny run's WER, not the committed one
    kept = [k for k in old_rows if k not in run_rows]
    assert f"{publish.KEPT}: {', '.join(kept)}." in new
    weights = table_rows(new, "| # | weights |")
    assert set(weights) == set(table_rows(old, "| # | weights |"))
    assert "4gram +0.3" in weights["3"]
    for pair in ("### row 3L vs row 3\n", "### row 4K2 vs row 4K\n", "### row 3 vs row 2\n"):
        assert pair in new, pair
    # the README: the merged table copied between its markers, nothing else changed
    readme = (recipe / "README.md").read_text()
    assert table_rows(readme, "| # | system |") == rows
    outside = old_readme.split("<!-- results table")[0], old_readme.split(publish.TABLE_END)[1]
    assert readme.startswith(outside[0]) and readme.endswith(outside[1])
    # the same run published again changes nothing
    run(recipe / "run.sh", "--stage", "7", "--publish", RESCORER_DATA=str(data), EXP=str(exp))
    again = (recipe / "RESULTS.md").read_text()
    assert again.split("- Date:")[0] == new.split("- Date:")[0]
    assert again.split("- Wall time")[1] == new.split("- Wall time")[1]


@pytest.fixture()
def cue_exp(tmp_path):
    from tests.recipes.test_cue_brown_results import make_exp

    runs = {"t3_none": 1000.0, "t3_prev": 900.0, "t3_meta": 990.0}
    return make_exp(tmp_path / "made", runs)


def test_cue_results_stage_leaves_the_committed_pages_alone(tmp_path, cue_exp):
    exp, conf = cue_exp
    committed = [CUE / n for n in ("RESULTS.md", "README.md", "proxy_noise.png")]
    committed.append(CUE / "training_curves.png")
    before = digests(*committed)
    run(CUE / "run.sh", "--stage", "6", EXP=str(exp), CONF=str(conf))
    assert digests(*committed) == before
    assert (exp / "RESULTS.md").exists() and (exp / "training_curves.png").exists()


def test_cue_publish_merges_the_tables_rows(tmp_path, cue_exp):
    exp, conf = cue_exp
    recipe = copy_recipe(CUE, tmp_path / "checkout")
    old = (recipe / "RESULTS.md").read_text()
    run(recipe / "run.sh", "--stage", "6", "--publish", EXP=str(exp), CONF=str(conf))
    new = (recipe / "RESULTS.md").read_text()
    header = "| contextual features |"
    old_rows, rows = table_rows(old, header), table_rows(new, header)
    assert set(old_rows) <= set(rows)
    assert rows["+ previous sentence"].split("|")[2].strip() == "900.0"
    assert (recipe / "training_curves.png").read_bytes() == (
        exp / "training_curves.png"
    ).read_bytes()
    readme = (recipe / "README.md").read_text()
    assert "| + previous sentence | 900.0 |" in readme


RECIPE_FILES = {"run.sh", "README.md", "RESULTS.md"}
RECIPE_FOLDERS = {"conf", "local", "runs"}  # runs/: the committed run records of a table


def test_recipe_folders_hold_the_recipe_not_its_history():
    """Each recipe folder is run.sh, conf/, local/, a README and its RESULTS.md (with the
    plots it shows and, for the context-LM recipes, the run records it is built from); the
    experiments' histories are pages of docs/experiments/."""
    tracked = subprocess.run(
        ["git", "ls-files", "recipes"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.split()
    for path in tracked:
        parts = Path(path).parts
        if len(parts) < 3 or parts[1] == "common" or not (REPO / path).exists():
            continue
        top = parts[2]
        if len(parts) == 3:
            assert top in RECIPE_FILES or top.endswith(".png"), path
        else:
            assert top in RECIPE_FOLDERS, path
    for recipe in sorted(p.parent for p in (REPO / "recipes").glob("*/run.sh")):
        readme = (recipe / "README.md").read_text()
        assert len(readme.splitlines()) <= 200, f"{recipe.name}/README.md: a recipe, not a log"
        if (recipe / "RESULTS.md").exists():
            assert "<!-- results table:" in readme, f"{recipe.name}/README.md: no results table"
