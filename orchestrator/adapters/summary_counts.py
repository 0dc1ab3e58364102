"""Each group's count of messages since its last rolling summary, kept in Redis (one counter
per group), so that it survives restarts and is shared by several daemons. When a summary is
due is decided in :mod:`orchestrator.runtime.triggers`."""

from __future__ import annotations

from collections.abc import Sequence

from orchestrator.adapters.redis_client import AsyncConnection, translating
from orchestrator.core.wire import summary_counter_key

__all__ = ["SummaryCounts"]


class SummaryCounts:
    """The groups' counters. Every method raises :class:`~orchestrator.errors.BusError` when
    Redis fails."""

    def __init__(self, redis: AsyncConnection) -> None:
        self.redis = redis

    @translating
    async def add(self, counts: Sequence[tuple[str, int]]) -> list[int]:
        """Add each ``(group, stored)`` to its group's counter, in one round trip.

        Returns:
            Each counter afterwards, in the order of ``counts``.
        """
        pipe = self.redis.pipeline(transaction=False)
        for group, stored in counts:
            pipe.incrby(summary_counter_key(group), stored)
        return [int(total) for total in await pipe.execute()]

    @translating
    async def reset(self, group: str) -> None:
        """Start ``group``'s count again from zero (its summary was enqueued)."""
        await self.redis.set(summary_counter_key(group), 0)

    @translating
    async def status_of(self, job_key: str) -> str | None:
        """The status RQ keeps for the job whose hash is ``job_key`` (None: no such job)."""
        found = await self.redis.hget(job_key, "status")
        if isinstance(found, bytes):
            return found.decode()
        return found
