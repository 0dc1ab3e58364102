"""Coalescing: requests made at about the same moment are carried out together, each caller
gets its own result, and nobody is left waiting."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

import pytest
from redis.asyncio import Redis
from sqlalchemy import event
from sqlalchemy.engine import Connection

from orchestrator.adapters.bus import Bus
from orchestrator.core.batching import Coalescer
from orchestrator.core.models import ChatMessage, MessageKind
from orchestrator.core.wire import CONSUMER_GROUP, Outbound, outbox_stream, partition_stream
from orchestrator.memory.conversation.store import HistoryStore, NewReply
from orchestrator.memory.db import make_engine
from orchestrator.memory.transactions import BatchedWrites
from tests.waiting import wait_until


class _Recorder:
    """A batch runner that records its batches; doubles numbers, fails on negatives.

    A held recorder keeps each batch running until ``release`` is set; ``started`` is set
    when a batch begins.
    """

    def __init__(self, *, held: bool = False, latency_s: float = 0.0) -> None:
        self.batches: list[list[int]] = []
        self.started = asyncio.Event()
        self.release = asyncio.Event()
        if not held:
            self.release.set()
        self.latency_s = latency_s
        self.running = 0
        self.most_running = 0

    async def __call__(self, requests: list[int]) -> Sequence[int | BaseException]:
        self.batches.append(list(requests))
        self.running += 1
        self.most_running = max(self.most_running, self.running)
        self.started.set()
        await self.release.wait()
        # The batch's own duration (a round trip's), during which the next requests gather.
        await asyncio.sleep(self.latency_s)
        self.running -= 1
        return [ValueError(f"negative {n}") if n < 0 else 2 * n for n in requests]


def _asking(coalescer: Coalescer[int, int], asked: list[int]):
    """``coalescer``'s caller that notes each request as it is made (in the step that queues
    it)."""

    async def ask(n: int) -> int:
        asked.append(n)
        return await coalescer(n)

    return ask


async def test_requests_made_together_form_one_batch():
    runner = _Recorder()
    coalescer: Coalescer[int, int] = Coalescer(runner)
    results = await asyncio.gather(*(coalescer(n) for n in range(50)))
    assert results == [2 * n for n in range(50)]
    assert runner.batches == [list(range(50))]


async def test_requests_made_while_a_batch_runs_go_in_the_next():
    runner = _Recorder(held=True)
    coalescer: Coalescer[int, int] = Coalescer(runner)
    asked: list[int] = []
    first = asyncio.ensure_future(coalescer(1))
    await runner.started.wait()  # the first batch is running now
    pending = asyncio.gather(*(_asking(coalescer, asked)(n) for n in (2, 3, 4)))
    await wait_until(lambda: asked == [2, 3, 4], timeout_s=5, what="the requests to be made")
    runner.release.set()
    later = await pending
    assert await first == 2
    assert later == [4, 6, 8]
    assert runner.batches == [[1], [2, 3, 4]]


async def test_batches_are_capped_and_run_one_at_a_time():
    runner = _Recorder(latency_s=0.01)
    coalescer: Coalescer[int, int] = Coalescer(runner, max_batch=4)
    results = await asyncio.gather(*(coalescer(n) for n in range(10)))
    assert results == [2 * n for n in range(10)]
    assert [len(b) for b in runner.batches] == [4, 4, 2]
    assert runner.most_running == 1
    assert coalescer.batches == 3
    assert coalescer.requests == 10


async def test_a_failing_request_fails_only_its_caller():
    coalescer: Coalescer[int, int] = Coalescer(_Recorder())
    results = await asyncio.gather(
        coalescer(1), coalescer(-1), coalescer(3), return_exceptions=True
    )
    assert results[0] == 2
    assert results[2] == 6
    assert isinstance(results[1], ValueError)


async def test_a_failing_batch_fails_each_of_its_callers_and_the_next_batch_runs():
    calls = 0

    async def flaky(requests: list[int]) -> list[int]:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise ConnectionError("down")
        return requests

    coalescer: Coalescer[int, int] = Coalescer(flaky)
    failed = await asyncio.gather(coalescer(1), coalescer(2), return_exceptions=True)
    assert all(isinstance(r, ConnectionError) for r in failed)
    assert await coalescer(3) == 3


async def test_a_caller_cancelled_before_its_batch_is_left_out():
    runner = _Recorder(held=True)
    coalescer: Coalescer[int, int] = Coalescer(runner)
    asked: list[int] = []
    first = asyncio.ensure_future(coalescer(1))
    await runner.started.wait()  # the first batch is running now
    gone = asyncio.ensure_future(_asking(coalescer, asked)(2))
    kept = asyncio.ensure_future(_asking(coalescer, asked)(3))
    await wait_until(lambda: asked == [2, 3], timeout_s=5, what="the requests to be made")
    gone.cancel()
    runner.release.set()
    assert await first == 2
    assert await kept == 6
    assert runner.batches == [[1], [3]]


async def test_a_submitted_request_shielded_is_carried_out_when_its_caller_is_cancelled():
    """``submit`` gives the request's future itself: shielded (as a handler shields its
    acknowledgement) it joins the batch and is carried out though the caller is cancelled,
    with no task of its own."""
    runner = _Recorder(held=True)
    coalescer: Coalescer[int, int] = Coalescer(runner)
    first = asyncio.ensure_future(coalescer(1))
    await runner.started.wait()  # the first batch is running now
    submitted: list[asyncio.Future[int]] = []

    async def handler() -> int:
        future = coalescer.submit(2)
        submitted.append(future)
        return await asyncio.shield(future)

    caller = asyncio.ensure_future(handler())
    await wait_until(lambda: bool(submitted), timeout_s=5, what="the request to be made")
    caller.cancel()
    runner.release.set()
    assert await first == 2
    assert await submitted[0] == 4
    assert caller.cancelled()
    assert runner.batches == [[1], [2]]


async def test_a_request_right_after_a_batch_ends_is_not_stranded():
    """Asked for in the same turn of the event loop as a batch's end: still carried out."""
    runner = _Recorder()
    coalescer: Coalescer[int, int] = Coalescer(runner)
    for n in range(20):
        assert await asyncio.wait_for(coalescer(n), timeout=2) == 2 * n
    assert len(runner.batches) == 20


