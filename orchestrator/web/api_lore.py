"""The console's API of lorebook entries (``/api/knowledge/lore``, as ``arena knowledge lore``):
every entry with its book and who reads it, an entry added (its lorebook made on first use,
for one owner only), edited in place and removed.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException

from orchestrator.core.lore import LoreEntry
from orchestrator.errors import ValidationError
from orchestrator.memory.knowledge.lore import (
    MAX_LORE_CHARS,
    LoreEdit,
    NewLore,
    UnknownLore,
    check_new,
)
from orchestrator.memory.knowledge.store import Source, validate_source_name
from orchestrator.web.api_knowledge import read_by
from orchestrator.web.bodies import BodyLimit
from orchestrator.web.schemas import errors
from orchestrator.web.schemas_knowledge import (
    LoreEntries,
    LoreEntryEdit,
    LoreEntryOut,
    LoreRemoved,
    NewLoreEntry,
)
from orchestrator.web.state import Console, console

__all__ = ["BODY_LIMITS", "router"]

router = APIRouter(prefix="/api/knowledge/lore", tags=["knowledge"])

# Room for the longest text and the most keys, each character JSON-escaped.
MAX_LORE_BODY_BYTES = 64 * 1024
BODY_LIMITS = (
    BodyLimit(
        method="POST",
        path=router.prefix,
        max_bytes=MAX_LORE_BODY_BYTES,
        what="lore",
        note=f"a lore entry's text is at most {MAX_LORE_CHARS} characters",
    ),
    BodyLimit(
        method="PATCH",
        path=f"{router.prefix}/{{entry_id}}",
        max_bytes=MAX_LORE_BODY_BYTES,
        what="lore",
        note=f"a lore entry's text is at most {MAX_LORE_CHARS} characters",
    ),
)

Running = Annotated[Console, Depends(console)]


def _entry_out(entry: LoreEntry, owner: str) -> LoreEntryOut:
    return LoreEntryOut(
        id=entry.id,
        book=entry.book,
        owner=owner,
        keys=list(entry.keys),
        pattern=entry.pattern.pattern if entry.pattern else None,
        priority=entry.priority,
        tokens=entry.tokens,
        text=entry.text,
    )


def _listed(running: Console) -> list[LoreEntryOut]:
    owners = {s.name: s.owner for s in running.wiring.knowledge.sources()}
    return [_entry_out(e, owners.get(e.book, "")) for e in running.wiring.lore.entries()]


def _book(running: Console, name: str, scope: str, scope_id: str) -> Source:
    """The lorebook ``name``, made (trusted, for this owner) when there is none; 409 when it
    is not a lorebook or is another owner's."""
    store = running.wiring.knowledge
    found = store.get(name)
    if found is None:
        try:
            return store.add(
                name=name,
                kind="lore",
                root=running.settings.data_dir / "knowledge" / name,
                scope=scope,
                scope_id=scope_id,
                trust="trusted",
                now=datetime.now(UTC),
            )
        except ValidationError as exc:
            if "exists already" not in str(exc):
                raise HTTPException(422, str(exc)) from None
            found = store.get(name)  # made by another request at the same time
            if found is None:
                raise HTTPException(
                    409, f"book {name!r} changed while it was made: try again"
                ) from None
    if found.kind != "lore":
        raise HTTPException(
            409, f"book {name!r} is a {found.kind} source, not a lorebook: choose another book"
        )
    owner = "everyone" if scope == "everyone" else f"{scope} {scope_id}"
    if found.owner != owner:
        raise HTTPException(
            409, f"lorebook {name!r} is read by {found.owner}, not {owner}: choose another book"
        )
    return found


