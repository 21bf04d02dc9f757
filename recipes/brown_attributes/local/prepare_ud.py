"""Section 2.4 stage of recipes/brown_attributes: three UD treebanks as one multilingual corpus.

    python local/prepare_ud.py DATA_DIR OUT.jsonl [--sentences-per-document 20]

Reads every ``.conllu`` file of ``ud/UD_English-LinES``, ``ud/UD_Turkish-IMST`` and
``ud/UD_Uyghur-UDT`` and writes one JSON line per run of consecutive sentences (a
"document") with its language as the ``lang`` field, in the format of
:func:`rescorer.lm_models.corpora.read_jsonl` (word forms, space-separated). The LBL trainer then
splits the documents 80/10/10, stratified by language, and ``lang`` selects the output vocabulary.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from rescorer.core.output import atomic_write
from rescorer.lm_models.conllu import iter_conllu

# Treebank folder under DATA_DIR/ud -> the value of the ``lang`` attribute.
TREEBANKS = {"UD_English-LinES": "en", "UD_Turkish-IMST": "tr", "UD_Uyghur-UDT": "ug"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("data_dir", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--sentences-per-document", type=int, default=20)
    args = ap.parse_args()
    lines = []
    for folder, lang in TREEBANKS.items():
        files = sorted((args.data_dir / "ud" / folder).glob("*.conllu"))
        if not files:
            raise SystemExit(f"no .conllu files under {args.data_dir / 'ud' / folder}")
        sentences = [" ".join(w.form for w in s.words) for path in files for s in iter_conllu(path)]
        n = args.sentences_per_document
        for k in range(0, len(sentences), n):
            doc = {"id": f"{lang}{k // n:04d}", "text": sentences[k : k + n],
                   "fields": {"lang": lang}}  # fmt: skip
            lines.append(json.dumps(doc, ensure_ascii=False))
    with atomic_write(args.out) as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
