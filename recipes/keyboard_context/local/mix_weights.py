"""Dev-tuned combinations: the cache of the previous sentences (a ``previous`` corpus) and the
linear interpolation weights of the 4-gram and the best context system, on the dev documents
typed with their context.

The best context model is the adapted mode (not Unadapted) with the lowest dev perplexity
(``<mode>/last/trainer.json``). Its dev tokens are scored with each dev sentence's context (the
document's label, or for a ``previous`` corpus the sentences before it, as ``prepare.py``
writes the test contexts); the EM uses the words in the prediction vocabulary known to both
models (what the keyboard mixes). ``rescorer mix-weights`` takes no context, hence this script.

With ``--cache DIR`` (a ``previous`` corpus), every mode also gets a unigram cache of the
previous sentences (``cache:`` files, :mod:`rescorer.lms.cache`): its weight lambda and
``min_chars`` are chosen by the perplexity of the same dev words, written as
``DIR/<mode>.json``, and the system interpolated with the 4-gram is the best mode with its
cache (``<mode>_cache``). Writes ``best_mode.txt`` (the system interpolated: a mode, or
``<mode>_cache``), ``weights.txt`` (``w_ngram,w_lstm`` for ``--weights``) and ``weights.json``
(with the cache grid) into OUT.
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
from rescorer.lms.cache import CacheLM, CacheSpec
from rescorer.predict import em_mixture_weights, predictable_logprobs, read_word_list


def tune_cache(
    base: object, mode: str, sentences: list, contexts: list, vocab: set, args: argparse.Namespace
) -> tuple[CacheLM, dict]:
    """The cache over ``base`` with the lowest dev perplexity; its file in ``args.cache``."""
    grid = {}
    for min_chars in (int(x) for x in args.cache_min_chars.split(",")):
        for lam in (float(x) for x in args.cache_lambdas.split(",")):
            lm = CacheLM(base, lam, "previous", min_chars, name=f"{mode}_cache")
            lp = predictable_logprobs([lm], sentences, vocab, contexts)
            grid[f"{lam:g},{min_chars}"] = math.exp(-lp.mean())
    chosen = min(grid, key=grid.__getitem__)
    lam_s, mc_s = chosen.split(",")
    args.cache.mkdir(parents=True, exist_ok=True)
    rel = Path("..") / mode / "best"  # relative to the cache file's folder, exp/<corpus>/cache
    CacheSpec(f"{mode}=torch:{rel}", float(lam_s), "previous", int(mc_s)).save(
        args.cache / f"{mode}.json"
    )
    plain = math.exp(-predictable_logprobs([base], sentences, vocab, contexts).mean())
    info = {"lambda": float(lam_s), "min_chars": int(mc_s), "ppl": grid[chosen],
            "ppl_without": plain, "grid": grid}  # fmt: skip
    print(
        f"cache over {mode}: lambda {lam_s}, min_chars {mc_s}: dev ppl {plain:.1f} -> "
        f"{info['ppl']:.1f}"
    )
    return CacheLM(base, float(lam_s), "previous", int(mc_s), name=f"{mode}_cache"), info


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--exp", type=Path, required=True, help="the corpus's exp folder")
    ap.add_argument("--modes", required=True, help="space-separated modes trained")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--previous", type=int, default=3)
    ap.add_argument("--max-sentences", type=int, default=2000)
    ap.add_argument("--cache", type=Path, help="tune a cache per mode into this folder")
    ap.add_argument("--cache-lambdas", default="0.02,0.05,0.1,0.2")
    ap.add_argument("--cache-min-chars", default="0,4")
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
    lstm = load_lm(f"torch:{args.exp / best / 'best'}", device=args.device)
    system, caches = best, {}
    if args.cache:
        for mode in args.modes.split():
            spec = f"torch:{args.exp / mode / 'best'}"
            base = lstm if mode == best else load_lm(spec, device=args.device)
            cache_lm, caches[mode] = tune_cache(base, mode, sentences, contexts, vocab, args)
            if mode == best:
                lstm, system = cache_lm, f"{best}_cache"
    models = [load_lm(f"kenlm:{args.exp / '4gram.bin'}"), lstm]
    lp = predictable_logprobs(models, sentences, vocab, contexts)
    weights = em_mixture_weights(lp)
    mixed = np.log(np.exp(lp).T @ weights)
    args.out.mkdir(parents=True, exist_ok=True)
    with atomic_write(args.out / "weights.json") as f:
        json.dump(
            {
                "best_mode": best,
                "system": system,
                "dev_ppl_by_mode": dev_ppl,
                "weights": weights.tolist(),
                "tokens": lp.shape[1],
                "sentences": len(sentences),
                "ppl": {
                    "ngram": math.exp(-lp[0].mean()),
                    "lstm": math.exp(-lp[1].mean()),
                    "linear_mixture": math.exp(-mixed.mean()),
                },
                "caches": caches,
            },
            f,
            indent=2,
        )
        f.write("\n")
    with atomic_write(args.out / "best_mode.txt") as f:
        f.write(system + "\n")
    with atomic_write(args.out / "weights.txt") as f:
        f.write(",".join(f"{w:.4f}" for w in weights) + "\n")
    print(
        f"best context system {system} (dev ppl of {best} {dev_ppl[best]:.2f}); weights "
        f"{weights[0]:.4f},{weights[1]:.4f}"
    )


if __name__ == "__main__":
    main()
