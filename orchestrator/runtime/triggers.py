"""When a group's rolling summary is due: every N messages, or at once on a decision.

Counts live in Redis (:mod:`orchestrator.adapters.summary_counts`), so they survive restarts
and are shared by several daemons.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from orchestrator.adapters.redis_client import Connection
from orchestrator.adapters.summary_counts import SummaryCounts
from orchestrator.background.queue import (
    ENDED_STATUSES,
    enqueue_summary,
    pending_detail,
    summary_job_key,
)
from orchestrator.background.queue_now import SummaryEnqueuer
from orchestrator.core.batching import Coalescer
from orchestrator.errors import BusError
from orchestrator.settings import Settings

__all__ = ["SummaryTrigger", "summary_due"]

logger = logging.getLogger(__name__)

_SUMMARY_TAGS = (
    ("[decision]", "decision"),
    ("[requirement]", "requirement"),
    ("[task_assigned]", "task"),
)
# Saved memories of these types make a summary due at once, like the text tags do.
_MARKER_TRIGGERS = {"decision": "decision", "requirement": "requirement", "task": "task"}


def summary_due(count_since_last: int, text: str, every: int) -> str | None:
    """Whether a group's rolling summary is due after a message, and why.

    Args:
        count_since_last: messages in the group since its last summary, this one included.
        text: this message (or marker) text.
        every: summarise every this many messages; 0 or less never by count.

    Returns:
        ``"decision"``, ``"requirement"`` or ``"task"`` when the text carries ``[decision]``,
        ``[requirement]`` or ``[task_assigned]``; else ``"messages"`` when ``count_since_last``
        reached ``every``; else None.
    """
    lowered = text.lower()
    for tag, trigger in _SUMMARY_TAGS:
        if tag in lowered:
            return trigger
    if every > 0 and count_since_last >= every:
        return "messages"
    return None


class SummaryTrigger:
    """Counts a group's messages and enqueues its summary job when one is due."""

    def __init__(self, counts: SummaryCounts, queue: Connection, settings: Settings) -> None:
        """Count in ``counts``; enqueue through ``queue`` (a blocking connection, closed by
        :meth:`close`)."""
        self._store = counts
        self._settings = settings
        self._sync = queue
        self._enqueuer = SummaryEnqueuer(counts.redis, queue, settings)
        # Many groups' counts go to Redis in one round trip.
        self._counts: Coalescer[tuple[str, int], int] = Coalescer(counts.add, name="summary-counts")

    def close(self) -> None:
        """Close the connection used for enqueueing."""
        self._sync.close()

    async def after_message(
        self, group: str, stored: int, texts: Sequence[str], marker_types: Sequence[str]
    ) -> str | None:
        """Count ``stored`` new messages of ``group``; enqueue its summary if due.

        Returns:
            The trigger that made it due, or None. Failures are logged, never raised: a
            summary is never worth losing a message over.
        """
        try:
            count = await self._counts((group, stored))
            trigger = summary_due(count, "\n".join(texts), self._settings.summary_every_messages)
            trigger = trigger or next(
                (_MARKER_TRIGGERS[t] for t in marker_types if t in _MARKER_TRIGGERS), None
            )
            if trigger is None:
                return None
            # A summary queued or running reads the group's messages when it runs: asked
            # here, without a thread's round trips through RQ (they cost more than a turn).
            # A free job id is taken on the loop too; an ended job is replaced by RQ's own
            # enqueue, in a thread, under its guard.
            key = summary_job_key(group)
            status = await self._store.status_resetting(key, group, ENDED_STATUSES)
            detail = pending_detail(status)
            if detail is not None:  # the count was started again in the same round trip
                logger.info("group %s: summary due (%s): %s", group, trigger, detail)
                return trigger
            if status is None and await self._enqueuer.enqueue(group, trigger):
                detail = "enqueued"  # and the count started again in the same round trip
            else:
                result = await asyncio.to_thread(
                    enqueue_summary, self._sync, group, None, trigger, settings=self._settings
                )
                detail = result.detail
                await self._store.reset(group)
            logger.info("group %s: summary due (%s): %s", group, trigger, detail)
            return trigger
        except BusError as exc:
            logger.warning("group %s: could not enqueue its summary: %s", group, exc.problem)
            return None
        except OSError as exc:
            logger.warning("group %s: could not enqueue its summary: %s", group, exc)
            return None
