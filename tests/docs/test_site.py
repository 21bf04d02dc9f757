"""The site's generated CLI reference covers every command and option; README links resolve.

``mkdocs build --strict`` (in CI) checks the site's own links, anchors and nav; these tests check
what it cannot: that mkdocs-click finds every lazily loaded command of ``rescorer.cli.main``
(a command left out of the page would not fail the build), and the README's relative links (the
README is not part of the site).
"""

from __future__ import annotations

import re
from pathlib import Path

import click
import pytest

from tests.paths import REPO

CLI_PAGE = REPO / "docs" / "reference" / "cli.md"


def _commands(command: click.Command, path: tuple[str, ...]):
    """(path, command) for the command and every subcommand, depth first."""
    yield path, command
    if isinstance(command, click.Group):
        ctx = click.Context(command, info_name=path[-1])
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            assert sub is not None, f"{' '.join(path)} lists {name} but cannot load it"
            if not sub.hidden:
                yield from _commands(sub, (*path, name))


def _sections(html: str) -> dict[str, str]:
    """The page's HTML cut at its headings: heading id -> the HTML up to the next heading."""
    parts = re.split(r'<h[1-6] id="([^"]+)"', html)
    return {parts[i]: parts[i + 1] for i in range(1, len(parts) - 1, 2)}


def test_cli_reference_has_every_command_and_option() -> None:
    markdown = pytest.importorskip("markdown", reason="the docs extra is not installed")
    pytest.importorskip("mkdocs_click", reason="the docs extra is not installed")
    from rescorer.cli.main import main

    # every command loaded first: mkdocs-click lists a group's loaded commands when it has any
    # (else list_commands), so a test that ran one command before would leave only that one
    commands = list(_commands(main, ("rescorer",)))
    html = markdown.Markdown(
        extensions=["attr_list", "tables", "toc", "fenced_code", "mkdocs-click"]
    ).convert(CLI_PAGE.read_text(encoding="utf-8"))
    sections = _sections(html)
    missing = []
    assert len(commands) > 30  # every command module loaded, not only the group
    for path, command in commands:
        anchor = "-".join(path)
        if anchor not in sections:
            missing.append(f"command {' '.join(path)} (no heading #{anchor})")
            continue
        for param in command.params:
            if isinstance(param, click.Option) and not param.hidden:
                flag = max(param.opts, key=len)
                if flag not in sections[anchor]:
                    missing.append(f"{' '.join(path)} {flag}")
    assert not missing, "missing from docs/reference/cli.md:\n" + "\n".join(missing)


def _relative_links(text: str) -> list[str]:
    links = re.findall(r"\]\(([^)\s]+)\)", text)
    return [link for link in links if not re.match(r"[a-z]+:|#", link)]


def test_readme_links_resolve() -> None:
    readme = REPO / "README.md"
    broken = [
        link
        for link in _relative_links(readme.read_text(encoding="utf-8"))
        if not (REPO / Path(link.split("#")[0])).exists()
    ]
    assert not broken, f"README.md links to missing files: {broken}"
