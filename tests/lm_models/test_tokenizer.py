"""Subword units: the tokenizer's ids, its cuts, files, and a subword LSTM trained end to end."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import pytest

from rescorer.lm_models.checkpoint import TOKENIZER_FILE, load_checkpoint, save_checkpoint
from rescorer.lm_models.lstm.model import ContextLSTM, LSTMConfig
from rescorer.lm_models.tokenizer import SubwordTokenizer, TokenizerOptions
from rescorer.lm_models.vocab import SPECIAL_TOKENS

SYLLABLES = ["ka", "lo", "mi", "ner", "sto", "vu", "pre", "tan", "ing", "ed"]


def sentences(n: int = 400, seed: int = 0) -> list[list[str]]:
    """Words built of a few syllables: a tokenizer of a few hundred pieces cuts the rare ones."""
    rng = random.Random(seed)
    words = ["".join(rng.choice(SYLLABLES) for _ in range(rng.randint(1, 4))) for _ in range(300)]
    weights = [1.0 / (i + 1) for i in range(len(words))]
    return [rng.choices(words, weights, k=rng.randint(3, 9)) for _ in range(n)]


@pytest.fixture(scope="module")
def tokenizer() -> SubwordTokenizer:
    return SubwordTokenizer.train(sentences(), TokenizerOptions(vocab_size=320))


def test_special_units_take_the_toolkit_ids(tokenizer: SubwordTokenizer) -> None:
    assert tokenizer.pieces[:3] == SPECIAL_TOKENS
    assert 300 <= len(tokenizer) <= 320


def test_pieces_spell_the_word_and_rare_words_are_cut(tokenizer: SubwordTokenizer) -> None:
    corpus = sentences()
    words = {w for s in corpus for w in s}
    lengths = []
    for word in words:
        pieces = tokenizer.word_pieces(word)
        assert "".join(pieces).replace("▁", "") == word
        assert pieces[0].startswith("▁")  # a word's first piece marks the word boundary
        lengths.append(len(pieces))
    assert max(lengths) > 1 and min(lengths) == 1
    assert tokenizer.encode(corpus[0]) == [p for w in corpus[0] for p in tokenizer.word_pieces(w)]


def test_unseen_characters_are_spelled_in_bytes_not_unknown(tokenizer: SubwordTokenizer) -> None:
    pieces = tokenizer.word_pieces("Æka")
    assert "<unk>" not in pieces and "<0xC3>" in pieces and "<0x86>" in pieces
    assert not tokenizer.is_spelled("Æka") and tokenizer.is_spelled("kalo")


def test_the_same_text_and_seed_give_the_same_tokenizer() -> None:
    opts = TokenizerOptions(vocab_size=310, max_sentences=200, seed=3)
    a = SubwordTokenizer.train(sentences(), opts)
    b = SubwordTokenizer.train(sentences(), opts)
    assert a.model_proto == b.model_proto


def test_vocabulary_counts_the_pieces(tokenizer: SubwordTokenizer) -> None:
    corpus = sentences()
    vocab = tokenizer.vocabulary(corpus)
    assert vocab.tokens == list(tokenizer.pieces)
    assert vocab.unigram_counts is not None
    assert sum(vocab.unigram_counts) == sum(len(tokenizer.encode(s)) + 1 for s in corpus)
    assert vocab.unigram_counts[vocab.eos_id] == len(corpus)


def test_vocabulary_of_counts_equals_the_vocabulary_of_the_sentences(
    tokenizer: SubwordTokenizer,
) -> None:
    """A streamed corpus is counted as words and a sentence count: the same piece counts,
    every sentence's </s> included, as over the sentences themselves."""
    corpus = sentences(n=150, seed=4)
    words = Counter(w for s in corpus for w in s)
    counted = tokenizer.vocabulary_of_counts(words, len(corpus))
    assert counted.tokens == list(tokenizer.pieces)
    assert counted.unigram_counts == tokenizer.vocabulary(corpus).unigram_counts
    assert counted.unigram_counts is not None
    assert counted.unigram_counts[counted.eos_id] == len(corpus) == 150
    assert counted.unigram_counts[counted.bos_id] == 0 and counted.unigram_counts[0] == 0


def test_checkpoint_with_a_tokenizer_round_trips(
    tmp_path: Path, tokenizer: SubwordTokenizer
) -> None:
    model = ContextLSTM(LSTMConfig(vocab_size=len(tokenizer), embed_dim=8, hidden_dim=8))
    save_checkpoint(
        tmp_path / "ck",
        model,
        tokenizer.pieces,
        extra_files={TOKENIZER_FILE: tokenizer.model_proto},
    )
    assert SubwordTokenizer.present(tmp_path / "ck")
    again = SubwordTokenizer.load(tmp_path / "ck")
    assert again.model_proto == tokenizer.model_proto and again.pieces == tokenizer.pieces
    _, tokens, _ = load_checkpoint(tmp_path / "ck")
    assert tuple(tokens) == tokenizer.pieces


def test_bad_tokenizer_files_and_options_are_refused(tmp_path: Path) -> None:
    (tmp_path / TOKENIZER_FILE).write_bytes(b"not a model")
    with pytest.raises(ValueError, match="not a sentencepiece model"):
        SubwordTokenizer.load(tmp_path)
    with pytest.raises(ValueError, match="missing"):
        SubwordTokenizer.load(tmp_path / "nowhere")
    with pytest.raises(ValueError, match="kind must be one of"):
        TokenizerOptions(kind="wordpiece")
    with pytest.raises(ValueError, match="vocab_size"):
        TokenizerOptions(vocab_size=100)
    model = ContextLSTM(LSTMConfig(vocab_size=5, embed_dim=4, hidden_dim=4))
    with pytest.raises(ValueError, match="tokenizer.model with bytes"):
        save_checkpoint(
            tmp_path / "x", model, [*SPECIAL_TOKENS, "a", "b"], extra_files={"m.bin": b""}
        )
