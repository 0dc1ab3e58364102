"""Indexing a knowledge source: its files compared with what the index holds, and each new or
changed file split into chunks (:mod:`orchestrator.core.chunking`) that replace its old ones in
one transaction, so a reader sees a file's old chunks or its new ones, never both. A file that
is gone loses its chunks; a file whose size and modification time are unchanged is not read
(unless it changed in the last few seconds: a same-sized edit within a coarse clock's tick).

The index records how it was built (``built_with``: the chunker's version, the tokeniser, the
chunk size, how vectors are made); a source indexed otherwise is indexed again in full. The
chunks' vectors are made afterwards (:mod:`orchestrator.memory.knowledge.embedding`).

Which files are read is :mod:`orchestrator.memory.knowledge.walk`; at most
:data:`MAX_FILE_BYTES` of each. An HTML page is indexed as its text, line for line
(:mod:`orchestrator.core.html_text`), so its locators name the page's own lines. A PDF or DOCX
(at most :data:`MAX_DOCUMENT_BYTES`) is indexed as its converted text
(:mod:`orchestrator.memory.knowledge.documents`), a PDF page by page, each chunk's locator
naming its page. A file that is not UTF-8 text, or a document that gives no text (the
``[documents]`` extra missing, broken, encrypted), is recorded with its problem and no chunks.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import delete, func, insert, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection

from orchestrator.core.chunking import CHUNKER_VERSION, Chunk, chunk_document, digest
from orchestrator.core.context.tokens import ENCODING_NAME, TokenCounter
from orchestrator.core.html_text import HTML_SUFFIXES, html_text
from orchestrator.memory.knowledge.documents import (
    MAX_DOCUMENT_BYTES,
    PAGED_SUFFIXES,
    Unreadable,
    converted,
    is_document,
    retry_installed,
    retry_passing,
)
from orchestrator.memory.knowledge.store import KnowledgeStore, Source
from orchestrator.memory.knowledge.tables import CHUNKS, FILES, SOURCES, VECTORS, knowledge_key
from orchestrator.memory.knowledge.vectors import describe_vectors
from orchestrator.memory.knowledge.walk import MAX_FILES, TooMany, source_files
from orchestrator.memory.transactions import writing

__all__ = [
    "BUILT_WITH",
    "MAX_CHUNK_CHARS",
    "MAX_DOCUMENT_BYTES",
    "MAX_FILE_BYTES",
    "Indexer",
    "Progress",
    "SyncReport",
]

MAX_CHUNK_CHARS = 1600  # about 400 tokens of English
MAX_FILE_BYTES = 2_000_000
BUILT_WITH = (
    f"chunker {CHUNKER_VERSION}; tokens {ENCODING_NAME}; chars {MAX_CHUNK_CHARS}; "
    f"vectors {describe_vectors()}"
)

# A file changed this recently may change again within its clock's resolution without its size
# or time moving (a coarse file system, two saves in one second): it is read and hashed anyway.
_RACY_NS = 3_000_000_000


@dataclass(frozen=True, slots=True)
class Progress:
    """How far a source's indexing got: ``done`` of ``total`` files, the last one ``path``."""

    done: int
    total: int
    path: str


@dataclass(slots=True, kw_only=True)
class SyncReport:
    """What one pass over a source changed."""

    source: str
    files: int = 0
    added: int = 0
    changed: int = 0
    removed: int = 0
    unchanged: int = 0
    chunks_written: int = 0
    chunks_removed: int = 0
    rebuilt: bool = False
    seconds: float = 0.0
    problems: list[str] = field(default_factory=list)

    @property
    def touched(self) -> bool:
        """Whether the index changed."""
        return bool(self.added or self.changed or self.removed)


