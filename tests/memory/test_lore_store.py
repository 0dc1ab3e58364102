"""Lorebook entries in the database, on SQLite and PostgreSQL: added with their keys, pattern,
priority and tokens, read back for the turns by the shelf (again after a few seconds), and gone
with their book."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy.engine import Engine

from orchestrator.core.context.tokens import TokenCounter
from orchestrator.errors import ValidationError
from orchestrator.memory.knowledge.lore import LoreShelf, LoreStore, NewLore
from orchestrator.memory.knowledge.store import KnowledgeStore, Source
from tests.databases import on_each_database

T0 = datetime(2026, 5, 1, 9, 0, tzinfo=UTC)


def _book(store: KnowledgeStore, name: str = "lore-demo", kind: str = "lore") -> Source:
    return store.add(
        name=name,
        kind=kind,
        root=Path("unused"),
        scope="group",
        scope_id="demo",
        trust="trusted",
        now=T0,
    )


@on_each_database
def test_entries_are_kept_read_by_the_shelf_and_gone_with_their_book(engine: Engine):
    store = KnowledgeStore(engine)
    lore = LoreStore(store, TokenCounter())
    book = _book(store)
    first = lore.add(
        book, NewLore(keys=["deploy"], priority=80, text="Deploys on Tuesdays."), now=T0
    )
    assert first.tokens > 0
    now = [0.0]
    shelf = LoreShelf(lore, reload_s=2.0, clock=lambda: now[0])
    assert [e.id for e in shelf.for_scopes([("group", "demo")])] == [first.id]
    assert shelf.for_scopes([("group", "other")]) == []
    second = lore.add(
        book, NewLore(pattern=r"\bfri(day)?\b", text="Nothing ships on Fridays."), now=T0
    )
    assert [e.id for e in shelf.for_scopes([("group", "demo")])] == [first.id], "held 2 s"
    now[0] = 2.0
    read = shelf.for_scopes([("group", "demo")])
    assert [e.id for e in read] == [first.id, second.id]
    assert read[1].pattern is not None
    assert read[1].pattern.search("see you FRIDAY")
    assert read[0].keys == ("deploy",)
    assert lore.remove(first.id)
    assert not lore.remove(first.id)
    store.remove("lore-demo")
    assert lore.entries() == []


def test_an_entry_needs_a_lorebook_and_a_key_or_pattern(engine: Engine):
    store = KnowledgeStore(engine)
    lore = LoreStore(store, TokenCounter())
    folder = _book(store, name="docs", kind="folder")
    with pytest.raises(ValidationError, match="not a lorebook"):
        lore.add(folder, NewLore(keys=["x"], text="text"), now=T0)
    book = _book(store)
    with pytest.raises(ValidationError, match="at least one key or a pattern"):
        lore.add(book, NewLore(text="text"), now=T0)
    with pytest.raises(ValidationError, match=r"within 0\.\.100"):
        lore.add(book, NewLore(keys=["x"], priority=101, text="text"), now=T0)
    with pytest.raises(ValidationError, match="1 to 2000 characters"):
        lore.add(book, NewLore(keys=["x"], text="  "), now=T0)
