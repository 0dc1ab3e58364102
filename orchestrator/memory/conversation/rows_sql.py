"""The history's per-message writes, one path per database dialect.

Both run inside a transaction the store opened: insert rows unless their id is taken, and
write a person's message's final record. On SQLite they go straight to ``sqlite3`` (the
hottest statements of all), with the values converted as SQLAlchemy's types convert them, and
the rows of a batch go in one statement (see :mod:`orchestrator.memory.transactions`: FTS5
writes an index segment at the end of each statement); on PostgreSQL they are SQLAlchemy
statements built once.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any, Protocol

from sqlalchemy import Insert, bindparam, update
from sqlalchemy.dialects import postgresql
from sqlalchemy.engine import Connection, Engine

from orchestrator.core.json_text import json_text, json_value
from orchestrator.core.models import ChatMessage, MessageKind, utc_from_text
from orchestrator.memory.conversation.rows import (
    MESSAGES,
    WRITTEN,
    Closing,
    NewReply,
    StoredMessage,
)
from orchestrator.memory.quick import driver_of

__all__ = ["SQLITE_RECENT", "SQLITE_RECENT_BEFORE", "RowWrites", "row_writes", "sqlite_stored"]


class RowWrites(Protocol):
    """The two writes of the per-message path, in the caller's transaction ``conn``."""

    def insert_many(self, conn: Connection, rows: Sequence[NewReply]) -> list[int | None]:
        """Insert ``rows`` in order, each unless its id is taken (by a stored row or an earlier
        one of ``rows``); each one's ``seq``, or None when its id was taken."""
        ...

    def close(self, conn: Connection, closing: Closing) -> None:
        """Write a person's message's status, route and meta."""
        ...


def row_writes(engine: Engine) -> RowWrites:
    """The write path for the engine's dialect."""
    if engine.dialect.name == "sqlite":
        return _SqliteWrites()
    return _PostgresWrites()


_SQLITE_ROW = f"({', '.join('?' * len(WRITTEN))})"
_SQLITE_CHUNK = 200  # rows per statement (SQLite allows 32,766 values)
_SQLITE_CLOSE = "UPDATE messages SET status = ?, route = ?, meta = ? WHERE id = ?"
_CREATED_AT = WRITTEN.index("created_at")
_JSON = tuple(WRITTEN.index(name) for name in ("route", "meta"))


class _SqliteWrites:
    """Straight to ``sqlite3``, within the same transaction: datetimes as naive ISO text with
    microseconds, JSON as text (None as ``null``), as SQLAlchemy stores them."""

    def insert_many(self, conn: Connection, rows: Sequence[NewReply]) -> list[int | None]:
        seqs: list[int | None] = []
        for start in range(0, len(rows), _SQLITE_CHUNK):
            chunk = rows[start : start + _SQLITE_CHUNK]
            values: list[Any] = []
            for row in chunk:
                values.extend(_sqlite_values(row))
            found = driver_of(conn).execute(_sqlite_insert(len(chunk)), values).fetchall()
            by_id = {str(message_id): int(seq) for message_id, seq in found}
            # Of two rows with one id only the first went in: pop gives the second None.
            seqs.extend(by_id.pop(row.message.id, None) for row in chunk)
        return seqs

    def close(self, conn: Connection, closing: Closing) -> None:
        driver_of(conn).execute(
            _SQLITE_CLOSE,
            (
                closing.status,
                json_text(closing.route),
                json_text(closing.meta),
                closing.message_id,
            ),
        )


def _sqlite_values(row: NewReply) -> list[Any]:
    values: list[Any] = list(row.values())
    # As SQLAlchemy writes it (its zone, UTC, left out): a quarter of strftime's time.
    values[_CREATED_AT] = values[_CREATED_AT].isoformat(" ", "microseconds")[:26]
    for at in _JSON:
        values[at] = json_text(values[at])
    return values


@functools.lru_cache(maxsize=32)
def _sqlite_insert(count: int) -> str:
    rows = ", ".join([_SQLITE_ROW] * count)
    return (
        f"INSERT INTO messages ({', '.join(WRITTEN)}) VALUES {rows} "
        "ON CONFLICT (id) DO NOTHING RETURNING id, seq"
    )


_PG_INSERT: Insert = (
    postgresql.insert(MESSAGES)
    .on_conflict_do_nothing(index_elements=["id"])
    .returning(MESSAGES.c.seq)
)
_UPDATE_BY_ID = update(MESSAGES).where(MESSAGES.c.id == bindparam("message_id"))


class _PostgresWrites:
    """SQLAlchemy statements, built once and bound to each row's values."""

    def insert_many(self, conn: Connection, rows: Sequence[NewReply]) -> list[int | None]:
        seqs: list[int | None] = []
        for row in rows:
            values = dict(zip(WRITTEN, row.values(), strict=True))
            seq = conn.execute(_PG_INSERT, values).scalar()
            seqs.append(int(seq) if seq is not None else None)
        return seqs

    def close(self, conn: Connection, closing: Closing) -> None:
        changes = {"status": closing.status, "route": closing.route, "meta": closing.meta}
        conn.execute(_UPDATE_BY_ID, {"message_id": closing.message_id, **changes})


# A group's newest messages, read straight through the driver on SQLite (a group's first turn
# reads them; through SQLAlchemy, converting each value of twenty rows took longer than the
# query): the columns of ``sqlite_stored``.
_SQLITE_COLUMNS = ", ".join(("seq", *WRITTEN))
SQLITE_RECENT = (
    f"SELECT {_SQLITE_COLUMNS} FROM messages WHERE group_id = ? ORDER BY seq DESC LIMIT ?"
)
SQLITE_RECENT_BEFORE = (
    f"SELECT {_SQLITE_COLUMNS} FROM messages WHERE group_id = ? AND seq < ?"
    " ORDER BY seq DESC LIMIT ?"
)


def sqlite_stored(row: Sequence[Any]) -> StoredMessage:
    """A stored message from a row of ``seq`` and :data:`WRITTEN` as ``sqlite3`` gives it:
    the values converted as SQLAlchemy's types convert them (the naive datetime text it
    writes, taken as UTC; JSON text, ``null`` as None)."""
    seq, message_id, group, sender, kind, text, in_reply_to, hop = row[:8]
    created_at, status, route, meta, tokens = row[8:]
    return StoredMessage(
        seq=seq,
        message=ChatMessage(
            id=message_id,
            group=group,
            sender=sender,
            kind=_KINDS.get(kind) or MessageKind(kind),
            text=text,
            created_at=utc_from_text(created_at),
            in_reply_to=in_reply_to,
            hop=hop,
        ),
        status=status,
        route=None if route is None or route == "null" else json_value(route),
        meta={} if meta is None or meta in _NO_META else (json_value(meta) or {}),
        tokens=tokens,
    )


_KINDS = {kind.value: kind for kind in MessageKind}
_NO_META = ("null", "{}")  # what a row without a record holds
