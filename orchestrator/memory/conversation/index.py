"""Full-text search over a group's conversation: every person's message and agent reply.

A search asks the index (built and filled by :mod:`orchestrator.memory.conversation.indexing`)
for ``group key AND (words)`` and ``seq < before``, so it visits the group's matching messages
only, and reads the messages it found as :class:`Said` values.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.engine import Connection, Engine

from orchestrator.core.kept import Bounded
from orchestrator.core.models import assume_utc
from orchestrator.memory.conversation.indexing import INDEXED_KINDS_SQL, group_key
from orchestrator.memory.quick import QuickReader
from orchestrator.memory.session.fts import BODY_WEIGHT, META_WEIGHT, fts5_phrase, websearch_query

__all__ = ["COMMON_MESSAGES", "COMMON_RECOUNT_S", "CONTEXT_WEIGHT", "HistoryIndex", "Said"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Said:
    """A stored message as recall shows it."""

    id: str
    seq: int
    sender: str
    kind: str
    text: str
    created_at: datetime
    context: str = ""  # the start of the message before it, as the index holds it


_COLUMNS = "seq, id, sender, kind, text, created_at, context"
# How much a word of the message before a message counts, beside one of its own (1) and of its
# sender's name (BODY_WEIGHT, META_WEIGHT): enough that an answer is found by what it answers,
# not so much that the message it answers is outranked by its reply.
CONTEXT_WEIGHT = 0.5
# A word in at least this many indexed messages (of any group) is left out of the search when
# the query has rarer ones: counting stops there, so asking costs little.
COMMON_MESSAGES = 1000
COMMON_RECOUNT_S = 60.0  # how long a word's count (common or not) is trusted
_WORDS_KEPT = 65_536
# SQLite's statements, run through the driver (``?`` placeholders): SQLAlchemy's handling of a
# statement cost several times the statement itself (a search of a long group at every turn).
_COMMON = "SELECT count(*) FROM (SELECT 1 FROM history_fts WHERE history_fts MATCH ? LIMIT ?)"
_SQLITE_RANKED = f"""
    SELECT rowid AS seq,
        -bm25(history_fts, {BODY_WEIGHT}, {META_WEIGHT}, 0.0, {CONTEXT_WEIGHT}) AS score
    FROM history_fts WHERE history_fts MATCH ? AND rowid < ?
    ORDER BY score DESC, seq DESC LIMIT ?
"""
_SQLITE_NEWEST = (
    "SELECT rowid FROM history_fts WHERE history_fts MATCH ? AND rowid < ? "
    "ORDER BY rowid DESC LIMIT ?"
)
_MOST_SEQS = 500  # seqs read per statement (SQLite limits a statement's parameters)
# ts_rank's weights of D, C (the context), B (the sender) and A (the text).
_POSTGRES_RANKED = text(f"""
    SELECT m.seq, ts_rank('{{0.1, {CONTEXT_WEIGHT}, 0.4, 1.0}}', m.search_tsv, q.query, 1) AS score
    FROM messages AS m, websearch_to_tsquery('english'::regconfig, :match) AS q(query)
    WHERE m.search_group && CAST(:group AS text[]) AND m.search_tsv @@ q.query
      AND m.seq < :before
    ORDER BY score DESC, m.seq DESC LIMIT :limit
