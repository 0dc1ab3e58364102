"""Each group's count of messages since its last rolling summary, kept in Redis (one counter
per group), so that it survives restarts and is shared by several daemons. When a summary is
due is decided in :mod:`orchestrator.runtime.triggers`."""

from __future__ import annotations

from collections.abc import Sequence

from orchestrator.adapters.redis_client import AsyncConnection, translating
from orchestrator.core.wire import summary_counter_key

__all__ = ["SummaryCounts"]

# The job's status; the group's count set to zero when the job is there and has not ended.
_STATUS_RESETTING = """
local status = redis.call('HGET', KEYS[1], 'status')
if status then
  for i = 1, #ARGV do
    if ARGV[i] == status then return status end
  end
  redis.call('SET', KEYS[2], 0)
end
return status
"""


# Each counter increased by its amount, in order, and every total given back: one reply for
# all the groups of a batch, where a pipeline of INCRBY has one each.
_ADD = """
local totals = {}
for i = 1, #KEYS do
  totals[i] = redis.call('INCRBY', KEYS[i], ARGV[i])
end
return totals
"""


class SummaryCounts:
    """The groups' counters. Every method raises :class:`~orchestrator.errors.BusError` when
    Redis fails."""

    def __init__(self, redis: AsyncConnection) -> None:
        self.redis = redis
        self._status_resetting = redis.register_script(_STATUS_RESETTING)
        self._add = redis.register_script(_ADD)

    @translating
    async def add(self, counts: Sequence[tuple[str, int]]) -> list[int]:
        """Add each ``(group, stored)`` to its group's counter, in one round trip.

        Returns:
            Each counter afterwards, in the order of ``counts``.
        """
        if not counts:
            return []
        keys = [summary_counter_key(group) for group, _ in counts]
        totals = await self._add(keys=keys, args=[stored for _, stored in counts])
        return [int(total) for total in totals]

    @translating
    async def reset(self, group: str) -> None:
        """Start ``group``'s count again from zero (its summary was enqueued)."""
        await self.redis.set(summary_counter_key(group), 0)

    @translating
    async def status_resetting(self, job_key: str, group: str, ended: Sequence[str]) -> str | None:
        """The status RQ keeps for the job whose hash is ``job_key`` (None: no such job), and
        ``group``'s count started again (:meth:`reset`) when the job is there with a status
        not in ``ended`` (waiting or running: it reads the group's messages when it runs), in
        one round trip."""
        found = await self._status_resetting(
            keys=[job_key, summary_counter_key(group)], args=list(ended)
        )
        if isinstance(found, bytes):
            return found.decode()
        return found if isinstance(found, str) else None
