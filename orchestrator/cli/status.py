"""``arena status``, ``arena check`` and ``arena prune``: how the installation is doing, and
keeping its storage in bounds.

What they report is gathered in :mod:`orchestrator.status.survey` and
:mod:`orchestrator.cli.checks`, imported when a command runs (so that ``arena --help`` stays
quick); this module only prints it.
"""

from __future__ import annotations

import asyncio
import sys
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import click
from rich.markup import escape
from rich.table import Table

from orchestrator.cli.output import err, json_text, out
from orchestrator.settings import Settings

if TYPE_CHECKING:  # imported when a command runs: `arena --help` stays quick
    from orchestrator.status.report import Heartbeat, Status, Storage, Streams

__all__ = ["check", "prune", "status"]


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_obj
def status(settings: Settings, as_json: bool) -> None:
    """Show progress and size: streams, pending and dead-letter counts, groups, agents with
    their last heartbeat, workers, background jobs, database and folder sizes.

    Exits 1 when something is stuck longer than ARENA_STUCK_AFTER_S: a message in hand or
    waiting unread, or background jobs queued with no live worker (for monitors).
    """
    from orchestrator.status import survey

    report = asyncio.run(survey.status(settings))
    if as_json:
        out.print(json_text(report.as_dict(), indent=2))
    else:
        _print_status(report)
    if report.stuck:
        sys.exit(1)


def _print_status(report: Status) -> None:
    s = report.streams
    out.print(
        f"inbox: {s.inbox_length} entries, {s.pending} pending, lag {s.lag}, "
        f"{s.dead_letters} dead letters"
    )
    out.print(
        "memory: "
        f"{s.totals.get('memory_saved', 0)} saved, {s.totals.get('memory_rejected', 0)} "
        f"rejected by the gate, {s.totals.get('markers_invalid', 0)} invalid markers dropped"
    )
    table = Table("group", "messages", "outbox", "last message")
    for g in report.groups:
        table.add_row(g.group, str(g.messages), str(g.outbox_length), g.last_at or "")
    out.print(table)
    names = [report.agents_error] if report.agents_error else [a.id for a in report.agents]
    out.print("agents: " + ", ".join(names))
    for agent in report.agents:
        out.print(f"  {agent.id}: {_heartbeat_line(agent.heartbeat)}", markup=False)
    out.print(f"workers: {len(report.workers)}")
    for w in report.workers:
        out.print(f"  {w.name} {w.state} (last heartbeat {w.last_heartbeat})")
    j = report.jobs
    out.print(
        f"jobs: {j.queued} queued, {j.running} running, {j.retrying} waiting to be "
        f"retried, {j.failed} failed"
    )
    out.print(_storage_line(report.storage), markup=False)
    _print_daemons(s)
    for problem in report.stuck:
        err.print(f"[bold red]stuck:[/] {escape(problem)}", markup=True)


def _print_daemons(streams: Streams) -> None:
    """Live daemons, the router, and what each holds and has in hand."""
    held: dict[str, list[str]] = {}
    for part in streams.partitions:
        if part.owner:
            held.setdefault(part.owner, []).append(str(part.partition))
    unowned = [str(p.partition) for p in streams.partitions if not p.owner]
    out.print(
        f"daemons alive: {', '.join(streams.daemons) or 'none'}; "
        f"router: {streams.router or 'none'}"
        + (f"; partitions with no owner: {','.join(unowned)}" if unowned else ""),
        markup=False,
    )
    consumers = {c.name: c for c in streams.consumers}
    for name in sorted(set(streams.daemons) | set(consumers) | set(held)):
        line = f"  {name}: partitions {','.join(held.get(name, [])) or 'none'}"
        if name in consumers:
            c = consumers[name]
            line += f", {c.pending} in hand, last read {c.idle_ms // 1000}s ago"
        if name not in streams.daemons:
            line += " (not alive)"
        out.print(line, markup=False)


