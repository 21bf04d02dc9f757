"""Stage 2 of recipes/brown_attributes: the test documents as rescorer input.

    python local/prepare.py CHECKPOINT DATA_DIR OUT_DIR

Writes ``test.txt`` (Kaldi text: ``<doc>-<n> words``, one line per test sentence, lower-cased
as in training) and ``test_context.jsonl`` (each utterance's attributes but ``doc``, e.g. the
genre: test documents are unseen values of ``doc``, so the model uses the expected document
vector), from the document split recorded in the checkpoint's ``training.json``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from rescorer.core.output import atomic_write
from rescorer.lm_models.lbl.train import LBLTrainConfig, read_documents


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("checkpoint", type=Path)
    ap.add_argument("data_dir", type=Path)
    ap.add_argument("out_dir", type=Path)
    args = ap.parse_args()
    meta = json.loads((args.checkpoint / "training.json").read_text(encoding="utf-8"))
    cfg = LBLTrainConfig.from_json(meta["config"])
    test_ids = set(meta["split"]["test"])
    docs = [d for d in read_documents(cfg.data, args.data_dir) if d.doc_id in test_ids]
    with (
        atomic_write(args.out_dir / "test.txt") as text,
        atomic_write(args.out_dir / "test_context.jsonl") as ctx,
    ):
        for d in docs:
            for i, sentence in enumerate(d.sentences):
                utt = f"{d.doc_id}-{i:04d}"
                text.write(f"{utt} {' '.join(sentence)}\n")
                # The document's attributes except ``doc`` (test documents are unseen values).
                fields = {a: d.fields[a] for a in cfg.data.attributes if a != "doc"}
                ctx.write(json.dumps({"utt": utt, "fields": fields}) + "\n")


if __name__ == "__main__":
    main()
