"""The conversation history: every person's message, reply and notice, in SQL.

Writes are idempotent on the message id, so a message handled twice (after a crash) is
stored once. Rows are deleted only by retention (:mod:`orchestrator.retention`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import JSON, Column, ColumnElement, Text, delete, func
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError
from sqlmodel import Field, Session, SQLModel, col, select

from orchestrator.models import ChatMessage, MessageKind

__all__ = ["GroupInfo", "HistoryStore", "MessageRow", "StoredMessage"]


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


def _to_stored(row: MessageRow) -> StoredMessage:
    assert row.seq is not None
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


class HistoryStore:
    """Reads and writes the ``messages`` table. Every method is blocking: call it from a
    thread (``asyncio.to_thread``) in async code."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

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
        row = MessageRow(
            id=message.id,
            group_id=message.group,
            sender=message.sender,
            kind=message.kind.value,
            text=message.text,
            in_reply_to=message.in_reply_to,
            hop=message.hop,
            created_at=message.created_at.astimezone(UTC),
            status=status,
            route=route,
            meta=meta,
            tokens=tokens,
        )
        with Session(self.engine) as session:
            session.add(row)
            try:
                session.commit()
            except IntegrityError:
                session.rollback()
                return False
        return True

    def get(self, message_id: str) -> StoredMessage | None:
        """The message with this id, if stored."""
        with Session(self.engine) as session:
            row = session.exec(select(MessageRow).where(MessageRow.id == message_id)).first()
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
        with Session(self.engine) as session:
            row = session.exec(select(MessageRow).where(MessageRow.id == message_id)).first()
            if row is None:
                return
            if status is not None:
                row.status = status
            if route is not None:
                row.route = route
            if meta is not None:
                row.meta = {**(row.meta or {}), **meta}
            session.add(row)
            session.commit()

    def replies_to(self, message_id: str) -> list[StoredMessage]:
        """Every reply and notice to a person's message, in the order they were stored."""
        with Session(self.engine) as session:
            rows = session.exec(
                select(MessageRow)
                .where(MessageRow.in_reply_to == message_id)
                .order_by(col(MessageRow.seq))
            ).all()
            return [_to_stored(r) for r in rows]

    def recent(
        self, group: str, limit: int, *, before_seq: int | None = None
    ) -> list[StoredMessage]:
        """The ``limit`` newest messages of a group (before ``before_seq``), oldest first."""
        if limit <= 0:
            return []
        query = select(MessageRow).where(MessageRow.group_id == group)
        if before_seq is not None:
            query = query.where(col(MessageRow.seq) < before_seq)
        query = query.order_by(col(MessageRow.seq).desc()).limit(limit)
        with Session(self.engine) as session:
            rows = session.exec(query).all()
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
            with self.engine.begin() as conn:
                done = conn.execute(delete(MessageRow).where(col(MessageRow.seq).in_(batch)))
            deleted += done.rowcount
            if done.rowcount < _DELETE_BATCH:
                return deleted
