"""The active memories of the scopes recall searches, held in memory and kept current.

Every turn searches its group's session memory, its agent's personal memory and global memory,
and reads their pinned entries. Asking the database each time cost more than everything else
a turn does (a ranked full-text query over the whole index, then the rows it found, then the
pins); yet these entries change far less often than they are read. So a process keeps each
scope it searched: its active entries, their words and which are pinned. Before a search it
reads the changes made since (:mod:`orchestrator.memory.session.scope_log`, written by the
database's triggers, so every writer is seen) and applies them: when this process has written
to memory since it last read them, else at most every :data:`scope_log.POLL_S` (another
process's writes; with hundreds of turns a second, that read was a tenth of a turn's
CPU). A scope is loaded whole the
first time it is searched. A scope of more than :data:`MAX_SCOPE` active entries is not held:
recall searches the full-text index for it (:meth:`ResidentMemory.find` says so).

Ranking is the full-text index's: BM25 (k1 1.2, b 0.75) over the words of the content (weight
1) and of the metadata (weight 0.5), read as its tokenizer reads them (:func:`fts.tokens`), over the
entries of the scopes searched (their count, their lengths, how many hold each word). Scopes
not searched for a while are let go when more than ``max_entries`` entries are held.
"""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from sqlalchemy import and_, bindparam, func, select
from sqlalchemy.engine import Connection, Engine

from orchestrator.core.quick_init import quick_init
from orchestrator.memory.audit import PINS
from orchestrator.memory.quick import QuickReader, driver_of
from orchestrator.memory.session import fts, scope_log, terms
from orchestrator.memory.session.entries import ENTRIES, IS_ACTIVE, to_record
from orchestrator.memory.session.records import MemoryRecord, meta_text
from orchestrator.memory.session.sqlite_rows import SqliteRows

__all__ = ["Found", "ResidentMemory"]

_K1 = 1.2
_B = 0.75
_ONE_MINUS_B = 1 - _B
_K1_PLUS_1 = _K1 + 1
_MIN_IDF = 1e-6  # as FTS5's bm25(): a word in most entries still counts a little
MAX_ENTRIES = 200_000
# A scope with more active entries is searched in the full-text index: loading one costs about
# 25 us of CPU per entry, paid by the turn that first searches it.
MAX_SCOPE = 300
RECOUNT_S = 60.0

Scope = tuple[str, str]

_UNREAD = ("norm", "norm_hash", "search_body", "search_meta", "search_terms")
_TERMS = ("search_body", "search_meta", "search_terms")
_COLUMNS = [c for c in ENTRIES.c if c.name not in _UNREAD]
_ROWS = SqliteRows(_COLUMNS)
_ID = _ROWS.names.index("id")
_SELECT = "SELECT " + ", ".join(f'memory_entries."{n}"' for n in _ROWS.names)
_SELECT += " FROM memory_entries"
_PINS_SQL = "SELECT memory_pins.entry_id FROM memory_pins WHERE memory_pins.entry_id IN"
_MOST_IDS = 500  # SQLite limits a statement's parameters
_SCOPE_SQL = (
    "memory_entries.scope = ? AND memory_entries.scope_id = ? AND memory_entries.status = 'active'"
)
_COUNT_IN_SCOPE_SQL = f"SELECT count(*) FROM memory_entries WHERE {_SCOPE_SQL}"
_SQLITE_PINNED_IN_SCOPE = (
    "SELECT memory_pins.entry_id FROM memory_pins JOIN memory_entries"
    " ON memory_entries.id = memory_pins.entry_id"
    " WHERE memory_entries.scope = ? AND memory_entries.scope_id = ?"
)
_IN_SCOPE = select(*_COLUMNS, *(ENTRIES.c[name] for name in _TERMS)).where(
    ENTRIES.c.scope == bindparam("scope"), ENTRIES.c.scope_id == bindparam("scope_id"), IS_ACTIVE
)
_COUNT_IN_SCOPE = select(func.count()).where(
    ENTRIES.c.scope == bindparam("scope"), ENTRIES.c.scope_id == bindparam("scope_id"), IS_ACTIVE
)
_BY_IDS = select(*_COLUMNS).where(ENTRIES.c.id.in_(bindparam("ids", expanding=True)))
_PINNED_IN_SCOPE = (
    select(PINS.c.entry_id)
    .join(ENTRIES, ENTRIES.c.id == PINS.c.entry_id)
    .where(and_(ENTRIES.c.scope == bindparam("scope"), ENTRIES.c.scope_id == bindparam("scope_id")))
)
_PINNED_OF = select(PINS.c.entry_id).where(PINS.c.entry_id.in_(bindparam("ids", expanding=True)))


