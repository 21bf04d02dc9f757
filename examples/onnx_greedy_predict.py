"""Greedy next-word prediction with an exported step model, with ONNX Runtime and numpy alone.

No torch and nothing of this toolkit is imported: the ``.onnx`` file (``rescorer export --kind
step`` or ``--kind multi``) and the vocabulary file beside it are all that is needed. What the
script reads from the model's metadata properties: ``vocab_file``, ``sos_id``, ``eos_id``,
``unk_id``, ``num_layers``, ``hidden_size``, ``export_kind`` and ``contexts``.

    python examples/onnx_greedy_predict.py lm.onnx "the cat" --words 8
    python examples/onnx_greedy_predict.py lm_all.onnx "the match" --context genre=sport

Prints the predicted continuation (words after the prompt, up to ``</s>`` or ``--words``) on one
line. ``<unk>`` and ``<s>`` are never predicted. The model's inputs are bound by position
(x, state0, state1 [, context_id]), as decoders such as sherpa-onnx do.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort


def load(model_path: Path) -> tuple[ort.InferenceSession, dict[str, str], list[str]]:
    if not model_path.is_file():
        sys.exit(f"{model_path}: no such file")
    session = ort.InferenceSession(str(model_path), providers=["CPUExecutionProvider"])
    meta = dict(session.get_modelmeta().custom_metadata_map)
    if meta.get("export_kind") not in ("step", "multi"):
        sys.exit(f"{model_path}: expected a step model (export_kind step or multi)")
    vocab_path = model_path.parent / meta["vocab_file"]
    tokens = vocab_path.read_text(encoding="utf-8").split("\n")
    if tokens and tokens[-1] == "":
        tokens.pop()
    return session, meta, tokens


def context_id(meta: dict[str, str], pairs: list[str]) -> int:
    """The id of the record FIELD=VALUE... among the export's contexts (0: expected context)."""
    record = dict(p.split("=", 1) for p in pairs)
    contexts = json.loads(meta["contexts"])
    if not record:
        return 0
    if meta["export_kind"] != "multi":
        sys.exit("--context needs a multi-context export (the step model has its context folded)")
    for i, known in enumerate(contexts):
        if {k: str(v) for k, v in known.items()} == record:
            return i
    sys.exit(f"context {record} is not one of the exported ones: {contexts}")


def predict(
    session: ort.InferenceSession,
    meta: dict[str, str],
    tokens: list[str],
    prompt: list[str],
    n_words: int,
    cid: int,
) -> list[str]:
    index = {t: i for i, t in enumerate(tokens)}
    sos, eos, unk = int(meta["sos_id"]), int(meta["eos_id"]), int(meta["unk_id"])
    layers, hidden = int(meta["num_layers"]), int(meta["hidden_size"])
    names = [i.name for i in session.get_inputs()]
    h = np.zeros((layers, 1, hidden), dtype=np.float32)
    c = np.zeros((layers, 1, hidden), dtype=np.float32)
    x = np.array([[sos] + [index.get(w, unk) for w in prompt]], dtype=np.int64)  # (1, L)
    out: list[str] = []
    while True:
        feed = {names[0]: x, names[1]: h, names[2]: c}
        if len(names) > 3:
            feed[names[3]] = np.array([cid], dtype=np.int64)
        log_probs, h, c = session.run(None, feed)  # (1, L, V), (layers, 1, d) x 2
        scores = log_probs[0, -1].copy()
        scores[[unk, sos]] = -np.inf  # never predict <unk> or <s>
        best = int(scores.argmax())
        if best == eos or len(out) >= n_words:
            return out
        out.append(tokens[best])
        x = np.array([[best]], dtype=np.int64)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model", type=Path, help="a step model of `rescorer export`")
    ap.add_argument("prompt", help="the words so far, space separated")
    ap.add_argument("--words", type=int, default=10, help="at most this many words")
    ap.add_argument("--context", action="append", default=[], metavar="FIELD=VALUE")
    ap.add_argument("--lower", action="store_true", help="lower-case the prompt first")
    args = ap.parse_args()
    session, meta, tokens = load(args.model)
    prompt = args.prompt.lower().split() if args.lower else args.prompt.split()
    words = predict(session, meta, tokens, prompt, args.words, context_id(meta, args.context))
    print(" ".join(words))


if __name__ == "__main__":
    main()