def _message(n: int) -> ChatMessage:
    return ChatMessage(
        id=f"{n}-0",
        group="g",
        sender="alice",
        kind=MessageKind.HUMAN,
        text=f"message {n}",
        created_at=datetime.now(UTC),
    )


async def test_batched_writes_share_a_transaction_and_isolate_a_failing_job(tmp_path: Path):
    engine = make_engine(f"sqlite:///{tmp_path / 'arena.db'}")
    store = HistoryStore(engine)
    writes = BatchedWrites(engine)
    connections: list[int] = []

    def writer(n: int):
        def job(conn: Connection):
            connections.append(id(conn))
            return store.record_in(conn, [NewReply(message=_message(n))])[0]

        return job

    def broken(conn: Connection) -> None:
        store.record_in(conn, [NewReply(message=_message(99))])
        raise RuntimeError("broken job")

    stored = await asyncio.gather(*(writes.run(writer(n)) for n in range(5)))
    assert [s.message.id for s in stored] == [f"{n}-0" for n in range(5)]
    assert len(set(connections)) == 1  # one transaction for the five

    results = await asyncio.gather(
        writes.run(writer(5)), writes.run(broken), writes.run(writer(6)), return_exceptions=True
    )
    assert isinstance(results[1], RuntimeError)
    assert [r.message.id for r in (results[0], results[2])] == ["5-0", "6-0"]  # type: ignore[union-attr]
    assert store.get("99-0") is None  # the failing job's own write was rolled back
    assert store.count() == 7
    engine.dispose()


async def test_the_history_stores_many_groups_messages_in_one_transaction(tmp_path: Path):
    """Messages opened and replies recorded at about the same moment, in many groups, are
    written in one transaction."""
    engine = make_engine(f"sqlite:///{tmp_path / 'arena.db'}")
    store = HistoryStore(engine)
    begun: list[int] = []
    event.listen(engine, "begin", lambda conn: begun.append(1))
    people = [dataclasses.replace(_message(n), group=f"g{n}") for n in range(5)]
    opened = await asyncio.gather(*(store.open(m, count=len) for m in people))
    assert [o.stored.tokens for o in opened] == [len(m.text) for m in people]
    assert len(begun) == 1
    replies = [
        NewReply(message=dataclasses.replace(m, id=f"{m.id}:1:ping", in_reply_to=m.id), meta={})
        for m in people
    ]
    await asyncio.gather(*(store.record([r]) for r in replies))
    assert len(begun) == 2
    assert store.count() == 10
    engine.dispose()


def _outbound(n: int, group: str) -> Outbound:
    return Outbound(
        type="reply",
        id=f"{n}-0:1:ping",
        group=group,
        in_reply_to=f"{n}-0",
        sender="ping",
        kind="agent",
        text=f"reply {n}",
    )


@pytest.mark.parametrize("groups", [1, 3])
async def test_publishes_made_together_keep_each_callers_order_and_count(
    redis_url: str, groups: int
):
    redis = Redis.from_url(redis_url)
    bus = Bus(redis, "test")
    names = [f"g{k}" for k in range(groups)]
    requests = [[_outbound(10 * n + i, names[n % groups]) for i in range(3)] for n in range(6)]
    counts = await asyncio.gather(*(bus.publish_all(items) for items in requests))
    assert counts == [3] * 6
    again = await asyncio.gather(bus.publish_all(requests[0]), bus.publish_all(requests[1][:1]))
    assert again == [0, 0]  # published before: nothing appended twice
    for group in names:
        texts = [fields[b"text"].decode() for _, fields in await redis.xrange(outbox_stream(group))]
        expected = [i.text for items in requests for i in items if i.group == group]
        assert texts == expected
    await redis.aclose()


async def test_acknowledgements_made_together_remove_each_entry_of_each_stream(redis_url: str):
    """Entries of two partitions acknowledged at about the same moment (one round trip) are all
    acknowledged and removed; an entry not acknowledged stays pending."""
    redis = Redis.from_url(redis_url)
    bus = Bus(redis, "test")
    await bus.ensure_group()
    streams = [partition_stream(0), partition_stream(5)]
    for n in range(7):
        await redis.xadd(streams[n % 2], {"n": str(n)})
    entries = await bus.read_new(streams, count=10, block_ms=0)
    assert len(entries) == 7
    kept = entries.pop()
    await asyncio.gather(*(bus.ack(e.stream, e.id) for e in entries))
    pending = [await redis.xpending(s, CONSUMER_GROUP) for s in streams]
    assert sum(p["pending"] for p in pending) == 1
    left = [(s, i.decode()) for s in streams for i, _ in await redis.xrange(s)]
    assert left == [(kept.stream, kept.id)]
    await redis.aclose()
