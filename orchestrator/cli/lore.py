"""``arena knowledge lore add|list|remove``: lorebook entries, short facts given to an agent
whenever their keys (or pattern) appear in the group's last few messages."""

from __future__ import annotations

import sys
from datetime import UTC, datetime

import click
from rich.table import Table

from orchestrator.cli.output import fail, json_text, out, printable
from orchestrator.cli.resources import wired
from orchestrator.core.wire import validate_group
from orchestrator.memory.knowledge.lore import NewLore, check_new
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
    rows = [
        {
            "id": e.id,
            "book": e.book,
            "keys": list(e.keys),
            "pattern": e.pattern.pattern if e.pattern else None,
            "priority": e.priority,
            "tokens": e.tokens,
            "text": e.text,
        }
        for e in entries
    ]
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


@lore.command()
@click.argument("entry_id", metavar="ID", type=int)
@click.pass_obj
def remove(settings: Settings, entry_id: int) -> None:
    """Remove lore entry ID."""
    with wired(settings) as wiring:
        if not wiring.lore.remove(entry_id):
            fail(f"no lore entry {entry_id} (see `arena knowledge lore list`)")
    out.print(f"removed lore entry {entry_id}")
