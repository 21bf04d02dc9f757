"""Training text for the keyboard recipe, in the style of the Enron Mobile ``nvp`` test sets.

The test sentences (``mobile_nvp.txt``) are lower case, without punctuation, with numbers spoken
digit by digit ("three eight two five"), apostrophes kept inside words ("i've"), acronyms and
initials spelled as letters with periods ("FYI" -> "f. y. i.", "J." -> "j.") and "OK" as "okay".
Each source is normalised the same way (:func:`normalise`), one sentence (chat post, conversation
turn, Brown sentence) per line:

- NPS Chat: every post except the ``System`` class (joins, parts, bot messages);
- Switchboard: the turns of ``transcript``, speaker labels dropped;
- Brown: every sentence (the corpus reader of lm_models, punctuation tokens dropped).

Every ``DEV_EVERY``-th line goes to ``dev.txt`` (held out: interpolation weights are estimated
there, never on the test set); the rest to ``train.txt``. ``sources.tsv`` counts lines and words
per source, ``vocab.txt`` is the prediction vocabulary: training words seen at least
``--min-count`` times, most frequent first, at most ``--vocab-size``.
"""

from __future__ import annotations

import argparse
import re
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from rescorer.core.output import atomic_write
from rescorer.lm_models.corpora import read_brown

DIGITS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]
# Dotted abbreviations and initials (U.S., a.m., J.), upper-case words, other words.
_TOKEN = re.compile(r"(?:[A-Za-z]\.)+|[A-Za-z0-9]+(?:'[A-Za-z]+)*")


def _spell(letters: str) -> list[str]:
    return [f"{ch.lower()}." for ch in letters if ch.isalpha()]


def normalise(text: str) -> list[str]:
    """Words of ``text`` in the Enron Mobile ``nvp`` style (see the module docstring)."""
    text = text.replace("\u2019", "'").replace("`", "'")
    tokens = _TOKEN.findall(text)
    # A line written all in capitals is shouting, not acronyms.
    caps = sum(1 for t in tokens if len(t) > 1 and t.isupper())
    shouting = caps > 0.5 * max(1, sum(1 for t in tokens if len(t) > 1))
    words: list[str] = []
    for tok in tokens:
        if tok.endswith("."):
            words.extend(_spell(tok))
        elif not shouting and 2 <= len(tok) <= 5 and tok.isalpha() and tok.isupper():
            words.extend(["okay"] if tok == "OK" else _spell(tok))
        elif any(ch.isdigit() for ch in tok):
            for part in re.findall(r"\d|[A-Za-z']+", tok):
                words.append(DIGITS[int(part)] if part.isdigit() else part.lower())
        else:
            low = tok.lower()
            words.append("okay" if low == "ok" else low)
    return words


def nps_chat(folder: Path) -> Iterator[list[str]]:
    for path in sorted(folder.glob("*.xml")):
        root = ET.parse(path).getroot()
        for post in root.iter("Post"):
            if post.get("class") == "System":
                continue
            words = normalise(post.text or "")
            if words:
                yield words


def switchboard(path: Path) -> Iterator[list[str]]:
    label = re.compile(r"^[AB]\.\d+:\s*")
    for line in path.read_text(encoding="utf-8").splitlines():
        words = normalise(label.sub("", line))
        if words:
            yield words


def brown(folder: Path) -> Iterator[list[str]]:
    for doc in read_brown(folder, lower=False, drop_punct=True):
        for sentence in doc.sentences:
            words = normalise(" ".join(sentence))
            if words:
                yield words


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("data", type=Path, help="the shared data folder")
    ap.add_argument("out", type=Path, help="output folder")
    ap.add_argument("--dev-every", type=int, default=50)
    ap.add_argument("--min-count", type=int, default=2)
    ap.add_argument("--vocab-size", type=int, default=20000)
    args = ap.parse_args()

    sources = {
        "nps_chat": nps_chat(args.data / "corpora" / "nps_chat"),
        "switchboard": switchboard(args.data / "corpora" / "switchboard" / "transcript"),
        "brown": brown(args.data / "corpora" / "brown"),
    }
    counts: Counter[str] = Counter()
    stats = []
    n = 0
    args.out.mkdir(parents=True, exist_ok=True)
    with atomic_write(args.out / "train.txt") as train, atomic_write(args.out / "dev.txt") as dev:
        for name, sentences in sources.items():
            lines = words = 0
            for sent in sentences:
                n += 1
                lines += 1
                words += len(sent)
                if n % args.dev_every == 0:
                    dev.write(" ".join(sent) + "\n")
                else:
                    train.write(" ".join(sent) + "\n")
                    counts.update(sent)
            stats.append((name, lines, words))
    with atomic_write(args.out / "sources.tsv") as f:
        f.write("source\tlines\twords\n")
        for name, lines, words in stats:
            f.write(f"{name}\t{lines}\t{words}\n")
    vocab = [w for w, c in counts.most_common() if c >= args.min_count][: args.vocab_size]
    with atomic_write(args.out / "vocab.txt") as f:
        for w in vocab:
            f.write(f"{w}\t{counts[w]}\n")
    print(
        f"{sum(s[1] for s in stats)} lines, {sum(s[2] for s in stats)} words, "
        f"{len(counts)} types, vocabulary {len(vocab)}"
    )


if __name__ == "__main__":
    main()
