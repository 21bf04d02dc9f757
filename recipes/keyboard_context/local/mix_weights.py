"""Linear interpolation weights of the 4-gram and the best context LSTM, by EM on the dev
documents typed with their context.

The best context model is the adapted mode (not Unadapted) with the lowest dev perplexity
(``<mode>/last/trainer.json``). Its dev tokens are scored with each dev sentence's context (the
document's label, or for a ``previous`` corpus the sentences before it, as ``prepare.py``
writes the test contexts); the EM uses the words in the prediction vocabulary known to both
models (what the keyboard mixes). ``rescorer mix-weights`` takes no context, hence this script.
Writes ``best_mode.txt``, ``weights.txt`` (``w_ngram,w_lstm`` for ``--weights``) and
``weights.json`` into OUT.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import numpy as np

from rescorer.core.output import atomic_write
from rescorer.lm_models.context_text import previous_texts
from rescorer.lm_models.corpora import read_jsonl
from rescorer.lms import load_lm
from rescorer.predict import em_mixture_weights, predictable_logprobs, read_word_list


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--exp", type=Path, required=True, help="the corpus's exp folder")
    ap.add_argument("--modes", required=True, help="space-separated modes trained")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--previous", type=int, default=3)
    ap.add_argument("--max-sentences", type=int, default=2000)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()

    data = args.exp / "data"
    stats = json.loads((data / "stats.json").read_text())
    dev_ppl = {}
    for mode in args.modes.split():
        if mode != "unadapted":
            log = json.loads((args.exp / mode / "last" / "trainer.json").read_text())
            dev_ppl[mode] = float(log["best_dev_ppl"])
    best = min(dev_ppl, key=dev_ppl.__getitem__)

    field = stats["field"]
    sentences, contexts = [], []
    for doc in read_jsonl(data / "dev.jsonl", tokenizer=str.split, max_len=None):
        texts = previous_texts(doc, args.previous) if field == "previous" else None
        for i, s in enumerate(doc.sentences):
            if field == "previous":
                if texts[i] is None:
                    continue
                contexts.append({"previous": texts[i]})
            else:
                contexts.append({field: doc.fields[field]})
            sentences.append(list(s))
    sentences, contexts = sentences[: args.max_sentences], contexts[: args.max_sentences]

    vocab = set(read_word_list(data / "vocab.txt"))
    models = [
        load_lm(f"kenlm:{args.exp / '4gram.bin'}"),
        load_lm(f"torch:{args.exp / best / 'best'}", device=args.device),
    ]
    lp = predictable_logprobs(models, sentences, vocab, contexts)
    weights = em_mixture_weights(lp)
    mixed = np.log(np.exp(lp).T @ weights)
    args.out.mkdir(parents=True, exist_ok=True)
    with atomic_write(args.out / "weights.json") as f:
        json.dump(
            {
                "best_mode": best,
                "dev_ppl_by_mode": dev_ppl,
                "weights": weights.tolist(),
                "tokens": lp.shape[1],
                "sentences": len(sentences),
                "ppl": {
                    "ngram": math.exp(-lp[0].mean()),
                    "lstm": math.exp(-lp[1].mean()),
                    "linear_mixture": math.exp(-mixed.mean()),
                },
            },
            f,
            indent=2,
        )
        f.write("\n")
    with atomic_write(args.out / "best_mode.txt") as f:
        f.write(best + "\n")
    with atomic_write(args.out / "weights.txt") as f:
        f.write(",".join(f"{w:.4f}" for w in weights) + "\n")
    print(
        f"best context model {best} (dev ppl {dev_ppl[best]:.2f}); weights "
        f"{weights[0]:.4f},{weights[1]:.4f}"
    )


if __name__ == "__main__":
    main()
