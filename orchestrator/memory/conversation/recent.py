"""The newest messages of the groups in use, kept in memory between turns.

Each turn shows an agent up to ``ARENA_HISTORY_LIMIT`` recent messages of its group; reading
them from the database every time costs more than the rest of the turn. The daemon's pipeline
hands every message it stores to :meth:`RecentMessages.remember`. Before a cached group is used,
its newest stored ``seq`` is compared with the database's (one indexed lookup), and a group
someone else wrote to meanwhile is read again; a cache whose owner is the only writer of its
groups (``verify=False``: the daemon holding the groups' partition) makes that lookup at most
once every ``recheck_s`` per group (so rows written by ``arena import`` show up within that
time) and is told with :meth:`RecentMessages.forget` when it may have missed writes (on taking
a partition over). Thread-safe: turns gather their context in worker threads.
"""

from __future__ import annotations

import bisect
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

from orchestrator.memory.conversation.store import HistoryStore, StoredMessage

__all__ = ["RecentMessages"]


@dataclass(slots=True)
class _Group:
    messages: list[StoredMessage] = field(default_factory=list)  # oldest first, by seq
    checked_at: float = 0.0  # when the newest seq was last compared with the database's

    @property
    def newest(self) -> int | None:
        return self.messages[-1].seq if self.messages else None


class RecentMessages:
    """The ``limit`` newest messages of up to ``max_groups`` groups (the least recently used
    are let go)."""

    def __init__(
        self,
        store: HistoryStore,
        limit: int,
        *,
        max_groups: int = 1024,
        verify: bool = True,
        recheck_s: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if limit < 1 or max_groups < 1:
            raise ValueError("limit and max_groups must be at least 1")
        self.store = store
        self.limit = limit
        self.max_groups = max_groups
        self.verify = verify
        self.recheck_s = recheck_s
        self._clock = clock
        self._groups: OrderedDict[str, _Group] = OrderedDict()
        self._lock = threading.Lock()
        self.reads = 0  # how often a group had to be read from the database

    def remember(self, stored: StoredMessage) -> None:
        """Add a message just stored (kept only for a group already in memory)."""
        with self._lock:
            group = self._groups.get(stored.message.group)
            if group is None:
                return
            seqs = [m.seq for m in group.messages]
            at = bisect.bisect_left(seqs, stored.seq)
            if at < len(seqs) and seqs[at] == stored.seq:
                return
            group.messages.insert(at, stored)
            del group.messages[: -self.limit]

    def recent(self, group: str, limit: int) -> list[StoredMessage]:
        """The ``limit`` newest messages of ``group``, oldest first. Blocking."""
        if limit <= 0:
            return []
        if limit > self.limit:
            return self.store.recent(group, limit)
        with self._lock:
            cached = self._groups.get(group)
            if cached is not None and not self._due(cached):
                self._groups.move_to_end(group)
                return cached.messages[-limit:]
        checked_at = self._clock()
        newest = self.store.newest_seq(group)
        with self._lock:
            cached = self._groups.get(group)
            if cached is not None and cached.newest == newest:
                cached.checked_at = checked_at
                self._groups.move_to_end(group)
                return cached.messages[-limit:]
        messages = self.store.recent(group, self.limit)
        with self._lock:
            self.reads += 1
            self._groups[group] = _Group(messages=list(messages), checked_at=checked_at)
            self._groups.move_to_end(group)
            while len(self._groups) > self.max_groups:
                self._groups.popitem(last=False)
        return messages[-limit:]

    def _due(self, cached: _Group) -> bool:
        """Whether the group's newest seq must be compared with the database's now."""
        return self.verify or self._clock() - cached.checked_at >= self.recheck_s

    def forget(self, which: Callable[[str], bool]) -> int:
        """Let go of the groups ``which`` accepts (their history may have been written
        elsewhere); how many were let go."""
        with self._lock:
            gone = [group for group in self._groups if which(group)]
            for group in gone:
                del self._groups[group]
        return len(gone)
