"""Fuzzing the readers of every input but the N-best lists (issue 21).

Each target is one kind of input file and the readers that take it: references (trn, Kaldi
text, detected; utt2spk), context files (JSONL, TSV, detected), weights JSON, vocabularies
(``Vocabulary.load``, a checkpoint's ``vocab.txt``, a predict word list), training configs
(LSTM, FNLM, LBL), keyboard-eval sentences (every text format), keyboard results (JSONL) and the
predict batch input. Each example is random bytes, a valid file mutated byte-wise (bit flips,
insertions of bytes that readers treat specially, deletions, repeats, truncation), random text
over the characters the formats use, or, for JSON inputs, a valid document with values
replaced by random JSON of any type; sometimes gzip-compressed under a ``.gz`` name. A reader
must return or raise :class:`rescorer.core.errors.InputError` (one line in the CLI); any other
exception fails the test, and Hypothesis shrinks the input that raised it.

Time per target: ``$RESCORER_FUZZ_SECONDS`` (default 5; the issue asks for 120 when run on
purpose: ``RESCORER_FUZZ_SECONDS=120 pytest -m slow tests/rescorer/test_fuzz.py``). Hypothesis
has no time limit, so the examples run in batches whose size is estimated from the rate so far.
"""

from __future__ import annotations

import copy
import functools
import gzip
import json
import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from rescorer.combine import Weights
from rescorer.contexts import read_contexts
from rescorer.core.errors import InputError
from rescorer.keyboard import SentenceResult, read_sentence_results, read_sentences
from rescorer.lm_models.checkpoint import read_tokens
from rescorer.lm_models.fnlm.train import FNLMTrainConfig
from rescorer.lm_models.lbl.train import LBLTrainConfig
from rescorer.lm_models.lstm.train import TrainConfig
from rescorer.lm_models.vocab import Vocabulary
from rescorer.predict import read_requests, read_word_list
from rescorer.refs import read_kaldi_text, read_references, read_trn, read_utt2spk

pytestmark = pytest.mark.slow

logger = logging.getLogger(__name__)

FUZZ_SECONDS = float(os.environ.get("RESCORER_FUZZ_SECONDS", "5"))
MAX_BATCH = 5000

# Bytes and snippets that readers treat specially: line ends and separators, byte-order marks,
# bytes that are not UTF-8, Unicode whitespace that str.split() splits on, JSON syntax and
# values out of range, the ids and tokens of the formats.
INTERESTING = (
    b"\x00", b"\xff", b"\xfe", b"\x80", b"\xc3", b"\r", b"\n", b"\r\n", b"\t", b" ", b"\x0b",
    b"\x0c", b"\x1c", b"\xef\xbb\xbf", b"\xff\xfe", b"\xfe\xff",
    "\u00a0".encode(), "\u0085".encode(), "\u2028".encode(), "\u3000".encode(), "é".encode(),
    b"{", b"}", b"[", b"]", b'"', b":", b",", b"(", b")", b"-", b".", b"e", b"0", b"-1",
    b"1e400", b"-1e400", b"1e-400", b"NaN", b"Infinity", b"null", b"true", b"[]", b"{}", b'""',
    b"9" * 40, b"9" * 5000, b"\\u0000", b'"\\ud800"', b"\\", b"[" * 100, b"<s>", b"</s>",
    b"<unk>", b"utt", b"fields", b"id", b"\t{}", b"(a-b-a-b-c)", b"()",
)  # fmt: skip
TEXT_CHARS = ' \t\r\n()-{}[]":,.0123456789eabAB<>/\\_\u00a0\u2028\x00é\ufeff'


@dataclass(frozen=True)
class Target:
    """One kind of input file and the readers that take it."""

    name: str
    # Reader name -> reader; each is called on every example.
    readers: dict[str, Callable[[Path], object]]
    # Valid files of the kind: the seeds of the mutations.
    seeds: tuple[bytes, ...]
    # File names the example is written under (a reader detects the format from some).
    file_names: tuple[str, ...] = ("input.txt",)
    # Valid JSON values (one per document, or per line for JSON lines) and how a document is
    # made of them: "document", "lines" or "predict" (the third column of a batch line).
    json_seeds: tuple[Any, ...] = ()
    json_layout: str = "document"
    json_keys: tuple[str, ...] = field(default=())


# -- the targets ----------------------------------------------------------------------------------

