"""Deciding what runs ask: the one place a request is approved, denied, cancelled, expired or
orphaned, and its run woken. ``arena approve``/``deny``, the console's buttons and ``/approve``
typed in a group all come here.

Only the owner (``ARENA_OWNER``) decides; an agent never does (the requesting agent may only
cancel its own request). The first decision wins: a second is told what the first was. A
decision on a run whose process still waits for it is picked up by that process within a
second; a run that stopped waiting (``waiting``) is resumed by a job on the ``runs`` queue, one
per request (its id names both), so a decision wakes the agent once, a denial and its note
included. An unanswered request expires (then it counts as denied, and wakes the agent too); a
pending request whose run is gone is ``orphaned`` and grants nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from orchestrator.core.coding import Step
from orchestrator.errors import ValidationError
from orchestrator.memory.approvals import ApprovalRecord, ApprovalStore, Decided
from orchestrator.memory.runs import RunRecord, RunStore

if TYPE_CHECKING:
    from orchestrator.adapters.redis_client import Connection
    from orchestrator.runtime.wiring import Wiring
    from orchestrator.settings import Settings

__all__ = [
    "APPROVAL_ID",
    "Approvals",
    "Verdict",
    "approval_step",
    "approvals_for",
    "opened",
    "resume_job_id",
    "wake_now",
]

logger = logging.getLogger(__name__)

APPROVAL_ID = re.compile(r"^ap-[0-9a-f]{10}$")
Wake = Callable[[RunRecord, str], Awaitable[None]]
Announce = Callable[[ApprovalRecord], Awaitable[None]]


def resume_job_id(run_job: str, approval_id: str) -> str:
    """The id of the job that resumes a run after ``approval_id``'s end: one per request."""
    return f"{run_job}-{approval_id}"


@dataclass(frozen=True, slots=True)
class Verdict:
    """What became of a decision: ``decided`` (this one counted), ``already`` (an earlier one
    did), ``refused`` (not this person's to make); the request, and a line to show."""

    outcome: str
    record: ApprovalRecord | None
    message: str

    @property
    def ok(self) -> bool:
        """Whether the request is now decided as asked (by this call)."""
        return self.outcome == "decided"


def _said(record: ApprovalRecord) -> str:
    when = record.decided_at.strftime("%Y-%m-%d %H:%M:%S UTC") if record.decided_at else "?"
    who = f" by {record.decided_by}" if record.decided_by else ""
    note = f" (note: {record.note})" if record.note else ""
    return f"{record.id} was already {record.state}{who} at {when}{note}"


class Approvals:
    """Decisions on the runs' requests."""

    def __init__(
        self,
        store: ApprovalStore,
        runs: RunStore,
        *,
        owner: str,
        agents: frozenset[str],
        wake: Wake,
        clock: Callable[[], datetime],
        announce: Announce | None = None,
    ) -> None:
        self.store = store
        self.runs = runs
        self.owner = owner
        self.agents = frozenset(a.lower() for a in agents)  # their ids and names
        self.wake = wake
        self.clock = clock
        self.announce = announce

    def _found(self, approval_id: str) -> ApprovalRecord:
        if not APPROVAL_ID.match(approval_id):
            raise ValidationError("id", f"{approval_id!r} is not an approval id (ap- and 10 hex)")
        record = self.store.get(approval_id)
        if record is None:
            raise ValidationError("id", f"no approval {approval_id} (`arena approvals`)")
        return record

    async def decide(
        self, approval_id: str, *, approve: bool, by: str, note: str | None = None,
        always: bool = False,
    ) -> Verdict:  # fmt: skip
        """Approve or deny ``approval_id`` as ``by``.

        Raises:
            ValidationError: not an approval id, or no such request.
        """
        record = await asyncio.to_thread(self._found, approval_id)
        if by.lower() in self.agents:
            return Verdict("refused", record, f"{by} is an agent: agents never decide")
        if by != self.owner:
            return Verdict("refused", record, f"only {self.owner} decides (not {by})")
        if note is not None and len(note) > 2000:
            raise ValidationError("note", "at most 2,000 characters")
        decided: Decided | None = await asyncio.to_thread(
            self.store.decide,
            approval_id,
            approve=approve,
            by=by,
            note=note,
            always=always,
            now=self.clock(),
        )
        if decided is None:
            raise ValidationError("id", f"no approval {approval_id}")
        if not decided.now:
            return Verdict("already", decided.record, _said(decided.record))
        await self._wake(decided.record)
        verb = "approved" if approve else "denied"
        kept = (
            f"; {decided.record.pattern} is on {record.agent}'s allow-list"
            if (decided.record.always)
            else ""
        )
        return Verdict("decided", decided.record, f"{approval_id} {verb}{kept}")

    async def cancel(self, approval_id: str, *, agent: str) -> Verdict:
        """The requesting agent withdraws its own request."""
        record = await asyncio.to_thread(self._found, approval_id)
        if agent != record.agent:
            return Verdict("refused", record, f"only {record.agent} may cancel {approval_id}")
        closed = await asyncio.to_thread(
            self.store.close, approval_id, "cancelled", by=agent, now=self.clock()
        )
        if closed is None or not closed.now:
            return Verdict("already", record, _said(closed.record if closed else record))
        await self._wake(closed.record)
        return Verdict("decided", closed.record, f"{approval_id} cancelled")

    async def _wake(self, record: ApprovalRecord) -> None:
        """Show the request's new state in the room, and resume its run if it stopped
        waiting (else its process picks the decision up)."""
        if self.announce is not None:
            try:
                await self.announce(record)
            except Exception as exc:  # shown late (by the run) rather than not decided
                logger.warning("approval %s: its new state not shown live: %s", record.id, exc)
        run = await asyncio.to_thread(self.runs.get, record.run_id)
        if run is not None and run.status == "waiting":
            await self.wake(run, record.id)

    async def sweep(self) -> list[ApprovalRecord]:
        """Expire the requests past their time (each wakes its run) and orphan the pending ones
        whose run is gone; what changed."""
        now = self.clock()
        changed: list[ApprovalRecord] = []
        for record in await asyncio.to_thread(self.store.overdue, now):
            closed = await asyncio.to_thread(
                self.store.close, record.id, "expired", by="arena", now=now
            )
            if closed is not None and closed.now:
                logger.info("approval %s expired unanswered", record.id)
                changed.append(closed.record)
                await self._wake(closed.record)
        for record in await asyncio.to_thread(self.store.pending):
            run = await asyncio.to_thread(self.runs.get, record.run_id)
            if run is None or run.ended:
                closed = await asyncio.to_thread(
                    self.store.close, record.id, "orphaned", by="arena", now=now
                )
                if closed is not None and closed.now:
                    logger.info("approval %s orphaned: its run is gone", record.id)
                    changed.append(closed.record)
        return changed


