"""The active memories of the scopes recall searches, held in memory and kept current.

Every turn searches its group's session memory, its agent's personal memory and global memory,
and reads their pinned entries. Asking the database each time cost more than everything else
a turn does (a ranked full-text query over the whole index, then the rows it found, then the
pins); yet these entries change far less often than they are read. So a process keeps each
scope it searched: its active entries, their words and which are pinned. Before a search it
reads the changes made since (:mod:`orchestrator.memory.session.scope_log`, written by the
database's triggers, so every writer is seen) and applies them: when this process has written
to memory since it last read them, else at most every :data:`scope_log.POLL_S` (another
process's writes; with hundreds of turns a second, that read was a tenth of a turn's CPU).
A scope is loaded whole the first time it is searched, each entry with its words as counted
when it was written (:mod:`orchestrator.memory.session.terms`), and ranked as the full-text
index ranks (:mod:`orchestrator.memory.session.held`). A scope of more than
:data:`MAX_SCOPE` active entries is not held: recall searches the full-text index for it
(:meth:`ResidentMemory.find` says so). Scopes not searched for a while are let go when more
than ``max_entries`` entries are held.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import and_, bindparam, func, select
from sqlalchemy.engine import Connection, Engine

from orchestrator.core.quick_init import quick_init
from orchestrator.memory.audit import PINS
from orchestrator.memory.quick import QuickReader, driver_of
from orchestrator.memory.session import scope_log, terms
from orchestrator.memory.session.entries import ENTRIES, IS_ACTIVE, to_record
from orchestrator.memory.session.held import COLUMNS, ROWS, Entry, HeldScope, entry_of, rank
from orchestrator.memory.session.records import MemoryRecord

__all__ = ["Found", "ResidentMemory"]

MAX_ENTRIES = 200_000
# A scope with more active entries is searched in the full-text index: loading one costs about
# 25 us of CPU per entry, paid by the turn that first searches it.
MAX_SCOPE = 300
RECOUNT_S = 60.0

Scope = tuple[str, str]

_TERMS = ("search_body", "search_meta", "search_terms")
_ID = ROWS.names.index("id")
_SELECT = "SELECT " + ", ".join(f'memory_entries."{n}"' for n in ROWS.names)
_SELECT += " FROM memory_entries"
_TEXTS_SQL = "SELECT id, search_body, search_meta FROM memory_entries WHERE id IN"
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
_IN_SCOPE = select(*COLUMNS, *(ENTRIES.c[name] for name in _TERMS)).where(
    ENTRIES.c.scope == bindparam("scope"), ENTRIES.c.scope_id == bindparam("scope_id"), IS_ACTIVE
)
_COUNT_IN_SCOPE = select(func.count()).where(
    ENTRIES.c.scope == bindparam("scope"), ENTRIES.c.scope_id == bindparam("scope_id"), IS_ACTIVE
)
_BY_IDS = select(*COLUMNS).where(ENTRIES.c.id.in_(bindparam("ids", expanding=True)))
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
        self._scopes: OrderedDict[Scope, HeldScope] = OrderedDict()
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
            hits = rank(terms, held, limit) if limit > 0 else []
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
                held.add(entry_of(to_record(row)))
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

    def _scope(self, conn: Connection, scope: Scope) -> HeldScope:
        held = self._scopes.get(scope)
        if held is not None:
            self._scopes.move_to_end(scope)
            return held
        held = HeldScope()
        params = {"scope": scope[0], "scope_id": scope[1]}
        # Each entry's words as counted when it was written (memory.session.terms).
        raw = ROWS.raw(conn, _SCOPE_SQL, scope, extra=("search_terms",))
        if raw is not None:  # SQLite: the rows as read, made records when needed
            uncounted: list[tuple[Any, ...]] = []
            for row in raw:
                read = terms.read(row[-1])
                if read is None:
                    uncounted.append(row)
                else:
                    held.add(Entry(int(row[_ID]), read[0], read[1], row))
            texts = self._texts(conn, [int(row[_ID]) for row in uncounted])
            for row in uncounted:
                entry_id = int(row[_ID])
                length, freqs = terms.unpacked(row[-1], *texts.get(entry_id, ("", "")))
                held.add(Entry(entry_id, length, freqs, raw=row))
            pins = driver_of(conn).execute(_SQLITE_PINNED_IN_SCOPE, scope).fetchall()
        else:
            for mapped in conn.execute(_IN_SCOPE, params).mappings():
                body, meta, stored = (mapped[name] for name in _TERMS)
                length, freqs = terms.unpacked(stored, body, meta)
                made = to_record(mapped)
                held.add(Entry(made.id, length, freqs, made=made))
            pins = conn.execute(_PINNED_IN_SCOPE, params).all()
        held.pinned = {int(i) for (i,) in pins if int(i) in held.entries}
        self._scopes[scope] = held
        self._held += len(held.entries)
        return held

    @staticmethod
    def _texts(conn: Connection, ids: list[int]) -> dict[int, tuple[str, str]]:
        """The texts entries ``ids`` were counted from, by id (SQLite)."""
        found: dict[int, tuple[str, str]] = {}
        for start in range(0, len(ids), _MOST_IDS):
            some = ids[start : start + _MOST_IDS]
            marks = ",".join("?" * len(some))
            for entry_id, body, meta in driver_of(conn).execute(f"{_TEXTS_SQL} ({marks})", some):
                found[int(entry_id)] = (str(body), str(meta))
        return found

    def _read_ids(self, ids: list[int]) -> tuple[dict[int, Mapping[str, Any]], set[int]]:
        """The rows of the entries ``ids`` (those that still exist), and which are pinned. On
        SQLite through the connection kept for the reads of every turn (taking one from the
        pool and a statement through SQLAlchemy cost more than both reads)."""
        if self._sqlite and 0 < len(ids) <= _MOST_IDS:
            marks = ",".join("?" * len(ids))
            found = self._reader.rows(f"{_SELECT} WHERE memory_entries.id IN ({marks})", ids)
            pins = self._reader.rows(f"{_PINS_SQL} ({marks})", ids)
            return {int(row[_ID]): ROWS.convert(row) for row in found}, {int(i) for (i,) in pins}
        with self._engine.connect() as conn:
            rows = {int(row["id"]): row for row in self._rows_by_ids(conn, ids)}
            pinned = {int(i) for (i,) in conn.execute(_PINNED_OF, {"ids": ids})} if ids else set()
        return rows, pinned

    def _rows_by_ids(self, conn: Connection, ids: list[int]) -> Iterable[Any]:
        fast = ROWS.by_ids(conn, ids)
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
