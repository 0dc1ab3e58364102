"""The tables of knowledge: its sources (``knowledge_sources``), the files each one holds
(``knowledge_files``) and their chunks (``knowledge_chunks``), with the chunks' full-text index,
the entries of lorebooks (``knowledge_lore``) and, when embeddings are on, the chunks' vectors
(``knowledge_vectors``).

- SQLite: an FTS5 table over a chunk's text (weight 1), its heading path and locator path
  (weight 0.5) and its source's scope key (one token, weight 0), external content through a
  view, kept in step by triggers; the tokenizer and Porter stemming of session memory's index.
- PostgreSQL: a generated ``tsvector`` (text weight A, heading and path weight B) and a generated
  one-element scope array, under one GIN index over both.

Chunks are only ever inserted and deleted (a changed file's chunks are replaced), never updated.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import BigInteger, Column, Index, LargeBinary, Table, UniqueConstraint, event, text
from sqlalchemy.engine import Connection
from sqlmodel import Field, SQLModel

from orchestrator.memory.session.fts import postgres_needs_install, sqlite_needs_install

__all__ = [
    "CHUNKS",
    "FILES",
    "LORE",
    "SOURCES",
    "VECTORS",
    "KnowledgeChunkRow",
    "KnowledgeFileRow",
    "KnowledgeLoreRow",
    "KnowledgeSourceRow",
    "KnowledgeVectorRow",
    "install",
    "knowledge_key",
]


class KnowledgeSourceRow(SQLModel, table=True):
    """A source: a folder, a file, the project, uploads or a lorebook, for one group, one
    agent or everyone (``scope``: ``group``, ``agent`` or ``everyone``)."""

    __tablename__ = "knowledge_sources"

    name: str = Field(primary_key=True, max_length=64)
    kind: str = Field(max_length=16)
    root: str
    scope: str = Field(max_length=16)
    scope_id: str = Field(default="", max_length=64)
    trust: str = Field(max_length=16)
    built_with: str = Field(default="", max_length=128)  # chunker and tokeniser of its chunks
    created_at: datetime
    checked_at: datetime | None = None  # when its files were last compared with the index
    files: int = 0
    chunks: int = 0
    problem: str | None = None  # why its files could not be read, at the last check


class KnowledgeFileRow(SQLModel, table=True):
    """A file of a source as it was indexed: what says whether it changed since."""

    __tablename__ = "knowledge_files"
    __table_args__ = (UniqueConstraint("source", "path", name="uq_knowledge_files_source_path"),)

    id: int | None = Field(default=None, primary_key=True)
    source: str = Field(max_length=64, index=True)
    path: str  # relative to the source's root, with "/"
    mtime_ns: int = Field(sa_column=Column(BigInteger, nullable=False))
    size: int = Field(sa_column=Column(BigInteger, nullable=False))
    sha256: str = Field(max_length=64)
    chunks: int = 0
    indexed_at: datetime
    problem: str | None = None  # why it holds no chunks (not text, too large)


class KnowledgeChunkRow(SQLModel, table=True):
    """A chunk: lines ``start_line``..``end_line`` of a file (of its page ``page``, a PDF's),
    as they were when indexed."""

    __tablename__ = "knowledge_chunks"
    # Ids never given twice (SQLite would give a deleted largest id again): the vectors of a
    # chunk, and what a reader holds of them, cannot be taken for its successor's.
    __table_args__ = (Index("ix_knowledge_chunks_file", "file_id"), {"sqlite_autoincrement": True})

    id: int | None = Field(default=None, primary_key=True)
    source: str = Field(max_length=64, index=True)
    file_id: int
    path: str  # "<source>/<path in the source>": the locator's path
    page: int | None = None  # a PDF's page (from 1), its lines those of the page's text
    start_line: int
    end_line: int
    heading: str = ""  # the heading path, " > " between levels
    kind: str = Field(max_length=16)
    digest: str = Field(max_length=16)
    tokens: int
    text: str
    scope_key: str = Field(max_length=160)


class KnowledgeVectorRow(SQLModel, table=True):
    """The embedding of one window of a chunk (unit-length float32 bytes), when embeddings are
    on: a long chunk has one per window the model can see whole."""

    __tablename__ = "knowledge_vectors"

    chunk_id: int = Field(primary_key=True)
    part: int = Field(default=0, primary_key=True)
    scope_key: str = Field(max_length=160, index=True)
    vector: bytes = Field(sa_column=Column(LargeBinary, nullable=False))


class KnowledgeLoreRow(SQLModel, table=True):
    """An entry of a lorebook (a source of kind ``lore``): the keys (a JSON list) or the
    pattern that bring it in, its priority, its text and its tokens."""

    __tablename__ = "knowledge_lore"

    id: int | None = Field(default=None, primary_key=True)
    source: str = Field(max_length=64, index=True)
    keys: str = "[]"
    pattern: str | None = None
    priority: int = 0
    text: str
    tokens: int
    created_at: datetime


SOURCES: Table = KnowledgeSourceRow.__table__  # type: ignore[attr-defined]
LORE: Table = KnowledgeLoreRow.__table__  # type: ignore[attr-defined]
VECTORS: Table = KnowledgeVectorRow.__table__  # type: ignore[attr-defined]
FILES: Table = KnowledgeFileRow.__table__  # type: ignore[attr-defined]
CHUNKS: Table = KnowledgeChunkRow.__table__  # type: ignore[attr-defined]


def knowledge_key(scope: str, scope_id: str) -> str:
    """The index token of a scope's chunks: ``k``, the hex of ``scope:scope_id``, ``0``
    (one token whatever the id holds; the final digit keeps Porter stemming off it)."""
    return "k" + f"{scope}:{scope_id}".encode().hex() + "0"


_SQLITE_COLUMNS = "body, meta, scope"
_SQLITE_META = "{row}heading || ' ' || {row}path"
_SQLITE_OBJECTS = {
    "knowledge_fts_source": f"""
        CREATE VIEW knowledge_fts_source AS
        SELECT id, text AS body, {_SQLITE_META.format(row="")} AS meta, scope_key AS scope
        FROM knowledge_chunks
    """,
    "knowledge_fts": f"""
        CREATE VIRTUAL TABLE knowledge_fts USING fts5(
            {_SQLITE_COLUMNS},
            content='knowledge_fts_source', content_rowid='id',
            tokenize='porter unicode61 remove_diacritics 2'
        )
    """,
    "knowledge_fts_ai": f"""
        CREATE TRIGGER knowledge_fts_ai AFTER INSERT ON knowledge_chunks BEGIN
            INSERT INTO knowledge_fts(rowid, {_SQLITE_COLUMNS})
            VALUES (new.id, new.text, {_SQLITE_META.format(row="new.")}, new.scope_key);
        END
    """,
    "knowledge_fts_ad": f"""
        CREATE TRIGGER knowledge_fts_ad AFTER DELETE ON knowledge_chunks BEGIN
            INSERT INTO knowledge_fts(knowledge_fts, rowid, {_SQLITE_COLUMNS})
            VALUES ('delete', old.id, old.text, {_SQLITE_META.format(row="old.")}, old.scope_key);
        END
    """,
}

_POSTGRES_INDEX = "ix_knowledge_chunks_search"
_POSTGRES_DDL = (
    """
    ALTER TABLE knowledge_chunks ADD COLUMN IF NOT EXISTS search_tsv tsvector
    GENERATED ALWAYS AS (
        setweight(to_tsvector('english'::regconfig, coalesce(text, '')), 'A')
        || setweight(to_tsvector('english'::regconfig,
                     coalesce(heading, '') || ' ' || coalesce(path, '')), 'B')
    ) STORED
    """,
    """
    ALTER TABLE knowledge_chunks ADD COLUMN IF NOT EXISTS search_scope text[]
    GENERATED ALWAYS AS (ARRAY[scope_key]) STORED
    """,
    f"CREATE INDEX IF NOT EXISTS {_POSTGRES_INDEX} "
    "ON knowledge_chunks USING GIN (search_scope, search_tsv)",
)


@event.listens_for(SQLModel.metadata, "after_create")
def _install_on_create(_target: Any, connection: Connection, **_kw: Any) -> None:
    """``create_all`` makes the tables; the index needs raw SQL after them."""
    install(connection)


def install(conn: Connection) -> None:
    """Create the chunks' full-text index, or bring an older one to the current shape
    (rebuilt from the chunks). Cheap when nothing needs doing: one catalogue query."""
    if conn.dialect.name == "sqlite":
        if not sqlite_needs_install(conn, _SQLITE_OBJECTS):
            return
        for name in ("knowledge_fts_ai", "knowledge_fts_ad"):
            conn.execute(text(f"DROP TRIGGER IF EXISTS {name}"))
        conn.execute(text("DROP TABLE IF EXISTS knowledge_fts"))
        conn.execute(text("DROP VIEW IF EXISTS knowledge_fts_source"))
        for statement in _SQLITE_OBJECTS.values():
            conn.execute(text(statement))
        conn.execute(text("INSERT INTO knowledge_fts(knowledge_fts) VALUES ('rebuild')"))
        return
    current = text(f"SELECT to_regclass('{_POSTGRES_INDEX}') IS NOT NULL")
    if postgres_needs_install(conn, current, lock=727276):
        for statement in _POSTGRES_DDL:
            conn.execute(text(statement))
