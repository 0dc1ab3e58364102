"""Lorebooks in the database: a lorebook is a knowledge source of kind ``lore`` for one group,
one agent or everyone; its entries (``knowledge_lore``) are added, listed, edited and removed
here, and read for the turns by :class:`LoreShelf`, which holds them in memory and reads them
again at most every :data:`RELOAD_S` seconds (an entry added or edited is given within that; at
once when this process's :class:`LoreStore` made the change)."""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import delete, insert, select, update

from orchestrator.core.context.tokens import TokenCounter
from orchestrator.core.lore import LoreEntry, check_keys, check_pattern
from orchestrator.errors import ValidationError
from orchestrator.memory.knowledge.store import KnowledgeStore, Source
from orchestrator.memory.knowledge.tables import LORE, SOURCES
from orchestrator.memory.transactions import writing

__all__ = [
    "MAX_LORE_CHARS",
    "RELOAD_S",
    "LoreEdit",
    "LoreShelf",
    "LoreStore",
    "NewLore",
    "UnknownLore",
    "check_new",
]

MAX_LORE_CHARS = 2000
RELOAD_S = 2.0


@dataclass(frozen=True, slots=True, kw_only=True)
class NewLore:
    """An entry to add: its keys and/or pattern, priority (0..100) and text."""

    keys: Sequence[str] = ()
    pattern: str | None = None
    priority: int = 50
    text: str


@dataclass(frozen=True, slots=True, kw_only=True)
class LoreEdit:
    """What to change in an entry; ``None`` keeps it as it is. ``keys=()`` drops the keys and
    ``pattern=""`` the pattern (an entry keeps at least one of the two)."""

    keys: Sequence[str] | None = None
    pattern: str | None = None
    priority: int | None = None
    text: str | None = None

    @property
    def empty(self) -> bool:
        """Whether it changes nothing."""
        return all(v is None for v in (self.keys, self.pattern, self.priority, self.text))

    def applied(self, old: NewLore) -> NewLore:
        """``old`` with these changes."""
        return NewLore(
            keys=old.keys if self.keys is None else self.keys,
            pattern=old.pattern if self.pattern is None else (self.pattern or None),
            priority=old.priority if self.priority is None else self.priority,
            text=old.text if self.text is None else self.text,
        )


class UnknownLore(ValidationError):
    """No lore entry has this id."""

    def __init__(self, entry_id: int) -> None:
        super().__init__("id", f"no lore entry {entry_id}")
        self.entry_id = entry_id


def check_new(new: NewLore) -> tuple[tuple[str, ...], re.Pattern[str] | None, str]:
    """``new``'s keys (cleaned), pattern (compiled) and text (stripped), as they are stored.

    Raises:
        ValidationError: no key and no pattern, a bad key, pattern, priority or text.
    """
    keys = check_keys(new.keys)
    pattern = check_pattern(new.pattern) if new.pattern is not None else None
    if not keys and pattern is None:
        raise ValidationError("keys", "give at least one key or a pattern")
    if not 0 <= new.priority <= 100:
        raise ValidationError("priority", "must be within 0..100")
    text = new.text.strip()
    if not text or len(text) > MAX_LORE_CHARS:
        raise ValidationError("text", f"must be 1 to {MAX_LORE_CHARS} characters")
    return keys, pattern, text


