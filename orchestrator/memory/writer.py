"""The write path: an agent's markers → schema → gate → session memory or personal log.

Only markers parsed from an agent's own reply in its own turn come here; everything that
cannot be stored is reported with its reason, never raised.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, time
from typing import Any
from zoneinfo import ZoneInfo

from orchestrator.memory.gate import GateConfig, check
from orchestrator.memory.markers import Marker
from orchestrator.memory.personal import PersonalLog
from orchestrator.memory.records import Citation, NewMemory
from orchestrator.memory.schema import (
    MarkerSchemaError,
    PersonalDraft,
    validate_memory,
    validate_personal,
)
from orchestrator.memory.session import SessionMemory

__all__ = ["MemoryWriter", "Origin", "WriteReport"]

logger = logging.getLogger(__name__)

CHECKPOINT_TYPES = ("decision", "task")


@dataclass(frozen=True, slots=True, kw_only=True)
class Origin:
    """Where markers came from: the reply that carried them and the message it answered."""

    agent: str
    group: str
    reply_id: str
    trigger_id: str
    now: datetime


@dataclass(frozen=True, slots=True, kw_only=True)
class WriteReport:
    """What became of each marker (stored on the reply's metadata)."""

    saved: tuple[dict[str, Any], ...] = ()
    rejected: tuple[dict[str, Any], ...] = ()

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"saved": list(self.saved), "rejected": list(self.rejected)}


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
        saved: list[dict[str, Any]] = []
        rejected: list[dict[str, Any]] = []
        for marker in markers:
            try:
                if marker.kind == "memory":
                    result = self._memory(marker.payload, origin)
                else:
                    result = self._personal(marker.payload, origin)
            except MarkerSchemaError as exc:
                result = {"kind": marker.kind, "reason": "schema", "detail": exc.problem}
            (rejected if "reason" in result else saved).append(result)
        if rejected:
            logger.info(
                "reply %s: %d memory markers rejected (%s)",
                origin.reply_id,
                len(rejected),
                ", ".join(r["reason"] for r in rejected),
            )
        return WriteReport(saved=tuple(saved), rejected=tuple(rejected))

    def _start_of_day(self, now: datetime) -> datetime:
        local = now.astimezone(self.tz)
        return datetime.combine(local.date(), time(0), tzinfo=self.tz)

    def _memory(self, payload: dict[str, Any], origin: Origin) -> dict[str, Any]:
        draft = validate_memory(payload)
        written = self.session.count_written_since(
            origin.agent, origin.group, self._start_of_day(origin.now)
        )
        rejection = check(draft.content, draft.confidence, config=self.gate, written_today=written)
        if rejection is not None:
            return {"kind": "memory", "reason": rejection.reason, "detail": rejection.detail}
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
        return {
            "kind": "memory",
            "action": outcome.action,
            "id": outcome.record.id,
            "type": draft.type,
        }

    def _personal(self, payload: dict[str, Any], origin: Origin) -> dict[str, Any]:
        draft = validate_personal(payload)
        rejection = check(draft.content, 1.0, config=self.gate, written_today=0)
        if rejection is not None:
            return {"kind": "personal", "reason": rejection.reason, "detail": rejection.detail}
        path = self.personal.append(
            origin.agent, draft, source=f"{origin.group}/{origin.reply_id}", now=origin.now
        )
        return {"kind": "personal", "action": "appended", "file": path.name, "type": draft.type}
