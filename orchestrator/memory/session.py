"""Session memory: what a group (``session``), an agent (``personal``) or everyone (``global``)
has learned, in SQL, with a full-text index.

Nothing is ever deleted. Writing content that an active entry of the same scope already holds
(after :func:`normalise`, or by meaning when embeddings are on) reinforces that entry; writing
a ``key`` that an active entry of the scope already has, with new content, supersedes it: the
old entry stays, marked ``superseded``, and the two are linked. Two partial unique indexes (one
active entry per normalised text, and one per key, in each scope) keep this true when writers
race: the loser of a race retries and finds the winner's row.
"""

from __future__ import annotations

import builtins
import hashlib
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    Column,
    Index,
    Table,
    Text,
    case,
    event,
    func,
    insert,
    literal,
    or_,
    select,
    text,
    update,
)
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import IntegrityError
from sqlmodel import Field, SQLModel

from orchestrator.errors import ServiceError, ValidationError
from orchestrator.memory import fts
from orchestrator.memory.embeddings import (
    DUPLICATE_SIMILARITY,
    Embedder,
    MemoryVector,
    cosine,
    pack,
    unpack,
)
from orchestrator.memory.records import (
    INDEXED_EXTRA,
    Citation,
    MemoryRecord,
    NewMemory,
    WriteOutcome,
    normalise,
)

__all__ = [
    "INDEXED_EXTRA",
    "Citation",
    "MemoryEntry",
    "MemoryRecord",
    "NewMemory",
    "SessionMemory",
    "WriteOutcome",
    "normalise",
]

_ACTIVE = text("status = 'active'")
_RETRIES = 5
_REINFORCE_STEP = 0.05


class MemoryEntry(SQLModel, table=True):
    """One remembered item; see the module docstring for the write rules."""

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


_T: Table = MemoryEntry.__table__  # type: ignore[attr-defined]
_V: Table = MemoryVector.__table__  # type: ignore[attr-defined]


@event.listens_for(SQLModel.metadata, "after_create")
def _install_full_text(_target: Any, connection: Connection, **_kw: Any) -> None:
    """``create_all`` makes the table; the full-text index needs raw SQL after it."""
    fts.install(connection)


class _Retry(Exception):
    """A concurrent writer changed a row this write had read: start the write again."""


def _db_time(value: datetime) -> datetime:
    """Times are stored in UTC (the column type rejects naive values)."""
    return value.astimezone(UTC)


def _aware(value: datetime | None) -> datetime | None:
    if value is None:
        return None
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def _record(row: Mapping[Any, Any]) -> MemoryRecord:
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
        created_at=_aware(row["created_at"]) or datetime.now(UTC),
        updated_at=_aware(row["updated_at"]) or datetime.now(UTC),
        last_seen_at=_aware(row["last_seen_at"]) or datetime.now(UTC),
        last_used_at=_aware(row["last_used_at"]),
        supersedes=row["supersedes"],
        superseded_by=row["superseded_by"],
        extra=dict(row["extra"] or {}),
    )


def _new_row(new: NewMemory, norm: str) -> dict[str, Any]:
    now = _db_time(new.now)
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
        "search_body": fts.index_text(new.content),
        "search_meta": new.search_meta(),
    }


def _active_in(scope: str, scope_id: str) -> Any:
    return (_T.c.scope == scope) & (_T.c.scope_id == scope_id) & (_T.c.status == "active")


class _Vectors:
    """The stored vectors of each scope's active entries, loaded once per transaction."""

    def __init__(self, model: str) -> None:
        self.model = model
        self._by_scope: dict[tuple[str, str], builtins.list[tuple[int, builtins.list[float]]]] = {}

    def _load(self, conn: Connection, scope: str, scope_id: str) -> builtins.list[Any]:
        key = (scope, scope_id)
        if key not in self._by_scope:
            rows = conn.execute(
                select(_V.c.entry_id, _V.c.vector)
                .join(_T, _T.c.id == _V.c.entry_id)
                .where(_active_in(scope, scope_id))
            )
            self._by_scope[key] = [(int(i), unpack(blob)) for i, blob in rows]
        return self._by_scope[key]

    def duplicate(
        self, conn: Connection, scope: str, scope_id: str, vector: Sequence[float]
    ) -> int | None:
        """The id of the most similar active entry at or above the duplicate threshold."""
        best_id, best = None, DUPLICATE_SIMILARITY
        for entry_id, stored in self._load(conn, scope, scope_id):
            similarity = cosine(vector, stored)
            if similarity >= best:
                best_id, best = entry_id, similarity
        return best_id

    def add(self, conn: Connection, entry_id: int, scope: tuple[str, str], vector: bytes) -> None:
        conn.execute(insert(_V).values(entry_id=entry_id, model=self.model, vector=vector))
        self._load(conn, *scope).append((entry_id, unpack(vector)))


