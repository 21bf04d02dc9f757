"""Stage 1 of recipes/ud_fnlm: text for the n-gram and training configs for the neural LMs.

    python local/prepare.py conf/tr.json DATA_DIR exp/tr

Writes, from the treebank's train/dev/test CoNLL-U files:
- ``{train,dev,test}.txt``: one sentence per line, the tokens every model predicts (surface
  tokens, lower-cased, punctuation left out, as the conf says), for lmplz and for rescorer ppl;
- ``train_rare.txt``: the training text with the words seen fewer than ``output_min_count``
  times written ``<rare>``, for the 3-gram that treats rare words as the NLMs do (its ``<rare>``
  is their ``<unk>``);
- ``nlm.json``, ``fnlm.json``: ``rescorer fnlm-train`` configs with the same data settings.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

from lm_models.fnlm.factors import FactorSettings
from lm_models.fnlm.train import read_sentences
from rescorer.core.output import atomic_write

SPLITS = ("train", "dev", "test")
RARE = "<rare>"


def rare_class(token: str, counts: Counter[str], min_count: int) -> str:
    """``token``, or ``<rare>`` for a word seen fewer than ``min_count`` times (or never)."""
    return token if counts[token] >= min_count else RARE


def conllu(conf: dict, data_dir: Path, split: str) -> Path:
    return data_dir / conf["treebank"] / f"{conf['prefix']}-{split}.conllu"


def main() -> None:
    conf_path, data_dir, out = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
    conf = json.loads(conf_path.read_text(encoding="utf-8"))
    data = conf["data"]
    settings = FactorSettings(("word",), data["lower"], data["language"])
    out.mkdir(parents=True, exist_ok=True)
    text = {}
    for split in SPLITS:
        sentences = read_sentences(conllu(conf, data_dir, split), "conllu", data["unit"],
                                   data["drop_punct"])  # fmt: skip
        text[split] = [[settings.token(w) for w in words] for words in sentences]
        with atomic_write(out / f"{split}.txt") as f:
            for tokens in text[split]:
                f.write(" ".join(tokens) + "\n")
    counts = Counter(t for tokens in text["train"] for t in tokens)
    with atomic_write(out / "train_rare.txt") as f:
        for tokens in text["train"]:
            f.write(" ".join(rare_class(t, counts, data["output_min_count"]) for t in tokens))
            f.write("\n")
    for name, spec in conf["models"].items():
        config = {
            "data": {
                "corpus": "conllu",
                "train": str(conllu(conf, data_dir, "train").resolve()),
                "dev": str(conllu(conf, data_dir, "dev").resolve()),
                "factors": spec["factors"],
                **data,
            },
            "model": spec["model"],
            "train": spec["train"],
        }
        with atomic_write(out / f"{name}.json") as f:
            f.write(json.dumps(config, indent=2) + "\n")


if __name__ == "__main__":
    main()