def _heartbeat_line(beat: Heartbeat) -> str:
    ok, failed, edit = beat.last_ok, beat.last_failed, beat.last_hand_edit
    line = "no heartbeat yet"
    if ok is not None:
        line = f"last heartbeat {ok.at} ({ok.status}, {ok.trigger})"
    if beat.memory_md_version is not None:
        line += f"; MEMORY.md version {beat.memory_md_version}"
    if failed is not None:
        line += f"; failed since: {failed.at} ({failed.status}: {failed.reason})"
    if edit is not None:
        line += f"; {_HAND_EDIT_OUTCOMES.get(edit.status, edit.status)}"
        line += f" {edit.at}" + (f" (version {edit.version})" if edit.version else "")
        line += f": {edit.reason}" if edit.reason else ""
    return line


_HAND_EDIT_OUTCOMES = {
    "written": "hand edit saved",
    "rejected": "hand edit refused",
    "conflict": "hand edit conflicted",
}


def _size(n: int | None) -> str:
    if n is None:
        return "?"
    if n < 1024:
        return f"{n} B"
    value = n / 1024
    for unit in ("KB", "MB"):
        if value < 1024:
            return f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GB"


def _storage_line(storage: Storage) -> str:
    memories = storage.memories
    archived = memories.superseded + memories.archived
    db = storage.database
    return (
        f"storage: database {_size(db.bytes)} ({db.dialect}), "
        f"{storage.messages} messages, {memories.total} memories ({archived} superseded "
        f"or archived), workspaces {_size(storage.workspaces_bytes)}, "
        f"data {_size(storage.data_bytes)}"
    )


@click.command()
@click.pass_obj
def check(settings: Settings) -> None:
    """Check settings, agent files, templates, database, Redis and MQTT; exit 0 or 1."""
    from orchestrator.cli import checks

    results = asyncio.run(checks.run_checks(settings))
    for r in results:
        mark = "[green]ok[/]  " if r.ok else "[red]FAIL[/]"
        out.print(f"{mark} {r.name:<10}", markup=True, end="")
        out.print(r.detail, markup=False)
    if not all(r.ok for r in results):
        sys.exit(1)


@click.command()
@click.option("--dry-run", is_flag=True, help="Only count what would be deleted.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_obj
def prune(settings: Settings, dry_run: bool, as_json: bool) -> None:
    """Delete chat history and archived memories older than the retention settings.

    ARENA_HISTORY_RETENTION_DAYS: a group's messages older than this are deleted once its
    rolling summary covers them. ARENA_ARCHIVE_RETENTION_DAYS: superseded and forgotten
    memories are deleted this long after they were superseded or forgotten; `arena memory
    restore` cannot bring them back afterwards. 0 (the default) keeps everything. MEMORY.md
    versions and daily logs are never deleted. The daemon runs this daily when a limit is set.
    """
    from orchestrator.background.retention import prune as run_prune
    from orchestrator.cli.resources import database

    with database(settings) as engine:
        report = run_prune(engine, settings, datetime.now(UTC), dry_run=dry_run)
    if as_json:
        out.print(json_text(report.as_dict()))
        return
    verb = "would delete" if dry_run else "deleted"
    if report.history_before is None:
        out.print("history: kept forever (ARENA_HISTORY_RETENTION_DAYS=0)")
    else:
        out.print(
            f"history: {verb} {sum(report.messages.values())} messages from before "
            f"{report.history_before.isoformat()}",
            markup=False,
        )
        for group, n in sorted(report.messages.items()):
            out.print(f"  {group}: {n}", markup=False)
        for group, n in sorted(report.kept_unsummarised.items()):
            out.print(f"  {group}: {n} old messages kept, not yet summarised", markup=False)
    if report.archive_before is None:
        out.print("archived memories: kept forever (ARENA_ARCHIVE_RETENTION_DAYS=0)")
    else:
        out.print(
            f"archived memories: {verb} {report.memories} superseded or forgotten before "
            f"{report.archive_before.isoformat()}",
            markup=False,
        )
