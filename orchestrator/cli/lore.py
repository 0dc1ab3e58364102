"""``arena knowledge lore add|list|edit|remove``: lorebook entries, short facts given to an
agent whenever their keys (or pattern) appear in the group's last few messages."""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from typing import Any

import click
from rich.table import Table

from orchestrator.cli.output import fail, json_text, out, printable
from orchestrator.cli.resources import wired
from orchestrator.core.lore import LoreEntry
from orchestrator.core.wire import validate_group
from orchestrator.memory.knowledge.lore import LoreEdit, NewLore, UnknownLore, check_new
from orchestrator.settings import Settings

__all__ = ["lore"]


@click.group()
def lore() -> None:
    """Lorebook entries: facts given to agents when their keys come up, no model call."""


@lore.command()
@click.argument("text")
@click.option("--group", default=None, help="Given in this group's turns.")
@click.option("--agent", default=None, help="Given in this agent's turns.")
@click.option("--everyone", is_flag=True, help="Given in every turn that matches.")
@click.option("--keys", default="", help="Comma-separated words or phrases that bring it in.")
@click.option("--pattern", default=None, help="A regular expression that brings it in.")
@click.option("--priority", default=50, show_default=True, type=click.IntRange(0, 100))
@click.option("--book", default=None, help="The lorebook (default: lore-<group|agent>, lore).")
@click.pass_obj
def add(
    settings: Settings,
    text: str,
    group: str | None,
    agent: str | None,
    everyone: bool,
    keys: str,
    pattern: str | None,
    priority: int,
    book: str | None,
) -> None:
    """Add an entry (TEXT, '-' reads stdin) to a lorebook, made on first use."""
    if sum((group is not None, agent is not None, everyone)) != 1:
        raise click.UsageError("say whose turns get it: one of --group G, --agent A, --everyone")
    content = sys.stdin.read() if text == "-" else text
    scope, scope_id = (
        ("group", validate_group(group))
        if group is not None
        else ("agent", agent or "")
        if agent is not None
        else ("everyone", "")
    )
    name = book or (f"lore-{scope_id}" if scope_id else "lore")
    now = datetime.now(UTC)
    new = NewLore(
        keys=[k for k in keys.split(",") if k.strip()],
        pattern=pattern,
        priority=priority,
        text=content,
    )
    check_new(new)  # a refused entry makes no book
    with wired(settings) as wiring:
        if scope == "agent" and scope_id not in wiring.team.ids:
            fail(f"no agent {printable(scope_id)!r} (see `arena status`)")
        source = wiring.knowledge.get(name)
        if source is None:
            source = wiring.knowledge.add(
                name=name,
                kind="lore",
                root=settings.data_dir / "knowledge" / name,
                scope=scope,
                scope_id=scope_id,
                trust="trusted",
                now=now,
            )
        elif (source.scope, source.scope_id) != (scope, scope_id):
            fail(f"lorebook {name!r} is for {source.owner}: choose another with --book")
        entry = wiring.lore.add(source, new, now=now)
    out.print(f"added lore {entry.locator} ({entry.tokens} tokens) for {source.owner}")


@lore.command(name="list")
@click.option("--book", default=None, help="Only this lorebook.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
@click.pass_obj
def list_(settings: Settings, book: str | None, as_json: bool) -> None:
    """List the lorebook entries: keys, pattern, priority and text."""
    with wired(settings) as wiring:
        entries = wiring.lore.entries([book] if book is not None else None)
    rows = [_row(e) for e in entries]
    if as_json:
        for row in rows:
            out.print(json_text(row))
        return
    if not rows:
        out.print("no lore entries (add one: arena knowledge lore add --group G --keys K TEXT)")
        return
    table = Table("id", "book", "keys / pattern", "priority", "tokens", "text")
    for e in entries:
        brings = ", ".join(e.keys) + (f" /{e.pattern.pattern}/" if e.pattern else "")
        table.add_row(
            str(e.id), e.book, printable(brings), str(e.priority), str(e.tokens), printable(e.text)
        )
    out.print(table)


def _row(entry: LoreEntry) -> dict[str, Any]:
    """An entry as ``--json`` prints it."""
    return {
        "id": entry.id,
        "book": entry.book,
        "keys": list(entry.keys),
        "pattern": entry.pattern.pattern if entry.pattern else None,
        "priority": entry.priority,
        "tokens": entry.tokens,
        "text": entry.text,
    }


@lore.command()
@click.argument("entry_id", metavar="ID", type=int)
@click.argument("text", required=False)
@click.option("--text", "text_option", default=None, help="The new text (or give it as TEXT).")
@click.option("--keys", default=None, help="The new comma-separated keys ('' drops them).")
@click.option("--pattern", default=None, help="The new regular expression ('' drops it).")
@click.option("--priority", default=None, type=click.IntRange(0, 100), help="The new priority.")
@click.option("--json", "as_json", is_flag=True, help="Print the entry as one JSON object.")
@click.pass_obj
def edit(
    settings: Settings,
    entry_id: int,
    text: str | None,
    text_option: str | None,
    keys: str | None,
    pattern: str | None,
    priority: int | None,
    as_json: bool,
) -> None:
    """Change lore entry ID in place: what is not given stays as it was.

    TEXT (or --text; '-' reads stdin) replaces the text. The entry is checked as `lore add`
    checks a new one, and keeps at least one key or a pattern; a refused change leaves it as
    it was. Its book, and so whose turns are given it, stays.

    \b
    arena knowledge lore edit 1 "Deploys happen on Wednesdays."
    arena knowledge lore edit 1 --keys "deploy, ship" --priority 90
    arena knowledge lore edit 1 --pattern '' --keys deploy
    """
    if text is not None and text_option is not None:
        raise click.UsageError("give the new text once: as TEXT or with --text")
    new_text = text if text is not None else text_option
    change = LoreEdit(
        keys=None if keys is None else [k for k in keys.split(",") if k.strip()],
        pattern=pattern,
        priority=priority,
        text=sys.stdin.read() if new_text == "-" else new_text,
    )
    if change.empty:
        raise click.UsageError("say what to change: TEXT, --keys, --pattern or --priority")
    with wired(settings) as wiring:
        try:
            entry = wiring.lore.edit(entry_id, change)
        except UnknownLore:
            fail(f"no lore entry {entry_id} (see `arena knowledge lore list`)")
        book = wiring.knowledge.get(entry.book)
    if as_json:
        out.print(json_text(_row(entry)))
        return
    owner = f" for {book.owner}" if book is not None else ""
    brings = ", ".join(entry.keys) or "none"
    out.print(f"edited lore {entry.locator} ({entry.tokens} tokens){owner}")
    out.print(f"  keys: {printable(brings)}")
    out.print(f"  pattern: {printable(entry.pattern.pattern) if entry.pattern else 'none'}")
    out.print(f"  priority: {entry.priority}")
    out.print(f"  text: {printable(entry.text)}")


@lore.command()
@click.argument("entry_id", metavar="ID", type=int)
@click.pass_obj
def remove(settings: Settings, entry_id: int) -> None:
    """Remove lore entry ID."""
    with wired(settings) as wiring:
        if not wiring.lore.remove(entry_id):
            fail(f"no lore entry {entry_id} (see `arena knowledge lore list`)")
    out.print(f"removed lore entry {entry_id}")
