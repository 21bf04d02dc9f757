#!/usr/bin/env bash
# GPU lease kit, the device side (see README.md here). Runs in the repository root of the
# device's copy of the working tree; .lease/ (ignored by git) holds what the lease needs and
# makes, and survives between back-to-back calls while the machine stays warm.
#
#   bash scripts/lease/device.sh start SECONDS NAME=CONF[@INIT] [NAME=CONF[@INIT] ...]
#       train each CONF (an LSTM config) in the background, detached, as .lease/exp/NAME,
#       with train.max_seconds = SECONDS (no epoch starts after it; the last one is saved);
#       a NAME started again on a warm machine resumes from its last epoch, its log appended;
#       @INIT: a new run starts from that checkpoint's weights (`rescorer train --init`);
#       a CONF whose data.path is NAME_reversed.txt gets NAME.txt with each line's words
#       reversed (a backward model's text, made here once)
#   bash scripts/lease/device.sh wait SECONDS   until every job has ended or SECONDS passed
#   bash scripts/lease/device.sh status         each job's last log lines and the GPU
#   bash scripts/lease/device.sh pack NAME...   best/ of each job in fp16, cut into parts
#   bash scripts/lease/device.sh send           the next parts into $OUT (8 files, 60 MiB)
#
# Environment: PY (python, default python3), LEASE_SMOKE=1 (a tiny model and a few steps of
# each config: to try the kit on a CPU), OMP_NUM_THREADS per job (default 4), EPOCHS (start:
# at most this many epochs, in place of the config's).
set -euo pipefail
PY=${PY:-python3}
L=.lease
mkdir -p "$L/exp" "$L/run" "$L/packed"
stamp() { date -u +%H:%M:%S; }

unpack_data() {  # the carried text, gunzipped once
  local gz
  for gz in "$L"/carry/*.gz; do
    [ -e "$gz" ] || continue
    local txt=$L/data/$(basename "${gz%.gz}")
    mkdir -p "$L/data"
    [ -s "$txt" ] || gunzip -c "$gz" > "$txt"
  done
  for f in "$L"/carry/*; do  # everything else (tokenizer models) beside the text
    case "$f" in *.gz) ;; *) if [ -f "$f" ]; then cp -f "$f" "$L/data/"; fi ;; esac
  done
}

# reversed_text PATH: a config's data file named NAME_reversed.txt, made from NAME.txt (carried)
# with each line's words in reverse order: the text of a backward model (`reverse:`)
reversed_text() {
  local path=$L/data/$1
  [[ $1 == *_reversed.txt ]] && [ ! -s "$path" ] || return 0
  local src=${path%_reversed.txt}.txt
  [ -s "$src" ] || { echo "device.sh: $1 needs $src to reverse" >&2; exit 2; }
  awk 'NF == 0 { print; next } { for (i = NF; i > 1; i--) printf "%s ", $i; print $1 }' \
    "$src" > "$path.tmp" && mv "$path.tmp" "$path"
}

case "${1:-}" in
start)
  seconds=$2; shift 2
  unpack_data
  for job in "$@"; do
    name=${job%%=*}; conf=${job#*=}; init=
    if [[ $conf == *@* ]]; then init=${conf#*@}; conf=${conf%%@*}; fi
    data_path=$("$PY" - "$conf" "$L/run/$name.json" "$seconds" "${LEASE_SMOKE:-0}" \
      "${EPOCHS:-}" <<'PYEOF'
import json, sys
src, dst, seconds, smoke = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4] == "1"
cfg = json.load(open(src))
cfg["train"]["max_seconds"] = seconds
if sys.argv[5]:  # EPOCHS: a pair trained to the same epoch count
    if not sys.argv[5].isdigit() or int(sys.argv[5]) < 1:
        sys.exit(f"device.sh: EPOCHS must be a positive integer, got {sys.argv[5]!r}")
    cfg["train"]["epochs"] = int(sys.argv[5])
if smoke:  # the same data path and kind of model, tiny and short
    cfg["model"].update(embed_dim=16, hidden_dim=16, num_layers=1)
    if cfg["model"].get("context_dim"):
        cfg["model"]["context_dim"] = 4
    if cfg["model"].get("shortlist"):
        cfg["model"]["shortlist"] = 200
    cfg["train"].update(batch_tokens=1024, max_steps_per_epoch=3, epochs=2, device="cpu")
json.dump(cfg, open(dst, "w"), indent=1)
print(cfg["data"].get("path", ""))
PYEOF
    )
    reversed_text "$data_path"
    log=$L/exp/$name.log
    echo "$(stamp) start $name ($conf${init:+ from $init}, ${seconds}s) -> $log"
    OMP_NUM_THREADS=${OMP_NUM_THREADS:-4} setsid nohup "$PY" -m rescorer train \
      "$L/run/$name.json" --data-dir "$L/data" --out "$L/exp/$name" ${init:+--init "$init"} \
      >> "$log" 2>&1 < /dev/null &
    echo $! > "$L/exp/$name.pid"
  done
  ;;
wait)
  deadline=$(( $(date +%s) + $2 ))
  while [ "$(date +%s)" -lt "$deadline" ]; do
    alive=0
    for pid in "$L"/exp/*.pid; do
      [ -e "$pid" ] && kill -0 "$(cat "$pid")" 2>/dev/null && alive=1
    done
    [ "$alive" = 0 ] && break
    sleep 5
  done
  exec bash "$0" status
  ;;
status)
  for log in "$L"/exp/*.log; do
    [ -e "$log" ] || continue
    name=$(basename "$log" .log)
    state=ended
    kill -0 "$(cat "$L/exp/$name.pid")" 2>/dev/null && state=running
    echo "== $name ($state)"
    tr "\r" "\n" < "$log" | grep -E "INFO.*epoch [0-9]+:|^best dev|Error|Traceback" | tail -n 4 || true
  done
  command -v nvidia-smi > /dev/null && nvidia-smi --query-gpu=utilization.gpu,memory.used \
    --format=csv,noheader || true
  ;;
pack)
  shift
  for name in "$@"; do
    "$PY" scripts/lease/pack.py "$L/exp/$name" "$name" "$L/packed"
  done
  ;;
send)
  : "${OUT:?OUT is where the files go back}"
  n=0; bytes=0
  for part in "$L"/packed/*; do
    [ -e "$part" ] || continue
    [ -e "$L/packed/.sent/$(basename "$part")" ] && continue
    size=$(stat -c %s "$part")
    if [ $n -ge 8 ] || [ $((bytes + size)) -gt $((60 * 1024 * 1024)) ]; then break; fi
    cp "$part" "$OUT/"
    mkdir -p "$L/packed/.sent" && touch "$L/packed/.sent/$(basename "$part")"
    n=$((n + 1)); bytes=$((bytes + size))
  done
  left=0
  for part in "$L"/packed/*; do
    [ -e "$L/packed/.sent/$(basename "$part")" ] || left=$((left + 1))
  done
  echo "$(stamp) sent $n files ($((bytes / 1048576)) MiB); $left left to send"
  ;;
*)
  sed -n '2,18p' "$0"; exit 2
  ;;
esac
