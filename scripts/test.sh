#!/usr/bin/env bash
# Set up (idempotent) and run the test suite. Extra arguments go to pytest, e.g.
#   bash scripts/test.sh -m slow        # the slow set (real data at full size)
#   bash scripts/test.sh -m "slow or not slow"   # everything
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bash "$ROOT/scripts/setup.sh"
cd "$ROOT"
exec "$ROOT/.venv/bin/python" -m pytest "$@"
