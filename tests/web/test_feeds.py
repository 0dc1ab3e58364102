"""A room's shared reader: every watcher gets every item once and in order, each item is turned
into its event once however many watch, and a watcher resuming from an older id gets what it
missed, then the live items, without repeats. On a real Redis."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from redis.asyncio import Redis

from orchestrator.adapters.outbox import OutboxReader
from orchestrator.core.wire import Outbound, outbox_stream
from orchestrator.web.feeds import RoomFeeds
from tests.web_helpers import own_redis


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with own_redis(Path(tmp_path_factory.mktemp("feeds"))) as url:
        yield url


class Counting:
    """Renders an item as ``id text``, counting how often it is asked to."""

    def __init__(self) -> None:
        self.calls = 0

    async def __call__(self, entry_id: str, item: Outbound) -> str:
        self.calls += 1
        return f"{entry_id} {item.text}"


async def _say(redis: Redis, group: str, text: str) -> str:
    item = Outbound(type="reply", id=text, group=group, in_reply_to="m", sender="a", text=text)
    entry = await redis.xadd(outbox_stream(group), item.fields())
    return entry.decode() if isinstance(entry, bytes) else str(entry)


async def _take(
    feeds: RoomFeeds, group: str, after: str, count: int, live: asyncio.Event | None = None
) -> list[str]:
    """The first ``count`` items the watcher gets; ``live`` is set at its first keep-alive,
    which comes once it has what it missed and waits for live items. Returns once the watcher
    has left the room."""
    got: list[str] = []
    async with contextlib.aclosing(feeds.watch(group, after)) as blocks:
        async for block in blocks:
            if block.startswith(":"):
                if live is not None:
                    live.set()
                continue
            got.append(block)
            if len(got) == count:
                break
    return got


async def test_watchers_of_a_room_share_one_reader(redis_url: str, unique_name: str) -> None:
    redis = Redis.from_url(redis_url)
    render = Counting()
    feeds = RoomFeeds(OutboxReader(redis), render, keepalive_s=0.2)
    try:
        start = await feeds.stream_end(unique_name)
        live = [asyncio.Event() for _ in range(4)]
        watchers = [asyncio.create_task(_take(feeds, unique_name, start, 5, e)) for e in live]
        # All four are watching live before anything is said (a watcher still reading what it
        # missed would render the newest items itself).
        await asyncio.wait_for(asyncio.gather(*(e.wait() for e in live)), 10)
        said = [await _say(redis, unique_name, f"text {n}") for n in range(5)]
        results = await asyncio.wait_for(asyncio.gather(*watchers), 10)
    finally:
        await feeds.close()
        await redis.aclose()
    expected = [f"{entry} text {n}" for n, entry in enumerate(said)]
    assert results == [expected] * 4
    assert render.calls == 5  # once per item, not once per watcher


async def test_a_watcher_resuming_gets_the_missed_items_then_the_live_ones_once(
    redis_url: str, unique_name: str
) -> None:
    redis = Redis.from_url(redis_url)
    feeds = RoomFeeds(OutboxReader(redis), Counting(), keepalive_s=0.2)
    try:
        first = await _say(redis, unique_name, "one")
        watching = asyncio.Event()
        live = asyncio.create_task(_take(feeds, unique_name, first, 3, watching))
        await asyncio.wait_for(watching.wait(), 10)
        said = [await _say(redis, unique_name, t) for t in ("two", "three")]
        # A second watcher comes back from "one" while the room's reader is running.
        late = asyncio.create_task(_take(feeds, unique_name, first, 3))
        said.append(await _say(redis, unique_name, "four"))
        live_got, late_got = await asyncio.wait_for(asyncio.gather(live, late), 10)
    finally:
        await feeds.close()
        await redis.aclose()
    expected = [
        f"{entry} {text}" for entry, text in zip(said, ("two", "three", "four"), strict=True)
    ]
    assert live_got == expected
    assert late_got == expected


async def test_the_reader_stops_with_its_last_watcher_and_starts_again(
    redis_url: str, unique_name: str
) -> None:
    redis = Redis.from_url(redis_url)
    render = Counting()
    feeds = RoomFeeds(OutboxReader(redis), render, keepalive_s=0.2)
    try:
        start = await feeds.stream_end(unique_name)
        watching = asyncio.Event()
        first = asyncio.create_task(_take(feeds, unique_name, start, 1, watching))
        await asyncio.wait_for(watching.wait(), 10)
        one = await _say(redis, unique_name, "one")
        assert await asyncio.wait_for(first, 10) == [f"{one} one"]
        two = await _say(redis, unique_name, "two")  # nobody watching: nothing rendered
        # The scenario, not a signal: a room nobody watches for longer than a blocking read
        # (keepalive_s) has no reader left to render what is said in it.
        await asyncio.sleep(0.3)
        assert render.calls == 1
        again = await asyncio.wait_for(_take(feeds, unique_name, one, 1), 10)
    finally:
        await feeds.close()
        await redis.aclose()
    assert again == [f"{two} two"]