def approval_step(record: ApprovalRecord) -> Step:
    """The step that shows a request's state on its run's card (not numbered: the run's own
    steps are; the card keys approvals by their id)."""
    from orchestrator.core.approvals import ApprovalKind, Ask, describe_ask

    kind: ApprovalKind = "cap" if record.kind == "cap" else "tool"
    asked = describe_ask(
        Ask(kind=kind, tool=record.tool, input=record.input, cwd=record.cwd, reason=record.reason)
    )
    if record.state == "pending":
        line = f"asks {record.id}: {asked} ({record.reason})"
    else:
        who = f" by {record.decided_by}" if record.decided_by else ""
        note = f": {record.note}" if record.note else ""
        line = f"{record.id} {record.state}{who}{note}"
    return Step(
        run=record.run_id,
        n=0,
        at=datetime.now(UTC).isoformat(),
        kind="approval",
        line=line,
        tool=record.tool,
        approval=record.id,
    )


def approvals_for(
    settings: Settings, wiring: Wiring, queue: Connection, announce: Announce
) -> Approvals:
    """The decisions on ``wiring``'s requests, as the owner of ``settings`` makes them: a
    decision is announced with ``announce`` and wakes a run that stopped waiting with a job on
    the ``runs`` queue of ``queue``."""
    from orchestrator.background.queue import enqueue_run
    from orchestrator.core.validation import agent_names
    from orchestrator.runtime.acting import run_job_id, run_timeout_s

    timeout_s = run_timeout_s(wiring.team.agents)

    async def wake(run: RunRecord, approval_id: str) -> None:
        job = resume_job_id(run_job_id(run.id), approval_id)
        await asyncio.to_thread(enqueue_run, queue, run.id, job, timeout_s)

    return Approvals(
        wiring.approvals,
        wiring.runs,
        owner=settings.owner,
        agents=agent_names(wiring.team.agents),
        wake=wake,
        clock=lambda: datetime.now(UTC),
        announce=announce,
    )


@contextlib.asynccontextmanager
async def opened(settings: Settings, wiring: Wiring) -> AsyncIterator[Approvals]:
    """Decisions as the CLI and the console make them: a decision is shown on the run's card
    at once (the group's steps stream and MQTT) and wakes a run that stopped waiting (a job on
    the ``runs`` queue)."""
    from orchestrator.adapters.mqtt_broker import publisher_url
    from orchestrator.adapters.redis_client import connect, connect_async
    from orchestrator.adapters.steps import StepPublisher

    redis = connect_async(settings.effective_redis_url)
    queue = connect(settings.effective_redis_url)
    mqtt_url = publisher_url(settings)

    async def announce(record: ApprovalRecord) -> None:
        # A connection to the broker only when there is something to say: one opened and
        # left half-way by a command that decided nothing would be torn down noisily.
        async with StepPublisher(redis, mqtt_url, flush_s=1.0) as steps:
            await steps.publish(record.group, approval_step(record))

    try:
        yield approvals_for(settings, wiring, queue, announce)
    finally:
        await redis.aclose()
        queue.close()


async def wake_now(
    settings: Settings, store: ApprovalStore, run: RunRecord, timeout_s: int
) -> bool:
    """Resume a waiting run whose request was decided (or expired) while it stopped, which
    no decision could wake then; whether a job was enqueued for it."""
    from orchestrator.adapters.redis_client import connect
    from orchestrator.background.queue import enqueue_run
    from orchestrator.runtime.acting import run_job_id

    heard = await asyncio.to_thread(store.untold, run.id)
    if not heard or run.status != "waiting":
        return False
    queue = connect(settings.effective_redis_url)
    try:
        job = resume_job_id(run_job_id(run.id), heard[0].id)
        return await asyncio.to_thread(enqueue_run, queue, run.id, job, timeout_s)
    finally:
        queue.close()
