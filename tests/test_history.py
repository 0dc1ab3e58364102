"""The conversation history on SQLite and on a real PostgreSQL server."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import text

from orchestrator.core.models import ChatMessage, MessageKind
from orchestrator.errors import ServiceError
from orchestrator.memory.conversation.store import HistoryStore
from orchestrator.memory.db import make_engine

T0 = datetime(2026, 5, 1, 8, 0, tzinfo=UTC)


@pytest.fixture(params=["sqlite", "postgres"])
def store(request, tmp_path):
    """A history store on SQLite (WAL) and on PostgreSQL."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'arena.db'}"
    else:
        url = request.getfixturevalue("postgres_url")
    engine = make_engine(url)
    with engine.begin() as connection:
        connection.execute(text("DELETE FROM messages"))
    yield HistoryStore(engine)
    engine.dispose()


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


def test_save_is_idempotent_and_round_trips(store):
    """Saving a message twice stores it once; it reads back equal, CJK and all."""
    message = _msg(1, text_="设计 JWT 🔑")
    assert store.save(message, route={"reason": "default"}) is True
    assert store.save(message) is False
    stored = store.get("1-0")
    assert stored is not None
    assert stored.message == message
    assert stored.route == {"reason": "default"}
    assert store.count() == 1


def test_recent_is_newest_n_oldest_first_per_group(store):
    """recent() returns the group's newest messages in order, other groups excluded."""
    for n in range(10):
        store.save(_msg(n, group="a" if n % 2 else "b"))
    assert [s.message.id for s in store.recent("a", 3)] == ["5-0", "7-0", "9-0"]
    assert {g.group: g.messages for g in store.groups()} == {"a": 5, "b": 5}


def test_update_merges_meta_and_replies_are_listed(store):
    """update() merges metadata; replies_to() lists replies in stored order."""
    store.save(_msg(1))
    store.update("1-0", status="done", meta={"a": 1})
    store.update("1-0", meta={"b": 2})
    stored = store.get("1-0")
    assert stored is not None
    assert stored.status == "done"
    assert stored.meta == {"a": 1, "b": 2}
    store.save(_msg(2, reply_to="1-0"))
    store.save(_msg(3, reply_to="1-0"))
    assert [r.message.id for r in store.replies_to("1-0")] == ["2-0", "3-0"]


def test_concurrent_saves_of_the_same_message_store_one(store):
    """Threads racing to save one message leave exactly one row."""
    results: list[bool] = []
    barrier = threading.Barrier(8)

    def save() -> None:
        barrier.wait()
        results.append(store.save(_msg(42)))

    threads = [threading.Thread(target=save) for _ in range(8)]
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


def test_open_stores_once_and_resumes_with_the_replies(store: HistoryStore):
    first = store.open(_msg(1), tokens=3)
    assert first.new
    assert first.stored.status == "received"
    assert first.stored.tokens == 3
    assert first.replies == []
    reply = store.add(_msg(2, reply_to="1-0"), status="done", meta={"agent": "ping"}, tokens=4)
    assert reply.seq > first.stored.seq
    assert store.get("2-0") == reply
    again = store.open(_msg(1), tokens=3)  # handled again after a crash
    assert not again.new
    assert again.stored == first.stored
    assert again.replies == [reply]
    assert store.count() == 2


def test_add_returns_what_an_earlier_attempt_stored(store: HistoryStore):
    kept = store.add(_msg(5, text_="first answer"), status="done", tokens=2)
    same = store.add(_msg(5, text_="second answer"), status="done", tokens=2)
    assert same == kept
    assert store.get("5-0").message.text == "first answer"


def test_newest_seq_per_group(store: HistoryStore):
    assert store.newest_seq("g") is None
    store.save(_msg(1))
    store.save(_msg(2, group="other"))
    newest = store.open(_msg(3)).stored.seq
    assert store.newest_seq("g") == newest
    assert store.newest_seq("other") == store.get("2-0").seq


def test_record_stores_a_hop_and_closes_the_message_in_one_step(store: HistoryStore):
    from orchestrator.memory.conversation.store import Closing, NewReply

    store.open(_msg(1))
    store.update("1-0", meta={"seen": True})
    replies = [
        NewReply(message=_msg(2, reply_to="1-0"), meta={"agent": "ping"}, tokens=2),
        NewReply(message=_msg(3, reply_to="1-0"), meta={"agent": "pong"}, tokens=2),
    ]
    closing = Closing(message_id="1-0", status="done", route={"reason": "mention"}, meta={"n": 2})
    stored = store.record(replies, closing=closing)
    assert [s.message.id for s in stored] == ["2-0", "3-0"]
    assert stored[0].seq < stored[1].seq
    person = store.get("1-0")
    assert person.status == "done"
    assert person.route == {"reason": "mention"}
    assert person.meta == {"seen": True, "n": 2}  # merged
    # Recorded again (a replay): the stored replies come back, nothing is added.
    again = store.record(replies)
    assert again == stored
    assert store.count() == 3


def test_a_replacing_closing_writes_the_meta_it_is_given(store: HistoryStore):
    from orchestrator.memory.conversation.store import Closing

    store.open(_msg(1))
    store.update("1-0", meta={"seen": True, "old": 1})
    closing = Closing(message_id="1-0", status="failed", meta={"seen": True}, replace=True)
    store.record([], closing=closing)
    person = store.get("1-0")
    assert person.status == "failed"
    assert person.meta == {"seen": True}  # written as given, not merged


def test_stored_values_read_back_exactly(store: HistoryStore):
    """Rows written on the per-message path read back as they were given: the time to the
    microsecond, in UTC, and the JSON fields as dicts."""
    from orchestrator.memory.conversation.store import Closing, NewReply

    when = datetime(2026, 3, 4, 5, 6, 7, 891011, tzinfo=UTC)
    person = ChatMessage(
        id="7-0", group="g", sender="alex", kind=MessageKind.HUMAN, text="héllo", created_at=when
    )
    opened = store.open(person, tokens=3)
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
    )
    closing = Closing(
        message_id="7-0",
        status="done",
        route={"reason": "mention"},
        meta={"replies": 1},
        replace=True,
    )
    store.record([reply], closing=closing)
    got = store.get("7-0")
    assert got.message == person
    assert got.tokens == 3
    assert (got.status, got.route, got.meta) == ("done", {"reason": "mention"}, {"replies": 1})
    answer = store.get("7-0:1:ping")
    assert answer.message == reply.message
    assert answer.meta == reply.meta
