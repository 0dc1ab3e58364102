"""Background work on RQ: the queue, the job functions, enqueueing and the worker process.

Three kinds of job run on the ``arena`` queue, all with the JSON serializer:

    distill_{agent}_{YYYY-MM-DD}   a heartbeat: the day's log and MEMORY.md → a new MEMORY.md
    summary_{group}_{upto}         a group's rolling summary, up to message ``upto`` (or
                                   ``latest``)
    prune_{YYYY-MM-DD}             the day's retention run
                                   (:mod:`orchestrator.background.retention`)

The job id is the input, so the same input never runs twice: a job with that id that is
queued, running, waiting for a retry or finished is not enqueued again (RQ's atomic
``unique`` enqueue decides, so concurrent callers create one job). A finished or failed job
is replaced by a new run only when its input has changed since (a heartbeat's daily log has
grown, e.g. after an idle heartbeat earlier that day) or when forced (``arena heartbeat
--force``). Failed jobs are retried with backoff; when the retries are used up they stay in
RQ's failed registry with their traceback, and ``arena jobs`` shows them.

Job functions are module-level and take ids; each reads ``Settings`` from the environment it
inherits from ``arena up``, opens its own database engine and model client, and returns a
JSON-able dict of the outcome.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import time
from collections.abc import Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import Any, Protocol

import aiomqtt
import redis
from rq import Queue, Retry, Worker
from rq.exceptions import DuplicateJobError, NoSuchJobError
from rq.job import Job, JobStatus
from rq.results import Result
from rq.serializers import JSONSerializer
from sqlalchemy.engine import Engine

from orchestrator.adapters.providers import build_llm
from orchestrator.adapters.services import mqtt_client_args
from orchestrator.background.distill import run_distillation
from orchestrator.background.retention import prune
from orchestrator.background.summary import run_summary
from orchestrator.core.turns import LLM
from orchestrator.core.wire import growth_topic, job_guard_key, schedule_key, validate_group
from orchestrator.memory.db import make_engine
from orchestrator.memory.personal import PersonalLog
from orchestrator.settings import Settings, load_settings

__all__ = [
    "QUEUE_NAMES",
    "EnqueueResult",
    "JobPolicy",
    "distill_job",
    "distill_job_id",
    "enqueue_distill",
    "enqueue_prune",
    "enqueue_summary",
    "fetch_job",
    "forget_workers",
    "list_jobs",
    "prune_job",
    "prune_job_id",
    "queue",
    "run_worker",
    "schedule_rows",
    "store_schedule",
    "summary_job",
    "summary_job_id",
]

logger = logging.getLogger(__name__)

QUEUE_NAMES = ("arena",)
DAY_S = 24 * 3600
PUBLISH_TIMEOUT_S = 5.0
SCHEDULE_TTL_S = 180  # the daemon refreshes it every minute; gone soon after it stops
GUARD_TTL_S = 30
LIST_LIMIT = 50
_BUSY = {
    JobStatus.QUEUED: "already queued",
    JobStatus.STARTED: "already running",
    JobStatus.SCHEDULED: "waiting to be retried",
    JobStatus.DEFERRED: "waiting for another job",
    JobStatus.CREATED: "being enqueued",
}


@dataclass(frozen=True, slots=True, kw_only=True)
class JobPolicy:
    """Retries, time limit and how long outcomes are kept (for ``arena jobs`` and dedup)."""

    retries: int = 3
    retry_intervals_s: tuple[int, ...] = (10, 30, 60)
    timeout_s: int = 300
    keep_s: int = 8 * DAY_S

    def __post_init__(self) -> None:
        if self.retries < 0 or self.timeout_s < 1 or self.keep_s < 1:
            raise ValueError("retries must be >= 0, timeout_s and keep_s >= 1")
        if not self.retry_intervals_s or min(self.retry_intervals_s) < 0:
            raise ValueError("retry_intervals_s must be non-empty and not negative")

    @classmethod
    def from_settings(cls, settings: Settings) -> JobPolicy:
        """Outcomes are kept a day longer than catch-up looks back, so it sees them."""
        return cls(
            retries=settings.job_retries,
            timeout_s=settings.job_timeout_s,
            keep_s=(max(settings.catch_up_days, 1) + 1) * DAY_S,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class EnqueueResult:
    """What an enqueue did: ``enqueued`` is False when the job already exists."""

    job_id: str
    enqueued: bool
    status: str
    detail: str


def queue(connection: redis.Redis) -> Queue:
    """The ``arena`` queue, with the JSON serializer."""
    return Queue(QUEUE_NAMES[0], connection=connection, serializer=JSONSerializer)


def distill_job_id(agent_id: str, day: date) -> str:
    """``distill_{agent}_{YYYY-MM-DD}`` (RQ allows only letters, digits, ``_`` and ``-``)."""
    return f"distill_{agent_id}_{day.isoformat()}"


def summary_job_id(group: str, upto_seq: int | None) -> str:
    """``summary_{group}_{upto}``, ``latest`` when the range is open."""
    return f"summary_{group}_{'latest' if upto_seq is None else upto_seq}"


def prune_job_id(day: date) -> str:
    """``prune_{YYYY-MM-DD}``: one retention run per day."""
    return f"prune_{day.isoformat()}"


def fetch_job(connection: redis.Redis, job_id: str) -> Job | None:
    """The job with this id, if Redis still has it."""
    try:
        return Job.fetch(job_id, connection=connection, serializer=JSONSerializer)
    except NoSuchJobError:
        return None


# Enqueueing ------------------------------------------------------------------------------------


def enqueue_distill(
    connection: redis.Redis,
    agent_id: str,
    day: date,
    trigger: str,
    *,
    settings: Settings,
    force: bool = False,
    policy: JobPolicy | None = None,
) -> EnqueueResult:
    """Enqueue the heartbeat distillation of ``agent_id``'s log of ``day``, once per input.

    The input's revision is the size of the day's log: a log only grows, so a finished run is
    repeated only when notes were added since it was enqueued.

    Raises:
        ValidationError: if ``agent_id`` is not a valid id.
        redis.RedisError: when Redis cannot be reached.
    """
    log = PersonalLog(settings.workspaces_dir, settings.zone).path(agent_id, day)
    try:
        revision = str(log.stat().st_size)
    except FileNotFoundError:
        revision = "0"
    return _enqueue(
        connection,
        distill_job,
        (agent_id, day.isoformat(), trigger),
        job_id=distill_job_id(agent_id, day),
        meta={"kind": "distill", "target": agent_id, "day": day.isoformat()},
        trigger=trigger,
        revision=revision,
        force=force,
        policy=policy or JobPolicy.from_settings(settings),
    )


def enqueue_summary(
    connection: redis.Redis,
    group: str,
    upto_seq: int | None,
    trigger: str,
    *,
    settings: Settings,
    force: bool = False,
    policy: JobPolicy | None = None,
) -> EnqueueResult:
    """Enqueue a rolling summary of ``group`` up to message ``upto_seq`` (None: the latest).

    An open range (``upto_seq=None``) may run again once its previous run has ended.

    Raises:
        ValidationError: if ``group`` is not a valid group id.
        redis.RedisError: when Redis cannot be reached.
    """
    validate_group(group)
    return _enqueue(
        connection,
        summary_job,
        (group, upto_seq, trigger),
        job_id=summary_job_id(group, upto_seq),
        meta={"kind": "summary", "target": group, "upto": upto_seq},
        trigger=trigger,
        revision=None if upto_seq is None else str(upto_seq),
        force=force,
        policy=policy or JobPolicy.from_settings(settings),
    )


def enqueue_prune(
    connection: redis.Redis,
    day: date,
    trigger: str,
    *,
    settings: Settings,
    policy: JobPolicy | None = None,
) -> EnqueueResult:
    """Enqueue the retention run of ``day``, once a day.

    Raises:
        redis.RedisError: when Redis cannot be reached.
    """
    return _enqueue(
        connection,
        prune_job,
        (day.isoformat(), trigger),
        job_id=prune_job_id(day),
        meta={"kind": "prune", "target": "storage", "day": day.isoformat()},
        trigger=trigger,
        revision=day.isoformat(),
        force=False,
        policy=policy or JobPolicy.from_settings(settings),
    )


def _enqueue(
    connection: redis.Redis,
    func: Callable[..., dict[str, Any]],
    args: tuple[Any, ...],
    *,
    job_id: str,
    meta: dict[str, Any],
    trigger: str,
    revision: str | None,
    force: bool,
    policy: JobPolicy,
) -> EnqueueResult:
    meta = {**meta, "trigger": trigger, "revision": revision}
    if _submit(connection, func, args, job_id, meta, policy):
        return EnqueueResult(job_id=job_id, enqueued=True, status="queued", detail="enqueued")
    # The id is taken. Replacing an ended job must not race another caller doing the same.
    if not connection.set(job_guard_key(job_id), "1", nx=True, ex=GUARD_TTL_S):
        return EnqueueResult(
            job_id=job_id,
            enqueued=False,
            status="queued",
            detail="being replaced by another caller",
        )
    try:
        existing = fetch_job(connection, job_id)
        if existing is not None:
            status = existing.get_status()
            why = _replace_reason(existing, status, revision, force)
            if why is None:
                return EnqueueResult(
                    job_id=job_id, enqueued=False, status=status.value, detail=_why_not(status)
                )
            existing.delete()
        else:
            why = "enqueued"  # it expired in between
        if not _submit(connection, func, args, job_id, meta, policy):
            return EnqueueResult(
                job_id=job_id, enqueued=False, status="queued", detail="already queued"
            )
        return EnqueueResult(job_id=job_id, enqueued=True, status="queued", detail=why)
    finally:
        connection.delete(job_guard_key(job_id))


def _submit(
    connection: redis.Redis,
    func: Callable[..., dict[str, Any]],
    args: tuple[Any, ...],
    job_id: str,
    meta: dict[str, Any],
    policy: JobPolicy,
) -> bool:
    """Enqueue unless a job with ``job_id`` exists (one atomic step in Redis)."""
    retry = None
    if policy.retries:
        retry = Retry(max=policy.retries, interval=list(policy.retry_intervals_s))
    try:
        queue(connection).enqueue_call(
            func,
            args=args,
            job_id=job_id,
            meta=meta,
            timeout=policy.timeout_s,
            result_ttl=policy.keep_s,
            failure_ttl=policy.keep_s,
            retry=retry,
            description=f"{meta['kind']} {meta['target']} ({meta['trigger']})",
            unique=True,
        )
    except DuplicateJobError:
        return False
    return True


def _replace_reason(job: Job, status: JobStatus, revision: str | None, force: bool) -> str | None:
    """Why an existing job may be replaced by a new run; None when it may not."""
    if status not in (JobStatus.FINISHED, JobStatus.FAILED, JobStatus.STOPPED, JobStatus.CANCELED):
        return None
    if force:
        return "forced to run again"
    if revision is None or job.get_meta(refresh=False).get("revision") != revision:
        return "input changed since the last run"
    return None


def _why_not(status: JobStatus) -> str:
    if status is JobStatus.FINISHED:
        return "already done for this input"
    if status in (JobStatus.FAILED, JobStatus.STOPPED, JobStatus.CANCELED):
        return f"{status.value} earlier for this input (force a new run to retry it)"
    return _BUSY.get(status, str(status.value))


# Job functions (run in `arena worker` processes) -----------------------------------------------


def distill_job(agent_id: str, day_iso: str, trigger: str) -> dict[str, Any]:
    """Distil ``agent_id``'s log of ``day_iso`` into a new ``MEMORY.md`` (an RQ job)."""
    settings = load_settings()
    day = date.fromisoformat(day_iso)
    return asyncio.run(_distill(settings, agent_id, day, trigger))


