"""Data of the keyboard-with-context recipe, for one corpus.

Reads the corpus with the toolkit's reader, splits it by document (train/dev/test, stratified by
the context label, fixed seed: ``split_documents``), and writes into OUT:

- ``train.jsonl``, ``dev.jsonl``: the documents (``{"id", "text": [sentences], "fields"}``, the
  ``jsonl`` corpus of ``rescorer train``), already tokenised;
- ``train.txt``, ``dev.txt``: their sentences, one per line (KenLM, interpolation weights);
- ``vocab.txt``: the prediction vocabulary, the most frequent training words (shared by every
  system of the corpus);
- ``test.tsv``: the test sentences typed by ``keyboard-eval`` (``id<TAB>words``), in a shuffled
  order (fixed seed) so that the first N are a random sample (``LIMIT``);
- ``test.ctx.jsonl``: each test sentence's context (``{"utt", "fields"}``): its document's
  label, or for a ``previous`` corpus the words of the sentences before it in its document;
- ``stats.json``: counts.

Corpora (``--corpus``):

==============  ==================================================================
``agnews``      AG News, one sentence per article (title + description), ``topic``
``dbpedia``     DBpedia subset, one sentence per entry, ``class``
``brown``       Brown, sentences of the test documents, ``genre``
``agnews_prev`` AG News, title and description sentences; the description's sentences
                are typed with the sentences before them (the title first) as ``previous``
``brown_prev``  Brown, the sentences of the test documents with the ``PREVIOUS``
                sentences before each as ``previous``
==============  ==================================================================
"""

from __future__ import annotations

import argparse
import json
import random
from collections import Counter
from pathlib import Path

from rescorer.lm_models.context_text import previous_texts
from rescorer.lm_models.corpora import (
    PAPER_MAX_LEN,
    Document,
    read_agnews,
    read_brown,
    read_dbpedia,
    split_documents,
    tokenize,
)

# corpus -> (path under the data folder, reader, label field, previous-sentence context)
CORPORA = {
    "agnews": ("corpora/agnews/test.csv", "agnews", "topic", False),
    "dbpedia": ("corpora/dbpedia-subset/train.csv", "dbpedia", "class", False),
    "brown": ("corpora/brown", "brown", "genre", False),
    "agnews_prev": ("corpora/agnews/test.csv", "agnews", "topic", True),
    "brown_prev": ("corpora/brown", "brown", "genre", True),
}
SPECIALS = 3  # <unk>, <s>, </s> of the LSTM's vocabulary


def read(corpus: str, path: Path, split_sentences: bool) -> list[Document]:
    if corpus == "agnews":
        return read_agnews(path, max_len=PAPER_MAX_LEN, split_sentences=split_sentences)
    if corpus == "dbpedia":
        return read_dbpedia(path, max_len=PAPER_MAX_LEN, split_sentences=split_sentences)
    docs = read_brown(path)
    # Brown keeps its punctuation tokens (``mass.``, ``,``): tokenised again as the other corpora
    # (``tokenize``: lower case, most punctuation removed), so that the typed words, the 4-gram's
    # and the LSTM's (whose ``jsonl`` reader tokenises the text once more) are the same words
    return [
        Document(d.doc_id, [tokenize(" ".join(s)) for s in d.sentences], d.fields) for d in docs
    ]


def write_jsonl(path: Path, rows: list[dict]) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("data", type=Path, help="the shared data folder")
    ap.add_argument("out", type=Path)
    ap.add_argument("--corpus", choices=sorted(CORPORA), required=True)
    ap.add_argument("--vocab-size", type=int, default=10000, help="with the LSTM's 3 specials")
    ap.add_argument("--split-seed", type=int, default=0)
    ap.add_argument("--previous", type=int, default=3, help="earlier sentences as context")
    ap.add_argument("--max-docs", type=int, default=0, help="first N documents only (tests)")
    args = ap.parse_args()

    rel, reader, field, prev = CORPORA[args.corpus]
    docs = read(reader, args.data / rel, split_sentences=prev)
    docs = [d for d in docs if any(d.sentences)]
    if args.max_docs:
        docs = docs[: args.max_docs]
    train, dev, test = split_documents(docs, (0.8, 0.1, 0.1), field, args.split_seed)
    args.out.mkdir(parents=True, exist_ok=True)
    for name, part in (("train", train), ("dev", dev)):
        write_jsonl(
            args.out / f"{name}.jsonl",
            [
                {
                    "id": d.doc_id,
                    "text": [" ".join(s) for s in d.sentences if s],
                    "fields": dict(d.fields),
                }
                for d in part
            ],
        )
        with open(args.out / f"{name}.txt", "w", encoding="utf-8") as f:
            for d in part:
                for s in d.sentences:
                    if s:
                        f.write(" ".join(s) + "\n")
    counts = Counter(w for d in train for s in d.sentences for w in s)
    words = [w for w, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))]
    vocab = words[: args.vocab_size - SPECIALS]
    (args.out / "vocab.txt").write_text("".join(w + "\n" for w in sorted(vocab)), encoding="utf-8")

    items = []  # (id, words, context fields)
    for d in test:
        texts = previous_texts(d, args.previous) if prev else [None] * len(d.sentences)
        for i, (s, text) in enumerate(zip(d.sentences, texts, strict=True)):
            if not s:
                continue
            if prev:
                if text is None:  # a document's first sentence has no previous text
                    continue
                ctx = {"previous": text}
            else:
                ctx = {field: d.fields[field]}
            items.append((f"{d.doc_id}#{i}", s, ctx, d.fields[field]))
    random.Random(args.split_seed).shuffle(items)
    with open(args.out / "test.tsv", "w", encoding="utf-8") as f:
        for sid, s, _, _ in items:
            f.write(f"{sid}\t{' '.join(s)}\n")
    write_jsonl(args.out / "test.ctx.jsonl", [{"utt": sid, "fields": c} for sid, _, c, _ in items])
    # the label of every test sentence, for the gains by value (also for `previous` corpora)
    write_jsonl(
        args.out / "test.labels.jsonl", [{"utt": sid, field: lab} for sid, _, _, lab in items]
    )
    stats = {
        "corpus": args.corpus,
        "field": "previous" if prev else field,
        "label_field": field,
        "documents": [len(train), len(dev), len(test)],
        "train_words": sum(counts.values()),
        "train_types": len(counts),
        "vocab": len(vocab),
        "test_sentences": len(items),
        "test_words": sum(len(s) for _, s, _, _ in items),
    }
    (args.out / "stats.json").write_text(json.dumps(stats, indent=1) + "\n", encoding="utf-8")
    print(json.dumps(stats))


if __name__ == "__main__":
    main()
