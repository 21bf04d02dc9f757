"""Merging a run's results page into the committed one (recipes/common/publish.py): rows the
run made replace theirs, the others stay; README tables are copies; the CLI and the recipes'
`publish` helper (recipes/stages.sh)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.paths import REPO

sys.path.insert(0, str(REPO / "recipes" / "common"))  # as the recipes' scripts import it
import publish as pub  # noqa: E402

COMMITTED = """\
# Toy rescoring: results

- Command: `bash run.sh` (settings: LSTM=1)
- Date: 2026-01-01 00:00 UTC
- Our LSTM (rows 3L, 4L): 2 layers.
  - dev_clean: 10 of 20 steps shared

| # | system | WER % |
|---|---|---|
| 1 | first pass | 4.00 |
| 3 | + 4-gram | 3.80 |
| 3L | + LSTM | 3.70 |
| 4 | all | 3.50 |
| 4L | all + LSTM | 3.40 |
| 5 | oracle | 1.70 |

## Significance

### row 3 vs row 1

```
3 better
```

### row 3L vs row 3

```
3L better
```

## Tuned weights

| # | weights |
|---|---|
| 3 | 4gram +0.5 |
| 3L | lstm +0.3 |
| 4 | lm +1 |
| 4L | lstm +0.1 |
"""

RUN = """\
# Toy rescoring: results

- Command: `bash run.sh` (settings: LSTM=0 CUE=1)
- Date: 2026-02-02 00:00 UTC
- Our CUE model (rows 3U): one layer.

| # | system | WER % |
|---|---|---|
| 1 | first pass | 4.00 |
| 3 | + 4-gram | 3.79 |
| 3U | + CUE | 3.75 |
| 4 | all | 3.49 |
| 5 | oracle | 1.70 |

## Significance

### row 3 vs row 1

```
3 better, again
```

### row 3U vs row 3

```
3U better
```

## Tuned weights

