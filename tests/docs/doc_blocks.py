"""Run the code blocks of a Markdown page the way a reader pastes them.

The convention (README.md and every ``docs/**/*.md``):

- Every fenced block whose language is ``bash``, ``sh``, ``shell`` or ``python`` is run, in page
  order, in one fresh temporary directory per page and ONE bash process, with ``set -e``: files
  and shell variables made by an earlier block are there for the later ones, and the first
  failing block fails the page. A ``python`` block is run by the environment's ``python`` in the
  same sequence (its working directory is the page's, ``''`` first on ``sys.path``).
- An HTML comment line directly above a block's opening fence changes that:
  ``<!-- docs-test: skip REASON -->`` (not run; the reason says why, e.g. the model it needs and
  the command that makes it) and ``<!-- docs-test: slow -->`` (the page is a slow test).
- Inside a block, a comment line ``#> TEXT`` is an output line the block must print (stdout and
  stderr together): ``...`` matches any text, a run of whitespace any whitespace, the rest is
  compared exactly (numbers included), and the expected lines are found in order among the
  block's output lines, each matching a whole line (leading and trailing blanks aside).
- The page's directory holds links ``recipes``, ``examples``, ``scripts``, ``bench``, ``tests``
  and ``.venv`` to the repository's folders; ``PATH`` starts with the environment's ``bin``
  (``rescorer``), ``RESCORER_DATA`` names the data folder.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

RUN_LANGUAGES = {"bash": "bash", "sh": "bash", "shell": "bash", "python": "python"}
REPO_LINKS = ("recipes", "examples", "scripts", "bench", "tests", ".venv")
MARK = "@@docs-test-block"  # printed between blocks; nothing a page prints looks like it

_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<info>.*)$")
_MARKER = re.compile(r"^\s*<!--\s*docs-test:\s*(?P<word>\S+)\s*(?P<rest>.*?)\s*-->\s*$")
_MARKER_START = re.compile(r"<!--\s*docs-test\b")
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_EXPECT = re.compile(r"^\s*#>(?: (?P<text>.*)|\s*)$")


@dataclass
class Block:
    """One fenced block of a page."""

    number: int  # 1-based among the page's fenced blocks
    line: int  # 1-based line of the opening fence in the page
    language: str
    code: str
    skip: str | None = None  # the reason, when marked skip ("" when the reason is missing)
    slow: bool = False

    @property
    def runnable(self) -> bool:
        return self.language in RUN_LANGUAGES

    @property
    def runs(self) -> bool:
        return self.runnable and self.skip is None

    def expected(self) -> list[str]:
        """The ``#> `` lines of the block, without the prefix."""
        out = []
        for line in self.code.splitlines():
            m = _EXPECT.match(line)
            if m:
                out.append(m.group("text") or "")
        return out


@dataclass
class Page:
    path: Path
    blocks: list[Block] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # malformed markers, unclosed fences

    @property
    def slow(self) -> bool:
        return any(b.slow for b in self.blocks if b.runs)


def parse_page(path: Path, text: str | None = None) -> Page:
    """The fenced blocks of a Markdown page, with their docs-test markers."""
    if text is None:
        text = path.read_text(encoding="utf-8")
    lines = text.splitlines()
    page = Page(path)
    used_markers: set[int] = set()
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m or (m.group("fence")[0] == "`" and "`" in m.group("info")):
            i += 1
            continue
        indent, fence = len(m.group("indent").expandtabs(4)), m.group("fence")
        info = m.group("info").strip().lstrip("{").lstrip(".")
        language = re.split(r"[\s{}]", info, maxsplit=1)[0].lower() if info else ""
        start = i
        body: list[str] = []
        i += 1
        closed = False
        while i < len(lines):
            c = _FENCE.match(lines[i])
            if (
                c
                and c.group("fence")[0] == fence[0]
                and len(c.group("fence")) >= len(fence)
                and not c.group("info").strip()
            ):
                closed = True
                break
            body.append(_dedent(lines[i], indent))
            i += 1
        if not closed:
            page.problems.append(f"line {start + 1}: code fence never closed")
        block = Block(len(page.blocks) + 1, start + 1, language, "\n".join(body) + "\n")
        # markers: the comment lines directly above the fence
        j = start - 1
        while j >= 0 and _MARKER_START.search(lines[j]):
            used_markers.add(j)
            mm = _MARKER.match(lines[j])
            if not mm:
                page.problems.append(
                    f"line {j + 1}: malformed docs-test marker {lines[j].strip()!r}"
                )
            elif mm.group("word") == "skip":
                block.skip = mm.group("rest")
                if not block.skip:
                    page.problems.append(f"line {j + 1}: docs-test skip marker without a reason")
            elif mm.group("word") == "slow":
                block.slow = True
            else:
                page.problems.append(
                    f"line {j + 1}: unknown docs-test marker {mm.group('word')!r} "
                    "(known: skip REASON, slow)"
                )
            j -= 1
        if (block.skip is not None or block.slow) and not block.runnable:
            page.problems.append(
                f"line {start + 1}: docs-test marker on a {language or 'plain'} block, which is "
                "never run"
            )
        page.blocks.append(block)
        i += 1
    for k, line in enumerate(lines):
        if _MARKER_START.search(line) and k not in used_markers:
            page.problems.append(f"line {k + 1}: docs-test marker not directly above a code fence")
    return page


def _dedent(line: str, indent: int) -> str:
    """Remove up to ``indent`` columns of leading blanks (a fence nested in a list)."""
    n = 0
    for ch in line:
        if n >= indent or ch not in " \t":
            break
        n += 1
    return line[n:]


