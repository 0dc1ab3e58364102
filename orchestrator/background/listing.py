"""What ``arena jobs`` lists: the daemon's next fire times, kept in Redis, and the jobs RQ
still holds (queued, running, waiting for a retry, failed, finished) with their outcome.

Each row is a :class:`JobRow`; :meth:`JobRow.as_dict` is what ``arena jobs --json`` prints,
every row with the same keys.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from rq.job import Job, JobStatus
from rq.results import Result
from rq.serializers import JSONSerializer

from orchestrator.adapters.redis_client import Connection, translated
from orchestrator.background.queue import queue
from orchestrator.core.wire import schedule_key

__all__ = ["JobRow", "list_jobs", "schedule_rows", "store_schedule"]

SCHEDULE_TTL_S = 180  # the daemon refreshes it every minute; gone soon after it stops
LIST_LIMIT = 50
_ERROR_CHARS = 300


@dataclass(frozen=True, slots=True, kw_only=True)
class JobRow:
    """One row of ``arena jobs``: a fire time of the daemon's schedule (``kind`` is
    ``schedule``) or a job RQ holds, with its outcome (``result``) or last error line.
    Times are ISO 8601."""

    id: str
    kind: str | None = None
    status: str
    target: str | None = None
    trigger: str | None = None
    enqueued_at: str | None = None
    ended_at: str | None = None
    next_run_at: str | None = None
    result: dict[str, Any] | None = None
    error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """The ``--json`` form: every field, in this order (monitors read the keys)."""
        return {
            "id": self.id,
            "kind": self.kind,
            "status": self.status,
            "target": self.target,
            "trigger": self.trigger,
            "enqueued_at": self.enqueued_at,
            "ended_at": self.ended_at,
            "next_run_at": self.next_run_at,
            "result": self.result,
            "error": self.error,
        }


def store_schedule(connection: Connection, times: dict[str, datetime], now: datetime) -> None:
    """Record the daemon's next fire times for ``arena jobs`` (expires if not refreshed).

    Raises:
        BusError: when Redis cannot be written.
    """
    key = schedule_key()
    with translated(), connection.pipeline() as pipe:
        pipe.delete(key)
        for name, when in times.items():
            pipe.hset(key, name, when.isoformat())
        pipe.hset(key, "updated_at", now.isoformat())
        pipe.expire(key, SCHEDULE_TTL_S)
        pipe.execute()


def list_jobs(connection: Connection, *, limit: int = LIST_LIMIT) -> list[JobRow]:
    """The daemon's schedule, then queued, running, retrying, failed and finished jobs (the
    most recently enqueued first).

    Raises:
        BusError: when Redis cannot be read.
    """
    with translated():
        return _list_jobs(connection, limit)


def _list_jobs(connection: Connection, limit: int) -> list[JobRow]:
    rows = _schedule_rows(connection)
    q = queue(connection)
    ids: dict[str, None] = {}
    for found in (
        q.get_job_ids(0, limit),
        q.started_job_registry.get_job_ids(),
        q.scheduled_job_registry.get_job_ids(),
        q.failed_job_registry.get_job_ids(0, limit - 1, desc=True),
        q.finished_job_registry.get_job_ids(0, limit - 1, desc=True),
    ):
        ids.update(dict.fromkeys(found))
    jobs = [j for j in Job.fetch_many(list(ids), connection, JSONSerializer) if j is not None]
    described = [_describe(job) for job in jobs]
    described.sort(key=lambda r: r.enqueued_at or "", reverse=True)
    return rows + described


def schedule_rows(times: Mapping[str, str], status: str) -> list[JobRow]:
    """``arena jobs`` rows for fire times (ISO 8601 strings), soonest first."""
    return [
        JobRow(id=name, kind="schedule", status=status, next_run_at=when)
        for name, when in sorted(times.items(), key=lambda item: (item[1], item[0]))
    ]


def _schedule_rows(connection: Connection) -> list[JobRow]:
    raw = connection.hgetall(schedule_key())
    times = {_text(k): _text(v) for k, v in raw.items()}
    times.pop("updated_at", None)
    return schedule_rows(times, "scheduled")


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _iso(value: datetime | None) -> str | None:
    if value is None:
        return None
    return (value if value.tzinfo else value.replace(tzinfo=UTC)).isoformat()


def _describe(job: Job) -> JobRow:
    meta = job.get_meta(refresh=False)
    status = job.get_status(refresh=False)
    latest = job.latest_result()
    result = error = next_run_at = None
    if latest is not None and latest.type is Result.Type.SUCCESSFUL:
        result = latest.return_value
    elif latest is not None and latest.exc_string:
        error = _last_line(latest.exc_string)
    if status is JobStatus.SCHEDULED:
        next_run_at = _iso(queue(job.connection).scheduled_job_registry.get_scheduled_time(job))
    return JobRow(
        id=job.id,
        kind=meta.get("kind"),
        status=status.value,
        target=meta.get("target"),
        trigger=meta.get("trigger"),
        enqueued_at=_iso(job.enqueued_at),
        ended_at=_iso(job.ended_at),
        next_run_at=next_run_at,
        result=result,
        error=error,
    )


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:_ERROR_CHARS] if lines else ""
