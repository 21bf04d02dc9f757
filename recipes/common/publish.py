"""Publishing a recipe's results: the page a run wrote under exp/ merged into a committed page.

A recipe's run writes its results page (and its plots) under the recipe's ``exp/`` and leaves
every tracked file as it is; ``run.sh --publish`` (``recipes/stages.sh``) is the explicit step
that changes the committed page. It merges, never replaces: a run with fewer rows than the page
deletes nothing it did not make.

- A page is cut into sections at its ``##``-and-deeper headings (a section is named by the
  headings above it, so ``### Runs`` under two treebanks are two sections); the ``#`` title is
  the run's.
- Within a section, each block has a key: a table the first cell of its header (and its
  ordinal among the section's tables of that cell), a fenced code block its ordinal, a list
  item or paragraph the text of its first line up to its first colon (``- Command``,
  ``- Date``, ``- Our LSTM LM (rows 3L, 3M, 4L)``).
- A section or block the run wrote replaces the page's of the same key; the page's others stay
  where they were; the run's new ones go after the run's previous one.
- Tables merge row by row: a row's key is its first cell (the first two, three... where the
  first is not unique), a row the run made replaces the page's, the page's other rows stay.
  A table whose columns changed is refused (:class:`PublishError`): publish that one by hand.
- When rows are kept, a bullet after ``- Command`` names them (the rows of the table that kept
  most), since the command, date and machine lines above them are the new run's.

A committed page with the markers ``<!-- results: ... -->`` and ``<!-- end of results -->`` (an
experiment page under ``docs/experiments/``, with its introduction around them) has only the
text between them merged, with the run's page less its title. A README's results table is a
copy: ``<!-- results table: "| # | system" from RESULTS.md ... -->`` up to
``<!-- end of results table -->`` is replaced by the first table of the published page whose
header starts with that text (``under "HEADING"`` narrows it to the tables after that heading).

    python recipes/common/publish.py exp/RESULTS.md RESULTS.md [--readme README.md] \
        [--copy exp/training_curves.png ...]
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

BEGIN = "<!-- results:"
END = "<!-- end of results -->"
TABLE_BEGIN = re.compile(
    r'^<!-- results table: "(?P<prefix>[^"]+)"(?: under "(?P<heading>[^"]+)")?'
    r" from (?P<page>[^\s,]+)"
)
TABLE_END = "<!-- end of results table -->"
KEPT = "- Rows kept from earlier runs (this run did not make them)"
T = TypeVar("T")


class PublishError(ValueError):
    """A page that cannot be merged without losing rows: one line naming the file."""


@dataclass
class Block:
    kind: str  # "title", "table", "code" or "text"
    lines: list[str]  # with the blank lines after it
    key: tuple[str, ...] = ()


@dataclass
class Section:
    path: tuple[str, ...]  # the ##-and-deeper headings above and at it; () before the first
    heading: list[str]  # the heading line and the blank lines after it ([] before the first)
    blocks: list[Block] = field(default_factory=list)


def heading_level(line: str) -> int:
    m = re.match(r"^(#{1,6}) ", line)
    return len(m.group(1)) if m else 0


def parse(text: str) -> list[Section]:
    """``text`` as sections of keyed blocks (rendering them back gives ``text``)."""
    lines = text.splitlines(keepends=True)
    sections = [Section((), [])]
    stack: list[tuple[int, str]] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        level = heading_level(line)
        if level >= 2:
            stack = [(lv, h) for lv, h in stack if lv < level] + [(level, line[level:].strip())]
            j = skip_blank(lines, i + 1)
            sections.append(Section(tuple(h for _, h in stack), lines[i:j]))
            i = j
            continue
        if level == 1:
            kind, j = "title", i + 1
        elif line.startswith("|"):
            kind, j = "table", i
            while j < len(lines) and lines[j].startswith("|"):
                j += 1
        elif line.lstrip().startswith("```"):
            kind, j = "code", i + 1
            while j < len(lines) and not lines[j].lstrip().startswith("```"):
                j += 1
            j = min(j + 1, len(lines))
        else:
            kind, j = "text", i + 1
            item = re.match(r"^\s*([-*]|\d+\.) ", line) is not None
            while j < len(lines) and lines[j].strip() and not starts_block(lines[j], item):
                j += 1
        j = skip_blank(lines, j)
        sections[-1].blocks.append(Block(kind, lines[i:j]))
        i = j
    for section in sections:
        name_blocks(section.blocks)
    return sections


def skip_blank(lines: list[str], j: int) -> int:
    while j < len(lines) and not lines[j].strip():
        j += 1
    return j


def starts_block(line: str, in_item: bool) -> bool:
    """Whether ``line`` starts a block of its own after a paragraph or (``in_item``) a list
    item, whose indented lines are its own."""
    if heading_level(line) or line.startswith("|") or line.lstrip().startswith("```"):
        return True
    if re.match(r"^([-*]|\d+\.) ", line):  # a list item at the margin
        return True
    return in_item and not line[:1].isspace()


def name_blocks(blocks: list[Block]) -> None:
    """Each block's key: a table its header's first cell, a code block its kind, a text its
    first line up to its first colon; numbered where two blocks of a section would share one."""
    seen: dict[tuple[str, ...], int] = {}
    for block in blocks:
        if block.kind in ("title", "code"):
            base: tuple[str, ...] = (block.kind,)
        elif block.kind == "table":
            base = ("table", cells(block.lines[0])[0])
        else:
            base = ("text", block.lines[0].strip().split(":", 1)[0])
        n = seen.get(base, 0)
        seen[base] = n + 1
        block.key = (*base, str(n))


def render(sections: Sequence[Section]) -> str:
    return "".join(
        "".join(s.heading) + "".join("".join(b.lines) for b in s.blocks) for s in sections
    )


def merge_ordered(
    old: list[T], new: list[T], key: Callable[[T], object], combine: Callable[[T, T], T]
) -> list[T]:
    """``old`` with each item of ``new`` in place of the old one of the same key (combined with
    it), and the new ones after the previous item of ``new``."""
    result = list(old)
    keys = [key(x) for x in result]
    pos = -1
    for item in new:
        k = key(item)
        if k in keys:
            pos = keys.index(k)
            result[pos] = combine(result[pos], item)
        else:
            pos += 1
            result.insert(pos, item)
            keys.insert(pos, k)
    return result


@dataclass
class Merge:
    """What a merge kept of the old page: the rows of each table that the run did not make."""

    where: str
    kept_rows: list[list[str]] = field(default_factory=list)


def cells(row: str) -> list[str]:
    return [c.strip() for c in row.strip().strip("|").split("|")]


def table_rows(block: Block) -> tuple[list[str], list[str], list[str]]:
    """(header lines, row lines, trailing blank lines) of a table block."""
    body = [line for line in block.lines if line.startswith("|")]
    blank = block.lines[len(body) :]
    n_head = 2 if len(body) > 1 and set(body[1].strip()) <= set("|-: ") else 1
    return body[:n_head], body[n_head:], blank


def row_keys(rows: list[str], width: int) -> list[tuple[str, ...]]:
    return [tuple(cells(r)[:width]) for r in rows]


def merge_tables(old: Block, new: Block, merge: Merge) -> Block:
    old_head, old_rows, _ = table_rows(old)
    new_head, new_rows, blank = table_rows(new)
    if len(cells(old_head[0])) != len(cells(new_head[0])):
        raise PublishError(
            f"{merge.where}: the table {new_head[0].strip()!r} has other columns than the "
            f"published one ({old_head[0].strip()!r}); publish it by hand"
        )
    width = 1
    while width < len(cells(new_head[0])) and any(
        len(set(keys)) < len(keys)
        for keys in (row_keys(old_rows, width), row_keys(new_rows, width))
    ):
        width += 1
    made = set(row_keys(new_rows, width))
    rows = merge_ordered(old_rows, new_rows, lambda r: tuple(cells(r)[:width]), lambda _, b: b)
    kept = [" ".join(cells(r)[:width]) for r in rows if tuple(cells(r)[:width]) not in made]
    if kept:
        merge.kept_rows.append(kept)
    return Block("table", new_head + rows + blank, new.key)


def merge_sections(old: list[Section], new: list[Section], where: str) -> tuple[str, Merge]:
    merge = Merge(where)

    def blocks(a: Section, b: Section) -> Section:
        def combine(x: Block, y: Block) -> Block:
            return merge_tables(x, y, merge) if x.kind == y.kind == "table" else y

        return Section(
            b.path, b.heading, merge_ordered(a.blocks, b.blocks, lambda x: x.key, combine)
        )

    sections = merge_ordered(old, new, lambda s: s.path, blocks)
    note_kept(sections[0], merge)
    return render(sections), merge


def note_kept(preamble: Section, merge: Merge) -> None:
    """The bullet naming the rows kept from earlier runs (the table that kept most), after
    ``- Command``; none when every row is the run's."""
    blocks = [b for b in preamble.blocks if not b.lines[0].startswith(KEPT)]
    if merge.kept_rows:
        rows = max(merge.kept_rows, key=len)
        note = Block("text", [f"{KEPT}: {', '.join(rows)}.\n"], ("text", KEPT, "0"))
        after = next((i for i, b in enumerate(blocks) if b.key[:2] == ("text", "- Command")), None)
        if after is not None:  # one list with it: the note takes the blank lines after it
            prev = blocks[after]
            body = [line for line in prev.lines if line.strip()]
            note.lines += prev.lines[len(body) :]
            blocks[after] = Block(prev.kind, body, prev.key)
        else:  # a paragraph of its own, after the title
            after = next((i for i, b in enumerate(blocks) if b.kind == "title"), -1)
            note.lines.append("\n")
        blocks.insert(after + 1, note)
    preamble.blocks = blocks