class SessionMemory:
    """Reads and writes ``memory_entries``. Every method is blocking: call it from a thread
    (``asyncio.to_thread``) in async code.

    Args:
        engine: From :func:`orchestrator.memory.db.make_engine`.
        embedder: When given, each entry's embedding is stored, and an active entry of the
            same scope with cosine similarity >= 0.85 also counts as a duplicate.
    """

    def __init__(self, engine: Engine, embedder: Embedder | None = None) -> None:
        self._engine = engine
        self.embedder = embedder

    # Writing --------------------------------------------------------------------------------

    def write(self, new: NewMemory) -> WriteOutcome:
        """Store one memory: add it, reinforce an equal entry, or supersede one with its key.

        Raises:
            ServiceError: when concurrent writers kept conflicting after several retries.
        """
        return self.write_many([new])[0]

    def write_many(self, items: Sequence[NewMemory]) -> builtins.list[WriteOutcome]:
        """Store many memories in one transaction, with the rules of :meth:`write` applied in
        order (a later item may reinforce or supersede an earlier one). For imports."""
        if not items:
            return []
        vectors = self._embed([item.content for item in items])
        for _ in range(_RETRIES):
            cache = _Vectors(type(self.embedder).__name__)
            try:
                with self._engine.begin() as conn:
                    return [
                        self._write_in(conn, item, vector, cache)
                        for item, vector in zip(items, vectors, strict=True)
                    ]
            except (IntegrityError, _Retry):
                continue
        raise ServiceError("database", "memory writes kept conflicting; try again")

    def _embed(self, texts: Sequence[str]) -> builtins.list[bytes | None]:
        if self.embedder is None:
            return [None] * len(texts)
        return [pack(v) for v in self.embedder.embed(texts)]

    def _write_in(
        self, conn: Connection, new: NewMemory, vector: bytes | None, cache: _Vectors
    ) -> WriteOutcome:
        norm = normalise(new.content)
        values = _new_row(new, norm)
        same = conn.execute(
            select(_T.c.id).where(
                _active_in(new.scope, new.scope_id), _T.c.norm_hash == values["norm_hash"]
            )
        ).first()
        duplicate = same[0] if same else None
        if duplicate is None and vector is not None:
            duplicate = cache.duplicate(conn, new.scope, new.scope_id, unpack(vector))
        if duplicate is not None:
            return WriteOutcome(action="reinforced", record=self._reinforce(conn, duplicate, new))
        previous = None
        if new.key is not None:
            old = (
                conn.execute(
                    select(_T).where(_active_in(new.scope, new.scope_id), _T.c.key == new.key)
                )
                .mappings()
                .first()
            )
            if old is not None:
                previous = self._supersede(conn, old["id"], values["created_at"])
                values["supersedes"] = previous.id
        result = conn.execute(insert(_T).values(**values))
        entry_id = int(result.inserted_primary_key[0])  # type: ignore[index]
        if previous is not None:
            conn.execute(update(_T).where(_T.c.id == previous.id).values(superseded_by=entry_id))
            previous = self._get(conn, previous.id)
        if vector is not None:
            cache.add(conn, entry_id, (new.scope, new.scope_id), vector)
        record = _record({**values, "id": entry_id})
        if previous is None:
            return WriteOutcome(action="added", record=record)
        return WriteOutcome(action="superseded", record=record, previous=previous)

    def _reinforce(self, conn: Connection, entry_id: int, new: NewMemory) -> MemoryRecord:
        now = _db_time(new.now)
        stored = _T.c.confidence
        best = case((stored >= new.confidence, stored), else_=literal(new.confidence))
        changes: dict[str, Any] = {
            "count": _T.c.count + 1,
            "last_seen_at": now,
            "updated_at": now,
            "confidence": case(
                (best + _REINFORCE_STEP > 1.0, literal(1.0)), else_=best + _REINFORCE_STEP
            ),
        }
        if new.verified:
            changes["verified"] = True
        done = conn.execute(
            update(_T).where(_T.c.id == entry_id, _T.c.status == "active").values(**changes)
        )
        if done.rowcount != 1:
            raise _Retry
        return self._get(conn, entry_id)

    def _supersede(self, conn: Connection, entry_id: int, now: datetime) -> MemoryRecord:
        done = conn.execute(
            update(_T)
            .where(_T.c.id == entry_id, _T.c.status == "active")
            .values(status="superseded", updated_at=now)
        )
        if done.rowcount != 1:
            raise _Retry
        return self._get(conn, entry_id)

    # Status ---------------------------------------------------------------------------------

    def forget(self, entry_id: int) -> MemoryRecord | None:
        """Archive an entry (reversible with :meth:`restore`); None when there is no such id."""
        return self._set_status(entry_id, "archived")

    def restore(self, entry_id: int) -> MemoryRecord | None:
        """Make an archived entry active again; None when there is no such id.

        Raises:
            ValidationError: an active entry of its scope now has the same content or key.
        """
        try:
            return self._set_status(entry_id, "active", only_from="archived")
        except IntegrityError as exc:
            raise ValidationError(
                "id", f"memory {entry_id}: an active entry has the same content or key"
            ) from exc

    def _set_status(
        self, entry_id: int, status: str, only_from: str | None = None
    ) -> MemoryRecord | None:
        with self._engine.begin() as conn:
            query = update(_T).where(_T.c.id == entry_id)
            if only_from is not None:
                query = query.where(_T.c.status == only_from)
            conn.execute(query.values(status=status))
            row = conn.execute(select(_T).where(_T.c.id == entry_id)).mappings().first()
        return _record(row) if row else None

    def mark_used(self, ids: Iterable[int], now: datetime) -> None:
        """Record that these entries were just recalled into a prompt."""
        wanted = builtins.list(ids)
        if wanted:
            with self._engine.begin() as conn:
                conn.execute(
                    update(_T).where(_T.c.id.in_(wanted)).values(last_used_at=_db_time(now))
                )

    # Reading --------------------------------------------------------------------------------

    def _get(self, conn: Connection, entry_id: int) -> MemoryRecord:
        return _record(conn.execute(select(_T).where(_T.c.id == entry_id)).mappings().one())

    def get(self, entry_id: int) -> MemoryRecord | None:
        """The entry with this id, whatever its status."""
        with self._engine.connect() as conn:
            row = conn.execute(select(_T).where(_T.c.id == entry_id)).mappings().first()
        return _record(row) if row else None

    def _by_ids(
        self, conn: Connection, scored: Sequence[tuple[int, float]]
    ) -> builtins.list[tuple[MemoryRecord, float]]:
        if not scored:
            return []
        ids = [entry_id for entry_id, _ in scored]
        rows = conn.execute(select(_T).where(_T.c.id.in_(ids))).mappings()
        found = {row["id"]: _record(row) for row in rows}
        return [(found[i], score) for i, score in scored if i in found]

    def search(
        self, query: str, *, scopes: Sequence[tuple[str, str]], limit: int = 50
    ) -> builtins.list[tuple[MemoryRecord, float]]:
        """Active entries of ``scopes`` that share content words with ``query``, best first.

        Returns:
            ``(record, score)`` pairs with the raw full-text relevance (higher is better).
        """
        terms = fts.query_terms(query)
        with self._engine.connect() as conn:
            return self._by_ids(conn, fts.search_ids(conn, terms, scopes, limit))

    def search_similar(
        self, vector: Sequence[float], *, scopes: Sequence[tuple[str, str]], limit: int = 50
    ) -> builtins.list[tuple[MemoryRecord, float]]:
        """Active entries of ``scopes`` nearest to ``vector`` (an embedding of the query by
        :attr:`embedder`), best first, with their cosine similarity."""
        if not scopes or limit <= 0:
            return []
        target = unpack(pack(vector))
        where = [_active_in(scope, scope_id) for scope, scope_id in scopes]
        with self._engine.connect() as conn:
            rows = conn.execute(
                select(_V.c.entry_id, _V.c.vector)
                .join(_T, _T.c.id == _V.c.entry_id)
                .where(or_(*where))
            )
            scored = sorted(
                ((int(i), cosine(target, unpack(blob))) for i, blob in rows),
                key=lambda pair: -pair[1],
            )[:limit]
            return self._by_ids(conn, scored)

    def count_written_since(self, agent: str, group: str, since: datetime) -> int:
        """How many entries ``agent`` added in ``group`` from ``since`` on (the daily limit)."""
        query = select(func.count()).where(
            _T.c.agent == agent, _T.c.group_id == group, _T.c.created_at >= _db_time(since)
        )
        with self._engine.connect() as conn:
            return int(conn.execute(query).scalar_one())

    def stats(self) -> dict[str, Any]:
        """Counts of entries: in total, and by scope, type and status."""
        out: dict[str, Any] = {}
        with self._engine.connect() as conn:
            out["total"] = int(conn.execute(select(func.count()).select_from(_T)).scalar_one())
            for name in ("scope", "type", "status"):
                column = _T.c[name]
                rows = conn.execute(select(column, func.count()).group_by(column).order_by(column))
                out[f"by_{name}"] = {str(value): int(n) for value, n in rows}
        return out

    def export(self, group: str) -> builtins.list[dict[str, Any]]:
        """Every session entry of ``group``, whatever its status, oldest first, JSON-ready."""
        query = select(_T).where(_T.c.scope == "session", _T.c.scope_id == group)
        with self._engine.connect() as conn:
            rows = conn.execute(query.order_by(_T.c.id)).mappings()
            return [_record(row).as_dict() for row in rows]

    def list(
        self,
        scope: str | None = None,
        scope_id: str | None = None,
        type: str | None = None,
        status: str | None = "active",
        agent: str | None = None,
        limit: int = 100,
    ) -> builtins.list[MemoryRecord]:
        """Entries matching every filter given (``status=None``: any), newest first."""
        query = select(_T)
        for column, value in (
            ("scope", scope),
            ("scope_id", scope_id),
            ("type", type),
            ("status", status),
            ("agent", agent),
        ):
            if value is not None:
                query = query.where(_T.c[column] == value)
        with self._engine.connect() as conn:
            rows = conn.execute(query.order_by(_T.c.id.desc()).limit(limit)).mappings()
            return [_record(row) for row in rows]