@quick_init
@dataclass(frozen=True, slots=True)
class Found:
    """A search's hits ``(record, score)``, best first (a higher score is more relevant,
    comparable within one search), and the scopes' pinned entries, newest first."""

    hits: list[tuple[MemoryRecord, float]]
    pinned: list[MemoryRecord]


@dataclass(slots=True)
class _Entry:
    id: int
    freqs: dict[str, float]  # each word's count, a metadata word counting half
    length: int  # how many words it has
    raw: tuple[Any, ...] | None = None  # the row as read, until it is needed as a record
    made: MemoryRecord | None = None

    def record(self) -> MemoryRecord:
        """The entry as a record (read from its row the first time it is needed: most
        entries of a scope never are)."""
        if self.made is None:
            self.made = to_record(_ROWS.convert(self.raw or ()))
            self.raw = None
        return self.made


def _entry(record: MemoryRecord) -> _Entry:
    meta = meta_text(record.type, record.key, record.tags, record.extra)
    length, freqs = terms.counted(record.content, meta)
    return _Entry(id=record.id, freqs=freqs, length=length, made=record)


@dataclass(slots=True)
class _Scope:
    entries: dict[int, _Entry] = field(default_factory=dict)
    postings: defaultdict[str, set[int]] = field(default_factory=lambda: defaultdict(set))
    pinned: set[int] = field(default_factory=set)
    length: int = 0

    def add(self, entry: _Entry) -> None:
        entry_id = entry.id
        self.entries[entry_id] = entry
        self.length += entry.length
        postings = self.postings
        for word in entry.freqs:
            postings[word].add(entry_id)  # a new word's set made by the defaultdict

    def remove(self, entry_id: int) -> None:
        entry = self.entries.pop(entry_id, None)
        self.pinned.discard(entry_id)
        if entry is None:
            return
        self.length -= entry.length
        for word in entry.freqs:
            ids = self.postings.get(word)
            if ids is not None:
                ids.discard(entry_id)
                if not ids:
                    del self.postings[word]


