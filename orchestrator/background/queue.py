"""The ``arena`` queue and enqueue-once: job ids, the retry and keep policy, and the rule for
when a job with a taken id may run again.

Three kinds of job run on the ``arena`` queue, all with the JSON serializer (their bodies are
in :mod:`orchestrator.background.jobs`, named here by the dotted path RQ records and the
worker imports: enqueuing a job, or reading the queue for ``arena status``, does not import
what runs it):

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
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from typing import Any

from rq import Queue, Retry
from rq.exceptions import DuplicateJobError, NoSuchJobError
from rq.job import Job, JobStatus
from rq.serializers import JSONSerializer

from orchestrator.adapters.redis_client import Connection, translated
from orchestrator.core.wire import job_guard_key, validate_group
from orchestrator.memory.personal import PersonalLog
from orchestrator.settings import Settings

__all__ = [
    "DISTILL_JOB",
    "ENDED_STATUSES",
    "PRUNE_JOB",
    "QUEUE_NAMES",
    "RUNS_QUEUE",
    "RUN_JOB",
    "SUMMARY_JOB",
    "EnqueueResult",
    "JobPolicy",
    "distill_job_id",
    "enqueue_distill",
    "enqueue_prune",
    "enqueue_run",
    "enqueue_summary",
    "fetch_job",
    "job_options",
    "prune_job_id",
    "queue",
    "summary_job_id",
    "summary_meta",
]

QUEUE_NAMES = ("arena",)
# Claude Code runs take minutes: they have their own queue and workers (``ARENA_RUN_WORKERS``).
RUNS_QUEUE = "runs"
RUN_JOB = "orchestrator.runtime.run_job.run_job"
DAY_S = 24 * 3600
GUARD_TTL_S = 30
_BUSY = {
    JobStatus.QUEUED: "already queued",
    JobStatus.STARTED: "already running",
    JobStatus.SCHEDULED: "waiting to be retried",
    JobStatus.DEFERRED: "waiting for another job",
    JobStatus.CREATED: "being enqueued",
}
_ENDED = (JobStatus.FINISHED, JobStatus.FAILED, JobStatus.STOPPED, JobStatus.CANCELED)
ENDED_STATUSES = tuple(status.value for status in _ENDED)  # a job that may be replaced
_JOBS = "orchestrator.background.jobs"
DISTILL_JOB = f"{_JOBS}.distill_job"
SUMMARY_JOB = f"{_JOBS}.summary_job"
PRUNE_JOB = f"{_JOBS}.prune_job"


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


@dataclass(frozen=True, slots=True, kw_only=True)
class _Request:
    """One job to enqueue once: what runs, under which id, and what decides a rerun."""

    func: str  # the job function's dotted path
    args: tuple[Any, ...]
    job_id: str
    meta: dict[str, Any]
    revision: str | None
    force: bool
    policy: JobPolicy


def queue(connection: Connection) -> Queue:
    """The ``arena`` queue, with the JSON serializer."""
    return Queue(QUEUE_NAMES[0], connection=connection, serializer=JSONSerializer)


def distill_job_id(agent_id: str, day: date) -> str:
    """``distill_{agent}_{YYYY-MM-DD}`` (RQ allows only letters, digits, ``_`` and ``-``)."""
    return f"distill_{agent_id}_{day.isoformat()}"


def summary_job_id(group: str, upto_seq: int | None) -> str:
    """``summary_{group}_{upto}``, ``latest`` when the range is open."""
    return f"summary_{group}_{'latest' if upto_seq is None else upto_seq}"


def summary_job_key(group: str) -> str:
    """The Redis hash of ``group``'s open-range summary job (RQ keeps its status there)."""
    return str(Job.key_for(summary_job_id(group, None)))


def pending_detail(status: str | None) -> str | None:
    """Why a job in ``status`` (RQ's) is not enqueued again: it is queued, running or
    waiting; None when there is no such job, or it has ended (it may be replaced)."""
    try:
        known = JobStatus(status) if status is not None else None
    except ValueError:
        return None
    return None if known is None or known in _ENDED else _why_not(known)


def summary_meta(group: str, upto_seq: int | None, trigger: str) -> dict[str, Any]:
    """A summary job's meta: what ``arena jobs`` shows, and the revision a rerun compares."""
    revision = None if upto_seq is None else str(upto_seq)
    return {"kind": "summary", "target": group, "upto": upto_seq} | {
        "trigger": trigger,
        "revision": revision,
    }


def job_options(policy: JobPolicy, meta: dict[str, Any]) -> dict[str, Any]:
    """What RQ is given for a job besides its function, arguments and id: its meta and
    description (``kind target (trigger)``), time limit, retries and how long it is kept."""
    retry = None
    if policy.retries:
        retry = Retry(max=policy.retries, interval=list(policy.retry_intervals_s))
    return {
        "meta": meta,
        "description": f"{meta['kind']} {meta['target']} ({meta['trigger']})",
        "timeout": policy.timeout_s,
        "result_ttl": policy.keep_s,
        "failure_ttl": policy.keep_s,
        "retry": retry,
    }


def prune_job_id(day: date) -> str:
    """``prune_{YYYY-MM-DD}``: one retention run per day."""
    return f"prune_{day.isoformat()}"


