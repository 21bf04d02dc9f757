"""The public API as a type checker sees it: real types for every documented name, no ``Any``.

``rescorer`` loads its names on first use (``__getattr__``), which a type checker cannot follow;
the ``TYPE_CHECKING`` imports in ``rescorer/__init__.py`` give them their types, and
``rescorer/py.typed`` tells checkers to read them. A user script that uses each name is checked
with mypy, as a user's CI would.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import rescorer
from tests.paths import REPO

pytest.importorskip("mypy", reason="mypy is in the dev extra")


def test_every_documented_name_has_a_real_type(tmp_path: Path) -> None:
    names = sorted(rescorer.__all__)
    script = tmp_path / "user.py"
    script.write_text(
        "import rescorer\n"
        + "".join(f"reveal_type(rescorer.{name})\n" for name in names)
        + "from rescorer import read_nbest, load_lm, tune_weights\n"
        + "reveal_type(read_nbest('dev'))\n"
        + "reveal_type(load_lm('kenlm:4gram.bin'))\n"
        + "reveal_type(tune_weights)\n"
    )
    env = {**os.environ, "MYPYPATH": str(REPO)}  # an editable install's finder is not followed
    proc = subprocess.run(
        [sys.executable, "-m", "mypy", "--follow-imports=silent", "--no-error-summary",
         "--cache-dir", str(tmp_path / "cache"), str(script)],
        capture_output=True, text=True, env=env, cwd=tmp_path,
    )  # fmt: skip
    revealed = re.findall(r'user\.py:(\d+): note: Revealed type is "(.*)"', proc.stdout)
    assert len(revealed) == len(names) + 3, proc.stdout + proc.stderr
    by_line = {int(line): kind for line, kind in revealed}
    for i, name in enumerate(names, start=2):
        assert by_line[i] != "Any", f"rescorer.{name} is Any to mypy"
    assert by_line[len(names) + 3] == "rescorer.nbest.NBest"
    assert by_line[len(names) + 4] == "rescorer.lms.contract.LanguageModel"
    assert by_line[len(names) + 5].endswith("-> rescorer.tune.TuneResult")


def test_type_checking_imports_cover_the_api() -> None:
    """Each name of the lazy table is imported for type checkers from the module it loads from."""
    source = (REPO / "rescorer" / "__init__.py").read_text()
    block = source.split("if TYPE_CHECKING:", 1)[1].split("\n\n", 1)[0]
    seen = {}
    for module, names in re.findall(r"from (\S+) import ([^\n]+)", block):
        for item in names.split(","):
            original, _, alias = item.strip().partition(" as ")
            seen[alias or original] = f"{module}:{original}" if alias else module
    table = {name: where if ":" in where else where for name, where in rescorer._API.items()}
    assert seen == table
    assert set(rescorer.__all__) == {*rescorer._API, "__version__"}  # a literal list, for linters
    assert (REPO / "rescorer" / "py.typed").is_file()
