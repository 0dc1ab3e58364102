"""``arena jobs``, ``arena heartbeat`` and ``arena summarize``: background work by hand."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, date, datetime
from typing import Any, TypeVar

import click
from rich import box
from rich.table import Table
from rich.text import Text
from rq import Worker
from rq.job import Job, JobStatus

from orchestrator.adapters.probes import ping_redis
from orchestrator.adapters.redis_client import Connection, connect, translated
from orchestrator.background.listing import JobRow, list_jobs, schedule_rows
from orchestrator.background.queue import (
    QUEUE_NAMES,
    EnqueueResult,
    enqueue_distill,
    enqueue_summary,
    fetch_job,
)
from orchestrator.background.schedule import next_fire_times
from orchestrator.cli.output import json_text, out, printable
from orchestrator.cli.resources import wired
from orchestrator.core.agents import load_agents
from orchestrator.core.models import known_agent
from orchestrator.core.wire import validate_group
from orchestrator.errors import BusError, OrchestratorError, ServiceError, ValidationError
from orchestrator.settings import Settings

__all__ = ["heartbeat", "jobs", "summarize"]

FC = TypeVar("FC", bound=Callable[..., Any])

POLL_S = 0.2
NO_WORKER_AFTER_S = 5.0
_ENDED = (JobStatus.FINISHED, JobStatus.FAILED, JobStatus.STOPPED, JobStatus.CANCELED)
_WAIT_HELP = (
    "Wait for the outcome and print it (default {default} s); exit 1 unless written or skipped."
)


class JobWaitError(OrchestratorError):
    """Waiting for a job ended without an outcome."""

    def __init__(self, job_id: str, problem: str) -> None:
        self.job_id = job_id
        self.problem = problem
        super().__init__(f"job {job_id}: {problem}")


@contextmanager
def _redis(settings: Settings) -> Iterator[Connection]:
    """A connection to the configured Redis; connection errors become one clear line."""
    asyncio.run(ping_redis(settings.effective_redis_url, timeout_s=5))
    connection = connect(settings.effective_redis_url, socket_timeout=10)
    try:
        with translated():  # what RQ sends, too
            yield connection
    except BusError as exc:
        raise ServiceError("redis", f"{exc.kind}: {exc.problem}") from exc
    finally:
        connection.close()


def _local(value: str | None, settings: Settings) -> str:
    if not value:
        return ""
    return datetime.fromisoformat(value).astimezone(settings.zone).strftime("%Y-%m-%d %H:%M")


def outcome_text(result: dict[str, Any]) -> str:
    """One line for a job's outcome: ``architect: MEMORY.md version 3 written (412 tokens)``."""
    who = result.get("agent") or result.get("group") or "?"
    what = "MEMORY.md" if result.get("kind") == "distill" else "summary"
    status = result.get("status", "?")
    if status == "written":
        tokens = result.get("tokens", 0)
        return f"{who}: {what} version {result.get('version')} written ({tokens} tokens)"
    return f"{who}: {status}: {result.get('reason') or 'no reason given'}"


def _outcome_cell(row: JobRow) -> str:
    if row.result is not None:
        return outcome_text(row.result)
    return row.error or ""


def jobs_table(rows: list[JobRow], settings: Settings) -> Table:
    """The jobs as a table that fits 80 columns: the outcome goes on its own lines under the
    job's id, and one time per job (when it ended, or when it runs next, or was enqueued)."""
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("job / outcome", overflow="fold", ratio=1)
    table.add_column("status", overflow="fold")
    table.add_column("trigger", overflow="fold")
    table.add_column("when", no_wrap=True)
    for r in rows:
        cell = Text(printable(r.id))
        if outcome := _outcome_cell(r):
            cell.append("\n" + printable(outcome), style="dim")
        when = r.ended_at or r.next_run_at or r.enqueued_at
        table.add_row(cell, r.status, r.trigger or "", _local(when, settings))
    return table


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output (a JSON list).")
@click.pass_obj
def jobs(settings: Settings, as_json: bool) -> None:
    """List the daemon's schedule and recent background jobs with their outcome."""
    with _redis(settings) as connection:
        rows = list_jobs(connection)
    if not any(r.kind == "schedule" for r in rows):
        # No daemon is publishing its schedule: show when it would fire.
        planned = next_fire_times(settings, datetime.now(UTC))
        times = {name: when.isoformat() for name, when in planned.items()}
        rows[:0] = schedule_rows(times, "not running")
    if as_json:
        out.print(json_text([r.as_dict() for r in rows], indent=2))
        return
    out.print(jobs_table(rows, settings))


