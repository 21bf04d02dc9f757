"""Normalise novels into LibriSpeech-style LM training text, one sentence per line.

Paragraphs (blank-line separated, hard-wrapped lines joined) are split into sentences after
., ! or ? (with any closing quotes or brackets), then each sentence is mapped to upper case
A-Z and apostrophes by ``rescorer.normalize.librispeech_normalise``
(the ``librispeech`` normaliser of ``--normalize``).

With ``--breaks book`` (or ``paragraph``) a blank line ends every book (paragraph): the
documents of a plain corpus read with ``"plain_documents": "block"``, within which an LSTM's
``previous`` text context is derived (consecutive sentences as consecutive utterances, a book
as a recording). Without it the text has no blank lines (the n-gram's training text).

Usage: python normalise_books.py BOOKS_DIR OUT_TXT [--breaks book|paragraph]
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from rescorer.core.output import atomic_write
from rescorer.normalize import librispeech_normalise

SENTENCE_END = re.compile(r"(?<=[.!?])[\"'\u201d\u2019)\]]*\s+")


BREAKS = ("none", "book", "paragraph")


def paragraphs(text: str) -> list[list[str]]:
    """The sentences of each paragraph of a book."""
    text = text.lstrip("\ufeff").replace("\r\n", "\n")
    out: list[list[str]] = []
    for para in re.split(r"\n\s*\n", text):
        joined = " ".join(line.strip() for line in para.splitlines())
        out.append([s for s in SENTENCE_END.split(joined) if s.strip()])
    return out


def sentences(text: str) -> list[str]:
    return [s for para in paragraphs(text) for s in para]


def main(books_dir: str, out_path: str, breaks: str = "none") -> None:
    books = sorted(Path(books_dir).glob("*.txt"))
    books = [b for b in books if b.name != "titles.tsv"]
    if not books:
        sys.exit(f"no .txt novels in {books_dir}")
    n_sent = n_words = 0
    with atomic_write(out_path) as out:
        for book in books:
            for para in paragraphs(book.read_text(encoding="utf-8-sig")):
                written = 0
                for sent in para:
                    words = librispeech_normalise(sent)
                    if words:
                        out.write(" ".join(words) + "\n")
                        written += 1
                        n_words += len(words)
                n_sent += written
                if breaks == "paragraph" and written:
                    out.write("\n")
            if breaks == "book":
                out.write("\n")
    print(f"{len(books)} books -> {n_sent} sentences, {n_words} words in {out_path}")


if __name__ == "__main__":
    args = sys.argv[1:]
    mode = "none"
    if len(args) == 4 and args[2] == "--breaks" and args[3] in BREAKS:
        mode = args[3]
        args = args[:2]
    if len(args) != 2:
        sys.exit(__doc__)
    main(args[0], args[1], mode)
