"""The partitioner: moves entries from the inbox, in the order they were posted, to their group's
partition stream, keeping each entry's id (``arena status`` calls this role "router").

Only the daemon holding the ``router`` lease runs it (through
:meth:`orchestrator.adapters.bus.Bus.route`). Each batch moves in one Lua script that
acknowledges an entry before copying it, so an entry is moved once even if two daemons both
believe they are the router for a moment, and removes it from the inbox once moved.
"""

from __future__ import annotations

import logging
from typing import Any, cast

from orchestrator.adapters.redis_client import AsyncConnection, translated
from orchestrator.core.wire import CONSUMER_GROUP, inbox_stream, partition_of, partition_stream

__all__ = ["Partitioner"]

logger = logging.getLogger(__name__)

# KEYS[1]: the inbox. ARGV: the consumer group, then per entry: id, target stream, field count,
# then the fields as name, value pairs. An entry already acknowledged was moved before.
# A target that already has a newer id (two routers for a moment) gets a new id, and the
# original one in the ``id`` field.
_MOVE = """
local i = 2
local moved = 0
while i <= #ARGV do
  local id, target, n = ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2])
  local fields = {}
  for j = i + 3, i + 2 + 2 * n do table.insert(fields, ARGV[j]) end
  i = i + 3 + 2 * n
  if redis.call('XACK', KEYS[1], ARGV[1], id) == 1 then
    local ok = redis.pcall('XADD', target, id, unpack(fields))
    if type(ok) == 'table' and ok.err then
      table.insert(fields, 'id')
      table.insert(fields, id)
      redis.call('XADD', target, '*', unpack(fields))
    end
    moved = moved + 1
  end
  redis.call('XDEL', KEYS[1], id)
end
return moved
"""


class Partitioner:
    """Moves inbound entries to their partition streams."""

    def __init__(self, redis: AsyncConnection, consumer: str) -> None:
        self.redis = redis
        self.consumer = consumer
        self._move = redis.register_script(_MOVE)

    async def step(self, count: int, block_ms: int, *, claim: bool) -> int:
        """Move up to ``count`` new entries; with ``claim``, first every entry read but not
        moved before (by another router, or by this one before Redis went away).

        Returns:
            How many entries were moved.

        Raises:
            BusError: Redis failed (``BusUnavailable``: it did not answer).
        """
        with translated():
            return await self._step(count, block_ms, claim=claim)

    async def _step(self, count: int, block_ms: int, *, claim: bool) -> int:
        moved = 0
        start: bytes | str = "0-0"
        while claim:
            claimed = await self.redis.xautoclaim(
                inbox_stream(), CONSUMER_GROUP, self.consumer, 0, start, count=count
            )
            moved += await self._move_batch([(i, f) for i, f in claimed[1] if f])
            start = claimed[0]
            claim = start not in (b"0-0", "0-0")
        response = await self.redis.xreadgroup(
            CONSUMER_GROUP, self.consumer, {inbox_stream(): ">"}, count=count, block=block_ms
        )
        read = cast(list[tuple[Any, list[tuple[bytes, dict[bytes, bytes]]]]], response or [])
        new: list[tuple[bytes | str, dict[bytes, bytes]]] = [
            (i, f) for _stream, items in read for i, f in items if f
        ]
        moved += await self._move_batch(new)
        return moved

    async def _move_batch(self, entries: list[tuple[bytes | str, dict[bytes, bytes]]]) -> int:
        if not entries:
            return 0
        args: list[bytes | str | int] = [CONSUMER_GROUP]
        for entry_id, fields in entries:
            target = partition_stream(partition_of(fields.get(b"group", b"")))
            args += [entry_id, target, len(fields)]
            for name, value in fields.items():
                args += [name, value]
        return int(await self._move(keys=[inbox_stream()], args=args))
