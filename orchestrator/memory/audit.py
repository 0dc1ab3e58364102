"""The audit of people's corrections to session memory: every forget, restore, edit
(supersede), pin and unpin, from the CLI or the web, with who, when and what.

``memory_changes`` keeps one row per change; ``memory_pins`` one row per pinned entry. Neither
has a foreign key to ``memory_entries``: retention deletes old entries and their history stays.
The rows are written in the transaction of the change itself
(:mod:`orchestrator.memory.corrections`), so a change is never without its record.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from sqlalchemy import Column, Index, Table, Text, delete, insert, or_, select
from sqlalchemy.engine import Connection, Engine
from sqlmodel import Field, SQLModel

from orchestrator.core.models import assume_utc

__all__ = ["PINS", "Action", "MemoryAudit", "MemoryChange", "pinned_ids", "set_pin"]

Action = Literal["forget", "restore", "edit", "pin", "unpin"]


class MemoryChangeRow(SQLModel, table=True):
    """One change a person made to a memory."""

    __tablename__ = "memory_changes"
    __table_args__ = (Index("ix_memory_changes_entry", "entry_id", "id"),)

    id: int | None = Field(default=None, primary_key=True)
    entry_id: int
    action: str = Field(max_length=16)
    actor: str = Field(max_length=64)
    at: datetime
    old_content: str | None = Field(default=None, sa_column=Column(Text))
    new_content: str | None = Field(default=None, sa_column=Column(Text))
    new_entry_id: int | None = Field(default=None, index=True)
    reason: str | None = Field(default=None, sa_column=Column(Text))


class MemoryPinRow(SQLModel, table=True):
    """A pinned entry: recall offers it whenever it searches the entry's scope."""

    __tablename__ = "memory_pins"

    entry_id: int = Field(primary_key=True, sa_column_kwargs={"autoincrement": False})
    pinned_by: str = Field(max_length=64)
    pinned_at: datetime


CHANGES: Table = MemoryChangeRow.__table__  # type: ignore[attr-defined]
PINS: Table = MemoryPinRow.__table__  # type: ignore[attr-defined]


@dataclass(frozen=True, slots=True, kw_only=True)
class MemoryChange:
    """One recorded change: ``new_entry_id`` is the entry an edit wrote; ``reason`` why, when
    it was given (an agent's ``memory_forget`` gives one)."""

    entry_id: int
    action: Action
    actor: str
    at: datetime
    old_content: str | None = None
    new_content: str | None = None
    new_entry_id: int | None = None
    reason: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form (``arena memory history --json``)."""
        return {
            "entry_id": self.entry_id,
            "action": self.action,
            "by": self.actor,
            "at": self.at.isoformat(),
            "old_content": self.old_content,
            "new_content": self.new_content,
            "new_entry_id": self.new_entry_id,
            "reason": self.reason,
        }


class MemoryAudit:
    """Reads and writes ``memory_changes`` (blocking)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    @staticmethod
    def record_in(conn: Connection, change: MemoryChange) -> None:
        """Keep ``change`` in the transaction of ``conn``."""
        conn.execute(
            insert(CHANGES).values(
                entry_id=change.entry_id,
                action=change.action,
                actor=change.actor,
                at=change.at.astimezone(UTC),
                old_content=change.old_content,
                new_content=change.new_content,
                new_entry_id=change.new_entry_id,
                reason=change.reason,
            )
        )

    def history(self, entry_id: int) -> list[MemoryChange]:
        """Every change to the entry, or that wrote it (an edit), oldest first."""
        query = (
            select(CHANGES)
            .where(or_(CHANGES.c.entry_id == entry_id, CHANGES.c.new_entry_id == entry_id))
            .order_by(CHANGES.c.id)
        )
        with self.engine.connect() as conn:
            rows = conn.execute(query).mappings().all()
        return [
            MemoryChange(
                entry_id=row["entry_id"],
                action=row["action"],
                actor=row["actor"],
                at=assume_utc(row["at"]),
                old_content=row["old_content"],
                new_content=row["new_content"],
                new_entry_id=row["new_entry_id"],
                reason=row["reason"],
            )
            for row in rows
        ]


def pinned_ids(conn: Connection, ids: Iterable[int] | None = None) -> set[int]:
    """The pinned entries among ``ids`` (None: every pinned entry)."""
    query = select(PINS.c.entry_id)
    if ids is not None:
        query = query.where(PINS.c.entry_id.in_(list(ids)))
    return {int(entry_id) for (entry_id,) in conn.execute(query)}


def set_pin(conn: Connection, entry_id: int, *, by: str | None, at: datetime) -> bool:
    """Pin (``by`` given) or unpin (``by`` None) an entry; False when nothing changed."""
    pinned = entry_id in pinned_ids(conn, [entry_id])
    if by is None:
        if pinned:
            conn.execute(delete(PINS).where(PINS.c.entry_id == entry_id))
        return pinned
    if not pinned:
        conn.execute(
            insert(PINS).values(entry_id=entry_id, pinned_by=by, pinned_at=at.astimezone(UTC))
        )
    return not pinned