def expected_pattern(expected: str) -> re.Pattern[str]:
    """``...`` is any text, a run of whitespace any whitespace, the rest literal; whole line."""
    parts = []
    for k, piece in enumerate(expected.strip().split("...")):
        if k:
            parts.append(".*")
        for j, word in enumerate(re.split(r"\s+", piece)):
            if j:
                parts.append(r"\s+")
            parts.append(re.escape(word))
    return re.compile("".join(parts))


def output_lines(text: str) -> list[str]:
    """Lines of captured output: ANSI codes removed, carriage returns (progress bars) split."""
    text = _ANSI.sub("", text)
    return [line.strip() for line in re.split(r"\r\n|\r|\n", text)]


def missing_expected(expected: list[str], output: list[str]) -> str | None:
    """The first expected line not found (in order) among the output lines, or None."""
    pos = 0
    for exp in expected:
        pattern = expected_pattern(exp)
        while pos < len(output) and not pattern.fullmatch(output[pos]):
            pos += 1
        if pos == len(output):
            return exp
        pos += 1
    return None


@dataclass
class PageFailure(Exception):
    page: str
    block: Block | None
    message: str
    output: str

    def __str__(self) -> str:
        where = f"{self.page}"
        if self.block is not None:
            where += f", block {self.block.number} ({self.block.language}, line {self.block.line})"
        tail = "\n".join(self.output.rstrip("\n").splitlines()[-40:])
        return f"{where}: {self.message}\n--- output (last 40 lines) ---\n{tail}"


def page_environment(bin_dir: Path, data_dir: Path | None) -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONUNBUFFERED"] = "1"  # stdout and stderr interleave as on a terminal
    env.pop("PYTHONPATH", None)
    if data_dir is not None:
        env["RESCORER_DATA"] = str(data_dir)
    return env


def run_page(
    page: Page,
    workdir: Path,
    *,
    name: str,
    repo: Path | None = None,
    bin_dir: Path | None = None,
    data_dir: Path | None = None,
    timeout: float = 1800,
) -> list[tuple[Block, list[str]]]:
    """Run the page's blocks in ``workdir`` (made here); raise PageFailure on the first failure.

    Returns each block that ran with its output lines.
    """
    bin_dir = bin_dir or Path(sys.prefix) / "bin"
    blocks = [b for b in page.blocks if b.runs]
    work = workdir / "page"
    scripts = workdir / "blocks"
    work.mkdir(parents=True)
    scripts.mkdir()
    if repo is not None:
        for name_ in REPO_LINKS:
            if (repo / name_).exists():
                (work / name_).symlink_to(repo / name_)
    main = ["set -e", f"cd {_quote(str(work))}"]
    for b in blocks:
        ext = "sh" if RUN_LANGUAGES[b.language] == "bash" else "py"
        f = scripts / f"block_{b.number:03d}_line_{b.line}.{ext}"
        f.write_text(b.code, encoding="utf-8")
        main.append(f"printf '\\n%s\\n' '{MARK} begin {b.number}'")
        main.append("set -e")
        if ext == "sh":
            main.append(f"source {_quote(str(f))}")
        else:
            main.append(
                'python -c \'import runpy, sys; sys.argv = sys.argv[1:]; sys.path.insert(0, ""); '
                f'runpy.run_path(sys.argv[0], run_name="__main__")\' {_quote(str(f))}'
            )
        main.append(f"printf '\\n%s\\n' '{MARK} end {b.number}'")
    main.append(f"printf '\\n%s\\n' '{MARK} done'")
    script = scripts / "page.sh"
    script.write_text("\n".join(main) + "\n", encoding="utf-8")
    log = workdir / "output.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            ["bash", str(script)],
            cwd=work,
            env=page_environment(bin_dir, data_dir),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            rc = proc.wait(timeout=timeout)
            timed_out = False
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            rc = proc.wait()
            timed_out = True
    text = log.read_text(encoding="utf-8", errors="replace")
    # split the output at the markers
    by_block: dict[int, list[str]] = {}
    raw_by_block: dict[int, list[str]] = {}
    current: int | None = None
    ended: set[int] = set()
    done = False
    for raw in text.splitlines():
        if raw.startswith(MARK):
            word = raw[len(MARK) :].split()
            if word[0] == "begin":
                current = int(word[1])
                by_block[current] = []
                raw_by_block[current] = []
            elif word[0] == "end":
                ended.add(int(word[1]))
                current = None
            elif word[0] == "done":
                done = True
            continue
        if current is not None:
            raw_by_block[current].append(raw)
            by_block[current].extend(output_lines(raw))
    numbered = {b.number: b for b in blocks}
    results = []
    for b in blocks:
        out = by_block.get(b.number)
        raw_out = "\n".join(raw_by_block.get(b.number, []))
        if out is None:
            raise PageFailure(name, b, f"block never started (bash exit status {rc})", text)
        if b.number not in ended:
            why = f"timed out after {timeout:.0f} s" if timed_out else f"failed (exit status {rc})"
            raise PageFailure(name, b, why, raw_out)
        missing = missing_expected(b.expected(), out)
        if missing is not None:
            raise PageFailure(
                name, b, f"expected output line not found (in order): {missing!r}", raw_out
            )
        results.append((b, out))
    if not done or rc != 0:
        last = numbered[max(ended)] if ended else None
        raise PageFailure(name, last, f"the page's shell ended early (exit status {rc})", text)
    return results


def _quote(s: str) -> str:
    return "'" + s.replace("'", "'\\''") + "'"
