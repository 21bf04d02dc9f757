"""The LibriSpeech recipe's context stages (run.sh with CTX=1, issue 16) end to end on a small
copy of the real data: two chapters of each dev set, a 4-gram of three novels, a tiny context
LM and its twin. Every row of the context table is tuned and rescored, the context LM is scored
both with the previous utterances and without them, and the repository's tables stay as
they are (the results go to RESULTS=...)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path

import pytest
import torch

from rescorer.contexts import read_contexts
from tests.paths import REPO

pytestmark = pytest.mark.slow

RECIPE = REPO / "recipes" / "librispeech_nbest"
RESCORER = REPO / ".venv" / "bin" / "rescorer"
BOOKS = ("Anon_Clara_1864.txt", "Barclay_Ladies_1917.txt", "Barclay_Postern_1911.txt")


def subset(src: Path, dst: Path, chapters: int) -> list[str]:
    """The first ``chapters`` chapters of an ESPnet set, each of its files cut to their
    utterances (``result_wer.txt``, a whole-set summary, is left out); their ids, in order."""
    utts: list[str] = []
    seen: list[str] = []
    for line in (src / "utt2spk").read_text().splitlines():
        utt, chapter = line.split()
        if chapter not in seen:
            seen.append(chapter)
        if len(seen) > chapters:
            break
        utts.append(utt)
    keep = set(utts)
    for f in sorted(src.rglob("*")):
        if f.is_dir() or f.name == "result_wer.txt":
            continue
        out = dst / f.relative_to(src)
        out.parent.mkdir(parents=True, exist_ok=True)
        if f.suffix == ".trn":  # "... (SPEAKER-CHAPTER-SPEAKER-CHAPTER-INDEX)"
            lines = [
                line
                for line in f.read_text().splitlines()
                if "-".join(line.rsplit("(", 1)[1].rstrip(")").split("-")[-3:]) in keep
            ]
        else:
            lines = [line for line in f.read_text().splitlines() if line.split(" ", 1)[0] in keep]
        out.write_text("".join(f"{line}\n" for line in lines))
    return utts


def tiny(conf_name: str) -> dict:
    """A lease config made tiny: the same data section (and context), a 1x16 LSTM, 8 steps."""
    conf = json.loads((RECIPE / "conf" / "lease" / conf_name).read_text())
    conf["data"] |= {"vocab_size": 3000, "split": [0.9, 0.1, 0.0]}
    conf["model"] |= {"embed_dim": 16, "hidden_dim": 16, "num_layers": 1, "num_classes": 4,
                      "shortlist": 500}  # fmt: skip
    if "context_dim" in conf["model"]:
        conf["model"]["context_dim"] = 8
    conf["train"] |= {"epochs": 1, "batch_tokens": 2000, "max_steps_per_epoch": 8,
                      "device": "cpu", "max_seconds": None}  # fmt: skip
    return conf


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_context_rows_end_to_end(tmp_path: Path, data_dir: Path, espnet_dir: Path) -> None:
    data = tmp_path / "data"
    (data / "corpora" / "gutenberg").mkdir(parents=True)
    for book in BOOKS:
        (data / "corpora" / "gutenberg" / book).symlink_to(
            data_dir / "corpora" / "gutenberg" / book
        )
    first = {}
    for name in ("dev_clean", "dev_other"):
        utts = subset(espnet_dir / name, data / "nbest" / "librispeech-espnet" / name, 2)
        first[name] = {u for i, u in enumerate(utts) if i == 0 or utts[i - 1][:-5] != u[:-5]}
    exp, results = tmp_path / "exp", tmp_path / "RESULTS.md"
    env = {**os.environ, "RESCORER_DATA": str(data), "EXP": str(exp), "RESULTS": str(results),
           "OMP_NUM_THREADS": "1", "RESTARTS": "1"}  # fmt: skip
    tables = [digest(RECIPE / "RESULTS.md"), digest(RECIPE / "README.md")]

    def run(*args: str, **more: str) -> None:
        done = subprocess.run([*args], env=env | more, capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, done.stderr[-3000:]

    run("bash", str(RECIPE / "run.sh"), "--stage", "1", "--stop-stage", "2")
    models = {}
    confs = {"previous": tiny("previous.json"), "word": tiny("word.json")}
    confs["previous"]["data"]["previous"]["encoder"] = "hash:32"
    for name, conf in confs.items():
        (tmp_path / f"{name}.json").write_text(json.dumps(conf))
        run(str(RESCORER), "-q", "train", str(tmp_path / f"{name}.json"), "--data-dir",
            str(exp / "lm"), "--out", str(exp / name))  # fmt: skip
        models[name] = exp / name / "best"
    run("bash", str(RECIPE / "run.sh"), "--stage", "4", CTX="1",
        CTX_MODEL=str(models["previous"]), CTX_BASE=str(models["word"]))  # fmt: skip

    # the context LM scored with the previous utterances (ctx) and without (ctx0)
    check_given_and_withheld(exp / "scored_ctx", first, "ctx", "ctx0",
                             {"nb", "nb_oov", "ctx", "ctx_oov", "ctx0", "ctx0_oov"})  # fmt: skip
    text = results.read_text()
    rows = ("3N", "3C0", "3C", "4N", "4C0", "4C", "4C2", "3G", "3K", "4K", "4K2", "3CK", "4CK")
    for row in (*rows, "4G", "4NG", "4CG"):
        assert f"\n| {row} | " in text, row
    # the context LM under a cache reads `previous` itself and the chapter so far as `cache`
    both = read_contexts(exp / "context" / "dev_other.both.jsonl")
    cached = read_contexts(exp / "context" / "dev_other.cache.jsonl")
    for utt, record in both.items():
        assert record.get("cache") == cached[utt].get("previous")
    for pair in (
        "row 3C vs row 3C0",
        "row 4C vs row 4C0",
        "row 3C vs row 3N",
        "row 3CK vs row 3C0",
        "row 4CG vs row 4NG",
    ):
        assert f"### {pair}\n" in text, pair
    assert "the context LM, previous utterances from the references (upper bound)" in text
    assert f"CTX_MODEL={os.path.relpath(models['previous'], RECIPE)}" in text
    # RESULTS elsewhere: the recipe's own table and README are not touched
    assert [digest(RECIPE / "RESULTS.md"), digest(RECIPE / "README.md")] == tables

    # CUE=1: a tiny subword CUE pair (the previous sentence as context, and the control)
    cue = tiny_cue_pair(exp / "lm" / "books.txt", tmp_path / "cue")
    run("bash", str(RECIPE / "run.sh"), "--stage", "4", CTX="1", CUE="1",
        CTX_MODEL=str(models["previous"]), CTX_BASE=str(models["word"]),
        CUE_MODEL=str(cue["prev"]), CUE_BASE=str(cue["none"]))  # fmt: skip
    check_given_and_withheld(exp / "scored_cue", first, "cu", "cu0", {"cun", "cu", "cu0"})
    assert "cu_oov" not in (exp / "scored_cue" / "dev_other.jsonl").read_text()  # subword
    prev = read_contexts(exp / "context" / "dev_other.prev1.jsonl")
    # one earlier utterance, as the field the model reads
    assert all(set(r) >= {"prev"} and "\n" not in r["prev"] for r in prev.values() if "prev" in r)
    text = results.read_text()
    for row in ("3UN", "3U0", "3U", "4UN", "4U0", "4U", "4U2", "4G", "4UG", "3C", "4CK"):
        assert f"\n| {row} | " in text, row
    for pair in (
        "row 3U vs row 3U0",
        "row 4U vs row 4UN",
        "row 4U2 vs row 4U",
        "row 4UG vs row 4G",
    ):
        assert f"### {pair}\n" in text, pair
    assert "the CUE model, the previous utterance from the references (upper bound)" in text
    assert "context: the previous sentence as a `hash:16` vector" in text


def check_given_and_withheld(
    scored: Path, first: dict[str, set[str]], given: str, withheld: str, columns: set[str]
) -> None:
    """A context model scored with the previous utterances (``given``) and without
    (``withheld``): the same score where an utterance has none (a chapter's first, ``first``),
    another where it has them; every hypothesis has ``columns``."""
    for name in ("dev_clean", "dev_other"):
        same = differ = 0
        for line in (scored / f"{name}.jsonl").read_text().splitlines():
            utt = json.loads(line)
            for hyp in utt["hyps"]:
                s = hyp["scores"]
                assert columns <= set(s)
                if utt["utt"] in first[name]:
                    assert s[given] == pytest.approx(s[withheld], abs=1e-4)
                    same += 1
                else:
                    differ += abs(s[given] - s[withheld]) > 1e-3
        assert same and differ
        assert not (scored / f"{name}.given.jsonl").exists()


def tiny_cue_pair(books: Path, out: Path) -> dict[str, Path]:
    """Two tiny subword CUE checkpoints over pieces of ``books``: ``prev`` reads the field
    ``prev`` (a hashed vector), ``none`` no field; random weights (the recipe's plumbing is
    under test, not the model)."""
    from rescorer.lm_models.cue.model import CUELM, CUEConfig, CUEModel, SentenceLMConfig
    from rescorer.lm_models.text_encoders import HashEmbedder
    from rescorer.lm_models.tokenizer import SubwordTokenizer, TokenizerOptions
    from rescorer.lm_models.vocab import Vocabulary

    lines = [line.split() for line in books.read_text().splitlines()[:3000] if line.strip()]
    tok = SubwordTokenizer.train(lines, TokenizerOptions(vocab_size=400))
    paths = {}
    for name, fields in (("prev", (("prev", "previous sentence"),)), ("none", ())):
        sentence = SentenceLMConfig(vocab_size=len(tok), dim=16, layers=1, heads=2, ffn_dim=32)
        config = CUEConfig(
            vocab_size=len(tok), sentence=sentence, dim=16, decoder_layers=1, decoder_heads=2,
            decoder_ffn_dim=32, context_dim=16, context_heads=2, embedder="hash:16",
            context_fields=fields, proxy_hidden=16, proxy_dim=4, dropout=0.0,
        )  # fmt: skip
        torch.manual_seed(0)
        paths[name] = out / name
        CUELM(CUEModel(config), Vocabulary(tok.pieces), HashEmbedder(16), tok).save(paths[name])
    return paths