TRN = (
    b"NOR IS MISTER QUILTER'S MANNER LESS INTERESTING\t(1272-128104-1272-128104-0001)\n"
    b"HE HOPES THERE IS NO\t(1272-128104-1272-128104-0002)\n"
    b"\t(1272-135031-1272-135031-0000)\n"
)
KALDI = b"1272-128104-0000 MISTER QUILTER IS\n1272-128104-0001\n1272-128104-0002 A B C\n"
UTT2SPK = b"1272-128104-0000 1272-128104\n1272-128104-0001 1272-128104\n"

CONTEXT_JSON = (
    {"utt": "u1", "fields": {"genre": "news", "speaker": "1272", "geo": [0.5, -1.25]}},
    {"utt": "u2", "genre": "chat", "year": 1999, "mood": None},
    {"utt": "u3", "fields": {"genre": "", "geo": 3}},
)
CONTEXT_TSV = b"utt\tgenre\tspeaker\nu1\tnews\t1272\nu2\t\t1273\n\nu3\tchat\t1\n"

WEIGHTS = {
    "format": "rescorer-weights",
    "version": 1,
    "features": {"decoder": 1.0, "ctc": 0.5, "lm": 0.3},
    "length": 0.5,
    "meta": {"normalize": "none", "method": "mert"},
}

VOCAB = b"<unk>\n<s>\n</s>\nthe\ncat\nna\xc3\xafve\n"
VOCAB_COUNTS = b"<unk>\t0\n<s>\t0\n</s>\t12\nthe\t7\ncat\t3\n"

LSTM_CONFIG = {
    "data": {
        "corpus": "jsonl",
        "path": "c.jsonl",
        "context_fields": ["topic"],
        "stratify_by": "topic",
        "split": [0.7, 0.3, 0.0],
        "vocab_size": 100,
        "tokenizer": {"kind": "unigram", "vocab_size": 400},
    },
    "model": {"mode": "factor", "embed_dim": 16, "hidden_dim": 24, "rank": 2, "num_classes": 4},
    "train": {"epochs": 3, "batch_tokens": 120, "lr": 0.02, "patience": 5, "device": "cpu"},
}
FNLM_CONFIG = {
    "data": {
        "corpus": "plain",
        "train": "x",
        "dev": "x",
        "factors": ["word", "suffix2", "shape"],
        "output_min_count": 2,
    },
    "model": {"order": 3, "embed_dim": 4, "hidden_dim": 6, "num_classes": 3},
    "train": {"epochs": 20, "patience": 2, "batch_size": 128, "lr": 0.001, "flatten_alpha": 0.05},
}
LBL_CONFIG = {
    "data": {
        "corpus": "jsonl",
        "path": "c.jsonl",
        "attributes": ["genre", "doc"],
        "max_vocab": None,
        "split": [0.6, 0.2, 0.2],
    },
    "model": {"order": 3, "embed_dim": 6, "factors": 6, "attr_dims": {"genre": 3, "doc": 2}},
    "train": {"epochs": 12, "batch_size": 32, "lr": 0.1, "patience": 12},
}

SENTENCES = b"s1\tthanks for the update\ns2\tsee you at noon\n\ns3\tok\n"

RESULTS = tuple(
    SentenceResult(f"s{i}", 3 + i, 15 + i, {1: 10, 3: 8 - i}, {1: 1, 3: 2}, 1.5, i % 2).to_json()
    for i in range(3)
)

PREDICT = b'the cat\ns\nthe cat\tsa\t{"genre": "news"}\n\t\t{}\nhello world\t\t\n'
PREDICT_CONTEXTS = ({"genre": "news"}, {"genre": "chat", "year": 2001}, {})


def _lines(values: Sequence[Any]) -> bytes:
    return "".join(json.dumps(v) + "\n" for v in values).encode()


