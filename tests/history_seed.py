"""Writing messages into the history the way the daemon does, from sync and async tests."""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Coroutine
from typing import Any, TypeVar

from sqlalchemy.engine import Engine

from orchestrator.core.models import ChatMessage
from orchestrator.memory.conversation.store import HistoryStore, NewReply, StoredMessage

__all__ = ["replies", "write_history"]

T = TypeVar("T")


def _run(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` to its end, also from inside a running event loop (in a thread)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


def _store(where: HistoryStore | Engine) -> HistoryStore:
    return where if isinstance(where, HistoryStore) else HistoryStore(where)


def write_history(
    where: HistoryStore | Engine,
    *messages: ChatMessage,
    status: str = "received",
    meta: dict[str, Any] | None = None,
    tokens: int | None = None,
) -> list[StoredMessage]:
    """Store ``messages`` through :meth:`HistoryStore.record` (those not stored yet)."""
    rows = [NewReply(message=m, meta=meta, tokens=tokens, status=status) for m in messages]
    return _run(_store(where).record(rows))


def replies(where: HistoryStore | Engine, message_id: str) -> list[StoredMessage]:
    """The replies and notices to a stored person's message, in the order they were stored,
    as a handler resuming it sees them (:meth:`HistoryStore.open`)."""
    store = _store(where)
    person = store.get(message_id)
    assert person is not None, f"message {message_id} is not stored"
    return _run(store.open(person.message)).replies
