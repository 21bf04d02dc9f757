"""An ASR model's token set (``tokens.txt`` or its sentencepiece model) as an LM's units.

sherpa-onnx hands the ids of the acoustic model's tokens straight to the LM (its online LM feeds
``ys.back()``, its offline rescoring the hypotheses' ids), so an LM for it must be trained over
those tokens and answer in those ids. An icefall token set (``tokens.txt``: ``TOKEN ID`` per
line, written from the BPE model, ``id i`` = piece i) looks like::

    <blk> 0        the transducer's blank, never a token of a hypothesis
    <sos/eos> 1    sentence start and end (icefall's RNN LM: sos_id = eos_id = 1)
    <unk> 2
    ▁THE 3 ...

The toolkit's vocabularies keep ``<unk>`` 0, ``<s>`` 1, ``</s>`` 2
(:mod:`rescorer.lm_models.vocab`), so an LM over an ASR token set has the vocabulary

    [<unk>, <s>, </s>] + the ASR's other tokens, in ASR-id order

(for icefall's layout, ids 3.. are the same on both sides), and the exports a decoder loads
(``score-token``, ``nll``: :mod:`rescorer.export.exporter`) translate at their boundary: an input
ASR id goes to its LM unit (``<sos/eos>`` -> ``<s>``, ``<unk>`` -> ``<unk>``, the blank ->
``<unk>``, never fed by sherpa-onnx), and the output log-probabilities are given per ASR id
(``<sos/eos>`` <- ``</s>``, ``<unk>`` <- ``<unk>``, the blank -inf: the LM never predicts it).

Special tokens are recognised by name: the blank ``<blk>`` or ``<blank>`` (required), sentence
start and end ``<sos/eos>`` or a ``<s>``/``</s>`` pair (without any, the blank's id stands for
both, as sherpa-onnx never feeds or scores the blank), ``<unk>`` (optional). Every other token
is a unit of the LM; none may contain whitespace (the toolkit's tokens never do).

Training text is cut into these units by the ASR's sentencepiece model when one is given (its
pieces rewritten into the toolkit's layout, :func:`toolkit_sentencepiece`, so that the
checkpoint's ``tokenizer.model`` cuts words exactly as the ASR's does), else its
whitespace-separated items are the tokens themselves.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from rescorer.core.errors import InputError
from rescorer.core.io import read_lines

logger = logging.getLogger(__name__)

ASR_TOKENS_FILE = "asr_tokens.txt"  # in a checkpoint folder: the token set it was trained over
BLANK_NAMES = ("<blk>", "<blank>")
SOS_EOS = "<sos/eos>"
SOS, EOS, UNK = "<s>", "</s>", "<unk>"
LM_SPECIALS = (UNK, SOS, EOS)  # the toolkit's ids 0, 1, 2 (rescorer.lm_models.vocab.SPECIAL_TOKENS)
NEVER = -1  # an ASR id whose log-probability is -inf in the decoder exports


@dataclass(frozen=True)
class AsrTokens:
    """The token set of an ASR model: ``tokens[i]`` is the token of ASR id i.

    ``source`` names where it was read (for messages); ``lines[i]`` is the line of id i in it
    (``tokens.txt``), or None when the ids are piece numbers (a sentencepiece model).
    """

    tokens: tuple[str, ...]
    source: str = "<tokens>"
    lines: tuple[int, ...] | None = None
    # Derived from the tokens' names (see the module docstring).
    blank_id: int = field(init=False)
    sos_id: int = field(init=False)
    eos_id: int = field(init=False)
    unk_id: int | None = field(init=False)

    def __post_init__(self) -> None:
        tokens = tuple(self.tokens)
        object.__setattr__(self, "tokens", tokens)
        if self.lines is not None and len(self.lines) != len(tokens):
            raise ValueError(f"expected a line per token, got {len(self.lines)} for {len(tokens)}")
        index: dict[str, int] = {}
        for i, tok in enumerate(tokens):
            if not isinstance(tok, str) or not tok or any(ch.isspace() for ch in tok):
                self.fail(
                    i, f"expected a token without whitespace (an LM unit), got {tok!r} at id {i}"
                )
            if tok in index:
                self.fail(
                    i, f"expected each token once, got {tok!r} again (first at id {index[tok]})"
                )
            index[tok] = i
        blanks = [index[b] for b in BLANK_NAMES if b in index]
        if len(blanks) != 1:
            raise InputError(
                f"expected one blank token ({' or '.join(BLANK_NAMES)}), found "
                f"{len(blanks)} among {len(tokens)} tokens; is this an ASR model's tokens.txt?",
                self.source,
            )
        blank = blanks[0]
        if SOS_EOS in index:
            if SOS in index or EOS in index:
                raise InputError(f"expected {SOS_EOS} or a {SOS}/{EOS} pair, not both", self.source)
            sos = eos = index[SOS_EOS]
        elif (SOS in index) != (EOS in index):
            raise InputError(f"expected both {SOS} and {EOS}, or neither", self.source)
        else:
            sos, eos = index.get(SOS, blank), index.get(EOS, blank)
        object.__setattr__(self, "blank_id", blank)
        object.__setattr__(self, "sos_id", sos)
        object.__setattr__(self, "eos_id", eos)
        object.__setattr__(self, "unk_id", index.get(UNK))

    def fail(self, asr_id: int, message: str) -> None:
        """Raise an InputError about ASR id ``asr_id``, at its line when known."""
        line = None if self.lines is None else self.lines[asr_id]
        raise InputError(message, self.source, line)

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def specials(self) -> frozenset[int]:
        """The ASR ids that are not units of their own in the LM."""
        ids = {self.blank_id, self.sos_id, self.eos_id}
        if self.unk_id is not None:
            ids.add(self.unk_id)
        return frozenset(ids)

    @property
    def regular_ids(self) -> tuple[int, ...]:
        """The ASR ids of the LM's ordinary units, in ASR-id order (LM ids 3, 4, ...)."""
        specials = self.specials
        return tuple(i for i in range(len(self.tokens)) if i not in specials)

    def lm_tokens(self) -> list[str]:
        """The LM's vocabulary: ``<unk>``, ``<s>``, ``</s>``, then the ordinary tokens."""
        return [*LM_SPECIALS, *(self.tokens[i] for i in self.regular_ids)]

    def input_map(self) -> np.ndarray:
        """(V_asr,) int64: the LM unit each ASR id is fed as."""
        out = np.zeros(len(self.tokens), dtype=np.int64)  # <unk>: blank and <unk>
        for lm_id, asr_id in enumerate(self.regular_ids, start=len(LM_SPECIALS)):
            out[asr_id] = lm_id
        out[self.eos_id] = 2
        out[self.sos_id] = 1  # after eos: <sos/eos> (and the blank standing for both) is fed as <s>
        return out

    def output_map(self) -> np.ndarray:
        """(V_asr,) int64: the LM unit whose log-probability each ASR id reports, or NEVER."""
        out = np.full(len(self.tokens), NEVER, dtype=np.int64)
        for lm_id, asr_id in enumerate(self.regular_ids, start=len(LM_SPECIALS)):
            out[asr_id] = lm_id
        if self.unk_id is not None:
            out[self.unk_id] = 0
        if self.sos_id != self.eos_id:
            out[self.sos_id] = NEVER  # a separate <s> is never predicted
        out[self.eos_id] = 2
        return out

    def to_text(self) -> str:
        """sherpa-onnx's ``tokens.txt``: ``TOKEN ID`` per line, in id order."""
        return "".join(f"{tok} {i}\n" for i, tok in enumerate(self.tokens))

    def describe(self) -> str:
        """One line: the size and the special ids."""
        unk = "none" if self.unk_id is None else str(self.unk_id)
        sos = (
            f"sos/eos {self.sos_id}"
            if self.sos_id == self.eos_id
            else f"sos {self.sos_id}, eos {self.eos_id}"
        )
        size = len(self.tokens)
        return f"{size} tokens of {self.source}: blank {self.blank_id}, {sos}, unk {unk}"

    # -- checks ---------------------------------------------------------------------------------

    def check_same(self, other: AsrTokens) -> None:
        """Refuse ``other`` unless it is the same token set (an InputError at ``other``'s line)."""
        for i, (mine, theirs) in enumerate(zip(self.tokens, other.tokens, strict=False)):
            if mine != theirs:
                other.fail(
                    i,
                    f"token {theirs!r} at id {i}, but {self.source} has {mine!r} there: not the "
                    f"token set the LM was trained over",
                )
        if len(self.tokens) != len(other.tokens):
            raise InputError(
                f"{len(other.tokens)} tokens, but {self.source} has {len(self.tokens)}: not the "
                f"token set the LM was trained over",
                other.source,
            )

    def check_vocabulary(self, vocab: Sequence[str], what: str) -> None:
        """Refuse an LM vocabulary (``what``: e.g. a checkpoint) not over this token set.

        An InputError naming this file and the line of the first token whose LM unit differs.
        """
        want = self.lm_tokens()
        got = list(vocab)
        for lm_id, (w, g) in enumerate(zip(want, got, strict=False)):
            if w != g:
                if lm_id < len(LM_SPECIALS):
                    raise InputError(
                        f"{what} has {g!r} at id {lm_id}, expected {w!r} (the toolkit's layout)",
                        self.source,
                    )
                asr_id = self.regular_ids[lm_id - len(LM_SPECIALS)]
                self.fail(
                    asr_id,
                    f"token {w!r} (id {asr_id}) is unit {lm_id} of an LM over these tokens, but "
                    f"{what} has {g!r} there: it was not trained over this token set (train "
                    f"with --tokens)",
                )
        if len(want) != len(got):
            raise InputError(
                f"an LM over these tokens has {len(want)} units, {what} has {len(got)}: it was "
                f"not trained over this token set (train with --tokens)",
                self.source,
            )


