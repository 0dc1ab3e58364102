"""The growth log: every version of every agent's ``MEMORY.md`` and every group's summary, and
every attempt to write a new one.

``growth_versions`` keeps one row per version of a file: the full text, its SHA-256, how many
tokens and lines it added and removed, what triggered it and what it was made from (``source``:
the daily logs a distillation read, or the message range a summary covered). Versions are
numbered 1, 2, … per kind and owner; a unique index keeps the numbers gapless when writers
race, and the loser of a race retries with the next number.

``growth_runs`` keeps one row per attempt, whatever came of it (written, skipped, rejected,
conflict or error), so that failed attempts stay visible next to the versions.

The file on disk that goes with the versions is
:class:`orchestrator.memory.versions.file.VersionedFile`. Everything here blocks: call it
through ``asyncio.to_thread`` from async code.
"""

from __future__ import annotations

import difflib
import hashlib
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from sqlalchemy import JSON, Column, Index, Text, UniqueConstraint
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError
from sqlmodel import Field, Session, SQLModel, col, select
from sqlmodel.sql.expression import SelectOfScalar

from orchestrator.core.models import assume_utc
from orchestrator.errors import ServiceError

__all__ = [
    "Kind",
    "Run",
    "RunStatus",
    "Version",
    "VersionStore",
    "line_changes",
    "sha256_of",
]

Kind = Literal["memory_md", "summary"]
RunStatus = Literal["written", "skipped", "rejected", "conflict", "error"]

_RETRIES = 20


class VersionRow(SQLModel, table=True):
    """One version of a file."""

    __tablename__ = "growth_versions"
    __table_args__ = (UniqueConstraint("kind", "owner", "version", name="uq_growth_version"),)

    id: int | None = Field(default=None, primary_key=True)
    kind: str = Field(max_length=16)
    owner: str = Field(max_length=64)
    version: int
    created_at: datetime
    trigger: str = Field(max_length=64)
    tokens: int = 0
    lines_added: int = 0
    lines_removed: int = 0
    source: dict[str, Any] | None = Field(default=None, sa_column=Column(JSON))
    sha256: str = Field(max_length=64)
    text: str = Field(sa_column=Column(Text, nullable=False))


class RunRow(SQLModel, table=True):
    """One attempt to write a new version, whatever came of it."""

    __tablename__ = "growth_runs"
    __table_args__ = (Index("ix_growth_runs_owner", "kind", "owner", "id"),)

    id: int | None = Field(default=None, primary_key=True)
    kind: str = Field(max_length=16)
    owner: str = Field(max_length=64)
    created_at: datetime
    trigger: str = Field(max_length=64)
    status: str = Field(max_length=16)
    reason: str = Field(default="", sa_column=Column(Text, nullable=False))
    version: int | None = None
    tokens: int = 0
    source: dict[str, Any] | None = Field(default=None, sa_column=Column(JSON))


@dataclass(frozen=True, slots=True, kw_only=True)
class Version:
    """One stored version of a ``MEMORY.md`` or a summary."""

    kind: Kind
    owner: str
    version: int
    created_at: datetime
    trigger: str
    tokens: int
    lines_added: int
    lines_removed: int
    sha256: str
    text: str
    source: dict[str, Any] = field(default_factory=dict)

    def as_dict(self, *, with_text: bool = False) -> dict[str, Any]:
        """JSON-ready form (``arena growth --json``), with the text only when asked."""
        data = asdict(self)
        del data["kind"], data["owner"]
        if not with_text:
            del data["text"]
        return {**data, "created_at": self.created_at.isoformat()}


@dataclass(frozen=True, slots=True, kw_only=True)
class Run:
    """One attempt to write a version: ``version`` is set when one was written."""

    kind: Kind
    owner: str
    created_at: datetime
    trigger: str
    status: RunStatus
    reason: str = ""
    version: int | None = None
    tokens: int = 0
    source: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form (``arena growth --json``)."""
        data = asdict(self)
        del data["kind"], data["owner"]
        return {**data, "created_at": self.created_at.isoformat()}


def sha256_of(text: str) -> str:
    """The hex SHA-256 of ``text`` as UTF-8."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def line_changes(old: str, new: str) -> tuple[int, int]:
    """Lines added and removed going from ``old`` to ``new``, as a unified diff counts them."""
    added = removed = 0
    for line in difflib.unified_diff(old.splitlines(), new.splitlines(), lineterm="", n=0):
        if line.startswith(("+++", "---")):
            continue
        added += line.startswith("+")
        removed += line.startswith("-")
    return added, removed


