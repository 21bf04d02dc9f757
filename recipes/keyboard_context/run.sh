#!/usr/bin/env bash
# Keyboard next-word prediction with a context: does knowing the news topic (AG News), the
# DBpedia class, the Brown genre or the previous sentences of the document save keystrokes?
#
# Per corpus (CORPORA): splits the documents 80/10/10 (stratified by label, seed 0), builds a
# KenLM 4-gram and trains LSTMs of one size (Unadapted, SoftmaxBias, ConcatCell, FactorCell; a
# `previous` corpus: Unadapted and FactorCell with the previous sentences as a text context) on
# the training documents, then types the test sentences letter by letter with 1, 3 and 5
# suggestions (keyboard-eval): each context model with its context given and, as the control,
# withheld (no --context: the model's expected context, the mean over training values), the
# 4-gram alone, for a `previous` corpus each LSTM with a unigram cache of the previous sentences
# (cache:, lambda tuned on dev), and the best context system linearly interpolated with the
# 4-gram (EM weights on the dev documents, with their context); the best context model exported to ONNX per context
# value (folded in) against torch. Paired tests by sentence (keyboard-compare), the KS
# gain by context value, and exp/RESULTS.md; --publish merges that into RESULTS.md here.
# Each step skips work whose output exists (training resumes from its last epoch); delete
# exp/ (or exp/<corpus>/) to start over.
#
#   bash recipes/keyboard_context/run.sh [--stage N] [--stop-stage N] [--publish]
#
# Stages: 0 set-up, 1 data, 2 4-gram, 3 LSTMs, 4 interpolation weights, 5 keyboard-eval,
# 6 paired tests, gains by value and plot, 7 RESULTS.md (--publish: into the committed page).
# Settings (environment): RESCORER_DATA (data folder, default ../shared/data beside the repo),
# CORPORA (default "agnews dbpedia agnews_prev"; also brown, brown_prev), CONF (folder of the
# per-corpus training configs, default conf/; conf/gpu/ holds bigger ones for a GPU),
# LIMIT (type only the first N test sentences of each corpus, a random sample; default 400,
# "all" for every one), DEVICE (torch device, cpu), MEMORY (lmplz sort memory, 1G),
# EXP (output folder, default exp/ here), MAX_DOCS (read only the first N documents of each
# corpus; tests).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
DATA=${RESCORER_DATA:-$ROOT/../shared/data}
EXP=${EXP:-$HERE/exp}
CORPORA=${CORPORA:-agnews dbpedia agnews_prev}
CONF=${CONF:-$HERE/conf}
LIMIT=${LIMIT:-400}
DEVICE=${DEVICE:-cpu}
MEMORY=${MEMORY:-1G}
MAX_DOCS=${MAX_DOCS:-0}
source "$ROOT/recipes/stages.sh" "$@"  # --stage/--stop-stage/--publish, run_stage, log, timed, publish

PY=$ROOT/.venv/bin/python
RESCORER=$ROOT/.venv/bin/rescorer
LABELS_unadapted=Unadapted LABELS_softmax_bias=SoftmaxBias LABELS_concat=ConcatCell \
  LABELS_factor=FactorCell

modes_of() {  # the LSTM modes trained on a corpus
  case "$1" in
    *_prev) echo "unadapted factor" ;;
    *) echo "unadapted softmax_bias concat factor" ;;
  esac
}

if run_stage 0; then
  log "stage 0: set-up"
  bash "$ROOT/scripts/setup.sh"
fi

for corpus in $CORPORA; do
  E=$EXP/$corpus
  D=$E/data
  mkdir -p "$E"

  if run_stage 1 && [ ! -s "$D/stats.json" ]; then
    log "stage 1: $corpus data"
    timed "${corpus}_prepare" "$PY" "$HERE/local/prepare.py" "$DATA" "$D" --corpus "$corpus" \
      --max-docs "$MAX_DOCS"
  fi

  if run_stage 2 && [ ! -s "$E/4gram.bin" ]; then
    log "stage 2: $corpus 4-gram"
    timed "${corpus}_4gram" "$RESCORER" -q ngram build --text "$D/train.txt" --order 4 \
      --memory "$MEMORY" --binary-type probing --out "$E/4gram.bin"
  fi

  if run_stage 3; then
    for mode in $(modes_of "$corpus"); do
      [ -s "$E/$mode/best/model.safetensors" ] && [ -s "$E/$mode/done" ] && continue
      log "stage 3: $corpus LSTM, $mode ($CONF/$corpus.json)"
      "$PY" -c 'import json, sys; c = json.load(open(sys.argv[1])); c["model"]["mode"] = sys.argv[2]
