"""The conversation history: every person's message, reply and notice, in SQL.

Writes are idempotent on the message id, so a message handled twice (after a crash) is
stored once. Rows are deleted only by retention (:mod:`orchestrator.background.retention`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import JSON, Column, ColumnElement, Insert, Text, bindparam, delete, func, update
from sqlalchemy import select as sql_select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection, Engine
from sqlmodel import Field, Session, SQLModel, col, select

from orchestrator.core.models import ChatMessage, MessageKind
from orchestrator.memory.transactions import writing

__all__ = [
    "Closing",
    "GroupInfo",
    "HistoryStore",
    "MessageRow",
    "NewReply",
    "Opened",
    "StoredMessage",
]


class MessageRow(SQLModel, table=True):
    """One row per message in a group."""

    __tablename__ = "messages"

    seq: int | None = Field(default=None, primary_key=True)
    id: str = Field(index=True, unique=True, max_length=200)
    group_id: str = Field(index=True, max_length=64)
    sender: str = Field(max_length=64)
    kind: str = Field(max_length=16)
    text: str = Field(sa_column=Column(Text, nullable=False))
    in_reply_to: str | None = Field(default=None, index=True, max_length=200)
    hop: int = 0
    created_at: datetime
    status: str = Field(default="received", max_length=16)
    tokens: int | None = None
    route: dict[str, Any] | None = Field(default=None, sa_column=Column(JSON))
    meta: dict[str, Any] | None = Field(default=None, sa_column=Column(JSON))


@dataclass(frozen=True, slots=True, kw_only=True)
class StoredMessage:
    """A message as stored, with what was recorded about it."""

    seq: int
    message: ChatMessage
    status: str
    route: dict[str, Any] | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    tokens: int | None = None

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form (``arena history --json``)."""
        m = self.message
        return {
            "seq": self.seq,
            "id": m.id,
            "group": m.group,
            "sender": m.sender,
            "kind": m.kind.value,
            "text": m.text,
            "in_reply_to": m.in_reply_to,
            "hop": m.hop,
            "created_at": m.created_at.isoformat(),
            "status": self.status,
            "route": self.route,
            "meta": self.meta,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupInfo:
    """A group and how much it has said."""

    group: str
    messages: int
    last_at: datetime | None


def _aware(value: datetime) -> datetime:
    """SQLite returns naive datetimes; everything we store is UTC."""
    return value if value.tzinfo else value.replace(tzinfo=UTC)


_DELETE_BATCH = 1000  # rows per transaction, so a large prune never holds the lock for long


def _before(before: datetime, group: str | None, upto_seq: int | None) -> list[ColumnElement[bool]]:
    where = [col(MessageRow.created_at) < before.astimezone(UTC)]
    if group is not None:
        where.append(col(MessageRow.group_id) == group)
    if upto_seq is not None:
        where.append(col(MessageRow.seq) <= upto_seq)
    return where


_MESSAGES = MessageRow.__table__  # type: ignore[attr-defined]
_COLUMNS = (
    _MESSAGES.c.seq,
    _MESSAGES.c.id,
    _MESSAGES.c.group_id,
    _MESSAGES.c.sender,
    _MESSAGES.c.kind,
    _MESSAGES.c.text,
    _MESSAGES.c.in_reply_to,
    _MESSAGES.c.hop,
    _MESSAGES.c.created_at,
    _MESSAGES.c.status,
    _MESSAGES.c.tokens,
    _MESSAGES.c.route,
    _MESSAGES.c.meta,
)


# Built once: the per-message statements are only bound to new values, never rebuilt.
_BY_ID = sql_select(*_COLUMNS).where(_MESSAGES.c.id == bindparam("message_id"))
_META_BY_ID = sql_select(_MESSAGES.c.meta).where(_MESSAGES.c.id == bindparam("message_id"))
_UPDATE_BY_ID = update(_MESSAGES).where(_MESSAGES.c.id == bindparam("message_id"))
_NEWEST = sql_select(func.max(_MESSAGES.c.seq)).where(_MESSAGES.c.group_id == bindparam("group"))


def _to_stored(row: Any) -> StoredMessage:
    """A stored message from a row of ``_COLUMNS`` (or a ``MessageRow``)."""
    return StoredMessage(
        seq=row.seq,
        message=ChatMessage(
            id=row.id,
            group=row.group_id,
            sender=row.sender,
            kind=MessageKind(row.kind),
            text=row.text,
            created_at=_aware(row.created_at),
            in_reply_to=row.in_reply_to,
            hop=row.hop,
        ),
        status=row.status,
        route=row.route,
        meta=row.meta or {},
        tokens=row.tokens,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class NewReply:
    """A reply to store, with what is recorded about it."""

    message: ChatMessage
    meta: dict[str, Any]
    tokens: int | None = None
    status: str = "done"


@dataclass(frozen=True, slots=True, kw_only=True)
class Closing:
    """The final record of a person's message: its status, route and meta (merged into the
    stored meta; with ``replace``, written as it is, for a caller that knows the stored meta
    and merged it already)."""

    message_id: str
    status: str
    route: dict[str, Any] | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    replace: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class Opened:
    """A person's message as stored when its handling starts, with the replies it has."""

    stored: StoredMessage
    replies: list[StoredMessage]
    new: bool  # stored just now, not by an earlier attempt


class HistoryStore:
    """Reads and writes the ``messages`` table. Every method is blocking: call it from a
    thread (``asyncio.to_thread``) in async code.

    The per-message paths use SQL expressions rather than ORM objects: they run for every
    message the daemon handles.
    """

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._insert = _insert_ignoring_duplicates(engine)
        self._sqlite = engine.dialect.name == "sqlite"

    def _values(
        self,
        message: ChatMessage,
        status: str,
        route: dict[str, Any] | None,
        meta: dict[str, Any] | None,
        tokens: int | None,
    ) -> dict[str, Any]:
        return {
            "id": message.id,
            "group_id": message.group,
            "sender": message.sender,
            "kind": message.kind.value,
            "text": message.text,
            "in_reply_to": message.in_reply_to,
            "hop": message.hop,
            "created_at": message.created_at.astimezone(UTC),
            "status": status,
            "route": route,
            "meta": meta,
            "tokens": tokens,
        }

    def _add(self, conn: Connection, values: dict[str, Any]) -> int | None:
        """Insert a row unless its id is taken; its ``seq``, or None when it was there."""
        if self._sqlite:
            # The hottest statement of all, sent straight to sqlite3 within the same
            # transaction: the values converted as SQLAlchemy's types convert them.
            cursor = conn.connection.driver_connection.execute(  # type: ignore[union-attr]
                _SQLITE_INSERT, _sqlite_row(values)
            )
            row = cursor.fetchone()
            return int(row[0]) if row is not None else None
        inserted = conn.execute(self._insert, values)
        seq = inserted.scalar()
        return int(seq) if seq is not None else None

    def save(
        self,
        message: ChatMessage,
        *,
        status: str = "received",
        route: dict[str, Any] | None = None,
        meta: dict[str, Any] | None = None,
        tokens: int | None = None,
    ) -> bool:
        """Store ``message`` unless a message with its id is already stored.

        Returns:
            True when the message was added, False when it was already there.
        """
        with writing(self.engine) as conn:
            return self._add(conn, self._values(message, status, route, meta, tokens)) is not None

    def add(
        self,
        message: ChatMessage,
        *,
        status: str = "received",
        meta: dict[str, Any] | None = None,
        tokens: int | None = None,
    ) -> StoredMessage:
        """Store ``message`` (unless its id is already stored) and return it as stored."""
        reply = NewReply(message=message, meta=meta or {}, tokens=tokens, status=status)
        return self.record([reply])[0]

    def record(
        self, replies: Sequence[NewReply], *, closing: Closing | None = None
    ) -> list[StoredMessage]:
        """Store ``replies`` (those not stored yet) and, with ``closing``, close the person's
        message, in one transaction.

        Returns:
            The replies as stored (as an earlier attempt stored them, where one did).
        """
        with writing(self.engine) as conn:
            return self.record_in(conn, replies, closing=closing)

    def record_in(
        self, conn: Connection, replies: Sequence[NewReply], *, closing: Closing | None = None
    ) -> list[StoredMessage]:
        """:meth:`record` within the caller's transaction ``conn``."""
        stored: list[StoredMessage] = []
        for reply in replies:
            message = reply.message
            values = self._values(message, reply.status, None, reply.meta, reply.tokens)
            seq = self._add(conn, values)
            if seq is None:
                row = conn.execute(_BY_ID, {"message_id": message.id}).one()
                stored.append(_to_stored(row))
                continue
            stored.append(
                StoredMessage(
                    seq=seq,
                    message=message,
                    status=reply.status,
                    meta=reply.meta,
                    tokens=reply.tokens,
                )
            )
        if closing is not None and closing.replace:
            self._close(conn, closing)
        elif closing is not None:
            self._update(
                conn,
                closing.message_id,
                status=closing.status,
                route=closing.route,
                meta=closing.meta,
            )
        return stored

    def _close(self, conn: Connection, closing: Closing) -> None:
        """Write a replacing closing's status, route and meta."""
        if self._sqlite:
            conn.connection.driver_connection.execute(  # type: ignore[union-attr]
                _SQLITE_CLOSE,
                (
                    closing.status,
                    json.dumps(closing.route),
                    json.dumps(closing.meta),
                    closing.message_id,
                ),
            )
            return
        changes = {"status": closing.status, "route": closing.route, "meta": closing.meta}
        conn.execute(_UPDATE_BY_ID, {"message_id": closing.message_id, **changes})

    def open(self, message: ChatMessage, *, tokens: int | None = None) -> Opened:
        """Store a person's message unless it is stored, and return it with its replies so
        far (one transaction: what a handler needs to start, or to resume after a crash)."""
        with writing(self.engine) as conn:
            return self.open_in(conn, message, tokens=tokens)

    def open_in(
        self, conn: Connection, message: ChatMessage, *, tokens: int | None = None
    ) -> Opened:
        """:meth:`open` within the caller's transaction ``conn``."""
        seq = self._add(conn, self._values(message, "received", None, None, tokens))
        if seq is not None:
            stored = StoredMessage(seq=seq, message=message, status="received", tokens=tokens)
            return Opened(stored=stored, replies=[], new=True)
        row = conn.execute(_BY_ID, {"message_id": message.id}).one()
        replies = conn.execute(
            sql_select(*_COLUMNS)
            .where(_MESSAGES.c.in_reply_to == message.id)
            .order_by(_MESSAGES.c.seq)
        ).all()
        return Opened(stored=_to_stored(row), replies=[_to_stored(r) for r in replies], new=False)

    def get(self, message_id: str) -> StoredMessage | None:
        """The message with this id, if stored."""
        with self.engine.connect() as conn:
            row = conn.execute(_BY_ID, {"message_id": message_id}).first()
        return _to_stored(row) if row else None

    def update(
        self,
        message_id: str,
        *,
        status: str | None = None,
        route: dict[str, Any] | None = None,
        meta: dict[str, Any] | None = None,
    ) -> None:
        """Change what is recorded about a stored message (``meta`` is merged)."""
        with writing(self.engine) as conn:
            self._update(conn, message_id, status=status, route=route, meta=meta)

    @staticmethod
    def _update(
        conn: Connection,
        message_id: str,
        *,
        status: str | None,
        route: dict[str, Any] | None,
        meta: dict[str, Any] | None,
    ) -> None:
        changes: dict[str, Any] = {}
        if status is not None:
            changes["status"] = status
        if route is not None:
            changes["route"] = route
        if meta is not None:
            current = conn.execute(_META_BY_ID, {"message_id": message_id}).first()
            if current is None:
                return
            changes["meta"] = {**(current.meta or {}), **meta}
        if changes:
            conn.execute(_UPDATE_BY_ID, {"message_id": message_id, **changes})

    def replies_to(self, message_id: str) -> list[StoredMessage]:
        """Every reply and notice to a person's message, in the order they were stored."""
        with self.engine.connect() as conn:
            rows = conn.execute(
                sql_select(*_COLUMNS)
                .where(_MESSAGES.c.in_reply_to == message_id)
                .order_by(_MESSAGES.c.seq)
            ).all()
        return [_to_stored(r) for r in rows]

    def newest_seq(self, group: str) -> int | None:
        """The ``seq`` of the group's newest message (None: it has none)."""
        with self.engine.connect() as conn:
            newest = conn.execute(_NEWEST, {"group": group}).scalar()
        return int(newest) if newest is not None else None

    def recent(
        self, group: str, limit: int, *, before_seq: int | None = None
    ) -> list[StoredMessage]:
        """The ``limit`` newest messages of a group (before ``before_seq``), oldest first."""
        if limit <= 0:
            return []
        query = sql_select(*_COLUMNS).where(_MESSAGES.c.group_id == group)
        if before_seq is not None:
            query = query.where(_MESSAGES.c.seq < before_seq)
        query = query.order_by(_MESSAGES.c.seq.desc()).limit(limit)
        with self.engine.connect() as conn:
            rows = conn.execute(query).all()
        return [_to_stored(r) for r in reversed(rows)]

    def groups(self) -> list[GroupInfo]:
        """Every group with its message count and last activity."""
        with Session(self.engine) as session:
            rows = session.exec(
                select(MessageRow.group_id, func.count(), func.max(MessageRow.created_at)).group_by(
                    MessageRow.group_id
                )
            ).all()
        return [
            GroupInfo(group=g, messages=n, last_at=_aware(last) if last else None)
            for g, n, last in rows
        ]

    def count(self, group: str | None = None, kinds: Sequence[MessageKind] = ()) -> int:
        """How many messages are stored (in a group, of some kinds)."""
        query = select(func.count()).select_from(MessageRow)
        if group is not None:
            query = query.where(MessageRow.group_id == group)
        if kinds:
            query = query.where(col(MessageRow.kind).in_([k.value for k in kinds]))
        with Session(self.engine) as session:
            return int(session.exec(query).one())

    def count_before(
        self, before: datetime, *, group: str | None = None, upto_seq: int | None = None
    ) -> dict[str, int]:
        """Messages created before ``before`` (in a group, up to ``upto_seq``), by group."""
        query = (
            select(MessageRow.group_id, func.count())
            .where(*_before(before, group, upto_seq))
            .group_by(MessageRow.group_id)
        )
        with Session(self.engine) as session:
            return {g: int(n) for g, n in session.exec(query).all()}

    def delete_before(self, before: datetime, *, group: str, upto_seq: int) -> int:
        """Delete ``group``'s messages created before ``before`` whose ``seq`` is at most
        ``upto_seq``, in batches.

        Returns:
            How many were deleted.
        """
        where = _before(before, group, upto_seq)
        deleted = 0
        while True:
            batch = select(MessageRow.seq).where(*where).limit(_DELETE_BATCH)
            with writing(self.engine) as conn:
                done = conn.execute(delete(MessageRow).where(col(MessageRow.seq).in_(batch)))
            deleted += done.rowcount
            if done.rowcount < _DELETE_BATCH:
                return deleted


_INSERTED = (
    "id", "group_id", "sender", "kind", "text", "in_reply_to", "hop", "created_at", "status",
    "route", "meta", "tokens",
)  # fmt: skip
_SQLITE_INSERT = (
    f"INSERT INTO messages ({', '.join(_INSERTED)}) VALUES ({', '.join('?' * len(_INSERTED))}) "
    "ON CONFLICT (id) DO NOTHING RETURNING seq"
)

_SQLITE_CLOSE = "UPDATE messages SET status = ?, route = ?, meta = ? WHERE id = ?"


def _sqlite_row(values: dict[str, Any]) -> tuple[Any, ...]:
    """A row's values as SQLAlchemy stores them in SQLite: datetimes as naive ISO text with
    microseconds, JSON as text (None as ``null``)."""
    row = dict(values)
    row["created_at"] = values["created_at"].strftime("%Y-%m-%d %H:%M:%S.%f")
    row["route"] = json.dumps(values["route"])
    row["meta"] = json.dumps(values["meta"])
    return tuple(row[name] for name in _INSERTED)


def _insert_ignoring_duplicates(engine: Engine) -> Insert:
    """``INSERT … ON CONFLICT (id) DO NOTHING RETURNING seq`` in the engine's dialect."""
    if engine.dialect.name == "postgresql":
        pg = postgresql.insert(_MESSAGES).on_conflict_do_nothing(index_elements=["id"])
        return pg.returning(_MESSAGES.c.seq)
    lite = sqlite.insert(_MESSAGES).on_conflict_do_nothing(index_elements=["id"])
    return lite.returning(_MESSAGES.c.seq)
