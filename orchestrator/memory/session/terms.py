"""The words an entry is ranked by, counted once, when it is written, and kept with it.

Recall ranks a scope's entries in memory (:mod:`orchestrator.memory.session.resident`): the
first search of a scope counts the words of each of its entries, as the full-text index's
tokenizer reads them (:func:`fts.tokens`), which cost about 15 µs an entry, paid by a group's
first turn. An entry's words never change (its texts are written once, with it), so they are
counted when it is written and stored in its ``search_terms`` column, which a scope's first
load reads back in about a microsecond. They are read only with the texts they were counted
from (a checksum of both is kept with them: a script's own SQL may change a text and not
them); what an older version wrote (no such column value), or a value that does not read as
this version's, is counted again from the texts.

On SQLite a trigger keeps them honest instead (:func:`install`): a change of either text
clears them, whoever makes it, and an older database's counts are checked once, when it is
given the trigger. A scope's first load then takes each entry's length from the stored form
(:func:`stored_length`) and reads its counts only when a word searched for is in them
(:func:`key_of`, :func:`weights`): most entries of a scope never hold one.
"""

from __future__ import annotations

import math
import zlib
from functools import lru_cache
from typing import Any

from sqlalchemy import text
from sqlalchemy.engine import Connection

from orchestrator.core.json_text import json_text, json_value
from orchestrator.memory.session import fts

__all__ = [
    "TERMS_VERSION",
    "counted",
    "install",
    "key_of",
    "packed",
    "stored_length",
    "unpacked",
    "weights",
]

# Changes when the way words are read or weighed changes: stored counts of another version are
# counted again.
TERMS_VERSION = 1
_HEAD = f"[{TERMS_VERSION},"
_HEAD_LENGTH = len(_HEAD)

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


def stored_length(stored: str | None) -> int | None:
    """The length ``stored`` holds when it is this version's form as :func:`packed` writes it
    (its words then found in it by :func:`key_of`, read by :func:`weights`); None: read it
    with :func:`unpacked`. Only the head is read: on SQLite the texts it was counted from are
    the row's own (:func:`install`)."""
    if not stored or not stored.startswith(_HEAD) or "\\" in stored:
        return None  # none, another version's, or escaped (a word would not be found as is)
    second = stored.find(",", _HEAD_LENGTH)
    third = stored.find(",", second + 1) if second > 0 else -1
    if third < 0 or stored[third + 1 : third + 2] != "{":
        return None
    length = stored[second + 1 : third]
    return int(length) if length.isascii() and length.isdigit() else None


@lru_cache(maxsize=16384)
def key_of(word: str) -> str:
    """What the stored form of the counts of an entry holding ``word`` holds (when
    :func:`stored_length` reads it)."""
    return json_text(word) + ":"


def weights(stored: str) -> dict[str, float] | None:
    """Each word's weight, as ``stored`` holds it (its texts not checked: see
    :func:`stored_length`); None when it does not read as this version's."""
    read = _read(stored)
    return None if read is None else read[2]


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
