"""Stage 5 of recipes/ud_fnlm: Tables 1 and 2 of Alexandrescu & Kirchhoff (2006) -> RESULTS.md.

    python local/results.py RECIPE_DIR EXP_DIR DATA_DIR --treebanks tr ug brown --seeds 0 1

RESULTS.md and training_curves.png go into --out (default EXP_DIR); `run.sh --publish` merges
the page into the committed RESULTS.md (recipes/common/publish.py).

For each corpus (a treebank or tagged Brown): per-token natural-log probabilities of dev and
test from the 3-gram (KenLM), and from every word NLM and FNLM seed under each unknown-factor
strategy; Table 1 (mean probability of known words after an unknown one) per strategy; the
strategy with the best dev Table-1 value is then used for Table 2, as the paper does.
Interpolations: EM weights on dev (separately for "no unk", on the tokens with known words, and
for "w/unk", on all tokens), applied to dev and test. Seeds are summarised as mean ± half the range.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import re
import shlex
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from prepare import conllu  # local/prepare.py, beside this script

from rescorer.core.machine import describe_machine
from rescorer.core.output import atomic_write
from rescorer.lm_models.curves import plot_dev_curves
from rescorer.lm_models.fnlm.evaluate import TokenFlags, mean_prob_after_unknown, token_flags
from rescorer.lm_models.fnlm.factors import FactorSettings, words_of_text
from rescorer.lm_models.fnlm.model import FactoredLM, load_fnlm
from rescorer.lm_models.fnlm.train import read_sentences
from rescorer.lm_models.vocab import UNK_ID
from rescorer.lms.kenlm import KenLM
from rescorer.lms.mixture import em_weights, mix_logprobs

SPLITS = ("dev", "test")
RARE = "<rare>"  # the rare-word token of train_rare.txt (local/prepare.py)
STRATEGIES = ("null", "all", "tail", "least")
MODELS = {"nlm": "word NLM", "fnlm": "FNLM"}
MIXES = {  # Table 2 rows: name -> components
    "1&NLM": ("3gram", "nlm"),
    "1&FNLM": ("3gram", "fnlm"),
    "1&NLM&FNLM": ("3gram", "nlm", "fnlm"),
}


@dataclass
class Split:
    """Tokens of one split and what every model gave them."""

    flags: TokenFlags
    # model key ("3gram", "nlm/0/least", ...) -> natural-log probability per token
    logprobs: dict[str, np.ndarray]


def ppl(lp: np.ndarray) -> float:
    return math.exp(-float(np.mean(lp)))


def summary(values: list[float], digits: int = 1) -> str:
    if len(values) == 1:
        return f"{values[0]:.{digits}f}"
    mean = float(np.mean(values))
    half = (max(values) - min(values)) / 2
    return f"{mean:.{digits}f} ± {half:.{digits}f}"


def arpa_counts(path: Path) -> list[int]:
    counts = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            m = re.match(r"ngram (\d+)=(\d+)", line)
            if m:
                counts.append(int(m.group(2)))
            elif line.startswith("\\1-grams:"):
                break
    return counts


def rare_class_ngram(ngram: KenLM, tokens: list[list[str]], lm: FactoredLM) -> np.ndarray:
    """ln P per token (words, </s>) of the 3-gram trained with rare words as ``<rare>``.

    Words are scored as the NLMs score them (rescorer.lm_models.fnlm.model): a frequent word as
    itself, a rare training word as P(<rare>|h) (1 - beta) / n_rare, an unseen word as P(<rare>|h)
    beta, with the NLMs' beta and n_rare; rare and unseen words in a history are ``<rare>`` too.
    """
    cfg = lm.config
    mapped = [[t if lm.target(t)[0] != UNK_ID else RARE for t in s] for s in tokens]
    assert not any(f.any() for f in ngram.oov_flags(mapped)), "<rare> 3-gram vocabulary differs"
    lp = np.concatenate(ngram.token_logprobs(mapped))
    extra = np.array([lm.target(t)[1] for s in tokens for t in [*s, "</s>"]])
    assert cfg.rare_types > 0
    return lp + extra


def conf_seeds(conf: dict, seeds: list[int]) -> list[int]:
    """The seeds of ``seeds`` that a corpus trains: all, or those of its conf's ``seeds``."""
    listed = conf.get("seeds")
    out = [s for s in seeds if listed is None or s in listed]
    if not out:
        raise SystemExit(f"{conf['name']}: none of the seeds {seeds} is in its conf's {listed}")
    return out


