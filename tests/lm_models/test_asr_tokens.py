"""An ASR model's token set as LM units: tokens.txt, its sentencepiece model, the id tables,
the checks that refuse another token set, and `rescorer train --tokens/--bpe-model`."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
import sentencepiece as spm
from click.testing import CliRunner

from rescorer.cli.main import main
from rescorer.core.errors import InputError
from rescorer.lm_models.asr_tokens import (
    ASR_TOKENS_FILE,
    NEVER,
    AsrTokens,
    checkpoint_asr_tokens,
    load_token_set,
    read_sentencepiece,
    read_tokens_txt,
    toolkit_sentencepiece,
)
from rescorer.lm_models.checkpoint import TOKENIZER_FILE, load_checkpoint
from rescorer.lm_models.tokenizer import SubwordTokenizer
from tests.lm_models.test_tokenizer import sentences

ICEFALL = ("<blk>", "<sos/eos>", "<unk>", "▁A", "B", "▁C", "D")


def tokens_txt(path: Path, tokens: tuple[str, ...] | list[str]) -> Path:
    path.write_text("".join(f"{t} {i}\n" for i, t in enumerate(tokens)), encoding="utf-8")
    return path


def icefall_bpe(kind: str = "bpe", size: int = 80) -> bytes:
    """A sentencepiece model laid out as icefall trains them: <blk> 0, <sos/eos> 1, <unk> 2."""
    lines = (" ".join(s) for s in sentences(300))
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=lines,
        model_writer=model,
        model_type=kind,
        vocab_size=size,
        user_defined_symbols=["<blk>", "<sos/eos>"],
        unk_id=2,
        bos_id=-1,
        eos_id=-1,
        hard_vocab_limit=False,
        num_threads=1,
        minloglevel=2,
    )
    return model.getvalue()


def test_the_icefall_layout_keeps_every_id_past_the_specials() -> None:
    asr = AsrTokens(ICEFALL)
    assert (asr.blank_id, asr.sos_id, asr.eos_id, asr.unk_id) == (0, 1, 1, 2)
    assert asr.lm_tokens() == ["<unk>", "<s>", "</s>", "▁A", "B", "▁C", "D"]
    # fed: blank -> <unk> (sherpa-onnx never feeds it), <sos/eos> -> <s>, <unk> -> <unk>
    assert asr.input_map().tolist() == [0, 1, 0, 3, 4, 5, 6]
    # reported: blank never, <sos/eos> <- </s>, <unk> <- <unk>
    assert asr.output_map().tolist() == [NEVER, 2, 0, 3, 4, 5, 6]
    assert asr.to_text().splitlines()[:2] == ["<blk> 0", "<sos/eos> 1"]
    assert asr.describe() == "7 tokens of <tokens>: blank 0, sos/eos 1, unk 2"


@pytest.mark.parametrize(
    ("tokens", "specials", "lm", "fed", "reported"),
    [
        # <unk> in the middle, <sos/eos> last: the ordinary tokens move down
        (
            ("<blk>", "▁A", "<unk>", "B", "<sos/eos>"),
            (0, 4, 4, 2),
            ["▁A", "B"],
            [0, 3, 0, 4, 1],
            [NEVER, 3, 0, 4, 2],
        ),
        # a <s>/</s> pair: <s> is never predicted, </s> never fed
        (
            ("<blank>", "<s>", "</s>", "X", "<unk>"),
            (0, 1, 2, 4),
            ["X"],
            [0, 1, 2, 3, 0],
            [NEVER, NEVER, 2, 3, 0],
        ),
        # neither (and no <unk>): the blank stands for sentence start and end
        (("<blk>", "X", "Y"), (0, 0, 0, None), ["X", "Y"], [1, 3, 4], [2, 3, 4]),
    ],
    ids=["unk-in-the-middle", "s-pair", "blank-for-both"],
)
def test_other_layouts(
    tokens: tuple[str, ...],
    specials: tuple[int, int, int, int | None],
    lm: list[str],
    fed: list[int],
    reported: list[int],
) -> None:
    asr = AsrTokens(tokens)
    assert (asr.blank_id, asr.sos_id, asr.eos_id, asr.unk_id) == specials
    assert asr.lm_tokens() == ["<unk>", "<s>", "</s>", *lm]
    assert asr.input_map().tolist() == fed
    assert asr.output_map().tolist() == reported


def test_tokens_txt_is_read_as_sherpa_onnx_writes_it(tmp_path: Path) -> None:
    path = tmp_path / "tokens.txt"
    path.write_text("<blk> 0\n<sos/eos> 1\n▁A 3\n<unk> 2\n", encoding="utf-8")  # any line order
    asr = read_tokens_txt(path)
    assert asr.tokens == ("<blk>", "<sos/eos>", "<unk>", "▁A")
    assert asr.lines == (1, 2, 4, 3) and asr.source == str(path)
    cases = [
        ("<blk> 0\nA B 1\n", r"tokens.txt:2: expected 'TOKEN ID', got 'A B 1'"),
        ("<blk> 0\nA x\n", r"tokens.txt:2: expected a non-negative integer id, got 'x'"),
        ("<blk> 0\nA -1\n", r"tokens.txt:2: expected a non-negative integer id, got '-1'"),
        ("<blk> 0\nA 0\n", r"tokens.txt:2: id 0 given twice \(first for '<blk>' on line 1\)"),
        ("<blk> 0\n7\n", r"tokens.txt:2: expected 'TOKEN ID', got the id 7 alone"),
        ("<blk> 0\n\n", r"tokens.txt:2: expected 'TOKEN ID', got ''"),
        ("<blk> 0\nA 2\n", r"tokens.txt: expected the ids 0..1 each once; id 1 is missing"),
        ("<blk> 0\nA 1\nA 2\n", r"tokens.txt:3: expected each token once, got 'A' again"),
        ("A 0\nB 1\n", r"tokens.txt: expected one blank token \(<blk> or <blank>\), found 0"),
        ("<blk> 0\n<s> 1\n", r"tokens.txt: expected both <s> and </s>, or neither"),
        ("", r"tokens.txt: expected 'TOKEN ID' lines, found none"),
    ]
    for text, message in cases:
        path.write_text(text, encoding="utf-8")
        with pytest.raises(InputError, match=message):
            read_tokens_txt(path)


def test_another_token_set_is_refused_at_its_line(tmp_path: Path) -> None:
    asr = read_tokens_txt(tokens_txt(tmp_path / "a.txt", ICEFALL))
    other = read_tokens_txt(tokens_txt(tmp_path / "b.txt", [*ICEFALL[:4], "X", *ICEFALL[5:]]))
    with pytest.raises(InputError, match=r"b.txt:5: token 'X' at id 4, but .*a.txt has 'B'"):
        asr.check_same(other)
    shorter = read_tokens_txt(tokens_txt(tmp_path / "c.txt", ICEFALL[:5]))
    with pytest.raises(InputError, match=r"c.txt: 5 tokens, but .*a.txt has 7"):
        asr.check_same(shorter)
    asr.check_same(read_tokens_txt(tokens_txt(tmp_path / "d.txt", ICEFALL)))  # the same: fine
    # An LM vocabulary over another token set: the line of the first token whose unit differs.
    asr.check_vocabulary(asr.lm_tokens(), "the model")
    lm = asr.lm_tokens()
    lm[5] = "▁Z"
    with pytest.raises(
        InputError, match=r"a.txt:6: token '▁C' \(id 5\) is unit 5 .* the model has '▁Z' there"
    ):
        asr.check_vocabulary(lm, "the model")
    with pytest.raises(InputError, match=r"a.txt: an LM over these tokens has 7 units, .* has 8"):
        asr.check_vocabulary([*asr.lm_tokens(), "E"], "the model")


@pytest.mark.parametrize("kind", ["bpe", "unigram"])
def test_the_asr_sentencepiece_model_cuts_words_as_before_in_lm_ids(
    tmp_path: Path, kind: str
) -> None:
    path = tmp_path / "bpe.model"
    path.write_bytes(icefall_bpe(kind))
    asr, model = read_sentencepiece(path)
    assert asr.tokens[:3] == ("<blk>", "<sos/eos>", "<unk>") and asr.lines is None
    tokenizer = SubwordTokenizer(toolkit_sentencepiece(model, asr), str(path))
    assert list(tokenizer.pieces) == asr.lm_tokens()
    original = spm.SentencePieceProcessor(model_file=str(path))
    words = {w for s in sentences(300) for w in s} | {"kaxyz", "zzz"}  # unseen letters too
    assert any(len(original.encode(w)) > 1 for w in words)
    for word in sorted(words):
        asr_ids = original.encode(word)
        assert tokenizer.word_pieces(word) == tuple(asr.tokens[i] for i in asr_ids), word
        assert list(tokenizer.word_ids(word)) == asr.input_map()[asr_ids].tolist(), word
    assert 0 in tokenizer.word_ids("kaxyz")  # unseen letters: the ASR's <unk>, LM unit 0


def test_load_token_set(tmp_path: Path) -> None:
    bpe = tmp_path / "bpe.model"
    bpe.write_bytes(icefall_bpe())
    asr, _ = read_sentencepiece(bpe)
    listed = tokens_txt(tmp_path / "tokens.txt", asr.tokens)
    both = load_token_set(listed, bpe)
    assert both.asr.tokens == asr.tokens and both.asr.source == str(listed)  # lines to name
    assert SubwordTokenizer(both.sentencepiece).pieces == tuple(asr.lm_tokens())
    assert load_token_set(listed).sentencepiece is None
    wrong = tokens_txt(tmp_path / "wrong.txt", [*asr.tokens[:10], "X", *asr.tokens[11:]])
    with pytest.raises(InputError, match=rf"wrong.txt:11: token 'X' at id 10, but {bpe} has"):
        load_token_set(wrong, bpe)
    with pytest.raises(ValueError, match="got neither"):
        load_token_set()
    (tmp_path / "junk.model").write_bytes(b"\xff\x00 not a model")
    with pytest.raises(InputError, match="junk.model: expected a sentencepiece model"):
        read_sentencepiece(tmp_path / "junk.model")


# -- rescorer train --tokens / --bpe-model --------------------------------------------------------


pytestmark = pytest.mark.usefixtures("restore_logging")  # main reconfigures logging


def train_config(tmp_path: Path, **data: object) -> Path:
    corpus = tmp_path / "text.txt"
    corpus.write_text("".join(" ".join(s) + "\n" for s in sentences(80)), encoding="utf-8")
    config = {
        "data": {"corpus": "plain", "path": corpus.name, "split": [0.8, 0.2, 0.0], **data},
        "model": {"mode": "unadapted", "embed_dim": 8, "hidden_dim": 8, "dropout": 0.0},
        "train": {"epochs": 1, "batch_tokens": 400, "device": "cpu"},
    }
    path = tmp_path / "cfg.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    return path


def train(cfg: Path, out: Path, *extra: object) -> object:
    args = ["-q", "train", cfg, "--out", out, "--data-dir", cfg.parent, "--no-resume", *extra]
    return CliRunner().invoke(main, [str(a) for a in args])


def test_cli_train_over_the_asr_tokens(tmp_path: Path) -> None:
    bpe = tmp_path / "bpe.model"
    bpe.write_bytes(icefall_bpe())
    asr, _ = read_sentencepiece(bpe)
    listed = tokens_txt(tmp_path / "tokens.txt", asr.tokens)
    cfg = train_config(tmp_path)
    out = tmp_path / "lm"
    result = train(cfg, out, "--tokens", listed, "--bpe-model", bpe)
    assert result.exit_code == 0, result.output
    want = f"units: the ASR model's, {len(asr)} tokens of {out / 'best' / ASR_TOKENS_FILE}: "
    assert want + "blank 0, sos/eos 1, unk 2" in result.output
    for folder in (out / "best", out / "last"):
        _, vocab, _ = load_checkpoint(folder)
        assert vocab == asr.lm_tokens()
        assert checkpoint_asr_tokens(folder).tokens == asr.tokens  # type: ignore[union-attr]
        assert SubwordTokenizer.load(folder).pieces == tuple(asr.lm_tokens())
    # the config written beside the checkpoints names the token set
    written = json.loads((out / "config.json").read_text(encoding="utf-8"))["data"]
    assert written["tokens"] == str(listed.resolve()) and written["bpe_model"] == str(bpe.resolve())

    # the text's items as the tokens (no sentencepiece model): no tokenizer in the checkpoint
    cut = SubwordTokenizer(load_token_set(listed, bpe).sentencepiece)  # type: ignore[arg-type]
    pieces = tmp_path / "pieces.txt"
    pieces.write_text("".join(" ".join(cut.encode(s)) + "\n" for s in sentences(80)), "utf-8")
    result = train(train_config(tmp_path, path=pieces.name), tmp_path / "lm2", "--tokens", listed)
    assert result.exit_code == 0, result.output
    assert load_checkpoint(tmp_path / "lm2" / "best")[1] == asr.lm_tokens()
    assert not (tmp_path / "lm2" / "best" / TOKENIZER_FILE).exists()

    # a tokens.txt that is not the sentencepiece model's: one line naming it, exit 2
    wrong = tokens_txt(tmp_path / "wrong.txt", [*asr.tokens[:-1], "▁NOPE"])
    result = train(cfg, tmp_path / "lm3", "--tokens", wrong, "--bpe-model", bpe)
    assert result.exit_code == 2 and f"wrong.txt:{len(asr)}: token '▁NOPE'" in result.output
    assert "Traceback" not in result.output and not (tmp_path / "lm3" / "best").exists()
    # a config that learns a tokenizer of its own: refused
    learn = train_config(tmp_path, tokenizer={"kind": "unigram", "vocab_size": 320})
    result = train(learn, tmp_path / "lm4", "--tokens", listed)
    assert result.exit_code == 2 and "data.tokenizer learns a new one: give one or the other" in (
        result.output
    )


def test_config_refuses_both_token_sources() -> None:
    from rescorer.lm_models.lstm.train import DataConfig

    tok = {"kind": "bpe"}
    with pytest.raises(ValueError, match="give one or the other"):
        DataConfig("plain", "x.txt", tokens="tokens.txt", tokenizer=tok)  # type: ignore[arg-type]
    assert DataConfig("plain", "x.txt", bpe_model="bpe.model").asr_units
    assert not DataConfig("plain", "x.txt").asr_units