class Indexer:
    """Brings a source's chunks in step with its files. Blocking: call from a thread."""

    def __init__(
        self,
        store: KnowledgeStore,
        counter: TokenCounter | None = None,
    ) -> None:
        self.store = store
        self.counter = counter or TokenCounter()
        self.built_with = BUILT_WITH

    def sync(
        self,
        source: Source,
        *,
        now: datetime,
        progress: Callable[[Progress], None] | None = None,
    ) -> SyncReport:
        """Compare ``source``'s files with the index and index what changed."""
        started = time.monotonic()
        report = SyncReport(source=source.name, rebuilt=source.built_with != self.built_with)
        engine = self.store.engine
        with engine.connect() as conn:
            known = {
                row.path: row
                for row in conn.execute(select(FILES).where(FILES.c.source == source.name))
            }
        problem: str | None = None
        unfit: list[str] = []
        try:
            found = dict(source_files(Path(source.root), source.kind, unfit))
        except OSError as exc:
            found, problem = {}, f"cannot read {source.root}: {exc.strerror or exc}"
        except TooMany:
            # Neither indexed nor emptied: what was indexed stays until the folder is narrowed.
            found = {rel: Path(source.root) / rel for rel in known}
            problem = f"more than {MAX_FILES:,} readable files: add a narrower folder"
        report.files = len(found)
        report.problems += [
            f"{rel}: a locator cannot name it ('#' or '\\' in its path)" for rel in unfit
        ]
        try:
            for done, (rel, path) in enumerate(sorted(found.items()), start=1):
                if problem is None:
                    self._file(source, rel, path, known.get(rel), report, now)
                if progress is not None:
                    progress(Progress(done=done, total=len(found), path=rel))
            for rel in sorted(set(known) - set(found)):
                with writing(engine) as conn:
                    _still_there(conn, source.name)
                    report.chunks_removed += _drop_file(conn, known[rel].id)
                report.removed += 1
        except _Gone:
            report.problems.append(f"{source.name} was removed while it was indexed")
            report.seconds = time.monotonic() - started
            return report
        with writing(engine) as conn:
            files, chunks = _totals(conn, source.name)
            conn.execute(
                update(SOURCES)
                .where(SOURCES.c.name == source.name)
                .values(
                    built_with=self.built_with,
                    checked_at=now,
                    files=files,
                    chunks=chunks,
                    problem=problem,
                )
            )
        if problem:
            report.problems.append(problem)
        if report.touched:
            self.store.changed()
        report.seconds = time.monotonic() - started
        return report

    def _file(
        self, source: Source, rel: str, path: Path, known: Any, report: SyncReport, now: datetime
    ) -> None:
        try:
            info = path.stat()
        except OSError:
            return  # gone since the walk: the next pass removes it
        fresh = known is not None and not report.rebuilt
        fresh = fresh and not retry_installed(rel, known.problem)
        fresh = fresh and not retry_passing(known.problem, known.indexed_at, now)
        if fresh and _unchanged(known, info) and time.time_ns() - info.st_mtime_ns > _RACY_NS:
            report.unchanged += 1
            return
        problem, data = None, b""
        limit = MAX_DOCUMENT_BYTES if is_document(rel) else MAX_FILE_BYTES
        if info.st_size > limit:
            problem = f"larger than {limit // 1_000_000} MB"
        else:
            try:
                data = path.read_bytes()
            except OSError as exc:
                report.problems.append(f"{rel}: cannot read ({exc.strerror or exc})")
                return
        sha = hashlib.sha256(data).hexdigest()
        if fresh and known.sha256 == sha and not problem:
            self._touched(known, info)
            report.unchanged += 1
            return
        pages: list[str] = []
        if problem is None:
            pages, problem = _read(rel, data)
        rows = [] if problem else self._chunk_rows(source, rel, pages)
        values = {
            "source": source.name,
            "path": rel,
            "mtime_ns": info.st_mtime_ns,
            "size": info.st_size,
            "sha256": sha,
            "chunks": len(rows),
            "indexed_at": now,
            "problem": problem,
        }
        with writing(self.store.engine) as conn:
            _still_there(conn, source.name)
            file_id = _upsert_file(conn, values)
            report.chunks_removed += _drop_chunks(conn, file_id)
            if rows:
                conn.execute(insert(CHUNKS), [{**row, "file_id": file_id} for row in rows])
        report.chunks_written += len(rows)
        if problem:
            report.problems.append(f"{rel}: {problem}")
        if known is None:
            report.added += 1
        else:
            report.changed += 1

    def _touched(self, known: Any, info: os.stat_result) -> None:
        """A file saved again without a change: its new size and time recorded."""
        if not _unchanged(known, info):
            with writing(self.store.engine) as conn:
                conn.execute(
                    update(FILES)
                    .where(FILES.c.id == known.id)
                    .values(mtime_ns=info.st_mtime_ns, size=info.st_size)
                )

    def _chunk_rows(self, source: Source, rel: str, pages: list[str]) -> list[dict[str, Any]]:
        key = knowledge_key(source.scope, source.scope_id)
        located = f"{source.name}/{rel}"
        return [
            {
                "source": source.name,
                "path": located,
                "page": page,
                "start_line": chunk.start,
                "end_line": chunk.end,
                "heading": " > ".join(chunk.heading),
                "kind": chunk.kind,
                "digest": digest(chunk.text),
                "tokens": self.counter.count(chunk.text),
                "text": chunk.text,
                "scope_key": key,
            }
            for page, chunk in _chunks(rel, pages)
        ]


