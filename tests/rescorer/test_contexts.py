"""Per-utterance context files: JSONL (canonical and flat form) and TSV, and their errors."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from rescorer.contexts import check_context_ids, detect_context_format, read_contexts
from rescorer.core.errors import InputError


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_jsonl_canonical_and_flat_forms(tmp_path: Path) -> None:
    path = write(
        tmp_path / "ctx.jsonl",
        '{"utt": "u1", "fields": {"genre": "news", "speaker": "1272"}}\n'
        "\n"  # blank lines are skipped
        '{"utt": "u2", "genre": "sport", "year": 1961, "geo": [47.5, -122.25]}\n'
        '{"utt": "u3", "fields": {"genre": null, "speaker": ""}}\n'
        '{"utt": "u4"}\n',
    )
    assert read_contexts(path) == {
        "u1": {"genre": "news", "speaker": "1272"},
        "u2": {"genre": "sport", "year": "1961", "geo": "47.5,-122.25"},
        "u3": {},  # null and "" are missing
        "u4": {},
    }


def test_tsv_with_header_and_empty_cells(tmp_path: Path) -> None:
    path = write(
        tmp_path / "ctx.tsv", "utt\tgenre\tspeaker\nu1\tnews\t1272\nu2\t\t84\n\nu3\tchat\t\n"
    )
    assert read_contexts(path) == {
        "u1": {"genre": "news", "speaker": "1272"},
        "u2": {"speaker": "84"},
        "u3": {"genre": "chat"},
    }


def test_format_detected_from_content_and_gzip(tmp_path: Path) -> None:
    jsonl = write(tmp_path / "ctx.txt", '\n{"utt": "u1", "genre": "news"}\n')
    tsv = write(tmp_path / "ctx2.txt", "utt\tgenre\nu1\tnews\n")
    assert detect_context_format(jsonl) == "jsonl" and detect_context_format(tsv) == "tsv"
    assert read_contexts(jsonl) == read_contexts(tsv) == {"u1": {"genre": "news"}}
    gz = tmp_path / "ctx.jsonl.gz"
    with gzip.open(gz, "wt", encoding="utf-8") as f:
        f.write('{"utt": "u1", "fields": {"genre": "news"}}\n')
    assert detect_context_format(gz) == "jsonl"
    assert read_contexts(gz) == {"u1": {"genre": "news"}}
    with pytest.raises(ValueError, match="context format must be one of"):
        read_contexts(tsv, "csv")


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        ('{"utt": "u1", "genre": "news"}\n{"utt": "u2", genre}\n', 2, "invalid JSON"),
        ('["u1", "news"]\n', 1, "expected an object"),
        ('{"genre": "news"}\n', 1, 'missing "utt"'),
        ('{"utt": "", "genre": "news"}\n', 1, "non-empty string utterance id"),
        ('{"utt": 7, "genre": "news"}\n', 1, "non-empty string utterance id"),
        ('{"utt": "u 1"}\n', 1, "contains whitespace"),
        ('{"utt": "u1", "fields": ["news"]}\n', 1, '"fields" must be an object'),
        ('{"utt": "u1", "fields": {"genre": "news"}, "speaker": "x"}\n', 1, "beside"),
        ('{"utt": "u1", "genre": {"a": 1}}\n', 1, "field 'genre': expected a string"),
        ('{"utt": "u1", "genre": true}\n', 1, "field 'genre': expected a string"),
        ('{"utt": "u1", "genre": "a"}\n\n{"utt": "u1", "genre": "b"}\n', 3, "first on line 1"),
    ],
)
def test_malformed_jsonl_lines(tmp_path: Path, text: str, line: int, message: str) -> None:
    path = write(tmp_path / "ctx.jsonl", text)
    with pytest.raises(InputError, match=message) as err:
        read_contexts(path)
    assert err.value.line == line and err.value.path == str(path)
    assert str(err.value).startswith(f"{path}:{line}: ")


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        ("id\tgenre\nu1\tnews\n", 1, "expected a header line 'utt<TAB>field1"),
        ("utt\tgenre\tgenre\nu1\ta\tb\n", 1, "repeated header field"),
        ("utt\tgenre\t\nu1\ta\tb\n", 1, "bad field name"),
        ("utt\tgenre\tspeaker\nu1\tnews\n", 2, "expected 3 tab-separated cells"),
        ("utt\tgenre\nu1\tnews\textra\n", 2, "got 3"),
        ("utt\tgenre\n\tnews\n", 2, "non-empty string utterance id"),
        ("utt\tgenre\nu1\tnews\nu2\tchat\nu1\tchat\n", 4, "duplicate utterance id 'u1'"),
    ],
)
def test_malformed_tsv_lines(tmp_path: Path, text: str, line: int, message: str) -> None:
    path = write(tmp_path / "ctx.tsv", text)
    with pytest.raises(InputError, match=message) as err:
        read_contexts(path)
    assert err.value.line == line and str(err.value).startswith(f"{path}:{line}: ")


def test_empty_tsv_and_missing_file(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="empty context file"):
        read_contexts(write(tmp_path / "ctx.tsv", "\n\n"))
    with pytest.raises(InputError, match="expected an existing file"):
        read_contexts(tmp_path / "nope.tsv")


def test_ids_must_match_exactly(tmp_path: Path) -> None:
    path = tmp_path / "ctx.tsv"
    contexts = {"u1": {}, "u2": {}, "u9": {}}
    check_context_ids(["u1", "u2", "u9"], contexts, path)
    with pytest.raises(InputError) as err:
        check_context_ids(["u1", "u2", "u3"], contexts, path)
    text = str(err.value)
    assert text.startswith(f"{path}: context ids do not match")
    assert "1 missing id(s): u3" in text and "1 extra id(s): u9" in text
