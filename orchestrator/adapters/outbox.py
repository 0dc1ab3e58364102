"""Reading a group's outbound stream from asyncio: the console's live event streams follow it
(:mod:`orchestrator.web.feeds`) and ``arena status`` counts it. The daemon appends to it through
:meth:`orchestrator.adapters.bus.Bus.publish_all`. The group's runs' steps stream
(:func:`orchestrator.core.coding.steps_stream`, appended to by a run's worker) is read beside
it, in the same ``XREAD``.

Every method raises :class:`~orchestrator.errors.BusError` when Redis fails
(:class:`~orchestrator.errors.BusUnavailable` when it does not answer).
"""

from __future__ import annotations

from typing import Any, cast

from orchestrator.adapters.redis_client import AsyncConnection, translating
from orchestrator.core.coding import Seen, Step, in_order, steps_stream
from orchestrator.core.wire import Outbound, decode_fields, outbox_stream

__all__ = ["OutboxReader", "Posted"]

Posted = tuple[str, Outbound]  # (stream entry id, the item)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _items(rows: Any) -> list[Posted]:
    return [(_text(i), Outbound.from_fields(decode_fields(f))) for i, f in cast(list[Any], rows)]


def _steps(rows: Any) -> list[tuple[str, Step]]:
    return [(_text(i), Step.from_fields(decode_fields(f))) for i, f in cast(list[Any], rows)]


class OutboxReader:
    """Reads the groups' outbound streams over one connection pool."""

    def __init__(self, redis: AsyncConnection) -> None:
        self.redis = redis

    @translating
    async def newest_id(self, group: str) -> str:
        """The id of the group's newest outbound item (``0-0`` when it has none)."""
        newest = cast(list[Any], await self.redis.xrevrange(outbox_stream(group), count=1))
        return _text(newest[0][0]) if newest else "0-0"

    @translating
    async def length(self, group: str) -> int:
        """How many items the group's outbound stream holds."""
        return int(await self.redis.xlen(outbox_stream(group)))

    @translating
    async def after(self, group: str, after: str, count: int) -> list[Posted]:
        """Up to ``count`` items of the group posted after entry ``after``, at once."""
        rows = await self.redis.xrange(outbox_stream(group), min=f"({after}", max="+", count=count)
        return _items(rows)

    @translating
    async def wait_after(self, group: str, after: str, count: int, block_ms: int) -> list[Posted]:
        """Up to ``count`` items of the group posted after entry ``after``, waiting up to
        ``block_ms`` for the first (``XREAD BLOCK``); none when none came."""
        stream = outbox_stream(group)
        response = await self.redis.xread({stream: after}, count=count, block=block_ms)
        return [item for _name, rows in cast(list[Any], response or []) for item in _items(rows)]

    @translating
    async def newest_step_id(self, group: str) -> str:
        """The id of the group's newest step (``0-0`` when it has none)."""
        newest = cast(list[Any], await self.redis.xrevrange(steps_stream(group), count=1))
        return _text(newest[0][0]) if newest else "0-0"

    @translating
    async def steps_after(self, group: str, after: str, count: int) -> list[tuple[str, Step]]:
        """Up to ``count`` steps of the group's runs appended after entry ``after``, at once."""
        rows = await self.redis.xrange(steps_stream(group), min=f"({after}", max="+", count=count)
        return _steps(rows)

    @translating
    async def wait_both(
        self, group: str, after: str, steps_after: str, count: int, block_ms: int
    ) -> list[Seen]:
        """Up to ``count`` items of each of the group's outbound stream (after entry
        ``after``) and steps stream (after ``steps_after``), waiting up to ``block_ms`` for
        the first; in the order Redis added them."""
        outbox, steps = outbox_stream(group), steps_stream(group)
        streams = {outbox: after, steps: steps_after}
        response = await self.redis.xread(streams, count=count, block=block_ms)  # type: ignore[arg-type]
        posted: list[Posted] = []
        stepped: list[tuple[str, Step]] = []
        for name, rows in cast(list[Any], response or []):
            if _text(name) == steps:
                stepped.extend(_steps(rows))
            else:
                posted.extend(_items(rows))
        return in_order(posted, stepped, count)
