"""Corpus readers, tokenisation, splits and chunks: hand-written fixtures, real-data counts and
a property test (arbitrary input gives Documents or an InputError, never another exception)."""

from __future__ import annotations

import json
import pickle
import random
import tempfile
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rescorer.core.errors import InputError
from rescorer.lm_models.corpora import (
    PAPER_MAX_LEN,
    Document,
    brown_base_tag,
    brown_coarse_tag,
    chunk_documents,
    clean_agnews_text,
    corpus_stats,
    read_agnews,
    read_brown,
    read_brown_tagged,
    read_dbpedia,
    read_jsonl,
    read_novels,
    read_plain,
    read_state_union,
    split_documents,
    split_sentences,
    tokenize,
)
from rescorer.lm_models.vocab import build_vocabulary

SETTINGS = settings(
    max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow], database=None
)


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def assert_input_error(err: InputError, path: Path, line: int | None) -> None:
    assert err.path == str(path)
    assert err.line == line
    prefix = f"{path}:{line}: " if line is not None else f"{path}: "
    assert str(err).startswith(prefix)


# --- Document ----------------------------------------------------------------------------------


def test_document_normalises_and_is_read_only() -> None:
    doc = Document("d1", [["a", "b"], ["c"]], {"genre": "news"})
    assert doc.sentences == (("a", "b"), ("c",))
    assert doc.fields == {"genre": "news"}
    assert doc.n_tokens == 3
    assert doc.tags is None
    with pytest.raises(TypeError):
        doc.fields["genre"] = "x"  # type: ignore[index]
    with pytest.raises(AttributeError):
        doc.doc_id = "d2"  # type: ignore[misc]
    assert doc == Document("d1", (("a", "b"), ("c",)), {"genre": "news"})
    assert hash(doc) == hash(Document("d1", (("a", "b"), ("c",)), {"genre": "news"}))
    assert pickle.loads(pickle.dumps(doc)) == doc
    assert Document("e", []).fields == {}


def test_document_tags() -> None:
    doc = Document("d", [["the", "dog"]], {}, [["at", "nn"]])
    assert doc.tagged_sentences() == ((("the", "at"), ("dog", "nn")),)
    with pytest.raises(ValueError, match="parallel"):
        Document("d", [["the", "dog"]], {}, [["at"]])
    with pytest.raises(ValueError, match="no tags"):
        Document("d", [["x"]]).tagged_sentences()


def test_document_rejects_wrong_types() -> None:
    with pytest.raises(TypeError):
        Document("d", ["a sentence as a string"])
    with pytest.raises(TypeError):
        Document("d", [[1, 2]])  # type: ignore[list-item]
    with pytest.raises(TypeError):
        Document("d", [], {"year": 1999})  # type: ignore[dict-item]
    with pytest.raises(TypeError):
        Document(3, [])  # type: ignore[arg-type]


# --- tokenisation ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("The Cat sat.", ["the", "cat", "sat"]),
        ("Don't stop -- it's 5 o'clock!", ["don't", "stop", "it's", "5", "o'clock"]),
        ('He said: "Hi," (twice); ok?', ["he", "said", "hi", "twice", "ok"]),
        ("$1,000.50 or 3.5% of 10,000", ["1,000.50", "or", "3.5", "of", "10,000"]),
        ("The U.S. and the U.N. at 5 p.m.", ["the", "u.s", "and", "the", "u.n", "at", "5", "p.m"]),
        ("singer-songwriter e-mail 1944-2001", ["singer-songwriter", "e-mail", "1944-2001"]),
        ("'Em workers' rock'n'roll", ["em", "workers", "rock'n'roll"]),
        ("It\u2019s Jane\u2018s", ["it's", "jane's"]),
        ("space.com Pomerania.The", ["space", "com", "pomerania", "the"]),
        ("snake_case foo/bar a+b x--y", ["snake", "case", "foo", "bar", "a", "b", "x", "y"]),
        ("Café NAÏVE über", ["café", "naïve", "über"]),
        ("ﬁne ＡＢＣ １２", ["fine", "abc", "12"]),  # NFKC: ligature, full-width forms
        ("cafe\u0301", ["café"]),  # combining accent is composed and kept in the word
        ("...!!! --- ''", []),
        ("", []),
        ("a...b", ["a", "b"]),
    ],
)
def test_tokenize_examples(text: str, expected: list[str]) -> None:
    assert tokenize(text) == expected


def test_tokenize_keeps_case_when_asked() -> None:
    assert tokenize("The U.S. Army's", lower=False) == ["The", "U.S", "Army's"]


@SETTINGS
@given(st.text(max_size=80))
def test_tokenize_deterministic_and_stable(text: str) -> None:
    tokens = tokenize(text)
    assert tokens == tokenize(text)
    assert all(t and not any(c.isspace() for c in t) for t in tokens)
    assert tokenize(" ".join(tokens)) == tokens  # tokenised text is a fixed point


