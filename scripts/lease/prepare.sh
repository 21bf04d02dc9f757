#!/usr/bin/env bash
# GPU lease kit, this side: what a lease carries, made ahead (see README.md here).
#   bash scripts/lease/prepare.sh
# Writes .lease/carry/: books_by_book.txt.gz (the 96 novels normalised to LibriSpeech style, a
# blank line between books, so that documents are books) and books16k.model (a 16k-piece
# unigram tokenizer over the same text, for conf/lease/subword.json). About a minute.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
DATA=${RESCORER_DATA:-$ROOT/../shared/data}
cd "$ROOT"
bash scripts/setup.sh > /dev/null
mkdir -p .lease/carry
text=.lease/books_by_book.txt
if [ ! -s "$text" ]; then
  .venv/bin/python recipes/librispeech_nbest/local/normalise_books.py \
    "$DATA/corpora/gutenberg" "$text" --breaks book
fi
[ -s .lease/carry/books_by_book.txt.gz ] || gzip -c "$text" > .lease/carry/books_by_book.txt.gz
if [ ! -s .lease/carry/books16k.model ]; then
  grep -v '^$' "$text" > .lease/books.txt
  .venv/bin/rescorer tokenizer train --text .lease/books.txt --vocab-size 16000 \
    --out .lease/carry/books16k.model
fi
du -sh .lease/carry/*
echo "carry: [\".lease/carry\"]  (first call only; later calls find it on the warm machine)"
