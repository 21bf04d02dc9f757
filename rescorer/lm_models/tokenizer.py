"""Subword units: a sentencepiece tokenizer trained by the toolkit and kept in the checkpoint.

A model over subwords scores a word by the pieces it is cut into: log P(word | history) is the sum
of its pieces' log-probabilities, each given the pieces before it (the chain rule over the
pieces; the pieces of one word never cross a word boundary, so the word sums are exact). Every
word has pieces -- ``byte_fallback`` spells a character the tokenizer never saw as its UTF-8
bytes -- so a subword model has no out-of-vocabulary words.

:class:`SubwordTokenizer` wraps a sentencepiece model (unigram, Kudo 2018, or BPE) trained with
the toolkit's special units at the toolkit's ids (``<unk>`` 0, ``<s>`` 1, ``</s>`` 2, see
:mod:`rescorer.lm_models.vocab`), so a piece's sentencepiece id is its id in the model's vocabulary.
It is saved as ``tokenizer.model`` inside the checkpoint folder (a protobuf: data, never code).
Words are cut one at a time (cached), which is what the trainer and the scorer both do.
"""

from __future__ import annotations

import io
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from rescorer.lm_models.vocab import SPECIAL_TOKENS, Vocabulary

logger = logging.getLogger(__name__)

TOKENIZER_FILE = "tokenizer.model"
TOKENIZER_KINDS = ("unigram", "bpe")
WORD_CACHE = 1 << 18  # words whose pieces are remembered


def _sentencepiece():  # imported on first use: word-level work never needs it
    try:
        import sentencepiece
    except ImportError:  # pragma: no cover - a dependency of the package
        raise ValueError(
            "subword units need the sentencepiece package: pip install sentencepiece"
        ) from None
    return sentencepiece


@dataclass(frozen=True)
class TokenizerOptions:
    """How :meth:`SubwordTokenizer.train` builds the tokenizer (a training config's
    ``data.tokenizer`` section)."""

    # "unigram" (Kudo 2018) or "bpe".
    kind: str = "unigram"
    # Pieces in all, the three special units and the 256 byte pieces included.
    vocab_size: int = 8000
    # Fraction of the training characters that get a piece of their own (the rest: bytes).
    character_coverage: float = 1.0
    # Sentences sampled from the training text to learn the pieces (0: all of them).
    max_sentences: int = 2_000_000
    # Pieces of a word never longer than this many characters.
    max_piece_length: int = 16
    # Seed of the sentence sampling (the same text and seed give the same tokenizer).
    seed: int = 0
    # A sentencepiece model learnt before (`rescorer tokenizer train`, or an earlier run's
    # tokenizer.model), relative to the data folder unless absolute: its pieces are the units
    # and the fields above are unused. None: learn one from the training split.
    model: str | None = None

    def __post_init__(self) -> None:
        if self.model is not None and (not isinstance(self.model, str) or not self.model):
            raise ValueError(f"tokenizer model: expected a file path, got {self.model!r}")
        if self.kind not in TOKENIZER_KINDS:
            raise ValueError(f"tokenizer kind must be one of {TOKENIZER_KINDS}, got {self.kind!r}")
        if not isinstance(self.vocab_size, int) or self.vocab_size < 300:
            raise ValueError(
                f"tokenizer vocab_size must be an integer >= 300 (3 special units and 256 "
                f"bytes besides the pieces), got {self.vocab_size!r}"
            )
        if not 0.9 <= self.character_coverage <= 1.0:
            raise ValueError(
                f"character_coverage must be in [0.9, 1], got {self.character_coverage!r}"
            )
        if self.max_sentences < 0 or self.max_piece_length < 1:
            raise ValueError("max_sentences must be >= 0 and max_piece_length >= 1")


