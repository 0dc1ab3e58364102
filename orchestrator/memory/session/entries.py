"""The ``memory_entries`` table and the conversion between its rows and our values.

Two partial unique indexes (one active entry per normalised text, and one per key, in each
scope) back the write rules of :class:`orchestrator.memory.session.store.SessionMemory`. The
full-text index is created right after the tables (see :mod:`orchestrator.memory.session.fts`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import JSON, Column, Index, Table, Text, event, literal_column, text
from sqlalchemy.engine import Connection
from sqlmodel import Field, SQLModel

from orchestrator.core.models import assume_utc
from orchestrator.memory.session import fts, terms
from orchestrator.memory.session.embeddings import MemoryVector
from orchestrator.memory.session.records import Citation, MemoryRecord, NewMemory

__all__ = [
    "ENTRIES",
    "IS_ACTIVE",
    "VECTORS",
    "MemoryEntry",
    "active_in",
    "aware",
    "db_time",
    "new_row",
    "to_record",
]

_ACTIVE = text("status = 'active'")


class MemoryEntry(SQLModel, table=True):
    """One remembered item (the write rules are in :mod:`orchestrator.memory.session.store`)."""

    __tablename__ = "memory_entries"
    __table_args__ = (
        Index(
            "ux_memory_entries_active_norm",
            "scope",
            "scope_id",
            "norm_hash",
            unique=True,
            sqlite_where=_ACTIVE,
            postgresql_where=_ACTIVE,
        ),
        Index(
            "ux_memory_entries_active_key",
            "scope",
            "scope_id",
            "key",
            unique=True,
            sqlite_where=_ACTIVE,
            postgresql_where=_ACTIVE,
        ),
        Index("ix_memory_entries_scope_status", "scope", "scope_id", "status"),
        Index("ix_memory_entries_writer", "agent", "group_id", "created_at"),
    )

    id: int | None = Field(default=None, primary_key=True)
    scope: str = Field(max_length=16)
    scope_id: str = Field(default="", max_length=200)
    namespace: str = Field(default="agent", max_length=16)
    type: str = Field(max_length=32, index=True)
    content: str = Field(sa_column=Column(Text, nullable=False))
    norm: str = Field(sa_column=Column(Text, nullable=False))
    norm_hash: str = Field(max_length=64)
    key: str | None = Field(default=None, max_length=200)
    status: str = Field(default="active", max_length=16)
    confidence: float = 1.0
    verified: bool = False
    tags: list[str] = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    task_id: str | None = Field(default=None, max_length=200)
    agent: str = Field(default="", max_length=200)
    group_id: str | None = Field(default=None, max_length=200)
    source_message_id: str | None = Field(default=None, max_length=200)
    citation: dict[str, Any] | None = Field(default=None, sa_column=Column(JSON))
    written_by: str = Field(default="agent", max_length=16)
    count: int = 1
    created_at: datetime
    updated_at: datetime
    last_seen_at: datetime
    last_used_at: datetime | None = None
    supersedes: int | None = None
    superseded_by: int | None = None
    extra: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    search_body: str = Field(default="", sa_column=Column(Text, nullable=False))
    search_meta: str = Field(default="", sa_column=Column(Text, nullable=False))
    # The words of both, counted (memory.session.terms); None: written by an older version.
    search_terms: str | None = Field(default=None, sa_column=Column(Text))


ENTRIES: Table = MemoryEntry.__table__  # type: ignore[attr-defined]
VECTORS: Table = MemoryVector.__table__  # type: ignore[attr-defined]


@event.listens_for(SQLModel.metadata, "after_create")
def _install_full_text(_target: Any, connection: Connection, **_kw: Any) -> None:
    """``create_all`` makes the table; the full-text index needs raw SQL after it."""
    fts.install(connection)


def db_time(value: datetime) -> datetime:
    """Times are stored in UTC (the column type rejects naive values)."""
    return value.astimezone(UTC)


def aware(value: datetime | None) -> datetime | None:
    """A stored time with its zone (see :func:`assume_utc`), or None."""
    return None if value is None else assume_utc(value)


def to_record(row: Mapping[Any, Any]) -> MemoryRecord:
    return MemoryRecord(
        id=row["id"],
        scope=row["scope"],
        scope_id=row["scope_id"],
        namespace=row["namespace"],
        type=row["type"],
        content=row["content"],
        key=row["key"],
        status=row["status"],
        confidence=float(row["confidence"]),
        verified=bool(row["verified"]),
        tags=tuple(row["tags"] or ()),
        task_id=row["task_id"],
        agent=row["agent"],
        group_id=row["group_id"],
        source_message_id=row["source_message_id"],
        citation=Citation.from_dict(row["citation"]),
        written_by=row["written_by"],
        count=row["count"],
        created_at=aware(row["created_at"]) or datetime.now(UTC),
        updated_at=aware(row["updated_at"]) or datetime.now(UTC),
        last_seen_at=aware(row["last_seen_at"]) or datetime.now(UTC),
        last_used_at=aware(row["last_used_at"]),
        supersedes=row["supersedes"],
        superseded_by=row["superseded_by"],
        extra=dict(row["extra"] or {}),
    )


def new_row(new: NewMemory, norm: str) -> dict[str, Any]:
    now = db_time(new.now)
    body, meta = fts.index_text(new.content), new.search_meta()
    return {
        "scope": new.scope,
        "scope_id": new.scope_id,
        "namespace": new.namespace,
        "type": new.type,
        "content": new.content,
        "norm": norm,
        "norm_hash": hashlib.sha256(norm.encode()).hexdigest(),
        "key": new.key,
        "status": "active",
        "confidence": new.confidence,
        "verified": new.verified,
        "tags": list(new.tags),
        "task_id": new.task_id,
        "agent": new.agent,
        "group_id": new.group_id,
        "source_message_id": new.source_message_id,
        "citation": new.citation.as_dict() if new.citation else None,
        "written_by": new.written_by,
        "count": 1,
        "created_at": now,
        "updated_at": now,
        "last_seen_at": now,
        "last_used_at": None,
        "supersedes": None,
        "superseded_by": None,
        "extra": dict(new.extra),
        "search_body": body,
        "search_meta": meta,
        "search_terms": terms.packed(body, meta),
    }


# A literal, not a bound parameter: SQLite uses the partial indexes (``WHERE status =
# 'active'``) only when it can see the value, and re-plans a statement on every run when the
# value comes as a parameter.
IS_ACTIVE = ENTRIES.c.status == literal_column("'active'")


def active_in(scope: str, scope_id: str) -> Any:
    return (ENTRIES.c.scope == scope) & (ENTRIES.c.scope_id == scope_id) & IS_ACTIVE
