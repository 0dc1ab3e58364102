"""Session memory: what a group (``session``), an agent (``personal``) or everyone (``global``)
has learned, in SQL, with a full-text index.

Nothing is deleted unless archive retention is set (:meth:`SessionMemory.delete_archived_before`,
run by :mod:`orchestrator.background.retention`); it deletes only superseded and archived
entries. Writing content that an active entry of the same scope already holds
(after :func:`normalise`, or by meaning when embeddings are on) reinforces that entry; writing
a ``key`` that an active entry of the scope already has, with new content, supersedes it: the
old entry stays, marked ``superseded``, and the two are linked. Two partial unique indexes (one
active entry per normalised text, and one per key, in each scope) keep this true when writers
race: the loser of a race retries and finds the winner's row.
"""

from __future__ import annotations

import builtins
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import bindparam, case, delete, func, insert, literal, or_, select, update
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import IntegrityError

from orchestrator.errors import ServiceError, ValidationError
from orchestrator.memory import fts
from orchestrator.memory.embeddings import DUPLICATE_SIMILARITY, Embedder, cosine, pack, unpack
from orchestrator.memory.entries import (
    ENTRIES,
    IS_ACTIVE,
    VECTORS,
    MemoryEntry,
    active_in,
    db_time,
    new_row,
    to_record,
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
    "TextHit",
    "WriteOutcome",
    "normalise",
]

_RETRIES = 5
_REINFORCE_STEP = 0.05
_T = ENTRIES
_V = VECTORS

# The statements of the per-message paths, built once: building a statement costs more than
# running it on SQLite.
_ACTIVE_IN_SCOPE = (
    (_T.c.scope == bindparam("scope")) & (_T.c.scope_id == bindparam("scope_id")) & IS_ACTIVE
)
_SAME_TEXT = select(_T.c.id).where(_ACTIVE_IN_SCOPE, _T.c.norm_hash == bindparam("norm_hash"))
_SAME_KEY = select(_T).where(_ACTIVE_IN_SCOPE, _T.c.key == bindparam("key"))
_INSERT = insert(_T)
_BY_ID = select(_T).where(_T.c.id == bindparam("id"))
# Search results need a record, not the texts kept only for the index and duplicate checks.
_RECORD_COLUMNS = [
    c for c in _T.c if c.name not in ("norm", "norm_hash", "search_body", "search_meta")
]
_BY_IDS = select(*_RECORD_COLUMNS).where(_T.c.id.in_(bindparam("ids", expanding=True)))
# What recall needs to judge a full-text hit's relevance; the full record is read only for
# the hits that pass (most of a search's candidates do not).
_HIT_COLUMNS = (
    "id",
    "scope",
    "scope_id",
    "status",
    "type",
    "content",
    "key",
    "tags",
    "extra",
    "agent",
)
_HITS_BY_IDS = select(*(_T.c[name] for name in _HIT_COLUMNS)).where(
    _T.c.id.in_(bindparam("ids", expanding=True))
)
_MARK_USED = (
    update(_T)
    .where(_T.c.id.in_(bindparam("ids", expanding=True)))
    .values(last_used_at=bindparam("now"))
)
_WRITTEN_SINCE = select(func.count()).where(
    _T.c.agent == bindparam("agent"),
    _T.c.group_id == bindparam("group"),
    _T.c.created_at >= bindparam("since"),
)


@dataclass(frozen=True, slots=True, kw_only=True)
class TextHit:
    """A full-text hit with the fields that say what it is about and who wrote it; read the
    whole entry with :meth:`SessionMemory.records`."""

    id: int
    type: str
    content: str
    key: str | None
    tags: tuple[str, ...]
    extra: Mapping[str, Any]
    agent: str
    score: float


