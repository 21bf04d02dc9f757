#!/usr/bin/env bash
# LibriSpeech N-best rescoring with a 4-gram trained on public-domain novels.
#
# Rescores ESPnet's 30-best lists of LibriSpeech dev_clean and dev_other, with weights tuned on
# dev_clean and evaluated on dev_other, and writes the results table of the rows it ran to
# exp/RESULTS.md; every tracked file stays as it is. With --publish, stage 7 also merges that
# table into the committed RESULTS.md beside this script (the rows it ran replace theirs, the
# others stay; recipes/common/publish.py) and copies the main table into README.md. Each stage
# skips work whose output already exists; delete exp/ to start over.
#
#   bash recipes/librispeech_nbest/run.sh [--stage N] [--stop-stage N] [--publish]
#
# Settings (environment): RESCORER_DATA (data folder, default ../shared/data beside the repo),
# ORDER (n-gram order, 4), PRUNE (lmplz thresholds, e.g. 0,0,1,1; default none), MEMORY (lmplz
# sort memory, 4G), TUNE_METHOD (risk: annealed minimum expected errors, which generalised best in
# docs/experiments/librispeech_tuning.md; mert: the exact error-count search), RESTARTS (random
# restarts of mert, 10), SEED (0), LSTM (0; 1: also train a word LSTM on the books and use it as a
# feature), LSTM_EVERY (train it on every n-th book sentence, 5), LSTM_CONF (its training config,
# conf/lstm.json; conf/lstm_books.json is a 1x512 LSTM over 50k words with the class-factored
# output, meant for all the books: LSTM_EVERY=1, hours of training on a CPU;
# conf/lstm_books_gpu.json a 2x1024 one, ~15 min on one H100; conf/lstm_books_subword_gpu.json its
# twin over 16k unigram pieces), LSTM_DIR (its training folder, exp/lstm; training resumes there,
# and stage 3 is skipped once LSTM_DIR/best exists: point it at a model trained before, e.g. on a
# GPU machine). CTX (0; 1: also the rows of LMs conditioned on the previous utterances, issue 16:
# CTX_MODEL, an LSTM trained with a `previous` text context, conf/lease/previous.json, and
# CTX_BASE, its twin without one, conf/lease/word.json; defaults
# exp/lease_pair/{previous,word}/best, where scripts/lease/unpack.py --dest exp/lease_pair put the
# pair of 2026-11-27), CTX_K (previous utterances of the same chapter, 3; CTX_MODEL may also be a
# history model, data.history, which reads them itself: conf/context_cpu/history.json). The
# context is the system's own 1-best of the earlier utterances (never the references, which give
# only the perplexity upper bound). With CTX=1 also the cache rows: the twin interpolated with a
# unigram cache of the chapter's earlier 1-best text (`cache:`, rescorer/lms/cache.py; rows
# 3CK/4CK: the context LM itself with the cache): CACHE_K (earlier utterances in the cache, 100:
# the chapter so far), CACHE_LAMBDA (0.1), CACHE_MIN_CHARS (only words of at least this many
# letters are cached, 5). And the neural cache rows (3NN, 4NN): the twin with a continuous cache
# of the chapter's earlier 1-best (Grave et al. 2017, `ncache:`, rescorer/lms/neural_cache.py):
# NCACHE_THETA (0.5) and NCACHE_LAMBDA (0.05), the pair that gave the dev_clean references the
# lowest perplexity. BWD (0; 1, with CTX=1: also the rows of a backward LSTM beside the twin,
# `reverse:`, rescorer/lms/reverse.py: a model trained on the books with each line's words
# reversed, which scores each hypothesis right to left): BWD_CONF (its training config,
# conf/context_cpu/backward.json, the CPU twin's size), BWD_DIR (its training folder,
# $EXP/bwd/backward; stage 3 trains it there when BWD_DIR/best is missing, ~35 min on 2 cores).
# CUE (0; 1: also the rows of a CUE model, Novotney et al., whose context is the previous
# utterance's text as a MiniLM sentence vector: CUE_MODEL, trained with the previous sentence of
# the book as its context, and CUE_BASE, the control decoder trained with the empty context;
# defaults exp/cue/runs/t3_{prev,none}/model, which stage 3 trains with CUE_CONF,
# conf/cue_cpu.json, through recipes/cue_brown/local/cue_brown.py when they are missing: about 1.5
# h on two cores), CUE_K (previous utterances of the same chapter in its context, 1: the model was
# trained with one). TITLE (the first line of that table). RESULTS (the table stage 7 writes,
# default exp/RESULTS.md), PUBLISH_TO (the committed page --publish merges it into, default
# RESULTS.md here, whose main table --publish also copies into README.md; an experiment page of
# docs/experiments/, e.g. librispeech_history_cpu.md, for a run of its rows).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
DATA=${RESCORER_DATA:-$ROOT/../shared/data}
EXP=${EXP:-$HERE/exp}
ORDER=${ORDER:-4}
PRUNE=${PRUNE:-}
MEMORY=${MEMORY:-4G}
RESTARTS=${RESTARTS:-10}
SEED=${SEED:-0}
TUNE_METHOD=${TUNE_METHOD:-risk}
LSTM=${LSTM:-0}
LSTM_EVERY=${LSTM_EVERY:-5}
LSTM_CONF=${LSTM_CONF:-$HERE/conf/lstm.json}
LSTM_DIR=${LSTM_DIR:-$EXP/lstm}
CTX=${CTX:-0}
CTX_MODEL=${CTX_MODEL:-$EXP/lease_pair/previous/best}
CTX_BASE=${CTX_BASE:-$EXP/lease_pair/word/best}
CTX_K=${CTX_K:-3}
CACHE_K=${CACHE_K:-100}
CACHE_LAMBDA=${CACHE_LAMBDA:-0.1}
CACHE_MIN_CHARS=${CACHE_MIN_CHARS:-5}
NCACHE_THETA=${NCACHE_THETA:-0.5}
NCACHE_LAMBDA=${NCACHE_LAMBDA:-0.05}
BWD=${BWD:-0}
BWD_CONF=${BWD_CONF:-$HERE/conf/context_cpu/backward.json}
BWD_DIR=${BWD_DIR:-$EXP/bwd/backward}
CUE=${CUE:-0}
CUE_CONF=${CUE_CONF:-$HERE/conf/cue_cpu.json}
CUE_MODEL=${CUE_MODEL:-$EXP/cue/runs/t3_prev/model}
CUE_BASE=${CUE_BASE:-$EXP/cue/runs/t3_none/model}
CUE_K=${CUE_K:-1}
RESULTS=${RESULTS:-$EXP/RESULTS.md}
PUBLISH_TO=${PUBLISH_TO:-$HERE/RESULTS.md}
TITLE=${TITLE:-LibriSpeech N-best rescoring: results}
source "$ROOT/recipes/stages.sh" "$@"  # --stage/--stop-stage/--publish, run_stage, log, timed, publish
[ -d "$(dirname "$RESULTS")" ] || { log "RESULTS=$RESULTS: no folder $(dirname "$RESULTS")"; exit 2; }

