"""``arena memory``: search, list, show, forget, restore, stats and export session memory."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click
from rich.table import Table

from orchestrator.cli.corrections import COMMANDS
from orchestrator.cli.output import json_text, out
from orchestrator.cli.resources import wired
from orchestrator.core.wire import validate_group
from orchestrator.errors import ValidationError
from orchestrator.files import write_atomic
from orchestrator.memory.audit import pinned_ids
from orchestrator.memory.conversation.store import HistoryStore
from orchestrator.memory.recall.recaller import text_relevance
from orchestrator.memory.schema import MEMORY_TYPES, PERSONAL_TYPES
from orchestrator.memory.session.records import STATUSES, WRITERS, MemoryRecord
from orchestrator.memory.session.store import SessionMemory
from orchestrator.settings import Settings

__all__ = ["memory"]

# Session and personal memories share the store, so both kinds of type can be listed.
TYPES = tuple(dict.fromkeys((*MEMORY_TYPES, *PERSONAL_TYPES)))


@contextmanager
def _stores(settings: Settings) -> Iterator[tuple[SessionMemory, HistoryStore]]:
    with wired(settings) as wiring:
        yield wiring.session, wiring.history


def _row(record: MemoryRecord) -> dict[str, Any]:
    return record.as_dict()


def _hit_rows(query: str, hits: list[tuple[MemoryRecord, float]]) -> list[dict[str, Any]]:
    """Search hits, best first, with their rank, recall's relevance (0..1, what the relevance
    floor compares) and the raw full-text score (BM25: comparable within one search only)."""
    return [
        _row(record) | {"rank": n, "relevance": round(relevance, 3), "score": score}
        for n, ((record, score), relevance) in enumerate(
            zip(hits, text_relevance(query, hits), strict=True), 1
        )
    ]


def _table(rows: list[dict[str, Any]], with_score: bool = False) -> Table:
    table = Table("rank", "relevance") if with_score else Table()
    for header in ("id", "type", "group", "agent", "status", "content"):
        table.add_column(header)
    for r in rows:
        cells = [
            str(r["id"]),
            r["type"],
            r["group_id"] or r["scope_id"],
            r["agent"],
            r["status"],
            r["content"],
        ]
        if with_score:
            cells[:0] = [str(r["rank"]), f"{r['relevance']:.2f}"]
        table.add_row(*cells)
    return table


def _emit(rows: list[dict[str, Any]], as_json: bool, with_score: bool = False) -> None:
    if as_json:
        for r in rows:
            out.print(json_text(r))
    elif rows:
        out.print(_table(rows, with_score))
    else:
        out.print("no memories found")


@click.group()
def memory() -> None:
    """Inspect and manage the groups' session memory."""


@memory.command()
@click.argument("query")
@click.option("--group", default=None, help="Only this group's memory.")
@click.option("--agent", default=None, help="Only entries this agent wrote.")
@click.option("--limit", default=10, show_default=True, type=click.IntRange(1, 1000))
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
@click.pass_obj
def search(
    settings: Settings,
    query: str,
    group: str | None,
    agent: str | None,
    limit: int,
    as_json: bool,
) -> None:
    """Full-text search of active memories, best first."""
    with _stores(settings) as (session, _):
        scopes = [("session", validate_group(group))] if group is not None else session.scopes()
        hits = session.search(query, scopes=scopes, limit=limit * 4 if agent else limit)
    rows = _hit_rows(query, [(r, s) for r, s in hits if agent is None or r.agent == agent][:limit])
    _emit(rows, as_json, with_score=True)


@memory.command(name="list")
@click.option("--group", default=None, help="Only this group's memory.")
@click.option("--type", "type_", default=None, type=click.Choice(TYPES), help="Only this type.")
@click.option(
    "--status", default="active", show_default=True, type=click.Choice([*STATUSES, "any"])
)
@click.option("--agent", default=None, help="Only entries this agent wrote.")
@click.option(
    "--written-by", default=None, type=click.Choice(WRITERS), help="Only entries written so."
)
@click.option("--limit", default=100, show_default=True, type=click.IntRange(1, 100_000))
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
@click.pass_obj
def list_(
    settings: Settings,
    group: str | None,
    type_: str | None,
    status: str,
    agent: str | None,
    written_by: str | None,
    limit: int,
    as_json: bool,
) -> None:
    """List memories, newest first."""
    with _stores(settings) as (session, _):
        records = session.list(
            scope="session" if group else None,
            scope_id=validate_group(group) if group else None,
            type=type_,
            status=None if status == "any" else status,
            agent=agent,
            written_by=written_by,
            limit=limit,
        )
    _emit([_row(r) for r in records], as_json)


