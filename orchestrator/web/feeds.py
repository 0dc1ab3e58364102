"""One reader per watched room, shared by everyone watching it.

Fifty people (or browser tabs) following the same busy rooms must not cost the daemon fifty
times: each room's outbound stream, and beside it its runs' steps stream, is read by one task
(one ``XREAD BLOCK`` of both), and each item is turned into its event (a database read, the
Markdown rendered) once and handed to every watcher. The reader starts with the room's first
watcher and stops with its last.

A watcher resuming from an older event id (a :class:`~orchestrator.web.cursor.Cursor`: where it
was in both streams) first reads what it missed straight from the streams, then takes the
shared items, skipping any it sent already (ids only grow), so nothing is lost or repeated. A
watcher that falls too far behind is let go (its stream ends; a browser reconnects with
``Last-Event-ID`` and catches up the same way).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

from orchestrator.adapters.outbox import OutboxReader
from orchestrator.core.coding import Seen, Step, in_order
from orchestrator.core.wire import Outbound
from orchestrator.errors import BusError
from orchestrator.web.cursor import Cursor

__all__ = ["Event", "Render", "RoomFeeds", "step_event"]

logger = logging.getLogger(__name__)

# An outbound item as its event block, given the event's id (a database read: done once).
Render = Callable[[str, Outbound], Awaitable[str]]

_BATCH = 100  # entries per read
_BACKLOG = 1000  # events a watcher may fall behind before it is let go


@dataclass(frozen=True, slots=True)
class Event:
    """An item as the room's reader handed it out: where it is, and its event block as sent
    after ``cursor`` (``item`` None: the feed stopped, its watchers' streams end)."""

    entry_id: str
    item: Outbound | Step | None
    cursor: Cursor
    block: str


_END = Event("", None, Cursor("0-0"), "")


def step_event(event_id: str, step: Step) -> str:
    """A step's event block (``data``: the step's fields)."""
    payload = json.dumps(step.as_dict(), ensure_ascii=False, separators=(",", ":"))
    return f"event: step\nid: {event_id}\ndata: {payload}\n\n"


async def _block(render: Render, cursor: Cursor, item: Outbound | Step) -> str:
    if isinstance(item, Step):
        return step_event(str(cursor), item)
    return await render(str(cursor), item)


class _Feed:
    """The reader of one room's stream and the queues of its watchers."""

    def __init__(
        self, outboxes: OutboxReader, group: str, start: Cursor, render: Render, block_ms: int
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

    async def _read(self, at: Cursor) -> None:
        try:
            while not self.stopping:
                seen = await self.outboxes.wait_both(
                    self.group, at.outbox, at.steps_after, _BATCH, self.block_ms
                )
                for entry_id, item in seen:
                    at = at.past(entry_id, item)
                    self._hand_out(Event(entry_id, item, at, await _block(self.render, at, item)))
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
        """The event id of the room's end: its newest outbound item (``0-0`` when it has
        none), and its newest step when it has one."""
        return str(await self._end(group))

    async def _end(self, group: str) -> Cursor:
        outbox = await self.outboxes.newest_id(group)
        steps = await self.outboxes.newest_step_id(group)
        return Cursor(outbox, None if steps == "0-0" else steps)

    async def watch(self, group: str, after: str) -> AsyncIterator[str]:
        """The room's event blocks after event id ``after``, then live ones; a keep-alive
        comment when nothing happened for ``keepalive_s``. Ends when the feed stops or the
        watcher falls too far behind.

        Raises:
            BusError: reading what was missed failed.
        """
        queue: asyncio.Queue[Event] = asyncio.Queue()
        feed = await self._join(group, queue)
        try:
            sent = Cursor.parse(after)
            for event in await self._missed(group, sent):
                sent = event.cursor
                yield event.block
            while True:
                try:
                    event = await asyncio.wait_for(queue.get(), self.keepalive_s)
                except TimeoutError:
                    yield ": keep-alive\n\n"
                    continue
                if event.item is None:
                    return
                if sent.sent(event.entry_id, event.item):
                    continue
                sent = sent.past(event.entry_id, event.item)
                # Rendered once for every watcher, unless this one's id for it differs (it
                # came back from elsewhere and has sent a step the reader had not yet).
                same = sent == event.cursor
                yield event.block if same else await _block(self.render, sent, event.item)
        finally:
            await self._leave(feed, queue)

    async def _join(self, group: str, queue: asyncio.Queue[Event]) -> _Feed:
        feed = self._feeds.get(group)
        if feed is None or feed.task.done():
            start = await self._end(group)
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

    async def _missed(self, group: str, at: Cursor) -> list[Event]:
        """What the room said, and its runs did, after ``at`` up to now, read straight from
        its streams."""
        events: list[Event] = []
        while True:
            posted = await self.outboxes.after(group, at.outbox, _BATCH)
            steps = await self.outboxes.steps_after(group, at.steps_after, _BATCH)
            seen: list[Seen] = in_order(posted, steps, _BATCH)
            for entry_id, item in seen:
                at = at.past(entry_id, item)
                events.append(Event(entry_id, item, at, await _block(self.render, at, item)))
            if len(posted) < _BATCH and len(steps) < _BATCH:
                return events

    async def close(self) -> None:
        """Stop every reader (the console is stopping)."""
        feeds, self._feeds = list(self._feeds.values()), {}
        await asyncio.gather(*(f.stop() for f in feeds), return_exceptions=True)
