"""Handling one person's message: route it, run the chosen agents, store and publish replies.

Agents answer in hops. Hop 1 is the agents the message was routed to; a reply that
@mentions another agent hands the turn to it in the next hop, up to ``hop_limit`` hops, and
an agent never answers its own reply. Every step is idempotent: a reply is stored under the
id ``{message id}:{hop}:{agent}`` and published once, so handling a message again after a
crash finishes what was missing without a second reply. Each agent's answer is
:mod:`orchestrator.runtime.answering`'s.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Protocol

from orchestrator.adapters.bus import DeadLetter
from orchestrator.adapters.metrics import MessageSample
from orchestrator.caps.guard import CapGuard, CappedLLM
from orchestrator.core.context.tokens import DriftCorrector
from orchestrator.core.context.transcript import Transcript
from orchestrator.core.models import AgentSpec, ChatMessage, MessageKind, RouteDecision
from orchestrator.core.prompts import Prompts
from orchestrator.core.turns import LLM
from orchestrator.core.wire import Outbound, group_topic
from orchestrator.memory.conversation.meta import ReplyMeta
from orchestrator.memory.conversation.recent import RecentMessages
from orchestrator.memory.conversation.store import (
    Closing,
    HistoryStore,
    NewReply,
    Opened,
    StoredMessage,
)
from orchestrator.memory.tools import MemoryTools
from orchestrator.memory.writer import MemoryWriter
from orchestrator.runtime.answering import Answerer, Counters, Draft
from orchestrator.runtime.briefing import Briefing
from orchestrator.runtime.tally import Tally, closing
from orchestrator.runtime.team import Team
from orchestrator.runtime.tuning import Tuning

__all__ = ["Counters", "DeadLetters", "EventSink", "HandledMetrics", "Outbox", "Pipeline"]

logger = logging.getLogger(__name__)


class Outbox(Protocol):
    """Where replies are appended (the group's outbound Redis stream)."""

    async def publish_all(self, items: Sequence[Outbound]) -> int:
        """Append ``items`` in order, each unless it was appended before; how many now."""
        ...


class SummaryHook(Protocol):
    """Told about every answered message, to start the group's summary when it is due."""

    async def after_message(
        self, group: str, stored: int, texts: Sequence[str], marker_types: Sequence[str]
    ) -> str | None:
        """Count the new messages; returns the trigger if a summary was started."""
        ...


class DeadLetters(Protocol):
    """Where messages that could not be answered are kept for ``arena retry``."""

    async def dead_letter(self, letter: DeadLetter) -> None:
        """Keep the message's fields with the reason."""
        ...


class HandledMetrics(Protocol):
    """Where each handled message's numbers are added up (``GET /metrics``); never raises."""

    async def message_handled(self, sample: MessageSample) -> None:
        """Count one message handled to the end."""
        ...


class EventSink(Protocol):
    """Where replies are announced (MQTT); must never block."""

    def publish(self, topic: str, payload: bytes) -> None:
        """Queue one event."""
        ...


def _utcnow() -> datetime:
    return datetime.now(UTC)


class Pipeline:
    """Takes a person's message from stored to answered."""

    def __init__(
        self,
        *,
        team: Team,
        store: HistoryStore,
        outbox: Outbox,
        events: EventSink,
        llm: LLM,
        prompts: Prompts,
        briefing: Briefing,
        tuning: Tuning,
        transcript: Transcript,
        hop_limit: int = 3,
        clock: Callable[[], datetime] = _utcnow,
        memory: MemoryWriter | None = None,
        counters: Counters | None = None,
        drift: DriftCorrector | None = None,
        summaries: SummaryHook | None = None,
        dead_letters: DeadLetters | None = None,
        recent: RecentMessages | None = None,
        metrics: HandledMetrics | None = None,
        caps: CapGuard | None = None,
        tools: MemoryTools | None = None,
        max_tool_steps: int = 0,
    ) -> None:
        self.team = team
        self.store = store
        self.outbox = outbox
        self.events = events
        self.counter = counter = transcript.counter
        self.hop_limit = hop_limit
        self.summaries = summaries
        self.dead_letters = dead_letters
        self.recent = recent
        self.metrics = metrics
        self.caps = caps
        if caps is not None:
            llm = CappedLLM(llm, caps, counter)
        self.answerer = Answerer(
            team=team,
            llm=llm,
            prompts=prompts,
            briefing=briefing,
            tuning=tuning,
            transcript=transcript,
            clock=clock,
            drift=drift or DriftCorrector(),
            memory=memory,
            counters=counters,
            tools=tools,
            max_tool_steps=max_tool_steps,
        )
        self._slots = {a.id: asyncio.Semaphore(a.max_concurrency) for a in team.agents}

    def forget(self, groups: Callable[[str], bool]) -> None:
        """Let go of what is kept in memory of the history of the groups ``groups`` accepts
        (another daemon may have answered them meanwhile)."""
        if self.recent is not None:
            self.recent.forget(groups)

    async def _open(self, message: ChatMessage) -> Opened:
        """Store a person's message with its token count (counted once, here) unless it is
        stored; with the replies an earlier attempt left."""
        opened = await self.store.open(message, count=self.counter.count)
        if self.recent is not None and opened.new:
            self.recent.remember(opened.stored)
        return opened

    async def handle(self, message: ChatMessage) -> int:
        """Answer ``message`` completely (idempotent).

        Returns:
            How many replies and notices it has.
        """
        started = time.perf_counter()
        opened = await self._open(message)
        if opened.stored.status in ("done", "failed"):
            await self._emit(opened.replies, done=(message, len(opened.replies)))
            return len(opened.replies)
        decision = self.team.route(message.text)
        earlier = {r.message.id: r for r in opened.replies}
        tally = await self._run_hops(opened.stored, decision, earlier)
        if not tally.closed:  # no agent to answer
            await self._store_hop([], closing(opened.stored, tally, decision))
        if tally.failures:
            await self._dead_letter(message, tally)
        # The last hop's replies go out with the "done" item, in one step.
        await self._emit(tally.unsent, done=(message, tally.replies))
        if self.summaries is not None:
            await self.summaries.after_message(
                message.group,
                1 + tally.replies,
                [message.text, *tally.texts],
                tally.memory_types,
            )
        duration_s = time.perf_counter() - started
        logger.info(
            "message %s group=%s route=%s agents=%s replies=%d tokens_in=%d tokens_out=%d "
            "duration_ms=%.0f",
            message.id,
            message.group,
            decision.reason.value,
            ",".join(tally.agents) or "-",
            tally.replies,
            tally.tokens_in,
            tally.tokens_out,
            duration_s * 1000,
        )
        if self.metrics is not None:
            dead_lettered = self.dead_letters is not None
            await self.metrics.message_handled(
                tally.sample(duration_s, dead_lettered=dead_lettered)
            )
        return tally.replies

    async def _run_hops(
        self, opened: StoredMessage, decision: RouteDecision, earlier: Mapping[str, StoredMessage]
    ) -> Tally:
        """Run the hops, storing each hop's replies in one step (the last hop's together with
        the message's final record); replies an earlier attempt stored are reused."""
        message = opened.message
        tally = Tally()
        targets: list[str] = list(decision.agents)
        triggers: dict[str, ChatMessage] = dict.fromkeys(targets, message)
        hop = 1
        while targets and hop <= self.hop_limit:
            results = await asyncio.gather(
                *(self._turn(self.team.get(a), triggers[a], message, hop, earlier) for a in targets)
            )
            results = [*results, *self._cap_warnings(message, hop)]
            targets, triggers = self._tally_hop(results, tally)
            last = not targets or hop == self.hop_limit
            if last and targets:
                logger.info(
                    "message %s: hop limit %d reached; not handed to %s",
                    message.id,
                    self.hop_limit,
                    ",".join(targets),
                )
                tally.hop_limit_reached = targets
                notices = self.answerer.hop_limit_notices(
                    targets, triggers, message, hop, self.hop_limit
                )
                results = [*results, *notices]
                tally.replies += len(notices)
                tally.texts.extend(n.message.text for n in notices)
            final = closing(opened, tally, decision) if last else None
            stored = await self._store_hop(results, final)
            if last:
                tally.unsent = stored
            else:
                await self._emit(stored)
            tally.closed = last
            hop += 1
        return tally

    def _tally_hop(
        self, results: Sequence[StoredMessage | Draft], tally: Tally
    ) -> tuple[list[str], dict[str, ChatMessage]]:
        """Count a hop's replies; the agents they hand the turn to, and on which reply."""
        next_targets: list[str] = []
        next_triggers: dict[str, ChatMessage] = {}
        for reply in results:
            meta = reply.meta if isinstance(reply, Draft) else ReplyMeta.from_json(reply.meta)
            tally.add(reply.message, meta)
            if reply.message.kind is not MessageKind.AGENT:
                continue
            for target in self.team.handoffs(reply.message.text, reply.message.sender):
                if target not in next_triggers:
                    next_targets.append(target)
                    next_triggers[target] = reply.message
        return next_targets, next_triggers

    async def _store_hop(
        self, results: Sequence[StoredMessage | Draft], closing: Closing | None
    ) -> list[StoredMessage]:
        """Store a hop's new replies (and close the message) in one transaction."""
        drafts = [r for r in results if isinstance(r, Draft)]
        if not drafts and closing is None:
            return [r for r in results if isinstance(r, StoredMessage)]
        replies = [NewReply(message=d.message, meta=d.meta.as_json()) for d in drafts]
        new = await self.store.record(replies, closing=closing, count=self.counter.count)
        if self.recent is not None:
            for stored in new:
                self.recent.remember(stored)
        fresh = iter(new)
        return [r if isinstance(r, StoredMessage) else next(fresh) for r in results]

    async def _dead_letter(self, message: ChatMessage, tally: Tally) -> None:
        """Keep a message an agent could not answer for ``arena retry``."""
        if self.dead_letters is None:
            return
        reason = "model failed: " + "; ".join(tally.failures)
        if tally.over_caps:
            reason = "budget: " + "; ".join(tally.over_caps)
        await self.dead_letters.dead_letter(DeadLetter.of(message, reason))

    def _cap_warnings(self, message: ChatMessage, hop: int) -> list[Draft]:
        """A notice for each daily cap that this hop brought to 80 % (once a day per cap)."""
        warnings = self.caps.take_warnings(message.group) if self.caps is not None else []
        return [
            Draft(
                message=self.answerer.notice(
                    message, f"{message.id}:{hop}:budget-{n}", hop, warning.describe()
                ),
                meta=ReplyMeta(notice="budget_warning", trigger=message.id),
            )
            for n, warning in enumerate(warnings, 1)
        ]

    async def _turn(
        self,
        agent: AgentSpec,
        trigger: ChatMessage,
        root: ChatMessage,
        hop: int,
        earlier: Mapping[str, StoredMessage],
    ) -> StoredMessage | Draft:
        reply_id = f"{root.id}:{hop}:{agent.id}"
        if reply_id in earlier:
            return earlier[reply_id]
        async with self._slots[agent.id]:
            return await self.answerer.answer(agent, trigger, root, reply_id, hop)

    async def _emit(
        self, replies: Sequence[StoredMessage], *, done: tuple[ChatMessage, int] | None = None
    ) -> None:
        """Publish replies (and, with ``done``, the item that closes a person's message) on the
        outbound stream in one step, then announce them on MQTT."""
        items = [Outbound.for_message(stored.message) for stored in replies]
        if done is not None:
            message, count = done
            items.append(Outbound.done(message.id, message.group, count))
        if not items:
            return
        await self.outbox.publish_all(items)
        # MQTT is at-least-once (QoS 1): after a crash an event may be announced again.
        for item in items:
            self.events.publish(group_topic(item.group), item.json())
