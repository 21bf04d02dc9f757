"""Normalise novels into LibriSpeech-style LM training text, one sentence per line.

Paragraphs (blank-line separated, hard-wrapped lines joined) are split into sentences after
., ! or ? (with any closing quotes or brackets), then each sentence is mapped to upper case
A-Z and apostrophes by ``rescorer.normalize.librispeech_normalise``
(the ``librispeech`` normaliser of ``--normalize``).

Usage: python normalise_books.py BOOKS_DIR OUT_TXT
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from rescorer.core.output import atomic_write
from rescorer.normalize import librispeech_normalise

SENTENCE_END = re.compile(r"(?<=[.!?])[\"'\u201d\u2019)\]]*\s+")


def sentences(text: str) -> list[str]:
    text = text.lstrip("\ufeff").replace("\r\n", "\n")
    out: list[str] = []
    for para in re.split(r"\n\s*\n", text):
        joined = " ".join(line.strip() for line in para.splitlines())
        out.extend(s for s in SENTENCE_END.split(joined) if s.strip())
    return out


def main(books_dir: str, out_path: str) -> None:
    books = sorted(Path(books_dir).glob("*.txt"))
    books = [b for b in books if b.name != "titles.tsv"]
    if not books:
        sys.exit(f"no .txt novels in {books_dir}")
    n_sent = n_words = 0
    with atomic_write(out_path) as out:
        for book in books:
            for sent in sentences(book.read_text(encoding="utf-8-sig")):
                words = librispeech_normalise(sent)
                if words:
                    out.write(" ".join(words) + "\n")
                    n_sent += 1
                    n_words += len(words)
    print(f"{len(books)} books -> {n_sent} sentences, {n_words} words in {out_path}")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