def test_split_sentences() -> None:
    text = 'He left. She stayed! Did they? "Yes." 2 more. e.g. not this one.'
    assert split_sentences(text) == [
        "He left.",
        "She stayed!",
        "Did they?",
        '"Yes."',
        "2 more. e.g. not this one.",
    ]
    assert split_sentences("  ") == []


def test_clean_agnews_text() -> None:
    assert clean_agnews_text("a second\\team for \\$10") == "a second team for $10"
    assert clean_agnews_text("end.\\\\Next") == "end. Next"
    assert clean_agnews_text("Sweden doesn #39;t know") == "Sweden doesn't know"
    assert clean_agnews_text("the  #36;10 million") == "the  $10 million"
    assert clean_agnews_text("In  quot;help quot; now") == 'In  "help " now'
    assert clean_agnews_text("J amp;J") == "J &J"
    assert clean_agnews_text("threat #151;prost") == "threat —prost"
    assert clean_agnews_text("say #39;hi #39;. And #1; x") == "say 'hi'. And #1; x"
    html = 'Inc. &lt;A HREF="http://x.com/q?t=X.N"&gt;X.N&lt;/A&gt; said'
    assert tokenize(clean_agnews_text(html)) == ["inc", "x.n", "said"]


# --- Brown -------------------------------------------------------------------------------------


BROWN_CATS = "ca01 news\ncb01 editorial\n\ncp01 romance\n"
BROWN_FILES = {
    "ca01": (
        "\n\n\tThe/at Fulton/np-tl jury/nn said/vbd ``/`` no/at ''/'' ./.\n\n\n"
        "\tIt/pps was/bedz n't/* done/vbn ,/, he/pps said/vbd ;/. 3/cd (/( a/at )/) :/:\n"
    ),
    "cb01": "Assembly/nn-hl session/nn-hl ./.-hl\n\n\t--/-- ``/``\n\tand/or/cc 1/2/cd\n",
    "cp01": "",
}


@pytest.fixture()
def brown_dir(tmp_path: Path) -> Path:
    root = tmp_path / "brown"
    write(root / "cats.txt", BROWN_CATS)
    for name, text in BROWN_FILES.items():
        write(root / name, text)
    write(root / "README", "not listed in cats.txt, so not read\n")
    return root


def test_read_brown(brown_dir: Path) -> None:
    docs = read_brown(brown_dir)
    assert [d.doc_id for d in docs] == ["ca01", "cb01", "cp01"]
    assert [d.fields["genre"] for d in docs] == ["news", "editorial", "romance"]
    assert docs[0].sentences == (
        ("the", "fulton", "jury", "said", "no"),
        ("it", "was", "n't", "done", "he", "said", "3", "a"),
    )
    # the all-punctuation line of cb01 is dropped; words keep their own slashes
    assert docs[1].sentences == (("assembly", "session"), ("and/or", "1/2"))
    assert docs[2].sentences == ()
    assert all(d.tags is None for d in docs)


def test_read_brown_keep_case_and_punct(brown_dir: Path) -> None:
    docs = read_brown(brown_dir, lower=False, drop_punct=False)
    assert docs[0].sentences[0] == ("The", "Fulton", "jury", "said", "``", "no", "''", ".")
    assert docs[1].sentences[1] == ("--", "``")
    assert len(docs[1].sentences) == 3


def test_read_brown_tagged(brown_dir: Path) -> None:
    docs = read_brown_tagged(brown_dir)
    assert docs[0].tagged_sentences()[0] == (
        ("the", "at"),
        ("fulton", "np-tl"),
        ("jury", "nn"),
        ("said", "vbd"),
        ("no", "at"),
    )
    assert docs[1].tags == (("nn-hl", "nn-hl"), ("cc", "cd"))
    assert read_brown_tagged(brown_dir, drop_punct=False)[1].tags[0] == ("nn-hl", "nn-hl", ".-hl")
    assert [brown_base_tag(t) for t in [".-hl", "---hl", "nn-tl-hl", "*", "-hl"]] == [
        ".",
        "--",
        "nn",
        "*",
        "-hl",
    ]


