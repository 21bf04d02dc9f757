"""``rescorer tokenizer train`` and training configs naming its model (data.tokenizer.model)."""

from __future__ import annotations

import json
import random
from pathlib import Path

from click.testing import CliRunner, Result

from rescorer.cli.main import main
from rescorer.lm_models.tokenizer import SubwordTokenizer


def run(*args: object) -> Result:
    return CliRunner().invoke(main, ["-q", *map(str, args)])


def write_text(path: Path, lines: int = 400, seed: int = 0) -> Path:
    """Sentences over a few hundred made-up words that share stems and endings (so that a
    tokenizer learns pieces shorter than words)."""
    rng = random.Random(seed)
    stems = ["THEREUP", "WATER", "STONE", "QUICK", "MOUNTAIN", "SHADOW", "RIVER", "GLASS"]
    ends = ["", "S", "ED", "ING", "LY", "NESS", "ON", "ER"]
    words = [s + e for s in stems for e in ends]
    text = [" ".join(rng.choice(words) for _ in range(rng.randint(3, 12))) for _ in range(lines)]
    path.write_text("\n".join(text) + "\n", encoding="utf-8")
    return path


def test_train_writes_a_model_that_spells_every_word_and_is_reproducible(tmp_path: Path) -> None:
    text = write_text(tmp_path / "text.txt")
    result = run("tokenizer", "train", "--text", text, "--vocab-size", 320, "--out", tmp_path / "a")
    assert result.exit_code == 0, result.output
    assert result.output.startswith(f"wrote {tmp_path / 'a'}: unigram tokenizer of ")
    assert "from 400 sentences" in result.output
    tok = SubwordTokenizer.from_file(tmp_path / "a")
    assert len(tok) <= 320
    words = set(text.read_text().split())
    assert all(tok.is_spelled(w) for w in words)
    assert "".join(p.lstrip("▁") for p in tok.word_pieces("WATERINGS")) == "WATERINGS"
    # the same text, kind, size and seed: the same file, byte for byte; BPE differs
    assert run("tokenizer", "train", "--text", text, "--vocab-size", 320,
               "--out", tmp_path / "b").exit_code == 0  # fmt: skip
    assert (tmp_path / "a").read_bytes() == (tmp_path / "b").read_bytes()
    assert run("tokenizer", "train", "--text", text, "--vocab-size", 320, "--kind", "bpe",
               "--out", tmp_path / "c").exit_code == 0  # fmt: skip
    assert (tmp_path / "c").read_bytes() != (tmp_path / "a").read_bytes()


def subword_config(model: str) -> dict:
    """A tiny LSTM config over train.txt and dev.txt, cut by the tokenizer file ``model``."""
    return {
        "data": {"corpus": "plain", "path": "train.txt", "dev": "dev.txt",
                 "tokenizer": {"model": model}},
        "model": {"mode": "unadapted", "embed_dim": 8, "hidden_dim": 8},
        "train": {"epochs": 1, "batch_tokens": 400, "device": "cpu"},
    }  # fmt: skip


def test_a_config_naming_the_model_trains_over_its_pieces(tmp_path: Path) -> None:
    write_text(tmp_path / "train.txt", 300, seed=1)
    write_text(tmp_path / "dev.txt", 40, seed=2)
    text = write_text(tmp_path / "other.txt", 400, seed=3)  # the tokenizer's own text
    assert run("tokenizer", "train", "--text", text, "--vocab-size", 300,
               "--out", tmp_path / "tok.model").exit_code == 0  # fmt: skip
    config = subword_config("tok.model")
    (tmp_path / "c.json").write_text(json.dumps(config))
    args = ["train", tmp_path / "c.json", "--data-dir", tmp_path, "--out", tmp_path / "m"]
    result = run(*args)
    assert result.exit_code == 0, result.output
    saved = tmp_path / "m" / "best" / "tokenizer.model"
    assert saved.read_bytes() == (tmp_path / "tok.model").read_bytes()
    vocab = (tmp_path / "m" / "best" / "vocab.txt").read_text().split("\n")
    assert vocab[: len(SubwordTokenizer.from_file(saved))] == list(
        SubwordTokenizer.from_file(saved).pieces
    )
    # a model file that is not there: one line naming it, exit 2
    config["data"]["tokenizer"] = {"model": "missing.model"}
    (tmp_path / "c.json").write_text(json.dumps(config))
    result = run(*args[:-1], tmp_path / "m2")
    assert result.exit_code == 2
    assert result.output.strip().endswith(
        f"{tmp_path / 'missing.model'}: no tokenizer model there (data.tokenizer.model)"
    )
    assert len(result.output.strip().splitlines()) == 1


def test_init_starts_from_a_checkpoint_and_keeps_its_units(tmp_path: Path) -> None:
    write_text(tmp_path / "train.txt", 300, seed=1)
    write_text(tmp_path / "dev.txt", 40, seed=2)
    for name, seed, size in (("tok.model", 3, 300), ("other.model", 4, 340)):
        assert run("tokenizer", "train", "--text", write_text(tmp_path / f"{seed}.txt", 400, seed),
                   "--vocab-size", size, "--out", tmp_path / name).exit_code == 0  # fmt: skip
    config = subword_config("tok.model")
    (tmp_path / "c.json").write_text(json.dumps(config))
    base = ["train", tmp_path / "c.json", "--data-dir", tmp_path]
    assert run(*base, "--out", tmp_path / "m").exit_code == 0
    # a config naming another tokenizer: the run starts from m's weights over m's pieces
    config["data"]["tokenizer"] = {"model": "other.model"}
    (tmp_path / "c.json").write_text(json.dumps(config))
    result = run(*base, "--init", tmp_path / "m" / "best", "--out", tmp_path / "m2")
    assert result.exit_code == 0, result.output
    for f in ("tokenizer.model", "vocab.txt"):
        assert (tmp_path / "m2" / "best" / f).read_bytes() == (
            tmp_path / "m" / "best" / f
        ).read_bytes()
    # a folder that is not a checkpoint: one line naming it, exit 2
    (tmp_path / "empty").mkdir()
    result = run(*base, "--init", tmp_path / "empty", "--out", tmp_path / "m3")
    assert result.exit_code == 2
    assert f"--init {tmp_path / 'empty'}: " in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_bad_inputs_are_one_line_and_exit_2(tmp_path: Path) -> None:
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n")
    result = run("tokenizer", "train", "--text", empty, "--out", tmp_path / "x")
    assert result.exit_code == 2
    assert f"{empty}: no words (expected one sentence per line)" in result.output
    assert len(result.output.strip().splitlines()) == 1 and not (tmp_path / "x").exists()
    binary = tmp_path / "binary.txt"
    binary.write_bytes(b"GOOD WORDS\nab\xff\xfecd\n")
    result = run("tokenizer", "train", "--text", binary, "--out", tmp_path / "x")
    assert result.exit_code == 2 and f"{binary}:2" in result.output, result.output
    assert "no words" not in result.output
    result = run("tokenizer", "train", "--text", tmp_path / "nope.txt", "--out", tmp_path / "x")
    assert result.exit_code == 2 and "nope.txt" in result.output
    result = run("tokenizer", "train", "--text", empty, "--vocab-size", 10, "--out", tmp_path / "x")
    assert result.exit_code == 2 and "300" in result.output
