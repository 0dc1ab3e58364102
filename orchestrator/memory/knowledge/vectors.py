"""Knowledge by meaning: each chunk's embedding (its heading and text), made by the indexer when
embeddings are on (one per window of the chunk the model sees whole), and the chunks of a
turn's scopes closest to a question (by their closest window).

Embeddings are on when the all-MiniLM-L6-v2 weights are installed (``make`` installs them; see
:mod:`orchestrator.memory.minilm`) and ``ARENA_KNOWLEDGE_EMBEDDINGS`` is not ``off``; the model
is loaded the first time it is needed, so a daemon whose groups have no knowledge never loads
it. The vectors of each scope are held in memory as one matrix, once however many turns see
it, and read again when they changed (their count or newest id, looked at every
:data:`CHECK_S` seconds at most).
"""

from __future__ import annotations

import importlib
import importlib.util
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.engine import Engine

from orchestrator.memory.knowledge.tables import VECTORS, knowledge_key
from orchestrator.memory.session.embeddings import Embedder, load_embedder, pack

__all__ = [
    "CHECK_S",
    "MODEL",
    "WINDOW_CHARS",
    "ChunkVectors",
    "chunk_windows",
    "describe_vectors",
    "embeddings_installed",
]

MODEL = "all-MiniLM-L6-v2"
CHECK_S = 0.25


def embeddings_installed() -> bool:
    """Whether the model's weights and numpy are there (without loading them)."""
    if importlib.util.find_spec("numpy") is None:
        return False
    from orchestrator.memory.model_files import model_folder

    return model_folder() is not None


WINDOW_CHARS = 700  # all-MiniLM-L6-v2 reads 256 word pieces: about 1,000 characters of prose


def describe_vectors() -> str:
    """How the vectors are made, as the index records it (a change rebuilds it)."""
    return f"{MODEL}, windows of {WINDOW_CHARS} characters"


def chunk_windows(heading: str, text: str) -> list[str]:
    """What a chunk's embeddings are made of: its heading path, then each window of its text
    (whole lines, at most :data:`WINDOW_CHARS` unless one line is longer)."""
    windows: list[str] = []
    current: list[str] = []
    size = 0
    for line in text.split("\n"):
        if current and size + len(line) > WINDOW_CHARS:
            windows.append("\n".join(current))
            current, size = [], 0
        current.append(line)
        size += len(line) + 1
    if current and "".join(current).strip():
        windows.append("\n".join(current))
    prefix = f"{heading}\n" if heading else ""
    return [prefix + window for window in windows] or [heading]


