"""CoNLL-U reader on hand-written sentences: words, multiword tokens, empty nodes, bad input;
the writer of tagged documents (tagged Brown) read back."""

from __future__ import annotations

from pathlib import Path

import pytest

from rescorer.core.errors import InputError
from rescorer.lm_models.conllu import parse_feats, read_conllu, tagged_sentence, write_tagged_conllu
from rescorer.lm_models.corpora import Document, brown_coarse_tag, read_brown_tagged
from rescorer.lm_models.fnlm.train import read_sentences

# Two sentences: English with a multiword token (3-4 "page's"), and one with an empty node 2.1
# (an elided verb, as in UD's gapping examples) and no final blank line.
GOOD = """\
# newdoc id = d1
# sent_id = s1
# text = Open the page's menu.
1\tOpen\topen\tVERB\tIMP\tMood=Imp|VerbForm=Fin\t0\troot\t_\t_
2\tthe\tthe\tDET\tDEF\tDefinite=Def|PronType=Art\t3\tdet\t_\t_
3-4\tpage's\t_\t_\t_\t_\t_\t_\t_\t_
3\tpage\tpage\tNOUN\tSG\tNumber=Sing\t5\tnmod:poss\t_\t_
4\t's\t's\tPART\tGEN\t_\t3\tcase\t_\t_
5\tmenu\tmenu\tNOUN\tSG\tNumber=Sing\t1\tobj\t_\tSpaceAfter=No
6\t.\t.\tPUNCT\tPUNCT\t_\t1\tpunct\t_\t_

# sent_id = s2
# a comment without a value
1\tI\tI\tPRON\t_\tCase=Nom\t3\tnsubj\t3:nsubj\t_
2\tate\teat\tVERB\t_\tTense=Past\t0\troot\t0:root\t_
2.1\tate\teat\tVERB\t_\t_\t_\t_\t0:root\tCopyOf=2
3\tfish\tfish\tNOUN\t_\t_\t2\tobj\t2.1:obj\t_"""


def write(tmp_path: Path, text: str, name: str = "x.conllu") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_words_fields_and_comments(tmp_path: Path) -> None:
    s1, s2 = read_conllu(write(tmp_path, GOOD))
    assert s1.sent_id == "s1" and s1.text == "Open the page's menu."
    assert s1.comment("newdoc id") == "d1"
    assert [w.id for w in s1.words] == [1, 2, 3, 4, 5, 6]
    assert s1.forms() == ["Open", "the", "page", "'s", "menu", "."]
    page = s1.words[2]
    assert (page.lemma, page.upos, page.xpos, page.head, page.deprel) == (
        "page",
        "NOUN",
        "SG",
        5,
        "nmod:poss",
    )
    assert page.feats_dict == {"Number": "Sing"}
    assert s1.words[3].feats == "_" and s1.words[3].feats_dict == {}
    assert s1.words[4].misc == "SpaceAfter=No"
    assert (s1.path, s1.line, page.line) == (str(tmp_path / "x.conllu"), 1, 7)
    assert ("a comment without a value", "") in s2.comments


def test_multiword_token_spans_its_words(tmp_path: Path) -> None:
    s1, _ = read_conllu(write(tmp_path, GOOD))
    (mwt,) = s1.multiword_tokens
    assert (mwt.first, mwt.last, mwt.form) == (3, 4, "page's")
    surface = s1.surface()
    assert [form for form, _ in surface] == ["Open", "the", "page's", "menu", "."]
    assert [w.form for w in surface[2][1]] == ["page", "'s"]
    assert all(len(parts) == 1 for i, (_, parts) in enumerate(surface) if i != 2)


def test_empty_node_is_kept_apart_from_the_words(tmp_path: Path) -> None:
    _, s2 = read_conllu(write(tmp_path, GOOD))
    assert s2.forms() == ["I", "ate", "fish"]  # the empty node is not a word
    (node,) = s2.empty_nodes
    assert (node.after, node.index, node.form, node.deps, node.misc) == (
        2,
        1,
        "ate",
        "0:root",
        "CopyOf=2",
    )
    assert [f for f, _ in s2.surface()] == ["I", "ate", "fish"]  # nor a surface token
    assert s2.words[2].deps == "2.1:obj"


