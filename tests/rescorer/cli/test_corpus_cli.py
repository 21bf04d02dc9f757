"""``rescorer corpus shard`` / ``corpus check`` and ``rescorer train --train-shards``
(CliRunner)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner, Result

from rescorer.cli.main import main
from tests.lm_models.lstm.test_train import write_corpus
from tests.paths import REPO


def run(*args: object) -> Result:
    return CliRunner().invoke(main, ["-q", *map(str, args)])


def test_shard_check_and_train_from_the_shards(tmp_path: Path) -> None:
    corpus = write_corpus(tmp_path / "train.jsonl", 20, 0)
    write_corpus(tmp_path / "dev.jsonl", 6, 1)
    result = run("corpus", "shard", corpus, tmp_path / "shards", "--shards", 2)
    assert result.exit_code == 0, result.output
    assert result.output.startswith(f"wrote 2 jsonl shards to {tmp_path / 'shards'}: 20 lines,")
    result = run("corpus", "check", tmp_path / "shards")
    assert result.exit_code == 0 and result.output.endswith("words: ok\n"), result.output
    config = {
        "data": {"corpus": "jsonl", "path": "unused.jsonl", "dev": "dev.jsonl",
                 "context_fields": ["topic"], "vocab_size": 50},
        "model": {"mode": "concat", "embed_dim": 8, "hidden_dim": 8, "context_dim": 2,
                  "context_embed_dim": 2},
        "train": {"epochs": 1, "batch_tokens": 200, "device": "cpu"},
    }  # fmt: skip
    (tmp_path / "c.json").write_text(json.dumps(config))
    args = ["train", tmp_path / "c.json", "--data-dir", tmp_path, "--out", tmp_path / "m"]
    result = run(*args, "--train-shards", tmp_path / "shards")
    assert result.exit_code == 0, result.output
    assert "best dev perplexity" in result.output
    split = json.loads((tmp_path / "m" / "split.json").read_text())
    assert split["train_shards"] == str(tmp_path / "shards") and len(split["dev"]) == 6
    # a relative --train-shards is a folder here (where it was checked to exist), not under the
    # data folder: the --help example `--train-shards shards/` with another --data-dir
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "dev.jsonl").write_text((tmp_path / "dev.jsonl").read_text())
    here = os.getcwd()
    os.chdir(tmp_path)
    try:
        rel = ["train", "c.json", "--data-dir", "elsewhere", "--out", "m2"]
        result = run(*rel, "--train-shards", "shards")
    finally:
        os.chdir(here)
    assert result.exit_code == 0, result.output
    # without a dev corpus in the config: one line, exit status 2
    del config["data"]["dev"]
    (tmp_path / "c.json").write_text(json.dumps(config))
    result = run(*args, "--train-shards", tmp_path / "shards")
    assert result.exit_code == 2
    assert 'c.json: --train-shards: data "train_shards" needs a dev corpus' in result.output


def test_a_damaged_shard_is_one_line_naming_it(tmp_path: Path) -> None:
    (tmp_path / "c.txt").write_text("".join(f"a b {i}\n" for i in range(6)))
    assert run("corpus", "shard", tmp_path / "c.txt", tmp_path / "s", "--shards", 3).exit_code == 0
    shard = tmp_path / "s" / "shard-00002.txt"
    shard.write_text(shard.read_text().replace("a", "z"))
    result = run("corpus", "check", tmp_path / "s")
    assert result.exit_code == 2
    assert f"{shard}: shard 2: SHA-256" in result.output
    assert len(result.output.strip().splitlines()) == 1
    result = run("corpus", "shard", tmp_path / "c.txt", tmp_path / "t", "--shards", 7)
    assert result.exit_code == 2 and "6 non-blank lines cannot fill 7 shards" in result.output


def test_sharding_imports_no_torch(tmp_path: Path) -> None:
    (tmp_path / "c.txt").write_text("a b\nc d\n")
    code = (
        "import sys\n"
        "from click.testing import CliRunner\n"
        "from rescorer.cli.main import main\n"
        f"r = CliRunner().invoke(main, ['corpus', 'shard', {str(tmp_path / 'c.txt')!r}, "
        f"{str(tmp_path / 's')!r}, '--shards', '2'])\n"
        "assert r.exit_code == 0, r.output\n"
        "print('torch' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO
    )
    assert out.stdout.strip() == "False"


def test_conllu_shards_and_the_other_trainers_train_shards(tmp_path: Path) -> None:
    from tests.lm_models.lbl.test_lbl import write_jsonl
    from tests.lm_models.test_streamed_training import write_conllu

    write_conllu(tmp_path / "train.conllu", 40, 0)
    write_conllu(tmp_path / "dev.conllu", 8, 1)
    result = run("corpus", "shard", tmp_path / "train.conllu", tmp_path / "shards", "--shards", 2)
    assert result.exit_code == 0, result.output
    assert result.output.startswith(f"wrote 2 conllu shards to {tmp_path / 'shards'}: 40 sent")
    config = {
        "data": {"corpus": "conllu", "train": "train.conllu", "dev": "dev.conllu",
                 "factors": ["word", "upos"]},
        "model": {"order": 3, "embed_dim": 4, "hidden_dim": 8, "num_classes": 2},
        "train": {"epochs": 1, "batch_size": 64},
    }  # fmt: skip
    (tmp_path / "f.json").write_text(json.dumps(config))
    args = ["fnlm-train", tmp_path / "f.json", "--data-dir", tmp_path, "--out", tmp_path / "f"]
    result = run(*args, "--train-shards", tmp_path / "shards")
    assert result.exit_code == 0, result.output
    meta = json.loads((tmp_path / "f" / "training.json").read_text())
    assert meta["config"]["data"]["train_shards"] == str(tmp_path / "shards")
    assert meta["data"]["train_sentences"] == 40
    # lbl-train: a config without its dev corpus is one line, exit status 2
    write_jsonl(tmp_path / "docs.jsonl", 4, 0)
    assert (
        run("corpus", "shard", tmp_path / "docs.jsonl", tmp_path / "d", "--shards", 2).exit_code
        == 0
    )
    config = {"data": {"corpus": "jsonl", "path": "docs.jsonl", "attributes": ["genre"]}}
    (tmp_path / "l.json").write_text(json.dumps(config))
    args = ["lbl-train", tmp_path / "l.json", "--data-dir", tmp_path, "--out", tmp_path / "l"]
    result = run(*args, "--train-shards", tmp_path / "d")
    assert result.exit_code == 2
    assert 'l.json: --train-shards: data "train_shards" needs a dev corpus' in result.output
    assert len(result.output.strip().splitlines()) == 1
