"""Type held-out sentences into the keyboard page and check it against ``rescorer predict``.

For each context value: a step export with that context folded in (``rescorer export --kind
step``), the first ``--sentences`` test sentences of that context, typed letter by letter into
the page in headless Chromium (drive.mjs). The list the page draws at every position (the empty
box at the sentence start, then after each character) is compared with ``rescorer predict``'s
for the same ``history<TAB>partial word`` line: through the same ONNX file (``--lm onnx:``;
every list must be identical) and through the checkpoint (``--lm torch: --field``; identical,
or, where ONNX Runtime's and PyTorch's float32 arithmetic differ, the same log-probabilities
rank by rank to within ``--tolerance``: near-tied words may swap). The page's latency per
keystroke (input event to list in the DOM, performance.now()) gives the median and p95.
Writes the Markdown results (``RESULTS.md``) and a screenshot of the page (``keyboard_web.png``)
into ``--work``; ``--publish`` copies them to examples/keyboard_web/RESULTS.md and
docs/img/keyboard_web.png (the committed ones: a run changes them only when asked).

    python examples/keyboard_web/measure.py [--publish]   # the keyboard_context recipe's FactorCell

Needs ``bash examples/keyboard_web/setup.sh`` first. The helpers below are also what
tests/examples/test_keyboard_web.py runs the page with.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
RECIPE_EXP = REPO / "recipes" / "keyboard_context" / "exp" / "agnews"
CHROMIUM = Path(os.environ.get("CHROMIUM", "/usr/bin/chromium"))
PUBLISHED = (HERE / "RESULTS.md", REPO / "docs" / "img" / "keyboard_web.png")
TOLERANCE = 1e-4  # rescorer export's parity tolerance (log-probabilities)


def sibling(name: str) -> ModuleType:
    """A module of this folder (manifest.py, serve.py), imported by path."""
    spec = importlib.util.spec_from_file_location(f"keyboard_web_{name}", HERE / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def rescorer() -> list[str]:
    """The toolkit's command line: beside this Python, else on PATH."""
    beside = Path(sys.executable).parent / "rescorer"
    return [str(beside)] if beside.exists() else ["rescorer"]


def run(cmd: Sequence[str], **kwargs) -> subprocess.CompletedProcess:
    """Run a command; a failure raises RuntimeError with the end of its output."""
    done = subprocess.run(list(cmd), capture_output=True, text=True, check=False, **kwargs)
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-20:])
        raise RuntimeError(f"{' '.join(cmd)} failed (exit status {done.returncode}):\n{tail}")
    return done


# -- set-up -------------------------------------------------------------------------------------


def missing_setup() -> str | None:
    """What the page's browser run lacks (None: node, the npm packages and Chromium are there)."""
    if shutil.which("node") is None:
        return "node not found"
    for package in ("onnxruntime-web", "playwright-core"):
        if not (HERE / "node_modules" / package / "package.json").is_file():
            return f"examples/keyboard_web/node_modules/{package} missing"
    if not os.access(CHROMIUM, os.X_OK):
        return f"{CHROMIUM} missing"
    return None


def setup() -> str | None:
    """Run setup.sh when something is missing; None when ready, else why it could not be."""
    if missing_setup() is None:
        return None
    if shutil.which("npm") is None:
        return "npm not found"
    done = subprocess.run(
        ["bash", str(HERE / "setup.sh")], capture_output=True, text=True, timeout=1800
    )
    if done.returncode != 0:
        tail = (done.stdout + done.stderr).strip().splitlines()[-5:]
        return f"setup.sh failed (exit status {done.returncode}): " + " | ".join(tail)
    return missing_setup()


# -- models and text ----------------------------------------------------------------------------


