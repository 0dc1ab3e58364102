"""The recent messages kept in memory between turns: written through, checked, bounded."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from orchestrator.core.models import ChatMessage, MessageKind
from orchestrator.memory.conversation.recent import RecentMessages
from orchestrator.memory.conversation.store import HistoryStore
from tests.history_seed import write_history

T0 = datetime(2026, 5, 1, 8, 0, tzinfo=UTC)


def _msg(n: int, group: str = "g") -> ChatMessage:
    return ChatMessage(
        id=f"{n}-0",
        group=group,
        sender="alex",
        kind=MessageKind.HUMAN,
        text=f"message {n}",
        created_at=T0 + timedelta(seconds=n),
    )


def _texts(messages) -> list[str]:
    return [m.message.text for m in messages]


def test_remembered_messages_are_served_without_reading_the_group_again(store: HistoryStore):
    recent = RecentMessages(store, 3)
    for n in range(5):
        write_history(store, _msg(n))
    assert _texts(recent.recent("g", 3)) == ["message 2", "message 3", "message 4"]
    assert recent.reads == 1
    for n in range(5, 7):
        recent.remember(write_history(store, _msg(n))[0])
    assert _texts(recent.recent("g", 3)) == ["message 4", "message 5", "message 6"]
    assert _texts(recent.recent("g", 2)) == ["message 5", "message 6"]
    assert recent.reads == 1


def test_a_group_written_by_someone_else_is_read_again(store: HistoryStore):
    recent = RecentMessages(store, 10)
    write_history(store, _msg(1))
    assert _texts(recent.recent("g", 10)) == ["message 1"]
    write_history(store, _msg(2))  # not through this cache (another daemon, or before a restart)
    assert _texts(recent.recent("g", 10)) == ["message 1", "message 2"]
    assert recent.reads == 2


def test_replies_stored_out_of_order_are_kept_in_seq_order(store: HistoryStore):
    recent = RecentMessages(store, 10)
    write_history(store, _msg(1))
    recent.recent("g", 10)
    (second,) = write_history(store, _msg(2), status="done")
    (third,) = write_history(store, _msg(3), status="done")
    recent.remember(third)  # two agents of one hop finish in either order
    recent.remember(second)
    recent.remember(second)  # told twice: kept once
    assert _texts(recent.recent("g", 10)) == ["message 1", "message 2", "message 3"]
    assert recent.reads == 1


def test_least_recently_used_groups_are_let_go_and_big_limits_go_to_the_store(store):
    recent = RecentMessages(store, 2, max_groups=2)
    for group in ("a", "b", "c"):
        write_history(store, _msg(ord(group), group))
        recent.recent(group, 2)
    assert recent.reads == 3
    recent.recent("c", 2)
    assert recent.reads == 3
    recent.recent("a", 2)  # let go when "c" came in
    assert recent.reads == 4
    assert len(recent.recent("a", 50)) == 1  # more than it keeps: read from the store


def test_an_owning_cache_skips_the_check_until_told_to_forget(store: HistoryStore):
    """The daemon holding a group's partition is its only writer: no lookup per turn. When it
    takes a partition over, it lets go of that partition's groups and reads them again."""
    recent = RecentMessages(store, 10, verify=False, clock=lambda: 0.0)
    write_history(store, _msg(1))
    write_history(store, _msg(2, group="other"))
    assert _texts(recent.recent("g", 10)) == ["message 1"]
    assert _texts(recent.recent("other", 10)) == ["message 2"]
    write_history(store, _msg(3))  # written elsewhere while another daemon held the partition
    assert _texts(recent.recent("g", 10)) == ["message 1"]  # trusted, not checked
    assert recent.forget(lambda group: group == "g") == 1
    assert _texts(recent.recent("g", 10)) == ["message 1", "message 3"]
    assert _texts(recent.recent("other", 10)) == ["message 2"]
    assert recent.reads == 3


def test_a_trusted_cache_still_sees_other_writers_after_a_while(store: HistoryStore):
    """The owning daemon's cache (no check per turn) compares with the database again after
    ``recheck_s``: messages `arena import` wrote into a group in use reach the next turns."""
    now = [0.0]
    recent = RecentMessages(store, 10, verify=False, recheck_s=2.0, clock=lambda: now[0])
    write_history(store, _msg(1))
    assert _texts(recent.recent("g", 10)) == ["message 1"]
    write_history(store, _msg(2))  # an import, by another process
    now[0] = 1.0
    assert _texts(recent.recent("g", 10)) == ["message 1"]  # trusted for a while
    now[0] = 2.5
    assert _texts(recent.recent("g", 10)) == ["message 1", "message 2"]
    assert recent.reads == 2
    now[0] = 5.0
    assert _texts(recent.recent("g", 10)) == ["message 1", "message 2"]
    assert recent.reads == 2  # checked again, nothing new: not read again
