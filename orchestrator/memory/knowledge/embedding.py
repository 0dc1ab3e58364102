"""The chunks' embeddings, made after their words are indexed: a chunk is found by its words as
soon as it is indexed, and by meaning too once its vectors are made.

Embedding is far slower than indexing words (the model reads every window of every chunk:
tens of windows a second on two cores), so the indexer does not wait for it: a running daemon
embeds the chunks that have no vectors yet, a few at a time, newest first (a file just changed
is found by meaning again before a large backlog is done). A chunk replaced or removed while it
was being embedded gets no vectors: they are written only for chunks still in the index (on
PostgreSQL a chunk being replaced is waited for).
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import exists, func, insert, select
from sqlalchemy.engine import Engine

from orchestrator.memory.knowledge.tables import CHUNKS, VECTORS
from orchestrator.memory.knowledge.vectors import ChunkVectors
from orchestrator.memory.transactions import writing

__all__ = ["BATCH_CHUNKS", "Embedded", "embed_pending", "embedded_counts", "newest_chunk"]

BATCH_CHUNKS = 8  # a batch takes about a second: a stopping daemon waits for it


@dataclass(frozen=True, slots=True)
class Embedded:
    """How many of a source's chunks have their vectors (``done`` of ``chunks``)."""

    done: int
    chunks: int

    @property
    def pending(self) -> int:
        """The chunks still to embed."""
        return self.chunks - self.done


_HAS_VECTORS = exists().where(VECTORS.c.chunk_id == CHUNKS.c.id)


def embedded_counts(engine: Engine) -> dict[str, Embedded]:
    """For each source with chunks, how many of them have their vectors."""
    with engine.connect() as conn:
        rows = conn.execute(
            select(
                CHUNKS.c.source,
                func.count(),
                func.count().filter(_HAS_VECTORS),
            ).group_by(CHUNKS.c.source)
        ).all()
    return {str(name): Embedded(done=int(done), chunks=int(total)) for name, total, done in rows}


def newest_chunk(engine: Engine) -> int:
    """The largest chunk id (0 with none): it grows whenever chunks are added (ids are never
    given twice), so while it stays the same no chunk can be waiting that was not before."""
    with engine.connect() as conn:
        return int(conn.execute(select(func.coalesce(func.max(CHUNKS.c.id), 0))).scalar_one())


def embed_pending(
    engine: Engine,
    vectors: ChunkVectors,
    *,
    source: str | None = None,
    limit: int = BATCH_CHUNKS,
    newest_first: bool = True,
) -> int:
    """Embeds up to ``limit`` chunks that have no vectors yet (of ``source``, or of any), newest
    first (oldest first when not ``newest_first``: a command working beside a daemon takes the
    other end); how many got their vectors (0: none was waiting, or no embedder). Blocking."""
    where = ~_HAS_VECTORS
    if source is not None:
        where = where & (CHUNKS.c.source == source)
    with engine.connect() as conn:
        rows = conn.execute(
            select(CHUNKS.c.id, CHUNKS.c.heading, CHUNKS.c.text, CHUNKS.c.scope_key)
            .where(where)
            .order_by(CHUNKS.c.id.desc() if newest_first else CHUNKS.c.id)
            .limit(limit)
        ).all()
    if not rows:
        return 0
    blobs = vectors.embed([(row.heading, row.text) for row in rows])
    if blobs is None:
        return 0
    with writing(engine) as conn:
        ids = [int(row.id) for row in rows]
        # FOR SHARE on PostgreSQL: a chunk being replaced now is waited for, and then is gone.
        # A replaced chunk's id may be its successor's (SQLite gives a deleted largest id
        # again): a chunk counts as still there only with the text that was embedded.
        alive = (
            select(CHUNKS.c.id, CHUNKS.c.heading, CHUNKS.c.text)
            .where(CHUNKS.c.id.in_(ids))
            .with_for_update(read=True)
        )
        now = {int(row.id): (row.heading, row.text) for row in conn.execute(alive)}
        still = {int(row.id) for row in rows if now.get(int(row.id)) == (row.heading, row.text)}
        done = set(
            conn.execute(
                select(VECTORS.c.chunk_id).where(VECTORS.c.chunk_id.in_(ids)).distinct()
            ).scalars()
        )
        values = [
            {"chunk_id": int(row.id), "part": part, "scope_key": row.scope_key, "vector": blob}
            for row, parts in zip(rows, blobs, strict=True)
            if row.id in still and row.id not in done
            for part, blob in enumerate(parts)
        ]
        if values:
            conn.execute(insert(VECTORS), values)
    return len({value["chunk_id"] for value in values})