def merge_pages(old: str, new: str, where: str = "the page") -> tuple[str, Merge]:
    """``new`` (a run's page) merged into ``old`` (the committed page): see the module's
    docstring. Between the markers of a marked ``old`` only, with ``new`` less its title."""
    if BEGIN in old and END in old:
        head, rest = old.split(BEGIN, 1)
        marker, rest = rest.split("\n", 1)
        region, tail = rest.split(END, 1)
        body = "".join(b for b in new.splitlines(keepends=True) if heading_level(b) != 1)
        merged, merge = merge_sections(parse(region), parse(body.lstrip("\n")), where)
        return f"{head}{BEGIN}{marker}\n{merged}{END}{tail}", merge
    return merge_sections(parse(old), parse(new), where)


def first_table(page: str, prefix: str, heading: str | None = None) -> str | None:
    """The first table of ``page`` whose header starts with ``prefix`` (after the heading
    that contains ``heading``, when given)."""
    for section in parse(page):
        if heading is not None and not any(heading in h for h in section.path):
            continue
        for block in section.blocks:
            if block.kind == "table" and block.lines[0].startswith(prefix):
                return "".join(line for line in block.lines if line.startswith("|"))
    return None


def copy_tables(readme: str, pages: dict[str, str], where: str = "README.md") -> str:
    """``readme`` with each marked results table copied from its page (``pages``: name ->
    text)."""
    out: list[str] = []
    lines = readme.splitlines(keepends=True)
    i = 0
    while i < len(lines):
        out.append(lines[i])
        m = TABLE_BEGIN.match(lines[i])
        i += 1
        if not m:
            continue
        end = next((j for j in range(i, len(lines)) if lines[j].startswith(TABLE_END)), None)
        if end is None:
            raise PublishError(f"{where}: {m.group(0)!r} has no {TABLE_END!r} after it")
        page = pages.get(m.group("page"))
        table = None if page is None else first_table(page, m.group("prefix"), m.group("heading"))
        if table is None:
            raise PublishError(
                f"{where}: no table {m.group('prefix')!r} in {m.group('page')} to copy"
            )
        out += ["\n", table, "\n"]  # blank lines around it: a table of its own
        i = end
    return "".join(out)


