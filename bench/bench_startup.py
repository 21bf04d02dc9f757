"""Start-up and small-command cost: `rescorer wer` against jiwer, each in its own process.

Scores one 1-best file (the LibriSpeech recipe's row 3 on dev_other; where the recipe has not
run, the lists' own first-pass 1-best, ``raw_hypotheses/1best_recog/text``: the same size)
against its references, timed as whole processes (interpreter start, imports, reading,
alignment), interleaved A B C A B C ..., median and min of the rounds, wall and CPU seconds.
jiwer runs in an interpreter that has it (``--jiwer-python``, e.g. a throwaway venv with ``pip
install jiwer``; without it the jiwer row is left out and the ratios are to the floor); a bare
``python -c pass`` of the same interpreter as ours is the floor.

    .venv/bin/python bench/bench_startup.py --jiwer-python /tmp/jwenv/bin/python [--smoke]
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchlib  # noqa: E402  (first: the load average at the start)

REPO_ROOT = benchlib.REPO

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
# PYTHONDONTWRITEBYTECODE, which makes every start recompile the sources: +35 ms for rescorer);
# benchlib.child_env leaves it out.


def timed(cmd: list[str], env: dict[str, str]) -> tuple[float, float, str]:
    """(wall seconds, CPU seconds, first output line) of one process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, env=env).stdout
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, out.strip().splitlines()[0] if out.strip() else ""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--jiwer-python", default=None, help="an interpreter with jiwer installed")
    ap.add_argument("--hyp", type=Path, default=None, help="default: the recipe's row 3")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--out", type=Path, default=REPO_ROOT / "bench" / "results" / "startup.md")
    benchlib.add_common(ap)
    args = ap.parse_args()
    benchlib.smoke(args, rounds=1)
    threads = benchlib.pin_threads(args.threads)
    env = benchlib.child_env(threads)
    lists = benchlib.nbest_dir("dev_other")
    ref = lists / "references" / "ref_wer.trn"
    if args.hyp is None:
        args.hyp = HYP if HYP.exists() else lists / "raw_hypotheses" / "1best_recog" / "text"
    what = (
        "of row 3"
        if args.hyp == HYP
        else "(the lists' first-pass 1-best)"
        if args.hyp.name == "text"
        else ""
    )
    ref_lines = ref.read_text(encoding="utf-8").splitlines()
    utts, words = len(ref_lines), sum(len(x.rsplit("\t", 1)[0].split()) for x in ref_lines)
    rescorer = str(benchlib.RESCORER)
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
        "jiwer (process_words)": [str(args.jiwer_python), "-c", JIWER, str(ref), str(args.hyp)],
        "python -c pass (floor)": [sys.executable, "-c", "pass"],
    }
    if args.jiwer_python is None:
        del cmds["jiwer (process_words)"]
    base_name = "jiwer (process_words)" if args.jiwer_python else "python -c pass (floor)"
    times: dict[str, list[float]] = {k: [] for k in cmds}
    cpu: dict[str, list[float]] = {k: [] for k in cmds}
    outputs: dict[str, str] = {}
    for cmd in cmds.values():  # warm-up, not counted: bytecode caches written, files cached
        timed(cmd, env)
    for _ in range(args.rounds):  # interleaved
        for name, cmd in cmds.items():
            seconds, cpu_s, first = timed(cmd, env)
            times[name].append(seconds)
            cpu[name].append(cpu_s)
            outputs[name] = first
    base = statistics.median(times[base_name])
    short = "jiwer" if args.jiwer_python else "floor"
    lines = [
        *benchlib.header(
            "Start-up: `rescorer wer` against jiwer, whole processes",
            threads=threads,
            ratios=f"x {short}",
            absolute="seconds",
        ),
        f"- Input: `{args.hyp.name}` {what} (dev_other, {utts:,} utterances, {words:,} "
        "reference words)",
        f"- {args.rounds} rounds, interleaved, after one warm-up round (bytecode cached, as "
        "for an installed package); wall and CPU (user + system) seconds of each process",
        "",
        f"| command | median s | min s | CPU s, median | x {short} (wall) | first output line |",
        "|---|---|---|---|---|---|",
        *(
            f"| {name} | {statistics.median(t):.2f} | {min(t):.2f} | "
            f"{statistics.median(cpu[name]):.2f} | {statistics.median(t) / base:.2f} | "
            f"`{outputs[name]}` |"
            for name, t in times.items()
        ),
    ]
    benchlib.write(args.out, lines)


if __name__ == "__main__":
    main()