def test_brown_coarse_tag() -> None:
    tags = ["nn", "nns$-tl", "fw-nn-hl", "pp$$", "pp$", "ppss+md", "md*", ".-hl", "--", "'", "-hl"]
    assert [brown_coarse_tag(t) for t in tags] == [
        "nn", "nns", "fw", "pp", "pp", "ppss+md", "md*", "PUNCT", "PUNCT", "PUNCT", "-hl",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("cats", "files", "where", "line", "match"),
    [
        ("ca01 news extra\n", {"ca01": "a/at\n"}, "cats.txt", 1, "expected 'file genre'"),
        ("ca01 news\nca02 news\n", {"ca01": "a/at\n"}, "cats.txt", 2, "missing"),
        ("ca01 news\nca01 lore\n", {"ca01": "a/at\n"}, "cats.txt", 2, "listed twice"),
        ("../ca01 news\n", {"ca01": "a/at\n"}, "cats.txt", 1, "not a plain file name"),
        ("ca01 news\n", {"ca01": "\ta/at b/nn\n\tc/nn d\n"}, "ca01", 2, "'d' is not 'word/tag'"),
        ("ca01 news\n", {"ca01": "a/at /nn\n"}, "ca01", 1, "not 'word/tag'"),
        ("ca01 news\n", {"ca01": "a/at b/\n"}, "ca01", 1, "not 'word/tag'"),
    ],
)
def test_read_brown_errors(
    tmp_path: Path, cats: str, files: dict[str, str], where: str, line: int, match: str
) -> None:
    write(tmp_path / "cats.txt", cats)
    for name, text in files.items():
        write(tmp_path / name, text)
    with pytest.raises(InputError, match=match) as info:
        read_brown(tmp_path)
    assert_input_error(info.value, tmp_path / where, line)


def test_read_brown_missing_cats(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="not found") as info:
        read_brown(tmp_path)
    assert_input_error(info.value, tmp_path / "cats.txt", None)


def test_read_brown_not_utf8(tmp_path: Path) -> None:
    write(tmp_path / "cats.txt", "ca01 news\n")
    (tmp_path / "ca01").write_bytes(b"a/at\nb\xff/nn\n")
    with pytest.raises(InputError, match="UTF-8") as info:
        read_brown(tmp_path)
    assert_input_error(info.value, tmp_path / "ca01", 2)


# --- AG News -----------------------------------------------------------------------------------

AG_CLASSES = "World\nSports\nBusiness\nSci/Tech\n"
AG_CSV = (
    '"3","Fears for T N pension","Unions say they\'re #39;disappointed #39;. Talks go on."\n'
    '"4","Ky. Company (AP)","AP - A company\\founded by \\$5 researchers won."\n'
    "\n"
    '"1","Quote ""this""","Said  quot;No quot;! Then left? Yes"\n'
)


@pytest.fixture()
def agnews_csv(tmp_path: Path) -> Path:
    write(tmp_path / "classes.txt", AG_CLASSES)
    return write(tmp_path / "test.csv", AG_CSV)


def test_read_agnews(agnews_csv: Path) -> None:
    docs = read_agnews(agnews_csv)
    assert [d.doc_id for d in docs] == ["test-1", "test-2", "test-4"]
    assert [d.fields["topic"] for d in docs] == ["Business", "Sci/Tech", "World"]
    assert docs[0].sentences == (
        (
            "fears", "for", "t", "n", "pension", "unions", "say", "they're",
            "disappointed", "talks", "go", "on",
        ),
    )  # fmt: skip
    assert docs[1].sentences == (
        ("ky", "company", "ap", "ap", "a", "company", "founded", "by", "5", "researchers", "won"),
    )
    assert docs[2].sentences == (("quote", "this", "said", "no", "then", "left", "yes"),)


def test_read_agnews_sentences_and_max_len(agnews_csv: Path) -> None:
    docs = read_agnews(agnews_csv, split_sentences=True)
    assert docs[0].sentences == (
        ("fears", "for", "t", "n", "pension"),
        ("unions", "say", "they're", "disappointed"),
        ("talks", "go", "on"),
    )
    assert docs[2].sentences == (("quote", "this"), ("said", "no"), ("then", "left"), ("yes",))
    docs = read_agnews(agnews_csv, max_len=3)
    assert [d.sentences for d in docs] == [
        (("fears", "for", "t"),),
        (("ky", "company", "ap"),),
        (("quote", "this", "said"),),
    ]
    assert read_agnews(agnews_csv, lower=False)[1].sentences[0][:2] == ("Ky", "Company")
    with pytest.raises(ValueError, match="max_len"):
        read_agnews(agnews_csv, max_len=0)


def test_read_agnews_classes_path(tmp_path: Path) -> None:
    csv_path = write(tmp_path / "data" / "x.csv", '"2","a","b"\n')
    classes = write(tmp_path / "names.txt", "One\nTwo\n\n")
    assert read_agnews(csv_path, classes)[0].fields == {"topic": "Two"}
    with pytest.raises(InputError, match="not found") as info:
        read_agnews(csv_path)
    assert_input_error(info.value, tmp_path / "data" / "classes.txt", None)


@pytest.mark.parametrize(
    ("row", "match"),
    [
        ('"3","only two"', "expected 3 columns"),
        ('"3","a","b","c"', "expected 3 columns"),
        ('"0","a","b"', "class index 0 out of range 1-4"),
        ('"5","a","b"', "class index 5 out of range"),
        ('"x","a","b"', "not an integer: 'x'"),
        ('"3","unterminated,"b"', "bad CSV"),
        ('"3","a"b,"c"', "bad CSV"),
    ],
)
def test_read_agnews_errors(tmp_path: Path, row: str, match: str) -> None:
    write(tmp_path / "classes.txt", AG_CLASSES)
    path = write(tmp_path / "test.csv", f'"1","ok","fine"\n{row}\n')
    with pytest.raises(InputError, match=match) as info:
        read_agnews(path)
    assert_input_error(info.value, path, 2)


