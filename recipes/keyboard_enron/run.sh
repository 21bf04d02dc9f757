#!/usr/bin/env bash
# Keyboard next-word prediction on the Enron Mobile email sentences.
#
# Trains a KenLM 3-gram and 4-gram and a small word LSTM on conversational and general text
# (NPS Chat posts, Switchboard turns, the Brown corpus), normalised like the test sentences,
# then simulates typing the Enron Mobile `mobile_nvp.txt` sentences letter by letter with
# 1, 3 and 5 suggestions: each model alone (the LSTM also as an ONNX step model in ONNX Runtime)
# and the 4-gram + LSTM interpolated (linear with EM weights from held-out training text, and
# log-linear). Writes the results table to exp/RESULTS.md; with --publish stage 6 also merges it
# into the committed RESULTS.md beside this script (recipes/common/publish.py: the rows it ran
# replace theirs, the others stay) and copies its table into README.md. Each stage skips work
# whose output already exists; delete exp/ to start over.
#
#   bash recipes/keyboard_enron/run.sh [--stage N] [--stop-stage N] [--publish]
#
# Settings (environment): RESCORER_DATA (data folder, default ../shared/data beside the repo),
# TEST (test sentences, default mobile_nvp.txt of the Enron Mobile set), LIMIT (type only the
# first N test sentences; default all), VOCAB_SIZE (prediction vocabulary, 20000), MEMORY (lmplz
# sort memory, 1G), DEVICE (torch device for the LSTM, cpu).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
DATA=${RESCORER_DATA:-$ROOT/../shared/data}
EXP=${EXP:-$HERE/exp}
TEST=${TEST:-$DATA/keyboard/enronmobile/mobile_nvp.txt}
LIMIT=${LIMIT:-}
VOCAB_SIZE=${VOCAB_SIZE:-20000}
MEMORY=${MEMORY:-1G}
DEVICE=${DEVICE:-cpu}
source "$ROOT/recipes/stages.sh" "$@"  # --stage/--stop-stage/--publish, run_stage, log, timed, publish

PY=$ROOT/.venv/bin/python
RESCORER=$ROOT/.venv/bin/rescorer

if run_stage 0; then
  log "stage 0: set-up"
  bash "$ROOT/scripts/setup.sh"
  [ -f "$TEST" ] || { log "no test sentences at $TEST (set RESCORER_DATA or TEST)"; exit 1; }
fi

if run_stage 1 && [ ! -s "$EXP/data/vocab.txt" ]; then
  log "stage 1: training text from NPS Chat, Switchboard and Brown"
  timed prepare "$PY" "$HERE/local/prepare.py" "$DATA" "$EXP/data" --vocab-size "$VOCAB_SIZE"
fi

if run_stage 2; then
  for order in 3 4; do
    lm=$EXP/lm/${order}gram.bin
    [ -s "$lm" ] && continue
    log "stage 2: building the ${order}-gram"
    timed "ngram_$order" "$RESCORER" -q ngram build --text "$EXP/data/train.txt" \
      --order "$order" --memory "$MEMORY" --binary-type probing --out "$lm"
  done
fi

if run_stage 3 && [ ! -s "$EXP/lstm/best/model.safetensors" ]; then
  log "stage 3: training the word LSTM (conf/lstm.json)"
  timed lstm "$RESCORER" -q train "$HERE/conf/lstm.json" --data-dir "$EXP/data" --out "$EXP/lstm"
fi

if run_stage 4 && [ ! -s "$EXP/mix/weights.txt" ]; then
  log "stage 4: interpolation weights of 4-gram and LSTM by EM on held-out text"
  timed mix_weights "$PY" "$HERE/local/mix_weights.py" --ngram "$EXP/lm/4gram.bin" \
    --lstm "$EXP/lstm/best" --dev "$EXP/data/dev.txt" --vocab "$EXP/data/vocab.txt" \
    --device "$DEVICE" --out "$EXP/mix"
fi

if run_stage 4 && [ ! -s "$EXP/onnx/lstm.onnx" ]; then
  log "stage 4: exporting the LSTM as an ONNX step model"
  timed export_onnx "$RESCORER" -q export "$EXP/lstm/best" "$EXP/onnx/lstm.onnx" --kind step
fi

# system name | models and mixing options
SYSTEMS=(
  "3gram|--lm 3gram=kenlm:$EXP/lm/3gram.bin"
  "4gram|--lm 4gram=kenlm:$EXP/lm/4gram.bin"
  "lstm|--lm lstm=torch:$EXP/lstm/best"
  "lstm_onnx|--lm lstm=onnx:$EXP/onnx/lstm.onnx"
  "4gram_lstm_linear|--lm 4gram=kenlm:$EXP/lm/4gram.bin --lm lstm=torch:$EXP/lstm/best --mix linear"
  "4gram_lstm_loglinear|--lm 4gram=kenlm:$EXP/lm/4gram.bin --lm lstm=torch:$EXP/lstm/best --mix loglinear"
)

if run_stage 5; then
  mkdir -p "$EXP/eval"
  limit_args=()
  [ -n "$LIMIT" ] && limit_args=(--limit "$LIMIT")
  for sys in "${SYSTEMS[@]}"; do
    IFS='|' read -r name models <<< "$sys"
    out=$EXP/eval/$name
    [ -s "$out.json" ] && continue
    weight_args=()
    case "$name" in *_linear|*_loglinear) weight_args=(--weights "$(cat "$EXP/mix/weights.txt")") ;; esac
    log "stage 5: typing $(basename "$TEST") with $name"
    # --final-space: RESULTS.md was measured with a space counted after each sentence's last
    # word (keyboard-eval's default before it became "no final space"); kept so a rerun
    # reproduces the committed tables.
    # shellcheck disable=SC2086  # $models holds several options
    timed "eval_$name" "$RESCORER" -q keyboard-eval $models "${weight_args[@]}" \
      --vocab "$EXP/data/vocab.txt" --device "$DEVICE" --text "$TEST" "${limit_args[@]}" \
      -k 1,3,5 --accuracy 1,3 --final-space --per-sentence "$out.jsonl" --report "$out.json" \
      | tee "$out.log"
  done
fi

if run_stage 6; then
  log "stage 6: results table"
  "$PY" "$HERE/local/results.py" --exp "$EXP" --test "$TEST" --out "$EXP/RESULTS.md" \
    --command "bash recipes/keyboard_enron/run.sh" \
    --settings "TEST=$(basename "$TEST") LIMIT=${LIMIT:-all} VOCAB_SIZE=$VOCAB_SIZE DEVICE=$DEVICE"
  publish "$EXP/RESULTS.md" "$HERE/RESULTS.md" --readme "$HERE/README.md"
fi