def test_empty_node_before_the_first_word(tmp_path: Path) -> None:
    text = "0.1\tx\t_\t_\t_\t_\t_\t_\t_\t_\n1\ta\ta\tX\t_\t_\t0\troot\t_\t_\n"
    (s,) = read_conllu(write(tmp_path, text))
    assert s.empty_nodes[0].after == 0 and s.forms() == ["a"]


def test_parse_feats() -> None:
    assert parse_feats("Case=Dat|Number[psor]=Sing") == {"Case": "Dat", "Number[psor]": "Sing"}
    with pytest.raises(ValueError, match="Name=Value"):
        parse_feats("Case")


W = "\t{}\tw\tX\t_\t_\t0\troot\t_\t_"


@pytest.mark.parametrize(
    ("lines", "line", "message"),
    [
        (["1" + W.format("a"), "3" + W.format("b")], 2, "out of sequence: expected 2"),
        (["1\ta\tb"], 1, "expected 10 tab-separated fields, got 3"),
        (["1\ta\t\tX\t_\t_\t0\troot\t_\t_"], 1, "empty field 3"),
        (["x" + W.format("a")], 1, "bad ID 'x'"),
        (["2-3\tab\t_\t_\t_\t_\t_\t_\t_\t_", "1" + W.format("a")], 1, "right before word 2"),
        (["1-2\tab\t_\t_\t_\t_\t_\t_\t_\t_", "1" + W.format("a")], 2, "spans words"),
        (["1-1\ta\t_\t_\t_\t_\t_\t_\t_\t_"], 1, "range 1-1 is empty"),
        (["1-2\tab\tx\t_\t_\t_\t_\t_\t_\t_"], 1, "only FORM and MISC"),
        (["1" + W.format("a"), "2.1\tx\t_\t_\t_\t_\t_\t_\t_\t_"], 2, "must follow word 2"),
        (["1" + W.format("a"), "1.2\tx\t_\t_\t_\t_\t_\t_\t_\t_"], 2, "expected 1.1"),
        (["1\ta\tw\tX\t_\tCase\t0\troot\t_\t_"], 1, "Name=Value"),
        (["1\ta\tw\tX\t_\t_\tx\troot\t_\t_"], 1, "HEAD must be"),
        (["1" + W.format("a"), "# late"], 2, "comment line inside a sentence"),
        (["# only a comment", ""], 2, "no words"),
    ],
)
def test_bad_input_names_file_and_line(
    tmp_path: Path, lines: list[str], line: int, message: str
) -> None:
    path = write(tmp_path, "\n".join(lines) + "\n")
    with pytest.raises(InputError, match=message) as info:
        read_conllu(path)
    assert info.value.path == str(path) and info.value.line == line


def test_real_treebank_counts(data_dir: Path) -> None:
    """The data README's counts: Turkish-IMST dev 1,100 sentences, 10,542 words."""
    path = data_dir / "ud" / "UD_Turkish-IMST" / "tr_imst-ud-dev.conllu"
    if not path.exists():
        pytest.skip(f"{path} not found")
    sentences = read_conllu(path)
    assert len(sentences) == 1100
    assert sum(len(s.words) for s in sentences) == 10542
    assert any(s.multiword_tokens for s in sentences)


# --- writing tagged documents ------------------------------------------------------------------

BROWN = {
    "ca01": "\tThe/at Fulton/np-tl jury/nn said/vbd ``/`` no/at ''/'' ./.\n\n"
    "\tIt/pps was/bedz n't/* his/pp$ ,/, he's/pps+bez 3/cd\n",
    "cb01": "Assembly/nn-hl session/nn-hl ./.-hl\n\t--/-- ``/``\n\tand/or/cc de/fw-in\n",
}


