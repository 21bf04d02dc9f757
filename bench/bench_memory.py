"""Peak memory and time of the N-best commands on large JSONL sets (issue 21's memory goal).

The set is dev_other's 30-best lists (ESPnet, references embedded) repeated under new ids until
it holds the asked number of hypotheses: real text, real scores, any size. Each command runs as
its own process (``rescorer ...``); its peak resident memory is the kernel's ``ru_maxrss`` of
that process (``os.wait4``) and its time the wall clock around it.

- ``score``: ``--lm 3g=kenlm:MODEL`` added to the lists (a 3-gram of a few Gutenberg novels,
  built here with ``rescorer ngram build``; small, so the RSS is the toolkit's, not the model's);
- ``wer --oracle``: first-pass and oracle WER of the lists (references embedded);
- ``tune``: weights of decoder, ctc, lm and the 3-gram on the scored lists (``--restarts 2``:
  the search time grows with restarts, the memory does not);
- ``rescore``: the scored lists reranked with those weights, WER printed, three files written.

Every command runs on ``--threads`` threads (default 1; ``RESCORER_THREADS``, OpenMP, BLAS).
Peak RSS hardly depends on the machine; the seconds do.

    .venv/bin/python bench/bench_memory.py [--sizes 100000,300000,1000000] [--out FILE.md]
        [--smoke]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
import benchlib  # noqa: E402  (first: the load average at the start)

DATA = benchlib.data_dir()
DEV_OTHER = benchlib.nbest_dir("dev_other")
NOVELS = ("Anon_Clara_1864.txt", "Barclay_Ladies_1917.txt", "Bennet_Babylon_1902.txt")
RESCORER = Path(sys.executable).parent / "rescorer"


def build_set(hypotheses: int, out: Path) -> tuple[int, int]:
    """dev_other repeated (ids ``UTT~k``) up to ``hypotheses``; (lists, hypotheses) written."""
    from rescorer.formats import read_nbest
    from rescorer.refs import read_references

    nbest = read_nbest(DEV_OTHER, "espnet")
    refs = read_references(DEV_OTHER / "references" / "ref_wer.trn")
    lines = []
    for utt, nb in nbest.items():
        hyps = [{"text": h.text, "scores": dict(h.scores)} for h in nb]
        lines.append((utt, hyps, " ".join(refs[utt])))
    lists = written = 0
    with out.open("w", encoding="utf-8") as f:
        copy = 0
        while written < hypotheses:
            for utt, hyps, ref in lines:
                if written >= hypotheses:
                    break
                obj = {"utt": f"{utt}~{copy}", "hyps": hyps, "ref": ref}
                f.write(json.dumps(obj, ensure_ascii=False) + "\n")
                lists += 1
                written += len(hyps)
            copy += 1
    return lists, written


def run_measured(args: list[str], env: dict[str, str]) -> tuple[float, float, str]:
    """(seconds, peak RSS in MB, stdout) of ``rescorer ARGS`` in its own process (GNU time's
    peak: :func:`benchlib.run_timed`)."""
    seconds, _, peak, stdout = benchlib.run_timed(args, env)
    return seconds, peak, stdout


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="100000,300000,1000000")
    ap.add_argument("--out", type=Path, default=None, help="Also write the table here (md).")
    ap.add_argument("--work", type=Path, default=None, help="Scratch folder (default: a temp one).")
    benchlib.add_common(ap)
    a = ap.parse_args()
    benchlib.smoke(a, sizes="1000")
    threads = benchlib.pin_threads(a.threads)
    env = benchlib.child_env(threads)
    sizes = [int(s) for s in a.sizes.split(",")]
    work = a.work or Path(tempfile.mkdtemp(prefix="bench_memory."))
    work.mkdir(parents=True, exist_ok=True)
    model = work / "3g.bin"
    if a.smoke and not model.exists():
        model = benchlib.tiny_kenlm(work)
    if not model.exists():
        texts = [arg for n in NOVELS for arg in ("--text", str(DATA / "corpora" / "gutenberg" / n))]
        subprocess.run(
            [str(RESCORER), "-q", "ngram", "build", *texts, "--order", "3", "--memory", "200M",
             "--out", str(model)],
            check=True, env=env,
        )  # fmt: skip
    rows = []
    weights = work / "weights.json"
    for size in sizes:
        nbest = work / f"set{size}.jsonl"
        lists, hyps = build_set(size, nbest)
        mb = nbest.stat().st_size / 2**20
        scored = work / f"scored{size}.jsonl"
        out_dir = work / f"rescored{size}"
        commands = [
            ("score", ["score", "--nbest", str(nbest), "--lm", f"3g=kenlm:{model}",
                       "--out", str(scored)]),
            ("wer --oracle", ["wer", "--nbest", str(nbest), "--oracle", "--no-summary"]),
            ("tune", ["tune", "--nbest", str(scored), "--features", "decoder,ctc,lm,3g",
                      "--restarts", "2", "--out", str(weights)]),
            ("rescore", ["rescore", "--nbest", str(scored), "--weights", str(weights),
                         "--out", str(out_dir)]),
        ]  # fmt: skip
        for name, args in commands:
            seconds, rss, stdout = run_measured(args, env)
            last = stdout.strip().splitlines()[-1] if stdout.strip() else ""
            rows.append((hyps, lists, mb, name, seconds, rss, last))
            print(
                f"{hyps:>9,} hyps  {name:<13s} {seconds:7.1f} s  {rss:7.0f} MB   {last}", flush=True
            )
        for p in (nbest, scored):
            p.unlink()
    lines = [
        *benchlib.header(
            "Peak memory of the N-best commands on large JSONL sets",
            threads=threads,
            ratios="RSS bytes / hyp and its growth with the size; peak RSS MB hardly depends "
            "on the machine",
            absolute="seconds",
        ),
        "- Set: dev_other 30-best (ESPnet, references embedded) repeated under new ids; "
        + (
            "a tiny 3-gram of the dev_clean references"
            if a.smoke
            else "3-gram KenLM of three Gutenberg novels"
        ),
        "",
        "| hypotheses | lists | JSONL MB | command | seconds | peak RSS MB | RSS bytes / hyp |",
        "|---|---|---|---|---|---|---|",
    ]
    for hyps, lists, mb, name, seconds, rss, _ in rows:
        lines.append(
            f"| {hyps:,} | {lists:,} | {mb:.0f} | `{name}` | {seconds:.1f} | {rss:.0f} | "
            f"{rss * 2**20 / hyps:,.0f} |"
        )
    if a.work is None:
        shutil.rmtree(work)
    if a.out:
        benchlib.write(a.out, lines)
    else:
        print("\n".join(lines))


if __name__ == "__main__":
    main()
