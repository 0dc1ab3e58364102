"""``arena runs``, ``arena run show`` and ``arena run cancel``: the Claude Code runs the agents
started, what each did and changed, and stopping one.

``runs`` and ``run show`` read the database only (the warm command server answers them);
``--json`` prints what ``GET /api/runs`` and ``GET /api/runs/{id}`` answer. Imported only when
it runs (``ArenaGroup.lazy``).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import click
from rich import box
from rich.table import Table
from rich.text import Text

from orchestrator.cli.output import fail, json_text, out
from orchestrator.cli.resources import wired
from orchestrator.core.wire import validate_group
from orchestrator.memory.approvals import ApprovalRecord
from orchestrator.memory.conversation.run_meta import RunMeta, run_meta
from orchestrator.memory.runs import RunRecord, StoredStep
from orchestrator.runtime.asked import approvals_json, asked
from orchestrator.runtime.run_cancel import cancel_run
from orchestrator.settings import Settings

__all__ = ["run", "runs"]

# `arena run show`: the widest label ("finished:") and a space.
_LABEL = 10


def _span(delta: timedelta) -> str:
    """A length of time as people read it: ``42s``, ``3m 05s``, ``2h 07m``, ``3d 4h``."""
    seconds = max(0, int(delta.total_seconds()))
    if seconds < 60:
        return f"{seconds}s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m {seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours}h {minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{days}d {hours}h"


def _age(delta: timedelta) -> str:
    """How long ago, in its largest unit: ``42s``, ``3m``, ``2h``, ``5d``."""
    seconds = max(0, int(delta.total_seconds()))
    for unit, size in (("d", 86_400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def _duration(run: RunRecord, now: datetime) -> str:
    """How long it ran (so far, while it runs); ``-`` when it never started."""
    if run.started_at is None:
        return "-"
    return _span((run.finished_at or now) - run.started_at)


def _cost(run: RunRecord) -> str:
    cost = run.outcome.get("cost_usd")
    return f"${cost:.4f}" if isinstance(cost, (int, float)) else "-"


def _files(run: RunRecord) -> str:
    files = run.outcome.get("files")
    return str(len(files)) if isinstance(files, list) else "-"


def _status(run: RunRecord) -> str:
    asked = run.cancel_requested and not run.ended
    return run.status + (" (cancel asked)" if asked else "")


def _table(found: list[RunRecord], now: datetime) -> Table:
    """The runs in 80 columns: each run's id whole (to copy into `arena run show`), its agent
    and group under it."""
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("run / agent in group", overflow="fold", ratio=1)
    table.add_column("status", overflow="fold")
    for header in ("age", "took", "files", "cost"):
        table.add_column(header, no_wrap=True, justify="right")
    for r in found:
        cell = Text(r.id)
        cell.append(f"\n{r.agent} in {r.group}", style="dim")
        status = Text(r.status)
        if r.cancel_requested and not r.ended:
            status.append("\ncancel asked", style="yellow")
        table.add_row(
            cell, status, _age(now - r.created_at), _duration(r, now), _files(r), _cost(r)
        )
    return table


@click.command()
@click.argument("group", required=False)
@click.option(
    "--limit",
    default=20,
    show_default=True,
    type=click.IntRange(1, 1000),
    help="At most this many runs.",
)
@click.option("--json", "as_json", is_flag=True, help="A JSON list ([] when there are none).")
@click.option("-q", "--ids", is_flag=True, help="Only the run ids, newest first, one a line.")
@click.pass_obj
def runs(settings: Settings, group: str | None, limit: int, as_json: bool, ids: bool) -> None:
    """List the agents' Claude Code runs, newest first.

    GROUP: only that group's runs. Each with its agent, group and status (queued, running,
    waiting for a decision, done, failed, cancelled, stalled, timed_out, crashed or lost), how
    long ago it was asked
    for, how long it ran, how many files it changed and what it cost. `arena run show ID`
    tells one run in full.
    """
    if group is not None:
        validate_group(group)
    with wired(settings) as wiring:
        found = wiring.runs.recent(group, limit)
    if ids:
        for record in found:
            out.print(record.id, markup=False)
        return
    if as_json:
        out.print(json_text([r.as_dict() for r in found], indent=2))
        return
    if not found:
        out.print(f"no runs in group {group} yet" if group else "no runs yet")
        return
    out.print(_table(found, datetime.now(UTC)))


@click.group()
def run() -> None:
    """Show one Claude Code run in full, stop it, or revert its change.

    A run is an agent's turn done by Claude Code on the shared project; its ID is the id its
    reply takes (MESSAGE:HOP:AGENT), as `arena runs` lists it and the agent's reply ends with it.
    """


def _get(
    settings: Settings, run_id: str
) -> tuple[RunRecord, list[StoredStep], list[ApprovalRecord]]:
    """The run, its steps and its requests for approval, oldest first."""
    with wired(settings) as wiring:
        found = wiring.runs.get(run_id)
        if found is None:
            fail(f"no run {run_id}")
        asked_for = wiring.approvals.listed(run_id=run_id, limit=1000)
        return found, wiring.runs.steps(run_id), asked_for[::-1]


def _detail_json(
    found: RunRecord, steps: list[StoredStep], asked_for: list[ApprovalRecord]
) -> dict[str, Any]:
    """A run with its steps (as ``GET /api/runs/{id}`` gives them) and its requests."""
    return {
        **found.as_dict(),
        "steps": [s.as_dict() for s in steps],
        "approvals": approvals_json(asked_for),
    }


@run.command()
@click.argument("run_id", metavar="ID")
@click.option("--json", "as_json", is_flag=True, help="The run and its steps as JSON.")
@click.pass_obj
def show(settings: Settings, run_id: str, as_json: bool) -> None:
    """Show run ID: why it ran, how it ended, each step, its requests for approval (who
    decided what, when, with which note), what it changed in the project (files, commit,
    merged or kept on a branch and why), its turns, time, cost and tokens."""
    found, steps, asked_for = _get(settings, run_id)
    if as_json:
        out.print(json_text(_detail_json(found, steps, asked_for), indent=2))
        return
    now = datetime.now(UTC)
    _head(found, settings, now)
    out.print("steps:" if steps else "steps:    none")
    for step in steps:
        mark = "!" if step.is_error else " "
        stamp = step.at.astimezone(settings.zone).strftime("%H:%M:%S")
        out.print(f"  {step.n:>3} {stamp} {mark} {step.line}", markup=False)
    _approvals(asked_for, settings)
    _changes(found)
    if found.text.strip():
        out.print("said:", markup=False)
        for line in found.text.strip().splitlines():
            out.print(f"  {line}", markup=False)


def _approvals(asked_for: list[ApprovalRecord], settings: Settings) -> None:
    """The run's requests for approval, oldest first: the audit trail of who allowed what."""
    if not asked_for:
        return
    out.print("approvals:", markup=False)
    for r in asked_for:
        out.print(f"  {r.id} {r.state:<9} {asked(r)}", markup=False)
        lines = [f"asked {_when(r.created_at, settings)}"]
        if r.decided_at is not None:
            who = f" by {r.decided_by}" if r.decided_by else ""
            lines.append(f"{r.state}{who} {_when(r.decided_at, settings)}")
        if r.note:
            lines.append(f"note: {r.note}")
        if r.always:
            lines.append(f"always: {r.pattern} on {r.agent}'s allow-list")
        for line in lines:
            out.print(f"                {line}", markup=False)


