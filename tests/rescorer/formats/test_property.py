"""Property tests: every reader turns arbitrary input into a result or an InputError naming a
file, never another exception; every writer round-trips what it is given."""

from __future__ import annotations

import json
import math
import tempfile
from collections.abc import Callable
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rescorer.core.constants import BYTELOG_TO_LN
from rescorer.core.errors import InputError
from rescorer.formats import READERS, WRITERS, detect_format, read_nbest
from rescorer.nbest import Hypothesis, NBest, NBestList
from rescorer.refs import read_kaldi_text, read_references, read_trn, read_utt2spk

SETTINGS = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow], database=None
)

# --- arbitrary file contents ------------------------------------------------------------------

TOKENS = [
    "NBestList1.0", "NBestList2.0", "(", ")", "(-12)", "(3.5)", "(x)", "()", "st:", "et:", "g:",
    "a:", "0", "0.5", "1.5", "-3", "7", "nan", "inf", "-inf", "1e999", "1_0", "tensor(-1.5)",
    "tensor(", "tensor(nan)", "{", "}", "[", "]", '"', ":", ",", '{"lm": -1}', '{"lm": "x"}',
    '{"a": "tensor(2)"}', "null", "true", "u", "v", "u-1", "u-2", "v-1", "u-0", "utt1", "<s>",
    "</s>", "-pau-", "é", "▁a", "\x00", "\t", "\r", "\\", "hyp1", "hyp2", '"text"', '"utt"',
    '"hyps"', "ref", "..", "/", ".", "nbest.list", "a.nbest", "b", "(u-u-1)", "(u1)", "\x1c",
    "\u2028", "\ufeff", '[{"input": ["a"]}]', '"input"', '"output"', '"id"',
]  # fmt: skip
LINE = st.lists(st.one_of(st.sampled_from(TOKENS), st.text(max_size=4)), max_size=10).map(" ".join)
TEXT = st.lists(LINE, max_size=6).map("\n".join)
JSON_KEYS = st.sampled_from(
    [
        "utt",
        "hyps",
        "text",
        "scores",
        "tokens",
        "ref",
        "hyp1",
        "hyp2",
        "h10",
        "score",
        "lm",
        "u",
        "input",
        "output",
        "id",
        "instruction",
    ]
)
JSON_VALUE = st.recursive(
    st.none() | st.booleans() | st.floats() | st.integers() | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(JSON_KEYS | st.text(max_size=3), inner, max_size=4)
    ),
    max_leaves=20,
)
JSON_TEXT = JSON_VALUE.map(json.dumps)
RECORD = st.fixed_dictionaries(
    {"input": st.lists(st.text(max_size=5), max_size=3) | JSON_VALUE},
    optional={"output": JSON_VALUE, "id": JSON_VALUE, "score": JSON_VALUE},
)
RECORDS_TEXT = st.lists(RECORD | JSON_VALUE, max_size=3).map(lambda v: json.dumps(v, indent=1))
JSONL_TEXT = st.lists(JSON_VALUE.map(json.dumps) | LINE, max_size=4).map("\n".join)
CONTENT = st.one_of(
    TEXT, JSON_TEXT, JSONL_TEXT, RECORDS_TEXT, st.text(max_size=120), st.binary(max_size=120)
)


def to_bytes(content: str | bytes) -> bytes:
    return content if isinstance(content, bytes) else content.encode("utf-8", "surrogatepass")


def write_tree(root: Path, files: dict[str, str | bytes | None]) -> None:
    for rel, content in files.items():
        if content is None:
            continue
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(to_bytes(content))


def check(read: Callable[[Path], object], path: Path, root: Path) -> None:
    """``read(path)`` returns, or raises InputError naming a file under ``root``."""
    try:
        read(path)
    except InputError as err:
        assert err.path is not None, str(err)
        assert err.path in str(err)
        assert err.path.startswith(str(root)), str(err)


# --- readers on arbitrary input ---------------------------------------------------------------