def write(path: Path, text: str) -> None:
    """``text`` into ``path`` by a temporary file and a rename (a reader sees either page)."""
    tmp = path.with_name(f".{path.name}.publish-tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


def publish(
    page: Path, target: Path, readme: Path | None = None, copy: Sequence[Path] = ()
) -> Merge:
    """Merges the run's ``page`` into ``target`` (written as it is when there is none yet),
    copies ``copy`` beside it and the README's marked tables from it."""
    new = page.read_text(encoding="utf-8")
    if target.exists():
        text, merge = merge_pages(target.read_text(encoding="utf-8"), new, str(target))
    else:
        text, merge = new, Merge(str(target))
    if readme is not None:  # checked before anything is written
        readme_text = copy_tables(readme.read_text(encoding="utf-8"), {target.name: text},
                                  str(readme))  # fmt: skip
    target.parent.mkdir(parents=True, exist_ok=True)
    write(target, text)
    for f in copy:
        shutil.copyfile(f, target.parent / f.name)
    if readme is not None:
        write(readme, readme_text)
    return merge


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("page", type=Path, help="the run's page (under exp/)")
    ap.add_argument("target", type=Path, help="the committed page it is merged into")
    ap.add_argument("--readme", type=Path, help="a README whose marked results tables to copy")
    ap.add_argument("--copy", type=Path, nargs="*", default=[], help="files to put beside TARGET")
    args = ap.parse_args(argv)
    for f in (args.page, *args.copy):
        if not f.is_file():
            sys.exit(f"publish: {f}: no such file")
    try:
        merge = publish(args.page, args.target, args.readme, args.copy)
    except PublishError as exc:
        sys.exit(f"publish: {exc}")
    kept = max(merge.kept_rows, key=len) if merge.kept_rows else []
    print(
        f"published {args.page} into {args.target}"
        + (f" (kept from earlier runs: {', '.join(kept)})" if kept else "")
    )


if __name__ == "__main__":
    main()
