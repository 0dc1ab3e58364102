"""The conversation history on SQLite and on a real PostgreSQL server."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from datetime import UTC, datetime, timedelta

import pytest

from orchestrator.core.models import ChatMessage, MessageKind
from orchestrator.errors import ServiceError
from orchestrator.memory.conversation.index import HistoryIndex
from orchestrator.memory.conversation.store import Closing, HistoryStore, NewReply
from orchestrator.memory.db import make_engine
from tests.databases import on_each_database
from tests.history_seed import write_history

T0 = datetime(2026, 5, 1, 8, 0, tzinfo=UTC)


def _msg(n: int, group: str = "g", text_: str = "hello", reply_to: str | None = None):
    return ChatMessage(
        id=f"{n}-0",
        group=group,
        sender="alex",
        kind=MessageKind.HUMAN,
        text=text_,
        created_at=T0 + timedelta(seconds=n),
        in_reply_to=reply_to,
    )


@on_each_database
async def test_open_is_idempotent_and_round_trips(store):
    """Opening a message twice stores it once; it reads back equal, CJK and all."""
    message = _msg(1, text_="设计 JWT 🔑")
    assert (await store.open(message)).new
    assert not (await store.open(message)).new
    stored = store.get("1-0")
    assert stored is not None
    assert stored.message == message
    assert stored.route is None
    assert store.count() == 1


@on_each_database
def test_recent_is_newest_n_oldest_first_per_group(store):
    """recent() returns the group's newest messages in order, other groups excluded."""
    for n in range(10):
        write_history(store, _msg(n, group="a" if n % 2 else "b"))
    assert [s.message.id for s in store.recent("a", 3)] == ["5-0", "7-0", "9-0"]
    assert {g.group: g.messages for g in store.groups()} == {"a": 5, "b": 5}


@on_each_database
async def test_recent_reads_every_value_as_the_store_reads_it(store: HistoryStore):
    """The newest messages read back value for value as get() reads them: text in any
    script, a reply's meta with a lone surrogate and non-ASCII, a closed message's route,
    times with and without microseconds, tokens counted or not; also before a seq."""
    person = dataclasses.replace(_msg(1, text_="设计 JWT 🔑 \u00e9t\u00e9"), created_at=T0)
    await store.open(person)
    odd = {"agent": "ping", "note": "caf\u00e9 \ud800", "n": [1, 2.5, None, True]}
    replies = [
        NewReply(message=_msg(2, reply_to="1-0", text_="ok"), meta=odd, tokens=3),
        NewReply(
            message=dataclasses.replace(
                _msg(3, reply_to="1-0"), created_at=T0 + timedelta(microseconds=7)
            )
        ),
    ]
    closing = Closing(message_id="1-0", status="done", route={"reason": "mention"}, meta={})
    await store.record(replies, closing=closing)
    recent = store.recent("g", 10)
    assert [s.message.id for s in recent] == ["1-0", "2-0", "3-0"]
    assert recent == [store.get(s.message.id) for s in recent]
    assert recent[0].route == {"reason": "mention"}
    assert recent[0].message.created_at == T0
    assert recent[1].meta == odd
    assert recent[2].meta == {}
    assert recent[2].route is None
    assert recent[2].message.created_at == T0 + timedelta(microseconds=7)
    assert store.recent("g", 1, before_seq=recent[2].seq) == [recent[1]]
    assert store.recent("other", 5) == []


@on_each_database
async def test_opening_again_lists_the_replies_in_stored_order(store):
    """A message opened again comes with its replies and notices, in the order stored."""
    await store.open(_msg(1))
    await store.record([NewReply(message=_msg(3, reply_to="1-0"))])
    await store.record([NewReply(message=_msg(2, reply_to="1-0"))])
    again = await store.open(_msg(1))
    assert [r.message.id for r in again.replies] == ["3-0", "2-0"]


