"""Writing one memory inside a transaction: add it, reinforce an equal active entry of its scope
(same normalised text, or, with embeddings, close enough in meaning), or supersede the active
entry that has its key.

A write that finds a row changed under it by a concurrent writer raises :class:`Retry`; the
caller (:meth:`orchestrator.memory.session.store.SessionMemory.write_many`) starts the transaction
again.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import bindparam, case, insert, literal, or_, select, update
from sqlalchemy.engine import Connection
from sqlalchemy.exc import NoResultFound

from orchestrator.memory.session import scope_log
from orchestrator.memory.session.embeddings import DUPLICATE_SIMILARITY, cosine, unpack
from orchestrator.memory.session.entries import (
    ENTRIES,
    IS_ACTIVE,
    VECTORS,
    active_in,
    db_time,
    new_row,
    to_record,
)
from orchestrator.memory.session.records import MemoryRecord, NewMemory, WriteOutcome, normalise
from orchestrator.memory.session.sqlite_rows import SqliteRows, SqliteStatement

__all__ = ["Retry", "VectorCache", "write_in"]

_REINFORCE_STEP = 0.05
_T = ENTRIES
_V = VECTORS

# The statements of the per-message paths, built once: building a statement costs more than
# running it on SQLite.
_ACTIVE_IN_SCOPE = (
    (_T.c.scope == bindparam("scope")) & (_T.c.scope_id == bindparam("scope_id")) & IS_ACTIVE
)
_SAME_TEXT = select(_T).where(_ACTIVE_IN_SCOPE, _T.c.norm_hash == bindparam("norm_hash"))
_SAME_KEY = select(_T).where(_ACTIVE_IN_SCOPE, _T.c.key == bindparam("key"))
_INSERT = insert(_T)
_BY_ID = select(_T).where(_T.c.id == bindparam("id"))
_OFFERED = bindparam("offered", type_=_T.c.confidence.type)
_BEST = case((_T.c.confidence >= _OFFERED, _T.c.confidence), else_=_OFFERED)
_REINFORCE = (
    update(_T)
    .where(_T.c.id == bindparam("entry_id"), _T.c.status == "active")
    .values(
        count=_T.c.count + 1,
        confidence=case(
            (_BEST + _REINFORCE_STEP > 1.0, literal(1.0)), else_=_BEST + _REINFORCE_STEP
        ),
        verified=or_(_T.c.verified, bindparam("verified_now", type_=_T.c.verified.type)),
        last_seen_at=bindparam("seen_at", type_=_T.c.last_seen_at.type),
        updated_at=bindparam("seen_at", type_=_T.c.updated_at.type),
        extra=bindparam("new_extra", type_=_T.c.extra.type),
    )
    .returning(*_T.c)
)
# On SQLite, the statements of a memory saved again (the most frequent write) go straight to
# the driver: through SQLAlchemy they cost several times their own work.
_ROWS = SqliteRows(list(_T.c))
_FAST_SAME_TEXT = SqliteStatement(_SAME_TEXT)
_FAST_BY_ID = SqliteStatement(_BY_ID)
_FAST_REINFORCE = SqliteStatement(_REINFORCE)


class Retry(Exception):
    """A concurrent writer changed a row this write had read: start the write again."""


class VectorCache:
    """The stored vectors of each scope's active entries, loaded once per transaction."""

    def __init__(self, model: str) -> None:
        self.model = model
        self._by_scope: dict[tuple[str, str], list[tuple[int, list[float]]]] = {}

    def _load(self, conn: Connection, scope: str, scope_id: str) -> list[Any]:
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


def write_in(
    conn: Connection, new: NewMemory, vector: bytes | None, cache: VectorCache
) -> WriteOutcome:
    """Store ``new`` in the transaction of ``conn``: add, reinforce or supersede.

    Args:
        conn: An open write transaction.
        new: The memory to store.
        vector: Its packed embedding, or None without an embedder.
        cache: The transaction's vectors, for duplicates by meaning.

    Raises:
        Retry: a concurrent writer changed a row this write had read.
    """
    norm = normalise(new.content)
    values = new_row(new, norm)
    scope = {"scope": new.scope, "scope_id": new.scope_id}
    same = _same_text(conn, {**scope, "norm_hash": values["norm_hash"]})
    if same is None and vector is not None:
        duplicate = cache.duplicate(conn, new.scope, new.scope_id, unpack(vector))
        same = None if duplicate is None else _get(conn, duplicate)
    if same is not None:
        return WriteOutcome(action="reinforced", record=_reinforce(conn, same, new))
    previous = None
    if new.key is not None:
        old = conn.execute(_SAME_KEY, {**scope, "key": new.key}).mappings().first()
        if old is not None:
            previous = _supersede(conn, old["id"], values["created_at"])
            values["supersedes"] = previous.id
    result = conn.execute(_INSERT, values)
    entry_id = int(result.inserted_primary_key[0])  # type: ignore[index]
    if previous is not None:
        conn.execute(update(_T).where(_T.c.id == previous.id).values(superseded_by=entry_id))
        previous = _get(conn, previous.id)
    if vector is not None:
        cache.add(conn, entry_id, (new.scope, new.scope_id), vector)
    record = to_record({**values, "id": entry_id})
    if previous is None:
        return WriteOutcome(action="added", record=record)
    return WriteOutcome(action="superseded", record=record, previous=previous)


def _reinforce(conn: Connection, current: MemoryRecord, new: NewMemory) -> MemoryRecord:
    seen = [current.source_message_id, *current.extra.get("reinforced_by", [])]
    if new.source_message_id is not None and new.source_message_id in seen:
        # The same message again (a turn replayed after a crash): nothing new learnt.
        return current
    extra = dict(current.extra)
    if new.source_message_id is not None:
        extra["reinforced_by"] = [*seen[1:], new.source_message_id][-50:]
    params = {
        "entry_id": current.id,
        "seen_at": db_time(new.now),
        "offered": new.confidence,
        "verified_now": new.verified,
        "new_extra": extra,
    }
    # The count and confidence are worked out by the database, so that concurrent
    # reinforcements of one entry each count (the row is locked by the first).
    fast = _FAST_REINFORCE.rows(conn, params)
    if fast is not None:
        scope_log.note_write(conn)
        if not fast:
            raise Retry
        return to_record(_ROWS.convert(fast[0]))
    row = conn.execute(_REINFORCE, params).mappings().first()
    if row is None:
        raise Retry
    return to_record(row)


def _supersede(conn: Connection, entry_id: int, now: datetime) -> MemoryRecord:
    done = conn.execute(
        update(_T)
        .where(_T.c.id == entry_id, _T.c.status == "active")
        .values(status="superseded", updated_at=now)
    )
    if done.rowcount != 1:
        raise Retry
    return _get(conn, entry_id)


def _get(conn: Connection, entry_id: int) -> MemoryRecord:
    fast = _FAST_BY_ID.rows(conn, {"id": entry_id})
    if fast is not None:
        if len(fast) != 1:
            raise NoResultFound(f"no memory entry {entry_id}")
        return to_record(_ROWS.convert(fast[0]))
    return to_record(conn.execute(_BY_ID, {"id": entry_id}).mappings().one())


def _same_text(conn: Connection, params: dict[str, Any]) -> MemoryRecord | None:
    """The active entry of the scope with the same normalised text, if any (on SQLite,
    through the driver)."""
    rows = _FAST_SAME_TEXT.rows(conn, params)
    if rows is not None:
        return to_record(_ROWS.convert(rows[0])) if rows else None
    row = conn.execute(_SAME_TEXT, params).mappings().first()
    return None if row is None else to_record(row)
