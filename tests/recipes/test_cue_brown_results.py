"""Table 3 of the CUE Brown recipe's RESULTS.md (recipes/cue_brown/local/results.py) from run
records: seed-0 figures, the spread over finished seeds and the per-seed change vs the control."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.paths import REPO

LOCAL = REPO / "recipes" / "cue_brown" / "local"


def load_local(name: str):
    """A module of recipes/cue_brown/local/ (the recipe's scripts are not a package; as when
    they run, the folder is on the path, so cue_brown.py finds results.py)."""
    if str(LOCAL) not in sys.path:
        sys.path.insert(0, str(LOCAL))
    spec = importlib.util.spec_from_file_location(
        f"cue_brown_{name}", REPO / "recipes" / "cue_brown" / "local" / f"{name}.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


res = load_local("results")

SPLIT = {"sentences": 10, "words": 100, "tokens": 110, "units": 130, "oov_rate": 0.0}
STATS = {
    **{k: SPLIT for k in ("train_all", "train", "adapt", "dev", "test")},
    "documents": {"train": 8, "dev": 1, "test": 1},
    "vocab_size": 8000,
    "units": "subword",
}


def record(test_ppl: float) -> dict:
    return {
        "dev_ppl": test_ppl + 10,
        "dev_ppl_units": test_ppl / 5,
        "test_ppl": test_ppl,
        "test_ppl_units": test_ppl / 5,
        "best_epoch": 2,
        "initial_dev": 9000.0,
        "trained_parameters": 1000,
        "train_seconds": 60.0,
        "epochs": [
            {"epoch": 1, "train_loss": 7.0, "dev": 300.0, "seconds": 30.0, "steps": 10},
            {"epoch": 2, "train_loss": 6.0, "dev": test_ppl / 5, "seconds": 30.0, "steps": 10},
        ],
    }


SIZES = {"sentence_encoder": 2000, "context_encoder": 200, "decoder": 1300, "proxy": 2000}
# The sentence LM alone (evaluated), and trained: records of their own shape.
SENTENCE_ONLY = {"dev_ppl": 1010.0, "test_ppl": 1000.0, "seconds": 1.0, "parameters": SIZES}
SENTENCE = {"test_ppl": 990.0, "initial_dev_ppl": 9000.0, "parameters": 2000, "seconds": 60.0,
            "train_tokens": 130, "epochs": [{"epoch": 1, "dev_ppl": 210.0}]}  # fmt: skip


def make_exp(tmp_path: Path, runs: dict[str, float], **conf_keys) -> tuple[Path, Path]:
    exp = tmp_path / "exp"
    (exp / "data").mkdir(parents=True)
    (exp / "data" / "stats.json").write_text(json.dumps(STATS))
    rows = [{"doc": "ca01", "words": ["a", "b"], "fields": {"genre": "news"}}] * 10
    (exp / "data" / "test.json").write_text(json.dumps(rows))
    records = {name: record(ppl) for name, ppl in runs.items()}
    records |= {"sentence_only_transformer": SENTENCE_ONLY, "sentence_transformer": SENTENCE}
    for name, rec in records.items():
        (exp / "runs" / name).mkdir(parents=True)
        (exp / "runs" / name / "result.json").write_text(json.dumps(rec))
    conf = json.loads((REPO / "recipes/cue_brown/conf/converged_cpu_full.json").read_text())
    conf["extra_seeds"] = [1, 2]
    conf |= conf_keys
    conf_path = tmp_path / "conf.json"
    conf_path.write_text(json.dumps(conf))
    return exp, conf_path


def table3(tmp_path: Path, runs: dict[str, float]) -> dict[str, list[str]]:
    exp, conf = make_exp(tmp_path, runs)
    here = tmp_path / "here"
    here.mkdir()
    res.tables(exp, here, conf)
    text = (here / "RESULTS.md").read_text()
    section = text.split("## Table 3 layout")[1].split("\n## ")[0]
    rows = [r for r in section.splitlines() if r.startswith("| ")][2:]
    return {r.split(" | ")[0].lstrip("| "): [c.strip() for c in r.split(" | ")[1:]] for r in rows}


def test_table3_spread_over_finished_seeds_and_paired_change(tmp_path):
    runs = {"t3_none": 1000.0, "t3_prev": 900.0, "t3_none_seed1": 1010.0}
    runs["t3_prev_seed1"] = 888.8
    rows = table3(tmp_path, runs)
    none = rows["sentence-internal only (decoder trained with the empty-context vector)"]
    prev = rows["+ previous sentence"]
    assert none[0] == "1000.0"
    assert prev[:2] == ["900.0", "-10.0%"]
    # mean ± half-range of the two finished seeds, marked as two of three
    assert none[2] == "1005.0 ± 5.0 (2 of 3 seeds)"
    assert prev[2] == "894.4 ± 5.6 (2 of 3 seeds)"
    # seed by seed against the control of the same seed; seed 2 not run yet
    assert prev[3] == "-10.0 / -12.0 / – %"
    meta = rows["+ metadata (genre)"]
    assert meta[:4] == ["–", "–", "–", "–"]


def test_table3_all_seeds_finished(tmp_path):
    runs = {"t3_none": 1000.0, "t3_prev": 900.0}
    runs |= {"t3_none_seed1": 1000.0, "t3_prev_seed1": 910.0}
    runs |= {"t3_none_seed2": 1000.0, "t3_prev_seed2": 920.0}
    prev = table3(tmp_path, runs)["+ previous sentence"]
    assert prev[2] == "910.0 ± 10.0"
    assert prev[3] == "-10.0 / -9.0 / -8.0 %"


def test_cache_split_bins_words_by_their_own_context():
    drv = load_local("cue_brown")
    rows = [
        {"words": ["a", "b"], "fields": {"prev": "a c", "genre": "b"}},
        {"words": ["c"], "fields": {"genre": "c"}},  # no previous sentence: nothing cached
    ]
    base = [np.array([-2.0, -3.0, -1.0]), np.array([-4.0, -1.0])]
    ctx = [np.array([-1.0, -3.0, -0.5]), np.array([-2.0, -1.0])]
    got = drv.cache_split(list(zip(base, ctx, strict=True)), rows, ["prev"])
    assert got["words"] == 5  # 3 words and 2 </s>
    assert got["in_share"] == pytest.approx(1 / 5)  # "a" only ("b" is the genre's word)
    assert got["in_gain"] == pytest.approx(np.e - 1)  # 2 -> 1 nats: P times e
    assert got["out_share"] == pytest.approx(2 / 5)  # "b", "c"
    assert got["out_gain"] == pytest.approx(np.exp((7 - 5) / 2) - 1)
    assert got["all_gain"] == pytest.approx(np.exp((11 - 7.5) / 5) - 1)
    assert got["all_gain"] == pytest.approx(got["all_ppl_control"] / got["all_ppl_context"] - 1)
    assert got["in_ppl_control"] == pytest.approx(np.exp(2.0))
    # the genre's words count as context once the genre is read
    both = drv.cache_split(list(zip(base, ctx, strict=True)), rows, ["prev", "genre"])
    assert both["in_share"] == pytest.approx(3 / 5)
    with pytest.raises(ValueError, match="scores for 2 words"):
        drv.cache_split([(base[0][:2], ctx[0])], rows[:1], ["prev"])


def test_cache_section_in_results(tmp_path):
    exp, conf = make_exp(tmp_path, {"t3_none": 1000.0, "t3_prev": 900.0})
    split = {"in_share": 0.2, "in_gain": 0.31, "out_gain": 0.05, "all_gain": 0.08}
    split |= {"in_ppl_control": 120.0, "in_ppl_context": 30.5}
    (exp / "runs" / "cache_split.json").write_text(json.dumps({"t3_prev_seed1": split}))
    here = tmp_path / "here"
    here.mkdir()
    res.tables(exp, here, conf)
    text = (here / "RESULTS.md").read_text()
    assert "| t3_prev_seed1 | 20.0 % | 31.0 % | 5.0 % | 8.0 % | 120.0 -> 30.5 |" in text


def test_data_sizes_section(tmp_path):
    runs = {"t3_none": 1000.0, "t3_prev": 900.0, "t3_none_n5": 1100.0, "t3_prev_n5": 1078.0}
    exp, conf = make_exp(tmp_path, runs, data_sizes=[5])
    here = tmp_path / "here"
    here.mkdir()
    res.tables(exp, here, conf)
    text = (here / "RESULTS.md").read_text()
    assert "| 5 | 1100.0 | 1078.0 | -2.0% |" in text
    assert "| 10 | 1000.0 | 900.0 | -10.0% |" in text  # all 10 sentences: Table 3's rows


def test_fields_that_name_a_text_are_ablations_with_their_unseen_share(tmp_path):
    runs = {"t3_none": 1000.0, "t3_meta": 990.0, "t3_meta_doc": 995.0, "t3_both_source": 950.0}
    exp, conf = make_exp(tmp_path, runs)
    # the training sentences know one source and one document; of the 10 test sentences
    # 3 have that source and none that document
    fields = {"genre": "news", "source": "S1", "document": "ca01"}
    (exp / "data" / "train.json").write_text(json.dumps([{"words": ["a"], "fields": fields}]))
    test = [
        {
            "words": ["a", "b"],
            "fields": fields | {"source": "S1" if i < 3 else "S2", "document": "cb02"},
        }
        for i in range(10)
    ]
    (exp / "data" / "test.json").write_text(json.dumps(test))
    res.tables(exp, tmp_path, conf)
    text = (tmp_path / "RESULTS.md").read_text()
    assert "Left out of the metadata: the source (unseen in training for 70 % of the test " in text
    assert "the document (unseen in training for 100 % of the test sentences)" in text
    section = text.split("## Table 3 layout")[1].split("\n## ")[0]
    rows = {r.split(" | ")[0].lstrip("| "): [c.strip() for c in r.split(" | ")[1:]]
            for r in section.splitlines() if r.startswith("| ")}  # fmt: skip
    assert rows["+ metadata (genre)"][:2] == ["990.0", "-1.0%"]
    source = "genre + source (unseen in training: 70 %)"
    assert rows[f"ablation: + {source} + previous sentence"][:2] == ["950.0", "-5.0%"]
    doc = f"ablation: + {source} + document (unseen in training: 100 %)"
    assert rows[doc][:2] == ["995.0", "-0.5%"]
    # the source rows first, then the document's; a row whose run has not finished shows "–"
    labels = [k for k in rows if k.startswith("ablation")]
    assert labels[0] == f"ablation: + {source}" and rows[labels[0]][0] == "–"
    assert labels.index(doc) > labels.index(f"ablation: + {source} + previous sentence")


def test_ablation_rows_only_where_the_conf_has_their_sets(tmp_path):
    runs = {"t3_none": 1000.0, "t3_meta_source": 980.0}
    assert table3(tmp_path, runs)["ablation: + genre + source"][:2] == ["980.0", "-2.0%"]
    exp, conf = make_exp(tmp_path / "without", runs)
    c = json.loads(conf.read_text())
    for name in ("meta_source", "both_source", "meta_doc", "both_doc"):
        del c["sets"][name]
    c["ablation_seeds"] = {}
    c.pop("encoder_rows")
    conf.write_text(json.dumps(c))
    res.tables(exp, tmp_path / "without", conf)
    text = (tmp_path / "without" / "RESULTS.md").read_text()
    assert "ablation: +" not in text and "Left out of the metadata" not in text


def test_ablation_runs_follow_the_conf_sets():
    cue = load_local("cue_brown")
    conf = json.loads(CONF.read_text())
    assert set(cue.ABLATION_SETS) <= set(conf["sets"])
    assert res.ABLATION_SETS == cue.ABLATION_SETS  # the tables' copy, in the same order
    # every ablation set's fields are fields the conf can render
    for name in cue.ABLATION_SETS:
        assert all(f in conf["fields"] for f in conf["sets"][name])


CONF = REPO / "recipes/cue_brown/conf/converged_cpu_full.json"


@pytest.mark.parametrize(
    ("text", "expected"),
    [(None, "test.json: missing"), ("", "line 1: not JSON"), ('[{"words": []},\n{x', "line 2")],
)
def test_cache_stage_refuses_missing_or_damaged_data_in_one_line(tmp_path, capsys, text, expected):
    drv = load_local("cue_brown")
    if text is not None:
        (tmp_path / "data").mkdir()
        (tmp_path / "data" / "test.json").write_text(text)
    threads = torch.get_num_threads()  # main() sets the thread count: restored after
    try:
        with pytest.raises(SystemExit) as exit_:
            drv.main(["cache", str(CONF), str(tmp_path), str(tmp_path)])
    finally:
        torch.set_num_threads(threads)
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("cue_brown.py: error: ") and expected in err[-1]
    assert "Traceback" not in "\n".join(err)


def test_ablation_seeds_outside_extra_seeds_refused_before_any_run(tmp_path):
    drv = load_local("cue_brown")
    for bad in ({"both_source": [1, 3]}, {"prev": [1]}, {"no_such_set": [1]}):
        conf = json.loads(CONF.read_text()) | {"extra_seeds": [1, 2], "ablation_seeds": bad}
        with pytest.raises(drv.SettingError, match=r"ablation_seeds: expected"):
            drv.experiments(conf, tmp_path)  # an empty exp: refused before reading any data


def test_ablation_rows_spread_over_ablation_seeds(tmp_path):
    runs = {"t3_none": 1000.0, "t3_none_seed1": 1010.0, "t3_both_source": 900.0,
            "t3_both_source_seed1": 919.0, "t3_both_doc": 950.0}  # fmt: skip
    exp, conf = make_exp(tmp_path, runs, ablation_seeds={"both_source": [1]})
    res.tables(exp, tmp_path, conf)
    text = (tmp_path / "RESULTS.md").read_text()
    row = next(r for r in text.splitlines() if "+ genre + source + previous sentence |" in r)
    cells = [c.strip() for c in row.split(" | ")]
    assert cells[1:5] == ["900.0", "-10.0%", "909.5 ± 9.5", "-10.0 / -9.0 %"]
    doc = next(r for r in text.splitlines() if "+ document + previous sentence |" in r)
    assert [c.strip() for c in doc.split(" | ")][1:5] == ["950.0", "-5.0%", "–", "–"]  # 1 seed


# -- the novels as the corpus (data.corpus: "novels") ----------------------------------------------


def fake_novels(data_dir: Path, sentences: int = 12) -> None:
    folder = data_dir / "corpora" / "gutenberg"
    folder.mkdir(parents=True)
    listing = ["file\tauthor\ttitle\tyear\twords"]
    for stem, author, title in (("Smith_Tale_1850", "John Smith", "A Tale"),
                                ("Jones_Road_1901", "Ann Jones", "The Road")):  # fmt: skip
        listing.append(f"{stem}.txt\t{author}\t{title}\t1850\t100")
        text = " ".join(f"{stem.split('_')[1]} line {i}." for i in range(sentences))
        (folder / f"{stem}.txt").write_text(text + "\n")
    (folder / "titles.tsv").write_text("\n".join(listing) + "\n")


def test_novels_split_by_block_within_each_novel_with_the_previous_sentence_of_the_block(tmp_path):
    drv = load_local("cue_brown")
    fake_novels(tmp_path)
    dc = {"corpus": "novels", "block_sentences": 2, "blocks": None, "split": [0.5, 0.25, 0.25],
          "split_seed": 0}  # fmt: skip
    rows, n_docs = drv.corpus_rows(dc, tmp_path)
    assert sum(n_docs) == 12 and n_docs[0] == 6  # 6 blocks of 2 sentences per novel, half train
    for split in ("train", "dev", "test"):
        titles = {r["fields"]["title"] for r in rows[split]}
        assert titles == {"a tale", "the road"}, split  # every novel in every split
    for r in rows["train"] + rows["dev"] + rows["test"]:
        book, _, i = r["words"]
        i = int(i)
        assert r["fields"]["author"] == {"tale": "john smith", "road": "ann jones"}[book]
        stem = "smith_tale_1850" if book == "tale" else "jones_road_1901"
        assert r["fields"]["document"] == f"{stem}#{i // 2}"
        # The previous sentence is the block's: none for a block's first sentence.
        assert r["fields"]["prev"] == ("" if i % 2 == 0 else f"{book} line {i - 1}")
    kept, n_kept = drv.corpus_rows({**dc, "blocks": 4}, tmp_path)
    assert sum(n_kept) == 4 and sum(len(v) for v in kept.values()) == 8


@pytest.mark.parametrize(
    ("keys", "expected"),
    [
        (
            {"corpus": "gutenberg"},
            "data.corpus must be 'brown', 'novels' or 'plain', got 'gutenberg'",
        ),
        ({"corpus": "plain", "path": "nowhere.txt"}, "data.path must name a plain-text file"),
        ({"corpus": "novels", "block_sentences": 0}, "data.block_sentences must be a positive"),
        ({"corpus": "novels", "blocks": "all"}, "got 50 and 'all'"),
    ],
)
def test_novels_settings_refused_in_one_line(tmp_path, keys, expected):
    drv = load_local("cue_brown")
    fake_novels(tmp_path)
    with pytest.raises(drv.SettingError, match=expected):
        drv.corpus_rows({"split": [0.8, 0.1, 0.1], "split_seed": 0, **keys}, tmp_path)


def test_plain_text_books_cut_into_blocks_split_by_book_with_the_previous_sentence(tmp_path):
    # Two books of 12 sentences (a blank line between them), as the LibriSpeech recipe's
    # normalised novels are written (exp/lm/books_by_book.txt).
    drv = load_local("cue_brown")
    books = tmp_path / "books_by_book.txt"
    books.write_text(
        "\n\n".join("\n".join(f"{book} LINE {i}" for i in range(12)) for book in ("TALE", "ROAD"))
        + "\n"
    )
    dc = {"corpus": "plain", "path": str(books), "block_sentences": 2, "blocks": None,
          "split": [0.5, 0.25, 0.25], "split_seed": 0}  # fmt: skip
    rows, n_docs = drv.corpus_rows(dc, tmp_path)
    assert sum(n_docs) == 12 and n_docs[0] == 6
    for split in ("train", "dev", "test"):  # every book in every split
        assert {r["words"][0] for r in rows[split]} == {"TALE", "ROAD"}, split
    for r in rows["train"] + rows["dev"] + rows["test"]:
        book, _, i = r["words"]
        i = int(i)
        first = 1 if book == "TALE" else 14  # the book's first line in the file
        assert r["fields"]["document"] == f"books_by_book-{first}#{i // 2}"
        # the block's previous sentence, words as written (no lower-casing): none at its start
        assert r["fields"]["prev"] == ("" if i % 2 == 0 else f"{book} LINE {i - 1}")
        assert set(r["fields"]) == {"document", "prev"}
    kept, n_kept = drv.corpus_rows({**dc, "blocks": 4}, tmp_path)
    assert sum(n_kept) == 4
    # an empty file, or books shorter than a block: one line naming the setting
    for text, books in (("", 0), ("A B\nC D\n\nE F\n", 2)):
        books_file = tmp_path / "short.txt"
        books_file.write_text(text)
        with pytest.raises(drv.SettingError, match=f"at least 3 sentences .*: {books} book"):
            drv.corpus_rows({**dc, "path": str(books_file), "block_sentences": 3}, tmp_path)


def test_a_plain_corpus_not_in_utf8_is_one_line_exit_2(tmp_path, capsys):
    drv = load_local("cue_brown")
    books = tmp_path / "books.txt"
    books.write_bytes(b"\xff\xfe\x00bad\n")
    conf = json.loads((REPO / "recipes/librispeech_nbest/conf/cue_cpu.json").read_text())
    conf["data"]["path"] = str(books)
    (tmp_path / "conf.json").write_text(json.dumps(conf))
    with pytest.raises(SystemExit) as exit_info:
        drv.main(["prepare", str(tmp_path / "conf.json"), str(tmp_path / "exp"), str(tmp_path)])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert (
        err.strip().splitlines()[-1].startswith(f"cue_brown.py: error: {books}:1: not UTF-8 text")
    )
    assert "Traceback" not in err


def test_results_describe_the_novels(tmp_path):
    novels = json.loads((REPO / "recipes/cue_brown/conf/converged_cpu_novels.json").read_text())
    keys = {k: novels[k] for k in ("data", "fields", "sets")}
    exp, conf = make_exp(tmp_path, {"t3_none": 1000.0, "t3_prev": 900.0}, **keys)
    here = tmp_path / "here"
    here.mkdir()
    res.tables(exp, here, conf)
    text = (here / "RESULTS.md").read_text()
    assert text.startswith("# CUE on the Gutenberg novels (Novotney")
    assert "cut into blocks of 50 consecutive sentences, 2,650 of them at random, split 80/10/10 " \
        "within each novel" in text  # fmt: skip
    assert "(8/1/1 blocks)" in text and "`author: charles dickens`" in text
    assert "Brown" not in text.split("## Table 3 layout")[0]


def test_encoder_rows_are_table3_ablations_named_alike_in_both_scripts(tmp_path):
    cue = load_local("cue_brown")
    assert cue.encoder_row_name("prev", "hash:384") == "t3_prev_hash384"
    assert res.encoder_row_name("prev", "hash:384") == cue.encoder_row_name("prev", "hash:384")
    runs = {"t3_none": 1000.0, "t3_prev": 912.0, "t3_prev_hash384": 880.0}
    rows = table3(tmp_path, runs)  # the full conf lists {"prev": ["hash:384"]}
    row = rows["ablation: + previous sentence, encoded by `hash:384` instead of `minilm`"]
    assert row[:2] == ["880.0", "-12.0%"]
    assert rows["+ previous sentence"][:2] == ["912.0", "-8.8%"]


def test_encoder_rows_of_an_unknown_set_refused_before_any_run(tmp_path):
    drv = load_local("cue_brown")
    for bad in ({"previous": ["hash:384"]}, {"prev": "hash:384"}, {"prev": []}):
        conf = json.loads(CONF.read_text()) | {"encoder_rows": bad}
        with pytest.raises(drv.SettingError, match=r"encoder_rows: expected"):
            drv.experiments(conf, tmp_path)
