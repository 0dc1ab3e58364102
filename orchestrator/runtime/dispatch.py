"""Per-group ordering: one group's messages run one at a time, different groups at once."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

__all__ = ["GroupDispatcher"]

logger = logging.getLogger(__name__)

T = TypeVar("T")


class GroupDispatcher(Generic[T]):
    """Runs ``handler(item)`` for submitted items: in order within a group, concurrently across
    groups, with at most ``max_inflight`` items accepted but not yet finished."""

    def __init__(self, handler: Callable[[T], Awaitable[None]], max_inflight: int) -> None:
        self._handler = handler
        self._queues: dict[str, deque[T]] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._slots = asyncio.Semaphore(max_inflight)
        self._inflight = 0
        self._idle = asyncio.Event()
        self._idle.set()

    @property
    def inflight(self) -> int:
        """Items accepted and not yet finished."""
        return self._inflight

    @property
    def active_groups(self) -> int:
        """Groups with work in hand."""
        return len(self._tasks)

    async def submit(self, group: str, item: T) -> None:
        """Queue ``item`` behind the group's earlier items; waits while too much is in hand."""
        await self._slots.acquire()
        self._inflight += 1
        self._idle.clear()
        self._queues.setdefault(group, deque()).append(item)
        if group not in self._tasks:
            self._tasks[group] = asyncio.create_task(
                self._drain(group), name=f"orchestrator.group.{group}"
            )

    async def _drain(self, group: str) -> None:
        queue = self._queues[group]
        try:
            while queue:
                item = queue[0]
                try:
                    await self._handler(item)
                except Exception:
                    logger.exception("group %s: handler failed", group)
                finally:
                    queue.popleft()
                    self._inflight -= 1
                    self._slots.release()
        finally:
            # No await between the last check of ``queue`` and here, so nothing is stranded.
            del self._tasks[group]
            if not queue:
                del self._queues[group]
            if not self._tasks:
                self._idle.set()

    async def drain(self, timeout_s: float) -> bool:
        """Wait until everything submitted has finished, at most ``timeout_s``.

        Returns:
            True when all work finished, False when the time ran out.
        """
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s):
                await self._idle.wait()
                return True
        return False

    async def cancel(self) -> None:
        """Cancel the work in hand (it stays unacknowledged and is handled after a restart)."""
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
