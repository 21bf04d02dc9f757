#!/usr/bin/env bash
# Trains the four LSTM modes (3 seeds each) and writes RESULTS.md; finished runs are skipped
# (each leaves a record in runs/, committed; delete it and exp/ to train that run again).
# Settings: recipe.json; bigger models there for GPU users. `--seeds 2` adds one seed.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
bash "$ROOT/scripts/setup.sh"
exec "$ROOT/.venv/bin/python" "$ROOT/recipes/common/context_lm.py" "$HERE" "$@"