@pytest.fixture()
def brown_dir(tmp_path: Path) -> Path:
    root = tmp_path / "brown"
    root.mkdir()
    (root / "cats.txt").write_text("ca01 news\ncb01 editorial\n", encoding="utf-8")
    for name, text in BROWN.items():
        (root / name).write_text(text, encoding="utf-8")
    return root


def test_tagged_sentence_columns() -> None:
    text = tagged_sentence([("The", "DET", "at"), ("jury", "nn", "nn")], [("sent_id", "a-1")])
    assert text.split("\n") == [
        "# sent_id = a-1",
        "1\tThe\t_\tDET\tat\t_\t_\t_\t_\t_",
        "2\tjury\t_\tnn\tnn\t_\t_\t_\t_\t_",
        "",
        "",
    ]


def test_tagged_brown_read_back(brown_dir: Path, tmp_path: Path) -> None:
    """Every token a word, its tag as XPOS and its coarse tag as UPOS, in the token's line."""
    docs = read_brown_tagged(brown_dir, lower=False, drop_punct=False)
    path = tmp_path / "brown.conllu"
    assert write_tagged_conllu(path, docs, brown_coarse_tag) == 5
    sentences = read_conllu(path)
    assert [s.sent_id for s in sentences] == ["ca01-1", "ca01-2", "cb01-1", "cb01-2", "cb01-3"]
    assert [s.comment("newdoc id") for s in sentences] == ["ca01", None, "cb01", None, None]
    pairs = [pair for d in docs for pair in d.tagged_sentences()]
    for sentence, tagged in zip(sentences, pairs, strict=True):
        assert [(w.form, w.xpos, w.upos) for w in sentence.words] == [
            (form, tag, brown_coarse_tag(tag)) for form, tag in tagged
        ]
        assert all(w.lemma == w.feats == "_" and w.head is None for w in sentence.words)
    assert [(w.form, w.upos, w.xpos) for w in sentences[1].words] == [
        ("It", "pps", "pps"),
        ("was", "bedz", "bedz"),
        ("n't", "*", "*"),
        ("his", "pp", "pp$"),
        (",", "PUNCT", ","),
        ("he's", "pps+bez", "pps+bez"),
        ("3", "cd", "cd"),
    ]
    # The FNLM's CoNLL-U path leaves out the same punctuation as the Brown reader.
    read = read_sentences(path, "conllu", "token", drop_punct=True)
    brown = [s for d in read_brown_tagged(brown_dir, lower=False) for s in d.tagged_sentences()]
    assert [[(w.form, w.xpos) for w in s] for s in read] == [list(s) for s in brown]
    assert [w.upos for w in read[3]] == ["cc", "fw"]


def test_write_tagged_conllu_errors(tmp_path: Path) -> None:
    path = tmp_path / "out.conllu"
    with pytest.raises(ValueError, match="has no tags"):
        write_tagged_conllu(path, [Document("d", [["a"]])], brown_coarse_tag)
    bad = Document("d", [["a"], ["b", "c\td"]], tags=[["at"], ["nn", "nn"]])
    with pytest.raises(ValueError, match=r"document d, sentence 2: form 'c\\td'"):
        write_tagged_conllu(path, [bad], brown_coarse_tag)
    with pytest.raises(ValueError, match="UPOS ''"):
        write_tagged_conllu(path, [Document("d", [["a"]], tags=[["at"]])], lambda tag: "")
    assert not path.exists()  # nothing written on failure
    with pytest.raises(ValueError, match="at least one word"):
        tagged_sentence([])


def test_tagged_brown_bad_input_names_file_and_line(brown_dir: Path) -> None:
    (brown_dir / "cb01").write_text("a/at\n\tb/nn c\n", encoding="utf-8")
    with pytest.raises(InputError, match="'c' is not 'word/tag'") as info:
        read_brown_tagged(brown_dir, lower=False, drop_punct=False)
    assert info.value.path == str(brown_dir / "cb01") and info.value.line == 2
