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
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Select, bindparam, delete, func, or_, select, update
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import IntegrityError, OperationalError

from orchestrator.errors import ServiceError, ValidationError
from orchestrator.memory.audit import PINS
from orchestrator.memory.session import fts, scope_log
from orchestrator.memory.session.embeddings import Embedder, cosine, pack, unpack
from orchestrator.memory.session.entries import (
    ENTRIES,
    IS_ACTIVE,
    VECTORS,
    MemoryEntry,
    active_in,
    db_time,
    to_record,
)
from orchestrator.memory.session.held import COLUMNS, ROWS
from orchestrator.memory.session.marks import UseMarks
from orchestrator.memory.session.records import (
    INDEXED_EXTRA,
    Citation,
    MemoryRecord,
    NewMemory,
    WriteOutcome,
    normalise,
)
from orchestrator.memory.session.resident import ResidentMemory
from orchestrator.memory.session.writes import Retry, VectorCache, write_in
from orchestrator.memory.transactions import QuickWriter

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

_RETRIES = 5
_T = ENTRIES
_V = VECTORS

# The statements of the per-message paths, built once: building a statement costs more than
# running it on SQLite. Search results need a record (its columns: COLUMNS, read without
# SQLAlchemy: ROWS), not the texts kept only for the index and duplicate checks.
_BY_IDS = select(*COLUMNS).where(_T.c.id.in_(bindparam("ids", expanding=True)))
_MARK_USED = (
    update(_T)
    .where(_T.c.id.in_(bindparam("ids", expanding=True)))
    .values(last_used_at=bindparam("now"))
    .execution_options(**scope_log.NOT_A_CHANGE)  # the log ignores last_used_at
)


def _pinned_of(count: int) -> Select[Any]:
    """The pinned active entries of ``count`` scopes (bound as ``s0``, ``i0``, ``s1``, …),
    newest first."""
    scopes = [
        (_T.c.scope == bindparam(f"s{n}")) & (_T.c.scope_id == bindparam(f"i{n}"))
        for n in range(count)
    ]
    return (
        select(*COLUMNS)
        .join(PINS, PINS.c.entry_id == _T.c.id)
        .where(IS_ACTIVE, or_(*scopes))
        .order_by(_T.c.id.desc())
    )


_WRITTEN_SINCE = select(func.count()).where(
    _T.c.agent == bindparam("agent"),
    _T.c.group_id == bindparam("group"),
    _T.c.created_at >= bindparam("since"),
)


class SessionMemory:
    """Reads and writes ``memory_entries``. Every method is blocking: call it from a thread
    (``asyncio.to_thread``) in async code, but :meth:`write_now`, made for the event loop.

    Args:
        engine: From :func:`orchestrator.memory.db.make_engine`.
        embedder: When given, each entry's embedding is stored, and an active entry of the
            same scope with cosine similarity >= 0.85 also counts as a duplicate.
    """

    def __init__(self, engine: Engine, embedder: Embedder | None = None) -> None:
        self._engine = engine
        self.embedder = embedder
        self._pinned: dict[int, Select[Any]] = {}
        # What recall searches at every turn, held in memory and kept current.
        self.resident = ResidentMemory(engine)
        self._quick = QuickWriter(engine)  # write_now's
        # The marks of turns at about the same moment; when the database is taken, mark_used.
        self._marks = UseMarks(engine, lambda ids, now: self.mark_used(ids, now))

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
            cache = VectorCache(type(self.embedder).__name__)
            try:
                with self._engine.begin() as conn:
                    return [
                        write_in(conn, item, vector, cache)
                        for item, vector in zip(items, vectors, strict=True)
                    ]
            except (IntegrityError, Retry):
                continue
        raise ServiceError("database", "memory writes kept conflicting; try again")

    def write_now(self, new: NewMemory) -> WriteOutcome | None:
        """:meth:`write` on the calling thread, for the event loop: None, with nothing written,
        when the database cannot be written at once (not SQLite, or another writer holds it;
        see :class:`orchestrator.memory.transactions.QuickWriter`): then :meth:`write`, in a
        thread."""
        vector = self._embed([new.content])[0]
        try:
            with self._quick.transaction() as conn:
                if conn is None:
                    return None
                return write_in(conn, new, vector, VectorCache(type(self.embedder).__name__))
        except (IntegrityError, OperationalError, Retry):
            return None  # rolled back: written the usual way, waiting and trying again

    def _embed(self, texts: Sequence[str]) -> builtins.list[bytes | None]:
        if self.embedder is None:
            return [None] * len(texts)
        return [pack(v) for v in self.embedder.embed(texts)]

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

    async def mark_used_soon(self, ids: Sequence[int], now: datetime) -> None:
        """:meth:`mark_used` from the event loop, with the marks other turns ask for meanwhile
        (:mod:`orchestrator.memory.session.marks`)."""
        await self._marks(ids, now)

    # Reading --------------------------------------------------------------------------------

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

    def records(self, ids: Iterable[int]) -> dict[int, MemoryRecord]:
        """The entries with these ids that exist, whatever their status, by id."""
        wanted = builtins.list(ids)
        if not wanted:
            return {}
        with self._engine.connect() as conn:
            fast = ROWS.by_ids(conn, wanted)
            rows = fast if fast is not None else conn.execute(_BY_IDS, {"ids": wanted}).mappings()
            return {row["id"]: to_record(row) for row in rows}

    def pinned(self, scopes: Sequence[tuple[str, str]]) -> builtins.list[MemoryRecord]:
        """The active entries of ``scopes`` that people pinned, newest first."""
        if not scopes:
            return []
        # Only the scopes' pins (with many groups, every group's pins were read each turn);
        # on SQLite straight from the driver, elsewhere one statement per number of scopes.
        with self._engine.connect() as conn:
            rows = ROWS.pinned(conn, scopes)
            if rows is None:
                return [to_record(row) for row in self._pinned_rows(conn, scopes)]
            return [to_record(row) for row in rows]

    def _pinned_rows(self, conn: Connection, scopes: Sequence[tuple[str, str]]) -> Any:
        statement = self._pinned.get(len(scopes))
        if statement is None:
            statement = self._pinned[len(scopes)] = _pinned_of(len(scopes))
        values = {f"s{n}": scope for n, (scope, _) in enumerate(scopes)}
        values |= {f"i{n}": scope_id for n, (_, scope_id) in enumerate(scopes)}
        return conn.execute(statement, values).mappings()

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
        written_by: str | None = None,
    ) -> builtins.list[MemoryRecord]:
        """Entries matching every filter given (``status=None``: any), newest first."""
        query = select(_T)
        for column, value in (
            ("scope", scope),
            ("scope_id", scope_id),
            ("type", type),
            ("status", status),
            ("agent", agent),
            ("written_by", written_by),
        ):
            if value is not None:
                query = query.where(_T.c[column] == value)
        with self._engine.connect() as conn:
            rows = conn.execute(query.order_by(_T.c.id.desc()).limit(limit)).mappings()
            return [to_record(row) for row in rows]
