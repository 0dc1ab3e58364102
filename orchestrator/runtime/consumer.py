"""The consumer: reads the partitions this daemon holds and hands each entry to the pipeline in
its group's order; and, while this daemon holds the router lease, moves inbound entries to
their partitions.

When a partition is taken over, its unfinished entries (left by a daemon that died, or by
this one before a restart) are claimed first. Each entry is validated (bad ones go to the
dead-letter stream), handled in its group's order, and acknowledged only when its replies are
stored and published; acknowledged entries are removed from the stream.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from typing import Protocol

from orchestrator.adapters.bus import Bus, DeadLetter, Entry
from orchestrator.adapters.metrics import FailureReason
from orchestrator.core.coding import run_ended
from orchestrator.core.models import ChatMessage
from orchestrator.core.quick_init import quick_init
from orchestrator.core.wire import (
    PARTITIONS,
    agent_names,
    decode_fields,
    parse_inbound,
    partition_of,
    partition_stream,
)
from orchestrator.errors import BusError, ValidationError
from orchestrator.runtime.coordinator import Coordinator
from orchestrator.runtime.dispatch import GroupDispatcher
from orchestrator.runtime.pipeline import Pipeline
from orchestrator.settings import Settings

__all__ = ["Consumer", "FailureMetrics"]

logger = logging.getLogger(__name__)

READ_BLOCK_MS = 500
READ_COUNT = 200
ROUTE_COUNT = 500
CLAIM_EVERY_S = 15.0


@quick_init
@dataclass(frozen=True, slots=True)
class _Work:
    entry: Entry
    partition: int
    message: ChatMessage | None  # a person's message, or
    run: str | None = None  # the id of a Claude Code run that ended


class FailureMetrics(Protocol):
    """Where messages that could not be handled are counted (``GET /metrics``); never raises."""

    async def message_failed(self, reason: FailureReason, *, dead_lettered: bool) -> None:
        """Count a message whose handling raised."""
        ...

    async def rejected(self) -> None:
        """Count an inbound entry rejected as invalid."""
        ...


def _in_partition(partition: int, group: str) -> bool:
    return partition_of(group) == partition


class Consumer:
    """Reads inbound entries and hands each to the pipeline in its group's order."""

    def __init__(
        self,
        bus: Bus,
        pipeline: Pipeline,
        settings: Settings,
        *,
        metrics: FailureMetrics | None = None,
    ) -> None:
        self.bus = bus
        self.pipeline = pipeline
        self.settings = settings
        self.metrics = metrics
        # No person may post under an agent's name: such entries are rejected like bad ones.
        self.agents = agent_names(pipeline.team.agents)
        self.dispatcher: GroupDispatcher[_Work] = GroupDispatcher(
            self._handle, settings.max_inflight
        )
        self.handled = 0
        self._stop = asyncio.Event()
        self._coordinator: Coordinator  # set by run()
        self._in_hand: set[str] = set()
        self._per_partition: Counter[int] = Counter()
        self._streams = {partition_stream(p): p for p in range(PARTITIONS)}
        # Look for abandoned messages about twice per idle limit (at most every 15 s).
        self._claim_every_s = min(CLAIM_EVERY_S, max(0.5, settings.claim_idle_ms / 2000))

    def idle(self, partition: int) -> bool:
        """Whether no entry of ``partition`` is in hand (it may be given to another daemon)."""
        return self._per_partition[partition] == 0

    async def run(self, stop: asyncio.Event, coordinator: Coordinator) -> None:
        """Consume until ``stop`` is set, then finish the work in hand."""
        self._stop, self._coordinator = stop, coordinator
        router = asyncio.create_task(
            self._route(stop, coordinator), name="orchestrator.runtime.consumer.route"
        )
        try:
            await self._consume(stop, coordinator)
        finally:
            await router
        finished = await self.dispatcher.drain(self.settings.shutdown_timeout_s)
        if not finished:
            logger.warning(
                "stopping with %d messages unfinished; they are handled after a restart",
                self.dispatcher.inflight,
            )
            await self.dispatcher.cancel()

    async def _consume(self, stop: asyncio.Event, coordinator: Coordinator) -> None:
        last_claim = time.monotonic()
        backoff = 0.5
        while not stop.is_set():
            try:
                entries: list[Entry] = []
                for partition in coordinator.fresh():
                    # Another daemon may have answered its groups since this one last did.
                    self.pipeline.forget(partial(_in_partition, partition))
                    entries += await self._resume(partition)
                    coordinator.resumed(partition)
                readable = sorted(coordinator.readable)
                if not readable:
                    await asyncio.sleep(READ_BLOCK_MS / 1000)
                    continue
                streams = [partition_stream(p) for p in readable]
                entries += await self.bus.read_new(streams, READ_COUNT, READ_BLOCK_MS)
                if time.monotonic() - last_claim > self._claim_every_s:
                    for stream in streams:
                        entries += await self.bus.claim(stream, self.settings.claim_idle_ms)
                    last_claim = time.monotonic()
            except BusError as exc:
                logger.warning("redis read failed (%s); retrying in %.1fs", exc.problem, backoff)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 10.0)
                continue
            backoff = 0.5
            for entry in entries:
                await self._submit(entry, coordinator)

    async def _resume(self, partition: int) -> list[Entry]:
        """Claim what a partition's previous owner (or this daemon before a restart) left."""
        unfinished = await self.bus.claim(partition_stream(partition), 0)
        if unfinished:
            logger.info(
                "resuming %d unfinished messages (partition %d)", len(unfinished), partition
            )
        return unfinished

    async def _route(self, stop: asyncio.Event, coordinator: Coordinator) -> None:
        claim = True  # on becoming the router, and after a failed step: finish what was read
        while not stop.is_set():
            if not coordinator.is_router:
                claim = True
                await asyncio.sleep(READ_BLOCK_MS / 1000)
                continue
            try:
                await self.bus.route(ROUTE_COUNT, READ_BLOCK_MS, claim=claim)
                claim = False
            except BusError as exc:
                logger.warning("routing failed (%s); retrying", exc.problem)
                claim = True
                await asyncio.sleep(1.0)

    async def _submit(self, entry: Entry, coordinator: Coordinator) -> None:
        partition = self._streams[entry.stream]
        if entry.id in self._in_hand:
            return  # reclaimed during a slow model call
        if not coordinator.takes(partition):
            # Given back (its next owner claims the entry), or not trusted for a moment: then
            # this entry and the later ones of its partition are claimed again, in order.
            coordinator.skipped(partition)
            return
        fields = dict(entry.fields)
        message_id = fields.pop(b"id", entry.id.encode()).decode("utf-8", errors="replace")
        try:
            if ended := run_ended(decode_fields(fields)):
                group, run = ended
                self._in_hand.add(entry.id)
                self._per_partition[partition] += 1
                await self.dispatcher.submit(group, _Work(entry, partition, None, run))
                return
            message = parse_inbound(
                message_id,
                fields,
                self.settings.max_message_bytes,
                datetime.now(UTC),
                agents=self.agents,
            )
        except ValidationError as exc:
            logger.warning("message %s rejected: %s", message_id, exc)
            await self.bus.dead_letter(
                DeadLetter(entry_id=message_id, reason=str(exc), fields=fields)
            )
            await self.bus.ack(entry.stream, entry.id)
            if self.metrics is not None:
                await self.metrics.rejected()
            return
        self._in_hand.add(entry.id)
        self._per_partition[partition] += 1
        await self.dispatcher.submit(message.group, _Work(entry, partition, message))

    async def _handle(self, work: _Work) -> None:
        backoff = 0.5
        try:
            while True:
                try:
                    await self._handle_once(work)
                    return
                except BusError as exc:
                    # Every step is idempotent: handling it again finishes it without a second
                    # reply. Trying again here holds the group's later messages back, so the
                    # group's order is kept; when stopping, or when another daemon has taken
                    # the partition, it stays unacknowledged and is resumed from Redis.
                    what = work.message.id if work.message is not None else f"run {work.run}"
                    if self._stop.is_set() or not self._coordinator.holds(work.partition):
                        logger.warning(
                            "message %s interrupted (%s); it will be resumed", what, exc.problem
                        )
                        return
                    logger.warning(
                        "message %s interrupted (%s); trying again in %.1fs",
                        what,
                        exc.problem,
                        backoff,
                    )
                    await asyncio.sleep(backoff)
                    backoff = min(backoff * 2, 10.0)
        finally:
            self._in_hand.discard(work.entry.id)
            self._per_partition[work.partition] -= 1

    async def _handle_once(self, work: _Work) -> None:
        try:
            if work.message is None:
                await self.pipeline.finish_run(work.run or "")
            else:
                await self.pipeline.handle(work.message)
        except BusError:
            raise
        except Exception as exc:
            if work.message is None:  # the run and its result stay in the database
                logger.exception("run %s: its reply failed", work.run)
            else:
                logger.exception("message %s failed", work.message.id)
                letter = DeadLetter.of(work.message, f"internal error: {exc!r}")
                await asyncio.shield(self.bus.dead_letter(letter))
                if self.metrics is not None:
                    await self.metrics.message_failed("internal", dead_lettered=True)
        await asyncio.shield(self.bus.ack(work.entry.stream, work.entry.id))
        self.handled += 1
