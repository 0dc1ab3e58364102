"""Knowledge sources and their chunks in the database: adding, listing and removing sources,
searching the chunks a group's or an agent's turn may see, and resolving a locator.

A source belongs to one group (``group``), one agent (``agent``) or everyone (``everyone``);
a turn of agent A in group G sees the chunks of G's sources, A's and everyone's. Its trust is
``trusted`` (the team's own: its project, its docs) or ``external`` (uploads, anything not
vouched for): recall labels every chunk with it, and external text is material, never
instructions. Indexing a source's files is :mod:`orchestrator.memory.knowledge.indexer`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import delete, insert, select, text
from sqlalchemy.engine import Connection, Engine

from orchestrator.core.chunking import format_locator
from orchestrator.core.models import AGENT_ID_RE, GROUP_ID_RE
from orchestrator.errors import ValidationError
from orchestrator.memory.knowledge.common import CommonWords
from orchestrator.memory.knowledge.tables import (
    CHUNKS,
    FILES,
    LORE,
    SOURCES,
    VECTORS,
    knowledge_key,
)
from orchestrator.memory.quick import QuickReader
from orchestrator.memory.session.fts import fts5_phrase, websearch_query
from orchestrator.memory.transactions import writing

__all__ = [
    "HOLDING_S",
    "KINDS",
    "SCOPES",
    "TRUSTS",
    "Chunked",
    "KnowledgeHit",
    "KnowledgeStore",
    "Source",
    "turn_scopes",
    "validate_source_name",
]

KINDS = ("folder", "file", "project", "upload", "lore")
SCOPES = ("group", "agent", "everyone")
TRUSTS = ("trusted", "external")
HOLDING_S = 0.25
BODY_WEIGHT = 1.0
META_WEIGHT = 0.5


def validate_source_name(name: str) -> str:
    """``name`` if it can name a source (it starts every locator of the source's chunks).

    Raises:
        ValidationError: naming what is wrong.
    """
    if not GROUP_ID_RE.match(name):  # a source is named as a group is
        raise ValidationError(
            "name",
            f"{name[:80]!r} is not a valid source name (lowercase letters, digits, '_' and '-', "
            "starting with a letter or digit, at most 64 characters)",
        )
    return name


def turn_scopes(group: str, agent: str) -> list[tuple[str, str]]:
    """The scopes whose sources a turn of ``agent`` in ``group`` sees."""
    return [("group", group), ("agent", agent), ("everyone", "")]


@dataclass(frozen=True, slots=True, kw_only=True)
class Source:
    """A source as stored: what it indexes, for whom, and how its last check went."""

    name: str
    kind: str
    root: str
    scope: str
    scope_id: str
    trust: str
    built_with: str
    created_at: datetime
    checked_at: datetime | None
    files: int
    chunks: int
    problem: str | None

    @property
    def owner(self) -> str:
        """Who sees it, as people write it: ``group demo``, ``agent dev``, ``everyone``."""
        return "everyone" if self.scope == "everyone" else f"{self.scope} {self.scope_id}"


@dataclass(frozen=True, slots=True, kw_only=True)
class KnowledgeHit:
    """A chunk found for a query: where it is, what it says, its source's trust, and its
    full-text ``score`` (higher is better; comparable within one search only)."""

    id: int
    source: str
    path: str
    start: int
    end: int
    heading: str
    digest: str
    text: str
    tokens: int
    trust: str
    score: float
    page: int | None = None

    @property
    def locator(self) -> str:
        """Where the chunk is: ``path#L12-40@digest`` (``path#p3:L12-40@digest`` in a PDF)."""
        return format_locator(self.path, self.start, self.end, self.digest, self.page)


@dataclass(frozen=True, slots=True, kw_only=True)
class Chunked:
    """A chunk as stored (for listing a source's chunks)."""

    id: int
    path: str
    start: int
    end: int
    heading: str
    kind: str
    digest: str
    tokens: int
    text: str
    page: int | None = None

    @property
    def locator(self) -> str:
        return format_locator(self.path, self.start, self.end, self.digest, self.page)


def _source(row: Any) -> Source:
    return Source(
        name=row.name,
        kind=row.kind,
        root=row.root,
        scope=row.scope,
        scope_id=row.scope_id,
        trust=row.trust,
        built_with=row.built_with,
        created_at=row.created_at,
        checked_at=row.checked_at,
        files=row.files,
        chunks=row.chunks,
        problem=row.problem,
    )


_SQLITE_SEARCH = f"""
    SELECT c.id, c.source, c.path, c.page, c.start_line, c.end_line, c.heading, c.digest, c.text,
           c.tokens, s.trust, -bm25(knowledge_fts, {BODY_WEIGHT}, {META_WEIGHT}, 0.0) AS score
    FROM knowledge_fts
    JOIN knowledge_chunks AS c ON c.id = knowledge_fts.rowid
    JOIN knowledge_sources AS s ON s.name = c.source
    WHERE knowledge_fts MATCH :match
    ORDER BY score DESC, c.id LIMIT :limit
"""
_POSTGRES_SEARCH = f"""
    SELECT c.id, c.source, c.path, c.page, c.start_line, c.end_line, c.heading, c.digest, c.text,
           c.tokens, s.trust,
           ts_rank('{{0.1, 0.2, {META_WEIGHT}, {BODY_WEIGHT}}}', c.search_tsv, q.query, 1) AS score
    FROM knowledge_chunks AS c
    JOIN knowledge_sources AS s ON s.name = c.source,
    websearch_to_tsquery('english'::regconfig, :match) AS q(query)
    WHERE c.search_scope && CAST(:keys AS text[]) AND c.search_tsv @@ q.query
    ORDER BY score DESC, c.id LIMIT :limit
"""


class KnowledgeStore:
    """The sources and chunks on one database. Blocking: call from a thread in async code."""

    def __init__(self, engine: Engine, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.engine = engine
        self.clock = clock
        self._quick = QuickReader(engine)  # holds_any's read
        self._common = CommonWords()  # the words a search leaves out
        self._holding: frozenset[tuple[str, str]] = frozenset()
        self._read_at = -float("inf")
        self._lock = threading.Lock()

    def holds_any(self, scopes: Sequence[tuple[str, str]]) -> bool:
        """Whether a source of one of ``scopes`` holds chunks (a turn in a group without
        knowledge makes no search). The scopes that do are read at most every
        :data:`HOLDING_S` seconds: under load that is once for hundreds of turns, and a source
        added by another process is seen within a quarter of a second."""
        now = self.clock()
        with self._lock:
            if now - self._read_at >= HOLDING_S:
                rows = self._quick.rows(
                    "SELECT DISTINCT scope, scope_id FROM knowledge_sources WHERE chunks > 0"
                )
                self._holding = frozenset((str(a), str(b)) for a, b in rows)
                self._read_at = now
            holding = self._holding
        return any(scope in holding for scope in scopes)

    def changed(self) -> None:
        """This process changed sources or chunks: :meth:`holds_any` reads them again."""
        with self._lock:
            self._read_at = -float("inf")

    def add(
        self,
        *,
        name: str,
        kind: str,
        root: Path,
        scope: str,
        scope_id: str,
        trust: str,
        now: datetime,
    ) -> Source:
        """Record a new source (its files are indexed by the indexer).

        Raises:
            ValidationError: a bad name, kind, scope or trust, or the name is taken.
        """
        validate_source_name(name)
        _check_choice("kind", kind, KINDS)
        _check_choice("scope", scope, SCOPES)
        _check_choice("trust", trust, TRUSTS)
        if scope == "group" and not GROUP_ID_RE.match(scope_id):
            raise ValidationError("group", f"{scope_id[:80]!r} is not a valid group id")
        if scope == "agent" and not AGENT_ID_RE.fullmatch(scope_id):
            raise ValidationError("agent", f"{scope_id[:80]!r} is not a valid agent id")
        if scope == "everyone":
            scope_id = ""
        values = {
            "name": name,
            "kind": kind,
            "root": str(root),
            "scope": scope,
            "scope_id": scope_id,
            "trust": trust,
            "built_with": "",
            "created_at": now,
        }
        with writing(self.engine) as conn:
            if conn.execute(select(SOURCES.c.name).where(SOURCES.c.name == name)).first():
                raise ValidationError("name", f"a source named {name!r} exists already")
            _forget(conn, name)  # what an interrupted removal may have left
            conn.execute(insert(SOURCES).values(**values))
        found = self.get(name)
        assert found is not None
        return found

    def get(self, name: str) -> Source | None:
        """The source called ``name``, if there is one."""
        with self.engine.connect() as conn:
            row = conn.execute(select(SOURCES).where(SOURCES.c.name == name)).first()
        return _source(row) if row is not None else None

    def sources(self, *, scope: str | None = None, scope_id: str | None = None) -> list[Source]:
        """Every source (of one scope, or one owner, when given), by name."""
        query = select(SOURCES).order_by(SOURCES.c.name)
        if scope is not None:
            query = query.where(SOURCES.c.scope == scope)
        if scope_id is not None:
            query = query.where(SOURCES.c.scope_id == scope_id)
        with self.engine.connect() as conn:
            return [_source(row) for row in conn.execute(query)]

    def remove(self, name: str) -> bool:
        """Forget a source and its chunks (never the files it indexed). False when there was
        no such source."""
        with writing(self.engine) as conn:
            _forget(conn, name)
            removed = bool(conn.execute(delete(SOURCES).where(SOURCES.c.name == name)).rowcount)
        self.changed()
        return removed

    def chunks(self, name: str, *, path: str | None = None, limit: int = 1000) -> list[Chunked]:
        """A source's chunks in file and line order (of one locator path, when given)."""
        query = select(CHUNKS).where(CHUNKS.c.source == name)
        if path is not None:
            query = query.where(CHUNKS.c.path == path)
        query = query.order_by(CHUNKS.c.path, CHUNKS.c.page, CHUNKS.c.start_line).limit(limit)
        with self.engine.connect() as conn:
            return [
                Chunked(
                    id=row.id,
                    path=row.path,
                    page=row.page,
                    start=row.start_line,
                    end=row.end_line,
                    heading=row.heading,
                    kind=row.kind,
                    digest=row.digest,
                    tokens=row.tokens,
                    text=row.text,
                )
                for row in conn.execute(query)
            ]

    def search(
        self, terms: Sequence[str], scopes: Sequence[tuple[str, str]], limit: int
    ) -> list[KnowledgeHit]:
        """The chunks of the sources in ``scopes`` that match any of ``terms`` (content words,
        as :func:`orchestrator.memory.session.fts.query_terms` gives them, less those too common
        to tell chunks apart: :mod:`orchestrator.memory.knowledge.common`), best first."""
        if not terms or not scopes or limit <= 0:
            return []
        keys = [knowledge_key(scope, scope_id) for scope, scope_id in scopes]
        with self.engine.connect() as conn:
            if conn.dialect.name == "sqlite":
                ored = " OR ".join(f'"{key}"' for key in keys)
                words = " OR ".join(fts5_phrase(t) for t in self._common.rare(conn, terms))
                params: dict[str, object] = {
                    "match": f"scope : ({ored}) AND ({words})",
                    "limit": limit,
                }
                rows = conn.execute(text(_SQLITE_SEARCH), params)
            else:
                params = {"match": websearch_query(terms), "keys": keys, "limit": limit}
                rows = conn.execute(text(_POSTGRES_SEARCH), params)
            return [_hit(row, float(row.score)) for row in rows]

    def by_ids(self, ids: Sequence[int]) -> dict[int, KnowledgeHit]:
        """The chunks ``ids`` that still exist, by id (``score`` 0: not from a search)."""
        if not ids:
            return {}
        query = (
            select(CHUNKS, SOURCES.c.trust)
            .join(SOURCES, SOURCES.c.name == CHUNKS.c.source)
            .where(CHUNKS.c.id.in_(list(ids)))
        )
        with self.engine.connect() as conn:
            return {int(row.id): _hit(row, 0.0) for row in conn.execute(query)}

    def skipped(self, name: str) -> list[tuple[str, str]]:
        """The files of source ``name`` indexed without chunks, and why, by path."""
        query = select(FILES.c.path, FILES.c.problem).where(
            FILES.c.source == name, FILES.c.problem.is_not(None)
        )
        with self.engine.connect() as conn:
            return [(str(r[0]), str(r[1])) for r in conn.execute(query.order_by(FILES.c.path))]

    def counts(self) -> tuple[int, int]:
        """How many sources and chunks are stored."""
        with self.engine.connect() as conn:
            sources = conn.execute(text("SELECT count(*) FROM knowledge_sources")).scalar_one()
            chunks = conn.execute(text("SELECT count(*) FROM knowledge_chunks")).scalar_one()
        return int(sources), int(chunks)


def _hit(row: Any, score: float) -> KnowledgeHit:
    return KnowledgeHit(
        id=row.id,
        source=row.source,
        path=row.path,
        page=row.page,
        start=row.start_line,
        end=row.end_line,
        heading=row.heading,
        digest=row.digest,
        text=row.text,
        tokens=row.tokens,
        trust=row.trust,
        score=score,
    )


def _forget(conn: Connection, name: str) -> None:
    """Everything source ``name`` holds but its row: vectors, chunks, files, lore."""
    ids = select(CHUNKS.c.id).where(CHUNKS.c.source == name)
    conn.execute(delete(VECTORS).where(VECTORS.c.chunk_id.in_(ids)))
    for table in (LORE, CHUNKS, FILES):
        conn.execute(delete(table).where(table.c.source == name))


def _check_choice(what: str, value: str, choices: Sequence[str]) -> None:
    if value not in choices:
        raise ValidationError(what, f"{value[:40]!r} is not one of {', '.join(choices)}")
