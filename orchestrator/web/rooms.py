"""What the console reads from the conversation history: the groups, a room's messages a page
at a time (by ``seq``, newest page first) and one message by id, each as a
:class:`~orchestrator.web.views.Msg` with why it was written.

Blocking (SQL): call from a thread.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from orchestrator.core.models import AgentSpec
from orchestrator.core.wire import validate_group
from orchestrator.errors import ValidationError
from orchestrator.memory.conversation.meta import ReplyMeta
from orchestrator.memory.conversation.store import HistoryStore, StoredMessage
from orchestrator.web.views import Msg, from_stored

__all__ = ["Page", "Rooms"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Page:
    """A room's messages, oldest first, and the cursor of the page before (None: none)."""

    group: str
    messages: tuple[Msg, ...]
    before: int | None

    def as_dict(self) -> dict[str, Any]:
        """The API's JSON form."""
        return {
            "group": self.group,
            "messages": [m.as_dict() for m in self.messages],
            "before": self.before,
        }


class Rooms:
    """Reads the ``messages`` table for the console."""

    def __init__(
        self, history: HistoryStore, agents: Sequence[AgentSpec], *, hop_limit: int
    ) -> None:
        self.history = history
        self.agents = tuple(agents)
        self.hop_limit = hop_limit

    def groups(self) -> list[dict[str, Any]]:
        """Every group with its message count, last activity and last sender, newest first."""
        found = sorted(
            self.history.groups(),
            key=lambda g: (g.last_at is not None, g.last_at, g.group),
            reverse=True,
        )
        result = []
        for info in found:
            last = self.history.recent(info.group, 1)
            result.append(
                {
                    "group": info.group,
                    "messages": info.messages,
                    "last_at": info.last_at.isoformat() if info.last_at else None,
                    "last_sender": last[0].message.sender if last else None,
                }
            )
        return result

    def page(self, group: str, *, before: int | None, limit: int) -> Page | None:
        """Up to ``limit`` messages of ``group`` before ``seq`` ``before`` (None: no such
        group)."""
        try:
            validate_group(group)
        except ValidationError:
            return None
        rows = self.history.recent(group, limit + 1, before_seq=before)
        if not rows and self.history.newest_seq(group) is None:
            return None
        older = len(rows) > limit
        rows = rows[1:] if older else rows
        return Page(
            group=group,
            messages=tuple(self._views(rows)),
            before=rows[0].seq if older else None,
        )

    def message(self, message_id: str) -> Msg | None:
        """One stored message by id, with why it was written (None: not stored yet)."""
        stored = self.history.get(message_id)
        return self._views([stored])[0] if stored is not None else None

    def _views(self, rows: Sequence[StoredMessage]) -> list[Msg]:
        known = {r.message.id: r for r in rows}
        views = []
        for stored in rows:
            trigger_id = ReplyMeta.from_json(stored.meta).trigger
            trigger = None
            if trigger_id is not None:
                trigger = known.get(trigger_id) or self.history.get(trigger_id)
                if trigger is not None:
                    known[trigger_id] = trigger
            views.append(
                from_stored(stored, trigger=trigger, agents=self.agents, hop_limit=self.hop_limit)
            )
        return views