def _when(at: datetime | None, settings: Settings) -> str:
    return at.astimezone(settings.zone).strftime("%Y-%m-%d %H:%M:%S %Z") if at else ""


def _head(found: RunRecord, settings: Settings, now: datetime) -> None:
    """The run's lines above its steps: who, why, when, how it ended, what it cost."""
    meta = run_meta(found)
    rows = [
        ("run", found.id),
        ("group", found.group),
        ("agent", found.agent),
        ("status", _status(found)),
        ("why", found.why),
        ("answers", f"message {found.trigger_id} (hop {found.hop})"),
        ("asked", f"{_when(found.created_at, settings)} ({_span(now - found.created_at)} ago)"),
        ("started", _when(found.started_at, settings)),
        ("finished", _when(found.finished_at, settings)),
        ("took", _took(found, now)),
        ("turns", str(meta.turns) if found.outcome else ""),
        ("cost", "" if meta.cost_usd is None else _cost(found)),
        ("tokens", _tokens(found.outcome.get("usage"))),
        ("problem", found.problem or ""),
    ]
    for label, value in rows:
        if value:
            out.print(f"{label + ':':<{_LABEL}}{value}", markup=False)


def _took(found: RunRecord, now: datetime) -> str:
    if found.started_at is None:
        return ""
    return _duration(found, now) + ("" if found.ended else " so far")


