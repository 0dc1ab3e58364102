"""The write path: an agent's markers → schema → gate → session memory or personal log.

Only markers parsed from an agent's own reply in its own turn come here; everything that
cannot be stored is reported with its reason, never raised.

What a reply keeps of its markers (:func:`marker_meta`) never holds anything the gate refused:
a marker that could not be read or was refused is kept as its kind, reason, length and a short
hash of its text (:func:`orchestrator.core.markers.fingerprint`), and only the payloads of
stored markers are kept. Each list keeps at most :data:`MAX_ENTRIES` entries and all of them
together at most :data:`MAX_META_BYTES` bytes of JSON; ``truncated`` counts what was left out.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime, time
from typing import Any
from zoneinfo import ZoneInfo

from orchestrator.core.markers import InvalidMarker, Marker, MarkerKind
from orchestrator.memory.conversation.meta import MarkerMeta
from orchestrator.memory.gate.rules import GateConfig, check
from orchestrator.memory.personal import PersonalLog
from orchestrator.memory.schema import (
    MarkerSchemaError,
    PersonalDraft,
    validate_memory,
    validate_personal,
)
from orchestrator.memory.session.records import Citation, NewMemory
from orchestrator.memory.session.store import SessionMemory

__all__ = [
    "MAX_ENTRIES",
    "MAX_META_BYTES",
    "MemoryWriter",
    "Origin",
    "Rejected",
    "Saved",
    "WriteReport",
    "WriteResult",
    "marker_meta",
]

logger = logging.getLogger(__name__)

CHECKPOINT_TYPES = ("decision", "task")
MAX_ENTRIES = 20
"""At most this many entries of each list a reply keeps about its markers."""
MAX_META_BYTES = 16 * 1024
"""At most this many bytes of JSON for all of those lists together."""
# The order in which the lists get the room: what happened first, the payloads last.
_LISTS = ("saved", "rejected", "invalid_markers", "markers")


@dataclass(frozen=True, slots=True, kw_only=True)
class Origin:
    """Where markers came from: the reply that carried them and the message it answered."""

    agent: str
    group: str
    reply_id: str
    trigger_id: str
    now: datetime


@dataclass(frozen=True, slots=True, kw_only=True)
class Saved:
    """A marker stored: a session memory ``added``, ``superseded`` (a new entry in place of
    an old one) or ``reinforced`` (an equal entry confirmed: ``id`` is that entry's), or a
    personal log line ``appended`` to ``file``."""

    kind: MarkerKind
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


@dataclass(frozen=True, slots=True, kw_only=True)
class Rejected:
    """A marker refused, and why; never its content (it may be a secret, or megabytes), only
    its text's length and :func:`orchestrator.core.markers.fingerprint`."""

    kind: MarkerKind
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


WriteResult = Saved | Rejected
"""What became of one marker."""


@dataclass(frozen=True, slots=True, kw_only=True)
class WriteReport:
    """What became of each marker: ``saved`` and ``rejected`` entries, and the markers stored.

    Unbounded: what a reply keeps of it is :func:`marker_meta`.
    """

    saved: tuple[Saved, ...] = ()
    rejected: tuple[Rejected, ...] = ()
    stored: tuple[Marker, ...] = ()


def marker_meta(invalid: Sequence[InvalidMarker], report: WriteReport | None) -> MarkerMeta:
    """What a reply keeps of its markers, within :data:`MAX_ENTRIES` and :data:`MAX_META_BYTES`.

    Args:
        invalid: the markers that could not be read.
        report: what the writer did with the others; ``None`` if nothing was written (no
            markers, or no memory), in which case no payload is kept.

    Returns:
        ``markers`` (kind and payload of each stored marker), ``invalid_markers`` (kind, reason,
        length and ``sha256``, the hash's first 12 hex digits), with a report its ``saved`` and
        ``rejected`` entries, and ``truncated`` (entries left out, per list).
    """
    lists: dict[str, list[dict[str, Any]]] = {
        "saved": [s.as_json() for s in report.saved] if report else [],
        "rejected": [r.as_json() for r in report.rejected] if report else [],
        "invalid_markers": [
            {"kind": m.kind, "reason": m.reason, "length": m.length, "sha256": m.digest}
            for m in invalid
        ],
        "markers": [{"kind": m.kind, "payload": m.payload} for m in report.stored]
        if report
        else [],
    }
    kept, truncated = _bounded(lists)
    return MarkerMeta(
        markers=tuple(kept["markers"]),
        invalid_markers=tuple(kept["invalid_markers"]),
        saved=tuple(kept["saved"]) if report is not None else None,
        rejected=tuple(kept["rejected"]),
        truncated=truncated,
    )


def _bounded(
    lists: dict[str, list[dict[str, Any]]],
) -> tuple[dict[str, list[dict[str, Any]]], dict[str, int]]:
    """Keep the lists' first entries while they fit; count the rest per list."""
    room = MAX_META_BYTES
    kept: dict[str, list[dict[str, Any]]] = {}
    truncated: dict[str, int] = {}
    for name in _LISTS:
        kept[name] = []
        for entry in lists[name]:
            size = len(json.dumps(entry, ensure_ascii=False).encode("utf-8")) + 2
            if len(kept[name]) >= MAX_ENTRIES or size > room:
                break
            kept[name].append(entry)
            room -= size
        if len(kept[name]) < len(lists[name]):
            truncated[name] = len(lists[name]) - len(kept[name])
    return kept, truncated


class MemoryWriter:
    """Validates markers and stores what passes. Blocking: call from a thread."""

    def __init__(
        self, session: SessionMemory, personal: PersonalLog, gate: GateConfig, tz: ZoneInfo
    ) -> None:
        self.session = session
        self.personal = personal
        self.gate = gate
        self.tz = tz

    def apply(self, markers: Sequence[Marker], origin: Origin) -> WriteReport:
        """Store every acceptable marker; report the rest with their reasons."""
        saved: list[Saved] = []
        rejected: list[Rejected] = []
        stored: list[Marker] = []
        for marker in markers:
            result: WriteResult
            try:
                if marker.kind == "memory":
                    result = self._memory(marker.payload, origin)
                else:
                    result = self._personal(marker.payload, origin)
            except MarkerSchemaError as exc:
                result = Rejected(kind=marker.kind, reason="schema", detail=exc.problem)
            if isinstance(result, Rejected):
                # Never the content: what was refused may be a secret, or megabytes.
                rejected.append(replace(result, length=marker.length, sha256=marker.digest))
            else:
                saved.append(result)
                stored.append(marker)
        if rejected:
            logger.info(
                "reply %s: %d memory markers rejected (%s)",
                origin.reply_id,
                len(rejected),
                ", ".join(r.reason for r in rejected),
            )
        return WriteReport(saved=tuple(saved), rejected=tuple(rejected), stored=tuple(stored))

    def _start_of_day(self, now: datetime) -> datetime:
        local = now.astimezone(self.tz)
        return datetime.combine(local.date(), time(0), tzinfo=self.tz)

    def _memory(self, payload: dict[str, Any], origin: Origin) -> WriteResult:
        draft = validate_memory(payload)
        written = self.session.count_written_since(
            origin.agent, origin.group, self._start_of_day(origin.now)
        )
        rejection = check(draft.content, draft.confidence, config=self.gate, written_today=written)
        if rejection is not None:
            return Rejected(kind="memory", reason=rejection.reason, detail=rejection.detail)
        outcome = self.session.write(
            NewMemory(
                scope="session",
                scope_id=origin.group,
                type=draft.type,
                content=draft.content,
                key=draft.key,
                confidence=draft.confidence,
                tags=draft.tags,
                task_id=draft.task_id,
                agent=origin.agent,
                group_id=origin.group,
                source_message_id=origin.reply_id,
                citation=Citation(
                    kind="message",
                    ref=origin.reply_id,
                    locator=f"groups/{origin.group}/messages/{origin.reply_id}",
                    scope="session",
                ),
                written_by="agent",
                extra={"trigger": origin.trigger_id},
                now=origin.now,
            )
        )
        if draft.type in CHECKPOINT_TYPES and outcome.action != "reinforced":
            # Checkpoint: the deciding agent's evening heartbeat sees its decisions and tasks.
            self.personal.append(
                origin.agent,
                PersonalDraft(content=f"{draft.type}: {draft.content}", type="note"),
                source=f"{origin.group}/{origin.reply_id}",
                now=origin.now,
            )
        return Saved(kind="memory", action=outcome.action, id=outcome.record.id, type=draft.type)

    def _personal(self, payload: dict[str, Any], origin: Origin) -> WriteResult:
        draft = validate_personal(payload)
        rejection = check(draft.content, 1.0, config=self.gate, written_today=0)
        if rejection is not None:
            return Rejected(kind="personal", reason=rejection.reason, detail=rejection.detail)
        path = self.personal.append(
            origin.agent, draft, source=f"{origin.group}/{origin.reply_id}", now=origin.now
        )
        return Saved(kind="personal", action="appended", file=path.name, type=draft.type)
