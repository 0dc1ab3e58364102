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
_COMMON = text(
    "SELECT count(*) FROM (SELECT 1 FROM history_fts WHERE history_fts MATCH :term LIMIT :cap)"
)
_SQLITE_RANKED = text(f"""
    SELECT rowid AS seq,
        -bm25(history_fts, {BODY_WEIGHT}, {META_WEIGHT}, 0.0, {CONTEXT_WEIGHT}) AS score
    FROM history_fts WHERE history_fts MATCH :match AND rowid < :before
    ORDER BY score DESC, seq DESC LIMIT :limit
""")
_SQLITE_NEWEST = text(
    "SELECT rowid FROM history_fts WHERE history_fts MATCH :match AND rowid < :before "
    "ORDER BY rowid DESC LIMIT :limit"
)
# ts_rank's weights of D, C (the context), B (the sender) and A (the text).
_POSTGRES_RANKED = text(f"""
    SELECT m.seq, ts_rank('{{0.1, {CONTEXT_WEIGHT}, 0.4, 1.0}}', m.search_tsv, q.query, 1) AS score
    FROM messages AS m, websearch_to_tsquery('english'::regconfig, :match) AS q(query)
    WHERE m.search_group && CAST(:group AS text[]) AND m.search_tsv @@ q.query
      AND m.seq < :before
    ORDER BY score DESC, m.seq DESC LIMIT :limit
""")


def _newest(conn: Connection, match: str, before: int, limit: int) -> list[int]:
    """The seqs of the newest ``limit`` messages that ``match``, newest first."""
    params = {"match": match, "before": before, "limit": limit}
    return [int(row[0]) for row in conn.execute(_SQLITE_NEWEST, params)]


def _said(row: Any) -> Said:
    created = row.created_at
    if isinstance(created, str):
        created = datetime.fromisoformat(created)
    return Said(
        id=row.id,
        seq=int(row.seq),
        sender=row.sender,
        kind=row.kind,
        text=row.text,
        created_at=assume_utc(created),
        context=row.context or "",
    )


class HistoryIndex:
    """Searches a group's stored conversation. Blocking: call it from a thread."""

    def __init__(self, engine: Engine, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.engine = engine
        self._sqlite = engine.dialect.name == "sqlite"
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
        with self.engine.connect() as conn:
            if self._sqlite:
                scored = self._sqlite_search(conn, terms, group, before, limit)
            else:
                scored = self._postgres_search(conn, terms, group, before, limit)
            found = self._by_seq(conn, [seq for seq, _ in scored])
        return [(found[seq], score) for seq, score in scored if seq in found]

    def _sqlite_search(
        self, conn: Connection, terms: Sequence[str], group: str, before: int, limit: int
    ) -> list[tuple[int, float]]:
        """Ranked by BM25 over the words that are not in most messages. A question made only
        of such common words is answered by the newest messages that hold them all, then by
        the newest that hold any: BM25 would rank every one of tens of thousands of messages
        (and count each word's messages in the whole store) to tell them apart by little."""
        quoted = [fts5_phrase(t) for t in terms]
        scope = f'scope : "{group_key(group)}"'
        rare = self._rare(conn, quoted)
        if rare:
            match = f"{scope} AND ({' OR '.join(rare)})"
            params = {"match": match, "before": before, "limit": limit}
            return [(int(r[0]), float(r[1])) for r in conn.execute(_SQLITE_RANKED, params)]
        # These hold the words themselves: the context's words count only beside rare ones.
        own = "{body meta} : "
        seqs: dict[int, float] = {}
        if len(quoted) > 1:
            every = f"{scope} AND {own}({' AND '.join(quoted)})"
            seqs.update(dict.fromkeys(_newest(conn, every, before, limit), 1.0))
        if len(seqs) < limit:
            some = f"{scope} AND {own}({' OR '.join(quoted)})"
            for seq in _newest(conn, some, before, limit):
                seqs.setdefault(seq, 0.5)
        return list(seqs.items())[:limit]

    def _rare(self, conn: Connection, quoted: Sequence[str]) -> list[str]:
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
                found = conn.execute(_COMMON, {"term": term, "cap": COMMON_MESSAGES}).scalar_one()
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

    @staticmethod
    def _by_seq(conn: Connection, seqs: Sequence[int]) -> dict[int, Said]:
        if not seqs:
            return {}
        marks = ", ".join(f":s{n}" for n in range(len(seqs)))
        rows = conn.execute(
            text(f"SELECT {_COLUMNS} FROM messages WHERE seq IN ({marks})"),
            {f"s{n}": seq for n, seq in enumerate(seqs)},
        )
        return {int(row.seq): _said(row) for row in rows}

    def previous(self, group: str, seqs: Sequence[int]) -> dict[int, Said]:
        """For each of ``seqs``, the group's message (not a notice) stored just before it
        (read in one query)."""
        if not seqs:
            return {}
        hits = " UNION ALL ".join(f"SELECT CAST(:s{n} AS bigint) AS hit" for n in range(len(seqs)))
        sql = text(
            f"SELECT hits.hit, {_PREVIOUS_COLUMNS} FROM ({hits}) AS hits "
            f"JOIN messages AS m ON m.seq = ({_PREVIOUS_SEQ})"
        )
        params: dict[str, Any] = {f"s{n}": seq for n, seq in enumerate(seqs)}
        params["group"] = group
        with self.engine.connect() as conn:
            return {int(row.hit): _said(row) for row in conn.execute(sql, params)}


_PREVIOUS_COLUMNS = ", ".join(f"m.{column}" for column in _COLUMNS.split(", "))
_PREVIOUS_SEQ = (
    "SELECT p.seq FROM messages AS p WHERE p.group_id = :group AND p.seq < hits.hit "
    f"AND p.kind IN {INDEXED_KINDS_SQL} ORDER BY p.seq DESC LIMIT 1"
)