@pytest.mark.parametrize(
    ("classes", "line", "match"),
    [
        ("A\n\nB\n", 2, "blank line"),
        ("A\nB\nA\n", 3, "listed twice"),
    ],
)
def test_class_file_errors(tmp_path: Path, classes: str, line: int, match: str) -> None:
    cpath = write(tmp_path / "classes.txt", classes)
    path = write(tmp_path / "test.csv", '"1","a","b"\n')
    with pytest.raises(InputError, match=match) as info:
        read_agnews(path)
    assert_input_error(info.value, cpath, line)
    write(tmp_path / "classes.txt", "\n\n")
    with pytest.raises(InputError, match="no class names"):
        read_agnews(path)


# --- DBpedia -----------------------------------------------------------------------------------

DB_CLASSES = "Company\nEducationalInstitution\nArtist\n"
DB_CSV = (
    "2,Clifford Ward ( 10 February 1944 ) was a singer-songwriter .\tHe died in 2001 .\n"
    "0,Acme Corp. is a U.S. company.The end .\n"
)


def test_read_dbpedia(tmp_path: Path) -> None:
    write(tmp_path / "classes.txt", DB_CLASSES)
    path = write(tmp_path / "train.csv", DB_CSV)
    docs = read_dbpedia(path)
    assert [d.doc_id for d in docs] == ["train-1", "train-2"]
    assert [d.fields for d in docs] == [{"class": "Artist"}, {"class": "Company"}]
    assert docs[0].sentences == (
        (
            "clifford", "ward", "10", "february", "1944", "was", "a", "singer-songwriter",
            "he", "died", "in", "2001",
        ),
    )  # fmt: skip
    assert docs[1].sentences == (("acme", "corp", "is", "a", "u.s", "company", "the", "end"),)
    split = read_dbpedia(path, split_sentences=True, max_len=PAPER_MAX_LEN)
    assert split[0].sentences == (
        ("clifford", "ward", "10", "february", "1944", "was", "a", "singer-songwriter"),
        ("he", "died", "in", "2001"),
    )
    assert read_dbpedia(path, max_len=2)[0].sentences == (("clifford", "ward"),)


@pytest.mark.parametrize(
    ("row", "match"),
    [
        ("no comma here", "no comma"),
        ("3,text", "class index 3 out of range 0-2"),
        ("-1,text", "out of range"),
        ("one,text", "not an integer"),
    ],
)
def test_read_dbpedia_errors(tmp_path: Path, row: str, match: str) -> None:
    write(tmp_path / "classes.txt", DB_CLASSES)
    path = write(tmp_path / "train.csv", f"0,fine\n\n{row}\n")
    with pytest.raises(InputError, match=match) as info:
        read_dbpedia(path)
    assert_input_error(info.value, path, 3)


# --- plain text and JSONL ----------------------------------------------------------------------


def test_read_plain(tmp_path: Path) -> None:
    path = write(tmp_path / "valid.txt", " the cat <unk> \n\n  \nA Dog  sat\n")
    docs = read_plain(path, {"genre": "x"})
    assert docs == [
        Document("valid-1", [["the", "cat", "<unk>"]], {"genre": "x"}),
        Document("valid-4", [["A", "Dog", "sat"]], {"genre": "x"}),
    ]
    (doc,) = read_plain(path, per="file", lower=True)
    assert doc == Document("valid", [["the", "cat", "<unk>"], ["a", "dog", "sat"]], {})
    with pytest.raises(ValueError, match="per"):
        read_plain(path, per="para")  # type: ignore[arg-type]
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"ok\n\xfe\n")
    with pytest.raises(InputError, match="UTF-8") as info:
        read_plain(bad)
    assert_input_error(info.value, bad, 2)


def test_read_plain_blocks_between_blank_lines(tmp_path: Path) -> None:
    path = write(tmp_path / "books.txt", "\n a b \nc\n\n \n\nd e\nf\ng\n")
    docs = read_plain(path, per="block")
    assert docs == [
        Document("books-2", [["a", "b"], ["c"]], {}),
        Document("books-7", [["d", "e"], ["f"], ["g"]], {}),
    ]


def test_read_jsonl(tmp_path: Path) -> None:
    lines = [
        {"id": "a", "text": "Hello, World!\nSecond line.", "fields": {"genre": "news"}},
        {"id": 7, "text": ["One.", "", "Two three"], "fields": {"year": 1999, "lat": 47.5}},
        {"id": "c", "text": "", "extra": [1, 2]},
    ]
    path = write(tmp_path / "d.jsonl", "\n".join(json.dumps(x) for x in lines) + "\n\n")
    docs = read_jsonl(path)
    assert docs == [
        Document("a", [["hello", "world"], ["second", "line"]], {"genre": "news"}),
        Document("7", [["one"], ["two", "three"]], {"year": "1999", "lat": "47.5"}),
        Document("c", [], {}),
    ]
    docs = read_jsonl(path, tokenizer=str.split, max_len=1)
    assert docs[0].sentences == (("Hello,",), ("Second",))


