"""A summary job enqueued from the event loop, in one round trip.

RQ's own enqueue (:func:`orchestrator.background.queue.enqueue_summary`) is blocking: the
daemon runs it in a worker thread, and its four round trips through a thread cost a turn's CPU
several times over while the loop is busy (the thread and the loop pass the interpreter's lock
back and forth at each one). The job here is made by RQ (``Queue.create_job``, serialized by
``Job.to_dict``, as ``Queue.enqueue_call`` makes it) and stored by RQ's own script for a unique
enqueue, with the queue registered and the group's count started again in the same pipeline,
on the daemon's asynchronous connection. A worker cannot tell the two apart (tested against
RQ's enqueue, field by field).

Only a job whose id is free is enqueued here: one that exists (queued, running, or ended and
due to be replaced) is left to :func:`~orchestrator.background.queue.enqueue_summary`, which
decides under its guard.
"""

from __future__ import annotations

from typing import Any

from rq.job import JobStatus
from rq.scripts import UNIQUE_ENQUEUE_SCRIPT
from rq.utils import now

from orchestrator.adapters.redis_client import (
    AsyncConnection,
    Connection,
    ScriptUnknown,
    translating,
)
from orchestrator.background.queue import (
    SUMMARY_JOB,
    JobPolicy,
    job_options,
    queue,
    summary_job_id,
    summary_meta,
)
from orchestrator.core.wire import summary_counter_key, validate_group
from orchestrator.settings import Settings

__all__ = ["SummaryEnqueuer"]


class SummaryEnqueuer:
    """Enqueues open-range summary jobs whose id is free, on the event loop."""

    def __init__(self, redis: AsyncConnection, sync: Connection, settings: Settings) -> None:
        """Store through ``redis``; ``sync`` only lets RQ build the job (it sends nothing)."""
        self._redis = redis
        self._queue = queue(sync)
        self._policy = JobPolicy.from_settings(settings)
        self._script = redis.register_script(UNIQUE_ENQUEUE_SCRIPT)

    @translating
    async def enqueue(self, group: str, trigger: str) -> bool:
        """Enqueue ``group``'s summary of its latest messages unless a job with its id exists,
        and start the group's count again from zero (in the same round trip).

        Returns:
            True when enqueued; False when the id is taken (left to ``enqueue_summary``).

        Raises:
            ValidationError: if ``group`` is not a valid group id.
            BusError: when Redis fails.
        """
        validate_group(group)
        job, fields = self._job(group, trigger)
        ttl = job.ttl if job.ttl is not None else -1
        args = [job.key, self._queue.key, job.id, "R", ttl, *fields]
        try:
            return await self._store(group, args)
        except ScriptUnknown:  # a server restarted or flushed: given the script, once more
            await self._redis.script_load(UNIQUE_ENQUEUE_SCRIPT)
            return await self._store(group, args)

    async def _store(self, group: str, args: list[Any]) -> bool:
        # The script by its digest: a pipeline given the script itself asks the server whether
        # it knows it first, a round trip of its own at every enqueue.
        pipe = self._redis.pipeline(transaction=False)
        pipe.sadd(self._queue.redis_queues_keys, self._queue.key)
        pipe.evalsha(self._script.sha, 2, *args)
        pipe.set(summary_counter_key(group), 0)
        _, added, _ = await pipe.execute()
        return bool(added)

    def _job(self, group: str, trigger: str) -> tuple[Any, list[Any]]:
        """The job as ``Queue.enqueue_call`` makes it, and its hash's fields."""
        job = self._queue.create_job(
            SUMMARY_JOB,
            args=(group, None, trigger),
            job_id=summary_job_id(group, None),
            status=JobStatus.QUEUED,
            **job_options(self._policy, summary_meta(group, None, trigger)),
        )
        job.enqueued_at = now()
        fields: list[Any] = []
        for key, value in job.to_dict().items():
            if value is not None:
                fields += [key, value if isinstance(value, bytes | str) else str(value)]
        return job, fields
