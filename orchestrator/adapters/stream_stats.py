"""What the inbound streams look like right now, read from Redis as typed values: entries
waiting and in hand, pending entries per consumer, lag, dead letters, and who holds each
partition, the router lease and a place among the live daemons (``arena status``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import RedisError, ResponseError

from orchestrator.adapters.bus import inbound_streams
from orchestrator.core.wire import (
    CONSUMER_GROUP,
    PARTITIONS,
    daemons_key,
    deadletter_stream,
    lease_key,
    stats_key,
)
from orchestrator.errors import BusError

__all__ = ["ConsumerInfo", "Partition", "Streams", "stream_stats"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerInfo:
    """What Redis (XINFO CONSUMERS) says of a daemon reading the inbound streams: entries in
    hand, and how long since it read."""

    name: str
    pending: int
    idle_ms: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Partition:
    """One inbound partition: its length, entries in hand, and the daemon holding it."""

    partition: int
    length: int
    pending: int
    owner: str | None


@dataclass(frozen=True, slots=True, kw_only=True)
class Streams:
    """The inbound streams, the live daemons and the leases they hold; ``totals`` are the
    daemons' counters by name (``memory_saved``, ``markers_invalid``, ...)."""

    totals: dict[str, int] = field(default_factory=dict)
    inbox_length: int = 0
    pending: int = 0
    pending_by_consumer: dict[str, int] = field(default_factory=dict)
    lag: int | None = None
    oldest_pending_idle_ms: int = 0
    consumers: tuple[ConsumerInfo, ...] = ()
    dead_letters: int = 0
    router: str | None = None
    daemons: tuple[str, ...] = ()
    partitions: tuple[Partition, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class _OneStream:
    """One inbound stream's length, pending entries and consumers' idle times, and lag."""

    length: int
    pending: dict[str, int] = field(default_factory=dict)
    idle: dict[str, int] = field(default_factory=dict)
    lag: int | None = None
    oldest_idle_ms: int = 0


def _str(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _optional_str(value: Any) -> str | None:
    return None if value is None else _str(value)


async def stream_stats(redis: Redis) -> Streams:
    """The inbound streams, the live daemons and the leases they hold, as Redis has them.

    Raises:
        BusError: when Redis cannot be read.
    """
    try:
        per_stream = [await _one_stream(redis, stream) for stream in inbound_streams()]
        dead_len = await redis.xlen(deadletter_stream())
        names = [f"p{p}" for p in range(PARTITIONS)]
        holders = await redis.mget([lease_key(n) for n in [*names, "router"]])
        clock = await redis.time()
        now_ms = int(clock[0]) * 1000 + int(clock[1]) // 1000
        daemons = sorted(_str(m) for m in await redis.zrangebyscore(daemons_key(), now_ms, "+inf"))
        totals = {_str(k): int(v) for k, v in (await redis.hgetall(stats_key())).items()}
    except RedisError as exc:
        raise BusError(f"cannot read stream statistics: {exc}") from exc
    pending: dict[str, int] = {}
    idle: dict[str, int] = {}
    lags = [s.lag for s in per_stream]
    for stream in per_stream:
        for name, count in stream.pending.items():
            pending[name] = pending.get(name, 0) + count
        for name, ms in stream.idle.items():
            idle[name] = min(ms, idle.get(name, ms))
    return Streams(
        totals=totals,
        inbox_length=sum(s.length for s in per_stream),
        pending=sum(pending.values()),
        pending_by_consumer=pending,
        lag=None if all(lag is None for lag in lags) else sum(lag or 0 for lag in lags),
        oldest_pending_idle_ms=max(s.oldest_idle_ms for s in per_stream),
        consumers=tuple(
            ConsumerInfo(name=name, pending=pending.get(name, 0), idle_ms=ms)
            for name, ms in sorted(idle.items())
        ),
        dead_letters=dead_len,
        router=_optional_str(holders[-1]),
        daemons=tuple(daemons),
        partitions=tuple(
            Partition(
                partition=p,
                length=per_stream[p + 1].length,
                pending=sum(per_stream[p + 1].pending.values()),
                owner=_optional_str(holders[p]),
            )
            for p in range(PARTITIONS)
        ),
    )


async def _one_stream(redis: Redis, stream: str) -> _OneStream:
    """One inbound stream's length, pending entries, lag and consumers' idle times."""
    length = await redis.xlen(stream)
    pending: dict[str, int] = {}
    idle: dict[str, int] = {}
    lag: int | None = None
    oldest_idle_ms = 0
    try:
        summary = await redis.xpending(stream, CONSUMER_GROUP)
        for row in summary.get("consumers") or []:
            pending[_str(row["name"])] = int(row["pending"])
        for group in await redis.xinfo_groups(stream):
            if _str(group.get("name")) == CONSUMER_GROUP:
                lag = await _lag(redis, stream, group)
        oldest = await redis.xpending_range(stream, CONSUMER_GROUP, min="-", max="+", count=1)
        oldest_idle_ms = int(oldest[0]["time_since_delivered"]) if oldest else 0
        for consumer in await redis.xinfo_consumers(stream, CONSUMER_GROUP):
            idle[_str(consumer.get("name"))] = int(consumer.get("idle", 0))
    except ResponseError:
        pass  # no consumer group yet: nobody has read this stream
    return _OneStream(
        length=length, pending=pending, idle=idle, lag=lag, oldest_idle_ms=oldest_idle_ms
    )


async def _lag(redis: Redis, stream: str, group: dict[str, Any]) -> int:
    """Entries not yet delivered to the consumer group (Redis 7 reports it; 6.2 does not, nor
    does 7 when entries were deleted in between)."""
    if group.get("lag") is not None:
        return int(group["lag"])
    last = _str(group.get("last-delivered-id", "0-0"))
    newer = await redis.xrange(stream, min=f"({last}", max="+", count=100_000)
    return len(newer or [])
