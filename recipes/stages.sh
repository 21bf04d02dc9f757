# Sourced by the recipes' run.sh once HERE (the recipe folder) and EXP are set:
#
#   source "$ROOT/recipes/stages.sh" "$@"
#
# Parses --stage N / --stop-stage N (anything else: exit 2), creates $EXP and defines
#   run_stage N         true when stage N is within [--stage, --stop-stage]
#   log MSG...          "[recipe HH:MM:SS] MSG" on stderr
#   timed NAME CMD...   run CMD and add its wall time (s) to $EXP/times.tsv
stage=0
stop_stage=100
while [ $# -gt 0 ]; do
  case "$1" in
    --stage) stage=$2; shift 2 ;;
    --stop-stage) stop_stage=$2; shift 2 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
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