def slug(value: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", value.lower()).strip("_") or "context"


def export_contexts(
    checkpoint: Path, out_dir: Path, field: str, values: Sequence[str]
) -> list[Path]:
    """One step export per context value (``lm_<value>.onnx`` and its vocabulary) in out_dir."""
    out_dir.mkdir(parents=True, exist_ok=True)
    models = []
    for value in values:
        model = out_dir / f"lm_{slug(value)}.onnx"
        run(
            [
                *rescorer(),
                "-q",
                "export",
                str(checkpoint),
                str(model),
                "--kind",
                "step",
                "--context",
                f"{field}={value}",
            ]
        )
        models.append(model)
    return models


def typed_texts(sentence: str) -> list[str]:
    """The box's text at every position of typing ``sentence``: empty, then letter by letter."""
    return [sentence[:i] for i in range(len(sentence) + 1)]


def request_line(text: str) -> str:
    """predict's batch line for the text typed so far: the words before the one being typed,
    a tab, the partial word ("" after a space or in an empty box)."""
    words = text.split()
    if not words or text[-1].isspace():
        return " ".join(words) + "\t"
    return " ".join(words[:-1]) + "\t" + words[-1]


def predict(
    spec: str, texts: Sequence[str], k: int, out: Path, context: dict[str, str] | None = None
) -> list[list[tuple[str, float]]]:
    """``rescorer predict --lm SPEC -k K --input`` over the texts' lines: [(word, logprob)] each."""
    requests = out.with_suffix(".tsv")
    requests.write_text("".join(request_line(t) + "\n" for t in texts), encoding="utf-8")
    fields = [a for f, v in (context or {}).items() for a in ("--field", f"{f}={v}")]
    run(
        [
            *rescorer(),
            "-q",
            "predict",
            "--lm",
            spec,
            *fields,
            "-k",
            str(k),
            "--device",
            "cpu",
            "--input",
            str(requests),
            "--out",
            str(out),
        ]
    )
    lines = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    if len(lines) != len(texts):
        raise RuntimeError(f"{out}: {len(lines)} suggestion lists for {len(texts)} lines")
    return [[(s["word"], s["logprob"]) for s in line["suggestions"]] for line in lines]


# -- the browser --------------------------------------------------------------------------------


def drive(job: dict, work: Path, timeout: float = 1800) -> list[dict]:
    """Run drive.mjs on ``job`` (see its header; ``out`` is set here): a dict per position."""
    out = work / "typed.jsonl"
    job = {**job, "out": str(out), "chromium": str(CHROMIUM)}
    job_path = work / "job.json"
    job_path.write_text(json.dumps(job), encoding="utf-8")
    done = subprocess.run(
        ["node", str(HERE / "drive.mjs"), str(job_path)],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if done.returncode != 0:
        raise RuntimeError(f"drive.mjs failed (exit status {done.returncode}):\n{done.stderr}")
    return [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]


def type_in_browser(
    model_dir: Path,
    runs: Sequence[tuple[str, Sequence[str]]],
    k: int,
    work: Path,
    screenshot: tuple[Path, str, str] | None = None,
) -> list[dict]:
    """Serve the page with the manifest ``model_dir/models.json`` and type ``runs`` ((context
    label, sentences) pairs); ``screenshot``: (PNG, context label, text typed before it)."""
    server, url = sibling("serve").start_server(model_dir)
    try:
        job: dict = {
            "url": f"{url}index.html?manifest=models/models.json&k={k}",
            "runs": [{"context": label, "sentences": list(s)} for label, s in runs],
        }
        if screenshot is not None:
            path, label, text = screenshot
            job["screenshot"] = {"path": str(path), "context": label, "text": text}
        return drive(job, work)
    finally:
        server.shutdown()
        server.server_close()


# -- comparison ---------------------------------------------------------------------------------


def compare(
    page: Sequence[dict],
    reference: Sequence[Sequence[tuple[str, float]]],
    tolerance: float | None = None,
) -> dict:
    """The page's lists against predict's: identical; with a ``tolerance``, near ties (the same
    length and log-probabilities rank by rank within it: near-tied words swapped); and the rest
    (their position texts)."""
    identical = close = 0
    other: list[str] = []
    diff = 0.0
    for row, ref in zip(page, reference, strict=True):
        words = [w for w, _ in ref]
        if row["words"] == words:
            identical += 1
            diff = max(
                [diff, *(abs(a - b) for a, (_, b) in zip(row["logprobs"], ref, strict=True))]
            )
        elif (
            tolerance is not None
            and len(words) == len(row["words"])
            and all(abs(a - b) <= tolerance for a, (_, b) in zip(row["logprobs"], ref, strict=True))
        ):
            close += 1
        else:
            other.append(row["text"])
    return {
        "positions": len(page),
        "identical": identical,
        "near_ties": close,
        "different": other,
        "max_logprob_diff": diff,
    }


def latency(rows: Sequence[dict]) -> dict:
    """Median and p95 (numpy, linear) of the page's ms per keystroke: all keystrokes, those that
    start a word (after a space: a model step) and those inside a word (a completion)."""
    out = {}
    for name, keep in (
        ("all", lambda r: True),
        ("word start", lambda r: r["text"][-1].isspace()),
        ("in a word", lambda r: not r["text"][-1].isspace()),
    ):
        ms = np.array([r["ms"] for r in rows if r["ms"] is not None and keep(r)], dtype=float)
        out[name] = {
            "keystrokes": len(ms),
            "median": float(np.median(ms)) if len(ms) else float("nan"),
            "p95": float(np.percentile(ms, 95)) if len(ms) else float("nan"),
            "max": float(ms.max()) if len(ms) else float("nan"),
        }
    return out


# -- the measurement ----------------------------------------------------------------------------


def heldout_sentences(data: Path, field: str, value: str, n: int) -> list[str]:
    """The first n sentences of test.tsv whose context (test.ctx.jsonl) has field = value."""
    contexts = {}
    for line in (data / "test.ctx.jsonl").read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        contexts[record["utt"]] = record["fields"].get(field)
    out = []
    for line in (data / "test.tsv").read_text(encoding="utf-8").splitlines():
        utt, text = line.split("\t", 1)
        if contexts.get(utt) == value:
            out.append(" ".join(text.split()))
            if len(out) == n:
                break
    return out


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} cores, {platform.system()} {platform.release()}"


def versions() -> str:
    def version(cmd: list[str]) -> str:
        try:
            return subprocess.run(cmd, capture_output=True, text=True).stdout.strip()
        except OSError:
            return "?"

    npm = {
        p: json.loads((HERE / "node_modules" / p / "package.json").read_text())["version"]
        for p in ("onnxruntime-web", "playwright-core")
    }
    return (
        f"{version([str(CHROMIUM), '--version'])} (headless), onnxruntime-web "
        f"{npm['onnxruntime-web']} (wasm, 1 thread), playwright-core {npm['playwright-core']}, "
        f"Node {version(['node', '--version'])}"
    )


def results_page(args: argparse.Namespace, table: list[dict], lat: dict, seconds: float) -> str:
    command = "python examples/keyboard_web/measure.py " + " ".join(
        shlex.quote(a) for a in sys.argv[1:]
    )
    total = {key: sum(row[key] for row in table) for key in ("positions", "sentences")}
    onnx_same = sum(r["onnx"]["identical"] for r in table)
    torch_same = sum(r["torch"]["identical"] for r in table)
    torch_close = sum(r["torch"]["near_ties"] for r in table)
    lines = [
        "# The keyboard page in a browser: the same suggestions as `rescorer predict`",
        "",
        f"Made by `examples/keyboard_web/measure.py` ({seconds:.0f} s). The model: "
        f"`{rel(args.checkpoint)}` (the `keyboard_context` recipe's AG News FactorCell, the "
        f"news topic as context), exported once per context value with `rescorer export --kind "
        f"step --context {args.field}=VALUE`. Typed: the first {args.sentences} test sentences "
        f"of each topic (`{rel(args.data)}/test.tsv`, held out from training), each in its own "
        "topic's model, letter by letter; a position is the empty box at the sentence start or "
        f"the box after a character. k = {args.k}.",
        "",
        "| context | sentences | positions | identical to predict `onnx:` | identical to predict "
        f"`torch:` | `torch:` within {args.tolerance:g} (near ties) | max \\|log p\\| difference "
        "to `onnx:` |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in table:
        lines.append(
            f"| {r['context']} | {r['sentences']} | {r['positions']} | {r['onnx']['identical']} "
            f"| {r['torch']['identical']} | {r['torch']['near_ties']} | "
            f"{r['onnx']['max_logprob_diff']:.1e} |"
        )
    lines += [
        f"| all | {total['sentences']} | {total['positions']} | {onnx_same} | {torch_same} | "
        f"{torch_close} | {max(r['onnx']['max_logprob_diff'] for r in table):.1e} |",
        "",
        "The log-probability difference is that of the identical lists' words (predict writes "
        "them rounded to 6 decimals).",
        "",
        "Latency per keystroke in the page, from the input event's handler to the list in the DOM "
        "(performance.now(), cross-origin isolated: 5 us resolution):",
        "",
        "| keystrokes | count | median ms | p95 ms | max ms |",
        "|---|---|---|---|---|",
    ]
    for name, s in lat.items():
        lines.append(
            f"| {name} | {s['keystrokes']} | {s['median']:.3f} | {s['p95']:.3f} | {s['max']:.2f} |"
        )
    lines += [
        "",
        "A keystroke after a space runs the model one step (the word just finished); one inside a "
        "word ranks the completions of the distribution computed at the word's start.",
        "",
        "## Run",
        "",
        f"- Command: `{command.strip()}`",
        f"- Date: {datetime.date.today().isoformat()}",
        f"- Machine: {machine()} (shared with other work)",
        f"- Browser: {versions()}",
        "",
    ]
    return "\n".join(lines)


def rel(path: Path) -> str:
    try:
        return path.resolve().relative_to(REPO).as_posix()
    except ValueError:
        return str(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", type=Path, default=RECIPE_EXP / "factor" / "best")
    parser.add_argument(
        "--data", type=Path, default=RECIPE_EXP / "data", help="test.tsv and test.ctx.jsonl"
    )
    parser.add_argument("--field", default="topic", help="the context field (default topic)")
    parser.add_argument("--contexts", default="World,Sports", help="values, comma-separated")
    parser.add_argument("--sentences", type=int, default=10, help="sentences per context")
    parser.add_argument("-k", type=int, default=5)
    parser.add_argument("--tolerance", type=float, default=TOLERANCE)
    parser.add_argument(
        "--work", type=Path, default=RECIPE_EXP / "web", help="exports and lists (git-ignored)"
    )
    parser.add_argument(
        "--screenshot-context", default=None, help="context of the screenshot (default: the last)"
    )
    parser.add_argument(
        "--screenshot-text", default="the striker scored two ", help="typed for the screenshot"
    )
    parser.add_argument(
        "--publish",
        action="store_true",
        help="copy RESULTS.md and the screenshot to examples/keyboard_web/ and docs/img/",
    )
    args = parser.parse_args()
    why = setup()
    if why is not None:
        sys.exit(f"measure.py: the browser is not set up: {why}")
    start = time.perf_counter()
    values = [v.strip() for v in args.contexts.split(",") if v.strip()]
    work = args.work
    models_dir = work / "models"
    print(f"exporting {len(values)} step models to {models_dir}", flush=True)
    models = export_contexts(args.checkpoint, models_dir, args.field, values)
    sibling("manifest").write_manifest(models_dir / "models.json", models, args.k)
    sentences = {v: heldout_sentences(args.data, args.field, v, args.sentences) for v in values}
    for value, found in sentences.items():
        if len(found) < args.sentences:
            sys.exit(f"only {len(found)} test sentences with {args.field}={value}")
    print("typing in the browser", flush=True)
    results = work / "RESULTS.md"
    screenshot = work / "keyboard_web.png"
    rows = type_in_browser(
        models_dir,
        [(v, sentences[v]) for v in values],
        args.k,
        work,
        screenshot=(screenshot, args.screenshot_context or values[-1], args.screenshot_text),
    )
    table = []
    for value, model in zip(values, models, strict=True):
        page = [r for r in rows if r["context"] == value]
        texts = [t for s in sentences[value] for t in typed_texts(s)]
        if [r["text"] for r in page] != texts:
            sys.exit(f"{value}: the page's positions are not the texts typed")
        print(f"{value}: predict over {len(texts)} positions (onnx:, torch:)", flush=True)
        context = {args.field: value}
        onnx = predict(
            f"onnx:{model}", texts, args.k, work / f"predict_onnx_{slug(value)}.jsonl", context
        )
        torch = predict(
            f"torch:{args.checkpoint}",
            texts,
            args.k,
            work / f"predict_torch_{slug(value)}.jsonl",
            context,
        )
        table.append(
            {
                "context": value,
                "sentences": len(sentences[value]),
                "positions": len(page),
                "onnx": compare(page, onnx),
                "torch": compare(page, torch, args.tolerance),
            }
        )
    lat = latency(rows)
    seconds = time.perf_counter() - start
    results.write_text(results_page(args, table, lat, seconds), encoding="utf-8")
    for r in table:
        differing = r["onnx"]["different"] + r["torch"]["different"]
        print(
            f"{r['context']}: {r['positions']} positions; identical to predict onnx: "
            f"{r['onnx']['identical']}, torch: {r['torch']['identical']} (near ties "
            f"{r['torch']['near_ties']}); differing: {differing[:5] if differing else 'none'}"
        )
    print(
        f"latency per keystroke: median {lat['all']['median']:.3f} ms, p95 "
        f"{lat['all']['p95']:.3f} ms over {lat['all']['keystrokes']} keystrokes"
    )
    print(f"wrote {rel(results)} and {rel(screenshot)}")
    if args.publish:
        shutil.copyfile(results, PUBLISHED[0])
        shutil.copyfile(screenshot, PUBLISHED[1])
        print(f"published them as {rel(PUBLISHED[0])} and {rel(PUBLISHED[1])}")
    bad = [r["context"] for r in table if r["onnx"]["different"] or r["torch"]["different"]]
    if bad:
        sys.exit(f"lists that differ from predict in: {bad} (see {rel(results)})")


if __name__ == "__main__":
    main()
