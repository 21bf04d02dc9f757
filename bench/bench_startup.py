"""Start-up and small-command cost: `rescorer wer` against jiwer, each in its own process.

Scores one 1-best file (the LibriSpeech recipe's row 3 on dev_other; where the recipe has not
run, the lists' own first-pass 1-best, ``raw_hypotheses/1best_recog/text``: the same size)
against its references, and its first ``--small`` (5) utterances (the start-up), timed as whole
processes (interpreter start, imports, reading, alignment), interleaved A B C A B C ..., medians
of the rounds, CPU and wall milliseconds; the ratios are of CPU time.
jiwer runs in an interpreter that has it (``--jiwer-python``, e.g. a throwaway venv with ``pip
install jiwer``; without it the jiwer row is left out and the ratios are to the floor); a bare
``python -c pass`` of the same interpreter as ours is the floor.

    .venv/bin/python bench/bench_startup.py --jiwer-python /tmp/jwenv/bin/python [--smoke] \
        [--rescorer /tmp/plainvenv/bin/rescorer]

A plain install, as a user's: ``python -m venv /tmp/plainvenv && /tmp/plainvenv/bin/pip install
click && /tmp/plainvenv/bin/pip install --no-deps .`` (``wer`` needs only click).
"""

from __future__ import annotations

import argparse
import itertools
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchlib  # noqa: E402  (first: the load average at the start)

REPO_ROOT = benchlib.REPO

HYP = benchlib.RECIPE_EXP / "3_4gram" / "dev_other" / "1best.txt"
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


def first_lines(src: Path, dest: Path, n: int) -> Path:
    """The first ``n`` lines of ``src`` written to ``dest``."""
    with open(src, encoding="utf-8") as f:
        dest.write_text("".join(itertools.islice(f, n)), encoding="utf-8")
    return dest


def floor_python(rescorer: str) -> str:
    """The interpreter of the ``rescorer`` program's environment (its floor), else ours."""
    python = Path(rescorer).parent / "python"
    return str(python) if python.exists() else sys.executable


def commands(rescorer: str, ref: Path, hyp: Path, jiwer_python: str | None) -> dict[str, list[str]]:
    """The processes compared on one reference/hypothesis pair."""
    cmds = {
        "rescorer wer": [
            rescorer,
            "wer",
            "--ref",
            str(ref),
            "--hyp",
            str(hyp),
            "--no-summary",
        ],
        "jiwer (process_words)": [str(jiwer_python), "-c", JIWER, str(ref), str(hyp)],
        "python -c pass (floor)": [floor_python(rescorer), "-c", "pass"],
    }
    if jiwer_python is None:
        del cmds["jiwer (process_words)"]
    return cmds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--jiwer-python", default=None, help="an interpreter with jiwer installed")
    ap.add_argument("--hyp", type=Path, default=None, help="default: the recipe's row 3")
    ap.add_argument(
        "--rescorer",
        default=str(benchlib.RESCORER),
        help="the rescorer program timed (default: this checkout's .venv, an editable install; "
        "a plain `pip install .` in a venv of its own is what a user runs)",
    )
    ap.add_argument(
        "--small",
        type=int,
        default=5,
        help="utterances of the start-up input (the first lines of the references and hyp)",
    )
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
        # the recipe's row 3 is of the full data: a smoke run (tiny data) takes the lists' own
        first_pass = lists / "raw_hypotheses" / "1best_recog" / "text"
        args.hyp = HYP if HYP.exists() and not args.smoke else first_pass
    what = (
        "of row 3"
        if args.hyp == HYP
        else "(the lists' first-pass 1-best)"
        if args.hyp.name == "text"
        else ""
    )
    ref_lines = ref.read_text(encoding="utf-8").splitlines()
    utts, words = len(ref_lines), sum(len(x.rsplit("\t", 1)[0].split()) for x in ref_lines)
    base_name = "jiwer (process_words)" if args.jiwer_python else "python -c pass (floor)"
    short = "jiwer" if args.jiwer_python else "floor"
    with tempfile.TemporaryDirectory() as tmp:
        # The start-up input: the first lines of both files (ESPnet's 1-best and its trn list
        # the utterances in one order).
        small_ref = first_lines(ref, Path(tmp) / "ref_small.trn", args.small)
        small_hyp = first_lines(args.hyp, Path(tmp) / "hyp_small.txt", args.small)
        inputs = {
            f"start-up: the first {args.small} utterances": commands(
                args.rescorer, small_ref, small_hyp, args.jiwer_python
            ),
            f"the whole set: {utts:,} utterances, {words:,} reference words": commands(
                args.rescorer, ref, args.hyp, args.jiwer_python
            ),
        }
        runs = [(title, name, cmd) for title, cmds in inputs.items() for name, cmd in cmds.items()]
        wall: dict[tuple[str, str], list[float]] = {(t, n): [] for t, n, _ in runs}
        cpu: dict[tuple[str, str], list[float]] = {(t, n): [] for t, n, _ in runs}
        outputs: dict[tuple[str, str], str] = {}
        for _, _, cmd in runs:  # warm-up, not counted: bytecode caches written, files cached
            timed(cmd, env)
        for _ in range(args.rounds):  # interleaved
            for title, name, cmd in runs:
                seconds, cpu_s, first = timed(cmd, env)
                wall[title, name].append(seconds)
                cpu[title, name].append(cpu_s)
                outputs[title, name] = first
    lines = [
        *benchlib.header(
            "Start-up: `rescorer wer` against jiwer, whole processes",
            threads=threads,
            ratios=f"x {short} (CPU time)",
            absolute="milliseconds",
        ),
        f"- rescorer: `{args.rescorer}`",
        f"- Input: `{args.hyp.name}` {what} against dev_other's `ref_wer.trn`: its first "
        f"{args.small} utterances (start-up), and all of it",
        f"- {args.rounds} rounds, interleaved, after one warm-up round (bytecode cached, as "
        "for an installed package); CPU (user + system) and wall milliseconds of each process, "
        "medians",
    ]
    for title in inputs:
        base = statistics.median(cpu[title, base_name])
        lines += [
            "",
            f"### {title[0].upper()}{title[1:]}",
            "",
            f"| command | CPU ms | x {short} (CPU) | wall ms | first output line |",
            "|---|---|---|---|---|",
            *(
                f"| {name} | {1000 * statistics.median(cpu[t, name]):.1f} | "
                f"{statistics.median(cpu[t, name]) / base:.2f} | "
                f"{1000 * statistics.median(wall[t, name]):.1f} | `{outputs[t, name]}` |"
                for t, name, _ in runs
                if t == title
            ),
        ]
    benchlib.write(args.out, lines)


if __name__ == "__main__":
    main()
