"""Stage 1 of recipes/ud_fnlm: text for the n-gram and training configs for the neural LMs.

    python local/prepare.py conf/tr.json DATA_DIR exp/tr

A treebank conf names its train/dev/test CoNLL-U files (``treebank``, ``prefix``). The tagged
Brown conf (``brown``: the corpus folder) is made into CoNLL-U here first: the documents split
80/10/10 by ``split`` (stratified by genre, ``split_seed``), each split written to
``{train,dev,test}.conllu`` with the Brown tag as XPOS and its coarse tag as UPOS
(:func:`rescorer.lm_models.corpora.brown_coarse_tag`; ``PUNCT`` for punctuation); from there on both
take the same path. Writes, from the train/dev/test CoNLL-U files:
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

from rescorer.core.output import atomic_write
from rescorer.lm_models.conllu import write_tagged_conllu
from rescorer.lm_models.corpora import brown_coarse_tag, read_brown_tagged, split_documents
from rescorer.lm_models.fnlm.factors import FactorSettings
from rescorer.lm_models.fnlm.train import read_sentences

SPLITS = ("train", "dev", "test")
RARE = "<rare>"


def rare_class(token: str, counts: Counter[str], min_count: int) -> str:
    """``token``, or ``<rare>`` for a word seen fewer than ``min_count`` times (or never)."""
    return token if counts[token] >= min_count else RARE


def conllu(conf: dict, data_dir: Path, exp: Path, split: str) -> Path:
    """The CoNLL-U file of a split: the treebank's, or the one written from Brown in ``exp``."""
    if "brown" in conf:
        return exp / f"{split}.conllu"
    return data_dir / conf["treebank"] / f"{conf['prefix']}-{split}.conllu"


def brown_to_conllu(conf: dict, data_dir: Path, exp: Path) -> None:
    """The tagged Brown documents, split by document, as ``exp/{train,dev,test}.conllu``."""
    docs = read_brown_tagged(data_dir / conf["brown"], lower=False, drop_punct=False)
    parts = split_documents(docs, conf["split"], "genre", conf["split_seed"])
    for split, part in zip(SPLITS, parts, strict=True):
        write_tagged_conllu(conllu(conf, data_dir, exp, split), part, brown_coarse_tag)


def main() -> None:
    conf_path, data_dir, out = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
    conf = json.loads(conf_path.read_text(encoding="utf-8"))
    data = conf["data"]
    settings = FactorSettings(("word",), data["lower"], data["language"])
    out.mkdir(parents=True, exist_ok=True)
    if "brown" in conf:
        brown_to_conllu(conf, data_dir, out)
    text = {}
    for split in SPLITS:
        sentences = read_sentences(conllu(conf, data_dir, out, split), "conllu", data["unit"],
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
                "train": str(conllu(conf, data_dir, out, "train").resolve()),
                "dev": str(conllu(conf, data_dir, out, "dev").resolve()),
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
