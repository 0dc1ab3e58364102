"""The shape of a marker's payload: what ``SAVE_MEMORY`` and ``SAVE_TO_PERSONAL`` may carry.

A session memory (``SAVE_MEMORY``)::

    {"type": "decision",            # required, one of MEMORY_TYPES (any letter case)
     "content": "We use JWT",       # required, a non-blank string; stripped
     "key": "auth.method",          # optional, at most 100 characters; a later entry with the
                                    # same key supersedes this one
     "confidence": 0.9,             # optional, a number from 0 to 1, default 0.8
     "tags": ["auth"],              # optional, at most 10 strings of at most 40 characters
     "task_id": "T-12"}             # optional, a string or an integer, at most 100 characters

A personal note (``SAVE_TO_PERSONAL``)::

    {"content": "Ask for the expected load first", "type": "lesson"}   # type: default "note"

Unknown fields are errors, so a typo never silently drops data; an error names such a field
only when its name is a short plain word that does not look like a credential, since errors are
kept on the reply's metadata. ``null`` counts as absent for the optional fields. Booleans are not
numbers. ``key``, ``tags`` and ``task_id`` follow the character rule of people's messages
(:func:`orchestrator.core.wire.character_problem`). The checks are pure and only about shape: the
content's length and characters, confidence thresholds, secrets and rate limits belong to
:mod:`orchestrator.memory.gate.rules`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from orchestrator.core.tools import MEMORY_TYPES
from orchestrator.core.wire import character_problem
from orchestrator.errors import ValidationError
from orchestrator.memory.gate.secrets import find_secret

__all__ = [
    "MEMORY_TYPES",
    "PERSONAL_TYPES",
    "MarkerSchemaError",
    "MemoryDraft",
    "PersonalDraft",
    "validate_memory",
    "validate_personal",
]

PERSONAL_TYPES = ("lesson", "skill", "habit", "note")

DEFAULT_CONFIDENCE = 0.8
MAX_KEY_CHARS = 100
MAX_TASK_ID_CHARS = 100
MAX_TAGS = 10
MAX_TAG_CHARS = 40

# Bigger integers cannot fit the length limit; checking first spares converting them.
_TASK_ID_INT_BOUND = 10**MAX_TASK_ID_CHARS
_MEMORY_FIELDS = ("type", "content", "key", "confidence", "tags", "task_id")
_PERSONAL_FIELDS = ("content", "type")
_PLAIN_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,39}")


class MarkerSchemaError(ValidationError):
    """A marker's payload does not have the expected shape; ``reason`` says how."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__("marker", reason)


@dataclass(frozen=True, slots=True, kw_only=True)
class MemoryDraft:
    """A session memory as an agent asked to save it, before the gate has seen it."""

    type: str
    content: str
    key: str | None = None
    confidence: float = DEFAULT_CONFIDENCE
    tags: tuple[str, ...] = ()
    task_id: str | None = None

    def __post_init__(self) -> None:
        if self.type not in MEMORY_TYPES:
            raise ValueError(f"unknown memory type {self.type!r}")
        if not self.content.strip():
            raise ValueError("content must not be blank")
        if not 0.0 <= self.confidence <= 1.0:
            raise ValueError("confidence must be between 0 and 1")


@dataclass(frozen=True, slots=True, kw_only=True)
class PersonalDraft:
    """A line for an agent's personal daily log."""

    content: str
    type: str = "note"

    def __post_init__(self) -> None:
        if self.type not in PERSONAL_TYPES:
            raise ValueError(f"unknown personal type {self.type!r}")
        if not self.content.strip():
            raise ValueError("content must not be blank")


def validate_memory(payload: Mapping[str, Any]) -> MemoryDraft:
    """Check a ``SAVE_MEMORY`` payload and turn it into a draft.

    Args:
        payload: the marker's JSON object.

    Returns:
        The draft, with ``content``, ``key``, ``task_id`` and each tag stripped, ``type``
        lower-cased, and defaults filled in.

    Raises:
        MarkerSchemaError: naming the first problem, e.g. ``missing "content"``.
    """
    _check_fields(payload, _MEMORY_FIELDS)
    return MemoryDraft(
        type=_choice(payload, "type", MEMORY_TYPES, default=None),
        content=_content(payload),
        key=_short_text(payload, "key", MAX_KEY_CHARS),
        confidence=_confidence(payload),
        tags=_tags(payload),
        task_id=_task_id(payload),
    )


