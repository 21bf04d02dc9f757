"""Every bench runs at HEAD: each script once at its tiny size (``--smoke``), on the real data cut
to 20 lists a set (``$RESCORER_DATA`` pointed at a small copy), its report written to a temporary
file (never to ``bench/results/``). A bench that needs a model a fresh checkout lacks (the
LibriSpeech recipe's 4-gram, its novels text, its scored lists) builds a tiny one itself.

The figures of a smoke run mean nothing; the test checks that the bench runs to its end and that
its report has the header every results file has (machine, load, command, figures' kinds).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.paths import REPO

BENCH = REPO / "bench"
RESULTS = BENCH / "results"
sys.path.insert(0, str(BENCH))

# script -> whether its smoke run is too long for the default run (several processes each
# importing torch, a local Ray instance, torchrun, the pre-issue-20 tree exported and run)
CASES = {
    "bench_arch.py": False,
    "bench_context_scoring.py": False,
    "bench_context_text.py": False,
    "bench_hf.py": False,
    "bench_kenlm.py": False,
    "bench_kenlm_cli.py": False,
    "bench_lstm.py": False,
    "bench_memory.py": False,
    "bench_onnx.py": False,
    "bench_output.py": False,
    "bench_posterior.py": False,
    "bench_prefetch.py": False,
    "bench_scoring.py": True,
    "bench_shard.py": True,
    "bench_startup.py": False,
    "bench_train_data.py": True,
    "bench_tune.py": False,
}
NOT_BENCHES = {"benchlib.py", "long_nbest.py"}  # the shared helpers, a list generator


@pytest.fixture(scope="module")
def tiny_data(data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    import benchlib

    if not (data_dir / "nbest" / "librispeech-espnet" / "dev_other").is_dir():
        pytest.skip("LibriSpeech ESPnet N-best lists not found (set RESCORER_DATA)")
    return benchlib.tiny_data_dir(tmp_path_factory.mktemp("bench_data"), utterances=20)


def results_state() -> dict[str, float]:
    return {p.name: p.stat().st_mtime for p in RESULTS.glob("*")}


def decoy_recipe_exp(root: Path) -> Path:
    """A LibriSpeech recipe exp/ whose outputs a bench fails on if it reads them: a smoke run
    is on the tiny data, and the recipe's outputs (made from the full data, e.g. by the
    README's main job before the tests) do not belong to it."""
    exp = root / "decoy_recipe_exp"
    for rel in (
        "lm/4gram.bin",
        "lm/books.txt",
        "3_4gram/dev_other/1best.txt",
        "scored/dev_clean.jsonl",
        "scored_lstm/dev_clean.jsonl",
    ):
        path = exp / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("not the tiny data's: a smoke run must not read this\n", encoding="utf-8")
    return exp


def run(args: list[str], data: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "RESCORER_DATA": str(data)}
    env["RESCORER_BENCH_RECIPE_EXP"] = str(decoy_recipe_exp(data.parent))
    env.pop("RESCORER_THREADS", None)  # the benches pin their own
    return subprocess.run(
        [sys.executable, *args], cwd=REPO, env=env, capture_output=True, text=True,
        timeout=timeout, check=False,
    )  # fmt: skip


def test_every_bench_has_a_smoke_case() -> None:
    scripts = {p.name for p in BENCH.glob("*.py")} - NOT_BENCHES
    assert scripts == set(CASES), "add the new bench to CASES (and give it --smoke)"


def test_every_results_file_names_its_figures() -> None:
    missing = [p.name for p in RESULTS.glob("*.md") if "- Figures:" not in p.read_text()]
    assert not missing, f"results files without a '- Figures:' line (ratios vs absolute): {missing}"


@pytest.mark.parametrize(
    "script",
    [pytest.param(s, marks=pytest.mark.slow) if slow else s for s, slow in CASES.items()],
)
def test_bench_smoke(script: str, tiny_data: Path, tmp_path: Path) -> None:
    before = results_state()
    out = tmp_path / "report.md"
    done = run([str(BENCH / script), "--smoke", "--out", str(out)], tiny_data)
    assert done.returncode == 0, f"{script} --smoke failed:\n{done.stderr[-4000:]}"
    text = out.read_text(encoding="utf-8")
    for field in ("- Machine:", "load average", "- Command:", "--smoke", "- Figures:"):
        assert field in text, f"{script}: no {field!r} in its report"
    assert results_state() == before, f"{script} --smoke wrote into bench/results/"


def test_long_nbest_smoke(tiny_data: Path, tmp_path: Path) -> None:
    out = tmp_path / "long.jsonl"
    done = run([str(BENCH / "long_nbest.py"), "--lists", "2", "--size", "50", "--out", str(out)],
               tiny_data)  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    assert len(out.read_text(encoding="utf-8").splitlines()) == 2
