"""The words of a query too common in the knowledge index to tell passages apart: a word found
in more than :data:`COMMON_SHARE` of the chunks is left out of a search that has rarer words
(``app``, ``use``, ``request`` in a web framework's docs). A search ORs its words, so such a
word made it score nearly every chunk (at 100k chunks, most of a search's time) while ranking
none higher. Counting stops at the share, and a count is trusted for :data:`RECOUNT_S`. SQLite
only: PostgreSQL's ranking has its own weights for common words."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence

from sqlalchemy import text
from sqlalchemy.engine import Connection

from orchestrator.core.kept import Bounded
from orchestrator.memory.session.fts import fts5_phrase

__all__ = ["COMMON_SHARE", "MIN_CHUNKS", "RECOUNT_S", "CommonWords"]

COMMON_SHARE = 0.3
MIN_CHUNKS = 200  # below this, every word of a query is searched
RECOUNT_S = 60.0
_WORDS_KEPT = 16_384
_TOTAL = text("SELECT count(*) FROM knowledge_chunks")
_COUNT = text(
    "SELECT count(*) FROM (SELECT 1 FROM knowledge_fts WHERE knowledge_fts MATCH :m LIMIT :cap)"
)


class CommonWords:
    """Which words of a query to leave out, by their counts in the index. Thread-safe."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._counts: Bounded[str, tuple[int, float]] = Bounded(_WORDS_KEPT)
        self._total: tuple[int, float] = (0, -float("inf"))
        self._lock = threading.Lock()

    def rare(self, conn: Connection, terms: Sequence[str]) -> list[str]:
        """``terms`` without the common ones, unless every one is common."""
        now = self.clock()
        total = self._chunks(conn, now)
        if total < MIN_CHUNKS:
            return list(terms)
        cap = int(total * COMMON_SHARE)
        kept = [term for term in terms if self._count(conn, term, cap, now) <= cap]
        return kept or list(terms)

    def _chunks(self, conn: Connection, now: float) -> int:
        with self._lock:
            total, at = self._total
        if now - at < RECOUNT_S:
            return total
        total = int(conn.execute(_TOTAL).scalar_one())
        with self._lock:
            self._total = (total, now)
        return total

    def _count(self, conn: Connection, term: str, cap: int, now: float) -> int:
        with self._lock:
            known = self._counts.get(term)
        if known is not None and now - known[1] < RECOUNT_S:
            return known[0]
        match = "{body meta} : " + fts5_phrase(term)
        count = int(conn.execute(_COUNT, {"m": match, "cap": cap + 1}).scalar_one())
        with self._lock:
            self._counts.put(term, (count, now))
        return count
