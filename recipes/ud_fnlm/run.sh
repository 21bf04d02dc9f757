#!/usr/bin/env bash
# Factored neural LMs on Universal Dependencies treebanks and on tagged Brown (Alexandrescu &
# Kirchhoff 2006, Tables 1 and 2): a modified Kneser-Ney 3-gram, a word NLM and a factored NLM
# per corpus, their linear interpolations with EM weights, perplexity with and without unknown
# words, and the probability of words after unknown ones for each unknown-factor strategy.
# Tagged Brown (conf/brown.json, ~1 M words, the Brown tag and its coarse tag as factors) is
# split by document and written as CoNLL-U in stage 1; from there it takes the treebanks' path.
# Writes RESULTS.md and training_curves.png under exp/; --publish merges them into the committed
# RESULTS.md beside this script (the rows run replace theirs, the others stay) and copies its
# table into README.md. Each stage skips work whose output exists; delete exp/ to start over.
#
#   bash recipes/ud_fnlm/run.sh [--stage N] [--stop-stage N] [--publish]
#
# Settings (environment): RESCORER_DATA (data folder, default ../shared/data beside the repo),
# TREEBANKS (conf names, "tr ug brown"), SEEDS ("0 1 2"), EXP (recipes/ud_fnlm/exp).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
DATA=${RESCORER_DATA:-$ROOT/../shared/data}
EXP=${EXP:-$HERE/exp}
TREEBANKS=${TREEBANKS:-"tr ug brown"}
SEEDS=${SEEDS:-"0 1 2"}
source "$ROOT/recipes/stages.sh" "$@"  # --stage/--stop-stage/--publish, run_stage, log, timed, publish

PY=$ROOT/.venv/bin/python
RESCORER=$ROOT/.venv/bin/rescorer

# The seeds of SEEDS that a corpus trains: all, or those its conf lists under "seeds" (a corpus
# may train fewer than SEEDS; local/results.py reads the same field).
conf_seeds() {
  "$PY" -c 'import json, sys
listed = json.load(open(sys.argv[1], encoding="utf-8")).get("seeds")
print(" ".join(s for s in sys.argv[2:] if listed is None or int(s) in listed))' \
    "$HERE/conf/$1.json" $SEEDS
}

if run_stage 0; then
  log "stage 0: set-up"
  bash "$ROOT/scripts/setup.sh"
  [ -d "$DATA/ud" ] || { log "no treebanks under $DATA/ud (set RESCORER_DATA)"; exit 1; }
  [ -d "$DATA/corpora/brown" ] || { log "no Brown corpus under $DATA/corpora/brown"; exit 1; }
fi

for tb in $TREEBANKS; do
  out=$EXP/$tb
  seeds=$(conf_seeds "$tb")
  [ -n "$seeds" ] || { log "$tb: none of SEEDS ($SEEDS) is in conf/$tb.json's seeds"; exit 1; }
  if run_stage 1 && [ ! -s "$out/fnlm.json" ]; then
    log "stage 1: $tb: text and training configs (Brown: first as CoNLL-U, split by document)"
    timed "prepare_$tb" "$PY" "$HERE/local/prepare.py" "$HERE/conf/$tb.json" "$DATA" "$out"
  fi

  if run_stage 2 && [ ! -s "$out/3gram_rare.arpa" ]; then
    # Two modified Kneser-Ney 3-grams: on the text as it is (KenLM's own <unk>), and with the
    # words seen once written <rare>, which becomes the NLMs' <unk> (local/results.py).
    log "stage 2: $tb: modified Kneser-Ney 3-grams (lmplz)"
    timed "ngram_$tb" "$RESCORER" -q ngram build --text "$out/train.txt" --order 3 \
      --arpa --out "$out/3gram.arpa"
    timed "ngram_rare_$tb" "$RESCORER" -q ngram build --text "$out/train_rare.txt" --order 3 \
      --arpa --out "$out/3gram_rare.arpa"
  fi

  if run_stage 3; then
    for model in nlm fnlm; do
      for seed in $seeds; do
        [ -s "$out/${model}_seed$seed/model.safetensors" ] && continue
        log "stage 3: $tb: training $model, seed $seed"
        timed "train_${tb}_${model}_seed$seed" "$RESCORER" -q fnlm-train "$out/$model.json" \
          --out "$out/${model}_seed$seed" --seed "$seed"
      done
    done
  fi

  first=${seeds%% *}
  if run_stage 4 && [ ! -s "$out/mix_cli.txt" ]; then
    # The interpolation 3-gram & word NLM as one model of the rescorer (mix:FILE.json): EM
    # weights on dev, perplexity on test. The word NLM needs no annotation, so its plain-text
    # scores are those of the tables (check in RESULTS.md).
    log "stage 4: $tb: mix-weights and ppl through the CLI"
    {
      "$RESCORER" -q mix-weights --lm "3gram=kenlm:$out/3gram.arpa" \
        --lm "nlm=fnlm:$out/nlm_seed$first" --text "$out/dev.txt" --lm-case none \
        --out "$out/mix_3gram_nlm.json"
      "$RESCORER" -q ppl --lm "mix:$out/mix_3gram_nlm.json" --text "$out/test.txt" --lm-case none
    } > "$out/mix_cli.txt.tmp"
    mv "$out/mix_cli.txt.tmp" "$out/mix_cli.txt"
  fi
  if run_stage 4 && [ ! -s "$out/fnlm_cli.txt" ]; then
    # The FNLM itself on plain text, as N-best hypotheses reach it: no gold annotation, each
    # word's lemma/POS/FEATS from the lexicon saved with the model (its most frequent training
    # annotation); words outside it have unknown factors (check in RESULTS.md).
    log "stage 4: $tb: the FNLM on plain text through the CLI (lexicon annotation)"
    "$RESCORER" -q ppl --lm "fnlm=fnlm:$out/fnlm_seed$first" --text "$out/test.txt" \
      --lm-case none > "$out/fnlm_cli.txt.tmp"
    mv "$out/fnlm_cli.txt.tmp" "$out/fnlm_cli.txt"
  fi
done

if run_stage 5; then
  log "stage 5: tables"
  "$PY" "$HERE/local/results.py" "$HERE" "$EXP" "$DATA" --treebanks $TREEBANKS --seeds $SEEDS
  publish "$EXP/RESULTS.md" "$HERE/RESULTS.md" --readme "$HERE/README.md" \
    --copy "$EXP/training_curves.png"
fi
