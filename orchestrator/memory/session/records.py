"""The values session memory takes and returns: plain frozen dataclasses, no SQL."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from orchestrator.core.quick_init import quick_init
from orchestrator.errors import ValidationError
from orchestrator.memory.gate.rules import normalise
from orchestrator.memory.session import fts

__all__ = [
    "INDEXED_EXTRA",
    "Citation",
    "MemoryRecord",
    "NewMemory",
    "WriteOutcome",
    "meta_text",
    "normalise",
]

Scope = Literal["session", "personal", "global"]
Namespace = Literal["agent", "task", "device"]
WrittenBy = Literal["agent", "job", "import", "person"]
Action = Literal["added", "reinforced", "superseded"]

SCOPES: tuple[str, ...] = ("session", "personal", "global")
NAMESPACES: tuple[str, ...] = ("agent", "task", "device")
STATUSES: tuple[str, ...] = ("active", "superseded", "archived")
WRITERS: tuple[str, ...] = ("agent", "job", "import", "person")

INDEXED_EXTRA = ("speaker", "date", "context", "title")
"""Keys of ``extra`` whose text is searchable along with the content (as metadata)."""


def meta_text(type: str, key: str | None, tags: Sequence[str], extra: Mapping[str, Any]) -> str:
    """What is searchable about an entry besides its content: its type, key, tags and the
    ``extra`` values named in :data:`INDEXED_EXTRA`."""
    parts = [type, (key or "").replace("_", " "), " ".join(tags)]
    for name in INDEXED_EXTRA:
        value = extra.get(name)
        if isinstance(value, str):
            parts.append(value)
        elif isinstance(value, list | tuple):
            parts.extend(str(v) for v in value)
    return " ".join(p for p in parts if p)


def _check(name: str, value: str, allowed: Sequence[str]) -> None:
    if value not in allowed:
        raise ValidationError(name, f"{value!r} is not one of {', '.join(allowed)}")


@dataclass(frozen=True, slots=True, kw_only=True)
class Citation:
    """Where a memory came from: ``kind`` (e.g. "message"), ``ref`` (its id), ``locator``
    (a path to resolve it) and the ``scope`` it was said in."""

    kind: str
    ref: str
    locator: str = ""
    scope: str = ""

    def as_dict(self) -> dict[str, str]:
        """JSON-ready form."""
        return {"kind": self.kind, "ref": self.ref, "locator": self.locator, "scope": self.scope}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> Citation | None:
        """The citation stored as ``data``, if any."""
        if not data:
            return None
        return cls(
            kind=str(data.get("kind", "")),
            ref=str(data.get("ref", "")),
            locator=str(data.get("locator", "")),
            scope=str(data.get("scope", "")),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class NewMemory:
    """A memory to write. ``scope_id`` is the group id for "session", the agent id for
    "personal" and empty for "global"; ``now`` is when it is written (timezone-aware)."""

    scope: Scope
    scope_id: str
    type: str
    content: str
    now: datetime
    key: str | None = None
    confidence: float = 1.0
    tags: Sequence[str] = ()
    task_id: str | None = None
    agent: str = ""
    group_id: str | None = None
    source_message_id: str | None = None
    citation: Citation | None = None
    written_by: WrittenBy = "agent"
    namespace: Namespace = "agent"
    verified: bool = False
    extra: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _check("scope", self.scope, SCOPES)
        _check("namespace", self.namespace, NAMESPACES)
        _check("written_by", self.written_by, WRITERS)
        if (self.scope == "global") != (self.scope_id == ""):
            raise ValidationError("scope_id", "must be empty for global memory, and only then")
        if not self.content.strip():
            raise ValidationError("content", "is empty")
        if not 0.0 <= self.confidence <= 1.0:
            raise ValidationError("confidence", f"{self.confidence} is not within 0..1")
        if self.now.tzinfo is None:
            raise ValidationError("now", "must be timezone-aware")
        object.__setattr__(self, "tags", tuple(self.tags))

    def search_meta(self) -> str:
        """The searchable metadata, as indexed."""
        return fts.index_text(meta_text(self.type, self.key, self.tags, self.extra))


@quick_init
@dataclass(frozen=True, slots=True, kw_only=True)
class MemoryRecord:
    """A stored memory entry (times are timezone-aware UTC)."""

    id: int
    scope: str
    scope_id: str
    namespace: str
    type: str
    content: str
    key: str | None
    status: str
    confidence: float
    verified: bool
    tags: tuple[str, ...]
    task_id: str | None
    agent: str
    group_id: str | None
    source_message_id: str | None
    citation: Citation | None
    written_by: str
    count: int
    created_at: datetime
    updated_at: datetime
    last_seen_at: datetime
    last_used_at: datetime | None
    supersedes: int | None
    superseded_by: int | None
    extra: Mapping[str, Any]

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form (``arena memory export``)."""
        return {
            "id": self.id,
            "scope": self.scope,
            "scope_id": self.scope_id,
            "namespace": self.namespace,
            "type": self.type,
            "content": self.content,
            "key": self.key,
            "status": self.status,
            "confidence": self.confidence,
            "verified": self.verified,
            "tags": list(self.tags),
            "task_id": self.task_id,
            "agent": self.agent,
            "group_id": self.group_id,
            "source_message_id": self.source_message_id,
            "citation": self.citation.as_dict() if self.citation else None,
            "written_by": self.written_by,
            "count": self.count,
            "created_at": self.created_at.isoformat(),
            "updated_at": self.updated_at.isoformat(),
            "last_seen_at": self.last_seen_at.isoformat(),
            "last_used_at": self.last_used_at.isoformat() if self.last_used_at else None,
            "supersedes": self.supersedes,
            "superseded_by": self.superseded_by,
            "extra": dict(self.extra),
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class WriteOutcome:
    """What a write did: added ``record``, reinforced it (an equal entry was already active),
    or added it in place of ``previous`` (same key, new content)."""

    action: Action
    record: MemoryRecord
    previous: MemoryRecord | None = None
