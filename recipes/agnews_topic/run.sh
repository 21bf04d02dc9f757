#!/usr/bin/env bash
# Trains the four LSTM modes (3 seeds each) and writes RESULTS.md; finished runs are skipped
# (delete exp/ to start over). Settings: recipe.json; bigger models there for GPU users.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
bash "$ROOT/scripts/setup.sh"
exec "$ROOT/.venv/bin/python" "$ROOT/recipes/common/context_lm.py" "$HERE" "$@"