def summary_job(group: str, upto_seq: int | None, trigger: str) -> dict[str, Any]:
    """Update ``group``'s rolling summary up to message ``upto_seq`` (an RQ job)."""
    settings = load_settings()
    return asyncio.run(_summarise(settings, group, upto_seq, trigger))


def prune_job(day_iso: str, trigger: str) -> dict[str, Any]:
    """Delete what the retention settings say is too old (an RQ job; ``day_iso`` names the
    run, the ages are measured from when it runs)."""
    settings = load_settings()
    engine = make_engine(settings.effective_database_url)
    try:
        report = prune(engine, settings, datetime.now(UTC))
    finally:
        engine.dispose()
    return {"kind": "prune", "day": day_iso, "trigger": trigger, **report.as_dict()}


class _Outcome(Protocol):
    """What ``run_distillation`` and ``run_summary`` return, as far as a job reports it."""

    @property
    def status(self) -> str: ...
    @property
    def version(self) -> int | None: ...
    @property
    def reason(self) -> str: ...
    @property
    def tokens(self) -> int: ...


async def _distill(settings: Settings, agent_id: str, day: date, trigger: str) -> dict[str, Any]:
    async def run(engine: Engine, llm: LLM, now: datetime) -> _Outcome:
        return await run_distillation(settings, engine, llm, agent_id, day, trigger, now)

    result = {"kind": "distill", "agent": agent_id, "day": day.isoformat(), "trigger": trigger}
    result |= await _run(settings, run)
    _log_outcome(result, f"{agent_id} {day}")
    if result["status"] == "written":
        await _publish_growth(settings, agent_id, result)
    return result


