"""One reader per watched room, shared by everyone watching it.

Fifty people (or browser tabs) following the same busy rooms must not cost the daemon fifty
times: each room's outbound stream is read by one task (``XREAD BLOCK``), and each item is
turned into its event (a database read, the Markdown rendered) once and handed to every
watcher. The reader starts with the room's first watcher and stops with its last.

A watcher resuming from an older event id first reads what it missed straight from the stream,
then takes the shared items, skipping any it sent already (ids only grow), so nothing is lost
or repeated. A watcher that falls too far behind is let go (its stream ends; a browser
reconnects with ``Last-Event-ID`` and catches up the same way).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable

from orchestrator.adapters.outbox import OutboxReader
from orchestrator.core.wire import Outbound
from orchestrator.errors import BusError

__all__ = ["Event", "RoomFeeds", "entry_key"]

logger = logging.getLogger(__name__)

Event = tuple[str, str]  # (stream entry id, the event block as sent)
Render = Callable[[str, Outbound], Awaitable[str]]

_BATCH = 100  # entries per read
_BACKLOG = 1000  # events a watcher may fall behind before it is let go
_END: Event = ("", "")  # the feed stopped: its watchers' streams end


def entry_key(entry_id: str) -> tuple[int, int]:
    """A stream entry id as a number pair, for ordering (``1700000000000-3``)."""
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


class _Feed:
    """The reader of one room's stream and the queues of its watchers."""

    def __init__(
        self, outboxes: OutboxReader, group: str, start: str, render: Render, block_ms: int
    ) -> None:
        self.outboxes = outboxes
        self.block_ms = block_ms
        self.group = group
        self.render = render
        self.watchers: set[asyncio.Queue[Event]] = set()
        self.stopping = False
        self.task = asyncio.create_task(self._read(start), name=f"feed {group}")

    async def stop(self) -> None:
        """End the reader and wait until it has. Cancelling it is not always enough: a
        cancellation that lands as a blocking read returns can be absorbed by the Redis client
        (seen with redis-py 8), and the reader would read on with nobody watching; the flag
        ends it at its next read at the latest, ``block_ms`` later."""
        self.stopping = True
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task

    async def _read(self, after: str) -> None:
        try:
            while not self.stopping:
                posted = await self.outboxes.wait_after(self.group, after, _BATCH, self.block_ms)
                for after, item in posted:
                    self._hand_out((after, await self.render(after, item)))
        except BusError as exc:
            logger.warning("events of group %s stopped: %s", self.group, exc.kind)
        finally:
            self._hand_out(_END)

    def _hand_out(self, event: Event) -> None:
        for queue in list(self.watchers):
            if queue.qsize() >= _BACKLOG:
                self.watchers.discard(queue)
                queue.put_nowait(_END)
            else:
                queue.put_nowait(event)


class RoomFeeds:
    """The shared readers of the rooms being watched in this process."""

    def __init__(
        self, outboxes: OutboxReader, render: Render, *, keepalive_s: float = 15.0
    ) -> None:
        self.outboxes = outboxes
        self.render = render
        self.keepalive_s = keepalive_s
        self._feeds: dict[str, _Feed] = {}

    async def stream_end(self, group: str) -> str:
        """The id of the room's newest outbound item (``0-0`` when it has none)."""
        return await self.outboxes.newest_id(group)

    async def watch(self, group: str, after: str) -> AsyncIterator[str]:
        """The room's event blocks after entry ``after``, then live ones; a keep-alive comment
        when nothing happened for ``keepalive_s``. Ends when the feed stops or the watcher falls
        too far behind.

        Raises:
            BusError: reading what was missed failed.
        """
        queue: asyncio.Queue[Event] = asyncio.Queue()
        feed = await self._join(group, queue)
        try:
            sent = after
            for entry_id, block in await self._missed(group, after):
                sent = entry_id
                yield block
            while True:
                try:
                    entry_id, block = await asyncio.wait_for(queue.get(), self.keepalive_s)
                except TimeoutError:
                    yield ": keep-alive\n\n"
                    continue
                if not entry_id:
                    return
                if entry_key(entry_id) > entry_key(sent):
                    sent = entry_id
                    yield block
        finally:
            await self._leave(feed, queue)

    async def _join(self, group: str, queue: asyncio.Queue[Event]) -> _Feed:
        feed = self._feeds.get(group)
        if feed is None or feed.task.done():
            start = await self.stream_end(group)
            feed = self._feeds.get(group)  # another watcher may have started it meanwhile
            if feed is None or feed.task.done():
                block_ms = max(100, int(self.keepalive_s * 1000))
                feed = _Feed(self.outboxes, group, start, self.render, block_ms)
                self._feeds[group] = feed
        feed.watchers.add(queue)
        return feed

    async def _leave(self, feed: _Feed, queue: asyncio.Queue[Event]) -> None:
        feed.watchers.discard(queue)
        if not feed.watchers and self._feeds.get(feed.group) is feed:
            del self._feeds[feed.group]
            await feed.stop()

    async def _missed(self, group: str, after: str) -> list[Event]:
        """What the room said after ``after`` up to now, read straight from its stream."""
        events: list[Event] = []
        while True:
            posted = await self.outboxes.after(group, after, _BATCH)
            for after, item in posted:
                events.append((after, await self.render(after, item)))
            if len(posted) < _BATCH:
                return events

    async def close(self) -> None:
        """Stop every reader (the console is stopping)."""
        feeds, self._feeds = list(self._feeds.values()), {}
        await asyncio.gather(*(f.stop() for f in feeds), return_exceptions=True)