# -- reading -----------------------------------------------------------------------------------


def read_tokens_txt(path: str | os.PathLike[str]) -> AsrTokens:
    """sherpa-onnx's / icefall's ``tokens.txt``: ``TOKEN ID`` per line, ids 0..V-1 each once.

    An InputError naming the file and line for anything else (a line that is not two fields,
    an id that is not a non-negative integer or is repeated, a gap in the ids). A line with an
    id alone (sherpa-onnx reads it as the space token) is refused: an LM unit has no whitespace.
    """
    path = Path(path)
    by_id: dict[int, tuple[str, int]] = {}
    for lineno, line in read_lines(path):
        fields = line.split()
        if len(fields) == 1 and fields[0].isdigit():
            raise InputError(
                f"expected 'TOKEN ID', got the id {fields[0]} alone (sherpa-onnx reads it as "
                f"the space token, which cannot be an LM unit)",
                path,
                lineno,
            )
        if len(fields) != 2:
            raise InputError(f"expected 'TOKEN ID', got {line.strip()!r}", path, lineno)
        token, raw = fields
        if not raw.isdigit() or len(raw) > 9:
            raise InputError(f"expected a non-negative integer id, got {raw!r}", path, lineno)
        token_id = int(raw)
        if token_id in by_id:
            raise InputError(
                f"id {token_id} given twice (first for {by_id[token_id][0]!r} on line "
                f"{by_id[token_id][1]})",
                path,
                lineno,
            )
        by_id[token_id] = (token, lineno)
    if not by_id:
        raise InputError("expected 'TOKEN ID' lines, found none", path)
    missing = sorted(set(range(len(by_id))) - set(by_id))
    if missing:
        raise InputError(
            f"expected the ids 0..{len(by_id) - 1} each once; id {missing[0]} is missing "
            f"(largest id {max(by_id)})",
            path,
        )
    ordered = [by_id[i] for i in range(len(by_id))]
    return AsrTokens(
        tuple(t for t, _ in ordered), str(path), tuple(lineno for _, lineno in ordered)
    )