c["train"]["device"] = sys.argv[3]; json.dump(c, open(sys.argv[4], "w"), indent=2)' \
        "$CONF/$corpus.json" "$mode" "$DEVICE" "$E/$mode.json"
      timed "${corpus}_train_$mode" "$RESCORER" -q train "$E/$mode.json" --data-dir "$D" \
        --out "$E/$mode" 2>&1 | tee "$E/$mode.log"
      echo done > "$E/$mode/done"
    done
  fi

  # the interpolated system: the best context model by dev perplexity (with its cache of the
  # previous sentences for a `previous` corpus), with the 4-gram
  if run_stage 4 && [ ! -s "$E/mix/weights.txt" ]; then
    log "stage 4: $corpus interpolation weights (4-gram + best context LSTM, EM on dev)"
    cache_args=()
    [[ "$corpus" == *_prev ]] && cache_args=(--cache "$E/cache")
    timed "${corpus}_mix" "$PY" "$HERE/local/mix_weights.py" --exp "$E" \
      --modes "$(modes_of "$corpus")" --device "$DEVICE" --out "$E/mix" "${cache_args[@]}"
  fi

  if run_stage 5; then
    mkdir -p "$E/eval"
    limit_args=()
    [ "$LIMIT" != all ] && limit_args=(--limit "$LIMIT")
    best=$(cat "$E/mix/best_mode.txt" 2>/dev/null || echo factor)
    ctx=(--context "$D/test.ctx.jsonl")
    # system name | models and options
    systems=("4gram|--lm 4gram=kenlm:$E/4gram.bin")
    for mode in $(modes_of "$corpus"); do
      systems+=("$mode|--lm $mode=torch:$E/$mode/best|ctx")
      [ "$mode" != unadapted ] && systems+=("${mode}_nocontext|--lm $mode=torch:$E/$mode/best")
      [ -s "$E/cache/$mode.json" ] && systems+=("${mode}_cache|--lm ${mode}_cache=cache:$E/cache/$mode.json|ctx")
    done
    spec=torch:$E/$best/best
    [[ "$best" == *_cache ]] && spec=cache:$E/cache/${best%_cache}.json
    systems+=("4gram_${best}|--lm 4gram=kenlm:$E/4gram.bin --lm $best=$spec --weights $(cat "$E/mix/weights.txt" 2>/dev/null)|ctx")
    for sys in "${systems[@]}"; do
      IFS='|' read -r name models withctx <<< "$sys"
      out=$E/eval/$name
      [ -s "$out.json" ] && continue
      args=()
      [ "$withctx" = ctx ] && args=("${ctx[@]}")
      log "stage 5: $corpus, typing the test sentences with $name"
      # shellcheck disable=SC2086  # $models holds several options
      timed "${corpus}_eval_$name" "$RESCORER" -q keyboard-eval $models "${args[@]}" \
        --vocab "$D/vocab.txt" --device "$DEVICE" --text "$D/test.tsv" "${limit_args[@]}" \
        -k 1,3,5 --accuracy 1,3 --per-sentence "$out.jsonl" --report "$out.json" | tee "$out.log"
    done
    # The best context model exported per context value with the context folded in
    # (`export --kind step --context FIELD=VALUE`) types as the torch model given the context: per
    # value, keyboard-eval with onnx: and with torch:, the per-sentence records compared, the
    # latencies beside. Not for a `previous` corpus: its context differs sentence by sentence.
    if [[ "$corpus" != *_prev ]] && [ ! -s "$E/onnx/summary.json" ]; then
      log "stage 5: $corpus, the $best model exported per context value (ONNX) against torch"
      timed "${corpus}_onnx" "$PY" "$HERE/local/onnx_check.py" --exp "$E" --mode "$best" \
        --device "$DEVICE" --rescorer "$RESCORER" 2> "$E/onnx.log"
    fi
  fi

  if run_stage 6; then
    log "stage 6: $corpus paired tests by sentence and KS gain by context value"
    mkdir -p "$E/compare"
    "$PY" "$HERE/local/compare.py" --exp "$E" --modes "$(modes_of "$corpus")" --pairs |
      while read -r a b; do
        [ -s "$E/eval/$a.jsonl" ] && [ -s "$E/eval/$b.jsonl" ] || continue
        "$RESCORER" keyboard-compare "$E/eval/$a.jsonl" "$E/eval/$b.jsonl" -k 1,3,5 \
          > "$E/compare/${a}_vs_${b}.txt"
      done
    "$PY" "$HERE/local/compare.py" --exp "$E" --modes "$(modes_of "$corpus")"
  fi
done

if run_stage 7; then
  log "stage 7: results table"
  # shellcheck disable=SC2086
  "$PY" "$HERE/local/results.py" --exp "$EXP" --corpora $CORPORA --out "$EXP/RESULTS.md" \
    --command "bash recipes/keyboard_context/run.sh" \
    --settings "CORPORA='$CORPORA' LIMIT=$LIMIT DEVICE=$DEVICE CONF=$(realpath --relative-to="$ROOT" "$CONF")$([ "$MAX_DOCS" != 0 ] && echo " MAX_DOCS=$MAX_DOCS")"
  copy=()
  [ -s "$EXP/ks_gain_by_value.png" ] && copy=(--copy "$EXP/ks_gain_by_value.png")
  publish "$EXP/RESULTS.md" "$HERE/RESULTS.md" --readme "$HERE/README.md" "${copy[@]}"
fi
