"""Linear interpolation weights of the 4-gram and the LSTM, by EM on held-out training text.

Uses the word tokens of ``dev.txt`` that are in the prediction vocabulary and known to both
models (the distributions the keyboard mixes are over those words; ``</s>`` is never suggested),
scored with each model's ``token_logprobs``. Writes ``weights.txt`` (``w_ngram,w_lstm``, what
``--weights`` takes) and ``weights.json`` with the perplexities over those tokens.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import numpy as np

from rescorer.core.output import atomic_write
from rescorer.lms import load_lm
from rescorer.predict import em_mixture_weights, predictable_logprobs, read_word_list


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--ngram", type=Path, required=True)
    ap.add_argument("--lstm", type=Path, required=True)
    ap.add_argument("--dev", type=Path, required=True)
    ap.add_argument("--vocab", type=Path, required=True)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--max-sentences", type=int, default=3000)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()

    vocab = set(read_word_list(args.vocab))
    lines = args.dev.read_text(encoding="utf-8").splitlines()[: args.max_sentences]
    sentences = [line.split() for line in lines if line.split()]
    models = [load_lm(f"kenlm:{args.ngram}"), load_lm(f"torch:{args.lstm}", device=args.device)]
    lp = predictable_logprobs(models, sentences, vocab)
    weights = em_mixture_weights(lp)
    mixed = np.log(np.exp(lp).T @ weights)
    ppl = {
        "ngram": math.exp(-lp[0].mean()),
        "lstm": math.exp(-lp[1].mean()),
        "linear_mixture": math.exp(-mixed.mean()),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    with atomic_write(args.out / "weights.json") as f:
        json.dump(
            {
                "weights": weights.tolist(),
                "tokens": lp.shape[1],
                "sentences": len(sentences),
                "perplexity": ppl,
            },
            f,
            indent=2,
        )
    with atomic_write(args.out / "weights.txt") as f:
        f.write(",".join(f"{w:.4f}" for w in weights) + "\n")
    print(f"weights {weights.round(4).tolist()} from {lp.shape[1]} tokens; perplexities {ppl}")


if __name__ == "__main__":
    main()