class SubwordTokenizer:
    """A sentencepiece model with the toolkit's special ids; cuts words into pieces."""

    def __init__(self, model_proto: bytes, source: str = "<memory>") -> None:
        spm = _sentencepiece()
        self._sp = spm.SentencePieceProcessor()
        try:
            self._sp.LoadFromSerializedProto(model_proto)
        except (RuntimeError, OSError) as exc:
            raise ValueError(f"{source}: not a sentencepiece model: {exc}") from None
        pieces = tuple(self._sp.IdToPiece(i) for i in range(self._sp.GetPieceSize()))
        if pieces[:3] != SPECIAL_TOKENS:
            raise ValueError(
                f"{source}: expected the special units {list(SPECIAL_TOKENS)} at ids 0-2, "
                f"got {list(pieces[:3])}"
            )
        self.model_proto = bytes(model_proto)
        self.pieces: tuple[str, ...] = pieces
        self._byte_ids = frozenset(i for i in range(len(pieces)) if self._sp.IsByte(i))
        self.word_ids = lru_cache(maxsize=WORD_CACHE)(self._word_ids)

    def __len__(self) -> int:
        return len(self.pieces)

    def _word_ids(self, word: str) -> tuple[int, ...]:
        ids = tuple(self._sp.EncodeAsIds(word))
        return ids if ids else (SPECIAL_TOKENS.index("<unk>"),)  # e.g. a lone space

    def word_pieces(self, word: str) -> tuple[str, ...]:
        """The pieces of one word, e.g. ``"THEREUPON"`` -> ``("▁THERE", "UPON")``."""
        return tuple(self.pieces[i] for i in self.word_ids(word))

    def encode(self, words: Sequence[str]) -> list[str]:
        """The pieces of a sentence, word after word (no ``<s>`` or ``</s>``)."""
        return [piece for word in words for piece in self.word_pieces(word)]

    def is_spelled(self, word: str) -> bool:
        """True when the word needs no byte pieces and no ``<unk>`` (its characters are known)."""
        return not any(i == 0 or i in self._byte_ids for i in self.word_ids(word))

    # -- files ------------------------------------------------------------------------------
    def save(self, folder: str | Path) -> Path:
        path = Path(folder) / TOKENIZER_FILE
        path.write_bytes(self.model_proto)
        return path

    @classmethod
    def load(cls, folder: str | Path) -> SubwordTokenizer:
        """The tokenizer of a checkpoint folder (a ValueError when it has none)."""
        return cls.from_file(
            Path(folder) / TOKENIZER_FILE, "missing (a subword model keeps its tokenizer there)"
        )

    @classmethod
    def from_file(
        cls, path: str | Path, missing: str = "no tokenizer model there (data.tokenizer.model)"
    ) -> SubwordTokenizer:
        """A tokenizer from its model file (a ValueError naming the file when it is not one)."""
        path = Path(path)
        if not path.is_file():
            raise ValueError(f"{path}: {missing}")
        return cls(path.read_bytes(), str(path))

    @classmethod
    def learn_or_load(
        cls,
        options: TokenizerOptions,
        sentences: Callable[[], Iterable[Sequence[str]]],
        data_dir: Path,
    ) -> SubwordTokenizer:
        """The tokenizer a config's ``data.tokenizer`` asks for: its ``model`` file (relative to
        ``data_dir`` unless absolute) when it names one, else learnt from ``sentences()``."""
        if options.model is not None:
            path = Path(options.model)
            return cls.from_file(path if path.is_absolute() else data_dir / path)
        return cls.train(sentences(), options)

    @staticmethod
    def present(folder: str | Path) -> bool:
        """Whether a checkpoint folder holds a tokenizer (a subword model)."""
        return (Path(folder) / TOKENIZER_FILE).is_file()

    # -- training ---------------------------------------------------------------------------
    @classmethod
    def train(
        cls, sentences: Iterable[Sequence[str]], options: TokenizerOptions = TokenizerOptions()
    ) -> SubwordTokenizer:
        """Learn the pieces from ``sentences`` (word sequences), in memory."""
        spm = _sentencepiece()
        lines = (" ".join(s) for s in sentences if s)
        proto = io.BytesIO()
        spm.set_random_generator_seed(options.seed)
        logger.info("training a %s tokenizer of %d pieces", options.kind, options.vocab_size)
        try:
            spm.SentencePieceTrainer.train(
                sentence_iterator=lines,
                model_writer=proto,
                model_type=options.kind,
                vocab_size=options.vocab_size,
                character_coverage=options.character_coverage,
                input_sentence_size=options.max_sentences,
                shuffle_input_sentence=True,
                max_sentencepiece_length=options.max_piece_length,
                byte_fallback=True,
                normalization_rule_name="identity",  # a word's pieces spell it exactly
                unk_id=0,
                bos_id=1,
                eos_id=2,
                pad_id=-1,
                unk_piece=SPECIAL_TOKENS[0],
                bos_piece=SPECIAL_TOKENS[1],
                eos_piece=SPECIAL_TOKENS[2],
                hard_vocab_limit=False,  # a small text may not hold vocab_size pieces
                num_threads=1,
                minloglevel=2,
            )
        except RuntimeError as exc:
            raise ValueError(f"sentencepiece training failed: {exc}") from None
        return cls(proto.getvalue())

    def vocabulary(self, sentences: Iterable[Sequence[str]]) -> Vocabulary:
        """Every piece (id = sentencepiece id) with its count in ``sentences`` (word sequences)."""
        counts = [0] * len(self.pieces)
        for sentence in sentences:
            for word in sentence:
                for i in self.word_ids(word):
                    counts[i] += 1
            counts[2] += 1  # </s>
        return Vocabulary(self.pieces, counts)

    def vocabulary_of_counts(self, word_counts: Mapping[str, int], sentences: int) -> Vocabulary:
        """:meth:`vocabulary` from the words' counts and the number of sentences (a corpus
        counted in one streaming pass): the same counts as over the sentences themselves."""
        counts = [0] * len(self.pieces)
        for word, n in word_counts.items():
            for i in self.word_ids(word):
                counts[i] += n
        counts[2] += sentences  # </s>
        return Vocabulary(self.pieces, counts)
