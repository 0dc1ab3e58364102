"""Redis in and out: the inbound stream read through a consumer group (and moved to the
partitions by :mod:`orchestrator.adapters.partitioner`), the groups' outbound streams, and the
dead-letter stream, which only :meth:`Bus.dead_letter` writes. Stream and key names live in
``wire.py``; what the streams look like for ``arena status`` is read in
:mod:`orchestrator.adapters.stream_stats`.

Every method raises :class:`~orchestrator.errors.BusError` when Redis fails
(:class:`~orchestrator.errors.BusUnavailable` when it does not answer), never redis-py's errors.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from orchestrator.adapters.partitioner import Partitioner
from orchestrator.adapters.redis_client import AsyncConnection, translated
from orchestrator.core.batching import Coalescer
from orchestrator.core.models import ChatMessage
from orchestrator.core.wire import (
    CONSUMER_GROUP,
    PARTITIONS,
    Outbound,
    deadletter_stream,
    inbox_stream,
    outbox_stream,
    partition_stream,
    published_key,
    stats_key,
    team_key,
)
from orchestrator.errors import BusError, BusUnavailable

__all__ = ["Bus", "DeadLetter", "Entry", "decode_entries", "inbound_streams"]

logger = logging.getLogger(__name__)


class Entry(NamedTuple):
    """One stream entry as read: its stream, its id and its raw fields."""

    stream: str
    id: str
    fields: dict[bytes, bytes]


# Append each item to its outbound stream only if it was never published: an item's marker
# key and its entry are written in one atomic step, so a crash cannot publish it twice.
# KEYS: marker, stream per item. ARGV: ttl, maxlen, then per item its field count and fields.
# Returns one flag per item: 1 when appended now, 0 when it had been before.
_PUBLISH_ONCE = """
local published = {}
local at = 3
for i = 1, #KEYS, 2 do
  local n = tonumber(ARGV[at])
  if redis.call('SET', KEYS[i], '1', 'NX', 'EX', ARGV[1]) then
    redis.call('XADD', KEYS[i + 1], 'MAXLEN', '~', ARGV[2], '*', unpack(ARGV, at + 1, at + n))
    published[#published + 1] = 1
  else
    published[#published + 1] = 0
  end
  at = at + n + 1
end
return published
"""

PUBLISHED_TTL_S = 14 * 24 * 3600
REASON_LIMIT = 500  # characters of a dead letter's reason


@dataclass(frozen=True, slots=True, kw_only=True)
class DeadLetter:
    """A message kept on the dead-letter stream for ``arena dead-letters`` and ``arena retry``:
    its id, why it was not answered, and its fields as they were posted (``group``,
    ``sender``, ``text`` when they were readable)."""

    entry_id: str
    reason: str
    fields: Mapping[bytes, bytes] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.entry_id:
            raise ValueError("a dead letter needs the id of its message")

    @classmethod
    def of(cls, message: ChatMessage, reason: str) -> DeadLetter:
        """A message that was read but could not be answered (``reason`` is cut to
        :data:`REASON_LIMIT` characters)."""
        fields = {
            b"group": message.group.encode(),
            b"sender": message.sender.encode(),
            b"text": message.text.encode(),
        }
        return cls(entry_id=message.id, reason=reason[:REASON_LIMIT], fields=fields)

    def stream_fields(self) -> dict[str | bytes, str | bytes]:
        """The entry written to the dead-letter stream: each posted field as ``field:NAME``."""
        written: dict[str | bytes, str | bytes] = {"entry_id": self.entry_id, "reason": self.reason}
        for name, value in self.fields.items():
            written[b"field:" + name] = value
        return written


def _str(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def decode_entries(response: Any) -> list[Entry]:
    """The entries of an ``XREAD``/``XREADGROUP`` response (deleted ones, with no fields, left
    out)."""
    entries: list[Entry] = []
    for stream, items in response or []:
        name = _str(stream)
        for entry_id, fields in items:
            if fields:
                entries.append(Entry(name, _str(entry_id), fields))
    return entries


def inbound_streams() -> list[str]:
    """The inbox and every partition stream: all that is read through the consumer group."""
    return [inbox_stream()] + [partition_stream(p) for p in range(PARTITIONS)]


class Bus:
    """The daemon's side of the Redis streams."""

    def __init__(
        self, redis: AsyncConnection, consumer: str, *, outbox_maxlen: int = 100_000
    ) -> None:
        self.redis = redis
        self.consumer = consumer
        self.outbox_maxlen = outbox_maxlen
        self._publish_once = redis.register_script(_PUBLISH_ONCE)
        self._partitioner = Partitioner(redis, consumer)
        # Handlers of different groups finishing at about the same moment share round trips.
        self._acks: Coalescer[tuple[str, str], None] = Coalescer(self._ack_many, name="acks")
        self._publishes: Coalescer[Sequence[Outbound], int] = Coalescer(
            self._publish_many, name="publish"
        )

    async def ensure_group(self) -> None:
        """Create the inbound streams and their consumer group where they do not exist.

        The group starts at each stream's beginning, so messages posted before the first
        start of the daemon are handled too.
        """
        for stream in inbound_streams():
            try:
                with translated():
                    await self.redis.xgroup_create(stream, CONSUMER_GROUP, id="0", mkstream=True)
            except BusUnavailable:
                raise
            except BusError as exc:
                if "BUSYGROUP" not in exc.problem:
                    raise BusError(f"cannot create consumer group: {exc.problem}") from exc

    async def record_team(self, names: Iterable[str]) -> None:
        """Record the team's ids and names (``team_key``), replacing the last daemon's, so that
        clients refuse a person's post under one of them before sending it."""
        pipe = self.redis.pipeline(transaction=True)
        pipe.delete(team_key())
        pipe.sadd(team_key(), *sorted(names))
        with translated():
            await pipe.execute()

    async def read_new(self, streams: list[str], count: int, block_ms: int) -> list[Entry]:
        """Entries of ``streams`` never delivered to any consumer."""
        with translated():
            response = await self.redis.xreadgroup(
                CONSUMER_GROUP,
                self.consumer,
                dict.fromkeys(streams, ">"),
                count=count,
                block=block_ms,
            )
        return decode_entries(response)

    async def route(self, count: int, block_ms: int, *, claim: bool) -> int:
        """Move up to ``count`` new inbound entries to their partitions (the router's work);
        with ``claim``, first every entry read but not moved before.

        Returns:
            How many entries were moved.
        """
        return await self._partitioner.step(count, block_ms, claim=claim)

    async def claim(self, stream: str, min_idle_ms: int, count: int = 100) -> list[Entry]:
        """Take over the entries of ``stream`` left unacknowledged for ``min_idle_ms`` by any
        consumer (this one included), oldest first."""
        entries: list[Entry] = []
        start = "0-0"
        while True:
            with translated():
                response = await self.redis.xautoclaim(
                    stream, CONSUMER_GROUP, self.consumer, min_idle_ms, start, count=count
                )
            next_start, claimed = response[0], response[1]
            entries.extend(
                Entry(stream, _str(entry_id), fields) for entry_id, fields in claimed if fields
            )
            if _str(next_start) == "0-0":
                return entries
            start = _str(next_start)

    def ack(self, stream: str, entry_id: str) -> asyncio.Future[None]:
        """Acknowledge an inbound entry and remove it: it is done (its replies are stored and
        published) and will not be delivered again. Call it from a coroutine.

        The future is done once it is acknowledged (a future, not a coroutine: a handler
        shields it without a task of its own). Entries acknowledged at about the same moment
        (by different groups' handlers) go to Redis together, in one round trip.
        """
        return self._acks.submit((stream, entry_id))

    async def _ack_many(self, entries: list[tuple[str, str]]) -> list[None]:
        # One XACK and one XDEL per stream, for all of its entries: a command's reply costs
        # more to read than its ids to write, and in a transaction each is read twice.
        by_stream: dict[str, list[str]] = {}
        for stream, entry_id in entries:
            by_stream.setdefault(stream, []).append(entry_id)
        pipe = self.redis.pipeline(transaction=True)
        for stream, ids in by_stream.items():
            pipe.xack(stream, CONSUMER_GROUP, *ids)
            pipe.xdel(stream, *ids)
        with translated():
            await pipe.execute()
        return [None] * len(entries)

    async def publish_all(self, items: Sequence[Outbound]) -> int:
        """Append each of ``items``, in order and in one step, unless it was appended before.

        Items published at about the same moment by other callers go in the same step (one
        script call), each caller's in its order.

        Returns:
            How many were appended now.
        """
        if not items:
            return 0
        return await self._publishes(items)

    async def _publish_many(self, requests: list[Sequence[Outbound]]) -> list[int]:
        keys: list[str] = []
        args: list[str | int] = [PUBLISHED_TTL_S, self.outbox_maxlen]
        for items in requests:
            for item in items:
                keys += [published_key(item.id), outbox_stream(item.group)]
                fields = item.fields()
                args.append(2 * len(fields))
                for name, value in fields.items():
                    args.extend((name, value))
        with translated():
            flags = [int(flag) for flag in await self._publish_once(keys=keys, args=args)]
        counts: list[int] = []
        at = 0
        for items in requests:
            counts.append(sum(flags[at : at + len(items)]))
            at += len(items)
        return counts

    async def dead_letter(self, letter: DeadLetter) -> None:
        """Keep ``letter`` on the dead-letter stream: the one place that writes to it."""
        with translated():
            await self.redis.xadd(deadletter_stream(), letter.stream_fields())  # type: ignore[arg-type]

    async def count(self, amounts: Mapping[str, int]) -> None:
        """Add to the running totals ``arena status`` shows."""
        pipe = self.redis.pipeline(transaction=False)
        for name, amount in amounts.items():
            if amount:
                pipe.hincrby(stats_key(), name, amount)
        with translated():
            await pipe.execute()