@on_each_database
def test_concurrent_writers_of_the_same_message_store_one(store):
    """Daemons racing to open one message leave exactly one row, opened anew by one."""
    results: list[bool] = []
    barrier = threading.Barrier(8)

    def open_it() -> None:
        racer = HistoryStore(store.engine)
        barrier.wait()
        results.append(asyncio.run(racer.open(_msg(42))).new)

    threads = [threading.Thread(target=open_it) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results.count(True) == 1
    assert store.count() == 1


def test_unreachable_database_is_a_clear_error():
    """A database that cannot be reached raises ServiceError without the password."""
    with pytest.raises(ServiceError) as caught:
        make_engine("postgresql://arena:hunter2@127.0.0.1:1/none?connect_timeout=2")
    assert "hunter2" not in str(caught.value)
    assert "database" in str(caught.value)


@on_each_database
async def test_open_stores_once_and_resumes_with_the_replies(store: HistoryStore):
    first = await store.open(_msg(1), count=len)
    assert first.new
    assert first.stored.status == "received"
    assert first.stored.tokens == len("hello")
    assert first.replies == []
    (reply,) = await store.record(
        [NewReply(message=_msg(2, reply_to="1-0"), meta={"agent": "ping"}, tokens=4)]
    )
    assert reply.seq > first.stored.seq
    assert store.get("2-0") == reply
    again = await store.open(_msg(1), count=len)  # handled again after a crash
    assert not again.new
    assert again.stored == first.stored
    assert again.replies == [reply]
    assert store.count() == 2


@on_each_database
async def test_record_returns_what_an_earlier_attempt_stored(store: HistoryStore):
    (kept,) = await store.record([NewReply(message=_msg(5, text_="first answer"), tokens=2)])
    (same,) = await store.record([NewReply(message=_msg(5, text_="second answer"), tokens=2)])
    assert same == kept
    assert store.get("5-0").message.text == "first answer"


@on_each_database
async def test_newest_seq_per_group(store: HistoryStore):
    assert store.newest_seq("g") is None
    write_history(store, _msg(1), _msg(2, group="other"))
    newest = (await store.open(_msg(3))).stored.seq
    assert store.newest_seq("g") == newest
    assert store.newest_seq("other") == store.get("2-0").seq


@on_each_database
async def test_record_stores_a_hop_and_closes_the_message_in_one_step(store: HistoryStore):
    await store.open(_msg(1))
    replies = [
        NewReply(message=_msg(2, reply_to="1-0"), meta={"agent": "ping"}, tokens=2),
        NewReply(message=_msg(3, reply_to="1-0"), meta={"agent": "pong"}, tokens=2),
    ]
    closing = Closing(message_id="1-0", status="done", route={"reason": "mention"}, meta={"n": 2})
    stored = await store.record(replies, closing=closing, count=len)
    assert [s.message.id for s in stored] == ["2-0", "3-0"]
    assert [s.tokens for s in stored] == [len("hello")] * 2  # counted, in the writing thread
    assert stored[0].seq < stored[1].seq
    person = store.get("1-0")
    assert person.status == "done"
    assert person.route == {"reason": "mention"}
    assert person.meta == {"n": 2}  # written as given
    # Recorded again (a replay): the stored replies come back, nothing is added.
    again = await store.record(replies)
    assert again == stored
    assert store.count() == 3


@on_each_database
async def test_every_column_reads_back_as_written(store: HistoryStore):
    """Rows written on the daemon's path read back as they were given, every column: the
    time to the microsecond, in UTC, and the JSON fields as dicts."""
    when = datetime(2026, 3, 4, 5, 6, 7, 891011, tzinfo=UTC)
    person = ChatMessage(
        id="7-0", group="g", sender="alex", kind=MessageKind.HUMAN, text="héllo", created_at=when
    )
    opened = await store.open(person, count=lambda _: 3)
    assert opened.new
    reply = NewReply(
        message=ChatMessage(
            id="7-0:1:ping",
            group="g",
            sender="ping",
            kind=MessageKind.AGENT,
            text="answer",
            created_at=when,
            in_reply_to="7-0",
            hop=1,
        ),
        meta={"agent": "ping", "usage": {"input_tokens": 5}, "note": "ünïcode"},
        tokens=1,
        status="done",
    )
    closing = Closing(
        message_id="7-0", status="done", route={"reason": "mention"}, meta={"replies": 1}
    )
    (recorded,) = await store.record([reply], closing=closing)
    got = store.get("7-0")
    assert got == dataclasses.replace(
        opened.stored, status="done", route={"reason": "mention"}, meta={"replies": 1}
    )
    assert (got.seq, got.message, got.tokens) == (opened.stored.seq, person, 3)
    answer = store.get("7-0:1:ping")
    assert answer == recorded
    assert (answer.message, answer.meta, answer.tokens, answer.status, answer.route) == (
        reply.message,
        reply.meta,
        1,
        "done",
        None,
    )
    assert answer.seq > got.seq


@on_each_database
async def test_writes_asked_for_together_are_stored_together_and_found(store: HistoryStore):
    """Many groups' opens and records at once (one batch, their rows inserted in one
    statement): each gets its own row, an id given twice is stored once (the second
    caller gets the stored row), a reply stored before comes back as stored, and every new
    message is in the full-text index."""
    (earlier,) = await store.record([NewReply(message=_msg(900, text_="kept before"))])
    people = [_msg(n, group=f"g{n}", text_=f"deploy window {n}") for n in range(1, 41)]
    replies = [
        NewReply(
            message=_msg(100 + n, group=f"g{n}", text_=f"deploy answer {n}", reply_to=f"{n}-0")
        )
        for n in range(1, 41)
    ]
    results = await asyncio.gather(
        *(store.open(person) for person in people),
        store.open(people[0]),  # the same message twice in one batch
        *(store.record([reply]) for reply in replies),
        store.record([NewReply(message=_msg(900, text_="changed"))]),
    )
    opened, twice = results[:40], results[40]
    recorded, again = results[41:81], results[81]
    assert [o.stored.message for o in opened] == people
    assert sum(o.new for o in (*opened, twice)) == 40
    assert twice.stored.seq == opened[0].stored.seq
    assert [r.message for (r,) in recorded] == [reply.message for reply in replies]
    assert again == [earlier]
    seqs = [o.stored.seq for o in opened] + [r.seq for (r,) in recorded]
    assert len(set(seqs)) == 80
    assert store.count() == 81
    for n in (1, 17, 40):
        hits = HistoryIndex(store.engine).search(
            ["deploy"], group=f"g{n}", before_seq=None, limit=10
        )
        assert sorted(said.text for said, _ in hits) == [f"deploy answer {n}", f"deploy window {n}"]