def validate_personal(payload: Mapping[str, Any]) -> PersonalDraft:
    """Check a ``SAVE_TO_PERSONAL`` payload and turn it into a draft.

    Args:
        payload: the marker's JSON object.

    Returns:
        The draft, with ``content`` stripped and ``type`` lower-cased (default ``"note"``).

    Raises:
        MarkerSchemaError: naming the first problem, e.g. ``unknown field "foo"``.
    """
    _check_fields(payload, _PERSONAL_FIELDS)
    return PersonalDraft(
        content=_content(payload),
        type=_choice(payload, "type", PERSONAL_TYPES, default="note"),
    )


def _check_fields(payload: Mapping[str, Any], allowed: tuple[str, ...]) -> None:
    if not isinstance(payload, Mapping):
        raise MarkerSchemaError("payload must be a JSON object")
    for name in payload:
        if name not in allowed:
            raise MarkerSchemaError(f"unknown field {_quote(name)}")


def _quote(name: str) -> str:
    """The field's name in quotes, or only its length if it could be anything but a typo."""
    if _PLAIN_NAME_RE.fullmatch(name) and find_secret(name) is None:
        return f'"{name}"'
    return f"of {len(name)} characters"


def _checked(name: str, value: str) -> str:
    """``value`` if it has no forbidden character (the rule of people's messages)."""
    problem = character_problem(value)
    if problem is not None:
        raise MarkerSchemaError(f'"{name}": {problem}')
    return value


def _content(payload: Mapping[str, Any]) -> str:
    value = payload.get("content")
    if value is None:
        raise MarkerSchemaError('missing "content"')
    if not isinstance(value, str):
        raise MarkerSchemaError('"content" must be a string')
    content = value.strip()
    if not content:
        raise MarkerSchemaError('"content" must not be blank')
    return content


def _choice(
    payload: Mapping[str, Any], name: str, choices: tuple[str, ...], *, default: str | None
) -> str:
    value = payload.get(name)
    if value is None:
        if default is None:
            raise MarkerSchemaError(f'missing "{name}"')
        return default
    choice = value.strip().lower() if isinstance(value, str) else None
    if choice not in choices:
        raise MarkerSchemaError(f'"{name}" must be one of {", ".join(choices)}')
    return choice


def _short_text(payload: Mapping[str, Any], name: str, limit: int) -> str | None:
    value = payload.get(name)
    if value is None:
        return None
    if not isinstance(value, str) or len(value.strip()) > limit:
        raise MarkerSchemaError(f'"{name}" must be a string of at most {limit} characters')
    return _checked(name, value.strip()) or None


def _task_id(payload: Mapping[str, Any]) -> str | None:
    value = payload.get("task_id")
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) < _TASK_ID_INT_BOUND:
        value = str(value)
    if not isinstance(value, str) or len(value.strip()) > MAX_TASK_ID_CHARS:
        raise MarkerSchemaError(
            f'"task_id" must be a string or an integer of at most {MAX_TASK_ID_CHARS} characters'
        )
    return _checked("task_id", value.strip()) or None


def _confidence(payload: Mapping[str, Any]) -> float:
    value = payload.get("confidence")
    if value is None:
        return DEFAULT_CONFIDENCE
    # NaN and the infinities fail the range test too.
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
        raise MarkerSchemaError('"confidence" must be a number between 0 and 1')
    return float(value)


def _tags(payload: Mapping[str, Any]) -> tuple[str, ...]:
    value = payload.get("tags")
    if value is None:
        return ()
    problem = (
        f'"tags" must be a list of strings (at most {MAX_TAGS}, '
        f"each at most {MAX_TAG_CHARS} characters)"
    )
    if not isinstance(value, list) or len(value) > MAX_TAGS:
        raise MarkerSchemaError(problem)
    tags: list[str] = []
    for tag in value:
        if not isinstance(tag, str) or len(tag.strip()) > MAX_TAG_CHARS:
            raise MarkerSchemaError(problem)
        tags.append(_checked("tags", tag.strip()))
    # Blank tags carry nothing and repeats add nothing: drop them, keep the order.
    return tuple(dict.fromkeys(tag for tag in tags if tag))