async def _summarise(
    settings: Settings, group: str, upto_seq: int | None, trigger: str
) -> dict[str, Any]:
    async def run(engine: Engine, llm: LLM, now: datetime) -> _Outcome:
        return await run_summary(settings, engine, llm, group, upto_seq, trigger, now)

    result = {"kind": "summary", "group": group, "upto": upto_seq, "trigger": trigger}
    result |= await _run(settings, run)
    _log_outcome(result, f"{group} up to {'latest' if upto_seq is None else upto_seq}")
    return result


async def _run(
    settings: Settings, run: Callable[[Engine, LLM, datetime], Awaitable[_Outcome]]
) -> dict[str, Any]:
    """Open the database and the model for one run, and report what came of it."""
    started = time.monotonic()
    engine = await asyncio.to_thread(make_engine, settings.effective_database_url)
    llm = build_llm(settings)
    try:
        outcome = await run(engine, llm, datetime.now(UTC))
    finally:
        await llm.aclose()
        engine.dispose()
    return {
        "status": str(outcome.status),
        "version": outcome.version,
        "reason": outcome.reason,
        "tokens": outcome.tokens,
        "duration_s": round(time.monotonic() - started, 3),
    }


def _log_outcome(result: dict[str, Any], what: str) -> None:
    logger.info(
        "%s %s (%s): %s, version %s, %d tokens, %.1fs, %s",
        result["kind"],
        what,
        result["trigger"],
        result["status"],
        result["version"] or "-",
        result["tokens"],
        result["duration_s"],
        result["reason"] or "-",
    )


