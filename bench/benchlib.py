"""What every bench shares: its results file's header, pinned threads, the data, tiny inputs.

- :data:`LOAD_AT_START`: the 1-minute load average when the bench started (this module is
  imported first);
- :func:`add_common`: ``--threads`` (torch, OpenMP, ONNX Runtime and the child processes all
  pinned to it) and ``--smoke`` (the tiny size the smoke test runs: seconds, not minutes; the
  figures of a smoke run mean nothing);
- :func:`header`: the lines every results file starts with: date, machine, load average at the
  start, the exact command, the threads, and which figures are ratios (comparable across
  machines) and which absolute (this machine's only);
- :func:`tiny_data_dir`, :func:`tiny_kenlm`, :func:`books_text`, :func:`first_novels`: small
  stand-ins, made in a scratch folder, for what a fresh checkout lacks (the LibriSpeech recipe's
  4-gram and novels text) or what is too large for a smoke run.

Data come from ``$RESCORER_DATA`` (:func:`rescorer.core.data.default_data_dir`).
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

LOAD_AT_START = os.getloadavg()[0]

from rescorer.core.data import REPO_ROOT, default_data_dir  # noqa: E402

REPO = REPO_ROOT
RESULTS = REPO / "bench" / "results"
PY = sys.executable
RESCORER = Path(sys.executable).parent / "rescorer"
THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "RESCORER_THREADS")
NBEST = ("nbest", "librispeech-espnet")
# The LibriSpeech recipe's outputs that full runs read by default (its exp/, made from the full
# data; $RESCORER_BENCH_RECIPE_EXP names another). A --smoke run is on tiny data and reads none.
RECIPE_EXP = Path(
    os.environ.get("RESCORER_BENCH_RECIPE_EXP") or REPO / "recipes" / "librispeech_nbest" / "exp"
)
RECIPE_LM = RECIPE_EXP / "lm"

RATIOS_NOTE = (
    "- Figures: the ratios ({ratios}) are the figures to compare across machines; "
    "{absolute} are this machine's, at this load, and do not carry over."
)


def add_common(ap: argparse.ArgumentParser, threads: int | None = 1) -> None:
    """``--threads`` (unless ``threads`` is None: the bench pins its own) and ``--smoke``."""
    if threads is not None:
        ap.add_argument(
            "--threads",
            type=int,
            default=threads,
            help=f"CPU threads of torch, OpenMP and ONNX Runtime, here and in child processes "
            f"(default {threads})",
        )
    ap.add_argument(
        "--smoke",
        action="store_true",
        help="tiny sizes, tiny stand-ins for missing models: checks the bench runs (the smoke "
        "test), its figures mean nothing",
    )


def smoke(args: argparse.Namespace, **tiny: object) -> None:
    """With ``--smoke``, set each of ``tiny`` on ``args`` (the sizes of a smoke run)."""
    if args.smoke:
        for name, value in tiny.items():
            setattr(args, name, value)


def pin_threads(threads: int) -> int:
    """Every runtime on ``threads`` CPU threads: torch now, ONNX Runtime sessions made through
    :mod:`rescorer.core.runtime`, and (by the environment) the child processes' OpenMP, BLAS
    and ``rescorer`` CLI. Returns ``threads``."""
    for var in THREAD_VARS:
        os.environ[var] = str(threads)
    from rescorer.core import runtime

    runtime.configure(
        runtime.RuntimeOptions(threads=threads, keep_freed_memory=True, threads_given=True)
    )
    runtime.apply_to_torch()  # torch.set_num_threads(threads)
    return threads


GNU_TIME = "/usr/bin/time"
_TIME_MARK = "bench-time="


def run_timed(args: list[str], env: dict[str, str]) -> tuple[float, float, float, str]:
    """(wall seconds, CPU seconds, peak RSS in MB, stdout) of ``rescorer -q ARGS`` in its own
    process; SystemExit with its stderr when it fails.

    CPU and peak are GNU time's (``wait4`` of a process it forked): a child forked straight from
    this process would count this process's pages, shared at the fork, in its own peak.
    """
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        start = time.perf_counter()
        code = subprocess.call(
            [GNU_TIME, "-f", f"{_TIME_MARK}%U %S %M", str(RESCORER), "-q", *args],
            stdout=out,
            stderr=err,
            env=env,
        )
        wall = time.perf_counter() - start
        out.seek(0)
        err.seek(0)
        errors = err.read()
        if code != 0:
            raise SystemExit(f"rescorer {shlex.join(args)} failed ({code}):\n{errors[-3000:]}")
        line = next(x for x in errors.splitlines() if x.startswith(_TIME_MARK))
        user, system, kb = line[len(_TIME_MARK) :].split()
        return wall, float(user) + float(system), int(kb) / 1024, out.read()


def child_env(threads: int, **extra: str) -> dict[str, str]:
    """The environment of a child process: threads pinned, bytecode cached as for an installed
    package (this sandbox sets PYTHONDONTWRITEBYTECODE), the repository importable."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env.update({var: str(threads) for var in THREAD_VARS})
    env.setdefault("PYTHONPATH", str(REPO))
    env.update(extra)
    return env