""")


def _said(row: Sequence[Any]) -> Said:
    """A row of :data:`_COLUMNS` (a time as SQLite stores it: text, in UTC)."""
    seq, message_id, sender, kind, said, created, context = row
    if isinstance(created, str):
        created = datetime.fromisoformat(created)
    return Said(
        id=message_id,
        seq=int(seq),
        sender=sender,
        kind=kind,
        text=said,
        created_at=assume_utc(created),
        context=context or "",
    )


class HistoryIndex:
    """Searches a group's stored conversation. Blocking: call it from a thread."""

    def __init__(self, engine: Engine, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.engine = engine
        self._sqlite = engine.dialect.name == "sqlite"
        self._quick = QuickReader(engine)  # SQLite's reads, through the driver
        self.clock = clock
        # Whether each word searched lately is common, and when that was counted.
        self._common: Bounded[str, tuple[bool, float]] = Bounded(_WORDS_KEPT)

    def search(
        self, terms: Sequence[str], *, group: str, before_seq: int | None, limit: int
    ) -> list[tuple[Said, float]]:
        """The group's messages (not notices) older than ``before_seq`` that hold any of
        ``terms``, best first, with their score (higher is better; comparable within one call).
        """
        if not terms or limit <= 0:
            return []
        before = before_seq or 2**62
        if self._sqlite:
            scored = self._sqlite_search(terms, group, before, limit)
        else:
            with self.engine.connect() as conn:
                scored = self._postgres_search(conn, terms, group, before, limit)
        found = self._by_seq([seq for seq, _ in scored])
        return [(found[seq], score) for seq, score in scored if seq in found]

    def _sqlite_search(
        self, terms: Sequence[str], group: str, before: int, limit: int
    ) -> list[tuple[int, float]]:
        """Ranked by BM25 over the words that are not in most messages. A question made only
        of such common words is answered by the newest messages that hold them all, then by
        the newest that hold any: BM25 would rank every one of tens of thousands of messages
        (and count each word's messages in the whole store) to tell them apart by little."""
        quoted = [fts5_phrase(t) for t in terms]
        scope = f'scope : "{group_key(group)}"'
        rare = self._rare(quoted)
        if rare:
            match = f"{scope} AND ({' OR '.join(rare)})"
            ranked = self._quick.rows(_SQLITE_RANKED, (match, before, limit))
            return [(int(r[0]), float(r[1])) for r in ranked]
        # These hold the words themselves: the context's words count only beside rare ones.
        own = "{body meta} : "
        seqs: dict[int, float] = {}
        if len(quoted) > 1:
            every = f"{scope} AND {own}({' AND '.join(quoted)})"
            seqs.update(dict.fromkeys(self._newest(every, before, limit), 1.0))
        if len(seqs) < limit:
            some = f"{scope} AND {own}({' OR '.join(quoted)})"
            for seq in self._newest(some, before, limit):
                seqs.setdefault(seq, 0.5)
        return list(seqs.items())[:limit]

    def _newest(self, match: str, before: int, limit: int) -> list[int]:
        """The seqs of the newest ``limit`` messages that ``match``, newest first."""
        return [int(row[0]) for row in self._quick.rows(_SQLITE_NEWEST, (match, before, limit))]

    def _rare(self, quoted: Sequence[str]) -> list[str]:
        """The terms in fewer than :data:`COMMON_MESSAGES` indexed messages (of any group):
        BM25 costs a pass over every message of each word searched, and a word found in
        thousands of messages adds little to the ranking (the relevance of what is found
        still counts every word). Each word is counted again at most every
        :data:`COMMON_RECOUNT_S` (counting a common one reads a thousand entries)."""
        now = self.clock()
        rare = []
        for term in quoted:
            known = self._common.get(term)
            if known is None or now - known[1] >= COMMON_RECOUNT_S:
                found = self._quick.rows(_COMMON, (term, COMMON_MESSAGES))[0][0]
                known = (found >= COMMON_MESSAGES, now)
                self._common.put(term, known)
            if not known[0]:
                rare.append(term)
        return rare

    @staticmethod
    def _postgres_search(
        conn: Connection, terms: Sequence[str], group: str, before: int, limit: int
    ) -> list[tuple[int, float]]:
        params = {
            "group": [group],
            "match": websearch_query(terms),
            "before": before,
            "limit": limit,
        }
        return [(int(r[0]), float(r[1])) for r in conn.execute(_POSTGRES_RANKED, params)]

    def _by_seq(self, seqs: Sequence[int]) -> dict[int, Said]:
        found: dict[int, Said] = {}
        for start in range(0, len(seqs), _MOST_SEQS):
            some = seqs[start : start + _MOST_SEQS]
            marks = ", ".join("?" * len(some))
            sql = f"SELECT {_COLUMNS} FROM messages WHERE seq IN ({marks})"
            found.update((int(row[0]), _said(row)) for row in self._quick.rows(sql, some))
        return found

    def previous(self, group: str, seqs: Sequence[int]) -> dict[int, Said]:
        """For each of ``seqs``, the group's message (not a notice) stored just before it
        (read in one query per :data:`_MOST_SEQS`)."""
        found: dict[int, Said] = {}
        for start in range(0, len(seqs), _MOST_SEQS):
            some = seqs[start : start + _MOST_SEQS]
            hits = " UNION ALL ".join("SELECT CAST(? AS bigint) AS hit" for _ in some)
            sql = (
                f"SELECT hits.hit, {_PREVIOUS_COLUMNS} FROM ({hits}) AS hits "
                f"JOIN messages AS m ON m.seq = ({_PREVIOUS_SEQ})"
            )
            rows = self._quick.rows(sql, [*some, group])
            found.update((int(row[0]), _said(row[1:])) for row in rows)
        return found


_PREVIOUS_COLUMNS = ", ".join(f"m.{column}" for column in _COLUMNS.split(", "))
_PREVIOUS_SEQ = (
    "SELECT p.seq FROM messages AS p WHERE p.group_id = ? AND p.seq < hits.hit "
    f"AND p.kind IN {INDEXED_KINDS_SQL} ORDER BY p.seq DESC LIMIT 1"
)
