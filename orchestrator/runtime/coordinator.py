"""Sharing the work between daemons: each round renews this daemon's leases, takes its fair
share of the partitions, gives back what it holds beyond it, and holds the router lease when
it is free.

A partition is given back only once its work in hand is done (``idle``), so a group's messages
are never handled by two daemons at once. A partition whose lease could not be renewed in time
stops being read at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable

from orchestrator.adapters.leases import Leases, name_taken_error
from orchestrator.core.wire import PARTITIONS
from orchestrator.errors import BusError, OrchestratorError
from orchestrator.runtime.shares import plan

__all__ = ["Coordinator"]

logger = logging.getLogger(__name__)

ROUTER = "router"
# Leases count as ours for this share of their time limit after the last renewal.
_TRUST_SHARE = 0.8


def _name(partition: int) -> str:
    return f"p{partition}"


def _span(partitions: set[int] | list[int]) -> str:
    return ",".join(str(p) for p in sorted(partitions)) or "none"


class Coordinator:
    """One daemon's partitions and router lease, renewed every ``ttl / 3``."""

    def __init__(
        self, leases: Leases, idle: Callable[[int], bool], *, partitions: int = PARTITIONS
    ) -> None:
        self.leases = leases
        self.partitions = partitions
        self._idle = idle
        self._held: set[int] = set()
        self._releasing: set[int] = set()
        self._fresh: set[int] = set()
        self._router = False
        self._trusted_until = 0.0
        self.members: list[str] = []
        self.round_s = leases.ttl_ms / 3000

    @property
    def readable(self) -> frozenset[int]:
        """The partitions this daemon may take new work from now."""
        if time.monotonic() > self._trusted_until:
            return frozenset()
        return frozenset(self._held - self._releasing)

    @property
    def is_router(self) -> bool:
        """Whether this daemon moves inbound entries to their partitions now."""
        return self._router and time.monotonic() <= self._trusted_until

    def holds(self, partition: int) -> bool:
        """Whether this daemon holds ``partition``'s lease (as far as it knows: while Redis is
        away it cannot tell)."""
        return partition in self._held

    def fresh(self) -> list[int]:
        """Readable partitions whose unfinished entries need claiming (newly acquired, or
        read again after a while this daemon could not trust its leases)."""
        return sorted(self._fresh & self.readable)

    def resumed(self, partition: int) -> None:
        """The unfinished entries of ``partition`` have been claimed."""
        self._fresh.discard(partition)

    def takes(self, partition: int) -> bool:
        """Whether an entry of ``partition`` just read may be taken now: the partition is
        readable and none of its entries waits to be claimed first (a later entry taken before
        an earlier one would answer its group out of order)."""
        return partition in self.readable and partition not in self._fresh

    def skipped(self, partition: int) -> None:
        """An entry of ``partition`` was read but not taken (its lease could not be trusted for
        a moment): while the partition stays this daemon's, its unfinished entries are claimed,
        in order, before any newer one is taken."""
        if partition in self._held and partition not in self._releasing:
            self._fresh.add(partition)

    async def start(self) -> None:
        """Claim the consumer name, then take a first share.

        Raises:
            ConfigError: when another live daemon runs under the same consumer name.
        """
        deadline = time.monotonic() + self.leases.ttl_ms / 1000 + self.round_s
        while (taken := await self.leases.claim_name()) is not None:
            if taken.here or time.monotonic() > deadline:
                raise name_taken_error(self.leases.owner, taken)
            logger.warning(
                "consumer name %r is held by %s; waiting for it to expire",
                self.leases.owner,
                taken.holder,
            )
            await asyncio.sleep(self.round_s)
        await self.round()

    async def round(self) -> None:
        """Renew, take and give back leases once."""
        started = time.monotonic()
        taken = await self.leases.claim_name()
        if taken is not None:
            raise name_taken_error(self.leases.owner, taken)
        self.members = await self.leases.members()
        decision = plan(self._held, self.leases.owner, self.members, self.partitions)
        releasing = set(decision.release)
        self._fresh |= self._releasing - releasing  # kept after all: read what was skipped
        self._releasing = releasing
        done = {p for p in self._releasing if self._idle(p)}
        if done:
            await self.leases.release([_name(p) for p in done])
            self._held -= done
            self._releasing -= done
            logger.info("gave back partitions %s", _span(done))
        wanted = [_name(p) for p in sorted(self._held)]
        wanted += [_name(p) for p in decision.order]
        got = {int(n[1:]) for n in await self.leases.acquire(wanted, take=decision.take)}
        if started > self._trusted_until:
            # Entries read while the leases could not be trusted were skipped: claim them.
            self._fresh |= got
        self._note_changes(got)
        router = ROUTER in await self.leases.acquire([ROUTER], take=1)
        if router != self._router:
            logger.info("%s the router", "now" if router else "no longer")
        self._router = router
        self._trusted_until = started + self.leases.ttl_ms / 1000 * _TRUST_SHARE

    def _note_changes(self, got: set[int]) -> None:
        lost = self._held - got
        new = got - self._held
        if lost:
            logger.warning("lost partitions %s to another daemon", _span(lost))
        if new:
            logger.info(
                "took partitions %s (%d daemons alive, holding %d)",
                _span(new),
                len(self.members),
                len(got),
            )
        self._releasing -= lost
        self._fresh = (self._fresh | new) - lost
        self._held = got

    @contextlib.asynccontextmanager
    async def holding(self, stop: asyncio.Event) -> AsyncIterator[None]:
        """Take a first share, keep renewing it in the background while the block runs, then
        hand everything back.

        Raises:
            ConfigError: at once when another live daemon runs under the same consumer name;
                after the block when one took the name over meanwhile (``stop`` was then set,
                and the leases are left to it).
        """
        await self.start()
        failures: list[OrchestratorError] = []

        def failed(exc: OrchestratorError) -> None:
            logger.error("stopping: %s", exc)
            failures.append(exc)
            stop.set()

        done = asyncio.Event()
        renewing = asyncio.create_task(self.run(done, failed), name="leases.renew")
        try:
            yield
        finally:
            done.set()
            await renewing
            if not failures:
                await self.close()
        if failures:
            raise failures[0]

    async def run(self, done: asyncio.Event, failed: Callable[[OrchestratorError], None]) -> None:
        """Hold the leases until ``done`` is set; report a lost consumer name to ``failed``."""
        backoff = self.round_s
        while not done.is_set():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(backoff):
                    await done.wait()
            if done.is_set():
                return
            try:
                await self.round()
                backoff = self.round_s
            except BusError as exc:
                logger.warning("cannot renew leases (%s); retrying", exc.problem)
                backoff = min(self.round_s, 1.0)
            except OrchestratorError as exc:
                failed(exc)
                return

    async def close(self) -> None:
        """Give everything back so other daemons take over at once (a clean stop)."""
        with contextlib.suppress(BusError):
            await self.leases.release([_name(p) for p in self._held] + [ROUTER])
            await self.leases.members(join=False)
            await self.leases.drop_name()
        self._held.clear()
        self._router = False