def command() -> str:
    """The command line that ran this bench, as typed from the repository root."""
    py = Path(sys.executable)
    shown_py = str(py.relative_to(REPO)) if py.is_relative_to(REPO) else py.name  # .venv/bin/python
    script = Path(sys.argv[0]).resolve()
    shown_script = str(script.relative_to(REPO)) if script.is_relative_to(REPO) else str(script)
    env = (
        f"RESCORER_DATA={shlex.quote(os.environ['RESCORER_DATA'])} "
        if os.environ.get("RESCORER_DATA")
        else ""
    )
    return env + shlex.join([shown_py, shown_script, *sys.argv[1:]])


def header(title: str, *, threads: int | str | None, ratios: str, absolute: str) -> list[str]:
    """The first lines of a results file (Markdown), the figures' kinds named."""
    from rescorer.core.machine import describe_machine

    head = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    dirty = subprocess.run(["git", "-C", str(REPO), "diff", "--quiet", "HEAD", "--"]).returncode
    return [
        f"# {title}",
        "",
        f"- Date: {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC; working tree at "
        f"`{head or '?'}`" + (" with uncommitted changes" if dirty == 1 else ""),
        f"- Machine: {describe_machine()}; 1-minute load average {LOAD_AT_START:.2f} at the start",
        f"- Command: `{command()}`",
        f"- Threads: {threads if threads is not None else 'the runtimes’ defaults'} (torch, "
        "OpenMP/BLAS, ONNX Runtime; child processes too)",
        RATIOS_NOTE.format(ratios=ratios, absolute=absolute),
    ]


def write(out: Path, lines: list[str]) -> str:
    """Write ``lines`` to ``out`` atomically (a smoke run writes where it is told); return the
    text."""
    from rescorer.core.output import atomic_write

    text = "\n".join(lines).rstrip("\n") + "\n"
    out.parent.mkdir(parents=True, exist_ok=True)
    with atomic_write(out) as f:
        f.write(text)
    print(text)
    return text


# -- data and tiny stand-ins ----------------------------------------------------------------------


def data_dir(given: Path | None = None) -> Path:
    return given or default_data_dir()


def nbest_dir(name: str = "dev_other", data: Path | None = None) -> Path:
    return data_dir(data).joinpath(*NBEST, name)


def subset_espnet(src: Path, utterances: int, into: Path) -> Path:
    """The first ``utterances`` lists of an ESPnet N-best folder (its files list the
    utterances in the same order, one line each): the same layout, the first lines of each."""
    for path in sorted(src.rglob("*")):
        if path.is_file():
            dest = into / path.relative_to(src)
            dest.parent.mkdir(parents=True, exist_ok=True)
            with open(path, encoding="utf-8") as fin, open(dest, "w", encoding="utf-8") as fout:
                for i, line in enumerate(fin):
                    if i >= utterances:
                        break
                    fout.write(line)
    return into


