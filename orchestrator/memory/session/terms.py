"""The words an entry is ranked by, counted once, when it is written, and kept with it.

Recall ranks a scope's entries in memory (:mod:`orchestrator.memory.session.resident`): the
first search of a scope counts the words of each of its entries, as the full-text index's
tokenizer reads them (:func:`fts.tokens`), which cost about 15 µs an entry, paid by a group's
first turn. An entry's words never change (its texts are written once, with it), so they are
counted when it is written and stored in its ``search_terms`` column, which a scope's first
load reads back in about a microsecond. A script's own SQL may change a text and not them:
on SQLite a trigger clears them then (:func:`install`; an older database's are checked once,
when it is given the trigger), so a first load reads them alone (:func:`read`); elsewhere
they are read with the texts they were counted from, and a checksum of both kept with them
(:func:`unpacked`). What an older version wrote (no such column value), or a value that does
not read as this version's, is counted again from the texts.
"""

from __future__ import annotations

import math
import zlib
from typing import Any

from sqlalchemy import text
from sqlalchemy.engine import Connection

from orchestrator.core.json_text import json_text, json_value
from orchestrator.memory.session import fts

__all__ = [
    "TERMS_VERSION",
    "counted",
    "install",
    "packed",
    "read",
    "unpacked",
]

# Changes when the way words are read or weighed changes: stored counts of another version are
# counted again.
TERMS_VERSION = 1

# A change of an entry's texts clears its counts (unless the same statement writes new ones).
_TRIGGER = "memory_terms_au"
_SQLITE_OBJECTS = {
    _TRIGGER: f"""
        CREATE TRIGGER {_TRIGGER} AFTER UPDATE OF search_body, search_meta ON memory_entries
        WHEN new.search_terms IS old.search_terms
        BEGIN
            UPDATE memory_entries SET search_terms = NULL WHERE id = new.id;
        END
    """
}


def counted(body: str, meta: str) -> tuple[int, dict[str, float]]:
    """How many words ``body`` (the content) and ``meta`` (its metadata) have, plus one, and
    each word's weight: a word of the content counts :data:`fts.BODY_WEIGHT` each time, one of
    the metadata :data:`fts.META_WEIGHT`."""
    body_words, meta_words = fts.tokens(body), fts.tokens(meta)
    freqs: dict[str, float] = {}
    get = freqs.get
    for word in body_words:
        freqs[word] = get(word, 0.0) + fts.BODY_WEIGHT
    for word in meta_words:
        freqs[word] = get(word, 0.0) + fts.META_WEIGHT
    return len(body_words) + len(meta_words) + 1, freqs


def packed(body: str, meta: str) -> str:
    """The stored form of :func:`counted` (JSON: the version, the texts' checksum, the
    length, the weights)."""
    length, freqs = counted(body, meta)
    return json_text([TERMS_VERSION, _checksum(body, meta), length, freqs])


def unpacked(stored: str | None, body: str, meta: str) -> tuple[int, dict[str, float]]:
    """:func:`counted` as ``stored`` holds it, or counted again when it holds no counts of
    this version for these texts (written before there were any, or not by this package, or
    a text changed since)."""
    return _verified(stored, body, meta) or counted(body, meta)


def _verified(stored: str | None, body: str, meta: str) -> tuple[int, dict[str, float]] | None:
    read = _read(stored) if stored else None
    if read is None or read[0] != _checksum(body, meta):
        return None
    return read[1], read[2]


def _read(stored: str) -> tuple[Any, int, dict[str, float]] | None:
    """The checksum, length and weights ``stored`` holds, if it reads as this version's."""
    try:
        value: Any = json_value(stored)
    except ValueError:
        return None
    if (
        type(value) is list
        and len(value) == 4
        and value[0] == TERMS_VERSION
        and type(value[2]) is int
        and type(value[3]) is dict
        and _numbers(value[3])
    ):
        return value[1], value[2], value[3]
    return None


def read(stored: str | None) -> tuple[int, dict[str, float]] | None:
    """:func:`counted` as ``stored`` holds it when it reads as this version's, its texts not
    checked (on SQLite a trigger clears counts whose texts change: :func:`install`); None:
    count them with :func:`unpacked`."""
    found = _read(stored) if stored else None
    return None if found is None else (found[1], found[2])


def _numbers(weights: dict[str, Any]) -> bool:
    try:
        return math.isfinite(sum(weights.values()))  # not one a string, a list, a null
    except TypeError:
        return False


def _checksum(body: str, meta: str) -> int:
    text = f"{body}\x00{meta}".encode("utf-8", "surrogatepass")
    return zlib.crc32(text)


def install(conn: Connection) -> None:
    """SQLite: give the database the trigger that clears counts whose texts change, and check
    the counts it holds (written before it had the trigger: a text may have changed since) once,
    counting again those that do not read as this version's for their texts. Idempotent: one
    catalogue query when current. Other databases check the texts at each load (:func:`unpacked`).
    """
    if conn.dialect.name != "sqlite" or not fts.sqlite_needs_install(conn, _SQLITE_OBJECTS):
        return
    conn.execute(text(f"DROP TRIGGER IF EXISTS {_TRIGGER}"))
    conn.execute(text(_SQLITE_OBJECTS[_TRIGGER]))
    rows = conn.execute(
        text("SELECT id, search_body, search_meta, search_terms FROM memory_entries")
    )
    stale = [
        {"id": entry_id, "terms": packed(body, meta)}
        for entry_id, body, meta, stored in rows
        if _verified(stored, body, meta) is None
    ]
    if stale:
        conn.execute(text("UPDATE memory_entries SET search_terms = :terms WHERE id = :id"), stale)
