"""Commands over a JSONL set work a chunk at a time: the outputs do not depend on the chunks.

Each command runs on the same lists with one chunk (the default size) and with chunks of a few
hypotheses, from the JSONL (read lazily) and from the ESPnet folder it was converted from (read
whole, handed out in the same chunks); every output file and every printed line must be the same.
A chunk dropped, repeated, reordered or given another chunk's references changes them.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from click.testing import CliRunner

from rescorer.cli.main import main
from rescorer.core import constants
from tests.conftest import write_espnet_set

WORDS = ["a", "b", "c", "zz"]


def make_set(root: Path, n: int = 60, seed: int = 0) -> tuple[Path, Path]:
    """An ESPnet set of ``n`` random lists and a shuffled Kaldi reference text for it."""
    rng = random.Random(seed)
    utts = []
    for i in range(n):
        hyps = []
        for _ in range(rng.randint(1, 5)):
            words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(0, 6)))
            hyps.append((words, -rng.random() * 10, -rng.random() * 10, -rng.random() * 10))
        utts.append((f"spk{i % 4}-ch-{i:04d}", hyps))
    write_espnet_set(root / "set", utts)
    ids = [u for u, _ in utts]
    rng.shuffle(ids)  # reports follow the references' order, not the lists'
    ref = root / "ref.txt"
    ref.write_text(
        "".join(f"{u} {' '.join(rng.choice(WORDS[:3]) for _ in range(3))}\n" for u in ids)
    )
    return root / "set", ref


def run(args: list[object]) -> str:
    result = CliRunner().invoke(main, ["-q", *map(str, args)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def outputs(work: Path, nbest: Path, ref: Path, arpa: Path) -> dict[str, str]:
    """Everything the streamed commands print and write, by name."""
    work.mkdir()
    got: dict[str, str] = {}
    scored = work / "scored.jsonl"
    got["score"] = run(["score", "--nbest", nbest, "--ref", ref, "--lm", f"bi=kenlm:{arpa}",
                        "--out", scored])  # fmt: skip
    got["scored.jsonl"] = scored.read_text()
    part = work / "part.jsonl"
    got["shard"] = run(["score", "--nbest", nbest, "--lm", f"bi=kenlm:{arpa}", "--shard", "2/3",
                        "--out", part])  # fmt: skip
    got["part.jsonl"] = part.read_text()
    got["part.jsonl.shard.json"] = (work / "part.jsonl.shard.json").read_text()
    per_utt = work / "per_utt.txt"
    got["wer"] = run(["wer", "--nbest", scored, "--oracle", "--per-utt", per_utt])
    got["per_utt"] = per_utt.read_text()
    weights = work / "w.json"
    tuned = run(["tune", "--nbest", scored, "--features", "decoder,ctc,bi", "--restarts", "2",
                 "--out", weights])  # fmt: skip
    got["tune"] = tuned.rsplit("s)", 1)[-1]  # the line with the search time left out
    got["weights"] = "\n".join(
        line for line in weights.read_text().splitlines() if '"seconds"' not in line
    )
    out = work / "rescored"
    got["rescore"] = run(["rescore", "--nbest", nbest, "--ref", ref, "--lm", f"bi=kenlm:{arpa}",
                          "--weights", weights, "--out", out])  # fmt: skip
    for name in ("nbest.jsonl", "1best.txt", "wer.txt"):
        got[name] = (out / name).read_text()
    converted = work / "converted.jsonl"
    run(["convert", "--nbest", scored, "--to", "jsonl", "--out", converted])
    got["convert"] = converted.read_text()
    return {name: text.replace(str(work), "WORK").replace(str(nbest), "NBEST")
            for name, text in got.items()}  # fmt: skip


def test_outputs_do_not_depend_on_the_chunks(
    tmp_path: Path, tiny_arpa: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder, ref = make_set(tmp_path)
    jsonl = tmp_path / "set.jsonl"
    run(["convert", "--nbest", folder, "--to", "jsonl", "--out", jsonl])
    one_chunk = outputs(tmp_path / "one", jsonl, ref, tiny_arpa)
    assert one_chunk["convert"] == one_chunk["scored.jsonl"]
    assert "oracle over 5-best" in one_chunk["wer"]
    monkeypatch.setattr(constants, "CHUNK_HYPOTHESES", 7)  # about 3 lists per chunk
    chunked = outputs(tmp_path / "chunked", jsonl, ref, tiny_arpa)
    from_folder = outputs(tmp_path / "folder", folder, ref, tiny_arpa)
    for name, text in one_chunk.items():
        assert chunked[name] == text, name
        assert from_folder[name] == text, name
