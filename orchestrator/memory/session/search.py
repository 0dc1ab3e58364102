"""Full-text hits in session memory, read light: only the fields that say what a hit is about
and who wrote it, which is what recall needs to judge its relevance (the full record is read
only for the hits that pass; most of a search's candidates do not)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import bindparam, select
from sqlalchemy.engine import Connection

from orchestrator.memory.session import fts
from orchestrator.memory.session.entries import ENTRIES
from orchestrator.memory.session.sqlite_rows import SqliteRows

__all__ = ["TextHit", "text_hits"]

_T = ENTRIES
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
_ROWS = SqliteRows([_T.c[name] for name in _HIT_COLUMNS])


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


def text_hits(
    conn: Connection, terms: Sequence[str], scopes: Sequence[tuple[str, str]], limit: int
) -> list[TextHit]:
    """The active entries of ``scopes`` that hold any of ``terms``, best first, read light."""
    wanted = set(scopes)
    scored = fts.search_ids(conn, terms, scopes, limit)
    if not scored:
        return []
    ids = [i for i, _ in scored]
    fast = _ROWS.by_ids(conn, ids)
    rows = fast if fast is not None else conn.execute(_HITS_BY_IDS, {"ids": ids}).mappings()
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
