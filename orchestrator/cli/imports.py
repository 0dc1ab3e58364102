"""``arena import GROUP FILE``: bring an existing conversation into a group."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import IO

import click

from orchestrator.adapters.probes import ping_redis
from orchestrator.adapters.redis_client import connect
from orchestrator.background.queue import enqueue_summary
from orchestrator.background.summary import MAX_MESSAGES
from orchestrator.cli.output import err, out
from orchestrator.cli.resources import wired
from orchestrator.core.agents import load_agents
from orchestrator.core.wire import agent_names, validate_group
from orchestrator.errors import BusError, OrchestratorError
from orchestrator.memory.conversation.importer import ImportSettings, Progress, parse_lines
from orchestrator.memory.conversation.importing import ImportResult, import_messages
from orchestrator.settings import Settings

__all__ = ["import_command"]

PROGRESS_FROM = 5000  # lines: smaller files are done before progress would help
REDIS_TIMEOUT_S = 3.0


def _reporter(what: str, total_lines: int) -> Progress:
    """Progress lines on stderr, for large files only."""

    step = max(1000, total_lines // 10 // 1000 * 1000)

    def report(done: int, total: int) -> None:
        if total_lines >= PROGRESS_FROM and (done % step == 0 or done == total):
            err.print(f"arena: {what} {done}/{total}", markup=False)

    return report


def _summary_points(seqs: Sequence[int]) -> list[int | None]:
    """Where the summary jobs stop: one run folds in at most ``MAX_MESSAGES`` messages, so a
    large import needs one run per that many, in order (the last up to the newest)."""
    return [*seqs[MAX_MESSAGES - 1 : -1 : MAX_MESSAGES], None]


def _after(settings: Settings, result: ImportResult) -> list[str]:
    """Enqueue the group's rolling summary; what to tell the user about it."""
    group = result.group
    later = (
        f"the summary is not updated yet: run `arena summarize {group}` while `arena up` runs "
        "(it also catches up after the group's next messages)"
    )
    try:
        asyncio.run(ping_redis(settings.effective_redis_url, timeout_s=REDIS_TIMEOUT_S))
        connection = connect(settings.effective_redis_url, socket_timeout=REDIS_TIMEOUT_S)
        try:
            queued = [
                enqueue_summary(connection, group, upto, "import", settings=settings)
                for upto in _summary_points(result.seqs)
            ]
        finally:
            connection.close()
    except BusError as exc:
        return [f"Redis is not reachable ({exc.problem}); {later}"]
    except OrchestratorError as exc:
        return [f"Redis is not reachable ({exc}); {later}"]
    jobs = ", ".join(f"{q.job_id} {q.detail}" for q in queued)
    return [f"summary: {jobs} (a background worker updates it)"]


def _say(result: ImportResult, settings: Settings) -> None:
    zone = settings.zone
    span = ""
    if result.first_at is not None and result.last_at is not None:
        first = result.first_at.astimezone(zone).strftime("%Y-%m-%d %H:%M")
        last = result.last_at.astimezone(zone).strftime("%Y-%m-%d %H:%M")
        span = f", {first} to {last}"
    out.print(
        f"imported {result.imported} messages ({result.already} already there) into group "
        f"{result.group}{span}",
        markup=False,
    )


@click.command(name="import")
@click.argument("group")
@click.argument("file", type=click.File("rb"))
@click.pass_obj
def import_command(settings: Settings, group: str, file: IO[bytes]) -> None:
    """Bring an existing conversation into GROUP from FILE (JSON Lines; '-' reads stdin).

    \b
    One message per line, for example:
      {"sender": "alice", "text": "Ship Friday.", "created_at": "2024-03-01T09:15:00+01:00"}
    \b
      sender      who wrote it (letters, digits, spaces and . _ @ -); a person's line
                  may not be under an agent's id or name, nor arena or system
      text        the message (the rules of `arena post`)
      created_at  ISO 8601; without an offset the time is in ARENA_TZ; not in the future
                  (up to 60 s ahead is allowed for a clock a little ahead of this one)
      id          optional, a stable id (letters, digits, _ . : @ -); without one the
                  message and its place in the file identify it. Either way the stored id
                  is derived from it and GROUP: importing again into GROUP adds nothing,
                  into another group gives that group its own copy
      kind        optional: human (default) or agent (the sender must be an agent's id)

    Every line is checked first: on any problem each bad line is named with its field and
    nothing is written. Messages are stored in one transaction, in file order, after the
    group's existing ones, and must not go back in time. No agent answers them; the group's
    rolling summary catches up as a background job. A daemon already serving GROUP sees the
    imported messages within a few seconds.
    """
    validate_group(group)
    data = file.read()
    lines = data.count(b"\n") + 1
    team = load_agents(settings.agents_dir)
    agents = frozenset(a.id for a in team)
    config = ImportSettings(
        group=group,
        zone=settings.zone,
        max_bytes=settings.max_message_bytes,
        now=datetime.now(UTC),
        agents=agents,
        team=agent_names(team),
    )
    messages = parse_lines(data, config, _reporter("checked line", lines))
    with wired(settings) as wiring:
        result = import_messages(wiring.history, messages, progress=_reporter("stored", lines))
    _say(result, settings)
    if result.imported:
        for line in _after(settings, result):
            out.print(line, markup=False)
