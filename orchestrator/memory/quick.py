"""A connection kept for the few small reads made at every turn.

A turn asks the database two tiny questions before anything else: has memory changed since the
last turn (:mod:`orchestrator.memory.session.scope_log`), and is the group's newest message the
one held in memory (:mod:`orchestrator.memory.conversation.recent`). Each answer takes the
database microseconds; taking a connection from SQLAlchemy's pool and giving it back took ten
times that. A :class:`QuickReader` keeps one connection of the engine's pool (so it has the
engine's settings) for such reads, on SQLite straight through the driver; one thread at a time.
Other databases go through SQLAlchemy as usual. Such connections (a reader's, a
:class:`~orchestrator.memory.transactions.QuickWriter`'s) are closed with :func:`let_go`, as
:func:`~orchestrator.memory.db.open_engine` does at the end of its block.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Sequence
from typing import Any, Protocol

from sqlalchemy import text
from sqlalchemy.engine import Connection, Engine

__all__ = ["QuickReader", "driver_of", "hold", "let_go"]


class Holder(Protocol):
    """Something that keeps a connection of an engine outside its pool."""

    def let_go(self) -> None:
        """Close the connection held (the next use makes another)."""


_HOLDERS: weakref.WeakKeyDictionary[Engine, weakref.WeakSet[Holder]] = weakref.WeakKeyDictionary()
_HOLDERS_LOCK = threading.Lock()


def hold(engine: Engine, holder: Holder) -> None:
    """Note that ``holder`` may keep a connection of ``engine``'s (see :func:`let_go`)."""
    with _HOLDERS_LOCK:
        _HOLDERS.setdefault(engine, weakref.WeakSet()).add(holder)


def let_go(engine: Engine) -> None:
    """Close the connections of ``engine``'s that readers and writers keep outside its pool:
    before the engine is disposed of, which closes only those in the pool. On SQLite the last
    connection to close copies the write-ahead log back and removes it, so the database's files
    are as its owner leaves them when the engine is done, not when those objects are collected
    (``arena status`` measures them)."""
    with _HOLDERS_LOCK:
        holders = list(_HOLDERS.get(engine, ()))
    for holder in holders:
        holder.let_go()


class QuickReader:
    """Reads rows with a connection of its own (``?`` placeholders). Thread-safe."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._sqlite = engine.dialect.name == "sqlite"
        self._lock = threading.Lock()
        self._held: Any = None  # the pool's connection, taken on first use
        self._give_back: weakref.finalize[Any, Any] | None = None
        hold(engine, self)

    def rows(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """The rows of one statement."""
        if not self._sqlite:
            return self._through_sqlalchemy(sql, params)
        with self._lock:
            if self._held is None:
                self._held = self._engine.raw_connection()
                # Given back to its pool when this reader is gone.
                self._give_back = weakref.finalize(self, self._held.close)
            driver = self._held.driver_connection
            return list(driver.execute(sql, tuple(params)))

    def let_go(self) -> None:
        """Give the connection back to the pool (the next read takes one again)."""
        with self._lock:
            if self._give_back is not None:
                self._give_back()
            self._held = self._give_back = None

    def _through_sqlalchemy(self, sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        names = iter(range(len(params)))
        bound = "".join(f":p{next(names)}" if part == "?" else part for part in sql)
        with self._engine.connect() as conn:
            found = conn.execute(text(bound), {f"p{n}": v for n, v in enumerate(params)})
            return [tuple(row) for row in found]


def driver_of(conn: Connection) -> Any:
    """The driver's connection under ``conn`` (``sqlite3``'s, on SQLite): what the per-message
    paths past SQLAlchemy run their statements on."""
    proxied = conn.connection
    # Taken out of its pool (a QuickWriter's): the driver's connection is the one it wraps.
    driver = proxied.driver_connection or proxied.dbapi_connection
    if driver is None:  # a connection SQLAlchemy has let go of: none here
        raise RuntimeError("no database connection")
    return driver
