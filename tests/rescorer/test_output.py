"""rescorer.core.output.write_report: a report written whole or not at all."""

from __future__ import annotations

from pathlib import Path

import pytest

from rescorer.core.errors import OutputError
from rescorer.core.output import write_report


def test_write_report_replaces_the_file_and_returns_its_text(tmp_path: Path) -> None:
    out = tmp_path / "r.md"
    out.write_text("old report\n")
    text = write_report(out, ["# title", "", "| a | b |"])
    assert text == "# title\n\n| a | b |" == out.read_text()
    assert [p.name for p in tmp_path.iterdir()] == ["r.md"]  # no temporary file left


def test_write_report_under_a_file_is_refused_and_changes_nothing(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("a file\n")
    with pytest.raises(OutputError, match="a part of the path above it is a file"):
        write_report(tmp_path / "f" / "r.md", ["x"])
    assert [p.name for p in tmp_path.iterdir()] == ["f"]
    assert (tmp_path / "f").read_text() == "a file\n"
