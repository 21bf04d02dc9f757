"""Every shell and Python example in README.md and docs/ runs, and prints what the page shows.

The convention is in ``tests/docs/doc_blocks.py``. One test per page, its id the page's path
(``pytest tests/docs -k guide/rescoring``); a page with a ``<!-- docs-test: slow -->`` block is a
slow test (``-m slow``). Each skipped block is its own skipped test, ``PAGE::block N``, with the
reason its marker gives.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

from rescorer.core.data import default_data_dir
from tests.docs.doc_blocks import PageFailure, parse_page, run_page
from tests.paths import REPO

DATA_DIR = default_data_dir()


def _pages() -> list[Path]:
    pages = [REPO / "README.md"] if (REPO / "README.md").is_file() else []
    return pages + sorted((REPO / "docs").rglob("*.md"))


def _name(path: Path) -> str:
    return path.relative_to(REPO).as_posix()


PAGES = {_name(p): parse_page(p) for p in _pages()}


def _page_params() -> list:
    params = []
    for name, page in PAGES.items():
        if not any(b.runs for b in page.blocks):
            continue
        marks = [pytest.mark.slow] if page.slow else []
        params.append(pytest.param(name, id=name, marks=marks))
    return params


def _skipped_params() -> list:
    return [
        pytest.param(name, b.number, id=f"{name}::block {b.number}")
        for name, page in PAGES.items()
        for b in page.blocks
        if b.runnable and b.skip is not None
    ]


@pytest.mark.parametrize("name", _page_params())
def test_page(name: str, tmp_path: Path) -> None:
    page = PAGES[name]
    if not DATA_DIR.is_dir():
        pytest.skip(f"real data not found at {DATA_DIR} (set RESCORER_DATA); {name} reads it")
    failure = None
    try:
        run_page(page, tmp_path, name=name, repo=REPO, data_dir=DATA_DIR.resolve())
    except PageFailure as e:
        failure = str(e)
    if failure is not None:
        pytest.fail(failure, pytrace=False)


@pytest.mark.parametrize(("name", "number"), _skipped_params())
def test_skipped_block(name: str, number: int) -> None:
    b = PAGES[name].blocks[number - 1]
    pytest.skip(f"{name} block {number} (line {b.line}) not run: {b.skip}")


def test_markers_well_formed() -> None:
    """Every docs-test marker is known, sits directly above a run block, and a skip has a reason."""
    problems = [f"{name}: {p}" for name, page in PAGES.items() for p in page.problems]
    assert not problems, "\n".join(problems)


_COMMAND = re.compile(r"^\s*(\$ )?(rescorer|python3?|bash|pip|\.venv/bin/\S+)\s")


def test_commands_are_in_run_blocks() -> None:
    """A command in a fence with no language (or ``console``) would escape the test: such a block
    says ``bash`` (and, when it cannot run here, a skip marker with its reason)."""
    escaped = []
    for name, page in PAGES.items():
        for b in page.blocks:
            if b.language not in ("", "console", "shell-session"):
                continue
            commands = [line.strip() for line in b.code.splitlines() if _COMMAND.match(line)]
            if commands:
                escaped.append(f"{name}: block {b.number} (line {b.line}): {commands[0]}")
    assert not escaped, "command lines outside bash blocks:\n" + "\n".join(escaped)


# --- the harness itself catches failures ------------------------------------------------------


def _run(tmp_path: Path, text: str):
    path = tmp_path / "page.md"
    path.write_text(textwrap.dedent(text))
    page = parse_page(path)
    return page, run_page(page, tmp_path / "run", name="page.md", timeout=120)


def test_harness_runs_blocks_in_one_shell(tmp_path: Path) -> None:
    page, results = _run(
        tmp_path,
        """\
        # A page

        ```bash
        N=41
        echo "the answer is $((N + 1))" > answer.txt
        ```

        <!-- docs-test: skip needs a GPU; made by `rescorer train ...` -->
        ```bash
        exit 1
        ```

        ```python
        from pathlib import Path
        print(Path("answer.txt").read_text().strip())
        #> the answer is 42
        ```

        ```text
        not run
        ```

        ```sh
        echo "N is $N"; echo "to stderr" >&2
        printf 'a   b\\nmore text here\\n'
        #> N is   41
        #> to stderr
        #> more ... here
        ```
        """,
    )
    assert [b.number for b, _ in results] == [1, 3, 5]
    assert page.blocks[1].skip == "needs a GPU; made by `rescorer train ...`"
    assert not page.problems


def test_harness_fails_on_a_failing_command(tmp_path: Path) -> None:
    with pytest.raises(PageFailure) as e:
        _run(
            tmp_path,
            """\
            ```bash
            echo fine
            ```

            ```bash
            echo before
            false
            echo after
            ```

            ```bash
            echo never
            ```
            """,
        )
    assert e.value.block is not None and e.value.block.number == 2
    assert "failed (exit status 1)" in str(e.value) and "line 5" in str(e.value)
    assert "before" in e.value.output and "after" not in e.value.output


def test_harness_fails_on_a_wrong_number(tmp_path: Path) -> None:
    with pytest.raises(PageFailure) as e:
        _run(
            tmp_path,
            """\
            ```bash
            echo "%WER 3.61 [ 1840 / 50948 ]"
            #> %WER 3.62 [ ... ]
            ```
            """,
        )
    assert "expected output line not found" in str(e.value) and "3.62" in str(e.value)
    # a number is not matched by its prefix, and lines are found in order
    for k, expected in enumerate(("#> %WER 3.6", "#> b\n#> a")):
        (tmp_path / str(k)).mkdir()
        with pytest.raises(PageFailure):
            _run(tmp_path / str(k), f"```bash\necho '%WER 3.61'; echo a; echo b\n{expected}\n```\n")


def test_harness_fails_on_a_failing_python_block(tmp_path: Path) -> None:
    with pytest.raises(PageFailure) as e:
        _run(tmp_path, "```python\nimport sys\nprint('x')\nsys.exit(3)\n```\n")
    assert e.value.block is not None and e.value.block.language == "python"
    assert "exit status 3" in str(e.value)


def test_harness_fails_when_a_block_exits_early(tmp_path: Path) -> None:
    with pytest.raises(PageFailure):
        _run(tmp_path, "```bash\nexit 0\n```\n\n```bash\necho two\n```\n")


def test_harness_reports_bad_markers(tmp_path: Path) -> None:
    path = tmp_path / "page.md"
    path.write_text(
        "<!-- docs-test: skip -->\n```bash\ntrue\n```\n\n"
        "<!-- docs-test: skipp typo -->\n```bash\ntrue\n```\n\n"
        "<!-- docs-test: slow -->\n\n```bash\ntrue\n```\n"
    )
    problems = parse_page(path).problems
    assert len(problems) == 3, problems
    assert "without a reason" in problems[0] and "unknown" in problems[1]
    assert "not directly above" in problems[2]
