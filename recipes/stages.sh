# Sourced by the recipes' run.sh once HERE (the recipe folder) and EXP are set:
#
#   source "$ROOT/recipes/stages.sh" "$@"
#
# Parses --stage N / --stop-stage N / --publish (anything else: exit 2; a recipe that sets
# PASS_THROUGH=1 first gets the rest in the array ARGS, for its own driver), creates $EXP and
# defines
#   run_stage N         true when stage N is within [--stage, --stop-stage]
#   log MSG...          "[recipe HH:MM:SS] MSG" on stderr
#   timed NAME CMD...   run CMD and add its wall time (s) to $EXP/times.tsv
#   PUBLISH             1 with --publish, else 0
#   publish PAGE TARGET [--readme README] [--copy FILE...]
#                       with --publish: merge the run's results page PAGE (under $EXP) into the
#                       committed page TARGET, row by row (recipes/common/publish.py: rows the
#                       run made replace theirs, the others stay), put FILEs beside it and copy
#                       README's marked results table from it; without, say where the run's
#                       page is and change nothing.
# A run writes under $EXP only: the committed results pages change by --publish alone.
stage=0
stop_stage=100
PUBLISH=0
ARGS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --stage) stage=$2; shift 2 ;;
    --stop-stage) stop_stage=$2; shift 2 ;;
    --publish) PUBLISH=1; shift ;;
    *)
      [ "${PASS_THROUGH:-0}" = 1 ] || { echo "unknown argument: $1" >&2; exit 2; }
      ARGS+=("$1"); shift ;;
  esac
done
RECIPE=$(basename "$HERE")
mkdir -p "$EXP"
log() { echo "[$RECIPE $(date +%H:%M:%S)] $*" >&2; }
timed() {
  local name=$1; shift
  local t0=$SECONDS
  "$@"
  printf '%s\t%s\n' "$name" "$((SECONDS - t0))" >> "$EXP/times.tsv"
}
run_stage() { [ "$1" -ge "$stage" ] && [ "$1" -le "$stop_stage" ]; }
publish() {
  if [ "$PUBLISH" = 1 ]; then
    "$ROOT/.venv/bin/python" "$ROOT/recipes/common/publish.py" "$@"
  else
    log "results in $1 (the committed $(realpath --relative-to="$ROOT" "$2") is left as it is; --publish merges them into it)"
  fi
}