async def _publish_growth(settings: Settings, agent_id: str, result: dict[str, Any]) -> None:
    """Announce a new version on MQTT; the version is written whether or not this succeeds."""
    payload = {key: result[key] for key in ("agent", "day", "trigger", "version", "tokens")}
    payload["at"] = datetime.now(UTC).isoformat()
    try:
        async with asyncio.timeout(PUBLISH_TIMEOUT_S):
            async with aiomqtt.Client(**mqtt_client_args(settings.effective_mqtt_url)) as client:
                await client.publish(growth_topic(agent_id), json.dumps(payload), qos=1)
    except Exception as exc:  # any failure: the job itself has succeeded
        logger.warning("growth event for %s not published: %r", agent_id, exc)


# Listing ---------------------------------------------------------------------------------------


def store_schedule(connection: redis.Redis, times: dict[str, datetime], now: datetime) -> None:
    """Record the daemon's next fire times for ``arena jobs`` (expires if not refreshed)."""
    key = schedule_key()
    with connection.pipeline() as pipe:
        pipe.delete(key)
        for name, when in times.items():
            pipe.hset(key, name, when.isoformat())
        pipe.hset(key, "updated_at", now.isoformat())
        pipe.expire(key, SCHEDULE_TTL_S)
        pipe.execute()


