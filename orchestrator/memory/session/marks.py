"""When memories were last recalled, recorded from the event loop for many turns at once.

A turn records the memories it was given as used (``last_used_at``). A group's first turn
recalls several that no turn marked yet, and when a daemon starts, every group's first turn
comes at about the same moment: a write transaction each (a lock, a log write, their system
calls) for what one statement can write. Here the marks asked for meanwhile are written
together (:class:`~orchestrator.core.batching.Coalescer`), on SQLite in one statement on the
event loop when the database is free at once
(:class:`~orchestrator.memory.transactions.QuickWriter`), else in a thread, a transaction for
each moment, by the blocking path every other caller takes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import OperationalError

from orchestrator.core.batching import Coalescer
from orchestrator.core.json_text import json_text
from orchestrator.memory.quick import driver_of
from orchestrator.memory.session.entries import ENTRIES, db_time
from orchestrator.memory.transactions import QuickWriter

__all__ = ["UseMarks"]

Mark = tuple[Sequence[int], datetime]

# Each entry given its own time, pairs ``[id, time]`` in a JSON array: one statement, made
# once, for any number of entries and moments. Not a change the scope log records (it
# watches other columns), nor a write of this process's memory.
_MARK_MANY = (
    "UPDATE memory_entries SET last_used_at = marks.at FROM ("
    "SELECT json_extract(value, '$[0]') AS id, json_extract(value, '$[1]') AS at"
    " FROM json_each(?)) AS marks WHERE memory_entries.id = marks.id"
)


class UseMarks:
    """Records entries as used at a moment, with the marks asked for meanwhile.

    Args:
        engine: the memory's engine.
        blocking: records ``ids`` as used at ``now`` in a transaction of its own, blocking
            (the store's own path, run in a thread when the database is not free at once).
    """

    def __init__(self, engine: Engine, blocking: Callable[[Sequence[int], datetime], None]):
        self._sqlite = engine.dialect.name == "sqlite"
        self._blocking = blocking
        self._quick = QuickWriter(engine)
        self._stored_time: Callable[[datetime], Any] | None = None
        self._marks: Coalescer[Mark, None] = Coalescer(self._run, name="memory-marks")

    async def __call__(self, ids: Sequence[int], now: datetime) -> None:
        """Record ``ids`` as used at ``now`` (from a coroutine; the event loop's)."""
        if ids:
            await self._marks((ids, now))

    async def _run(self, marks: list[Mark]) -> list[None]:
        latest: dict[int, datetime] = {}
        for ids, now in marks:
            for entry_id in ids:
                if entry_id not in latest or latest[entry_id] < now:
                    latest[entry_id] = now
        if not (self._sqlite and self._written_now(latest)):
            await asyncio.to_thread(self._write_blocking, latest)
        return [None] * len(marks)

    def _written_now(self, latest: dict[int, datetime]) -> bool:
        """Whether the marks were written on the calling thread: False, with nothing
        written, when the database is not free at once."""
        try:
            with self._quick.transaction() as conn:
                if conn is None:
                    return False
                stored = self._stored_time or self._binder(conn)
                pairs = [[entry_id, stored(db_time(at))] for entry_id, at in latest.items()]
                driver_of(conn).execute(_MARK_MANY, (json_text(pairs),))
                return True
        except OperationalError:
            return False  # rolled back

    def _binder(self, conn: Connection) -> Callable[[datetime], Any]:
        """A time as its column stores it (SQLAlchemy's own processing of the value)."""
        dialect = conn.dialect
        process = ENTRIES.c.last_used_at.type.dialect_impl(dialect).bind_processor(dialect)
        self._stored_time = process or (lambda value: value)
        return self._stored_time

    def _write_blocking(self, latest: dict[int, datetime]) -> None:
        moments: dict[datetime, list[int]] = {}
        for entry_id, at in latest.items():
            moments.setdefault(at, []).append(entry_id)
        for at, ids in moments.items():
            self._blocking(ids, at)
