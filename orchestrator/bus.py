"""Redis in and out: the inbound stream read through a consumer group, the groups' outbound
streams, and the dead-letter stream. Stream and key names live in ``wire.py``."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import RedisError, ResponseError

from orchestrator.errors import BusError
from orchestrator.wire import (
    CONSUMER_GROUP,
    Outbound,
    deadletter_stream,
    inbox_stream,
    outbox_stream,
    published_key,
    stats_key,
)

__all__ = ["Bus", "Entry"]

logger = logging.getLogger(__name__)

Entry = tuple[str, dict[bytes, bytes]]

# Append to the outbound stream only if this item was never published: the marker key and
# the entry are written in one atomic step, so a crash cannot publish an item twice.
_PUBLISH_ONCE = """
if redis.call('SET', KEYS[1], '1', 'NX', 'EX', ARGV[1]) then
  return redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[2], '*', unpack(ARGV, 3))
end
return false
"""

PUBLISHED_TTL_S = 14 * 24 * 3600


def _entries(response: Any) -> list[Entry]:
    entries: list[Entry] = []
    for _stream, items in response or []:
        for entry_id, fields in items:
            key = entry_id.decode() if isinstance(entry_id, bytes) else str(entry_id)
            entries.append((key, fields or {}))
    return entries


class Bus:
    """The daemon's side of the Redis streams."""

    def __init__(self, redis: Redis, consumer: str, *, outbox_maxlen: int = 100_000) -> None:
        self.redis = redis
        self.consumer = consumer
        self.outbox_maxlen = outbox_maxlen
        self._publish_once = redis.register_script(_PUBLISH_ONCE)

    async def ensure_group(self) -> None:
        """Create the inbound stream and its consumer group if they do not exist.

        The group starts at the stream's beginning, so messages posted before the first
        start of the daemon are handled too.
        """
        try:
            await self.redis.xgroup_create(inbox_stream(), CONSUMER_GROUP, id="0", mkstream=True)
        except ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise BusError(f"cannot create consumer group: {exc}") from exc

    async def read_new(self, count: int, block_ms: int) -> list[Entry]:
        """Entries never delivered to any consumer."""
        response = await self.redis.xreadgroup(
            CONSUMER_GROUP, self.consumer, {inbox_stream(): ">"}, count=count, block=block_ms
        )
        return _entries(response)

    async def read_own_pending(self, count: int = 1000) -> list[Entry]:
        """Entries delivered to this consumer and never acknowledged (a previous run died)."""
        entries: list[Entry] = []
        last = "0"
        while True:
            response = await self.redis.xreadgroup(
                CONSUMER_GROUP, self.consumer, {inbox_stream(): last}, count=count
            )
            batch = [(i, f) for i, f in _entries(response) if f]
            if not batch:
                return entries
            entries.extend(batch)
            last = batch[-1][0]

    async def claim_stale(self, min_idle_ms: int, count: int = 100) -> list[Entry]:
        """Take over entries another consumer left unacknowledged for ``min_idle_ms``."""
        entries: list[Entry] = []
        start = "0-0"
        while True:
            response = await self.redis.xautoclaim(
                inbox_stream(), CONSUMER_GROUP, self.consumer, min_idle_ms, start, count=count
            )
            next_start, claimed = response[0], response[1]
            for entry_id, fields in claimed:
                if fields:
                    key = entry_id.decode() if isinstance(entry_id, bytes) else str(entry_id)
                    entries.append((key, fields))
            next_text = next_start.decode() if isinstance(next_start, bytes) else str(next_start)
            if next_text == "0-0":
                return entries
            start = next_text

    async def ack(self, entry_id: str) -> None:
        """Acknowledge an inbound entry: it is done and will not be delivered again."""
        await self.redis.xack(inbox_stream(), CONSUMER_GROUP, entry_id)

    async def publish(self, item: Outbound) -> bool:
        """Append ``item`` to its group's outbound stream unless it was appended before.

        Returns:
            True when it was appended now, False when it had been already.
        """
        fields = item.fields()
        args: list[str | int] = [PUBLISHED_TTL_S, self.outbox_maxlen]
        for name, value in fields.items():
            args.extend((name, value))
        result = await self._publish_once(
            keys=[published_key(item.id), outbox_stream(item.group)], args=args
        )
        return result is not None

    async def dead_letter(self, entry_id: str, raw: Mapping[bytes, bytes], reason: str) -> None:
        """Move a rejected inbound entry to the dead-letter stream, with its reason."""
        fields: dict[str | bytes, str | bytes] = {"entry_id": entry_id, "reason": reason}
        for name, value in raw.items():
            fields[b"field:" + name] = value
        await self.redis.xadd(deadletter_stream(), fields)  # type: ignore[arg-type]

    async def count(self, amounts: Mapping[str, int]) -> None:
        """Add to the running totals ``arena status`` shows."""
        pipe = self.redis.pipeline(transaction=False)
        for name, amount in amounts.items():
            if amount:
                pipe.hincrby(stats_key(), name, amount)
        await pipe.execute()

    async def stats(self) -> dict[str, Any]:
        """Stream lengths and pending counts (``arena status``)."""
        return await stream_stats(self.redis)


async def stream_stats(redis: Redis) -> dict[str, Any]:
    """Inbound length, pending entries per consumer, dead letters."""
    try:
        inbox_len = await redis.xlen(inbox_stream())
        dead_len = await redis.xlen(deadletter_stream())
        pending: dict[str, int] = {}
        lag: int | None = None
        oldest_idle_ms = 0
        consumers: list[dict[str, Any]] = []
        try:
            summary = await redis.xpending(inbox_stream(), CONSUMER_GROUP)
            for row in summary.get("consumers") or []:
                pending[
                    str(row["name"], "utf-8")
                    if isinstance(row["name"], bytes)
                    else str(row["name"])
                ] = int(row["pending"])
            groups = await redis.xinfo_groups(inbox_stream())
            for group in groups:
                name = group.get("name")
                if (name.decode() if isinstance(name, bytes) else name) == CONSUMER_GROUP:
                    lag = await _lag(redis, group)
            oldest = await redis.xpending_range(
                inbox_stream(), CONSUMER_GROUP, min="-", max="+", count=1
            )
            oldest_idle_ms = int(oldest[0]["time_since_delivered"]) if oldest else 0
            consumers = [
                {
                    "name": _str(c.get("name")),
                    "pending": int(c.get("pending", 0)),
                    "idle_ms": int(c.get("idle", 0)),
                }
                for c in await redis.xinfo_consumers(inbox_stream(), CONSUMER_GROUP)
            ]
        except ResponseError:
            pass
    except RedisError as exc:
        raise BusError(f"cannot read stream statistics: {exc}") from exc
    totals = {
        (k.decode() if isinstance(k, bytes) else str(k)): int(v)
        for k, v in (await redis.hgetall(stats_key())).items()
    }
    return {
        "totals": totals,
        "inbox_length": inbox_len,
        "pending": sum(pending.values()),
        "pending_by_consumer": pending,
        "lag": lag,
        "oldest_pending_idle_ms": oldest_idle_ms,
        "consumers": consumers,
        "dead_letters": dead_len,
    }


def _str(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


async def _lag(redis: Redis, group: dict[str, Any]) -> int:
    """Entries not yet delivered to the consumer group (Redis 7 reports it; 6.2 does not)."""
    if group.get("lag") is not None:
        return int(group["lag"])
    last = _str(group.get("last-delivered-id", "0-0"))
    newer = await redis.xrange(inbox_stream(), min=f"({last}", max="+", count=100_000)
    return len(newer or [])