| # | weights |
|---|---|
| 3 | 4gram +0.6 |
| 3U | cu +0.2 |
| 4 | lm +1.1 |
"""


def table_rows(text: str, header: str) -> dict[str, str]:
    section = text.split(header, 1)[1]
    rows = {}
    for line in section.splitlines()[2:]:
        if not line.startswith("|"):
            break
        rows[line.split("|")[1].strip()] = line
    return rows


def test_a_page_merged_into_itself_is_unchanged():
    assert pub.merge_pages(COMMITTED, COMMITTED)[0] == COMMITTED
    real = (REPO / "recipes" / "librispeech_nbest" / "RESULTS.md").read_text()
    assert pub.merge_pages(real, real)[0] == real


def test_rows_the_run_made_replace_theirs_and_the_others_stay():
    merged, merge = pub.merge_pages(COMMITTED, RUN)
    rows = table_rows(merged, "| # | system | WER % |")
    # every committed row is still there, the run's new one too, in the committed order
    assert list(rows) == ["1", "3", "3U", "3L", "4", "4L", "5"]
    assert rows["3"] == "| 3 | + 4-gram | 3.79 |"  # the run's
    assert rows["3L"] == "| 3L | + LSTM | 3.70 |"  # kept
    assert rows["4L"] == "| 4L | all + LSTM | 3.40 |"
    weights = table_rows(merged, "| # | weights |")
    assert weights == {
        "3": "| 3 | 4gram +0.6 |",
        "3U": "| 3U | cu +0.2 |",
        "3L": "| 3L | lstm +0.3 |",
        "4": "| 4 | lm +1.1 |",
        "4L": "| 4L | lstm +0.1 |",
    }
    # sections: the run's replace theirs, the others stay
    assert "3 better, again" in merged and "\n3 better\n" not in merged
    assert "### row 3L vs row 3\n\n```\n3L better\n```" in merged
    assert "### row 3U vs row 3" in merged
    # header lines: the run's command and date; the kept rows' model line stays, and a line
    # names the rows the run did not make
    assert "settings: LSTM=0 CUE=1" in merged and "settings: LSTM=1)" not in merged
    assert "2026-02-02" in merged and "2026-01-01" not in merged
    assert "- Our LSTM (rows 3L, 4L): 2 layers.\n  - dev_clean: 10 of 20 steps shared" in merged
    assert "- Our CUE model (rows 3U): one layer." in merged
    assert f"{pub.KEPT}: 3L, 4L.\n" in merged
    assert merged.index(pub.KEPT) < merged.index("- Date")
    assert merge.kept_rows == [["3L", "4L"], ["3L", "4L"]]
    # publishing the merged page's own rows again changes nothing but the note
    again, _ = pub.merge_pages(merged, RUN)
    assert again == merged


def test_a_full_run_replaces_every_row_and_drops_the_note():
    merged, _ = pub.merge_pages(COMMITTED, RUN)
    full = COMMITTED.replace("| 3L | + LSTM | 3.70 |", "| 3L | + LSTM | 3.60 |")
    again, merge = pub.merge_pages(merged, full)
    assert merge.kept_rows == [["3U"], ["3U"]]  # the CUE row, which this run did not make
    assert "| 3L | + LSTM | 3.60 |" in again
    assert f"{pub.KEPT}: 3U." in again


def test_rows_keyed_by_as_many_cells_as_make_them_unique():
    old = "| A | B | k | x |\n|---|---|---|---|\n| s | t | 1 | a |\n| s | t | 3 | b |\n"
    new = "| A | B | k | x |\n|---|---|---|---|\n| s | t | 3 | B |\n| s | u | 1 | C |\n"
    merged, merge = pub.merge_pages(old, new)
    rows = ["| s | t | 1 | a |", "| s | t | 3 | B |", "| s | u | 1 | C |"]
    assert merged.splitlines()[4:] == rows
    assert merge.kept_rows == [["s t 1"]]
    assert merged.startswith(f"{pub.KEPT}: s t 1.\n\n| A |")


def test_a_table_whose_columns_changed_is_refused():
    new = RUN.replace(
        "| # | system | WER % |\n|---|---|---|", "| # | system | WER % | p |\n|---|---|---|---|"
    )
    with pytest.raises(pub.PublishError, match="other columns"):
        pub.merge_pages(COMMITTED, new, "RESULTS.md")


def test_a_marked_page_merges_between_its_markers_only():
    page = (
        "# An experiment\n\nWhat it asked, and the answer.\n\n"
        "<!-- results: merged by --publish -->\n"
        + COMMITTED.split("\n", 2)[2]
        + "<!-- end of results -->\n\nA closing note.\n"
    )
    merged, _ = pub.merge_pages(page, RUN)
    head, rest = merged.split("<!-- results: merged by --publish -->\n")
    assert head == "# An experiment\n\nWhat it asked, and the answer.\n\n"
    assert rest.endswith("<!-- end of results -->\n\nA closing note.\n")
    assert "# Toy rescoring" not in merged  # the run's title is the page's own
    assert "| 3U | + CUE | 3.75 |" in merged and "| 3L | + LSTM | 3.70 |" in merged


def test_readme_tables_are_copies_of_the_page():
    readme = (
        "# Toy\n\n## Results\n\n"
        '<!-- results table: "| # | system" from RESULTS.md, copied by --publish -->\n'
        "stale\n<!-- end of results table -->\n\nMore.\n"
    )
    out = pub.copy_tables(readme, {"RESULTS.md": RUN})
    assert "stale" not in out
    table = out.split("-->\n", 1)[1].split("<!-- end")[0]
    assert table.strip() == RUN.split("\n\n")[2].strip()
    assert out.endswith("<!-- end of results table -->\n\nMore.\n")
    assert pub.copy_tables(out, {"RESULTS.md": RUN}) == out
    under = readme.replace('"| # | system"', '"| # | weights" under "Tuned weights"')
    assert "| 3U | cu +0.2 |" in pub.copy_tables(under, {"RESULTS.md": RUN})
    missing = readme.replace('"| # | system"', '"| nothing"')
    with pytest.raises(pub.PublishError, match="no table '| nothing'"):
        pub.copy_tables(missing, {"RESULTS.md": RUN})


def test_cli_merges_copies_files_and_the_readme(tmp_path):
    exp, here = tmp_path / "exp", tmp_path / "recipe"
    exp.mkdir()
    here.mkdir()
    (exp / "RESULTS.md").write_text(RUN)
    (exp / "curves.png").write_bytes(b"png")
    (here / "RESULTS.md").write_text(COMMITTED)
    readme = (
        '<!-- results table: "| # | system" from RESULTS.md -->\n<!-- end of results table -->\n'
    )
    (here / "README.md").write_text(readme)
    pub.main([str(exp / "RESULTS.md"), str(here / "RESULTS.md"), "--readme",
              str(here / "README.md"), "--copy", str(exp / "curves.png")])  # fmt: skip
    assert (here / "RESULTS.md").read_text() == pub.merge_pages(COMMITTED, RUN)[0]
    assert (here / "curves.png").read_bytes() == b"png"
    assert "| 3L | + LSTM | 3.70 |" in (here / "README.md").read_text()
    with pytest.raises(SystemExit, match="no such file"):
        pub.main([str(exp / "missing.md"), str(here / "RESULTS.md")])


def stages_script(tmp_path: Path, args: str, before: str = "") -> subprocess.CompletedProcess:
    """recipes/stages.sh sourced as a recipe's run.sh does, then its publish helper."""
    script = f"""
set -euo pipefail
HERE={tmp_path}/recipe; ROOT={REPO}; EXP={tmp_path}/exp; {before}
source "$ROOT/recipes/stages.sh" {args}
echo "PUBLISH=$PUBLISH stage=$stage ARGS=${{ARGS[*]:-}}"
publish "$EXP/RESULTS.md" "$HERE/RESULTS.md"
"""
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=os.environ)