def _add(running: Console, asked: NewLoreEntry, scope: str, scope_id: str) -> LoreEntryOut:
    name = asked.book or (f"lore-{scope_id}"[:64].rstrip("-_") if scope_id else "lore")
    try:
        validate_source_name(name)
    except ValidationError as exc:
        raise HTTPException(422, f"book: {exc.problem}") from None
    new = NewLore(
        keys=[k for k in asked.keys if k.strip()],
        pattern=asked.pattern or None,
        priority=asked.priority,
        text=asked.text,
    )
    try:
        check_new(new)  # before its book is made: a refused entry makes no book
    except ValidationError as exc:
        raise HTTPException(422, str(exc)) from None
    book = _book(running, name, scope, scope_id)
    try:
        entry = running.wiring.lore.add(book, new, now=datetime.now(UTC))
    except ValidationError as exc:
        raise HTTPException(422, str(exc)) from None
    return _entry_out(entry, book.owner)


@router.get("", summary="The lorebook entries (`arena knowledge lore list`)")
async def entries(running: Running) -> LoreEntries:
    """Every entry by book and id: who reads it, its keys and pattern, priority, tokens, text."""
    return LoreEntries(entries=await asyncio.to_thread(_listed, running))


@router.post(
    "",
    status_code=201,
    summary="Add a lorebook entry (`arena knowledge lore add`)",
    responses=errors(409, 413, 422),
)
async def add(asked: NewLoreEntry, running: Running) -> LoreEntryOut:
    """Adds the entry to ``book`` (default ``lore-<group>``, ``lore-<agent>`` or ``lore``),
    made on first use (trusted, read by the owner asked); a lorebook is read by one owner.
    At least one key or a pattern; priority 0..100; text 1 to 2000 characters."""
    scope, scope_id = read_by(running, asked.group, asked.agent, asked.everyone)
    return await asyncio.to_thread(_add, running, asked, scope, scope_id)


def _change(asked: LoreEntryEdit) -> LoreEdit:
    """The change asked: a field left out keeps its value; null drops the keys or the
    pattern, and is refused for the text and the priority."""
    given = asked.model_fields_set
    for name in ("text", "priority"):
        if name in given and getattr(asked, name) is None:
            raise HTTPException(422, f"{name}: must not be null (leave it out to keep it)")
    return LoreEdit(
        keys=[k for k in asked.keys or () if k.strip()] if "keys" in given else None,
        pattern=(asked.pattern or "") if "pattern" in given else None,
        priority=asked.priority,
        text=asked.text,
    )


def _edit(running: Console, entry_id: int, change: LoreEdit) -> LoreEntryOut:
    try:
        entry = running.wiring.lore.edit(entry_id, change)
    except UnknownLore:
        raise HTTPException(404, f"no lore entry {entry_id}") from None
    except ValidationError as exc:
        raise HTTPException(422, str(exc)) from None
    book = running.wiring.knowledge.get(entry.book)
    return _entry_out(entry, book.owner if book is not None else "")


@router.patch(
    "/{entry_id}",
    summary="Edit a lorebook entry in place (`arena knowledge lore edit`)",
    responses=errors(404, 413, 422),
)
async def edit(entry_id: int, asked: LoreEntryEdit, running: Running) -> LoreEntryOut:
    """Changes the fields given (text, keys, pattern, priority), checked as a new entry is;
    a refused change leaves the entry as it was. ``keys: []`` drops the keys, ``pattern: ""``
    the pattern (at least one stays). The entry as edited; turns are given it within 2 s."""
    change = _change(asked)
    return await asyncio.to_thread(_edit, running, entry_id, change)


@router.delete(
    "/{entry_id}",
    summary="Remove a lorebook entry (`arena knowledge lore remove`)",
    responses=errors(404, 422),
)
async def remove(entry_id: int, running: Running) -> LoreRemoved:
    """The entry is removed; its lorebook stays (forget the source to remove it)."""
    if not await asyncio.to_thread(running.wiring.lore.remove, entry_id):
        raise HTTPException(404, f"no lore entry {entry_id}")
    return LoreRemoved(id=entry_id, note=f"removed lore entry {entry_id}")