def first_novels(n: int, into: Path, data: Path | None = None) -> Path:
    """A ``corpora/gutenberg``-like folder of the first ``n`` novels of ``titles.tsv`` (links),
    for :func:`rescorer.lm_models.corpora.read_novels`, which reads every listed novel."""
    src = data_dir(data) / "corpora" / "gutenberg"
    into.mkdir(parents=True, exist_ok=True)
    rows = (src / "titles.tsv").read_text(encoding="utf-8").splitlines()
    (into / "titles.tsv").write_text("\n".join(rows[: n + 1]) + "\n", encoding="utf-8")
    for row in rows[1 : n + 1]:
        name = row.split("\t")[0]
        if not (into / name).exists():
            (into / name).symlink_to(src / name)
    return into


def tiny_data_dir(into: Path, utterances: int = 20, novels: int = 3) -> Path:
    """A data folder for smoke runs: the two LibriSpeech sets cut to their first
    ``utterances`` lists, ``corpora/gutenberg`` with every novel (links) but only the first
    ``novels`` listed, the other folders linked as they are."""
    src = default_data_dir()
    for name in ("dev_clean", "dev_other"):
        subset_espnet(src.joinpath(*NBEST, name), utterances, into.joinpath(*NBEST, name))
    gutenberg = into / "corpora" / "gutenberg"
    first_novels(novels, gutenberg)
    for book in (src / "corpora" / "gutenberg").glob("*.txt"):
        if not (gutenberg / book.name).exists():
            (gutenberg / book.name).symlink_to(book)
    for entry in (src / "corpora").iterdir():
        if entry.name != "gutenberg" and not (into / "corpora" / entry.name).exists():
            (into / "corpora" / entry.name).symlink_to(entry)
    for entry in src.iterdir():
        if entry.name not in ("nbest", "corpora") and not (into / entry.name).exists():
            (into / entry.name).symlink_to(entry)
    return into


def books_text(into: Path, sentences: int = 3000, data: Path | None = None) -> Path:
    """A stand-in for the recipe's ``exp/lm/books.txt`` (stage 1): the first novels'
    sentences, upper case, one a line."""
    from rescorer.lm_models.corpora import book_sentences

    src = data_dir(data) / "corpora" / "gutenberg"
    rows = (src / "titles.tsv").read_text(encoding="utf-8").splitlines()[1:]
    out = into / "books.txt"
    written = 0
    with open(out, "w", encoding="utf-8") as f:
        for row in rows:
            text = (src / row.split("\t")[0]).read_text(encoding="utf-8-sig")
            for words in book_sentences(text[: 400 * sentences]):  # enough text, not a whole book
                f.write(" ".join(words).upper() + "\n")
                written += 1
                if written >= sentences:
                    return out
    return out


def tiny_kenlm(into: Path, order: int = 3, data: Path | None = None) -> Path:
    """A stand-in for the recipe's 4-gram: ``rescorer ngram build`` over the dev_clean
    references (upper case, as the lists)."""
    refs = data_dir(data).joinpath(*NBEST, "dev_clean", "references", "ref_wer.trn")
    text = into / "tiny_lm.txt"
    with open(refs, encoding="utf-8") as fin, open(text, "w", encoding="utf-8") as fout:
        for line in fin:
            fout.write(line.rsplit("\t", 1)[0].strip() + "\n")
    out = into / f"tiny_{order}gram.bin"
    subprocess.run(
        [str(RESCORER), "-q", "ngram", "build", "--text", str(text), "--order", str(order),
         "--discount-fallback", "--memory", "100M", "--out", str(out)],
        check=True, stdout=subprocess.DEVNULL, env=child_env(1),
    )  # fmt: skip
    return out


def recipe_lm(given: Path | None, smoke_run: bool, scratch: Path) -> Path:
    """``given``, else the recipe's 4-gram, else (smoke runs only) a tiny one built in
    ``scratch``; a full run without it stops with how to make it."""
    if given is not None:
        return given
    if (RECIPE_LM / "4gram.bin").exists() and not smoke_run:
        return RECIPE_LM / "4gram.bin"
    if smoke_run:
        return tiny_kenlm(scratch)
    raise SystemExit(
        f"{RECIPE_LM / '4gram.bin'} not found: run `bash recipes/librispeech_nbest/run.sh "
        "--stage 1 --stop-stage 2` first, or pass --lm"
    )