@pytest.mark.parametrize(
    ("line", "match"),
    [
        ('{"id": "a", "text": "x"', "invalid JSON"),
        ('["id", "text"]', "expected a JSON object, got list"),
        ('{"text": "x"}', "'id' must be"),
        ('{"id": "", "text": "x"}', "'id' must be"),
        ('{"id": true, "text": "x"}', "'id' must be"),
        ('{"id": "a", "text": "dup"}', "duplicate id 'a' \\(first on line 1\\)"),
        ('{"id": "b"}', "'text' must be"),
        ('{"id": "b", "text": ["x", 3]}', "'text' must be"),
        ('{"id": "b", "text": "x", "fields": []}', "'fields' must be"),
        ('{"id": "b", "text": "x", "fields": {"g": null}}', "field 'g' must be"),
        ('{"id": "b", "text": "x", "fields": {"g": {"h": 1}}}', "field 'g' must be"),
        ('{"id": "b", "text": "x", "fields": {"g": false}}', "field 'g' must be"),
        ("[" * 100_000, "invalid JSON"),
        ('{"id": 1' + "0" * 5000 + ', "text": "x"}', "invalid JSON"),
    ],
)
def test_read_jsonl_errors(tmp_path: Path, line: str, match: str) -> None:
    path = write(tmp_path / "d.jsonl", '{"id": "a", "text": "ok"}\n' + line + "\n")
    with pytest.raises(InputError, match=match) as info:
        read_jsonl(path)
    assert_input_error(info.value, path, 2)


# --- splits, chunks, stats ---------------------------------------------------------------------


def make_docs(sizes: dict[str, int]) -> list[Document]:
    docs = []
    for genre, n in sizes.items():
        for i in range(n):
            docs.append(Document(f"{genre}{i:02d}", [[genre, str(i)]], {"genre": genre}))
    return docs


GENRES = {"big": 40, "mid": 10, "three": 3, "two": 2, "one": 1}


def test_split_stratified() -> None:
    docs = make_docs(GENRES)
    train, dev, test = split_documents(docs, seed=3)
    assert sorted(d.doc_id for d in train + dev + test) == sorted(d.doc_id for d in docs)
    assert not {d.doc_id for d in train} & {d.doc_id for d in dev} & {d.doc_id for d in test}
    counts = [Counter(d.fields["genre"] for d in part) for part in (train, dev, test)]
    assert [c["big"] for c in counts] == [32, 4, 4]
    assert [c["mid"] for c in counts] == [8, 1, 1]
    assert [c["three"] for c in counts] == [1, 1, 1]
    assert [c["two"] for c in counts] == [2, 0, 0]  # largest remainder
    assert [c["one"] for c in counts] == [1, 0, 0]
    # each split keeps the input order
    order = {d.doc_id: i for i, d in enumerate(docs)}
    for part in (train, dev, test):
        assert [order[d.doc_id] for d in part] == sorted(order[d.doc_id] for d in part)


def test_split_deterministic_and_order_independent() -> None:
    docs = make_docs(GENRES)

    def ids(parts: tuple[list[Document], ...]) -> list[set[str]]:
        return [{d.doc_id for d in p} for p in parts]

    first = ids(split_documents(docs, seed=0))
    assert ids(split_documents(docs, seed=0)) == first
    shuffled = docs[:]
    random.Random(1).shuffle(shuffled)
    assert ids(split_documents(shuffled, seed=0)) == first
    assert any(ids(split_documents(docs, seed=s)) != first for s in range(1, 4))


def test_split_options() -> None:
    docs = make_docs({"a": 6, "b": 4})
    train, dev, test = split_documents(docs, fractions=(0.5, 0.5, 0.0), stratify_by=None)
    assert (len(train), len(dev), len(test)) == (5, 5, 0)
    docs.append(Document("nofield", [["x"]], {}))
    train, dev, test = split_documents(docs, stratify_by="genre")
    assert "nofield" in {d.doc_id for d in train}
    with pytest.raises(ValueError, match="sum to 1"):
        split_documents(docs, fractions=(0.5, 0.2, 0.2))
    with pytest.raises(ValueError, match="three"):
        split_documents(docs, fractions=(0.5, 0.5))
    assert split_documents([]) == ([], [], [])


