"""The history's per-message writes, one path per database dialect.

Both run inside a transaction the store opened: insert a row unless its id is taken, and
write a person's message's final record. On SQLite they go straight to ``sqlite3`` (the
hottest statements of all), with the values converted as SQLAlchemy's types convert them; on
PostgreSQL they are SQLAlchemy statements built once.
"""

from __future__ import annotations

import json
from typing import Any, Protocol

from sqlalchemy import Insert, bindparam, update
from sqlalchemy.dialects import postgresql
from sqlalchemy.engine import Connection, Engine

from orchestrator.memory.conversation.rows import MESSAGES, WRITTEN, Closing, NewReply

__all__ = ["RowWrites", "row_writes"]


class RowWrites(Protocol):
    """The two writes of the per-message path, in the caller's transaction ``conn``."""

    def insert(self, conn: Connection, row: NewReply) -> int | None:
        """Insert ``row`` unless its id is taken; its ``seq``, or None when it was there."""
        ...

    def close(self, conn: Connection, closing: Closing) -> None:
        """Write a person's message's status, route and meta."""
        ...


def row_writes(engine: Engine) -> RowWrites:
    """The write path for the engine's dialect."""
    if engine.dialect.name == "sqlite":
        return _SqliteWrites()
    return _PostgresWrites()


_SQLITE_INSERT = (
    f"INSERT INTO messages ({', '.join(WRITTEN)}) VALUES ({', '.join('?' * len(WRITTEN))}) "
    "ON CONFLICT (id) DO NOTHING RETURNING seq"
)
_SQLITE_CLOSE = "UPDATE messages SET status = ?, route = ?, meta = ? WHERE id = ?"
_CREATED_AT = WRITTEN.index("created_at")
_JSON = tuple(WRITTEN.index(name) for name in ("route", "meta"))


class _SqliteWrites:
    """Straight to ``sqlite3``, within the same transaction: datetimes as naive ISO text with
    microseconds, JSON as text (None as ``null``), as SQLAlchemy stores them."""

    def insert(self, conn: Connection, row: NewReply) -> int | None:
        values: list[Any] = list(row.values())
        values[_CREATED_AT] = values[_CREATED_AT].strftime("%Y-%m-%d %H:%M:%S.%f")
        for at in _JSON:
            values[at] = json.dumps(values[at])
        cursor = _sqlite3(conn).execute(_SQLITE_INSERT, values)
        inserted = cursor.fetchone()
        return int(inserted[0]) if inserted is not None else None

    def close(self, conn: Connection, closing: Closing) -> None:
        _sqlite3(conn).execute(
            _SQLITE_CLOSE,
            (
                closing.status,
                json.dumps(closing.route),
                json.dumps(closing.meta),
                closing.message_id,
            ),
        )


def _sqlite3(conn: Connection) -> Any:
    """The ``sqlite3`` connection under ``conn``."""
    return conn.connection.driver_connection


_PG_INSERT: Insert = (
    postgresql.insert(MESSAGES)
    .on_conflict_do_nothing(index_elements=["id"])
    .returning(MESSAGES.c.seq)
)
_UPDATE_BY_ID = update(MESSAGES).where(MESSAGES.c.id == bindparam("message_id"))


class _PostgresWrites:
    """SQLAlchemy statements, built once and bound to each row's values."""

    def insert(self, conn: Connection, row: NewReply) -> int | None:
        seq = conn.execute(_PG_INSERT, dict(zip(WRITTEN, row.values(), strict=True))).scalar()
        return int(seq) if seq is not None else None

    def close(self, conn: Connection, closing: Closing) -> None:
        changes = {"status": closing.status, "route": closing.route, "meta": closing.meta}
        conn.execute(_UPDATE_BY_ID, {"message_id": closing.message_id, **changes})
