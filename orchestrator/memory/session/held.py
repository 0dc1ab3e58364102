"""A scope recall holds in memory (:mod:`orchestrator.memory.session.resident`): its active
entries, which entries hold each word searched for, and their ranking.

Ranking is the full-text index's: BM25 (k1 1.2, b 0.75) over the words of the content (weight
1) and of the metadata (weight 0.5), read as its tokenizer reads them (:func:`fts.tokens`), over the
entries of the scopes searched (their count, their lengths, how many hold each word).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from orchestrator.memory.session import fts, terms
from orchestrator.memory.session.entries import ENTRIES, to_record
from orchestrator.memory.session.records import MemoryRecord, meta_text
from orchestrator.memory.session.sqlite_rows import SqliteRows

__all__ = ["COLUMNS", "ROWS", "Entry", "HeldScope", "entry_of", "rank"]

_K1 = 1.2
_B = 0.75
_ONE_MINUS_B = 1 - _B
_K1_PLUS_1 = _K1 + 1
_MIN_IDF = 1e-6  # as FTS5's bm25(): a word in most entries still counts a little

# The columns an entry's record is made of, and how SQLite's rows of them read.
COLUMNS = [
    c
    for c in ENTRIES.c
    if c.name not in ("norm", "norm_hash", "search_body", "search_meta", "search_terms")
]
ROWS = SqliteRows(COLUMNS)


@dataclass(slots=True)
class Entry:
    id: int
    length: int  # how many words it has
    freqs: dict[str, float]  # each word's count, a metadata word counting half
    raw: tuple[Any, ...] | None = None  # the row as read, until it is needed as a record
    made: MemoryRecord | None = None

    def record(self) -> MemoryRecord:
        """The entry as a record (read from its row the first time it is needed: most
        entries of a scope never are)."""
        if self.made is None:
            self.made = to_record(ROWS.convert(self.raw or ()))
            self.raw = None
        return self.made


def entry_of(record: MemoryRecord) -> Entry:
    meta = meta_text(record.type, record.key, record.tags, record.extra)
    length, freqs = terms.counted(record.content, meta)
    return Entry(id=record.id, length=length, freqs=freqs, made=record)


# Words a scope keeps which entries hold (those searched for lately) before starting over.
_MOST_WORDS = 4096


@dataclass(slots=True)
class HeldScope:
    entries: dict[int, Entry] = field(default_factory=dict)
    # The entries holding each word searched for (by id, how often), found when first
    # searched for: a scope's first load is spared indexing every word of every entry.
    postings: dict[str, dict[int, float]] = field(default_factory=dict)
    pinned: set[int] = field(default_factory=set)
    length: int = 0

    def having(self, word: str) -> dict[int, float]:
        """The entries that hold ``word``: how often each does, by id."""
        found = self.postings.get(word)
        if found is None:
            if len(self.postings) >= _MOST_WORDS:
                self.postings.clear()
            found = {i: e.freqs[word] for i, e in self.entries.items() if word in e.freqs}
            self.postings[word] = found
        return found

    def add(self, entry: Entry) -> None:
        entry_id = entry.id
        self.entries[entry_id] = entry
        self.length += entry.length
        postings = self.postings
        if postings:
            for word, count in entry.freqs.items():
                having = postings.get(word)
                if having is not None:
                    having[entry_id] = count

    def remove(self, entry_id: int) -> None:
        entry = self.entries.pop(entry_id, None)
        self.pinned.discard(entry_id)
        if entry is None:
            return
        self.length -= entry.length
        for word in entry.freqs:
            having = self.postings.get(word)
            if having is not None:
                having.pop(entry_id, None)


def rank(
    terms: Sequence[str], held: Sequence[HeldScope], limit: int
) -> list[tuple[MemoryRecord, float]]:
    """BM25 of the entries of ``held`` that hold any of ``terms``, best first."""
    words = list(dict.fromkeys(word for term in terms for word in _term_words(term)))
    count = total = 0
    for s in held:
        count += len(s.entries)
        total += s.length
    if not words or count == 0:
        return []
    average = total / count
    scores: dict[int, float] = {}
    entries: dict[int, Entry] = {}
    for word in words:
        having = [(s.entries, found) for s in held if (found := s.having(word))]
        count_having = sum(len(found) for _, found in having)
        if not count_having:
            continue
        idf = math.log((count - count_having + 0.5) / (count_having + 0.5))
        idf = idf if idf > 0 else _MIN_IDF
        for held_entries, found in having:
            for entry_id, freq in found.items():
                entry = held_entries[entry_id]
                norm = _K1 * (_ONE_MINUS_B + _B * entry.length / average)
                score = idf * freq * _K1_PLUS_1 / (freq + norm)
                scores[entry_id] = scores.get(entry_id, 0.0) + score
                entries[entry_id] = entry
    best = sorted(scores, key=lambda i: (-scores[i], -i))[:limit]
    return [(entries[i].record(), scores[i]) for i in best]


@lru_cache(maxsize=16384)
def _term_words(term: str) -> tuple[str, ...]:
    """The index's words of a query's term (:func:`fts.tokens`), remembered: the same terms
    come back query after query."""
    return tuple(fts.tokens(term))