def _get(session: SessionMemory, entry_id: int) -> MemoryRecord:
    record = session.get(entry_id)
    if record is None:
        raise ValidationError("id", f"no memory with id {entry_id}")
    return record


# `arena memory show`: the widest label ("superseded_by:") and a space.
_LABEL = 15


def _shown(value: Any) -> str:
    """A field as `arena memory show` prints it: nothing for a field that is unset."""
    if value is None or value == []:
        return ""
    if isinstance(value, list):
        return ", ".join(str(item) for item in value)
    return str(value)


@memory.command()
@click.argument("entry_id", metavar="ID", type=int)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_obj
def show(settings: Settings, entry_id: int, as_json: bool) -> None:
    """Show one memory, the message it cites, and the entries it replaced or that replaced
    it."""
    with wired(settings) as wiring:
        session, history = wiring.session, wiring.history
        record = _get(session, entry_id)
        cited = history.get(record.citation.ref) if record.citation else None
        trigger_id = str(record.extra.get("trigger") or "")
        trigger = history.get(trigger_id) if trigger_id else None
        with wiring.engine.connect() as conn:
            pinned = bool(pinned_ids(conn, [entry_id]))
    data = _row(record) | {"pinned": pinned}
    data["cited_message"] = cited.as_dict() if cited else None
    data["answering"] = trigger.as_dict() if trigger else None
    if as_json:
        out.print(json_text(data, indent=2))
        return
    for name in (
        "id",
        "type",
        "status",
        "scope",
        "scope_id",
        "agent",
        "confidence",
        "count",
        "key",
        "tags",
        "written_by",
        "pinned",
        "created_at",
        "last_used_at",
        "supersedes",
        "superseded_by",
    ):
        shown = _shown(data[name])
        if shown:
            out.print(f"{name + ':':<{_LABEL}}{shown}", markup=False)
    out.print(f"{'content:':<{_LABEL}}{record.content}", markup=False)
    if record.citation:
        c = record.citation
        out.print(f"{'citation:':<{_LABEL}}{c.kind} {c.ref} ({c.locator}, {c.scope})", markup=False)
    if cited:
        m = cited.message
        out.print(f"\ncited message {m.id} from {m.sender}:\n  {m.text}", markup=False)
    if trigger:
        m = trigger.message
        out.print(f"\nin answer to {m.id} from {m.sender}:\n  {m.text}", markup=False)


@memory.command()
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_obj
def stats(settings: Settings, as_json: bool) -> None:
    """Counts of memories by scope, type and status."""
    with _stores(settings) as (session, _):
        numbers = session.stats()
    if as_json:
        out.print(json_text(numbers, indent=2))
        return
    out.print(f"total: {numbers['total']}")
    for name in ("by_scope", "by_type", "by_status"):
        parts = ", ".join(f"{k} {v}" for k, v in numbers[name].items()) or "none"
        out.print(f"{name.removeprefix('by_')}: {parts}", markup=False)


@memory.command()
@click.argument("group")
@click.option(
    "--out",
    "target",
    type=click.Path(path_type=Path),
    default=None,
    help="Where to write (default: data/memory/session_GROUP.json).",
)
@click.pass_obj
def export(settings: Settings, group: str, target: Path | None) -> None:
    """Write every session memory of GROUP (any status) as JSON."""
    validate_group(group)
    with _stores(settings) as (session, history):
        entries = session.export(group)
        unknown = not entries and not history.recent(group, 1)
    if unknown:
        raise ValidationError("group", f"no group {group!r}: it has no messages and no memories")
    path = target or settings.data_dir / "memory" / f"session_{group}.json"
    write_atomic(path, json.dumps(entries, ensure_ascii=False, indent=2) + "\n")
    out.print(f"{len(entries)} memories of {group} written to {path}", markup=False)


for _command in COMMANDS:
    memory.add_command(_command)