def evaluate(conf: dict, exp: Path, data_dir: Path, seeds: list[int]) -> dict:
    data = conf["data"]
    settings = FactorSettings(("word",), data["lower"], data["language"])
    known = {w for line in (exp / "train.txt").read_text(encoding="utf-8").splitlines()
             for w in line.split()}  # fmt: skip
    ngram = KenLM(exp / "3gram.arpa", case="none")
    ngram_rare = KenLM(exp / "3gram_rare.arpa", case="none")
    first = load_fnlm(exp / f"nlm_seed{seeds[0]}")
    splits: dict[str, Split] = {}
    words = {}
    for split in SPLITS:
        path = conllu(conf, data_dir, exp, split)
        words[split] = read_sentences(path, "conllu", data["unit"], data["drop_punct"])
        tokens = [[settings.token(w) for w in s] for s in words[split]]
        flags = token_flags(tokens, known)
        oov_kenlm = np.concatenate([np.append(f, False) for f in ngram.oov_flags(tokens)])
        assert (oov_kenlm == flags.target_oov).all(), "3-gram and training vocabulary differ"
        splits[split] = Split(
            flags,
            {
                "3gram": rare_class_ngram(ngram_rare, tokens, first),
                "3gram_kenlm": np.concatenate(ngram.token_logprobs(tokens)),
            },
        )
    runs = []
    for model in MODELS:
        for seed in seeds:
            folder = exp / f"{model}_seed{seed}"
            lm = load_fnlm(folder)
            assert set(lm.word_counts) == known, f"{folder}: another training vocabulary"
            meta = json.loads((folder / "training.json").read_text(encoding="utf-8"))
            table1 = {}
            for strategy in STRATEGIES:
                for split in SPLITS:
                    lp = np.concatenate(lm.token_logprobs(words[split], strategy))
                    splits[split].logprobs[f"{model}/{seed}/{strategy}"] = lp
                    table1[strategy, split] = mean_prob_after_unknown(lp, splits[split].flags)[0]
            chosen = max(STRATEGIES, key=lambda s: table1[s, "dev"])
            for split in SPLITS:
                splits[split].logprobs[f"{model}/{seed}"] = splits[split].logprobs[
                    f"{model}/{seed}/{chosen}"
                ]
            runs.append(
                {
                    "model": model,
                    "seed": seed,
                    "strategy": chosen,
                    "best_epoch": meta["best_epoch"],
                    "epochs": len(meta["epochs"]),
                    "dev_ppl": meta["best_dev_ppl"],
                    "parameters": meta["data"]["parameters"],
                    "seconds": meta["seconds"],
                    "factors": meta["config"]["data"]["factors"],
                    "curve": [e["dev_ppl"] for e in meta["epochs"]],
                    "model_config": meta["config"]["model"],
                    "data": meta["data"],
                }
            )
    # Table 2: perplexities, single models and EM mixtures, per seed.
    table2: dict[tuple[str, str, str], list[float]] = {}
    weights: dict[tuple[str, str], list[tuple[float, ...]]] = {}

    def add(row: str, split: str, cond: str, value: float) -> None:
        table2.setdefault((row, split, cond), []).append(value)

    for split in SPLITS:
        s = splits[split]
        known_tok = ~s.flags.target_oov
        for key in ("3gram", "3gram_kenlm"):
            add(key, split, "no unk", ppl(s.logprobs[key][known_tok]))
            add(key, split, "w/unk", ppl(s.logprobs[key]))
        for model in MODELS:
            for seed in seeds:
                lp = s.logprobs[f"{model}/{seed}"]
                add(model, split, "no unk", ppl(lp[known_tok]))
                add(model, split, "w/unk", ppl(lp))
    for seed in seeds:
        for row, parts in MIXES.items():
            for cond in ("no unk", "w/unk"):
                keys = [p if p == "3gram" else f"{p}/{seed}" for p in parts]

                def table(split: str, keys: list[str] = keys, cond: str = cond) -> np.ndarray:
                    s = splits[split]
                    t = np.stack([s.logprobs[k] for k in keys], axis=1)
                    return t if cond == "w/unk" else t[~s.flags.target_oov]

                em = em_weights(table("dev"))
                weights.setdefault((row, cond), []).append(em.weights)
                for split in SPLITS:
                    add(row, split, cond, ppl(mix_logprobs(table(split), em.weights)))
    # Table 1: mean probability of known words after an unknown one (and, beside it, the
    # perplexity over the same words: the geometric counterpart of the arithmetic mean).
    table1_rows: dict[tuple[str, str], list[float]] = {}
    table1_ppl: dict[tuple[str, str], list[float]] = {}
    counts = {}
    for split in SPLITS:
        s = splits[split]
        mask = s.flags.is_word & ~s.flags.target_oov & s.flags.history_unknown
        for key in ("3gram", "3gram_kenlm"):
            p, counts[split] = mean_prob_after_unknown(s.logprobs[key], s.flags)
            table1_rows.setdefault((key, split), []).append(p)
            table1_ppl.setdefault((key, split), []).append(ppl(s.logprobs[key][mask]))
        for model in MODELS:
            for strategy in STRATEGIES:
                for seed in seeds:
                    lp = s.logprobs[f"{model}/{seed}/{strategy}"]
                    table1_rows.setdefault((f"{model}/{strategy}", split), []).append(
                        mean_prob_after_unknown(lp, s.flags)[0]
                    )
                    table1_ppl.setdefault((f"{model}/{strategy}", split), []).append(ppl(lp[mask]))
    tokens = {
        split: (len(s.flags.target_oov), int(s.flags.target_oov.sum()))
        for split, s in splits.items()
    }
    # What the rescorer's CLI gave for 3-gram & word NLM (stage 4), against the table's value.
    cli = None
    cli_file = exp / "mix_cli.txt"
    if cli_file.exists():
        text = cli_file.read_text(encoding="utf-8")
        m = re.search(r"ppl excluding OOVs ([\d.]+)", text)
        w = re.findall(r"(\S+) weight ([\d.]+)", text)
        if m:
            # The same mixture computed here: KenLM's own 3-gram & the first seed's word NLM,
            # with the strategy `fnlm:DIR` uses (the checkpoint's default).
            keys = ["3gram_kenlm", f"nlm/{seeds[0]}/{first.config.unk_strategy}"]
            dev, test = (
                np.stack([splits[x].logprobs[k] for k in keys], 1)[~splits[x].flags.target_oov]
                for x in SPLITS
            )
            em = em_weights(dev)
            cli = {
                "test_no_unk": float(m.group(1)),
                "weights": w,
                "here": ppl(mix_logprobs(test, em.weights)),
            }
    # The FNLM on plain text through the CLI (stage 4): lexicon annotation, against the same
    # model on the gold-annotated test set and on plain text with no annotation at all.
    fnlm_cli = None
    cli_file = exp / "fnlm_cli.txt"
    if cli_file.exists():
        m = re.search(r"ppl excluding OOVs ([\d.]+)", cli_file.read_text(encoding="utf-8"))
        if m:
            lm = load_fnlm(exp / f"fnlm_seed{seeds[0]}")
            keep = ~splits["test"].flags.target_oov
            gold = splits["test"].logprobs[f"fnlm/{seeds[0]}/{lm.config.unk_strategy}"]
            plain = [words_of_text(settings.token(w) for w in s) for s in words["test"]]
            bare = np.concatenate(lm.token_logprobs(plain))
            fnlm_cli = {
                "cli": float(m.group(1)),
                "gold": ppl(gold[keep]),
                "unannotated": ppl(bare[keep]),
                "lexicon_words": 0 if lm.lexicon is None else len(lm.lexicon),
            }
    return {
        "seeds": seeds,
        "fnlm_cli": fnlm_cli,
        "table2": table2,
        "table1": table1_rows,
        "table1_ppl": table1_ppl,
        "table1_counts": counts,
        "weights": weights,
        "runs": runs,
        "tokens": tokens,
        "train_words": sum(len(line.split()) for line in
                           (exp / "train.txt").read_text(encoding="utf-8").splitlines()),
        "vocab": len(known),
        "ngram_counts": arpa_counts(exp / "3gram_rare.arpa"),
        "ngram_bytes": (exp / "3gram_rare.arpa").stat().st_size,
        "cli": cli,
    }  # fmt: skip


