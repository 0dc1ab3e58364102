"""Lorebooks: short hand-written facts, each with the keys (words or phrases) or the pattern
that bring it in, a priority and a token cost, given to an agent when its keys appear in the
last few messages of the group. Decided as the classifier decides routes: by matching text,
deterministically, without a model call.

A key matches as a whole word or phrase, case-insensitively ("deploy" matches "Deploy now" but
not "deployment"); a pattern is a regular expression searched case-insensitively. The entries
that match are given by priority (highest first, then the oldest entry first) while their
tokens fit the lore budget; each says why it was given: the key or pattern and the message
that held it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from orchestrator.errors import ValidationError

__all__ = [
    "LORE_SCORE",
    "LORE_WINDOW",
    "MAX_KEYS",
    "MAX_PATTERN_CHARS",
    "LoreEntry",
    "LoreHit",
    "Said",
    "check_keys",
    "check_pattern",
    "match_lore",
]

LORE_WINDOW = 4  # the last messages whose words bring lore in
MAX_KEYS = 20
MAX_KEY_CHARS = 80
MAX_PATTERN_CHARS = 200
# A group holding a repetition, itself repeated: the shape of catastrophic backtracking.
_NESTED_RE = re.compile(r"\((?:[^()\\]|\\.)*[+*}](?:[^()\\]|\\.)*\)[+*{]")


@dataclass(frozen=True, slots=True, kw_only=True)
class LoreEntry:
    """One entry of a lorebook, as matching needs it (``compiled``: its pattern, compiled
    once when the entry is read)."""

    id: int
    book: str
    keys: tuple[str, ...]
    pattern: re.Pattern[str] | None
    priority: int
    text: str
    tokens: int
    trust: str

    @property
    def locator(self) -> str:
        """Where the entry is: ``<book>#<id>``."""
        return f"{self.book}#{self.id}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Said:
    """A recent message as lore reads it: who said it and what."""

    sender: str
    text: str


# A lore entry ranks above every recalled item (at most 2, a pinned memory), by priority.
LORE_SCORE = 2.0


@dataclass(frozen=True, slots=True, kw_only=True)
class LoreHit:
    """An entry given to a turn, and why; shown among the references as the context's
    ``Known`` protocol reads a reference of knowledge."""

    entry: LoreEntry
    why: str

    kind = "lore"

    @property
    def id(self) -> int:
        return self.entry.id

    @property
    def key(self) -> str:
        """Its id among the references: ``lore <id>``."""
        return f"lore {self.entry.id}"

    @property
    def locator(self) -> str:
        return self.entry.locator

    @property
    def heading(self) -> str:
        return ""

    @property
    def text(self) -> str:
        return self.entry.text

    @property
    def trust(self) -> str:
        return self.entry.trust

    @property
    def score(self) -> float:
        return LORE_SCORE + self.entry.priority / 1000


def check_keys(keys: Sequence[str]) -> tuple[str, ...]:
    """The keys, stripped and without repeats (case aside).

    Raises:
        ValidationError: an empty key, too many or too long.
    """
    cleaned: dict[str, str] = {}
    for key in keys:
        value = " ".join(key.split())
        if not value:
            raise ValidationError("keys", "a key must not be empty")
        if len(value) > MAX_KEY_CHARS:
            raise ValidationError("keys", f"a key is at most {MAX_KEY_CHARS} characters")
        cleaned.setdefault(value.lower(), value)
    if len(cleaned) > MAX_KEYS:
        raise ValidationError("keys", f"at most {MAX_KEYS} keys")
    return tuple(cleaned.values())


def check_pattern(pattern: str) -> re.Pattern[str]:
    """``pattern`` compiled, case-insensitive.

    Raises:
        ValidationError: too long, or not a regular expression.
    """
    if not pattern.strip():
        raise ValidationError("pattern", "must not be empty")
    if len(pattern) > MAX_PATTERN_CHARS:
        raise ValidationError("pattern", f"at most {MAX_PATTERN_CHARS} characters")
    if _NESTED_RE.search(pattern):
        # "(a+)+" can take exponential time on a message that almost matches.
        raise ValidationError("pattern", "a repeated group that itself repeats, such as (a+)+")
    try:
        return re.compile(pattern, re.IGNORECASE)
    except re.error as exc:
        raise ValidationError("pattern", f"not a regular expression: {exc}") from exc


def _key_found(key: str, text: str) -> bool:
    """Whether ``key`` is in ``text`` (both lower-cased) as a whole word or phrase."""
    start = text.find(key)
    while start >= 0:
        end = start + len(key)
        before = text[start - 1] if start else " "
        after = text[end] if end < len(text) else " "
        if not (before.isalnum() or before == "_") and not (after.isalnum() or after == "_"):
            return True
        start = text.find(key, start + 1)
    return False


def _why(entry: LoreEntry, recent: Sequence[tuple[Said, str]]) -> str | None:
    """Why ``entry`` is given: the first key (or the pattern) found, newest message first."""
    for said, lowered in reversed(recent):
        for key in entry.keys:
            if _key_found(key.lower(), lowered):
                return f"key {key!r} in {said.sender}'s message"
        if entry.pattern is not None and entry.pattern.search(said.text):
            return f"pattern {entry.pattern.pattern!r} in {said.sender}'s message"
    return None


def match_lore(
    entries: Sequence[LoreEntry], recent: Sequence[Said], budget: int
) -> tuple[list[LoreHit], list[tuple[LoreEntry, str]]]:
    """The entries the last :data:`LORE_WINDOW` of ``recent`` bring in, by priority within
    ``budget`` tokens; and those that matched but did not fit, with why."""
    window = [(said, said.text.lower()) for said in recent[-LORE_WINDOW:]]
    found = [(entry, why) for entry in entries if (why := _why(entry, window)) is not None]
    found.sort(key=lambda pair: (-pair[0].priority, pair[0].id))
    given: list[LoreHit] = []
    left: list[tuple[LoreEntry, str]] = []
    used = 0
    for entry, why in found:
        if used + entry.tokens > budget:
            left.append((entry, f"{entry.tokens} tokens would pass the {budget} for lore"))
            continue
        used += entry.tokens
        given.append(LoreHit(entry=entry, why=why))
    return given, left
