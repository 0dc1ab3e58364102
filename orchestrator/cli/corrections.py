"""``arena memory forget|restore|edit|pin|unpin|history``: people's corrections to session
memory, each recorded with who (the OS user, or ``--by NAME``), when and what."""

from __future__ import annotations

import getpass
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime

import click
from rich.table import Table
from rich.text import Text

from orchestrator.cli.output import json_text, out, printable
from orchestrator.cli.resources import wired
from orchestrator.memory.corrections import Corrections, check_actor
from orchestrator.settings import Settings

__all__ = ["COMMANDS", "actor"]


@contextmanager
def _corrections(settings: Settings) -> Iterator[Corrections]:
    with wired(settings) as wiring:
        yield wiring.corrections


def actor(by: str | None) -> str:
    """Who makes a change from the command line: ``--by``, else the OS user."""
    if by is not None:
        return check_actor(by)
    try:
        return check_actor(getpass.getuser())
    except (OSError, KeyError):
        return "cli"


_BY = click.option(
    "--by", default=None, metavar="NAME", help="Who is making the change (default: the OS user)."
)
_ID = click.argument("entry_id", metavar="ID", type=int)


@click.command()
@_ID
@_BY
@click.option("--reason", default=None, metavar="TEXT", help="Why (kept in its history).")
@click.pass_obj
def forget(settings: Settings, entry_id: int, by: str | None, reason: str | None) -> None:
    """Archive a memory (reversible with `arena memory restore ID`)."""
    with _corrections(settings) as corrections:
        corrections.forget(entry_id, by=actor(by), now=datetime.now(UTC), reason=reason)
    out.print(f"memory {entry_id} archived; `arena memory restore {entry_id}` brings it back")


@click.command()
@_ID
@_BY
@click.pass_obj
def restore(settings: Settings, entry_id: int, by: str | None) -> None:
    """Make an archived memory active again."""
    with _corrections(settings) as corrections:
        corrections.restore(entry_id, by=actor(by), now=datetime.now(UTC))
    out.print(f"memory {entry_id} restored")


@click.command()
@_ID
@click.argument("text")
@_BY
@click.pass_obj
def edit(settings: Settings, entry_id: int, text: str, by: str | None) -> None:
    """Correct a memory: TEXT ('-' reads stdin) becomes a new entry, through the same gate as
    the agents' memories, and the old one is kept as superseded, linked to it."""
    content = sys.stdin.read() if text == "-" else text
    with _corrections(settings) as corrections:
        edited = corrections.edit(entry_id, content, by=actor(by), now=datetime.now(UTC))
    out.print(
        f"memory {entry_id} superseded by {edited.new.id}; `arena memory show {edited.new.id}`"
    )


@click.command()
@_ID
@_BY
@click.pass_obj
def pin(settings: Settings, entry_id: int, by: str | None) -> None:
    """Pin a memory: recall offers it at every turn of its group, whatever the message."""
    with _corrections(settings) as corrections:
        corrections.pin(entry_id, by=actor(by), now=datetime.now(UTC))
    out.print(f"memory {entry_id} pinned")


@click.command()
@_ID
@_BY
@click.pass_obj
def unpin(settings: Settings, entry_id: int, by: str | None) -> None:
    """Unpin a memory: recall offers it only when it is relevant again."""
    with _corrections(settings) as corrections:
        corrections.unpin(entry_id, by=actor(by), now=datetime.now(UTC))
    out.print(f"memory {entry_id} unpinned")


@click.command()
@_ID
@click.option("--json", "as_json", is_flag=True, help="One JSON object per change.")
@click.pass_obj
def history(settings: Settings, entry_id: int, as_json: bool) -> None:
    """Every change people made to a memory: who, when and what."""
    with _corrections(settings) as corrections:
        corrections.get(entry_id)
        changes = corrections.audit.history(entry_id)
    if as_json:
        for change in changes:
            out.print(json_text(change.as_dict()))
        return
    if not changes:
        out.print(f"memory {entry_id} has not been changed by anyone")
        return
    table = Table("when", "action", "by", "what")
    for c in changes:
        what = c.old_content or ""
        if c.action == "edit":
            what = f"{c.old_content} -> {c.new_content} (now memory {c.new_entry_id})"
        if c.reason:
            what = f"{what} (why: {c.reason})"
        stamp = c.at.astimezone(settings.zone).strftime("%Y-%m-%d %H:%M:%S")
        table.add_row(*(Text(printable(v)) for v in (stamp, c.action, c.actor, what)))
    out.print(table)


COMMANDS = (forget, restore, edit, pin, unpin, history)