@SETTINGS
@given(
    sizes=st.lists(st.integers(1, 30), min_size=1, max_size=6),
    fractions=st.sampled_from([(0.8, 0.1, 0.1), (0.6, 0.2, 0.2), (0.34, 0.33, 0.33)]),
    seed=st.integers(0, 5),
)
def test_split_property(sizes: list[int], fractions: tuple[float, ...], seed: int) -> None:
    docs = make_docs({f"g{i}": n for i, n in enumerate(sizes)})
    parts = split_documents(docs, fractions=fractions, seed=seed)
    assert sum(len(p) for p in parts) == len(docs)
    for i, n in enumerate(sizes):
        per_split = [sum(d.fields["genre"] == f"g{i}" for d in p) for p in parts]
        assert sum(per_split) == n
        if n >= 3:
            assert min(per_split) >= 1
        assert all(abs(k - n * f) < 2 for k, f in zip(per_split, fractions, strict=True))


def test_chunk_documents() -> None:
    doc = Document("d", [[str(i)] for i in range(12)], {"genre": "g"}, [["t"]] * 12)
    chunks = chunk_documents([doc, Document("empty", [])])
    assert [c.doc_id for c in chunks] == ["d#0", "d#1", "d#2"]
    assert [len(c.sentences) for c in chunks] == [5, 5, 2]
    assert chunks[1].sentences[0] == ("5",)
    assert all(c.fields == {"genre": "g"} and c.tags is not None for c in chunks)
    assert [c.doc_id for c in chunk_documents([doc], n_sentences=4, drop_last=True)] == [
        "d#0",
        "d#1",
        "d#2",
    ]
    assert len(chunk_documents([doc], n_sentences=5, drop_last=True)) == 2
    with pytest.raises(ValueError):
        chunk_documents([doc], n_sentences=0)


def test_corpus_stats(brown_dir: Path) -> None:
    stats = corpus_stats(read_brown(brown_dir))
    assert stats == {
        "documents": 3,
        "sentences": 4,
        "tokens": 17,
        "types": 16,
        "fields": {"genre": {"editorial": 1, "news": 1, "romance": 1}},
    }
    assert corpus_stats([])["documents"] == 0


# --- real data ---------------------------------------------------------------------------------

BROWN_GENRES = {
    "learned": 80,
    "belles_lettres": 75,
    "lore": 48,
    "news": 44,
    "hobbies": 36,
    "government": 30,
    "adventure": 29,
    "fiction": 29,
    "romance": 29,
    "editorial": 27,
    "mystery": 24,
    "religion": 17,
    "reviews": 17,
    "humor": 9,
    "science_fiction": 6,
}


@pytest.fixture(scope="module")
def brown_real(data_dir: Path) -> list[Document]:
    path = data_dir / "corpora" / "brown"
    if not (path / "cats.txt").is_file():
        pytest.skip(f"Brown corpus not found at {path}")
    return read_brown(path)


def test_real_brown_counts(brown_real: list[Document], data_dir: Path) -> None:
    stats = corpus_stats(brown_real)
    assert stats["documents"] == 500
    assert stats["fields"]["genre"] == BROWN_GENRES
    # punctuation removed: 181 sentences were punctuation only
    assert (stats["sentences"], stats["tokens"]) == (57_159, 1_013_627)
    tagged = read_brown_tagged(data_dir / "corpora" / "brown", drop_punct=False)
    stats = corpus_stats(tagged)
    assert (stats["documents"], stats["sentences"], stats["tokens"]) == (500, 57_340, 1_161_192)
    assert brown_real[0].doc_id == "ca01"
    assert brown_real[0].sentences[0][:6] == ("the", "fulton", "county", "grand", "jury", "said")
    assert tagged[0].tagged_sentences()[0][:2] == (("the", "at"), ("fulton", "np-tl"))


def test_real_brown_split(brown_real: list[Document]) -> None:
    train, dev, test = split_documents(brown_real, seed=0)
    assert (len(train), len(dev), len(test)) == (396, 54, 50)
    for part in (train, dev, test):
        assert set(corpus_stats(part)["fields"]["genre"]) == set(BROWN_GENRES)
    chunks = chunk_documents(train, n_sentences=5)
    assert sum(len(c.sentences) for c in chunks) == sum(len(d.sentences) for d in train)


def test_real_agnews(data_dir: Path) -> None:
    path = data_dir / "corpora" / "agnews" / "test.csv"
    if not path.is_file():
        pytest.skip(f"AG News not found at {path}")
    docs = read_agnews(path, max_len=PAPER_MAX_LEN)
    stats = corpus_stats(docs)
    assert stats["documents"] == 7_600
    assert stats["fields"]["topic"] == {
        t: 1_900 for t in ("Business", "Sci/Tech", "Sports", "World")
    }
    assert all(len(d.sentences) == 1 and 0 < len(d.sentences[0]) <= 60 for d in docs)
    assert docs[0].sentences[0][:5] == ("fears", "for", "t", "n", "pension")
    words = {w for d in docs for w in d.sentences[0]}
    assert "doesn't" in words
    assert not any("#39" in w or w == "quot" or w == "href" or "\\" in w for w in words)


