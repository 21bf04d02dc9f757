"""Where the real test and benchmark data lives.

``$RESCORER_DATA`` when set, else ``../shared/data`` beside the repository checkout. The project
never commits these files; code that needs them takes the folder as an argument.
"""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def default_data_dir() -> Path:
    """The data folder: ``$RESCORER_DATA``, else ``<repo>/../shared/data``."""
    env = os.environ.get("RESCORER_DATA")
    if env:
        return Path(env)
    return REPO_ROOT.parent / "shared" / "data"