NBEST=$DATA/nbest/librispeech-espnet
SETS="dev_clean dev_other"
LM=$EXP/lm/${ORDER}gram.bin
PY=$ROOT/.venv/bin/python
RESCORER=$ROOT/.venv/bin/rescorer

if run_stage 0; then
  log "stage 0: set-up"
  bash "$ROOT/scripts/setup.sh"
  [ -d "$NBEST/dev_clean" ] || { log "no N-best lists under $NBEST (set RESCORER_DATA)"; exit 1; }
fi

if run_stage 1 && [ ! -s "$EXP/lm/books.txt" ]; then
  log "stage 1: normalising the novels into LibriSpeech style"
  mkdir -p "$EXP/lm"
  # a blank line between books (the documents of the context LMs' configs), and without them
  timed normalise "$PY" "$HERE/local/normalise_books.py" "$DATA/corpora/gutenberg" \
    "$EXP/lm/books_by_book.txt" --breaks book
  grep -v '^$' "$EXP/lm/books_by_book.txt" > "$EXP/lm/books.txt"
fi

if run_stage 2 && [ ! -s "$LM" ]; then
  log "stage 2: building the ${ORDER}-gram"
  prune_args=()
  [ -n "$PRUNE" ] && prune_args=(--prune "$PRUNE")
  timed ngram "$RESCORER" ngram build --text "$EXP/lm/books.txt" --order "$ORDER" \
    "${prune_args[@]}" --memory "$MEMORY" --out "$LM"
fi

if run_stage 3 && [ "$LSTM" = 1 ] && [ ! -s "$LSTM_DIR/best/model.safetensors" ]; then
  log "stage 3: training the word LSTM (every ${LSTM_EVERY}th sentence of the books)"
  awk -v n="$LSTM_EVERY" 'NR % n == 0' "$EXP/lm/books.txt" > "$EXP/lm/lstm_train.txt"
  timed lstm "$RESCORER" train "$LSTM_CONF" --data-dir "$EXP/lm" --out "$LSTM_DIR"
fi