def render(confs: list[dict], results: list[dict], header: list[str]) -> str:
    out = [*header]
    for conf, res in zip(confs, results, strict=True):
        seeds = res["seeds"]
        t2, t1 = res["table2"], res["table1"]
        out += [
            "",
            f"## {conf['title']}",
            "",
            *([conf["text"], ""] if "text" in conf else []),
            f"Training text: {res['train_words']:,} tokens, vocabulary {res['vocab']:,} words "
            f"(every training word; the same for all models). "
            + "; ".join(
                f"{split}: {n:,} tokens incl. </s>, {oov:,} OOV ({100 * oov / n:.1f} %)"
                for split, (n, oov) in res["tokens"].items()
            )
            + ".",
            "",
            "### Table 2 layout: perplexity",
            "",
            "| # | model | dev no unk | dev w/unk | test no unk | test w/unk |",
            "|---|---|---|---|---|---|",
        ]
        rows = [
            ("1", "baseline 3-gram (modified Kneser-Ney, lmplz; rare words as <unk>)", "3gram"),
            ("1b", "3-gram on all training words, KenLM's own <unk> (reference)", "3gram_kenlm"),
            ("4", "word-based NLM", "nlm"),
            ("5", "1) & 4)", "1&NLM"),
            ("12", "factored NLM", "fnlm"),
            ("13", "1) & 12)", "1&FNLM"),
            ("14", "1) & 4) & 12)", "1&NLM&FNLM"),
        ]
        for num, label, key in rows:
            cells = [
                summary(t2[key, split, cond]) for split in SPLITS for cond in ("no unk", "w/unk")
            ]
            out.append(f"| {num} | {label} | " + " | ".join(cells) + " |")
        out += [
            "",
            "Mixture weights (EM on dev; mean over seeds; order: 3-gram, NLM/FNLM):",
            "",
        ]
        for (row, cond), ws in res["weights"].items():
            mean = np.mean(np.array(ws), axis=0)
            out.append(f"- {row}, {cond}: " + ", ".join(f"{w:.3f}" for w in mean))
        out += [
            "",
            "### Table 1 layout: mean probability (× 10²) of known words with an unknown word "
            "among the two before them",
            "",
            f"Words counted: dev {res['table1_counts']['dev']:,}, "
            f"test {res['table1_counts']['test']:,}. Beside the mean, the perplexity over the "
            "same words (their geometric mean probability, inverted); the paper reports the "
            "arithmetic mean only.",
            "",
            "| model | dev mean P × 10² | test mean P × 10² | dev ppl | test ppl |",
            "|---|---|---|---|---|",
        ]
        t1p = res["table1_ppl"]
        table1_rows = [
            ("baseline 3-gram (rare words as <unk>)", "3gram"),
            ("3-gram, KenLM's own <unk>", "3gram_kenlm"),
            *(
                (f"{label}-{strategy.upper()}", f"{model}/{strategy}")
                for model, label in MODELS.items()
                for strategy in STRATEGIES
            ),
        ]
        for label, key in table1_rows:
            cells = [summary([100 * x for x in t1[key, s]], 3) for s in SPLITS]
            cells += [summary(t1p[key, s]) for s in SPLITS]
            out.append(f"| {label} | " + " | ".join(cells) + " |")
        out += [
            "",
            "### Runs",
            "",
            "| model | seed | factors | strategy (best dev Table 1) | best epoch / run | "
            "best dev ppl no unk | parameters | train wall s |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for r in res["runs"]:
            out.append(
                f"| {MODELS[r['model']]} | {r['seed']} | {', '.join(r['factors'])} | "
                f"{r['strategy'].upper()} | {r['best_epoch']} / {r['epochs']} | "
                f"{r['dev_ppl']:.1f} | {r['parameters']:,} | {r['seconds']:.0f} |"
            )
        counts = res["ngram_counts"]
        first = {r["model"]: r for r in res["runs"]}
        out += [
            "",
            "Sizes: 3-gram (row 1) "
            + ", ".join(f"{n:,} {i + 1}-grams" for i, n in enumerate(counts))
            + f" (ARPA {res['ngram_bytes'] / 2**20:.1f} MiB); "
            + "; ".join(
                f"{MODELS[m]}: order {r['model_config']['order']}, "
                f"embedding {r['model_config']['embed_dim']} per factor, hidden "
                f"{r['model_config']['hidden_dim']}, {r['data']['output_units']:,} output units "
                f"in {r['data']['classes']} classes, factor values {r['data']['factor_values']}"
                for m, r in first.items()
            )
            + ".",
        ]
        if res["cli"] is not None:
            out += [
                "",
                f"CLI check (stage 4, seed {seeds[0]}): `rescorer mix-weights` on dev.txt and "
                "`rescorer ppl --lm mix:...` on test.txt, with KenLM's own 3-gram (row 1b) and "
                "the word NLM as `fnlm:DIR` on plain text, give test perplexity excluding OOVs "
                f"{res['cli']['test_no_unk']:.2f} (weights "
                + ", ".join(f"{n} {w}" for n, w in res["cli"]["weights"])
                + f"); the same mixture computed by this script: {res['cli']['here']:.2f}.",
            ]
        if res["fnlm_cli"] is not None:
            f = res["fnlm_cli"]
            out += [
                "",
                f"FNLM on plain text (stage 4, seed {seeds[0]}): `rescorer ppl --lm fnlm:DIR` "
                "on test.txt, where each word's annotation factors (lemma, POS, FEATS; the tags "
                "for Brown) come from the lexicon saved with "
                f"the model ({f['lexicon_words']:,} training words, each with its most frequent "
                f"annotation), gives test perplexity excluding OOVs {f['cli']:.2f}; the same "
                f"model with the corpus's gold annotation: {f['gold']:.2f}; on plain text "
                f"with no annotation (every history factor unknown, as before lexicons): "
                f"{f['unannotated']:.2f}.",
            ]
    return "\n".join(out) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("recipe", type=Path)
    ap.add_argument("exp", type=Path)
    ap.add_argument("data", type=Path)
    ap.add_argument("--treebanks", nargs="+", required=True)
    ap.add_argument("--seeds", nargs="+", type=int, required=True)
    ap.add_argument("--out", type=Path, help="folder of RESULTS.md and its plot (default: EXP)")
    args = ap.parse_args()
    out = args.out or args.exp
    t0 = time.perf_counter()
    confs = [
        json.loads((args.recipe / "conf" / f"{tb}.json").read_text(encoding="utf-8"))
        for tb in args.treebanks
    ]
    results = [
        evaluate(conf, args.exp / conf["name"], args.data, conf_seeds(conf, args.seeds))
        for conf in confs
    ]
    stages = {}
    times = args.exp / "times.tsv"
    if times.exists():
        for line in times.read_text(encoding="utf-8").splitlines():
            name, seconds = line.split("\t")
            stages[name] = stages.get(name, 0) + int(seconds)
    total = sum(stages.values()) + time.perf_counter() - t0
    command = "bash recipes/ud_fnlm/run.sh"
    if args.treebanks != ["tr", "ug", "brown"] or args.seeds != [0, 1, 2]:
        command = (
            f"TREEBANKS={shlex.quote(' '.join(args.treebanks))} "
            f"SEEDS={shlex.quote(' '.join(map(str, args.seeds)))} {command}"
        )
    header = [
        "# Factored neural LMs on UD treebanks and tagged Brown (Alexandrescu & Kirchhoff 2006): "
        "results",
        "",
        f"- Command: `{command}` (every step niced)",
        f"- Date: {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC",
        f"- Device: {describe_machine()}; models trained on the CPU",
        f"- Wall time: {total / 60:.1f} min for preparation, n-grams, training and tables "
        f"(training {sum(v for k, v in stages.items() if k.startswith('train')) / 60:.1f} min)",
        f"- Seeds: {', '.join(map(str, args.seeds))}"
        + "".join(
            f" ({conf['title']}: {', '.join(map(str, res['seeds']))})"
            for conf, res in zip(confs, results, strict=True)
            if res["seeds"] != args.seeds
        )
        + "; neural rows are mean ± half the range over seeds (the 3-gram has no seed).",
        "- Perplexities are per token, the words and one </s> per sentence (natural logs "
        "throughout). **no unk**: tokens whose word was seen in training, unknown words left "
        "out of the sum and the count (SRILM's ppl). **w/unk**: every token; an unknown word is "
        "scored as the model's <unk>. The NLMs predict the words seen at least twice and <unk>, "
        "trained on the words seen once; a rare training word gets P(<unk>|h) (1 - beta) / "
        "n_rare, an unseen word P(<unk>|h) beta (beta: the Good-Turing share of unseen words). "
        "The baseline 3-gram (row 1) is trained on the text with the words seen once written "
        "<rare> and scores words the same way with P(<rare>|h), so every model has the same "
        "vocabulary (every training word) and the same event space, and mixtures are proper "
        "distributions. Row 1b is the 3-gram on the text as it is, with KenLM's own <unk> "
        "probability (lmplz gives <unk> only the unigram interpolation mass; nothing in "
        "training stands for unseen words).",
        "- Table 1: arithmetic mean of P over known words (not </s>) with an unknown word among "
        "the two previous words of their sentence; the strategy with the highest dev value "
        "is the one each neural model uses in Table 2.",
        "- Text (treebanks): surface tokens of the CoNLL-U files (a multiword token is one "
        "word; its factors join its parts' with +), lower-cased, punctuation left out. Brown: "
        "in its own section.",
    ]
    png = plot_dev_curves(
        {
            f"{conf['title']}: dev ppl (no unk)": {
                f"{'FNLM' if run['model'] == 'fnlm' else 'word NLM'} {run['seed']}": run["curve"]
                for run in res["runs"]
            }
            for conf, res in zip(confs, results, strict=True)
        },
        out / "training_curves.png",
        ylabel="dev perplexity, no unk",
        style_of=lambda name: {"color": "tab:red" if name.startswith("FNLM") else "tab:blue"},
    )
    header.append(
        f"- Training curves (dev perplexity per epoch of every run; the star marks the epoch "
        f"kept): ![dev perplexity per epoch]({png.name})"
    )
    with atomic_write(out / "RESULTS.md") as f:
        f.write(render(confs, results, header))


if __name__ == "__main__":
    main()
