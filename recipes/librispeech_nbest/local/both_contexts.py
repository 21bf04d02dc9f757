"""Context records holding two texts: each utterance's ``previous`` field from one context file
(the few utterances before it, for a context LM) and, as ``cache``, the ``previous`` field of
another (the chapter so far, for a cache over that LM), so that one `rescorer score` gives each
model its own span.

    python local/both_contexts.py FIRST.jsonl CACHE.jsonl OUT.jsonl
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rescorer.context_build import write_contexts
from rescorer.contexts import read_contexts

CACHE_FIELD = "cache"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("first", type=Path, help="records whose fields are kept (previous: K)")
    ap.add_argument("cache", type=Path, help="records whose `previous` becomes `cache`")
    ap.add_argument("out", type=Path)
    args = ap.parse_args()
    first, cache = read_contexts(args.first), read_contexts(args.cache)
    if set(first) != set(cache):
        raise SystemExit(f"{args.first} and {args.cache} hold different utterances")
    both = {}
    for utt, record in first.items():
        fields = dict(record or {})
        text = (cache[utt] or {}).get("previous")
        if text:
            fields[CACHE_FIELD] = text
        both[utt] = fields
    write_contexts(args.out, both)


if __name__ == "__main__":
    main()
