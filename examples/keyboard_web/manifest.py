"""Write the keyboard page's manifest: the context values and their step exports.

Each model is a ``rescorer export CHECKPOINT OUT.onnx --kind step --context FIELD=VALUE`` file
with its vocabulary beside it. What the page needs from an export's metadata properties (the
page cannot read them itself) goes into the manifest: the vocabulary file, ``sos_id``,
``unk_id``, ``num_layers``, ``hidden_size``, ``vocab_size``, and the folded context record (its
values, joined, are the label shown). Paths are written relative to the manifest, so the models
must sit in its folder or below.

    python examples/keyboard_web/manifest.py models/models.json models/lm_world.onnx \\
        models/lm_sports.onnx [-k 5]

Only ONNX Runtime is imported (not the toolkit), as in examples/onnx_greedy_predict.py.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import onnxruntime as ort


def entry(model: Path, folder: Path) -> dict:
    """The manifest entry of one step export."""
    session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    meta = dict(session.get_modelmeta().custom_metadata_map)
    kind = meta.get("export_kind")
    if kind != "step":
        sys.exit(f"{model}: expected a step export (rescorer export --kind step), got {kind!r}")
    vocab = model.parent / meta["vocab_file"]
    if not vocab.is_file():
        sys.exit(f"{model}: its vocabulary {vocab} is missing")
    (record,) = json.loads(meta["contexts"])  # a step export folds in one context
    for path in (model, vocab):
        if Path(os.path.relpath(path.resolve(), folder.resolve())).parts[0] == "..":
            sys.exit(f"{path}: must be in the manifest's folder {folder} or below")
    return {
        "label": ", ".join(str(v) for v in record.values()) or "(expected)",
        "record": record,
        "model": Path(os.path.relpath(model.resolve(), folder.resolve())).as_posix(),
        "vocab": Path(os.path.relpath(vocab.resolve(), folder.resolve())).as_posix(),
        **{key: int(meta[key]) for key in ("sos_id", "unk_id", "num_layers", "hidden_size")},
        "vocab_size": int(meta["vocab_size"]),
    }


def write_manifest(out: Path, models: list[Path], k: int = 5) -> dict:
    """Write the manifest ``out`` for ``models`` (one step export per context value)."""
    entries = [entry(m, out.parent) for m in models]
    labels = [e["label"] for e in entries]
    if len(set(labels)) != len(labels):
        sys.exit(f"two models fold in the same context: {labels}")
    manifest = {"k": k, "contexts": entries}
    out.write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
    return manifest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="the manifest to write (e.g. models/models.json)")
    parser.add_argument("models", type=Path, nargs="+", help="step exports, one per context")
    parser.add_argument("-k", type=int, default=5, help="suggestions shown (default 5)")
    args = parser.parse_args()
    manifest = write_manifest(args.out, args.models, args.k)
    labels = ", ".join(e["label"] for e in manifest["contexts"])
    print(f"wrote {args.out}: {len(manifest['contexts'])} context(s): {labels}")


if __name__ == "__main__":
    main()