class ResidentMemory:
    """The active entries of the scopes searched lately, current with the database. Blocking
    (reads the change log, and loads a scope the first time): call from a thread.
    Thread-safe."""

    def __init__(
        self,
        engine: Engine,
        *,
        max_entries: int = MAX_ENTRIES,
        max_scope: int = MAX_SCOPE,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._engine = engine
        self._reader = QuickReader(engine)
        self._sqlite = engine.dialect.name == "sqlite"
        self.max_entries = max_entries
        self.max_scope = max_scope
        self._clock = clock
        self._large: dict[Scope, float] = {}  # scopes too large to hold, until when
        self._scopes: OrderedDict[Scope, _Scope] = OrderedDict()
        self._held = 0
        self._last: int | None = None  # the last change applied (None: nothing read yet)
        self._asked = float("-inf")  # when the log was last read
        self._written = -1  # this process's writes then (scope_log.written)
        self._applied: set[int] = set()  # PostgreSQL: seqs applied near the last one
        self._lock = threading.Lock()

    def find(self, terms: Sequence[str], scopes: Sequence[Scope], limit: int) -> Found | None:
        """The active entries of ``scopes`` that hold any of ``terms`` (words of a query, as
        :func:`fts.query_terms` gives them), at most ``limit``, and the scopes' pinned ones.

        Returns:
            None when a scope holds more than ``max_scope`` active entries: search the
            full-text index instead (such a scope is not held; it is counted again a minute
            later).
        """
        wanted = list(dict.fromkeys(scopes))
        with self._lock:
            self._catch_up()
            scopes_held = self._scopes
            if any(scope not in scopes_held for scope in wanted):
                with self._engine.connect() as conn:
                    if any(self._too_large(conn, scope) for scope in wanted):
                        return None
                    for scope in wanted:
                        self._scope(conn, scope)
            held = [scopes_held[scope] for scope in wanted]
            for scope in wanted:
                scopes_held.move_to_end(scope)
            hits = _rank(terms, held, limit) if limit > 0 else []
            pinned = [s.entries[i].record() for s in held for i in s.pinned if i in s.entries]
            if len(pinned) > 1:
                pinned.sort(key=lambda record: -record.id)
            if self._held > self.max_entries:
                self._let_go(keep=set(wanted))
        return Found(hits=hits, pinned=pinned)

    @property
    def held(self) -> int:
        """How many entries are held."""
        return self._held

    # Keeping current -----------------------------------------------------------------------

    def _catch_up(self) -> None:
        written, now = scope_log.written(), self._clock()
        if written == self._written and now - self._asked < scope_log.POLL_S:
            return  # nothing written here since, and asked a moment ago
        self._written, self._asked = written, now
        if self._last is None:
            self._forget_all()
            self._last = scope_log.newest(self._reader)
            return
        lookback = 0 if self._sqlite else scope_log.POSTGRES_LOOKBACK
        changes = scope_log.changes(self._reader, self._last, self._applied, lookback=lookback)
        if not changes.rows:
            return
        if changes.lost:
            self._forget_all()
            self._last = changes.last
            return
        if not self._sqlite:
            self._applied.update(change.seq for change in changes.rows)
            floor = changes.last - scope_log.POSTGRES_LOOKBACK
            self._applied = {seq for seq in self._applied if seq > floor}
        self._last = changes.last
        touched: dict[Scope, set[int]] = {}
        for change in changes.rows:
            if change.scope in self._scopes:
                touched.setdefault(change.scope, set()).add(change.entry_id)
        if touched:
            self._reread(touched)

    def _reread(self, touched: dict[Scope, set[int]]) -> None:
        """Read the changed entries of held scopes again: each leaves its scope, and comes
        back when it is still in it and active."""
        ids = sorted({entry_id for found in touched.values() for entry_id in found})
        rows, pinned = self._read_ids(ids)
        for scope, found in touched.items():
            held = self._scopes[scope]
            for entry_id in found:
                before = len(held.entries)
                held.remove(entry_id)
                self._held -= before - len(held.entries)
                row = rows.get(entry_id)
                if row is None or row["status"] != "active":
                    continue
                if (row["scope"], row["scope_id"]) != scope:
                    continue
                held.add(_entry(to_record(row)))
                self._held += 1
                if entry_id in pinned:
                    held.pinned.add(entry_id)
            if len(held.entries) > self.max_scope:  # grown too large: counted when searched
                self._held -= len(self._scopes.pop(scope).entries)

    def _too_large(self, conn: Connection, scope: Scope) -> bool:
        """Whether ``scope`` has more active entries than may be held (a held scope is not
        counted: one that grows past the limit is let go of when the change is read)."""
        if scope in self._scopes:
            return False
        now = self._clock()
        until = self._large.get(scope)
        if until is not None and now < until:
            return True
        if self._sqlite:  # a group's first turn: straight to the driver
            count = driver_of(conn).execute(_COUNT_IN_SCOPE_SQL, scope)
            large = int(count.fetchone()[0]) > self.max_scope
        else:
            params = {"scope": scope[0], "scope_id": scope[1]}
            large = int(conn.execute(_COUNT_IN_SCOPE, params).scalar_one()) > self.max_scope
        if large:
            self._large[scope] = now + RECOUNT_S
        else:
            self._large.pop(scope, None)
        return large

    def _scope(self, conn: Connection, scope: Scope) -> _Scope:
        held = self._scopes.get(scope)
        if held is not None:
            self._scopes.move_to_end(scope)
            return held
        held = _Scope()
        params = {"scope": scope[0], "scope_id": scope[1]}
        # Each entry's words as counted when it was written (memory.session.terms).
        raw = _ROWS.raw(conn, _SCOPE_SQL, scope, extra=_TERMS)
        if raw is not None:  # SQLite: the rows as read, made records when needed
            for row in raw:
                length, freqs = terms.unpacked(row[-1], row[-3], row[-2])
                held.add(_Entry(id=int(row[_ID]), freqs=freqs, length=length, raw=row))
            pins = driver_of(conn).execute(_SQLITE_PINNED_IN_SCOPE, scope).fetchall()
        else:
            for mapped in conn.execute(_IN_SCOPE, params).mappings():
                body, meta, stored = (mapped[name] for name in _TERMS)
                length, freqs = terms.unpacked(stored, body, meta)
                made = to_record(mapped)
                held.add(_Entry(id=made.id, freqs=freqs, length=length, made=made))
            pins = conn.execute(_PINNED_IN_SCOPE, params).all()
        held.pinned = {int(i) for (i,) in pins if int(i) in held.entries}
        self._scopes[scope] = held
        self._held += len(held.entries)
        return held

    def _read_ids(self, ids: list[int]) -> tuple[dict[int, Mapping[str, Any]], set[int]]:
        """The rows of the entries ``ids`` (those that still exist), and which are pinned. On
        SQLite through the connection kept for the reads of every turn (taking one from the
        pool and a statement through SQLAlchemy cost more than both reads)."""
        if self._sqlite and 0 < len(ids) <= _MOST_IDS:
            marks = ",".join("?" * len(ids))
            found = self._reader.rows(f"{_SELECT} WHERE memory_entries.id IN ({marks})", ids)
            pins = self._reader.rows(f"{_PINS_SQL} ({marks})", ids)
            return {int(row[_ID]): _ROWS.convert(row) for row in found}, {int(i) for (i,) in pins}
        with self._engine.connect() as conn:
            rows = {int(row["id"]): row for row in self._rows_by_ids(conn, ids)}
            pinned = {int(i) for (i,) in conn.execute(_PINNED_OF, {"ids": ids})} if ids else set()
        return rows, pinned

    def _rows_by_ids(self, conn: Connection, ids: list[int]) -> Iterable[Any]:
        fast = _ROWS.by_ids(conn, ids)
        return fast if fast is not None else conn.execute(_BY_IDS, {"ids": ids}).mappings()

    def _let_go(self, keep: set[Scope]) -> None:
        if self._held <= self.max_entries:
            return
        for scope in list(self._scopes):
            if self._held <= self.max_entries:
                return
            if scope not in keep:
                self._held -= len(self._scopes.pop(scope).entries)

    def _forget_all(self) -> None:
        self._scopes.clear()
        self._held = 0
        self._applied.clear()


def _rank(
    terms: Sequence[str], held: Sequence[_Scope], limit: int
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
    entries: dict[int, _Entry] = {}
    for word in words:
        having = [(s.entries, s.postings[word]) for s in held if word in s.postings]
        found = sum(len(ids) for _, ids in having)
        if not found:
            continue
        idf = math.log((count - found + 0.5) / (found + 0.5))
        idf = idf if idf > 0 else _MIN_IDF
        for held_entries, ids in having:
            for entry_id in ids:
                entry = held_entries[entry_id]
                freq = entry.freqs[word]
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
