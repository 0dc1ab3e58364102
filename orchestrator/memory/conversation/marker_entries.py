"""The entries a reply keeps about its markers, in the lists of
:class:`orchestrator.memory.conversation.meta.MarkerMeta`: what memory saved (:class:`Saved`)
and refused (:class:`Rejected`), as the write path (``memory.writer``) returns them, each
stored marker's payload (:class:`StoredMarker`) and what is known of an unreadable marker
(:class:`UnreadableMarker`).

``as_json`` gives an entry's stored form, keys in their stored order. ``from_json`` reads a
stored one leniently: a row written by an older version (no ``length`` or ``sha256``) or by
hand may lack keys or hold values of the wrong type; those read as empty (a ``kind`` that is
not a marker kind as None), and keys no version wrote are not kept.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeGuard

from orchestrator.core.markers import MarkerKind

__all__ = ["Rejected", "Saved", "StoredMarker", "UnreadableMarker"]

_KINDS: dict[str, MarkerKind] = {"memory": "memory", "personal": "personal"}


@dataclass(frozen=True, slots=True, kw_only=True)
class Saved:
    """A marker stored: a session memory ``added``, ``superseded`` (a new entry in place of
    an old one) or ``reinforced`` (an equal entry confirmed: ``id`` is that entry's), or a
    personal log line ``appended`` to ``file``. ``kind`` is None only when read from a row
    that does not say."""

    kind: MarkerKind | None
    action: str
    type: str
    id: int | None = None
    file: str | None = None

    @property
    def reinforced(self) -> bool:
        """It confirmed an entry already stored rather than adding one."""
        return self.action == "reinforced"

    def as_json(self) -> dict[str, Any]:
        """The stored form (a reply's ``memory.saved`` entry)."""
        where = {"id": self.id} if self.kind == "memory" else {"file": self.file}
        return {"kind": self.kind, "action": self.action, **where, "type": self.type}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Saved:
        """Read a stored one, leniently."""
        identifier = data.get("id")
        file = data.get("file")
        return cls(
            kind=_kind(data),
            action=_text(data, "action"),
            type=_text(data, "type"),
            id=identifier if _is_int(identifier) else None,
            file=file if isinstance(file, str) else None,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Rejected:
    """A marker refused, and why; never its content (it may be a secret, or megabytes), only
    its text's length and :func:`orchestrator.core.markers.fingerprint`."""

    kind: MarkerKind | None
    reason: str
    detail: str
    length: int = 0
    sha256: str = ""

    def as_json(self) -> dict[str, Any]:
        """The stored form (a reply's ``memory.rejected`` entry)."""
        return {
            "kind": self.kind,
            "reason": self.reason,
            "detail": self.detail,
            "length": self.length,
            "sha256": self.sha256,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Rejected:
        """Read a stored one, leniently."""
        return cls(
            kind=_kind(data),
            reason=_text(data, "reason"),
            detail=_text(data, "detail"),
            length=_count(data, "length"),
            sha256=_text(data, "sha256"),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class StoredMarker:
    """A marker memory stored, with its payload: the agent's own JSON, as it wrote it (the
    summary reads its ``type`` and ``content``, the console its ``content``)."""

    kind: MarkerKind | None
    payload: Mapping[str, Any] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        """The stored form (a reply's ``markers`` entry)."""
        return {"kind": self.kind, "payload": dict(self.payload)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> StoredMarker:
        """Read a stored one, leniently (a payload that is not an object reads as empty)."""
        payload = data.get("payload")
        return cls(kind=_kind(data), payload=payload if isinstance(payload, dict) else {})


@dataclass(frozen=True, slots=True, kw_only=True)
class UnreadableMarker:
    """A marker that could not be read: why, and its text's length and the first 12 hex
    digits of its hash (:func:`orchestrator.core.markers.fingerprint`), never its text."""

    kind: MarkerKind | None
    reason: str
    length: int = 0
    sha256: str = ""

    def as_json(self) -> dict[str, Any]:
        """The stored form (a reply's ``invalid_markers`` entry)."""
        return {
            "kind": self.kind,
            "reason": self.reason,
            "length": self.length,
            "sha256": self.sha256,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> UnreadableMarker:
        """Read a stored one, leniently."""
        return cls(
            kind=_kind(data),
            reason=_text(data, "reason"),
            length=_count(data, "length"),
            sha256=_text(data, "sha256"),
        )


def _kind(data: Mapping[str, Any]) -> MarkerKind | None:
    kind = data.get("kind")
    return _KINDS.get(kind) if isinstance(kind, str) else None


def _text(data: Mapping[str, Any], key: str) -> str:
    value = data.get(key)
    return value if isinstance(value, str) else ""


def _count(data: Mapping[str, Any], key: str) -> int:
    value = data.get(key)
    return value if _is_int(value) else 0


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)
