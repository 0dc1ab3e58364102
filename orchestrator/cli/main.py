"""The ``arena`` command. Each subcommand parses, loads ``Settings``, calls one function and
returns an exit code; errors are one clear line on stderr, never a traceback.

The daemon's modules (the model SDK above all) take seconds to import, so each command
imports what it uses when it runs, and ``arena --help`` lists the commands of
:attr:`ArenaGroup.lazy` without importing their modules: ``--help`` and ``arena post`` start
quickly (``tests/test_cli_startup.py`` keeps the heavy libraries out of both). What the
commands print goes through :mod:`orchestrator.cli.output`.
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import re
import sys
from collections.abc import Callable
from typing import Any, ClassVar, TypeVar

import click
from rich.markup import escape
from rich.table import Table

from orchestrator.cli.output import err, fail, json_text, out
from orchestrator.core.wire import DEFAULT_SENDER, Outbound, validate_group
from orchestrator.errors import OrchestratorError, ValidationError
from orchestrator.logs import configure
from orchestrator.settings import Settings, load_settings

__all__ = ["main"]

F = TypeVar("F", bound=Callable[..., Any])

# A Redis stream entry id, as `arena dead-letters` lists them.
_ENTRY_ID = re.compile(r"[0-9]{1,20}-[0-9]{1,20}")


def handles_errors(func: F) -> F:
    """Turn our errors into one line on stderr and exit code 1."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except OrchestratorError as exc:
            fail(str(exc))
        except KeyboardInterrupt:
            sys.exit(130)

    return wrapper  # type: ignore[return-value]


def _settings(ctx: click.Context) -> Settings:
    settings: Settings = ctx.obj
    return settings


