"""What a line of a transcript looks like: an sclite stm segment or ctm word.

The cheap tests :mod:`rescorer.refs` runs on the first lines of every reference and hypothesis
text it reads as Kaldi or trn, to refuse an stm or a ctm given under the wrong format rather
than score it wrongly. They live apart from the readers (:mod:`rescorer.formats.sclite`) so that
reading a plain reference does not import them (start-up of ``rescorer wer``, issue 50).
"""

from __future__ import annotations

import re

STM_COMMENT = ";;"
CTM_COMMENT = ";"
_NUMBER = re.compile(r"^[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?$")


def is_number(token: str) -> bool:
    """A plain decimal number (``nan`` and ``inf`` are not: they are words)."""
    return bool(_NUMBER.match(token))


def looks_like_stm(line: str) -> bool:
    """At least five fields, the fourth and fifth numbers (begin <= end): an stm segment."""
    fields = line.split()
    if len(fields) < 5 or not (is_number(fields[3]) and is_number(fields[4])):
        return False
    from fractions import Fraction  # exact, as the reader compares times; rarely reached

    return Fraction(fields[3]) <= Fraction(fields[4])


def looks_like_ctm(line: str) -> bool:
    """Five or six fields, the third and fourth numbers (the sixth a number or NA): a ctm word."""
    fields = line.split()
    if len(fields) not in (5, 6) or not (is_number(fields[2]) and is_number(fields[3])):
        return False
    return len(fields) == 5 or is_number(fields[5]) or fields[5].upper() == "NA"
