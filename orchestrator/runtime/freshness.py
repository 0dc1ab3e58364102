"""Knowledge kept fresh: every few seconds (``knowledge_poll_s``) a daemon compares each
source's files with the index and indexes what changed, so an edited file's new text is what
the next turn finds, and a removed file's chunks are gone. A pass over large sources waits ten
times as long as it took before the next (a tenth of a core at most, whatever their size).

When embeddings are on, the chunks that have no vectors yet are embedded beside it, a few at a
time (:mod:`orchestrator.memory.knowledge.embedding`): while the daemon has messages in hand
each batch is followed by a pause as long as it took (at most half a core goes to it while
turns go on), and an idle daemon embeds batch after batch."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

from sqlalchemy.exc import SQLAlchemyError

from orchestrator.errors import OrchestratorError
from orchestrator.memory.knowledge.embedding import embed_pending, newest_chunk
from orchestrator.memory.knowledge.indexer import Indexer
from orchestrator.memory.knowledge.vectors import ChunkVectors

__all__ = ["PAUSE_FACTOR", "keep_embedded", "keep_fresh", "refresh"]

logger = logging.getLogger(__name__)

PAUSE_FACTOR = 10  # the pause after a pass, in multiples of the time it took


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
            started = time.monotonic()
            try:
                await asyncio.to_thread(refresh, indexer)
            except (OrchestratorError, SQLAlchemyError, OSError) as exc:
                logger.warning("could not check the knowledge sources: %s", exc)
            pause = max(poll_s, PAUSE_FACTOR * (time.monotonic() - started))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), pause)

    return asyncio.create_task(watch(), name="orchestrator.runtime.freshness.keep_fresh")


def keep_embedded(
    vectors: ChunkVectors,
    stop: asyncio.Event,
    poll_s: float,
    ours: Callable[[], Awaitable[bool]] | None = None,
    busy: Callable[[], bool] | None = None,
) -> asyncio.Task[None]:
    """A task that embeds the chunks without vectors until ``stop`` is set: batch after batch
    while some wait, else a look every ``poll_s`` seconds (at the newest chunk's id only, until
    it changes). After a batch it pauses as long as the batch took while ``busy`` says the
    daemon has messages in hand (always, without ``busy``), so that turns keep most of the
    machine; an idle daemon goes on at once. With ``ours``, only while it says the work is this
    daemon's (one daemon of several embeds)."""

    async def embed() -> None:
        settled = -1  # the newest chunk when none was left to embed: until it changes, none is
        while not stop.is_set():
            started = time.monotonic()
            done = 0
            try:
                newest = await asyncio.to_thread(newest_chunk, vectors.engine)
                if newest != settled and (ours is None or await ours()):
                    done = await asyncio.to_thread(embed_pending, vectors.engine, vectors)
                    settled = -1 if done else newest
            except (OrchestratorError, SQLAlchemyError, OSError) as exc:
                logger.warning("could not embed the knowledge chunks: %s", exc)
            pause = poll_s
            if done:
                pause = time.monotonic() - started if busy is None or busy() else 0.0
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), pause)

    return asyncio.create_task(embed(), name="orchestrator.runtime.freshness.keep_embedded")