class LoreStore:
    """Lorebook entries on the knowledge sources' database. Blocking."""

    def __init__(self, store: KnowledgeStore, counter: TokenCounter) -> None:
        self.store = store
        self.counter = counter
        self.changes = 0  # entries added, edited or removed through this store: shelves reread

    def add(self, book: Source, new: NewLore, *, now: datetime) -> LoreEntry:
        """Add an entry to ``book`` (a source of kind ``lore``).

        Raises:
            ValidationError: not a lorebook, no key and no pattern, a bad key, pattern,
                priority or text.
        """
        if book.kind != "lore":
            raise ValidationError("book", f"{book.name!r} is a {book.kind} source, not a lorebook")
        keys, pattern, text = check_new(new)
        tokens = self.counter.count(text)
        values = {
            "source": book.name,
            "keys": json.dumps(list(keys), ensure_ascii=False),
            "pattern": new.pattern,
            "priority": new.priority,
            "text": text,
            "tokens": tokens,
            "created_at": now,
        }
        with writing(self.store.engine) as conn:
            entry_id = conn.execute(insert(LORE).values(**values).returning(LORE.c.id)).scalar_one()
        self.changes += 1
        return LoreEntry(
            id=int(entry_id),
            book=book.name,
            keys=keys,
            pattern=pattern,
            priority=new.priority,
            text=text,
            tokens=tokens,
            trust=book.trust,
        )

    def entries(self, books: Sequence[str] | None = None) -> list[LoreEntry]:
        """Every entry (of ``books``, when given), by book and id."""
        query = (
            select(LORE, SOURCES.c.trust)
            .join(SOURCES, SOURCES.c.name == LORE.c.source)
            .order_by(LORE.c.source, LORE.c.id)
        )
        if books is not None:
            query = query.where(LORE.c.source.in_(list(books)))
        with self.store.engine.connect() as conn:
            rows = conn.execute(query).all()
        return [_entry(row._mapping) for row in rows]

    def edit(self, entry_id: int, change: LoreEdit) -> LoreEntry:
        """Change entry ``entry_id`` in place, checked as :meth:`add` checks a new one; in one
        transaction, so a refused change leaves the entry as it was.

        Raises:
            UnknownLore: no entry has this id.
            ValidationError: nothing to change, no key and no pattern left, a bad key,
                pattern, priority or text.
        """
        if change.empty:
            raise ValidationError(
                "edit", "nothing to change: give keys, a pattern, a priority or a text"
            )
        query = (
            select(LORE, SOURCES.c.trust)
            .join(SOURCES, SOURCES.c.name == LORE.c.source)
            .where(LORE.c.id == entry_id)
            .with_for_update(of=LORE)
        )
        with writing(self.store.engine) as conn:
            row = conn.execute(query).one_or_none()
            if row is None:
                raise UnknownLore(entry_id)
            old = NewLore(
                keys=[str(k) for k in json.loads(row.keys or "[]")],
                pattern=row.pattern,
                priority=row.priority,
                text=row.text,
            )
            new = change.applied(old)
            keys, _pattern, text = check_new(new)
            values = {
                "keys": json.dumps(list(keys), ensure_ascii=False),
                "pattern": new.pattern,
                "priority": new.priority,
                "text": text,
                "tokens": self.counter.count(text),
            }
            conn.execute(update(LORE).where(LORE.c.id == entry_id).values(**values))
        self.changes += 1
        return _entry({**row._mapping, **values})

    def remove(self, entry_id: int) -> bool:
        """Remove one entry; False when there was none."""
        with writing(self.store.engine) as conn:
            removed = bool(conn.execute(delete(LORE).where(LORE.c.id == entry_id)).rowcount)
        self.changes += 1
        return removed


def _entry(row: Mapping[Any, Any]) -> LoreEntry:
    """An entry as read (a row of ``knowledge_lore`` with its book's ``trust``)."""
    try:
        pattern = check_pattern(row["pattern"]) if row["pattern"] else None
    except ValidationError:
        pattern = None  # stored before a check it would fail: its keys still work
    return LoreEntry(
        id=row["id"],
        book=row["source"],
        keys=tuple(str(k) for k in json.loads(row["keys"] or "[]")),
        pattern=pattern,
        priority=row["priority"],
        text=row["text"],
        tokens=row["tokens"],
        trust=row["trust"],
    )


class LoreShelf:
    """The entries each scope's turns may be given, held in memory, read again at most every
    ``reload_s`` seconds, and at once after a change made through its :class:`LoreStore`.
    Safe to share between threads."""

    def __init__(
        self,
        lore: LoreStore,
        *,
        reload_s: float = RELOAD_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.lore = lore
        self.reload_s = reload_s
        self.clock = clock
        self._by_scope: dict[tuple[str, str], tuple[LoreEntry, ...]] = {}
        self._read_at = -float("inf")
        self._seen = -1  # the store's changes when it was last read
        self._lock = threading.Lock()

    def for_scopes(self, scopes: Sequence[tuple[str, str]]) -> list[LoreEntry]:
        """The entries of the lorebooks of ``scopes``."""
        with self._lock:
            stale = self.clock() - self._read_at >= self.reload_s
            if stale or self._seen != self.lore.changes:
                self._reload()
            return [entry for scope in scopes for entry in self._by_scope.get(scope, ())]

    def _reload(self) -> None:
        self._seen = self.lore.changes  # a change made while reading is read again next time
        books = {
            s.name: (s.scope, s.scope_id) for s in self.lore.store.sources() if s.kind == "lore"
        }
        by_scope: dict[tuple[str, str], list[LoreEntry]] = {}
        if books:
            for entry in self.lore.entries(list(books)):
                by_scope.setdefault(books[entry.book], []).append(entry)
        self._by_scope = {scope: tuple(found) for scope, found in by_scope.items()}
        self._read_at = self.clock()