@SETTINGS
@given(
    content=CONTENT,
    fmt=st.sampled_from(["srilm1", "srilm2", "srilm3", "json", "jsonl", "hyporadise"]),
    name=st.sampled_from(["u1.nbest", "u1.nbest.gz", "u1.json", "u1.jsonl.gz"]),
)
def test_file_readers_never_crash(content: str | bytes, fmt: str, name: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        write_tree(root, {name: content, "a.nbest": "NBestList1.0\n(-1) A\n", "b": "1 2 3"})
        check(READERS[fmt], root / name, root)
        check(read_nbest, root / name, root)  # detection first
        check(detect_format, root / name, root)


@SETTINGS
@given(
    header=st.sampled_from(["", "NBestList1.0\n", "NBestList2.0\n"]),
    body=TEXT,
    fmt=st.sampled_from(["srilm1", "srilm2", "srilm3"]),
)
def test_srilm_with_headers_never_crash(header: str, body: str, fmt: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        write_tree(root, {"d/x.nbest": header + body})
        check(READERS[fmt], root / "d" / "x.nbest", root)
        check(READERS[fmt], root / "d", root)
        check(read_nbest, root / "d", root)


@SETTINGS
@given(
    listing=TEXT,
    files=st.dictionaries(st.sampled_from(["a.nbest", "b", "c.score.gz", "sub/d"]), CONTENT),
    fmt=st.sampled_from(["srilm1", "srilm2", "srilm3"]),
    as_folder=st.booleans(),
)
def test_srilm_lists_never_crash(
    listing: str, files: dict[str, str | bytes], fmt: str, as_folder: bool
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        write_tree(root, {**files, "nbest.list": listing})
        target = root if as_folder else root / "nbest.list"
        check(READERS[fmt], target, root)
        check(read_nbest, target, root)


ESPNET_LINE = st.tuples(
    st.sampled_from(["u", "v", "w", ""]), st.one_of(st.sampled_from(TOKENS), LINE)
).map(" ".join)
ESPNET_FILE = st.none() | st.lists(ESPNET_LINE, max_size=4).map("\n".join) | CONTENT


@SETTINGS
@given(files=st.fixed_dictionaries({
    f"raw_hypotheses/{k}best_recog/{name}": ESPNET_FILE
    for k in (1, 2) for name in ("text", "score", "scores", "token")
}))  # fmt: skip
def test_espnet_never_crashes(files: dict[str, str | bytes | None]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        write_tree(root, files)
        check(READERS["espnet"], root, root)
        check(read_nbest, root, root)


KALDI_LINE = st.tuples(
    st.sampled_from(["u-1", "u-2", "v-1", "u-3", "x", "u-0"]),
    st.one_of(st.sampled_from(TOKENS), LINE),
).map(" ".join)
KALDI_FILE = st.none() | st.lists(KALDI_LINE, max_size=4).map("\n".join) | CONTENT


@SETTINGS
@given(files=st.fixed_dictionaries(
    {"text": KALDI_FILE, "ac_cost": KALDI_FILE, "lm_cost": KALDI_FILE, "am_cost": st.none() | TEXT}
))  # fmt: skip
def test_kaldi_never_crashes(files: dict[str, str | bytes | None]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        write_tree(root, files)
        check(READERS["kaldi"], root, root)
        check(read_nbest, root, root)


@SETTINGS
@given(content=CONTENT | st.lists(LINE.map(lambda s: s + " (u-u-1)"), max_size=4).map("\n".join))
def test_reference_readers_never_crash(content: str | bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        write_tree(root, {"ref": content})
        path = root / "ref"
        for style in ("auto", "full", "espnet"):
            check(lambda p, s=style: read_trn(p, s), path, root)
        check(read_kaldi_text, path, root)
        check(read_utt2spk, path, root)
        check(read_references, path, root)


# --- writer -> reader round trips -------------------------------------------------------------

FIELD = st.text(
    st.characters(
        blacklist_categories=("Cs", "Cc", "Zs", "Zl", "Zp"),
        blacklist_characters="\ufeff",  # readers drop it; writers refuse it
    ),
    min_size=1,
    max_size=6,
).filter(lambda s: not any(c.isspace() for c in s) and s not in ("<s>", "</s>", "-pau-"))
UTT_ID = FIELD.filter(lambda s: "/" not in s and not s.startswith(".") and "(" not in s)
SCORE = st.floats(allow_nan=False, allow_infinity=False, min_value=-1e6, max_value=1e6)
NAMES = st.sampled_from(["am", "lm", "score", "decoder", "ctc", "x.y", "rnnlm_cost", "Ω"])


@st.composite
def nbests(draw, with_tokens: bool = True, min_hyps: int = 1) -> NBest:
    names = draw(st.lists(NAMES, unique=True, max_size=3))
    tokens = with_tokens and draw(st.booleans())
    ids = draw(st.lists(UTT_ID, unique=True, max_size=4))
    lists = []
    for utt in ids:
        hyps = [
            Hypothesis(
                draw(st.lists(FIELD, max_size=4)),
                {n: draw(SCORE) for n in names},
                draw(st.lists(FIELD, max_size=3)) if tokens else None,
            )
            for _ in range(draw(st.integers(min_hyps, 4)))
        ]
        lists.append(NBestList(utt, hyps))
    refs = {u: tuple(draw(st.lists(FIELD, max_size=3))) for u in ids if draw(st.booleans())}
    return NBest(lists, refs or None)


@SETTINGS
@given(nb=nbests(min_hyps=0), fmt=st.sampled_from(["json", "jsonl"]))
def test_json_round_trips_exactly(nb: NBest, fmt: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"x.{fmt}"
        WRITERS[fmt](nb, path)
        back = read_nbest(path)
        assert list(back.items()) == list(nb.items())
        assert back.references == nb.references


@SETTINGS
@given(nb=nbests(with_tokens=False, min_hyps=0))
def test_hyporadise_round_trips_exactly(nb: NBest) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "x.json"
        WRITERS["hyporadise"](nb, path)
        back = read_nbest(path)
        assert list(back.items()) == list(nb.items())
        assert back.references == nb.references


@SETTINGS
@given(nb=nbests())
def test_espnet_round_trips_exactly(nb: NBest) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        WRITERS["espnet"](nb, Path(tmp))
        back = read_nbest(Path(tmp), "espnet")
        assert list(back.items()) == list(nb.items())


@SETTINGS
@given(nb=nbests(with_tokens=False))
def test_kaldi_round_trips_exactly(nb: NBest) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        WRITERS["kaldi"](nb, Path(tmp))
        back = read_nbest(Path(tmp), "kaldi")
        assert list(back.items()) == list(nb.items())


@SETTINGS
@given(nb=nbests(with_tokens=False, min_hyps=0), data=st.data())
def test_srilm_round_trips(nb: NBest, data: st.DataObject) -> None:
    lists = [
        NBestList(
            u,
            [
                Hypothesis(h.words, {"score": data.draw(SCORE), "acoustic": data.draw(SCORE),
                                     "lm": data.draw(SCORE)})
                for h in v
            ],
        )
        for u, v in nb.items()
    ]  # fmt: skip
    nb = NBest(lists)
    for fmt in ("srilm1", "srilm3"):
        with tempfile.TemporaryDirectory() as tmp:
            WRITERS[fmt](nb, Path(tmp) / "out")
            back = read_nbest(Path(tmp) / "out", fmt)
            if len(nb) and (fmt == "srilm1" or nb.num_hyps()):
                assert detect_format(Path(tmp) / "out") == fmt
            assert list(back) == list(nb)
            for u in nb:
                for h, g in zip(nb[u], back[u], strict=True):
                    assert g.words == h.words
                    if fmt == "srilm1":
                        assert (
                            abs(g.scores["score"] - h.scores["score"]) <= BYTELOG_TO_LN / 2 + 1e-9
                        )
                    else:
                        for name in ("acoustic", "lm"):
                            assert math.isclose(g.scores[name], h.scores[name], rel_tol=1e-15,
                                                abs_tol=1e-300)  # fmt: skip
                        assert g.scores["nwords"] == len(h.words)
