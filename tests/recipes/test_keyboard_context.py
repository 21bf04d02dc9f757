"""The keyboard-with-context recipe (recipes/keyboard_context, issue 49): its data stage on the
real AG News (fast), and the whole recipe at a tiny size (slow): a few hundred documents, LSTMs
of 16 units trained for a few steps, ten test sentences typed. Its results go under a temporary
EXP, and the recipe folder's tracked files stay as they are."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rescorer.lm_models.corpora import tokenize
from tests.paths import REPO

RECIPE = REPO / "recipes" / "keyboard_context"
PREPARE = RECIPE / "local" / "prepare.py"


def prepare(data_dir: Path, out: Path, corpus: str, docs: int) -> dict:
    subprocess.run(
        [
            sys.executable,
            str(PREPARE),
            str(data_dir),
            str(out),
            "--corpus",
            corpus,
            "--max-docs",
            str(docs),
            "--vocab-size",
            "2000",
        ],
        check=True,
        capture_output=True,
    )
    return json.loads((out / "stats.json").read_text())


def jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_agnews_data_split_by_document_with_the_topic_as_context(data_dir, tmp_path):
    stats = prepare(data_dir, tmp_path, "agnews", 400)
    n_train, n_dev, n_test = stats["documents"]
    assert n_train + n_dev + n_test == 400 and 35 <= n_dev <= 45 and 35 <= n_test <= 45
    train_ids = {d["id"] for d in jsonl(tmp_path / "train.jsonl")}
    dev_ids = {d["id"] for d in jsonl(tmp_path / "dev.jsonl")}
    test_ids = [line.split("\t")[0] for line in (tmp_path / "test.tsv").read_text().splitlines()]
    contexts = jsonl(tmp_path / "test.ctx.jsonl")
    assert [c["utt"] for c in contexts] == test_ids  # one context per typed sentence, same order
    assert len(test_ids) == stats["test_sentences"] == n_test  # a sentence per article
    docs = {t.split("#")[0] for t in test_ids}
    assert not docs & (train_ids | dev_ids)  # split by document
    topics = {c["fields"]["topic"] for c in contexts}
    assert topics == {"World", "Sports", "Business", "Sci/Tech"}  # stratified
    vocab = (tmp_path / "vocab.txt").read_text().split()
    assert len(vocab) == stats["vocab"] <= 2000 - 3
    # every system predicts over the same words: the most frequent training words
    assert "the" in vocab
    # the LSTM's jsonl reader tokenises the text again: it must find the words the 4-gram and
    # the keyboard see
    for doc in jsonl(tmp_path / "train.jsonl"):
        assert all(tokenize(s) == s.split() for s in doc["text"])


def test_previous_sentence_context_is_the_document_so_far(data_dir, tmp_path):
    prepare(data_dir, tmp_path, "agnews_prev", 400)
    rows = [line.split("\t") for line in (tmp_path / "test.tsv").read_text().splitlines()]
    contexts = {c["utt"]: c["fields"] for c in jsonl(tmp_path / "test.ctx.jsonl")}
    assert rows and all(not sid.endswith("#0") for sid, _ in rows)  # a first sentence has none
    for sid, _ in rows:
        assert set(contexts[sid]) == {"previous"} and contexts[sid]["previous"].strip()


def tracked_digests() -> dict[str, str]:
    return {
        str(p.relative_to(RECIPE)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in RECIPE.rglob("*")
        if p.is_file() and "exp" not in p.relative_to(RECIPE).parts
    }


def tiny_conf(dst: Path) -> None:
    dst.mkdir()
    for src in (RECIPE / "conf").glob("*.json"):
        conf = json.loads(src.read_text())
        conf["data"]["vocab_size"] = 2000
        conf["model"].update(embed_dim=16, hidden_dim=16, rank=2, shortlist=200)
        conf["train"].update(epochs=1, max_steps_per_epoch=3, batch_tokens=256)
        (dst / src.name).write_text(json.dumps(conf))


@pytest.mark.slow
def test_tiny_recipe_end_to_end(data_dir, tmp_path):
    before = tracked_digests()
    tiny_conf(tmp_path / "conf")
    env = {
        **os.environ,
        "RESCORER_DATA": str(data_dir),
        "EXP": str(tmp_path / "exp"),
        "CONF": str(tmp_path / "conf"),
        "CORPORA": "agnews agnews_prev",
        "LIMIT": "10",
        "MAX_DOCS": "300",
    }
    subprocess.run(
        ["bash", str(RECIPE / "run.sh"), "--stage", "1", "--stop-stage", "7"],
        check=True,
        env=env,
        capture_output=True,
    )
    exp = tmp_path / "exp"
    systems = {p.stem for p in (exp / "agnews" / "eval").glob("*.json")}
    assert {"4gram", "unadapted", "factor", "factor_nocontext", "concat"} <= systems
    assert any(s.startswith("4gram_") for s in systems)  # the interpolated system
    assert {p.stem for p in (exp / "agnews_prev" / "eval").glob("*.json")} >= {
        "unadapted",
        "factor",
        "factor_nocontext",
        "unadapted_cache",  # the cache of the previous sentences, lambda tuned on dev
        "factor_cache",
        "4gram_factor_cache",  # the best context system with its cache, with the 4-gram
    }
    for mode in ("unadapted", "factor"):
        cache = json.loads((exp / "agnews_prev" / "cache" / f"{mode}.json").read_text())
        assert cache["base"] == f"{mode}=torch:../{mode}/best" and 0 < cache["lambda"] < 1
    prev = json.loads((exp / "agnews_prev" / "compare.json").read_text())
    assert {("unadapted", "unadapted_cache"), ("factor", "factor_cache")} <= {
        (c["a"], c["b"]) for c in prev["comparisons"]
    }
    cmp = json.loads((exp / "agnews" / "compare.json").read_text())
    pairs = {(c["a"], c["b"]) for c in cmp["comparisons"]}
    assert ("unadapted", "factor") in pairs and ("factor_nocontext", "factor") in pairs
    assert set(cmp["ks_by_value"]) <= {"World", "Sports", "Business", "Sci/Tech"}
    # where in a sentence the context saves: the bands' shares sum to the k=3 difference
    diff = next(c["difference"] for c in cmp["comparisons"]
                if (c["a"], c["b"], c["k"]) == ("unadapted", "factor", 3))  # fmt: skip
    by_pos = next(r for r in cmp["ks_by_position"] if r["b"] == "factor")
    assert by_pos["bands"][0]["positions"] == "1"
    assert sum(b["contribution"] for b in by_pos["bands"]) == pytest.approx(diff)
    assert (exp / "agnews" / "compare" / "unadapted_vs_factor.txt").read_text().strip()
    page = (exp / "RESULTS.md").read_text()
    assert "## AG News, news topic as context" in page and "| system | KS k=1" in page
    assert "Acceptance checks" in page
    assert ", with context against the Unadapted LSTM (`keyboard-compare --by-position`" in page
    assert "by word position, LSTM Unadapted + cache of the previous sentences against" in page
    assert "| LSTM Unadapted + cache of the previous sentences |" in page
    assert "with a cache of the previous sentences over the same LSTM without them" in page
    assert "| LSTM | dev ppl | with the cache | change | lambda | min_chars |" in page
    # the best context model exported per topic types as torch (its keystrokes, every sentence)
    onnx = json.loads((exp / "agnews" / "onnx" / "summary.json").read_text())
    assert {v["value"] for v in onnx["values"]} <= {"World", "Sports", "Business", "Sci/Tech"}
    assert sum(v["sentences"] for v in onnx["values"]) == 10
    assert all(v["identical"] == v["sentences"] for v in onnx["values"])
    assert "types as torch on every test sentence: 10 of 10: **met**" in page
    assert not (exp / "agnews_prev" / "onnx").exists()  # a previous-sentence context: not folded
    assert tracked_digests() == before  # without --publish the recipe folder is untouched
