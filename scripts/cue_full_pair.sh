#!/usr/bin/env bash
# Train CUE's converged_cpu_full configuration on the two cores. One process trains t3_none and
# t3_meta, the other t3_prev and t3_both (`--only`). Each stage resumes from its last finished
# epoch, so run this again after a kill. Each process rebuilds the results tables when its runs
# are done; the one that finishes last writes the complete table.
#   bash scripts/cue_full_pair.sh        # logs in recipes/cue_brown/exp/converged_cpu_full/
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
DATA=${RESCORER_DATA:-$(pwd)/../shared/data}
C=recipes/cue_brown/conf/converged_cpu_full.json
E=recipes/cue_brown/exp/converged_cpu_full
[ -s "$E/data/stats.json" ] || { echo "prepare $E first (run.sh stages 1-3 with CONF=$C EXP=$E)" >&2; exit 2; }
one() {
  nice -n 5 .venv/bin/python recipes/cue_brown/local/cue_brown.py experiments "$C" "$E" "$DATA" --only "$1"
  .venv/bin/python recipes/cue_brown/local/results.py tables "$E" recipes/cue_brown/converged_cpu_full --conf "$C"
}
mkdir -p recipes/cue_brown/converged_cpu_full
one t3_none,t3_meta >> "$E/run_a.log" 2>&1 &
one t3_prev,t3_both >> "$E/run_b.log" 2>&1 &
wait
