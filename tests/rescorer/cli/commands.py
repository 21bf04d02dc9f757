"""Every (sub)command of the `rescorer` entry point, for tests that check a property of all."""

from __future__ import annotations

import click

from rescorer.cli.main import main


def leaf_commands() -> list[tuple[str, click.Command]]:
    """``(full name, command)`` of every command that is not a group (``"ngram build"``)."""
    found: list[tuple[str, click.Command]] = []

    def walk(prefix: str, group: click.Group) -> None:
        ctx = click.Context(group)
        for name in group.list_commands(ctx):
            command = group.get_command(ctx, name)
            assert command is not None, f"{prefix}{name} is listed but cannot be loaded"
            if isinstance(command, click.Group):
                walk(f"{prefix}{name} ", command)
            else:
                found.append((f"{prefix}{name}", command))

    walk("", main)
    return found
