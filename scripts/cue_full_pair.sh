#!/usr/bin/env bash
# Train CUE's converged_cpu_full configuration on the two cores: two processes, each given a
# comma-separated list of runs (`--only`); by default one trains t3_none and t3_meta, the other
# t3_prev and t3_both. Each stage resumes from its last finished epoch, so run this again after a
# kill. Each process rebuilds the results tables when its runs are done; the one that finishes
# last writes the complete table; then the cache analysis of the kept models and the tables again.
#   bash scripts/cue_full_pair.sh [RUNS_A RUNS_B]   # logs in recipes/cue_brown/exp/converged_cpu_full/
#   bash scripts/cue_full_pair.sh t3_none_seed1,t3_none_seed2 t3_prev_seed1,t3_prev_seed2
# The tables go to $EXP/RESULTS.md (RESULTS_DIR: elsewhere); with PUBLISH=1 they are then merged
# into the committed page docs/experiments/cue_brown_converged_cpu_full/index.md (PUBLISH_TO:
# another; recipes/common/publish.py: the rows run replace theirs, the others stay).
# Another configuration: CONF=... EXP=... PUBLISH_TO=... (e.g. conf/converged_cpu_novels.json and
# docs/experiments/cue_brown_converged_cpu_novels/index.md).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
DATA=${RESCORER_DATA:-$(pwd)/../shared/data}
C=${CONF:-recipes/cue_brown/conf/converged_cpu_full.json}
E=${EXP:-recipes/cue_brown/exp/converged_cpu_full}
R=${RESULTS_DIR:-$E}
P=${PUBLISH_TO:-docs/experiments/cue_brown_converged_cpu_full/index.md}
[ -s "$E/data/stats.json" ] || { echo "prepare $E first (run.sh stages 1-3 with CONF=$C EXP=$E)" >&2; exit 2; }
one() {
  nice -n 5 .venv/bin/python recipes/cue_brown/local/cue_brown.py experiments "$C" "$E" "$DATA" --only "$1"
  .venv/bin/python recipes/cue_brown/local/results.py tables "$E" "$R" --conf "$C"
}
mkdir -p "$R"
one "${1:-t3_none,t3_meta}" >> "$E/run_a.log" 2>&1 &
one "${2:-t3_prev,t3_both}" >> "$E/run_b.log" 2>&1 &
wait
# The cache analysis of every kept Table 3 model, then the tables with it.
{
  nice -n 5 .venv/bin/python recipes/cue_brown/local/cue_brown.py cache "$C" "$E" "$DATA"
  .venv/bin/python recipes/cue_brown/local/results.py tables "$E" "$R" --conf "$C"
} >> "$E/run_a.log" 2>&1
if [ "${PUBLISH:-0}" = 1 ]; then
  plots=()
  for png in "$R"/proxy_noise.png "$R"/training_curves.png; do [ -s "$png" ] && plots+=("$png"); done
  .venv/bin/python recipes/common/publish.py "$R/RESULTS.md" "$P" --copy "${plots[@]}"
else
  echo "results in $R/RESULTS.md ($P is left as it is; PUBLISH=1 merges them into it)"
fi