def list_jobs(connection: redis.Redis, *, limit: int = LIST_LIMIT) -> list[dict[str, Any]]:
    """The daemon's schedule, then queued, running, retrying, failed and finished jobs.

    Every row has the same keys: ``id``, ``kind``, ``status``, ``target``, ``trigger``,
    ``enqueued_at``, ``ended_at``, ``next_run_at``, ``result`` and ``error``.
    """
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
    described.sort(key=lambda r: r["enqueued_at"] or "", reverse=True)
    return rows + described


def _row(**values: Any) -> dict[str, Any]:
    keys = ("id", "kind", "status", "target", "trigger", "enqueued_at", "ended_at")
    row: dict[str, Any] = dict.fromkeys(keys)
    row |= {"next_run_at": None, "result": None, "error": None}
    row.update(values)
    return row


def _schedule_rows(connection: redis.Redis) -> list[dict[str, Any]]:
    raw = connection.hgetall(schedule_key())
    times = {_text(k): _text(v) for k, v in raw.items()}
    times.pop("updated_at", None)
    return schedule_rows(times, "scheduled")


def schedule_rows(times: Mapping[str, str], status: str) -> list[dict[str, Any]]:
    """``arena jobs`` rows for fire times (ISO 8601 strings), soonest first."""
    return [
        _row(id=name, kind="schedule", status=status, next_run_at=when)
        for name, when in sorted(times.items(), key=lambda item: (item[1], item[0]))
    ]


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _iso(value: datetime | None) -> str | None:
    if value is None:
        return None
    return (value if value.tzinfo else value.replace(tzinfo=UTC)).isoformat()


def _describe(job: Job) -> dict[str, Any]:
    meta = job.get_meta(refresh=False)
    status = job.get_status(refresh=False)
    latest = job.latest_result()
    row = _row(
        id=job.id,
        kind=meta.get("kind"),
        status=status.value,
        target=meta.get("target"),
        trigger=meta.get("trigger"),
        enqueued_at=_iso(job.enqueued_at),
        ended_at=_iso(job.ended_at),
    )
    if latest is not None and latest.type is Result.Type.SUCCESSFUL:
        row["result"] = latest.return_value
    elif latest is not None and latest.exc_string:
        row["error"] = _last_line(latest.exc_string)
    if status is JobStatus.SCHEDULED:
        row["next_run_at"] = _iso(
            queue(job.connection).scheduled_job_registry.get_scheduled_time(job)
        )
    return row


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


# The worker ------------------------------------------------------------------------------------


def forget_workers(redis_url: str, pids: Collection[int]) -> list[str]:
    """Unregister the RQ workers of this machine that ran as ``pids`` (a crashed run's
    workers, known to be gone), so that nothing counts them as alive.

    Returns:
        The names of the workers forgotten.
    """
    host = socket.gethostname()
    forgotten: list[str] = []
    with redis.Redis.from_url(redis_url) as connection:
        try:
            for worker in Worker.all(connection=connection, serializer=JSONSerializer):
                if worker.hostname == host and worker.pid in pids:
                    worker.register_death()  # type: ignore[no-untyped-call]  # rq is untyped here
                    forgotten.append(worker.name)
        except redis.RedisError as exc:  # they expire by themselves within minutes
            logger.warning("cannot unregister the workers that are gone: %s", exc)
    return forgotten


def run_worker(redis_url: str, *, burst: bool = False, name: str | None = None) -> bool:
    """Run an RQ worker on Agent Arena's queues until it is told to stop (SIGTERM/SIGINT).

    The worker also runs RQ's scheduler (one per Redis, by lock), which requeues jobs whose
    retry is due.

    Returns:
        True when it did any work (RQ's own answer).
    """
    connection = redis.Redis.from_url(redis_url)
    queues = [Queue(q, connection=connection, serializer=JSONSerializer) for q in QUEUE_NAMES]
    worker = Worker(queues, connection=connection, name=name, serializer=JSONSerializer)
    logger.info("worker %s listening on %s", worker.name, ", ".join(QUEUE_NAMES))
    try:
        return bool(worker.work(burst=burst, logging_level="WARNING", with_scheduler=True))
    finally:
        connection.close()