class ChunkVectors:
    """Embeds chunks and questions, and finds the chunks closest to a question. Thread-safe.

    Args:
        engine: The database of the chunks.
        loader: Gives the embedder (called once, when first needed); None: no embeddings.
        clock: For how long a scope's matrix is trusted.
    """

    def __init__(
        self,
        engine: Engine,
        loader: Callable[[], Embedder | None] = load_embedder,
        *,
        model: str = MODEL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.engine = engine
        self.model = model
        self.clock = clock
        self._loader = loader
        self._embedder: Embedder | None = None
        self._loaded = False
        self._lock = threading.Lock()
        # a scope's key -> (when checked, (count, newest id), ids, matrix): once per scope
        self._held: dict[str, tuple[float, tuple[int, int], Any, Any]] = {}

    def embedder(self) -> Embedder | None:
        """The embedder, loaded on first use (None when it cannot be)."""
        with self._lock:
            if not self._loaded:
                self._embedder = self._loader()
                self._loaded = True
            return self._embedder

    def embed(self, chunks: Sequence[tuple[str, str]]) -> list[list[bytes]] | None:
        """The stored form of each chunk's (heading, text) embeddings, one per window; None
        without an embedder."""
        embedder = self.embedder()
        if embedder is None:
            return None
        windows = [chunk_windows(heading, text) for heading, text in chunks]
        flat = [pack(v) for v in embedder.embed([w for parts in windows for w in parts])]
        found, start = [], 0
        for parts in windows:
            found.append(flat[start : start + len(parts)])
            start += len(parts)
        return found

    def closest(
        self, question: str, scopes: Sequence[tuple[str, str]], limit: int
    ) -> list[tuple[int, float]]:
        """The ``limit`` chunks of ``scopes`` closest in meaning to ``question``: (chunk id,
        cosine similarity), closest first; [] without an embedder or vectors."""
        return self.compared(question, scopes, limit)[0]

    def compared(
        self,
        question: str,
        scopes: Sequence[tuple[str, str]],
        limit: int,
        among: Sequence[int] = (),
    ) -> tuple[list[tuple[int, float]], dict[int, float]]:
        """:meth:`closest`, and the cosine similarity of each chunk of ``among`` that has
        vectors (found by other means: how close in meaning they are too)."""
        embedder = self.embedder()
        if embedder is None or limit <= 0:
            return [], {}
        held = [self._matrix(knowledge_key(scope, scope_id)) for scope, scope_id in scopes]
        held = [(ids, matrix) for ids, matrix in held if len(ids)]
        if not held:
            return [], {}
        numpy = importlib.import_module("numpy")
        query = numpy.asarray(embedder.embed([question])[0], dtype=numpy.float32)
        norm = float(numpy.linalg.norm(query))
        if norm == 0.0:
            return [], {}
        query /= norm
        wanted = numpy.asarray(list(among), dtype=numpy.int64)
        closest: dict[int, float] = {}  # a chunk's closest window stands for it
        known: dict[int, float] = {}
        for ids, matrix in held:
            sims = matrix @ query
            for row in numpy.argsort(-sims)[: limit * 4]:
                chunk_id, cosine = int(ids[row]), float(sims[row])
                if cosine > closest.get(chunk_id, -2.0):
                    closest[chunk_id] = cosine
            if len(wanted):
                for row in numpy.flatnonzero(numpy.isin(ids, wanted)):
                    chunk_id, cosine = int(ids[row]), float(sims[row])
                    if cosine > known.get(chunk_id, -2.0):
                        known[chunk_id] = cosine
        ranked = sorted(closest.items(), key=lambda pair: (-pair[1], pair[0]))
        return ranked[:limit], known

    def _matrix(self, key: str) -> tuple[Any, Any]:
        """The vectors of one scope (its chunk ids as a numpy array, a row each), held once per
        scope and read again when they changed."""
        now = self.clock()
        with self._lock:
            held = self._held.get(key)
        if held is not None and now - held[0] < CHECK_S:
            return held[2], held[3]
        where = VECTORS.c.scope_key == key
        with self.engine.connect() as conn:
            shape = conn.execute(
                select(func.count(), func.coalesce(func.max(VECTORS.c.chunk_id), 0)).where(where)
            ).one()
            version = (int(shape[0]), int(shape[1]))
            if held is not None and held[1] == version:
                ids, matrix = held[2], held[3]
            else:
                rows = conn.execute(select(VECTORS.c.chunk_id, VECTORS.c.vector).where(where))
                ids, matrix = self._read(rows)
        with self._lock:
            if len(ids):
                self._held[key] = (now, version, ids, matrix)
            else:
                self._held.pop(key, None)
        return ids, matrix

    @staticmethod
    def _read(rows: Any) -> tuple[Any, Any]:
        """The chunk ids (a numpy array) and the matrix of their vectors, a row each."""
        numpy = importlib.import_module("numpy")
        ids: list[int] = []
        blobs: list[bytes] = []
        for chunk_id, blob in rows:
            ids.append(int(chunk_id))
            blobs.append(bytes(blob))
        if not blobs:
            return numpy.zeros(0, dtype=numpy.int64), None
        matrix = numpy.frombuffer(b"".join(blobs), dtype=numpy.float32).reshape(len(blobs), -1)
        return numpy.asarray(ids, dtype=numpy.int64), matrix