class _Retry(Exception):
    """A concurrent writer changed a row this write had read: start the write again."""


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
                .where(active_in(scope, scope_id))
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
        """Store a new entry's vector (and remember it for the rest of the transaction)."""
        stored = self._load(conn, *scope)
        conn.execute(insert(_V).values(entry_id=entry_id, model=self.model, vector=vector))
        stored.append((entry_id, unpack(vector)))


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
        values = new_row(new, norm)
        scope = {"scope": new.scope, "scope_id": new.scope_id}
        same = conn.execute(_SAME_TEXT, {**scope, "norm_hash": values["norm_hash"]}).first()
        duplicate = same[0] if same else None
        if duplicate is None and vector is not None:
            duplicate = cache.duplicate(conn, new.scope, new.scope_id, unpack(vector))
        if duplicate is not None:
            return WriteOutcome(action="reinforced", record=self._reinforce(conn, duplicate, new))
        previous = None
        if new.key is not None:
            old = conn.execute(_SAME_KEY, {**scope, "key": new.key}).mappings().first()
            if old is not None:
                previous = self._supersede(conn, old["id"], values["created_at"])
                values["supersedes"] = previous.id
        result = conn.execute(_INSERT, values)
        entry_id = int(result.inserted_primary_key[0])  # type: ignore[index]
        if previous is not None:
            conn.execute(update(_T).where(_T.c.id == previous.id).values(superseded_by=entry_id))
            previous = self._get(conn, previous.id)
        if vector is not None:
            cache.add(conn, entry_id, (new.scope, new.scope_id), vector)
        record = to_record({**values, "id": entry_id})
        if previous is None:
            return WriteOutcome(action="added", record=record)
        return WriteOutcome(action="superseded", record=record, previous=previous)

    def _reinforce(self, conn: Connection, entry_id: int, new: NewMemory) -> MemoryRecord:
        current = self._get(conn, entry_id)
        seen = [current.source_message_id, *current.extra.get("reinforced_by", [])]
        if new.source_message_id is not None and new.source_message_id in seen:
            # The same message again (a turn replayed after a crash): nothing new learnt.
            return current
        now = db_time(new.now)
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
        if new.source_message_id is not None:
            sources = [*current.extra.get("reinforced_by", []), new.source_message_id]
            changes["extra"] = {**current.extra, "reinforced_by": sources[-50:]}
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

    def forget(self, entry_id: int, *, now: datetime | None = None) -> MemoryRecord | None:
        """Archive an entry (reversible with :meth:`restore` until archive retention deletes
        it); None when there is no such id. ``now`` (default: the current time) is recorded
        as its ``updated_at``, which retention counts from."""
        return self._set_status(entry_id, "archived", now=now)

    def restore(self, entry_id: int, *, now: datetime | None = None) -> MemoryRecord | None:
        """Make an archived entry active again; None when there is no such id.

        Raises:
            ValidationError: an active entry of its scope now has the same content or key.
        """
        try:
            return self._set_status(entry_id, "active", only_from="archived", now=now)
        except IntegrityError as exc:
            raise ValidationError(
                "id", f"memory {entry_id}: an active entry has the same content or key"
            ) from exc

    def _set_status(
        self,
        entry_id: int,
        status: str,
        only_from: str | None = None,
        *,
        now: datetime | None = None,
    ) -> MemoryRecord | None:
        changed = db_time(now or datetime.now(UTC))
        with self._engine.begin() as conn:
            query = update(_T).where(_T.c.id == entry_id, _T.c.status != status)
            if only_from is not None:
                query = query.where(_T.c.status == only_from)
            conn.execute(query.values(status=status, updated_at=changed))
            row = conn.execute(select(_T).where(_T.c.id == entry_id)).mappings().first()
        return to_record(row) if row else None

    def delete_archived_before(self, before: datetime, *, dry_run: bool = False) -> int:
        """Delete superseded and archived entries last changed (superseded, forgotten) before
        ``before``, with their vectors; the full-text index follows (a trigger on SQLite, a
        generated column on PostgreSQL). Active entries are never touched; an active entry's
        ``supersedes`` may afterwards name an id that is gone.

        Returns:
            How many entries were deleted (with ``dry_run``: would be).
        """
        old = (_T.c.status != "active") & (_T.c.updated_at < db_time(before))
        with self._engine.begin() as conn:
            if dry_run:
                return int(conn.execute(select(func.count()).where(old)).scalar_one())
            conn.execute(delete(_V).where(_V.c.entry_id.in_(select(_T.c.id).where(old))))
            return int(conn.execute(delete(_T).where(old)).rowcount)

    def mark_used(self, ids: Iterable[int], now: datetime) -> None:
        """Record that these entries were just recalled into a prompt."""
        wanted = builtins.list(ids)
        if wanted:
            with self._engine.begin() as conn:
                conn.execute(_MARK_USED, {"ids": wanted, "now": db_time(now)})

    # Reading --------------------------------------------------------------------------------

    def _get(self, conn: Connection, entry_id: int) -> MemoryRecord:
        return to_record(conn.execute(_BY_ID, {"id": entry_id}).mappings().one())

    def get(self, entry_id: int) -> MemoryRecord | None:
        """The entry with this id, whatever its status."""
        with self._engine.connect() as conn:
            row = conn.execute(select(_T).where(_T.c.id == entry_id)).mappings().first()
        return to_record(row) if row else None

    def _by_ids(
        self, conn: Connection, scored: Sequence[tuple[int, float]]
    ) -> builtins.list[tuple[MemoryRecord, float]]:
        if not scored:
            return []
        ids = [entry_id for entry_id, _ in scored]
        rows = conn.execute(_BY_IDS, {"ids": ids}).mappings()
        found = {row["id"]: to_record(row) for row in rows}
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
            found = self._by_ids(conn, fts.search_ids(conn, terms, scopes, limit))
        # The index already keeps to the scopes; this check on the rows costs nothing.
        wanted = set(scopes)
        return [
            (record, score)
            for record, score in found
            if record.status == "active" and (record.scope, record.scope_id) in wanted
        ]

    def search_hits(
        self, query: str, *, scopes: Sequence[tuple[str, str]], limit: int = 50
    ) -> builtins.list[TextHit]:
        """:meth:`search`, reading only what a hit's relevance depends on (see
        :class:`TextHit`): cheaper when most hits are then left out."""
        terms = fts.query_terms(query)
        wanted = set(scopes)
        with self._engine.connect() as conn:
            scored = fts.search_ids(conn, terms, scopes, limit)
            if not scored:
                return []
            rows = conn.execute(_HITS_BY_IDS, {"ids": [i for i, _ in scored]}).mappings()
            found = {
                row["id"]: row
                for row in rows
                if row["status"] == "active" and (row["scope"], row["scope_id"]) in wanted
            }
        return [
            TextHit(
                id=entry_id,
                type=row["type"],
                content=row["content"],
                key=row["key"],
                tags=tuple(row["tags"] or ()),
                extra=dict(row["extra"] or {}),
                agent=row["agent"],
                score=score,
            )
            for entry_id, score in scored
            if (row := found.get(entry_id)) is not None
        ]

    def records(self, ids: Iterable[int]) -> dict[int, MemoryRecord]:
        """The entries with these ids that exist, whatever their status, by id."""
        wanted = builtins.list(ids)
        if not wanted:
            return {}
        with self._engine.connect() as conn:
            rows = conn.execute(_BY_IDS, {"ids": wanted}).mappings()
            return {row["id"]: to_record(row) for row in rows}

    def search_similar(
        self, vector: Sequence[float], *, scopes: Sequence[tuple[str, str]], limit: int = 50
    ) -> builtins.list[tuple[MemoryRecord, float]]:
        """Active entries of ``scopes`` nearest to ``vector`` (an embedding of the query by
        :attr:`embedder`), best first, with their cosine similarity."""
        if not scopes or limit <= 0:
            return []
        target = unpack(pack(vector))
        where = [active_in(scope, scope_id) for scope, scope_id in scopes]
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

    def scopes(self) -> builtins.list[tuple[str, str]]:
        """Every (scope, scope_id) that has an active entry."""
        query = select(_T.c.scope, _T.c.scope_id).where(_T.c.status == "active").distinct()
        with self._engine.connect() as conn:
            return [(str(scope), str(scope_id)) for scope, scope_id in conn.execute(query)]

    def count_written_since(self, agent: str, group: str, since: datetime) -> int:
        """How many entries ``agent`` added in ``group`` from ``since`` on (the daily limit)."""
        params = {"agent": agent, "group": group, "since": db_time(since)}
        with self._engine.connect() as conn:
            return int(conn.execute(_WRITTEN_SINCE, params).scalar_one())

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
            return [to_record(row).as_dict() for row in rows]

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
            return [to_record(row) for row in rows]