def _model_proto(data: bytes, source: str):  # -> sentencepiece_model_pb2.ModelProto
    try:
        from sentencepiece import sentencepiece_model_pb2
    except ImportError:  # pragma: no cover - a dependency of the package
        raise ValueError("reading a sentencepiece model needs sentencepiece and protobuf") from None
    proto = sentencepiece_model_pb2.ModelProto()
    try:
        proto.ParseFromString(data)
    except Exception as err:  # protobuf's DecodeError, whatever its module
        raise InputError(
            f"expected a sentencepiece model, could not parse it ({err})", source
        ) from None
    if not len(proto.pieces):
        raise InputError("expected a sentencepiece model, found no pieces", source)
    return proto


def read_sentencepiece(path: str | os.PathLike[str]) -> tuple[AsrTokens, bytes]:
    """The token set of an ASR's sentencepiece model (``bpe.model``; id i = piece i), and the
    model's bytes. Its unknown piece must be ``<unk>``."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as err:
        raise InputError(f"cannot read the file: {err.strerror or err}", path) from None
    proto = _model_proto(data, str(path))
    unknown = [p.piece for p in proto.pieces if p.type == p.UNKNOWN]
    if unknown != [UNK]:
        raise InputError(
            f"expected one unknown piece named {UNK!r}, got {unknown} (its tokens.txt would "
            f"name it otherwise)",
            path,
        )
    return AsrTokens(tuple(p.piece for p in proto.pieces), str(path)), data


def toolkit_sentencepiece(model: bytes, asr: AsrTokens) -> bytes:
    """The ASR's sentencepiece model, its pieces in the LM's order (:meth:`AsrTokens.lm_tokens`).

    The special pieces (blank, sentence start/end, unknown) are replaced by the toolkit's
    ``<unk>`` (unknown), ``<s>`` and ``</s>`` (control) at ids 0-2; every other piece keeps its
    string, score and type, so words are cut into the same pieces (the pieces' ids play no part
    in the cutting, for unigram and BPE models alike). The result loads as a
    :class:`rescorer.lm_models.tokenizer.SubwordTokenizer` whose piece ids are the LM's unit ids.
    """
    proto = _model_proto(model, asr.source)
    pieces = [p.piece for p in proto.pieces]
    if tuple(pieces) != asr.tokens:
        raise ValueError(f"{asr.source}: the sentencepiece model's pieces are not its token set")
    out = type(proto)()
    out.CopyFrom(proto)
    del out.pieces[:]
    kinds = (proto.pieces[0].UNKNOWN, proto.pieces[0].CONTROL, proto.pieces[0].CONTROL)
    for name, kind in zip(LM_SPECIALS, kinds, strict=True):
        piece = out.pieces.add()
        piece.piece, piece.type, piece.score = name, kind, 0.0
    for asr_id in asr.regular_ids:
        out.pieces.add().CopyFrom(proto.pieces[asr_id])
    spec = out.trainer_spec
    spec.unk_id, spec.bos_id, spec.eos_id, spec.pad_id = 0, 1, 2, -1
    spec.unk_piece, spec.bos_piece, spec.eos_piece = UNK, SOS, EOS
    special_names = {asr.tokens[i] for i in asr.specials}
    kept = [s for s in spec.user_defined_symbols if s not in special_names]
    del spec.user_defined_symbols[:]
    spec.user_defined_symbols.extend(kept)
    kept = [s for s in spec.control_symbols if s not in special_names]
    del spec.control_symbols[:]
    spec.control_symbols.extend(kept)
    return out.SerializeToString()


@dataclass(frozen=True)
class TokenSet:
    """What training over an ASR's tokens needs: the tokens, and the cutter when there is one."""

    asr: AsrTokens
    # The ASR's sentencepiece model rewritten into the LM's order (toolkit_sentencepiece), or
    # None: the training text's items are the tokens themselves.
    sentencepiece: bytes | None = None


def load_token_set(
    tokens: str | os.PathLike[str] | None = None, bpe_model: str | os.PathLike[str] | None = None
) -> TokenSet:
    """The token set of ``tokens`` (tokens.txt) and/or ``bpe_model`` (its sentencepiece model).

    With both, they must agree (an InputError at the first line of ``tokens`` that differs).
    """
    if tokens is None and bpe_model is None:
        raise ValueError("expected a tokens.txt, a sentencepiece model or both, got neither")
    listed = None if tokens is None else read_tokens_txt(tokens)
    if bpe_model is None:
        assert listed is not None
        return TokenSet(listed)
    pieces, model = read_sentencepiece(bpe_model)
    if listed is not None:
        pieces.check_same(listed)
    asr = listed or pieces
    return TokenSet(asr, toolkit_sentencepiece(model, pieces))


def checkpoint_asr_tokens(folder: str | os.PathLike[str]) -> AsrTokens | None:
    """The ASR token set a checkpoint was trained over (its ``asr_tokens.txt``), or None."""
    path = Path(folder) / ASR_TOKENS_FILE
    return read_tokens_txt(path) if path.is_file() else None