def fetch_job(connection: Connection, job_id: str) -> Job | None:
    """The job with this id, if Redis still has it.

    Raises:
        BusError: when Redis cannot be read.
    """
    try:
        with translated():
            return Job.fetch(job_id, connection=connection, serializer=JSONSerializer)
    except NoSuchJobError:
        return None


def enqueue_distill(
    connection: Connection,
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
        BusError: when Redis cannot be reached.
    """
    log = PersonalLog(settings.workspaces_dir, settings.zone).path(agent_id, day)
    try:
        revision = str(log.stat().st_size)
    except FileNotFoundError:
        revision = "0"
    meta = {"kind": "distill", "target": agent_id, "day": day.isoformat()}
    request = _Request(
        func=DISTILL_JOB,
        args=(agent_id, day.isoformat(), trigger),
        job_id=distill_job_id(agent_id, day),
        meta=meta | {"trigger": trigger, "revision": revision},
        revision=revision,
        force=force,
        policy=policy or JobPolicy.from_settings(settings),
    )
    return _enqueue_once(connection, request)


def enqueue_summary(
    connection: Connection,
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
        BusError: when Redis cannot be reached.
    """
    validate_group(group)
    meta = summary_meta(group, upto_seq, trigger)
    request = _Request(
        func=SUMMARY_JOB,
        args=(group, upto_seq, trigger),
        job_id=summary_job_id(group, upto_seq),
        meta=meta,
        revision=meta["revision"],
        force=force,
        policy=policy or JobPolicy.from_settings(settings),
    )
    return _enqueue_once(connection, request)


def enqueue_prune(
    connection: Connection,
    day: date,
    trigger: str,
    *,
    settings: Settings,
    policy: JobPolicy | None = None,
) -> EnqueueResult:
    """Enqueue the retention run of ``day``, once a day.

    Raises:
        BusError: when Redis cannot be reached.
    """
    meta = {"kind": "prune", "target": "storage", "day": day.isoformat()}
    request = _Request(
        func=PRUNE_JOB,
        args=(day.isoformat(), trigger),
        job_id=prune_job_id(day),
        meta=meta | {"trigger": trigger, "revision": day.isoformat()},
        revision=day.isoformat(),
        force=False,
        policy=policy or JobPolicy.from_settings(settings),
    )
    return _enqueue_once(connection, request)


def _enqueue_once(connection: Connection, request: _Request) -> EnqueueResult:
    with translated():
        return _enqueue_or_replace(connection, request)


def _enqueue_or_replace(connection: Connection, request: _Request) -> EnqueueResult:
    job_id = request.job_id
    if _submit(connection, request):
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
            why = _replace_reason(existing, status, request.revision, request.force)
            if why is None:
                return EnqueueResult(
                    job_id=job_id, enqueued=False, status=status.value, detail=_why_not(status)
                )
            existing.delete()
        else:
            why = "enqueued"  # it expired in between
        if not _submit(connection, request):
            return EnqueueResult(
                job_id=job_id, enqueued=False, status="queued", detail="already queued"
            )
        return EnqueueResult(job_id=job_id, enqueued=True, status="queued", detail=why)
    finally:
        connection.delete(job_guard_key(job_id))


def _submit(connection: Connection, request: _Request) -> bool:
    """Enqueue unless a job with the request's id exists (one atomic step in Redis)."""
    try:
        queue(connection).enqueue_call(
            request.func,
            args=request.args,
            job_id=request.job_id,
            unique=True,
            **job_options(request.policy, request.meta),
        )
    except DuplicateJobError:
        return False
    return True


def _replace_reason(job: Job, status: JobStatus, revision: str | None, force: bool) -> str | None:
    """Why an existing job may be replaced by a new run; None when it may not."""
    if status not in _ENDED:
        return None
    if force:
        return "forced to run again"
    if revision is None or job.get_meta(refresh=False).get("revision") != revision:
        return "input changed since the last run"
    return None


def _why_not(status: JobStatus) -> str:
    if status is JobStatus.FINISHED:
        return "already done for this input"
    if status in _ENDED:
        return f"{status.value} earlier for this input (force a new run to retry it)"
    return _BUSY.get(status, str(status.value))


def enqueue_run(connection: Connection, run_id: str, job_id: str, timeout_s: int) -> bool:
    """Enqueue a Claude Code run on the ``runs`` queue, once (False: its job exists).

    One retry: when its worker dies, RQ runs the job again, which finds the run started and
    reports it lost (a run is never run twice).

    Raises:
        BusError: when Redis cannot be reached.
    """
    with translated():
        try:
            Queue(RUNS_QUEUE, connection=connection, serializer=JSONSerializer).enqueue_call(
                RUN_JOB,
                args=(run_id,),
                job_id=job_id,
                meta={"kind": "run", "target": run_id, "trigger": "asked"},
                timeout=timeout_s,
                result_ttl=DAY_S,
                failure_ttl=8 * DAY_S,
                retry=Retry(max=1, interval=[1]),
                description=f"run {run_id}",
                unique=True,
            )
        except DuplicateJobError:
            return False
    return True
