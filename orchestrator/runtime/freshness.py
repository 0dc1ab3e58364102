"""Knowledge kept fresh: every few seconds (``knowledge_poll_s``) a daemon compares each
source's files with the index and indexes what changed, so an edited file's new text is what
the next turn finds, and a removed file's chunks are gone."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from datetime import UTC, datetime

from sqlalchemy.exc import SQLAlchemyError

from orchestrator.errors import OrchestratorError
from orchestrator.memory.knowledge.indexer import Indexer

__all__ = ["keep_fresh", "refresh"]

logger = logging.getLogger(__name__)


def refresh(indexer: Indexer) -> int:
    """One pass over every source; how many sources' indexes changed. Blocking."""
    touched = 0
    for source in indexer.store.sources():
        report = indexer.sync(source, now=datetime.now(UTC))
        if report.touched:
            touched += 1
            logger.info(
                "knowledge %s: %d new, %d changed, %d removed files (%d chunks written)",
                source.name,
                report.added,
                report.changed,
                report.removed,
                report.chunks_written,
            )
    return touched


def keep_fresh(indexer: Indexer, stop: asyncio.Event, poll_s: float) -> asyncio.Task[None]:
    """A task that runs :func:`refresh` every ``poll_s`` seconds until ``stop`` is set."""

    async def watch() -> None:
        while not stop.is_set():
            try:
                await asyncio.to_thread(refresh, indexer)
            except (OrchestratorError, SQLAlchemyError, OSError) as exc:
                logger.warning("could not check the knowledge sources: %s", exc)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), poll_s)

    return asyncio.create_task(watch(), name="orchestrator.runtime.freshness.keep_fresh")
