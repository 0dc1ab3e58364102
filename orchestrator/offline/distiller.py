"""The entries of a ``MEMORY.md`` and the notes of a daily log: how they are read, when two
are the same, which ones a new ``MEMORY.md`` may drop, and the distillation made without a
model on these same rules.

An entry of ``MEMORY.md`` is a non-blank line that is not a ``#`` heading, without its list
marker; a note of the log is an entry without its ``HH:MM`` time and its ``(source: …)``. Two
entries are equal when their normalised forms are (lower case, spaces collapsed, trailing
punctuation removed). An old entry is kept by an answer that has an equal entry, or one holding
at least 70% of its words. The log calls an entry obsolete when one of its notes says
"obsolete", "no longer", "outdated", "replaced" or "superseded" and holds at least half of the
entry's words. Words are runs of three or more letters or digits, without ``[type]`` tags and
a few common words.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

__all__ = ["distil_offline", "drop_problem", "entries", "log_notes", "same_entries"]

_KEPT_SHARE = 0.7
_OBSOLETE_CUES = ("obsolete", "no longer", "outdated", "replaced", "superseded")
# Words too common to tell two entries apart, and the cue words themselves.
_COMMON_WORDS = (
    "the and for with that this are was were has have had not but from our you your its into "
    "when then than all any can will would should use used using obsolete longer outdated "
    "replaced superseded"
)
_STOP_WORDS = frozenset(_COMMON_WORDS.split())
_LIST_MARKER_RE = re.compile(r"^(?:[-*+]|\d+[.)])\s+")
_NOTE_TIME_RE = re.compile(r"^\d{1,2}:\d{2}\s+")
_NOTE_SOURCE_RE = re.compile(r"\s*\(source:[^()]*\)\s*$")
_TAG_RE = re.compile(r"\[[^\]\s]{1,40}\]")
_WORD_RE = re.compile(r"[^\W_]{3,}")


def entries(text: str) -> list[str]:
    """The entries of a ``MEMORY.md``: non-blank lines but headings, without list markers."""
    found = []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            found.append(_LIST_MARKER_RE.sub("", stripped))
    return found


def log_notes(log: str) -> list[str]:
    """The notes of a daily log, each without its time and its source."""
    notes = (_NOTE_SOURCE_RE.sub("", _NOTE_TIME_RE.sub("", e)) for e in entries(log))
    return [note for note in notes if note]


def same_entries(previous: str, text: str) -> bool:
    """Whether two ``MEMORY.md`` texts hold the same entries, order and wording aside."""
    return _keys(entries(text)) == _keys(entries(previous))


def drop_problem(previous: str, answer: str, log: str, max_drop_share: float) -> str | None:
    """Why the answer drops too many previous entries, or None when it does not.

    More than ``max_drop_share`` of the previous entries may not go, unless the log calls
    them obsolete.
    """
    old = entries(previous)
    if not old:
        return None
    new = entries(answer)
    keys, word_sets = _keys(new), [_words(e) for e in new]
    notes = log_notes(log)
    dropped = [
        e for e in old if not _is_kept(e, keys, word_sets) and not _declared_obsolete(e, notes)
    ]
    if len(dropped) <= max_drop_share * len(old):
        return None
    return (
        f"the answer drops {len(dropped)} of {len(old)} previous entries that the log does not "
        f"call obsolete (at most {max_drop_share:.0%} may go), e.g. {dropped[0][:80]!r}"
    )


def _key(entry: str) -> str:
    return " ".join(entry.lower().split()).rstrip(".;:,!")


def _keys(items: Sequence[str]) -> set[str]:
    return {_key(e) for e in items}


def _words(text: str) -> set[str]:
    words = _WORD_RE.findall(_TAG_RE.sub(" ", text.lower()))
    return {w for w in words if w not in _STOP_WORDS}


def _is_kept(entry: str, keys: set[str], word_sets: Sequence[set[str]]) -> bool:
    if _key(entry) in keys:
        return True
    words = _words(entry)
    need = math.ceil(_KEPT_SHARE * len(words))
    return bool(words) and any(len(words & other) >= need for other in word_sets)


def _declared_obsolete(entry: str, notes: Sequence[str]) -> bool:
    words = _words(entry)
    if not words:
        return False
    need = math.ceil(len(words) / 2)
    return any(
        any(cue in note.lower() for cue in _OBSOLETE_CUES) and len(words & _words(note)) >= need
        for note in notes
    )


# --- the offline distillation -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Item:
    text: str
    old: bool


def distil_offline(
    previous: str,
    log: str,
    *,
    budget_tokens: int,
    max_drop_share: float,
    count: Callable[[str], int],
) -> str:
    """The new ``MEMORY.md`` without a model, the same for the same input.

    The previous entries the log calls obsolete go; the log's notes are added after the
    rest; equal entries are kept once, at their newest place. While the list is over the
    budget, the oldest entry goes: a previous one while fewer than ``max_drop_share`` of the
    previous entries have gone, otherwise the oldest of the day's notes.

    Returns:
        A Markdown bullet list, one entry per line.
    """
    notes = log_notes(log)
    old = [e for e in entries(previous) if not _declared_obsolete(e, notes)]
    items = [_Item(e, True) for e in old] + [_Item(n, False) for n in notes]
    seen: set[str] = set()
    unique: list[_Item] = []
    for item in reversed(items):
        if _key(item.text) not in seen:
            seen.add(_key(item.text))
            unique.append(item)
    unique.reverse()
    allowed = math.floor(max_drop_share * len(entries(previous)))
    return _fit(unique, budget_tokens, allowed, count)


def _fit(items: list[_Item], budget_tokens: int, allowed: int, count: Callable[[str], int]) -> str:
    dropped_old = 0
    while items and count(_render(items)) > budget_tokens:
        index = next(
            (i for i, item in enumerate(items) if dropped_old < allowed or not item.old), None
        )
        if index is None:
            break  # only previous entries are left, and no more of them may go
        dropped_old += items.pop(index).old
    return _render(items)


def _render(items: Sequence[_Item]) -> str:
    return "".join(f"- {item.text}\n" for item in items)