def _tokens(usage: Any) -> str:
    if not isinstance(usage, dict):
        return ""

    def count(key: str) -> int:
        value = usage.get(key)
        return value if isinstance(value, int) else 0

    cached = count("cache_read_tokens")
    written = count("cache_creation_tokens")
    extra = f" (+{cached:,} cache read, +{written:,} cache written)" if cached or written else ""
    return f"{count('input_tokens'):,} in{extra}, {count('output_tokens'):,} out"


def _where(meta: RunMeta) -> str:
    if meta.merged:
        return "merged into the project"
    return f"kept on branch {meta.branch}" if meta.branch else "not merged"


def _changes(found: RunRecord) -> None:
    """What the run changed in the project: its commit, where it went and why, the stat."""
    if not found.ended:
        return
    meta = run_meta(found)
    if meta.commit:
        why = f" ({meta.reason})" if meta.reason else ""
        out.print(f"changed:  commit {meta.commit[:12]}, {_where(meta)}{why}", markup=False)
        for line in meta.stat.splitlines():
            out.print(f" {line.rstrip()}", markup=False)
    elif meta.reason:
        out.print(f"changed:  nothing committed ({meta.reason})", markup=False)
    elif "files" in found.outcome:
        out.print("changed:  no file", markup=False)
    denials = found.outcome.get("denials")
    if isinstance(denials, list) and denials:
        out.print(f"denied:   {', '.join(str(d) for d in denials)}", markup=False)


@run.command()
@click.argument("run_id", metavar="ID")
@click.pass_obj
def cancel(settings: Settings, run_id: str) -> None:
    """Ask run ID to stop: a queued run will not start, a running one stops within seconds;
    exit 1 when it had already ended."""
    with wired(settings) as wiring:
        done = cancel_run(wiring.runs, run_id)
    if done is None:
        fail(f"no run {run_id}")
    if not done.asked:
        fail(done.detail)
    out.print(done.detail, markup=False)


@run.command()
@click.argument("run_id", metavar="ID")
@click.pass_obj
def revert(settings: Settings, run_id: str) -> None:
    """Revert what run ID brought into the project: a new commit by the arena undoes it
    (refused, touching nothing, where your uncommitted changes are in the same files)."""
    from orchestrator.adapters.project import Project

    with wired(settings) as wiring:
        found = wiring.runs.get(run_id)
    if found is None:
        fail(f"no run {run_id}")
    meta = run_meta(found)
    target = found.outcome.get("merged_as") or meta.commit
    if not meta.merged or not isinstance(target, str):
        where = f"it is kept on branch {meta.branch}" if meta.branch else "it changed nothing"
        fail(f"run {run_id} brought nothing into the project: {where}")
    made = Project(settings.project).revert(target)
    out.print(f"run {run_id} reverted by commit {made[:12]}", markup=False)