def _to_version(row: VersionRow) -> Version:
    fields = row.model_dump(exclude={"id"})
    return Version(
        **{**fields, "created_at": assume_utc(row.created_at), "source": row.source or {}}
    )


def _to_run(row: RunRow) -> Run:
    fields = row.model_dump(exclude={"id"})
    return Run(**{**fields, "created_at": assume_utc(row.created_at), "source": row.source or {}})


class VersionStore:
    """Reads and writes the growth log. Every method is blocking."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def latest(self, kind: Kind, owner: str) -> Version | None:
        """The newest version, if any."""
        query = _of(kind, owner).order_by(col(VersionRow.version).desc()).limit(1)
        with Session(self.engine) as session:
            row = session.exec(query).first()
        return _to_version(row) if row else None

    def get(self, kind: Kind, owner: str, version: int) -> Version | None:
        """One version by number, if it exists."""
        query = _of(kind, owner).where(VersionRow.version == version)
        with Session(self.engine) as session:
            row = session.exec(query).first()
        return _to_version(row) if row else None

    def history(self, kind: Kind, owner: str) -> list[Version]:
        """Every version, oldest first, texts included."""
        with Session(self.engine) as session:
            rows = session.exec(_of(kind, owner).order_by(col(VersionRow.version))).all()
        return [_to_version(r) for r in rows]

    def add(
        self,
        kind: Kind,
        owner: str,
        text: str,
        *,
        trigger: str,
        created_at: datetime,
        tokens: int,
        source: dict[str, Any] | None = None,
    ) -> Version:
        """Store ``text`` as the next version; line changes are counted against the latest.

        Raises:
            ServiceError: when concurrent writers kept taking the next number.
        """
        for _ in range(_RETRIES):
            latest = self.latest(kind, owner)
            added, removed = line_changes(latest.text if latest else "", text)
            row = VersionRow(
                kind=kind,
                owner=owner,
                version=(latest.version if latest else 0) + 1,
                created_at=created_at.astimezone(UTC),
                trigger=trigger,
                tokens=tokens,
                lines_added=added,
                lines_removed=removed,
                source=source,
                sha256=sha256_of(text),
                text=text,
            )
            with Session(self.engine) as session:
                session.add(row)
                try:
                    session.commit()
                except IntegrityError:
                    session.rollback()
                    continue
                session.refresh(row)
                return _to_version(row)
        raise ServiceError("database", f"could not number a new version of {kind} {owner}")

    def record_run(
        self,
        kind: Kind,
        owner: str,
        *,
        status: RunStatus,
        trigger: str,
        created_at: datetime,
        reason: str = "",
        version: int | None = None,
        tokens: int = 0,
        source: dict[str, Any] | None = None,
    ) -> Run:
        """Keep one attempt in the log."""
        row = RunRow(
            kind=kind,
            owner=owner,
            created_at=created_at.astimezone(UTC),
            trigger=trigger,
            status=status,
            reason=reason,
            version=version,
            tokens=tokens,
            source=source,
        )
        with Session(self.engine) as session:
            session.add(row)
            session.commit()
            session.refresh(row)
            return _to_run(row)

    def runs(self, kind: Kind, owner: str) -> list[Run]:
        """Every attempt, oldest first."""
        query = (
            select(RunRow)
            .where(RunRow.kind == kind, RunRow.owner == owner)
            .order_by(col(RunRow.id))
        )
        with Session(self.engine) as session:
            rows = session.exec(query).all()
        return [_to_run(r) for r in rows]


def _of(kind: Kind, owner: str) -> SelectOfScalar[VersionRow]:
    return select(VersionRow).where(VersionRow.kind == kind, VersionRow.owner == owner)
