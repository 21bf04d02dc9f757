"""The folded ONNX model types as the torch model given the context (stage 5 of run.sh).

For each context value of the typed test sentences: ``rescorer export --kind step --context
FIELD=VALUE`` of the best context LSTM (the context folded into the weights), then
``keyboard-eval`` over that value's sentences twice, with ``--lm onnx:`` (no context: it is in
the weights) and with ``--lm torch:`` given the context, interleaved value by value. The
per-sentence records (keystrokes at k = 1, 3, 5, hits, OOV words) must be equal (the summed
reciprocal ranks are compared apart); the CPU milliseconds per keystroke of both are reported.
Writes ``OUT/summary.json`` (``results.py`` reads it) and the exports, sentence lists and
records under ``OUT/``.

    python local/onnx_check.py --exp exp/agnews --mode concat [--device cpu]
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

# The fields of a per-sentence record that the two runtimes must give alike: what was typed and
# suggested (the reciprocal rank, of the typed word among all words, is compared apart: a word
# far down the list may swap with a near-tied neighbour between float32 runtimes).
COMPARED = ("words", "baseline", "keystrokes", "hits", "oov")


def read_jsonl(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def slug(value: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "_", value).strip("_") or "value"


def run(cmd: list[str]) -> None:
    print("+", " ".join(cmd), file=sys.stderr, flush=True)
    subprocess.run(cmd, check=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--exp", type=Path, required=True, help="exp/<corpus>")
    ap.add_argument("--mode", required=True, help="the context LSTM (best_mode.txt)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--rescorer", default=str(Path(sys.executable).parent / "rescorer"))
    ap.add_argument("--out", type=Path, default=None, help="default: EXP/onnx")
    args = ap.parse_args()
    exp, data = args.exp, args.exp / "data"
    out = args.out or exp / "onnx"
    out.mkdir(parents=True, exist_ok=True)
    typed = {r["id"] for r in read_jsonl(exp / "eval" / f"{args.mode}.jsonl")}
    contexts = {r["utt"]: r["fields"] for r in read_jsonl(data / "test.ctx.jsonl")}
    by_value: dict[tuple[str, str], list[str]] = {}
    with open(data / "test.tsv", encoding="utf-8") as f:
        for line in f:
            utt = line.split("\t", 1)[0]
            if utt in typed:
                ((field, value),) = contexts[utt].items()  # one categorical field
                by_value.setdefault((field, str(value)), []).append(line)
    values = []
    for (field, value), lines in sorted(by_value.items()):
        stem = out / slug(value)
        tsv = stem.with_suffix(".tsv")
        tsv.write_text("".join(lines), encoding="utf-8")
        ctx = stem.with_suffix(".ctx.jsonl")  # the same sentences' contexts (ids must match)
        ctx.write_text(
            "".join(
                json.dumps({"utt": u, "fields": contexts[u]}) + "\n"
                for u in (line.split("\t", 1)[0] for line in lines)
            ),
            encoding="utf-8",
        )
        onnx = stem.with_suffix(".onnx")
        if not onnx.exists():  # kept from an earlier run
            run(
                [args.rescorer, "-q", "export", str(exp / args.mode / "best"), str(onnx),
                 "--kind", "step", "--context", f"{field}={value}"]
            )  # fmt: skip
        common = [
            "--vocab", str(data / "vocab.txt"), "--text", str(tsv), "-k", "1,3,5",
            "--accuracy", "1,3",
        ]  # fmt: skip
        systems = {
            "onnx": ["--lm", f"{args.mode}=onnx:{onnx}"],
            "torch": [
                "--lm", f"{args.mode}=torch:{exp / args.mode / 'best'}", "--device",
                args.device, "--context", str(ctx),
            ],
        }  # fmt: skip
        reports = {}
        for name, lm in systems.items():
            records = Path(f"{stem}.{name}.jsonl")
            report = Path(f"{stem}.{name}.json")
            run([args.rescorer, "-q", "keyboard-eval", *lm, *common,
                 "--per-sentence", str(records), "--report", str(report)])  # fmt: skip
            reports[name] = json.loads(report.read_text(encoding="utf-8"))
        onnx_rec = {r["id"]: r for r in read_jsonl(Path(f"{stem}.onnx.jsonl"))}
        torch_rec = {r["id"]: r for r in read_jsonl(Path(f"{stem}.torch.jsonl"))}
        same = sum(all(onnx_rec[u][k] == torch_rec[u][k] for k in COMPARED) for u in torch_rec)
        rr = [
            abs(onnx_rec[u]["reciprocal_rank"] - torch_rec[u]["reciprocal_rank"]) for u in torch_rec
        ]
        values.append(
            {
                "field": field,
                "value": value,
                "sentences": len(torch_rec),
                "identical": same,
                "same_reciprocal_rank": sum(d == 0 for d in rr),
                "max_reciprocal_rank_difference": max(rr),
                "keystrokes": reports["onnx"]["latency_cpu_ms"]["count"],
                **{
                    f"{name}_{what}": reports[name][f"{key}"]["mean"]
                    for name in systems
                    for what, key in (
                        ("ms", "latency_cpu_ms"),
                        ("word_start_ms", "word_start_latency_cpu_ms"),
                    )
                },
            }
        )
        print(f"{value}: {same} of {len(torch_rec)} sentences identical", file=sys.stderr)
    summary = {"mode": args.mode, "values": values}
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