def _wait_option(default_s: float) -> Callable[[FC], FC]:
    return click.option(
        "--wait",
        "wait_s",
        type=float,
        is_flag=False,
        flag_value=default_s,
        default=None,
        metavar="[SECONDS]",
        help=_WAIT_HELP.format(default=f"{default_s:g}"),
    )


@click.command()
@click.argument("agent")
@click.option(
    "--date",
    "day_text",
    default=None,
    metavar="YYYY-MM-DD",
    help="The log's day (default: today in ARENA_TZ).",
)
@click.option(
    "--force",
    is_flag=True,
    help="Run again even if this log was already distilled, or retry a failed run.",
)
@_wait_option(300.0)
@click.pass_obj
def heartbeat(
    settings: Settings, agent: str, day_text: str | None, force: bool, wait_s: float | None
) -> None:
    """Distil AGENT's daily log into a new MEMORY.md now (a background job)."""
    known_agent(load_agents(settings.agents_dir), agent)
    day = _parse_day(day_text) if day_text else datetime.now(settings.zone).date()
    with _redis(settings) as connection:
        result = enqueue_distill(connection, agent, day, "manual", settings=settings, force=force)
        _report(connection, result, wait_s)


@click.command()
@click.argument("group")
@click.option(
    "--force",
    is_flag=True,
    help="Run again even if this range was summarised, or retry a failed run.",
)
@_wait_option(300.0)
@click.pass_obj
def summarize(settings: Settings, group: str, force: bool, wait_s: float | None) -> None:
    """Update GROUP's rolling summary up to its latest message now (a background job)."""
    validate_group(group)
    with wired(settings) as wiring:
        latest = wiring.history.recent(group, 1)
    if not latest:
        raise ValidationError("group", f"group {group!r} has no messages yet")
    with _redis(settings) as connection:
        result = enqueue_summary(
            connection, group, latest[-1].seq, "manual", settings=settings, force=force
        )
        _report(connection, result, wait_s)


def _parse_day(text: str) -> date:
    try:
        return date.fromisoformat(text)
    except ValueError:
        raise ValidationError("date", f"{text!r} is not a date (YYYY-MM-DD)") from None


def _report(connection: Connection, result: EnqueueResult, wait_s: float | None) -> None:
    if result.enqueued:
        out.print(f"{result.job_id}: {result.detail}", markup=False)
    else:
        hint = " (--force runs it again)" if result.status in ("finished", "failed") else ""
        out.print(f"{result.job_id}: not enqueued, {result.detail}{hint}", markup=False)
    if wait_s is None:
        return
    job = wait_for_job(connection, result.job_id, wait_s)
    latest = job.latest_result()
    if job.get_status(refresh=False) is JobStatus.FINISHED and latest is not None:
        outcome: dict[str, Any] = latest.return_value or {}
        out.print(outcome_text(outcome), markup=False)
        if outcome.get("status") not in ("written", "skipped"):
            raise SystemExit(1)
        return
    error = (latest.exc_string or "").strip().splitlines()[-1:] if latest is not None else []
    raise JobWaitError(
        result.job_id,
        f"{job.get_status(refresh=False).value}: {''.join(error) or 'no error recorded'}",
    )


def wait_for_job(connection: Connection, job_id: str, timeout_s: float) -> Job:
    """Poll until the job has ended (finished, failed, stopped or canceled).

    Raises:
        JobWaitError: when the job disappears, no worker is there to run it, or time is up.
    """
    deadline = time.monotonic() + timeout_s
    since = time.monotonic()
    last: JobStatus | None = None
    while True:
        job = fetch_job(connection, job_id)
        if job is None:
            raise JobWaitError(job_id, "no longer in Redis")
        status = job.get_status()
        if status in _ENDED:
            return job
        if status != last:
            last, since = status, time.monotonic()
        elif status is JobStatus.QUEUED and time.monotonic() - since > NO_WORKER_AFTER_S:
            if not _has_worker(connection):
                raise JobWaitError(
                    job_id,
                    "queued, but no worker is running: start one with `arena worker` "
                    "(or `arena up`)",
                )
            since = time.monotonic()
        if time.monotonic() > deadline:
            raise JobWaitError(job_id, f"still {status.value} after {timeout_s:g}s")
        time.sleep(POLL_S)


def _has_worker(connection: Connection) -> bool:
    return any(
        set(worker.queue_names()) & set(QUEUE_NAMES) for worker in Worker.all(connection=connection)
    )