def test_real_dbpedia(data_dir: Path) -> None:
    path = data_dir / "corpora" / "dbpedia-subset" / "train.csv"
    if not path.is_file():
        pytest.skip(f"DBpedia subset not found at {path}")
    docs = read_dbpedia(path)
    stats = corpus_stats(docs)
    assert stats["documents"] == 14_000
    assert len(stats["fields"]["class"]) == 14
    assert set(stats["fields"]["class"].values()) == {1_000}
    assert docs[0].fields == {"class": "Artist"}
    assert sum(len(d.sentences) for d in read_dbpedia(path, split_sentences=True)) > 14_000


@pytest.mark.slow
def test_real_vocabulary_round_trip(data_dir: Path, tmp_path: Path) -> None:
    """Build vocabularies over all three corpora and round-trip them through a file."""
    root = data_dir / "corpora"
    if not (root / "brown" / "cats.txt").is_file():
        pytest.skip(f"corpora not found at {root}")
    from rescorer.lm_models.vocab import Vocabulary

    corpora = [
        read_brown(root / "brown"),
        read_agnews(root / "agnews" / "test.csv"),
        read_dbpedia(root / "dbpedia-subset" / "train.csv"),
    ]
    for docs in corpora:
        v = build_vocabulary((s for d in docs for s in d.sentences), max_size=10_000)
        assert len(v) == 10_000
        v.save(tmp_path / "v.txt", with_counts=True)
        assert Vocabulary.load(tmp_path / "v.txt") == v
        for d in docs[:50]:
            for s in d.sentences:
                ids = v.encode(s)
                assert [w if w in v else "<unk>" for w in s] == v.decode(ids)


# --- property: arbitrary input gives Documents or InputError ----------------------------------

FRAGMENTS = [
    "ca01 news", "ca01", "cats.txt", "a/at", "b/nn-hl", "./.", "/", "//", "word/", "\t",
    '"1"', '"4"', '"5"', "0", "13", "14", "-1", ",", '","', '"', '""', "\\", "\\$", " #39;",
    " quot;", "&lt;a&gt;", "{", "}", '{"id": "a", "text": "x"}', '"id"', '"text"', '"fields"',
    ":", "[", "]", "null", "1e999", "NaN", "\r", "\x00", "\u2028", "\x85", "é", " ", "\n",
]  # fmt: skip
TEXT = st.lists(st.sampled_from(FRAGMENTS) | st.text(max_size=8), max_size=20).map("".join)


def _run_reader(read: Callable[[], list[Document]], root: Path) -> None:
    try:
        docs = read()
    except InputError as err:
        assert err.path is not None and err.path.startswith(str(root))
        return
    assert isinstance(docs, list)
    assert all(isinstance(d, Document) for d in docs)


