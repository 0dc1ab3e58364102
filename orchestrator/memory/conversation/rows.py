"""The ``messages`` table and the values that go in and come out of it.

:class:`MessageRow` is the table; the rest of the package sees :class:`StoredMessage` (a row as
read), :class:`NewReply` (a row to write), :class:`Closing` (the final record of a person's
message) and :class:`Opened` (a person's message as its handling starts).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import JSON, Column, Text
from sqlmodel import Field, SQLModel

from orchestrator.core.models import ChatMessage, MessageKind, assume_utc
from orchestrator.core.quick_init import quick_init

__all__ = [
    "COLUMNS",
    "MESSAGES",
    "WRITTEN",
    "Closing",
    "GroupInfo",
    "MessageRow",
    "NewReply",
    "Opened",
    "StoredMessage",
    "to_stored",
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


MESSAGES = MessageRow.__table__  # type: ignore[attr-defined]

# The columns a write gives values for, in the order it gives them (``seq`` is the database's).
WRITTEN = (
    "id", "group_id", "sender", "kind", "text", "in_reply_to", "hop", "created_at", "status",
    "route", "meta", "tokens",
)  # fmt: skip
COLUMNS = (MESSAGES.c.seq, *(MESSAGES.c[name] for name in WRITTEN))


@quick_init
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


@quick_init
@dataclass(frozen=True, slots=True, kw_only=True)
class NewReply:
    """A message to store (a reply, or a person's message), with what is recorded about it."""

    message: ChatMessage
    meta: dict[str, Any] | None = None
    tokens: int | None = None
    status: str = "done"

    def values(self) -> tuple[Any, ...]:
        """The row's values for the :data:`WRITTEN` columns, in their order (no route: a
        person's message gets its route when it is closed)."""
        m = self.message
        return (
            m.id, m.group, m.sender, m.kind.value, m.text, m.in_reply_to, m.hop,
            m.created_at.astimezone(UTC), self.status, None, self.meta, self.tokens,
        )  # fmt: skip


@quick_init
@dataclass(frozen=True, slots=True, kw_only=True)
class Closing:
    """The final record of a person's message: its status, route and meta, written as given
    (the caller merged the meta with the stored one)."""

    message_id: str
    status: str
    route: dict[str, Any] | None = None
    meta: dict[str, Any] = field(default_factory=dict)


@quick_init
@dataclass(frozen=True, slots=True, kw_only=True)
class Opened:
    """A person's message as stored when its handling starts, with the replies it has."""

    stored: StoredMessage
    replies: list[StoredMessage]
    new: bool  # stored just now, not by an earlier attempt


def to_stored(row: Any) -> StoredMessage:
    """A stored message from a row of :data:`COLUMNS` (or a ``MessageRow``)."""
    return StoredMessage(
        seq=row.seq,
        message=ChatMessage(
            id=row.id,
            group=row.group_id,
            sender=row.sender,
            kind=MessageKind(row.kind),
            text=row.text,
            created_at=assume_utc(row.created_at),
            in_reply_to=row.in_reply_to,
            hop=row.hop,
        ),
        status=row.status,
        route=row.route,
        meta=row.meta or {},
        tokens=row.tokens,
    )
