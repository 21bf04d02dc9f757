#!/usr/bin/env bash
# Trains the four LSTM modes (3 seeds each) and writes RESULTS.md and its plots under exp/;
# finished runs are skipped (each leaves a record: exp/runs/ for this checkout's runs, runs/ for
# the committed ones; delete it and its exp/ folder to train that run again). --publish copies
# the records into runs/ and writes RESULTS.md, the plots and README.md's table here, from every
# record (a run with fewer runs deletes none).
#   bash recipes/agnews_topic/run.sh [--publish] [--seeds 0 1 ...] [--modes factor ...]
# Settings: conf/recipe.json; bigger models there for GPU users. `--seeds 2` adds one seed.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
EXP=$HERE/exp
PASS_THROUGH=1  # --seeds, --modes, --data-dir: recipes/common/context_lm.py's
source "$ROOT/recipes/stages.sh" "$@"  # --publish (--stage/--stop-stage: all is one stage here)
bash "$ROOT/scripts/setup.sh"
publish_args=()
[ "$PUBLISH" = 1 ] && publish_args=(--publish)
exec "$ROOT/.venv/bin/python" "$ROOT/recipes/common/context_lm.py" "$HERE" "${ARGS[@]}" \
  "${publish_args[@]}"