@SETTINGS
@given(cats=TEXT, body=TEXT | st.binary(max_size=40))
def test_property_brown(cats: str, body: str | bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        write(root / "cats.txt", cats + "\nca01 news\n")
        data = body if isinstance(body, bytes) else body.encode("utf-8")
        (root / "ca01").write_bytes(data)
        _run_reader(lambda: read_brown(root), root)
        _run_reader(lambda: read_brown_tagged(root, drop_punct=False), root)


@SETTINGS
@given(classes=TEXT, body=TEXT | st.binary(max_size=40), split=st.booleans())
def test_property_csv_readers(classes: str, body: str | bytes, split: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        write(root / "classes.txt", classes)
        data = body if isinstance(body, bytes) else body.encode("utf-8")
        (root / "x.csv").write_bytes(data)
        _run_reader(lambda: read_agnews(root / "x.csv", split_sentences=split, max_len=5), root)
        _run_reader(lambda: read_dbpedia(root / "x.csv", split_sentences=split), root)
        write(root / "classes.txt", AG_CLASSES)
        _run_reader(lambda: read_agnews(root / "x.csv", split_sentences=split), root)
        _run_reader(lambda: read_dbpedia(root / "x.csv", split_sentences=split), root)


JSON_VALUE = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)
JSON_RECORD = st.fixed_dictionaries(
    {},
    optional={
        "id": st.text(max_size=4) | st.integers() | JSON_VALUE,
        "text": st.text(max_size=20) | st.lists(st.text(max_size=10), max_size=3) | JSON_VALUE,
        "fields": st.dictionaries(st.text(max_size=5), JSON_VALUE, max_size=3) | JSON_VALUE,
    },
).map(json.dumps)


@SETTINGS
@given(lines=st.lists(JSON_RECORD | TEXT, max_size=6), raw=TEXT | st.binary(max_size=40))
def test_property_plain_and_jsonl(lines: list[str], raw: str | bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        write(root / "d.jsonl", "\n".join(lines))
        _run_reader(lambda: read_jsonl(root / "d.jsonl"), root)
        data = raw if isinstance(raw, bytes) else raw.encode("utf-8")
        (root / "raw.txt").write_bytes(data)
        _run_reader(lambda: read_jsonl(root / "raw.txt"), root)
        _run_reader(lambda: read_plain(root / "raw.txt"), root)
        _run_reader(lambda: read_plain(root / "raw.txt", per="file", lower=True), root)


# -- State of the Union ---------------------------------------------------------------------------


def test_read_state_union(tmp_path: Path) -> None:
    (tmp_path / "1990-Bush.txt").write_text(
        "PRESIDENT BUSH'S ADDRESS ON THE STATE OF THE UNION \n \nJanuary 31, 1990 \n\n"
        "Mr. President, Mr. Speaker, Members of Congress: \n"
        "I return as a former President. And now -- tonight -- I report.\n",
        encoding="utf-8",
    )
    # Latin-1 bytes (six of the real addresses): 0xBD is the one-half sign.
    (tmp_path / "1965-Johnson-1.txt").write_bytes(
        b"ANNUAL MESSAGE\nWe spent 2\xbd billion. Dr. King spoke.\n"
    )
    (tmp_path / "README").write_text("not an address\n")
    docs = read_state_union(tmp_path)
    assert [d.doc_id for d in docs] == ["1965-Johnson-1", "1990-Bush"]
    assert dict(docs[0].fields) == {"year": "1965", "president": "Johnson"}
    assert docs[0].sentences == (("we", "spent", "21", "2", "billion"), ("dr", "king", "spoke"))
    assert docs[1].sentences == (
        ("mr", "president", "mr", "speaker", "members", "of", "congress"),
        ("i", "return", "as", "a", "former", "president"),
        ("and", "now", "tonight", "i", "report"),
    )


def test_read_state_union_bad_input(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no State of the Union addresses"):
        read_state_union(tmp_path)
    (tmp_path / "Bush-1990.txt").write_text("TITLE\nText.\n")
    with pytest.raises(InputError, match=r"Bush-1990.txt.*<year>-<president>"):
        read_state_union(tmp_path)


# -- novels ---------------------------------------------------------------------------------------

TITLES = "file\tauthor\ttitle\tyear\twords\n"


def test_read_novels(tmp_path: Path) -> None:
    (tmp_path / "titles.tsv").write_text(
        TITLES + "Smith_Tale_1850.txt\tJohn Smith\tA Tale\t1850\t30\n"
        "Jones_Road_1901.txt\tAnn Jones\tThe Road\t1901\t5\n"
    )
    # A byte-order mark, CRLF line ends, a hard-wrapped paragraph with a sentence across the
    # wrap, a title (Mr.) that must not end a sentence, and a heading as a paragraph of its own.
    (tmp_path / "Smith_Tale_1850.txt").write_bytes(
        "\ufeffCHAPTER I\r\n\r\nIt was late. Mr. Brown\r\nsaid \u201cNo!\u201d and left.\r\n"
        "\r\n\r\n  She stayed?  Yes.\r\n".encode()
    )
    (tmp_path / "Jones_Road_1901.txt").write_text("The road was long.\n")
    (tmp_path / "Unlisted_1900.txt").write_text("Not read.\n")
    docs = read_novels(tmp_path)
    assert [d.doc_id for d in docs] == ["Smith_Tale_1850", "Jones_Road_1901"]
    assert dict(docs[0].fields) == {"author": "John Smith", "title": "A Tale", "year": "1850"}
    assert docs[0].sentences == (
        ("chapter", "i"),
        ("it", "was", "late"),
        ("mr", "brown", "said", "no", "and", "left"),
        ("she", "stayed"),
        ("yes",),
    )
    assert read_novels(tmp_path, lower=False)[1].sentences == (("The", "road", "was", "long"),)


@pytest.mark.parametrize(
    ("listing", "match"),
    [
        ("file author title\n", r"titles.tsv:1: expected the header"),
        (TITLES + "Gone_1850.txt\tA\tB\t1850\t3\n", r"tsv:2: novel 'Gone_1850.txt' .* missing"),
        (TITLES + "Smith.txt\tA\tB\n", r"titles.tsv:2: expected 5 tab-separated columns"),
        (TITLES, r"titles.tsv: no novels listed"),
    ],
)
def test_read_novels_bad_input(tmp_path: Path, listing: str, match: str) -> None:
    (tmp_path / "titles.tsv").write_text(listing)
    with pytest.raises(InputError, match=match):
        read_novels(tmp_path)


def test_read_novels_refuses_a_missing_listing_or_empty_novel(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="titles.tsv"):
        read_novels(tmp_path)
    (tmp_path / "titles.tsv").write_text(TITLES + "Empty_1850.txt\tA\tB\t1850\t0\n")
    (tmp_path / "Empty_1850.txt").write_text("\n -- \n")
    with pytest.raises(InputError, match=r"titles.tsv:2: novel 'Empty_1850.txt' has no text"):
        read_novels(tmp_path)