if run_stage 3 && [ "$BWD" = 1 ] && [ ! -s "$BWD_DIR/best/model.safetensors" ]; then
  log "stage 3: training the backward LSTM (the books with each line's words reversed)"
  rev=$EXP/lm/books_by_book_reversed.txt  # BWD_CONF's data.path
  [ -s "$rev" ] || { awk 'NF == 0 { print; next }
    { for (i = NF; i > 1; i--) printf "%s ", $i; print $1 }' "$EXP/lm/books_by_book.txt" \
    > "$rev.tmp" && mv "$rev.tmp" "$rev"; }
  timed backward "$RESCORER" train "$BWD_CONF" --data-dir "$EXP/lm" --out "$BWD_DIR"
fi

if run_stage 3 && [ "$CUE" = 1 ] && { [ ! -s "$CUE_MODEL/model.safetensors" ] ||
  [ ! -s "$CUE_BASE/model.safetensors" ]; }; then
  log "stage 3: training the CUE pair (control and previous sentence) on the normalised books"
  cue_exp=$EXP/cue
  mkdir -p "$cue_exp"
  # CUE_CONF with data.path pointing at this run's books (a blank line between books)
  "$PY" -c 'import json, sys; c = json.load(open(sys.argv[1])); c["data"]["path"] = sys.argv[2]
json.dump(c, open(sys.argv[3], "w"), indent=2)' "$CUE_CONF" "$EXP/lm/books_by_book.txt" \
    "$cue_exp/conf.json"
  cue=("$PY" "$ROOT/recipes/cue_brown/local/cue_brown.py")
  for step in prepare embed pretrain; do
    timed "cue_$step" "${cue[@]}" "$step" "$cue_exp/conf.json" "$cue_exp" "$DATA"
  done
  # the two runs side by side, one core each
  OMP_NUM_THREADS=1 "${cue[@]}" experiments "$cue_exp/conf.json" "$cue_exp" "$DATA" \
    --only t3_none &
  pid=$!
  OMP_NUM_THREADS=1 "${cue[@]}" experiments "$cue_exp/conf.json" "$cue_exp" "$DATA" \
    --only t3_prev
  wait "$pid"
fi

# Scored N-best lists: the LSTM adds two columns, so runs with and without it keep separate files.
SCORED=$EXP/scored
[ "$LSTM" = 1 ] && SCORED=$EXP/scored_lstm

if run_stage 4; then
  lstm_args=()
  [ "$LSTM" = 1 ] && lstm_args=(--lm "lstm=torch:$LSTM_DIR/best")
  for set in $SETS; do
    out=$SCORED/$set.jsonl
    [ -s "$out" ] && continue
    log "stage 4: scoring $set with the 4-gram${lstm_args:+ and the LSTM}"
    mkdir -p "$SCORED"
    timed "score_$set" "$RESCORER" -q score --nbest "$NBEST/$set" \
      --ref "$NBEST/$set/references/ref_wer.trn" --lm "4gram=kenlm:$LM" "${lstm_args[@]}" \
      --out "$out" 2> "$SCORED/$set.log"  # OOV rates and prefix-sharing counts, for RESULTS.md
    cat "$SCORED/$set.log" >&2
  done
fi

# score_context DIR FROM TAG STEM BUILD_ARGS.. -- NAME=SPEC..: for each set, the context file
# EXP/context/SET.STEM.jsonl (`context build --nbest SET BUILD_ARGS`, when missing) and the
# lists FROM/SET.jsonl scored with the LMs given it, into DIR/SET.jsonl (skipped when there).
score_context() {
  local dir=$1 from=$2 tag=$3 stem=$4 set ctx out spec build=() lms=()
  shift 4
  while [ "$1" != "--" ]; do build+=("$1"); shift; done
  shift
  for spec in "$@"; do lms+=(--lm "$spec"); done
  mkdir -p "$EXP/context" "$dir"
  for set in $SETS; do
    ctx=$EXP/context/$set.$stem.jsonl
    [ -s "$ctx" ] || "$RESCORER" -q context build --nbest "$NBEST/$set" "${build[@]}" --out "$ctx"
    out=$dir/$set.jsonl
    [ -s "$out" ] && continue
    log "stage 4: scoring $set with ${*%%=*} given its $stem context"
    timed "score_${tag}_$set" "$RESCORER" -q score --nbest "$from/$set.jsonl" "${lms[@]}" \
      --context "$ctx" --out "$out" 2> "$dir/$set.log"
  done
}

# score_pair DIR CTX_FILE_STEM K FIELD BASE=SPEC MODEL=SPEC MODEL0=SPEC: for each set, the
# context file EXP/context/SET.STEM.jsonl (the first-pass 1-best of the K previous utterances
# of the chapter as FIELD), the lists scored with BASE (a model without context) and MODEL
# given it, then with MODEL again and no context file (MODEL0: its expected context).
score_pair() {
  local dir=$1 stem=$2 k=$3 field=$4 base=$5 model=$6 model0=$7 set ctx out
  mkdir -p "$EXP/context" "$dir"
  for set in $SETS; do
    ctx=$EXP/context/$set.$stem.jsonl
    [ -s "$ctx" ] || "$RESCORER" -q context build --nbest "$NBEST/$set" --previous "$k" \
      --field "$field" --out "$ctx"
    out=$dir/$set.jsonl
    [ -s "$out" ] && continue
    log "stage 4: scoring $set with ${model%%=*} (given the previous utterances) and ${base%%=*}"
    timed "score_${model%%=*}_$set" "$RESCORER" -q score --nbest "$SCORED/$set.jsonl" \
      --lm "$base" --lm "$model" --context "$ctx" --out "$dir/$set.given.jsonl" 2> "$dir/$set.log"
    timed "score_${model0%%=*}_$set" "$RESCORER" -q score --nbest "$dir/$set.given.jsonl" \
      --lm "$model0" --out "$out" 2>> "$dir/$set.log"
    rm "$dir/$set.given.jsonl"
  done
}

# ppl_given NAME SPEC [CONTEXT_FILE]: perplexity of the dev_other references under SPEC (with
# each utterance's context record when given), into EXP/context/ppl_dev_other.NAME.txt.
ppl_given() {
  local out=$EXP/context/ppl_dev_other.$1.txt
  [ -s "$out" ] && return 0
  "$RESCORER" -q ppl --lm "$2" --text "$NBEST/dev_other/references/ref_wer.trn" \
    --text-format trn ${3:+--context "$3"} > "$out.tmp" && mv "$out.tmp" "$out"
}

# reference_ppls PREFIX KIND BASE MODEL STEM REF_STEM K FIELD: perplexity of the dev_other
# references (EXP/context/ppl_dev_other.PREFIX{twin,none,first_pass,references}.txt): BASE;
# MODEL with no context (its expected context), with the first-pass context of score_pair's
# STEM, and with the references' own K previous utterances (EXP/context/dev_other.REF_STEM.jsonl,
# an upper bound no decoder has).
reference_ppls() {
  local prefix=$1 kind=$2 base=$3 model=$4 stem=$5 ref_stem=$6 k=$7 field=$8 v name m ctx
  local refs=$NBEST/dev_other/references/ref_wer.trn ref_text=$EXP/context/dev_other.ref_text
  local ref_ctx=$EXP/context/dev_other.$ref_stem.jsonl
  [ -s "$ref_text" ] || "$PY" -c 'import sys; from rescorer.refs import read_references
for u, w in read_references(sys.argv[1]).items(): print(u, " ".join(w))' "$refs" > "$ref_text"
  [ -s "$ref_ctx" ] || "$RESCORER" -q context build --nbest "$NBEST/dev_other" --previous "$k" \
    --field "$field" --from "$ref_text" --out "$ref_ctx"
  for v in "twin|$base|" "none|$model|" "first_pass|$model|$EXP/context/dev_other.$stem.jsonl" \
    "references|$model|$ref_ctx"; do
    IFS='|' read -r name m ctx <<< "$v"
    ppl_given "$prefix$name" "$kind:$m" "$ctx"
  done
}

# Context rows (CTX=1): the twin scored without context (`nb`) and the context model (`ctx`)
# given each utterance's previous utterances of its chapter, their first-pass 1-best; `ctx0`
# (rows 3C0, 4C0) the context model with none.
SCORED_CTX=${SCORED}_ctx
oov_of() { [ -s "$1/tokenizer.model" ] || echo ",$2_oov"; }  # a subword model has no OOVs
if run_stage 4 && [ "$CTX" = 1 ]; then
  for m in "$CTX_MODEL" "$CTX_BASE"; do
    [ -s "$m/model.safetensors" ] || { log "CTX=1: no checkpoint at $m"; exit 1; }
  done
  score_pair "$SCORED_CTX" first_pass "$CTX_K" previous "nb=torch:$CTX_BASE" \
    "ctx=torch:$CTX_MODEL" "ctx0=torch:$CTX_MODEL"
  reference_ppls "" torch "$CTX_BASE" "$CTX_MODEL" first_pass references "$CTX_K" previous
fi

# Cache rows (CTX=1): the twin (`nbk`) and the 4-gram (`4gk`), each interpolated with a unigram
# cache of the earlier utterances' first-pass 1-best in the same chapter. A row takes the model
# and its cached form as two features: their weights split the model's score from the cache's
# boost (w1 nb + w2 nbk = (w1 + w2) nb + w2 (nbk - nb)); the cached form alone moved nothing.
SCORED_CACHE=${SCORED}_cache
write_cache() {  # write_cache FILE BASE_SPEC [FIELD]: a cache model file (rescorer/lms/cache.py)
  "$PY" -c 'import sys; from rescorer.lms.cache import CacheSpec
CacheSpec(sys.argv[2], float(sys.argv[3]), sys.argv[5], int(sys.argv[4])).save(sys.argv[1])' \
    "$1" "$2" "$CACHE_LAMBDA" "$CACHE_MIN_CHARS" "${3:-previous}"
}
if run_stage 4 && [ "$CTX" = 1 ]; then
  write_cache "$EXP/context/cache_nb.json" "nb=torch:$(realpath "$CTX_BASE")"
  write_cache "$EXP/context/cache_4gram.json" "4gram=kenlm:$LM"
  score_context "$SCORED_CACHE" "$SCORED_CTX" cache cache --previous "$CACHE_K" -- \
    "nbk=cache:$EXP/context/cache_nb.json" "4gk=cache:$EXP/context/cache_4gram.json"
  # Perplexity of the dev_other references with the twin's cache: filled from the first-pass
  # 1-best, and from the references (the upper bound).
  ref_cache=$EXP/context/dev_other.cache_references.jsonl
  [ -s "$ref_cache" ] || "$RESCORER" -q context build --nbest "$NBEST/dev_other" \
    --previous "$CACHE_K" --from "$EXP/context/dev_other.ref_text" --out "$ref_cache"
  ppl_given cache_first_pass "cache:$EXP/context/cache_nb.json" \
    "$EXP/context/dev_other.cache.jsonl"
  ppl_given cache_references "cache:$EXP/context/cache_nb.json" "$ref_cache"
fi

# Both contexts (CTX=1): the context LM itself interpolated with the cache (`ctxk`), each model
# reading its own span: a record holds `previous` (CTX_K utterances, the context LM's) and
# `cache` (the chapter so far, CACHE_K, the cache's: `context build --cache`).
SCORED_BOTH=${SCORED}_both
if run_stage 4 && [ "$CTX" = 1 ]; then
  write_cache "$EXP/context/cache_ctx.json" "ctx=torch:$(realpath "$CTX_MODEL")" cache
  score_context "$SCORED_BOTH" "$SCORED_CACHE" both both --previous "$CTX_K" --cache "$CACHE_K" \
    -- "ctxk=cache:$EXP/context/cache_ctx.json"
fi

# Neural cache rows (CTX=1): the twin with a continuous cache of the chapter so far (`nbn`, the
# `cache` field of the `both` contexts): each earlier utterance's words with the LSTM states
# that predicted them; a word gains where the state now is like the one it was said in.
SCORED_NC=${SCORED}_ncache
write_ncache() {  # write_ncache FILE BASE_SPEC FIELD: rescorer/lms/neural_cache.py's file
  "$PY" -c 'import sys; from rescorer.lms.neural_cache import NeuralCacheSpec
NeuralCacheSpec(sys.argv[2], float(sys.argv[3]), float(sys.argv[4]), sys.argv[5]).save(sys.argv[1])' \
    "$1" "$2" "$NCACHE_THETA" "$NCACHE_LAMBDA" "$3"
}
if run_stage 4 && [ "$CTX" = 1 ]; then
  write_ncache "$EXP/context/ncache_nb.json" "nbn=torch:$(realpath "$CTX_BASE")" cache
  score_context "$SCORED_NC" "$SCORED_BOTH" ncache both --previous "$CTX_K" \
    --cache "$CACHE_K" -- "nbn=ncache:$EXP/context/ncache_nb.json"
  # the dev_other references, the cache filled from the first-pass 1-best and from the
  # references (the upper bound; that context file names the chapter so far `previous`)
  write_ncache "$EXP/context/ncache_nb_previous.json" "nbn=torch:$(realpath "$CTX_BASE")" previous
  ppl_given ncache_first_pass "ncache:$EXP/context/ncache_nb.json" \
    "$EXP/context/dev_other.both.jsonl"
  ppl_given ncache_references "ncache:$EXP/context/ncache_nb_previous.json" \
    "$EXP/context/dev_other.cache_references.jsonl"
fi

# Backward rows (BWD=1, with CTX=1): the backward LSTM (`bwd`) added to the lists of the neural
# cache rows, which hold the twin (`nb`) and its neural cache (`nbn`): does the right context a
# forward model never sees add to it?
SCORED_BWD=${SCORED}_bwd
if run_stage 4 && [ "$BWD" = 1 ]; then
  [ "$CTX" = 1 ] || { log "BWD=1 needs CTX=1 (its rows pair the backward LSTM with the twin)"; exit 2; }
  [ -s "$BWD_DIR/best/model.safetensors" ] || { log "BWD=1: no checkpoint at $BWD_DIR/best"; exit 1; }
  "$PY" -c 'import sys; from rescorer.lms.reverse import ReverseSpec
ReverseSpec(sys.argv[2]).save(sys.argv[1])' "$EXP/context/backward.json" \
    "bwd=torch:$(realpath "$BWD_DIR/best")"
  mkdir -p "$SCORED_BWD"
  for set in $SETS; do
    out=$SCORED_BWD/$set.jsonl
    [ -s "$out" ] && continue
    log "stage 4: scoring $set with the backward LSTM"
    timed "score_bwd_$set" "$RESCORER" -q score --nbest "$SCORED_NC/$set.jsonl" \
      --lm "bwd=reverse:$EXP/context/backward.json" --out "$out" 2> "$SCORED_BWD/$set.log"
  done
  ppl_given backward "reverse:$EXP/context/backward.json"
fi

# CUE rows (CUE=1): the control decoder (`cun`), the CUE model given each utterance's previous
# utterance (its first-pass 1-best) as the field `prev` (`cu`), and the same model with no
# context (`cu0`, its empty-context vector).
SCORED_CUE=${SCORED}_cue
if run_stage 4 && [ "$CUE" = 1 ]; then
  for m in "$CUE_MODEL" "$CUE_BASE"; do
    [ -s "$m/model.safetensors" ] || { log "CUE=1: no checkpoint at $m"; exit 1; }
  done
  score_pair "$SCORED_CUE" "prev$CUE_K" "$CUE_K" prev "cun=cue:$CUE_BASE" "cu=cue:$CUE_MODEL" \
    "cu0=cue:$CUE_MODEL"
  reference_ppls cue_ cue "$CUE_BASE" "$CUE_MODEL" "prev$CUE_K" "prev$CUE_K.references" \
    "$CUE_K" prev
fi
# The CUE lists again with the 4-gram's cache (`4gk`, as in row 3G; rows 4G, 4UG): do the CUE
# model's context and the cache add up?
SCORED_CUEG=${SCORED}_cueg
if run_stage 4 && [ "$CUE" = 1 ]; then
  write_cache "$EXP/context/cache_4gram.json" "4gram=kenlm:$LM"
  score_context "$SCORED_CUEG" "$SCORED_CUE" cueg cache --previous "$CACHE_K" -- \
    "4gk=cache:$EXP/context/cache_4gram.json"
fi

# system name | features tuned on dev_clean | length weight | scored lists (default $SCORED)
# ("our 4-gram" is two features: its log-probability `4gram` and its OOV count `4gram_oov`;
#  the LSTM's are `lstm` and `lstm_oov`)
SYSTEMS=(
  "2_first_pass|decoder,ctc|--no-length"
  "3_4gram|decoder,ctc,4gram,4gram_oov|--no-length"
  "3a_4gram_logprob_only|decoder,ctc,4gram|--no-length"
  "3b_4gram_length|decoder,ctc,4gram,4gram_oov|--length"
  "4_all|decoder,ctc,lm,4gram,4gram_oov|--length"
  "4a_all_logprob_only|decoder,ctc,lm,4gram|--length"
)
if [ "$LSTM" = 1 ]; then
  # a subword LSTM (a tokenizer in its folder) knows every word: no `lstm_oov` column
  LF=lstm,lstm_oov
  [ -s "$LSTM_DIR/best/tokenizer.model" ] && LF=lstm
  SYSTEMS+=(
    "3L_lstm|decoder,ctc,$LF|--no-length"
    "3M_4gram_lstm|decoder,ctc,4gram,4gram_oov,$LF|--no-length"
    "4L_all_lstm|decoder,ctc,lm,4gram,4gram_oov,$LF|--length"
  )
fi
if [ "$CTX" = 1 ]; then
  NB=nb$(oov_of "$CTX_BASE" nb)
  CF=ctx$(oov_of "$CTX_MODEL" ctx)
  SYSTEMS+=(
    "3N_lstm_nocontext|decoder,ctc,$NB|--no-length|$SCORED_CTX"
    "3C0_lstm_context_withheld|decoder,ctc,${CF//ctx/ctx0}|--no-length|$SCORED_CTX"
    "3C_lstm_previous|decoder,ctc,$CF|--no-length|$SCORED_CTX"
    "4N_all_nocontext|decoder,ctc,lm,4gram,4gram_oov,$NB|--length|$SCORED_CTX"
    "4C0_all_context_withheld|decoder,ctc,lm,4gram,4gram_oov,${CF//ctx/ctx0}|--length|$SCORED_CTX"
    "4C_all_previous|decoder,ctc,lm,4gram,4gram_oov,$CF|--length|$SCORED_CTX"
    "3G_4gram_cache|decoder,ctc,4gram,4gk,4gram_oov|--no-length|$SCORED_CACHE"
    "3K_lstm_cache|decoder,ctc,$NB,nbk|--no-length|$SCORED_CACHE"
    "4K_all_cache|decoder,ctc,lm,4gram,4gram_oov,$NB,nbk|--length|$SCORED_CACHE"
    "3CK_lstm_previous_cache|decoder,ctc,$CF,ctxk|--no-length|$SCORED_BOTH"
    "4CK_all_previous_cache|decoder,ctc,lm,4gram,4gram_oov,$CF,ctxk|--length|$SCORED_BOTH"
    "4G_all_4gram_cache|decoder,ctc,lm,4gram,4gram_oov,4gk|--length|$SCORED_CACHE"
    "4NG_all_nocontext_4gram_cache|decoder,ctc,lm,4gram,4gram_oov,$NB,4gk|--length|$SCORED_CACHE"
    "4CG_all_previous_4gram_cache|decoder,ctc,lm,4gram,4gram_oov,$CF,4gk|--length|$SCORED_CACHE"
    "3NN_lstm_neural_cache|decoder,ctc,${NB//nb/nbn}|--no-length|$SCORED_NC"
    "4NN_all_neural_cache|decoder,ctc,lm,4gram,4gram_oov,${NB//nb/nbn}|--length|$SCORED_NC"
  )
fi
if [ "$BWD" = 1 ]; then
  SYSTEMS+=(
    "3BO_backward_only|decoder,ctc,bwd$(oov_of "$BWD_DIR/best" bwd)|--no-length|$SCORED_BWD"
    "3B_lstm_backward|decoder,ctc,$NB,bwd|--no-length|$SCORED_BWD"
    "4B_all_backward|decoder,ctc,lm,4gram,4gram_oov,$NB,bwd|--length|$SCORED_BWD"
    "3BN_lstm_neural_cache_backward|decoder,ctc,${NB//nb/nbn},bwd|--no-length|$SCORED_BWD"
    "4BN_all_neural_cache_backward|decoder,ctc,lm,4gram,4gram_oov,${NB//nb/nbn},bwd|--length|$SCORED_BWD"
  )
fi

if [ "$CUE" = 1 ]; then
  SYSTEMS+=(
    "3UN_cue_nocontext|decoder,ctc,cun|--no-length|$SCORED_CUE"
    "3U0_cue_context_withheld|decoder,ctc,cu0|--no-length|$SCORED_CUE"
    "3U_cue_previous|decoder,ctc,cu|--no-length|$SCORED_CUE"
    "4UN_all_cue_nocontext|decoder,ctc,lm,4gram,4gram_oov,cun|--length|$SCORED_CUE"
    "4U0_all_cue_context_withheld|decoder,ctc,lm,4gram,4gram_oov,cu0|--length|$SCORED_CUE"
    "4U_all_cue_previous|decoder,ctc,lm,4gram,4gram_oov,cu|--length|$SCORED_CUE"
    "4UG_all_cue_previous_4gram_cache|decoder,ctc,lm,4gram,4gram_oov,cu,4gk|--length|$SCORED_CUEG"
  )
  # row 4G (the 4-gram's cache alone) once: with CTX=1 it is there already, the same features
  [ "$CTX" = 1 ] ||
    SYSTEMS+=("4G_all_4gram_cache|decoder,ctc,lm,4gram,4gram_oov,4gk|--length|$SCORED_CUEG")
fi

if run_stage 5; then
  for sys in "${SYSTEMS[@]}"; do
    IFS='|' read -r name feats length scored <<< "$sys"
    scored=${scored:-$SCORED}
    out=$EXP/$name/weights.json
    [ -s "$out" ] && continue
    log "stage 5: tuning $name on dev_clean ($feats)"
    mkdir -p "$EXP/$name"
    timed "tune_$name" "$RESCORER" -q tune --nbest "$scored/dev_clean.jsonl" \
      --ref "$NBEST/dev_clean/references/ref_wer.trn" \
      --features "$feats" "$length" --method "$TUNE_METHOD" --restarts "$RESTARTS" \
      --seed "$SEED" --out "$out" \
      | tee "$EXP/$name/tune.log"
  done
fi

if run_stage 6; then
  for sys in "${SYSTEMS[@]}"; do
    IFS='|' read -r name feats length scored <<< "$sys"
    scored=${scored:-$SCORED}
    for set in $SETS; do
      out=$EXP/$name/$set
      [ -s "$out/1best.txt" ] && continue
      log "stage 6: rescoring $set with $name"
      timed "rescore_${name}_$set" "$RESCORER" -q rescore --nbest "$scored/$set.jsonl" \
        --ref "$NBEST/$set/references/ref_wer.trn" \
        --weights "$EXP/$name/weights.json" --out "$out" > "$out.log"
    done
  done
fi

# Second passes (CTX=1): each utterance's context rebuilt from a first row's 1-best of the
# previous utterances, the lists scored again with it and rescored with that row's weights:
#   second_pass NAME FROM_ROW K LM_SPEC TAG SCORED_LISTS
second_pass() {
  local name=$1 from=$2 k=$3 spec=$4 tag=$5 lists=$6
  mkdir -p "$EXP/$name" "${SCORED}_$tag"
  cp "$EXP/$from/weights.json" "$EXP/$name/weights.json"
  for set in $SETS; do
    local out=$EXP/$name/$set second=$EXP/context/$set.${tag}_second_pass.jsonl
    [ -s "$out/1best.txt" ] && continue
    "$RESCORER" -q context build --nbest "$NBEST/$set" --previous "$k" \
      --from "$EXP/$from/$set/1best.txt" --out "$second"
    log "stage 6: second pass of $set ($tag: context from row $from's 1-best)"
    timed "score_${tag}_$set" "$RESCORER" -q score --nbest "$lists/$set.jsonl" \
      --lm "$spec" --context "$second" --out "${SCORED}_$tag/$set.jsonl" \
      2> "${SCORED}_$tag/$set.log"
    "$RESCORER" -q rescore --nbest "${SCORED}_$tag/$set.jsonl" \
      --ref "$NBEST/$set/references/ref_wer.trn" --weights "$EXP/$name/weights.json" \
      --out "$out" > "$out.log"
  done
}
if run_stage 6 && [ "$CTX" = 1 ]; then
  second_pass 4C2_all_previous_second_pass 4C_all_previous "$CTX_K" "ctx=torch:$CTX_MODEL" ctx2 \
    "$SCORED"
  second_pass 4K2_all_cache_second_pass 4K_all_cache "$CACHE_K" \
    "nbk=cache:$EXP/context/cache_nb.json" cache2 "$SCORED_CTX"  # the twin's `nb` is there
  second_pass 4NN2_all_neural_cache_second_pass 4NN_all_neural_cache "$CACHE_K" \
    "nbn=ncache:$EXP/context/ncache_nb_previous.json" ncache2 "$SCORED"
fi

if run_stage 6 && [ "$CUE" = 1 ]; then
  second_pass 4U2_all_cue_second_pass 4U_all_cue_previous "$CUE_K" "cu=cue:$CUE_MODEL" cue2 \
    "$SCORED"
fi

if run_stage 7; then
  log "stage 7: results table"
  command="bash recipes/librispeech_nbest/run.sh"  # with the places that are not the defaults
  [ "$RESULTS" = "$EXP/RESULTS.md" ] ||
    command="RESULTS=$(realpath --relative-to="$HERE" "$RESULTS") $command"
  [ "$EXP" = "$HERE/exp" ] || command="EXP=$(realpath --relative-to="$HERE" "$EXP") $command"
  "$PY" "$HERE/local/results.py" --nbest "$NBEST" --exp "$EXP" --lm "$LM" \
    --lstm-dir "$LSTM_DIR" --lstm-every "$LSTM_EVERY" --ctx-model "$CTX_MODEL" --ctx-base "$CTX_BASE" \
    $([ "$CTX" = 1 ] && echo --context) $([ "$CUE" = 1 ] && echo --cue) \
    $([ "$BWD" = 1 ] && echo --backward) --bwd-dir "$BWD_DIR" \
    --cue-model "$CUE_MODEL" --cue-base "$CUE_BASE" \
    --out "$RESULTS" --command "$command" \
    --settings "ORDER=$ORDER PRUNE=${PRUNE:-none} MEMORY=$MEMORY TUNE_METHOD=$TUNE_METHOD RESTARTS=$RESTARTS SEED=$SEED LSTM=$LSTM LSTM_EVERY=$LSTM_EVERY LSTM_CONF=$(realpath --relative-to="$HERE" "$LSTM_CONF") LSTM_DIR=$(realpath --relative-to="$HERE" "$LSTM_DIR") CTX=$CTX$([ "$CTX" = 1 ] && echo " CTX_MODEL=$(realpath --relative-to="$HERE" "$CTX_MODEL") CTX_BASE=$(realpath --relative-to="$HERE" "$CTX_BASE")") CTX_K=$CTX_K CACHE_K=$CACHE_K CACHE_LAMBDA=$CACHE_LAMBDA CACHE_MIN_CHARS=$CACHE_MIN_CHARS NCACHE_THETA=$NCACHE_THETA NCACHE_LAMBDA=$NCACHE_LAMBDA BWD=$BWD$([ "$BWD" = 1 ] && echo " BWD_CONF=$(realpath --relative-to="$HERE" "$BWD_CONF") BWD_DIR=$(realpath --relative-to="$HERE" "$BWD_DIR")") CUE=$CUE$([ "$CUE" = 1 ] && echo " CUE_CONF=$(realpath --relative-to="$HERE" "$CUE_CONF") CUE_MODEL=$(realpath --relative-to="$HERE" "$CUE_MODEL") CUE_BASE=$(realpath --relative-to="$HERE" "$CUE_BASE") CUE_K=$CUE_K")" \
    --title "$TITLE"
  readme=()
  [ "$PUBLISH_TO" = "$HERE/RESULTS.md" ] && readme=(--readme "$HERE/README.md")
  publish "$RESULTS" "$PUBLISH_TO" "${readme[@]}"
fi
