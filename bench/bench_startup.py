"""Start-up and small-command cost: `rescorer wer` against jiwer, each in its own process.

Scores one 1-best file (the LibriSpeech recipe's row 3 on dev_other) against its references,
timed as whole processes (interpreter start, imports, reading, alignment), interleaved A B C A B
C ..., median and min of the rounds. jiwer runs in an interpreter that has it (``--jiwer-python``,
e.g. a throwaway venv with ``pip install jiwer``); a bare ``python -c pass`` of the same
interpreter as ours is the floor.

    .venv/bin/python bench/bench_startup.py --jiwer-python /tmp/jwenv/bin/python
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from rescorer.core.data import REPO_ROOT, default_data_dir
from rescorer.core.machine import describe_machine
from rescorer.core.output import atomic_write

HYP = REPO_ROOT / "recipes" / "librispeech_nbest" / "exp" / "3_4gram" / "dev_other" / "1best.txt"
JIWER = """
import sys, jiwer
refs = {}
for line in open(sys.argv[1], encoding="utf-8"):
    words, utt = line.rstrip("\\n").rsplit("\\t", 1)
    p = utt.strip("()").split("-")
    refs[f"{p[0]}-{p[1]}-{p[-1]}"] = words
hyps = dict(line.rstrip("\\n").partition(" ")[::2] for line in open(sys.argv[2], encoding="utf-8"))
ids = sorted(refs)
out = jiwer.process_words([refs[u] for u in ids], [hyps.get(u, "") for u in ids])
print(f"%WER {100 * out.wer:.2f} [ {out.substitutions + out.deletions + out.insertions} ]")
"""


# Processes run as a user's would: bytecode is cached (this sandbox sets
# PYTHONDONTWRITEBYTECODE, which makes every start recompile the sources: +35 ms for rescorer).
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def timed(cmd: list[str]) -> tuple[float, str]:
    t0 = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, env=ENV).stdout
    return time.perf_counter() - t0, out.strip().splitlines()[0] if out.strip() else ""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--jiwer-python", required=True, help="an interpreter with jiwer installed")
    ap.add_argument("--hyp", type=Path, default=HYP)
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--out", type=Path, default=REPO_ROOT / "bench" / "results" / "startup.md")
    args = ap.parse_args()
    ref = default_data_dir() / "nbest" / "librispeech-espnet" / "dev_other" / "references"
    ref = ref / "ref_wer.trn"
    rescorer = str(Path(sys.executable).parent / "rescorer")
    cmds = {
        "rescorer wer": [
            rescorer,
            "wer",
            "--ref",
            str(ref),
            "--hyp",
            str(args.hyp),
            "--no-summary",
        ],
        "jiwer (process_words)": [args.jiwer_python, "-c", JIWER, str(ref), str(args.hyp)],
        "python -c pass (floor)": [sys.executable, "-c", "pass"],
    }
    load = os.getloadavg()[0]
    times: dict[str, list[float]] = {k: [] for k in cmds}
    outputs: dict[str, str] = {}
    for cmd in cmds.values():  # warm-up, not counted: bytecode caches written, files cached
        timed(cmd)
    for _ in range(args.rounds):  # interleaved
        for name, cmd in cmds.items():
            seconds, first = timed(cmd)
            times[name].append(seconds)
            outputs[name] = first
    base = statistics.median(times["jiwer (process_words)"])
    lines = [
        "# Start-up: `rescorer wer` against jiwer, whole processes",
        "",
        f"- Date: {dt.datetime.now(dt.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}",
        f"- Machine: {describe_machine()}; 1-minute load average {load:.2f} at the start",
        f"- Input: {args.hyp.name} of row 3 (dev_other, 2,864 utterances, 50,948 reference words)",
        f"- {args.rounds} rounds, interleaved, after one warm-up round (bytecode cached, as "
        "for an installed package); wall seconds of each process",
        "",
        "| command | median s | min s | x jiwer | first output line |",
        "|---|---|---|---|---|",
        *(
            f"| {name} | {statistics.median(t):.2f} | {min(t):.2f} | "
            f"{statistics.median(t) / base:.2f} | `{outputs[name]}` |"
            for name, t in times.items()
        ),
        "",
    ]
    with atomic_write(args.out) as f:
        f.write("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
