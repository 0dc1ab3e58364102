"""The idle check: which groups have just gone quiet, once per quiet period, and which of the
team's agents spoke in them since they were last quiet. Those agents get a heartbeat with
trigger ``idle``; :mod:`orchestrator.background.schedule` runs the check every minute."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol

from orchestrator.core.models import MessageKind
from orchestrator.memory.conversation.store import GroupInfo, StoredMessage

__all__ = ["History", "IdleGroup", "IdleWatch"]

MAX_SPEAKER_SCAN = 500  # messages read back to find who spoke before a group went quiet


class History(Protocol):
    """What the idle check reads from the message history (``HistoryStore`` fits)."""

    def groups(self) -> list[GroupInfo]:
        """Every group with its message count and last activity."""
        ...

    def recent(self, group: str, limit: int) -> list[StoredMessage]:
        """The ``limit`` newest messages of a group, oldest first."""
        ...


@dataclass(frozen=True, slots=True, kw_only=True)
class IdleGroup:
    """A group that has just gone quiet, and the agents that spoke in it since it last did."""

    group: str
    last_at: datetime
    agents: tuple[str, ...]


class IdleWatch:
    """Finds groups that have gone quiet, once per quiet period (blocking database reads).

    The first check only takes note: groups already quiet then are not reported, since the
    catch-up covers what happened before the daemon started.
    """

    def __init__(self, history: History, agents: Collection[str], idle: timedelta) -> None:
        self.history = history
        self.agents = frozenset(agents)
        self.idle = idle
        self._seen: dict[str, int] | None = None  # group → message count when it went quiet

    def check(self, now: datetime) -> list[IdleGroup]:
        """The groups quiet for ``idle`` at ``now`` with messages since they were last quiet."""
        first = self._seen is None
        seen = self._seen if self._seen is not None else {}
        self._seen = seen
        found: list[IdleGroup] = []
        for info in self.history.groups():
            if info.last_at is None or now - info.last_at < self.idle:
                continue
            new = info.messages - seen.get(info.group, 0)
            if new <= 0:
                continue
            seen[info.group] = info.messages
            if first:
                continue
            recent = self.history.recent(info.group, min(new, MAX_SPEAKER_SCAN))
            spoke = {
                m.message.sender
                for m in recent
                if m.message.kind is MessageKind.AGENT and m.message.sender in self.agents
            }
            found.append(
                IdleGroup(group=info.group, last_at=info.last_at, agents=tuple(sorted(spoke)))
            )
        return found