TARGETS = (
    Target(
        "references",
        {
            "read_trn": read_trn,
            "read_trn_full": lambda p: read_trn(p, "full"),
            "read_kaldi_text": read_kaldi_text,
            "read_references": read_references,
        },
        (TRN, KALDI, b"a b (u1)\nb a a (u2)\n"),
        file_names=("ref.trn", "text"),
    ),
    Target("utt2spk", {"read_utt2spk": read_utt2spk}, (UTT2SPK, b"u1 s1\r\nu2\ts2\n")),
    Target(
        "contexts",
        {"read_contexts": read_contexts},
        (_lines(CONTEXT_JSON), CONTEXT_TSV),
        file_names=("ctx.jsonl", "ctx.tsv", "ctx"),
        json_seeds=CONTEXT_JSON,
        json_layout="lines",
        json_keys=("utt", "fields", "genre", "geo"),
    ),
    Target(
        "weights",
        {"Weights.load": Weights.load},
        (json.dumps(WEIGHTS, indent=2).encode(),),
        file_names=("weights.json",),
        json_seeds=(WEIGHTS,),
        json_keys=("format", "version", "features", "length", "meta", "lm"),
    ),
    Target(
        "vocabulary",
        {
            "Vocabulary.load": Vocabulary.load,
            "read_tokens": read_tokens,
            "read_word_list": read_word_list,
        },
        (VOCAB, VOCAB_COUNTS),
        file_names=("vocab.txt",),
    ),
    Target(
        "training-config",
        {
            "TrainConfig.load": TrainConfig.load,
            "FNLMTrainConfig.load": FNLMTrainConfig.load,
            "LBLTrainConfig.load": LBLTrainConfig.load,
        },
        tuple(json.dumps(c, indent=2).encode() for c in (LSTM_CONFIG, FNLM_CONFIG, LBL_CONFIG)),
        file_names=("config.json",),
        json_seeds=(LSTM_CONFIG, FNLM_CONFIG, LBL_CONFIG),
        json_keys=("data", "model", "train", "tokenizer", "split", "corpus", "attr_dims"),
    ),
    Target(
        "keyboard-sentences",
        {
            f"read_sentences({fmt})": functools.partial(read_sentences, fmt=fmt)
            for fmt in ("auto", "tsv", "kaldi", "plain")
        },
        (SENTENCES, KALDI),
    ),
    Target(
        "keyboard-results",
        {"read_sentence_results": read_sentence_results},
        (_lines(RESULTS),),
        file_names=("results.jsonl",),
        json_seeds=RESULTS,
        json_layout="lines",
        json_keys=("id", "words", "baseline", "keystrokes", "hits", "reciprocal_rank", "oov"),
    ),
    Target(
        "predict-batch",
        {"read_requests": read_requests},
        (PREDICT,),
        json_seeds=PREDICT_CONTEXTS,
        json_layout="predict",
        json_keys=("genre", "year"),
    ),
)


# -- strategies -----------------------------------------------------------------------------------


@st.composite
def mutated(draw: st.DrawFn, seeds: tuple[bytes, ...]) -> bytes:
    """A seed with 1 to 8 byte-level mutations."""
    data = bytearray(draw(st.sampled_from(seeds)))
    snippet = st.sampled_from(INTERESTING) | st.binary(min_size=1, max_size=4)
    for _ in range(draw(st.integers(1, 8))):
        op = draw(st.sampled_from(("insert", "replace", "delete", "repeat", "truncate", "flip")))
        pos = draw(st.integers(0, len(data)))
        size = draw(st.integers(1, 16))
        if op == "insert":
            data[pos:pos] = draw(snippet)
        elif op == "replace":
            data[pos : pos + size] = draw(snippet)
        elif op == "delete":
            del data[pos : pos + size]
        elif op == "repeat":
            data[pos:pos] = data[pos : pos + size] * draw(st.integers(1, 3))
        elif op == "truncate":
            del data[pos:]
        elif pos < len(data):
            data[pos] ^= 1 << draw(st.integers(0, 7))
    return bytes(data)


def json_leaves(keys: tuple[str, ...]) -> st.SearchStrategy[Any]:
    return (
        st.none()
        | st.booleans()
        | st.integers(min_value=-(10**30), max_value=10**30)
        | st.floats(allow_nan=False, allow_infinity=False)
        | st.text(max_size=8)
        | st.sampled_from(keys or ("x",))
    )


def json_values(keys: tuple[str, ...]) -> st.SearchStrategy[Any]:
    names = st.sampled_from(keys or ("x",)) | st.text(max_size=6)
    return st.recursive(
        json_leaves(keys),
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(names, inner, max_size=5),
        max_leaves=12,
    )


