"""Lorebook entries in the database, on SQLite and PostgreSQL: added with their keys, pattern,
priority and tokens, read back for the turns by the shelf (again after a few seconds; at once
after a change through its own store), edited in place, checked as they are when added, and
gone with their book."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy.engine import Engine

from orchestrator.core.context.tokens import TokenCounter
from orchestrator.errors import ValidationError
from orchestrator.memory.knowledge.lore import (
    LoreEdit,
    LoreShelf,
    LoreStore,
    NewLore,
    UnknownLore,
)
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
    elsewhere = LoreStore(store, TokenCounter())  # as another process (`arena knowledge lore`)
    second = elsewhere.add(
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


@on_each_database
def test_an_entry_is_edited_in_place_and_the_shelf_sees_it_at_once(engine: Engine):
    store = KnowledgeStore(engine)
    lore = LoreStore(store, TokenCounter())
    book = _book(store)
    entry = lore.add(book, NewLore(keys=["deploy"], text="Deploys on Tuesdays."), now=T0)
    now = [0.0]
    shelf = LoreShelf(lore, reload_s=2.0, clock=lambda: now[0])
    assert [e.text for e in shelf.for_scopes([("group", "demo")])] == ["Deploys on Tuesdays."]

    text = lore.edit(entry.id, LoreEdit(text="  Deploys on Wednesdays, after the review.  "))
    assert (text.id, text.book, text.trust) == (entry.id, "lore-demo", "trusted")
    assert text.text == "Deploys on Wednesdays, after the review."
    assert text.tokens > entry.tokens
    assert (text.keys, text.priority, text.pattern) == (("deploy",), 50, None)
    (held,) = shelf.for_scopes([("group", "demo")])
    assert held == text, "an edit through the shelf's store is read at once, not after 2 s"

    keys = lore.edit(entry.id, LoreEdit(keys=[" ship ", "release", "Ship"]))
    assert keys.keys == ("ship", "release")
    pattern = lore.edit(entry.id, LoreEdit(pattern=r"\bv\d+\b"))
    assert pattern.pattern is not None
    assert pattern.pattern.search("out in V2")
    assert pattern.keys == ("ship", "release")
    priority = lore.edit(entry.id, LoreEdit(priority=90))
    assert priority.priority == 90
    only_pattern = lore.edit(entry.id, LoreEdit(keys=()))
    assert only_pattern.keys == ()
    assert only_pattern.pattern is not None
    both = lore.edit(entry.id, LoreEdit(keys=["deploy"], pattern="", priority=0, text="Short."))
    assert (both.keys, both.pattern, both.priority, both.text) == (("deploy",), None, 0, "Short.")
    (stored,) = lore.entries()
    assert stored == both


@on_each_database
def test_a_refused_edit_keeps_the_entry_and_an_unknown_id_is_named(engine: Engine):
    store = KnowledgeStore(engine)
    lore = LoreStore(store, TokenCounter())
    book = _book(store)
    entry = lore.add(
        book, NewLore(keys=["deploy"], priority=70, text="Deploys on Tuesdays."), now=T0
    )
    refused = [
        (LoreEdit(pattern="(a+)+"), "a repeated group that itself repeats"),
        (LoreEdit(pattern="(unclosed"), "not a regular expression"),
        (LoreEdit(pattern="x" * 201), "at most 200 characters"),
        (LoreEdit(keys=["", "  "]), "a key must not be empty"),
        (LoreEdit(keys=()), "give at least one key or a pattern"),
        (LoreEdit(keys=["x" * 81]), "a key is at most 80 characters"),
        (LoreEdit(keys=[f"k{i}" for i in range(21)]), "at most 20 keys"),
        (LoreEdit(priority=101), r"within 0\.\.100"),
        (LoreEdit(priority=-1), r"within 0\.\.100"),
        (LoreEdit(text="   "), "1 to 2000 characters"),
        (LoreEdit(text="y" * 2001), "1 to 2000 characters"),
        (LoreEdit(), "nothing to change"),
        (LoreEdit(text="fine", pattern="(b*)*"), "a repeated group"),
    ]
    for change, words in refused:
        with pytest.raises(ValidationError, match=words):
            lore.edit(entry.id, change)
        assert lore.entries() == [entry], change
    with pytest.raises(UnknownLore, match=f"no lore entry {entry.id + 1}"):
        lore.edit(entry.id + 1, LoreEdit(text="Nowhere."))
    assert lore.entries() == [entry]
