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
"""

from __future__ import annotations

import math
import zlib
from typing import Any

from orchestrator.core.json_text import json_text, json_value
from orchestrator.memory.session import fts

__all__ = ["TERMS_VERSION", "counted", "packed", "unpacked"]

# Changes when the way words are read or weighed changes: stored counts of another version are
# counted again.
TERMS_VERSION = 1


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
    if stored:
        try:
            value: Any = json_value(stored)
        except ValueError:
            value = None
        if (
            type(value) is list
            and len(value) == 4
            and value[0] == TERMS_VERSION
            and value[1] == _checksum(body, meta)
            and type(value[2]) is int
            and type(value[3]) is dict
            and _numbers(value[3])
        ):
            return value[2], value[3]
    return counted(body, meta)


def _numbers(weights: dict[str, Any]) -> bool:
    try:
        return math.isfinite(sum(weights.values()))  # not one a string, a list, a null
    except TypeError:
        return False


def _checksum(body: str, meta: str) -> int:
    text = f"{body}\x00{meta}".encode("utf-8", "surrogatepass")
    return zlib.crc32(text)
