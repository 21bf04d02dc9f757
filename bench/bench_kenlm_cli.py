"""`rescorer score --lm kenlm:` against plain scripts over the same lists, whole processes.

Four processes over the same ESPnet N-best folder (LibriSpeech dev_other 30-best by default)
and the same KenLM model, interleaved A B C D A B C D ..., CPU time (user + system) of each
process, median over the rounds:

  A  ``rescorer -q score --nbest DIR --lm 4gram=kenlm:LM --out a.jsonl``;
  B  a plain script that reads the folder and writes the byte-identical JSONL (KenLM's
     ``Model.score`` per hypothesis, OOV counts by ``word in model``, ``json.dumps``);
  C  a plain ``Model.full_scores`` loop over the same hypotheses (read from the folder's text
     files), summing the per-word scores and OOV flags: the per-word floor;
  D  a plain ``Model.score`` loop over them: the sentence-total floor.

A's output must equal B's byte for byte (checked each round). The ratios A/B and A/C are the
figures (stable across machines); the seconds are this machine's. Every process runs on
``--threads`` threads (default 1: ``RESCORER_THREADS``, OpenMP, BLAS); a ``--smoke`` run takes
the first 20 lists and builds a tiny 3-gram when the recipe's 4-gram is missing.

    .venv/bin/python bench/bench_kenlm_cli.py [--rounds 5] [--lm PATH] [--nbest DIR] [--smoke]
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchlib  # noqa: E402  (first: the load average at the start)

READ = r'''
import json, math, sys
from pathlib import Path

def read_folder(root):
    """{utt: [(words, scores)]} in 1best order, from <k>best_recog/{text,score,scores}."""
    ranks = sorted((int(p.name[: -len("best_recog")]), p)
                   for p in (Path(root) / "raw_hypotheses").iterdir())
    lists = {}
    for k, folder in ranks:
        texts = {}
        for line in open(folder / "text", encoding="utf-8"):
            utt, _, rest = line.strip().partition(" ")
            texts[utt] = rest.split()
        totals = {}
        for line in open(folder / "score", encoding="utf-8"):
            utt, _, rest = line.strip().partition(" ")
            totals[utt] = float(rest[7:-1])
        named = {}
        for line in open(folder / "scores", encoding="utf-8"):
            utt, _, rest = line.strip().partition(" ")
            named[utt] = {n: float(v[7:-1]) for n, v in json.loads(rest).items()}
        for utt, words in texts.items():
            lists.setdefault(utt, []).append((words, {"score": totals[utt], **named[utt]}))
    return lists
'''

SCRIPT = (
    READ
    + r"""
import kenlm
root, lm, out = sys.argv[1:4]
model = kenlm.Model(lm)
ln10 = math.log(10)
with open(out, "w", encoding="utf-8") as f:
    for utt, hyps in read_folder(root).items():
        items = []
        for words, scores in hyps:
            text = " ".join(words)
            scores["4gram"] = model.score(text, bos=True, eos=True) * ln10
            scores["4gram_oov"] = float(sum(w not in model for w in words))
            items.append({"text": text, "scores": scores})
        obj = {"utt": utt, "hyps": items}
        f.write(json.dumps(obj, ensure_ascii=False) + "\n")
"""
)

FULL_SCORES = (
    READ
    + r"""
import kenlm
model = kenlm.Model(sys.argv[2])
total = oov = 0.0
for hyps in read_folder(sys.argv[1]).values():
    for words, _ in hyps:
        for prob, _, unknown in model.full_scores(" ".join(words)):
            total += prob
            oov += unknown
print(total, oov)
"""
)

SCORE = (
    READ
    + r"""
import kenlm
model = kenlm.Model(sys.argv[2])
print(sum(model.score(" ".join(words)) for hyps in read_folder(sys.argv[1]).values()
          for words, _ in hyps))
"""
)


def cpu_seconds(cmd: list[str], env: dict[str, str]) -> float:
    """CPU time (user + system) of one child process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--lm", type=Path, default=None, help="default: the recipe's 4-gram")
    ap.add_argument("--nbest", type=Path, default=benchlib.nbest_dir("dev_other"))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", type=Path, default=benchlib.RESULTS / "kenlm_cli.md")
    benchlib.add_common(ap)
    args = ap.parse_args()
    benchlib.smoke(args, rounds=1)
    threads = benchlib.pin_threads(args.threads)
    env = benchlib.child_env(threads)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        args.lm = benchlib.recipe_lm(args.lm, args.smoke, work)
        if args.smoke:
            args.nbest = benchlib.subset_espnet(args.nbest, 20, work / "nbest")
        scripts = {}
        for name, text in (("plain", SCRIPT), ("full", FULL_SCORES), ("score", SCORE)):
            scripts[name] = work / f"{name}.py"
            scripts[name].write_text(text, encoding="utf-8")
        a_out, b_out = work / "a.jsonl", work / "b.jsonl"
        systems = {
            "rescorer score --lm kenlm:": [
                sys.executable, "-m", "rescorer", "-q", "score", "--nbest", str(args.nbest),
                "--lm", f"4gram=kenlm:{args.lm}", "--out", str(a_out),
            ],
            "plain script, same JSONL": [
                sys.executable, str(scripts["plain"]), str(args.nbest), str(args.lm), str(b_out)
            ],
            "plain full_scores loop": [
                sys.executable, str(scripts["full"]), str(args.nbest), str(args.lm)
            ],
            "plain Model.score loop": [
                sys.executable, str(scripts["score"]), str(args.nbest), str(args.lm)
            ],
        }  # fmt: skip
        times: dict[str, list[float]] = {name: [] for name in systems}
        for cmd in systems.values():  # warm-up: page cache, bytecode
            cpu_seconds(cmd, env)
        identical = a_out.read_bytes() == b_out.read_bytes()
        for _ in range(args.rounds):
            for name, cmd in systems.items():
                times[name].append(cpu_seconds(cmd, env))
            identical = identical and a_out.read_bytes() == b_out.read_bytes()
        hyps = sum(len(line.split('"text"')) - 1 for line in a_out.read_text().splitlines())
        lm_mib = args.lm.stat().st_size / 2**20
    med = {name: statistics.median(t) for name, t in times.items()}
    ours = med["rescorer score --lm kenlm:"]
    lines = [
        *benchlib.header(
            "`rescorer score --lm kenlm:` against plain scripts, whole processes",
            threads=threads,
            ratios="rescorer's / this one",
            absolute="CPU seconds",
        ),
        f"- Lists: `{args.nbest}` ({hyps:,} hypotheses); model `{args.lm.name}` ({lm_mib:.1f} MiB)",
        f"- {args.rounds} rounds, interleaved, after one warm-up round; CPU seconds (user + "
        "system) of each whole process, median (min)",
        f"- rescorer's JSONL byte-identical to the plain script's in every round: "
        f"{'yes' if identical else 'NO'}",
        "",
        "| process | CPU s, median (min) | rescorer's / this one |",
        "|---|---|---|",
    ]
    for name, t in times.items():
        lines.append(f"| {name} | {med[name]:.2f} ({min(t):.2f}) | {ours / med[name]:.2f}x |")
    benchlib.write(args.out, lines)


if __name__ == "__main__":
    main()