class _Gone(Exception):
    """The source was removed while it was being indexed."""


def _still_there(conn: Connection, name: str) -> None:
    """Stop indexing a source that was removed meanwhile (its chunks must not come back).

    Raises:
        _Gone: when it was removed.
    """
    if conn.execute(select(SOURCES.c.name).where(SOURCES.c.name == name)).first() is None:
        raise _Gone(name)


def _unchanged(known: Any, info: os.stat_result) -> bool:
    """Whether a file's size and modification time are those it was indexed with."""
    return bool(known.mtime_ns == info.st_mtime_ns and known.size == info.st_size)


def _chunks(rel: str, pages: list[str]) -> list[tuple[int | None, Chunk]]:
    """A file's chunks, each with its page (a PDF's, else None): an HTML page's text (line for
    line) and a DOCX's split as Markdown, a PDF's page by page as plain text ("page 3" its
    heading)."""
    lowered = rel.lower()
    if lowered.endswith(PAGED_SUFFIXES):
        return [
            (number, replace(chunk, heading=(f"page {number}",)))
            for number, text in enumerate(pages, start=1)
            for chunk in chunk_document(rel + ".txt", text, max_chars=MAX_CHUNK_CHARS)
        ]
    text = "".join(pages)
    if lowered.endswith(HTML_SUFFIXES):
        text, rel = html_text(text), rel + ".md"
    elif is_document(lowered):
        rel += ".md"
    return [(None, chunk) for chunk in chunk_document(rel, text, max_chars=MAX_CHUNK_CHARS)]


def _read(rel: str, data: bytes) -> tuple[list[str], str | None]:
    """A file's text (a PDF's page by page), or why it has none."""
    if not is_document(rel):
        text, problem = _decoded(data)
        return [text], problem
    try:
        return converted(rel, data), None
    except Unreadable as exc:
        return [], exc.problem


def _decoded(data: bytes) -> tuple[str, str | None]:
    """The text of a file, or why it is not text."""
    if b"\x00" in data[:8192]:
        return "", "not text (binary)"
    try:
        return data.decode("utf-8-sig"), None
    except UnicodeDecodeError:
        return "", "not UTF-8 text"


def _upsert_file(conn: Connection, values: dict[str, Any]) -> int:
    """The file's row made or brought up to date, its id returned. On PostgreSQL the row's lock
    then keeps a second indexer of the same file waiting until this transaction ends."""
    changed = {k: v for k, v in values.items() if k not in ("source", "path")}
    dialect = postgresql if conn.dialect.name == "postgresql" else sqlite
    statement = (
        dialect.insert(FILES)
        .values(**values)
        .on_conflict_do_update(index_elements=["source", "path"], set_=changed)
        .returning(FILES.c.id)
    )
    return int(conn.execute(statement).scalar_one())


def _drop_chunks(conn: Connection, file_id: int) -> int:
    ids = select(CHUNKS.c.id).where(CHUNKS.c.file_id == file_id)
    conn.execute(delete(VECTORS).where(VECTORS.c.chunk_id.in_(ids)))
    return int(conn.execute(delete(CHUNKS).where(CHUNKS.c.file_id == file_id)).rowcount or 0)


def _drop_file(conn: Connection, file_id: int) -> int:
    removed = _drop_chunks(conn, file_id)
    conn.execute(delete(FILES).where(FILES.c.id == file_id))
    return removed


def _totals(conn: Connection, source: str) -> tuple[int, int]:
    files = conn.execute(select(func.count()).where(FILES.c.source == source)).scalar_one()
    chunks = conn.execute(select(func.count()).where(CHUNKS.c.source == source)).scalar_one()
    return int(files), int(chunks)