class ArenaGroup(click.Group):
    """The root command: our errors become one line on stderr. The commands in :attr:`lazy`
    are imported only when they run; ``arena --help`` lists them from their summary here
    (the tests check that each equals the command's own)."""

    lazy: ClassVar[dict[str, tuple[str, str]]] = {
        "memory": ("orchestrator.cli.memory", "Inspect and manage the groups' session memory."),
        "context": (
            "orchestrator.cli.context",
            "Show the context AGENT's next turn in GROUP would get: each layer with its "
            "tokens, the budget decisions and the citations.",
        ),
        "jobs": (
            "orchestrator.cli.jobs",
            "List the daemon's schedule and recent background jobs with their outcome.",
        ),
        "heartbeat": (
            "orchestrator.cli.jobs",
            "Distil AGENT's daily log into a new MEMORY.md now (a background job).",
        ),
        "summarize": (
            "orchestrator.cli.jobs",
            "Update GROUP's rolling summary up to its latest message now (a background job).",
        ),
        "growth": (
            "orchestrator.cli.growth",
            "Show how AGENT's MEMORY.md grew: every version and every attempt that wrote none.",
        ),
        "logs": ("orchestrator.cli.growth", "Print AGENT's daily log."),
        "summary": ("orchestrator.cli.growth", "Print GROUP's rolling summary."),
        "import": (
            "orchestrator.cli.imports",
            "Bring an existing conversation into GROUP from FILE (JSON Lines; '-' reads stdin).",
        ),
    }

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted([*super().list_commands(ctx), *self.lazy])

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.lazy:
            module = importlib.import_module(self.lazy[cmd_name][0])
            command: click.Command = getattr(module, cmd_name)
            return command
        return super().get_command(ctx, cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The command list, without importing the lazy commands."""
        names = self.list_commands(ctx)
        limit = formatter.width - 6 - max(len(name) for name in names)
        rows: list[tuple[str, str]] = []
        for name in names:
            if name in self.lazy:
                summary = click.Command(name, help=self.lazy[name][1])
                rows.append((name, summary.get_short_help_str(limit)))
            elif (command := super().get_command(ctx, name)) is not None and not command.hidden:
                rows.append((name, command.get_short_help_str(limit)))
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except OrchestratorError as exc:
            fail(str(exc))


@click.group(cls=ArenaGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="agent-arena", prog_name="arena")
@click.pass_context
def main(ctx: click.Context) -> None:
    """Agent Arena: one person and a team of AI role agents in group chats.

    Start everything with `arena up`; talk to it with `arena post`. Settings come from the
    environment (REDIS_URL, MQTT_URL, DATABASE_URL, ANTHROPIC_API_KEY, ARENA_*): see the
    README. With nothing set, Redis and MQTT run embedded and data lives in ./data.
    """
    try:
        ctx.obj = load_settings()
    except OrchestratorError as exc:
        fail(str(exc))


@main.command()
@click.pass_context
@handles_errors
def up(ctx: click.Context) -> None:
    """Run the daemon, its workers and (when not configured) embedded Redis and MQTT.

    Stops cleanly on Ctrl-C or SIGTERM: intake stops, messages in hand are finished.
    """
    from orchestrator.cli import supervisor

    settings = _settings(ctx)
    configure(settings.log_level)
    for what, where in supervisor.describe(settings):
        out.print(f"arena: {what:<9}{where}")

    async def _up() -> None:
        stop = asyncio.Event()
        supervisor.stop_on_signals(stop)
        await supervisor.serve(settings, stop, say=lambda line: out.print(line))

    asyncio.run(_up())
    out.print("arena: stopped")


@main.command(name="daemon")
@click.pass_context
@handles_errors
def daemon_command(ctx: click.Context) -> None:
    """Run only the daemon, against configured services (for scale-out)."""
    from orchestrator.cli import supervisor
    from orchestrator.runtime import daemon

    settings = _settings(ctx)
    configure(settings.log_level)

    async def _run() -> None:
        stop = asyncio.Event()
        supervisor.stop_on_signals(stop)
        await daemon.run(settings, stop, ready=lambda: out.print("arena: ready"))

    asyncio.run(_run())


@main.command()
@click.option("--burst", is_flag=True, help="Work until the queues are empty, then exit.")
@click.pass_context
@handles_errors
def worker(ctx: click.Context, burst: bool) -> None:
    """Run a background worker (RQ) for heartbeat and summary jobs."""
    from orchestrator.adapters.services import ping_redis
    from orchestrator.background.jobs import run_worker

    settings = _settings(ctx)
    configure(settings.log_level)
    asyncio.run(ping_redis(settings.effective_redis_url, timeout_s=5))
    run_worker(settings.effective_redis_url, burst=burst)


def _print_item(item: Outbound) -> None:
    if item.type == "notice":
        out.print(f"! {item.text}", style="yellow")
    else:
        out.print(f"{item.sender}: ", style="bold cyan", end="")
        out.print(item.text)


@main.command()
@click.argument("group")
@click.argument("text")
@click.option("--sender", default=DEFAULT_SENDER, show_default=True, help="Who is speaking.")
@click.option(
    "--wait",
    "wait_s",
    type=float,
    is_flag=False,
    flag_value=60.0,
    default=None,
    metavar="[SECONDS]",
    help="Wait for the replies and print them (default 60 s).",
)
@click.pass_context
@handles_errors
def post(ctx: click.Context, group: str, text: str, sender: str, wait_s: float | None) -> None:
    """Post TEXT to GROUP and print the message id ('-' reads TEXT from stdin)."""
    settings = _settings(ctx)
    if text == "-":
        text = sys.stdin.read()
    from orchestrator.client import ArenaClient

    with ArenaClient.from_settings(settings) as client:
        after = client.last_reply_id(group) if wait_s is not None else "$"
        message_id = client.post(group, text, sender)
        out.print(message_id)
        if wait_s is None:
            return
        try:
            for item in client.replies(group, message_id, wait_s, after=after):
                _print_item(item)
        except TimeoutError:
            fail(f"no complete answer within {wait_s:g}s; is the daemon running? (`arena status`)")


@main.command()
@click.argument("group")
@click.option("--limit", default=20, show_default=True, type=click.IntRange(1, 100_000))
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
@click.pass_context
@handles_errors
def history(ctx: click.Context, group: str, limit: int, as_json: bool) -> None:
    """Print GROUP's latest messages, oldest first."""
    settings = _settings(ctx)
    from orchestrator.memory.conversation.store import HistoryStore
    from orchestrator.memory.db import make_engine

    validate_group(group)
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    engine = make_engine(settings.effective_database_url)
    try:
        messages = HistoryStore(engine).recent(group, limit)
    finally:
        engine.dispose()
    if as_json:
        for stored in messages:
            out.print(json_text(stored.as_dict()))
        return
    if not messages:
        err.print(f"arena: no messages in group {group!r} yet")
        return
    for stored in messages:
        m = stored.message
        stamp = m.created_at.astimezone(settings.zone).strftime("%Y-%m-%d %H:%M:%S")
        who = f"[dim]{stamp}[/] [bold]{escape(m.sender)}[/] ({escape(m.kind.value)}): "
        out.print(who, markup=True, end="")
        out.print(m.text)


@main.command()
@click.argument("group")
@click.pass_context
@handles_errors
def tail(ctx: click.Context, group: str) -> None:
    """Follow GROUP's replies as they are published (Ctrl-C to stop)."""
    settings = _settings(ctx)
    validate_group(group)
    from orchestrator.client import ArenaClient

    with ArenaClient.from_settings(settings) as client:
        client.ping()
        after = client.last_reply_id(group)
        err.print(f"arena: following group {group}; Ctrl-C to stop")
        try:
            for item in client.follow(group, after=after):
                if item is not None and item.type != "done":
                    _print_item(item)
        except KeyboardInterrupt:
            return


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_context
@handles_errors
def status(ctx: click.Context, as_json: bool) -> None:
    """Show progress and size: streams, pending and dead-letter counts, groups, agents with
    their last heartbeat, workers, background jobs, database and folder sizes.

    Exits 1 when something is stuck longer than ARENA_STUCK_AFTER_S: a message in hand or
    waiting unread, or background jobs queued with no live worker (for monitors).
    """
    from orchestrator.cli import checks

    report = asyncio.run(checks.status(_settings(ctx)))
    if as_json:
        out.print(json_text(report, indent=2))
        if report["stuck"]:
            sys.exit(1)
        return
    s = report["streams"]
    out.print(
        f"inbox: {s['inbox_length']} entries, {s['pending']} pending, lag {s['lag']}, "
        f"{s['dead_letters']} dead letters"
    )
    totals = s.get("totals") or {}
    out.print(
        "memory: "
        f"{totals.get('memory_saved', 0)} saved, {totals.get('memory_rejected', 0)} rejected "
        f"by the gate, {totals.get('markers_invalid', 0)} invalid markers dropped"
    )
    table = Table("group", "messages", "outbox", "last message")
    for g in report["groups"]:
        table.add_row(g["group"], str(g["messages"]), str(g["outbox_length"]), g["last_at"] or "")
    out.print(table)
    out.print("agents: " + ", ".join(a.get("id", a.get("error", "?")) for a in report["agents"]))
    for agent in report["agents"]:
        if "heartbeat" in agent:
            out.print(f"  {agent['id']}: {_heartbeat_line(agent['heartbeat'])}", markup=False)
    out.print(f"workers: {len(report['workers'])}")
    for w in report["workers"]:
        out.print(f"  {w['name']} {w['state']} (last heartbeat {w['last_heartbeat']})")
    j = report["jobs"]
    out.print(
        f"jobs: {j['queued']} queued, {j['running']} running, {j['retrying']} waiting to be "
        f"retried, {j['failed']} failed"
    )
    out.print(_storage_line(report["storage"]), markup=False)
    _print_daemons(s)
    for problem in report["stuck"]:
        err.print(f"[bold red]stuck:[/] {escape(problem)}", markup=True)
    if report["stuck"]:
        sys.exit(1)


def _print_daemons(streams: dict[str, Any]) -> None:
    """Live daemons, the router, and what each holds and has in hand."""
    held: dict[str, list[str]] = {}
    for part in streams["partitions"]:
        if part["owner"]:
            held.setdefault(part["owner"], []).append(str(part["partition"]))
    unowned = [str(p["partition"]) for p in streams["partitions"] if not p["owner"]]
    out.print(
        f"daemons alive: {', '.join(streams['daemons']) or 'none'}; "
        f"router: {streams['router'] or 'none'}"
        + (f"; partitions with no owner: {','.join(unowned)}" if unowned else ""),
        markup=False,
    )
    consumers = {c["name"]: c for c in streams["consumers"]}
    for name in sorted(set(streams["daemons"]) | set(consumers) | set(held)):
        line = f"  {name}: partitions {','.join(held.get(name, [])) or 'none'}"
        if name in consumers:
            c = consumers[name]
            line += f", {c['pending']} in hand, last read {c['idle_ms'] // 1000}s ago"
        if name not in streams["daemons"]:
            line += " (not alive)"
        out.print(line, markup=False)


def _heartbeat_line(beat: dict[str, Any]) -> str:
    ok, failed = beat["last_ok"], beat["last_failed"]
    line = "no heartbeat yet"
    if ok is not None:
        line = f"last heartbeat {ok['at']} ({ok['status']}, {ok['trigger']})"
    if beat["memory_md_version"] is not None:
        line += f"; MEMORY.md version {beat['memory_md_version']}"
    if failed is not None:
        line += f"; failed since: {failed['at']} ({failed['status']}: {failed['reason']})"
    return line


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


def _storage_line(storage: dict[str, Any]) -> str:
    memories = storage["memories"]
    archived = memories.get("superseded", 0) + memories.get("archived", 0)
    db = storage["database"]
    return (
        f"storage: database {_size(db['bytes'])} ({db['dialect']}), "
        f"{storage['messages']} messages, {memories['total']} memories ({archived} superseded "
        f"or archived), workspaces {_size(storage['workspaces_bytes'])}, "
        f"data {_size(storage['data_bytes'])}"
    )


@main.command()
@click.option("--dry-run", is_flag=True, help="Only count what would be deleted.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_context
@handles_errors
def prune(ctx: click.Context, dry_run: bool, as_json: bool) -> None:
    """Delete chat history and archived memories older than the retention settings.

    ARENA_HISTORY_RETENTION_DAYS: a group's messages older than this are deleted once its
    rolling summary covers them. ARENA_ARCHIVE_RETENTION_DAYS: superseded and forgotten
    memories are deleted this long after they were superseded or forgotten; `arena memory
    restore` cannot bring them back afterwards. 0 (the default) keeps everything. MEMORY.md
    versions and daily logs are never deleted. The daemon runs this daily when a limit is set.
    """
    from datetime import UTC, datetime

    from orchestrator.background.retention import prune as run_prune
    from orchestrator.memory.db import make_engine

    settings = _settings(ctx)
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    engine = make_engine(settings.effective_database_url)
    try:
        report = run_prune(engine, settings, datetime.now(UTC), dry_run=dry_run).as_dict()
    finally:
        engine.dispose()
    if as_json:
        out.print(json_text(report))
        return
    verb = "would delete" if dry_run else "deleted"
    if report["history_before"] is None:
        out.print("history: kept forever (ARENA_HISTORY_RETENTION_DAYS=0)")
    else:
        out.print(
            f"history: {verb} {report['messages_total']} messages from before "
            f"{report['history_before']}",
            markup=False,
        )
        for group, n in sorted(report["messages"].items()):
            out.print(f"  {group}: {n}", markup=False)
        for group, n in sorted(report["kept_unsummarised"].items()):
            out.print(f"  {group}: {n} old messages kept, not yet summarised", markup=False)
    if report["archive_before"] is None:
        out.print("archived memories: kept forever (ARENA_ARCHIVE_RETENTION_DAYS=0)")
    else:
        out.print(
            f"archived memories: {verb} {report['memories']} superseded or forgotten before "
            f"{report['archive_before']}",
            markup=False,
        )


@main.command()
@click.pass_context
@handles_errors
def check(ctx: click.Context) -> None:
    """Check settings, agent files, templates, database, Redis and MQTT; exit 0 or 1."""
    from orchestrator.cli import checks

    results = asyncio.run(checks.run_checks(_settings(ctx)))
    for r in results:
        mark = "[green]ok[/]  " if r.ok else "[red]FAIL[/]"
        out.print(f"{mark} {r.name:<10}", markup=True, end="")
        out.print(r.detail, markup=False)
    if not all(r.ok for r in results):
        sys.exit(1)


@main.command(name="dead-letters")
@click.option("--limit", default=50, show_default=True, type=click.IntRange(1, 10_000))
@click.option("--json", "as_json", is_flag=True, help="A JSON list ([] when there are none).")
@click.pass_context
@handles_errors
def dead_letters(ctx: click.Context, limit: int, as_json: bool) -> None:
    """List messages that were rejected or could not be answered, with the reason."""
    from orchestrator.client import ArenaClient

    with ArenaClient.from_settings(_settings(ctx)) as client:
        letters = client.dead_letters(limit)
    if as_json:
        out.print(json_text(letters, indent=2))
        return
    if not letters:
        out.print("no dead letters")
        return
    table = Table("id", "message", "group", "reason", "text")
    for letter in letters:
        table.add_row(
            letter["id"],
            letter.get("entry_id", ""),
            letter.get("group", ""),
            letter.get("reason", ""),
            letter.get("text", "")[:60],
        )
    out.print(table)


@main.command()
@click.argument("dead_letter_id", metavar="ID")
@click.pass_context
@handles_errors
def retry(ctx: click.Context, dead_letter_id: str) -> None:
    """Post a dead letter's message again (see `arena dead-letters`); prints the new id."""
    from orchestrator.client import ArenaClient

    if not _ENTRY_ID.fullmatch(dead_letter_id):
        raise ValidationError(
            "id", f"not a message id: {dead_letter_id!r} (expected like 1700000000000-0)"
        )
    with ArenaClient.from_settings(_settings(ctx)) as client:
        out.print(client.retry(dead_letter_id))


@main.command(name="route")
@click.argument("text")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_context
@handles_errors
def route_command(ctx: click.Context, text: str, as_json: bool) -> None:
    """Show which agents would answer TEXT, and why (a dry run over the real rules)."""
    from orchestrator.core.agents import load_agents
    from orchestrator.core.routing import route

    decision = route(text, load_agents(_settings(ctx).agents_dir))
    if as_json:
        out.print(json_text(decision.as_dict()))
        return
    out.print(f"agents:   {', '.join(decision.agents)}", markup=False)
    out.print(f"reason:   {decision.reason.value}", markup=False)
    if decision.rule:
        out.print(f"rule:     {decision.rule}", markup=False)
    if decision.keywords_hit:
        out.print(f"keywords: {', '.join(decision.keywords_hit)}", markup=False)
    if decision.detail:
        out.print(f"detail:   {decision.detail}", markup=False)
