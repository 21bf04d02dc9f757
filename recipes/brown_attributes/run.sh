#!/usr/bin/env bash
# Multiplicative attribute LBLs on the Brown corpus (Kiros, Zemel & Salakhutdinov 2014): a
# genre-gated LBL (ATD) against a plain LBL of the same size (10k vocabulary, K = F = 64, trained
# to convergence with early stopping on dev perplexity; perplexity over $SEEDS), optionally an
# ATD with genre and document attributes whose document vectors are inferred for unseen
# documents (section 2.5; $DOC_SEEDS), genre classification of held-out documents from inferred
# attribute vectors and from the paper's section 3.3 features (eqs. 8-9), conditional word
# similarity (Table 5), conditioned samples (Table 2), ONNX export; unshared vocabularies
# (section 2.4) on three UD treebanks with the language as attribute. Writes RESULTS.md and
# training_curves.png under exp/; --publish merges them into the committed RESULTS.md beside this
# script (the rows run replace theirs, the others stay) and copies its table into README.md.
# Each stage skips work whose output exists; delete exp/ to start over.
#
#   bash recipes/brown_attributes/run.sh [--stage N] [--stop-stage N] [--publish]
#
# Settings (environment): RESCORER_DATA (data folder, default ../shared/data beside the repo),
# SEEDS ("0 1 2": the LBL and the genre ATD), DOC_SEEDS (the first of SEEDS: the genre + document
# ATD, capped at 4 epochs to keep the recipe's compute down; "" for none), MODELS ("lbl atd atd_doc":
# which models stage 1 trains), EXP (recipes/brown_attributes/exp), NICE (nice level of the
# work, 10). Training takes 12 to 14 min per Brown model on one shared CPU core.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
DATA=${RESCORER_DATA:-$ROOT/../shared/data}
EXP=${EXP:-$HERE/exp}
SEEDS=${SEEDS:-"0 1 2"}
DOC_SEEDS=${DOC_SEEDS-${SEEDS%% *}}
MODELS=${MODELS:-"lbl atd atd_doc"}
NICE=${NICE:-10}
source "$ROOT/recipes/stages.sh" "$@"  # --stage/--stop-stage/--publish, run_stage, log, timed, publish

PY="nice -n $NICE $ROOT/.venv/bin/python"
RESCORER="nice -n $NICE $ROOT/.venv/bin/rescorer"

if run_stage 0; then
  [ -f "$DATA/corpora/brown/cats.txt" ] || { log "no Brown corpus under $DATA (set RESCORER_DATA)"; exit 1; }
fi

if run_stage 1; then
  # The plain LBL (factors 0: its own V x K word matrix) and the genre-gated LBL (ATD) for every
  # seed; the ATD with genre and document attributes (section 2.5: document vectors inferred
  # for unseen documents) for the seeds in $DOC_SEEDS.
  for model in $MODELS; do
    seeds=$SEEDS
    [ "$model" = atd_doc ] && seeds=$DOC_SEEDS
    for seed in $seeds; do
      [ -s "$EXP/${model}_seed$seed/model.safetensors" ] && continue
      log "stage 1: training $model, seed $seed"
      # the per-epoch log (dev perplexity, tokens/s) in exp/<model>_seed<seed>.log
      timed "train_${model}_seed$seed" $RESCORER -v --threads 1 lbl-train \
        "$HERE/conf/$model.json" --data-dir "$DATA" --out "$EXP/${model}_seed$seed" \
        --seed "$seed" 2> "$EXP/${model}_seed$seed.log"
    done
  done
fi

first=${SEEDS%% *}
if run_stage 2 && [ ! -s "$EXP/cli/export.txt" ]; then
  # The trained model through the rescorer's own commands: ppl with a context file (lbl:DIR),
  # and an ONNX export with the news genre folded in (parity checked in ONNX Runtime).
  log "stage 2: ppl and export through the CLI"
  mkdir -p "$EXP/cli"
  timed "cli_prepare" $PY "$HERE/local/prepare.py" "$EXP/atd_seed$first" "$DATA" "$EXP/cli"
  $RESCORER -q ppl --lm "atd=lbl:$EXP/atd_seed$first" --text "$EXP/cli/test.txt" \
    --text-format kaldi --context "$EXP/cli/test_context.jsonl" --lm-case none \
    > "$EXP/cli/ppl.txt.tmp"
  mv "$EXP/cli/ppl.txt.tmp" "$EXP/cli/ppl.txt"
  $RESCORER -q lbl-export "$EXP/atd_seed$first" "$EXP/cli/atd_news.onnx" --context genre=news \
    > "$EXP/cli/export.txt.tmp"
  mv "$EXP/cli/export.txt.tmp" "$EXP/cli/export.txt"
fi

if run_stage 3; then
  # Section 2.4 on three UD treebanks (English, Turkish, Uyghur): one LBL, one ATD with the
  # language as attribute, one ATD whose language also selects the output vocabulary.
  ud=$EXP/ud
  mkdir -p "$ud"
  [ -s "$ud/ud.jsonl" ] || $PY "$HERE/local/prepare_ud.py" "$DATA" "$ud/ud.jsonl"
  for model in lbl shared unshared; do
    [ -s "$ud/ud_$model/model.safetensors" ] && continue
    log "stage 3: UD treebanks, training ud_$model"
    timed "train_ud_$model" $RESCORER -q --threads 1 lbl-train "$HERE/conf/ud_$model.json" \
      --data-dir "$ud" --out "$ud/ud_$model" --seed "$first"
  done
  if [ ! -s "$ud/ppl_unshared.txt" ]; then
    $PY "$HERE/local/prepare.py" "$ud/ud_unshared" "$ud" "$ud"
    $RESCORER -q ppl --lm "lbl:$ud/ud_unshared" --text "$ud/test.txt" --text-format kaldi \
      --context "$ud/test_context.jsonl" --lm-case none > "$ud/ppl_unshared.txt.tmp"
    mv "$ud/ppl_unshared.txt.tmp" "$ud/ppl_unshared.txt"
  fi
fi

if run_stage 4; then
  log "stage 4: tables"
  timed "results" $PY "$HERE/local/results.py" "$HERE" "$EXP" "$DATA" --seeds $SEEDS
  publish "$EXP/RESULTS.md" "$HERE/RESULTS.md" --readme "$HERE/README.md" \
    --copy "$EXP/training_curves.png"
fi