def test_stages_parses_publish_and_publishes_only_with_it(tmp_path):
    (tmp_path / "recipe").mkdir()
    (tmp_path / "exp").mkdir()
    (tmp_path / "recipe" / "RESULTS.md").write_text(COMMITTED)
    (tmp_path / "exp" / "RESULTS.md").write_text(RUN)
    done = stages_script(tmp_path, "--stage 7")
    assert done.returncode == 0, done.stderr
    assert "PUBLISH=0 stage=7" in done.stdout
    assert "--publish merges them into it" in done.stderr
    assert (tmp_path / "recipe" / "RESULTS.md").read_text() == COMMITTED
    done = stages_script(tmp_path, "--publish --stage 7")
    assert done.returncode == 0, done.stderr
    assert "PUBLISH=1 stage=7" in done.stdout
    assert "| 3U | + CUE | 3.75 |" in (tmp_path / "recipe" / "RESULTS.md").read_text()
    done = stages_script(tmp_path, "--seeds 2")
    assert done.returncode == 2 and "unknown argument: --seeds" in done.stderr
    # a recipe with a driver of its own gets the rest of the arguments
    done = stages_script(tmp_path, "--seeds 2 --publish", before="PASS_THROUGH=1")
    assert done.returncode == 0, done.stderr
    assert "PUBLISH=1 stage=0 ARGS=--seeds 2" in done.stdout


def test_every_recipe_takes_publish_from_stages():
    for run in sorted((REPO / "recipes").glob("*/run.sh")):
        text = run.read_text()
        assert 'source "$ROOT/recipes/stages.sh" "$@"' in text, run
        assert "--publish" in text.split("set -euo pipefail")[0], f"{run}: header says nothing"


def test_the_committed_pages_are_what_publishing_them_again_gives():
    """Every results page merges into itself unchanged (an experiment page between its
    markers), and every recipe README's results table is the copy of its RESULTS.md's."""
    for page in sorted((REPO / "docs" / "experiments").rglob("*.md")):
        text = page.read_text(encoding="utf-8")
        if pub.BEGIN in text:
            region = text.split(pub.BEGIN, 1)[1].split("\n", 1)[1].split(pub.END)[0]
            assert pub.merge_pages(text, f"# A run\n\n{region}")[0] == text, page
    for recipe in sorted(p.parent for p in (REPO / "recipes").glob("*/RESULTS.md")):
        results = (recipe / "RESULTS.md").read_text(encoding="utf-8")
        assert pub.merge_pages(results, results)[0] == results, recipe.name
        readme = (recipe / "README.md").read_text(encoding="utf-8")
        assert pub.copy_tables(readme, {"RESULTS.md": results}) == readme, recipe.name