@st.composite
def json_mutated(draw: st.DrawFn, target: Target) -> Any:
    """A valid JSON value of the target with 1 to 3 values replaced, removed or added."""
    value = copy.deepcopy(draw(st.sampled_from(target.json_seeds)))
    names = st.sampled_from(target.json_keys or ("x",)) | st.text(max_size=6)
    for _ in range(draw(st.integers(1, 3))):
        node = value
        while isinstance(node, (dict, list)) and node and draw(st.booleans()):
            keys = list(node) if isinstance(node, dict) else list(range(len(node)))
            child = node[draw(st.sampled_from(keys))]
            if not isinstance(child, (dict, list)):
                break
            node = child
        if isinstance(node, dict):
            op = draw(st.sampled_from(("set", "remove", "add")))
            if op == "add" or not node:
                node[draw(names)] = draw(json_values(target.json_keys))
            elif op == "remove":
                del node[draw(st.sampled_from(sorted(node)))]
            else:
                node[draw(st.sampled_from(sorted(node)))] = draw(json_values(target.json_keys))
        elif isinstance(node, list):
            if node and draw(st.booleans()):
                node[draw(st.integers(0, len(node) - 1))] = draw(json_values(target.json_keys))
            else:
                node.append(draw(json_values(target.json_keys)))
        else:
            value = draw(json_values(target.json_keys))
    return value


@st.composite
def json_document(draw: st.DrawFn, target: Target) -> bytes:
    """A JSON file of the target's layout made of mutated and valid values."""
    one = json_mutated(target) | st.sampled_from(target.json_seeds) | json_values(target.json_keys)
    if target.json_layout == "document":
        return json.dumps(draw(one), indent=draw(st.sampled_from((None, 2)))).encode()
    values = draw(st.lists(one, min_size=1, max_size=4))
    if target.json_layout == "lines":
        return _lines(values)
    words = st.text(alphabet="ab é", max_size=8)
    lines = [f"{draw(words)}\t{draw(words).strip()}\t{json.dumps(v)}" for v in values]
    return "\n".join(lines).encode()


def contents(target: Target) -> st.SearchStrategy[bytes]:
    options = [
        st.binary(max_size=512),
        mutated(target.seeds),
        mutated(target.seeds),
        st.text(alphabet=TEXT_CHARS, max_size=200).map(
            lambda s: s.encode("utf-8", "surrogatepass")
        ),
    ]
    if target.json_seeds:
        options += [json_document(target), json_document(target)]
    return st.one_of(*options)


# -- the fuzz loop --------------------------------------------------------------------------------


def fuzz(target: Target, folder: Path, seconds: float) -> tuple[int, dict[str, int]]:
    """Run examples for about ``seconds``; (examples, InputErrors per reader)."""
    refused = dict.fromkeys(target.readers, 0)
    count = 0

    def check(data: bytes, name: str, compressed: bool) -> None:
        nonlocal count
        count += 1
        path = folder / (name + ".gz" if compressed else name)
        path.write_bytes(gzip.compress(data, mtime=0) if compressed else data)
        try:
            for reader_name, read in target.readers.items():
                try:
                    read(path)
                except InputError:
                    refused[reader_name] += 1
        finally:
            path.unlink()

    example = st.tuples(
        contents(target),
        st.sampled_from(target.file_names),
        st.sampled_from((False, False, False, True)),
    )

    def run(n: int) -> None:
        @settings(
            max_examples=n,
            deadline=None,
            database=None,
            phases=(Phase.generate, Phase.shrink),
            suppress_health_check=list(HealthCheck),
        )
        @given(example)
        def one(args: tuple[bytes, str, bool]) -> None:
            check(*args)

        one()

    end = time.monotonic() + seconds
    batch = 20
    while time.monotonic() < end:
        start, before = time.monotonic(), count
        run(batch)
        rate = (time.monotonic() - start) / max(count - before, 1)
        # half the time left at the rate so far: examples grow slower as a run goes on
        batch = max(1, min(MAX_BATCH, int(0.5 * (end - time.monotonic()) / rate)))
    return count, refused


@pytest.mark.parametrize("target", TARGETS, ids=[t.name for t in TARGETS])
def test_readers_raise_only_input_errors(target: Target, tmp_path: Path) -> None:
    for seed in target.seeds:  # valid files: a reader that refused everything would pass
        accepted = []
        for file_name in target.file_names:
            path = tmp_path / file_name
            path.write_bytes(seed)
            for name, read in target.readers.items():
                try:
                    read(path)
                    accepted.append(name)
                except InputError:
                    pass
            path.unlink()
        assert accepted, f"no reader accepts the seed {seed[:40]!r}"
    start = time.monotonic()
    count, refused = fuzz(target, tmp_path, FUZZ_SECONDS)
    logger.info(
        "%s: %d examples in %.1f s; refused (InputError) per reader: %s",
        target.name,
        count,
        time.monotonic() - start,
        refused,
    )
    assert count > 0
    # Both outcomes occur: the inputs are neither all refused nor all accepted.
    assert all(0 < n < count for n in refused.values()), refused
