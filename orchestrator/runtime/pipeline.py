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

from orchestrator.adapters.bus import DeadLetter
from orchestrator.caps.guard import CapGuard, CappedLLM
from orchestrator.core.context.tokens import DriftCorrector
from orchestrator.core.context.transcript import Transcript
from orchestrator.core.models import (
    AgentSpec,
    ChatMessage,
    MessageKind,
    RouteDecision,
    find_agent,
)
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
from orchestrator.runtime.acting import Acting, card_id
from orchestrator.runtime.answering import Answerer, Counters, Draft
from orchestrator.runtime.approving import Approvals
from orchestrator.runtime.briefing import Briefing
from orchestrator.runtime.chat_commands import ChatCommand, answer, parse_command
from orchestrator.runtime.outlets import DeadLetters, EventSink, HandledMetrics, Outbox, SummaryHook
from orchestrator.runtime.tally import Tally, closing
from orchestrator.runtime.team import Team
from orchestrator.runtime.tuning import Tuning

__all__ = ["Counters", "DeadLetters", "EventSink", "HandledMetrics", "Outbox", "Pipeline"]

logger = logging.getLogger(__name__)


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
        acting: Acting | None = None,
        approvals: Approvals | None = None,
    ) -> None:
        self.team = team
        self.acting = acting
        self.approvals = approvals
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
        command = parse_command(message.text) if message.kind is MessageKind.HUMAN else None
        if command is not None:
            return await self._command(opened, command)
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

    async def _command(self, opened: Opened, command: ChatCommand) -> int:
        """``/approve`` or ``/deny`` typed in the group: decided as its sender, answered with a
        notice, routed to no agent (:mod:`orchestrator.runtime.chat_commands`)."""
        message = opened.stored.message
        line = await answer(command, sender=message.sender, approvals=self.approvals)
        notice = self.answerer.notice(message, f"{message.id}:1:command", 1, line)
        draft = Draft(message=notice, meta=ReplyMeta(notice="command", trigger=message.id))
        meta = {**opened.stored.meta, "replies": 1}
        closed = Closing(message_id=message.id, status="done", route=command.route, meta=meta)
        await self._emit(await self._store_hop([draft], closed), done=(message, 1))
        logger.info("message %s group=%s route=command /%s: %s", message.id, message.group,
                    command.name, line)  # fmt: skip
        return 1

    async def _run_hops(
        self, opened: StoredMessage, decision: RouteDecision, earlier: Mapping[str, StoredMessage]
    ) -> Tally:
        """Run the hops, storing each hop's replies in one step (the last hop's together with
        the message's final record); replies an earlier attempt stored are reused."""
        message = opened.message
        targets = list(decision.agents)
        return await self._hops(
            message,
            1,
            earlier,
            targets=targets,
            triggers=dict.fromkeys(targets, message),
            close=lambda tally: closing(opened, tally, decision),
        )

    async def _hops(
        self,
        message: ChatMessage,
        hop: int,
        earlier: Mapping[str, StoredMessage],
        *,
        targets: list[str] | None = None,
        triggers: dict[str, ChatMessage] | None = None,
        given: Sequence[StoredMessage | Draft] = (),
        close: Callable[[Tally], Closing] | None = None,
    ) -> Tally:
        """Hops from ``hop`` on: the agents in ``targets`` answer (or ``given`` are the hop's
        replies, a run's), each reply that hands the turn on starts the next hop."""
        tally = Tally()
        targets, triggers = targets or [], triggers or {}
        while (targets or given) and hop <= self.hop_limit:
            if given:
                results: list[StoredMessage | Draft] = list(given)
                given = ()
            elif len(targets) == 1:  # the usual hop: its turn awaited here, not in a task
                (a,) = targets
                results = [await self._turn(self.team.get(a), triggers[a], message, hop, earlier)]
            else:
                results = list(
                    await asyncio.gather(
                        *(
                            self._turn(self.team.get(a), triggers[a], message, hop, earlier)
                            for a in targets
                        )
                    )
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
            final = close(tally) if last and close is not None else None
            stored = await self._store_hop(results, final)
            if last:
                tally.unsent = stored
            else:
                await self._emit(stored)
            tally.closed = last
            hop += 1
        return tally

    async def finish_run(self, run_id: str) -> int:
        """A Claude Code run that ended, as its agent's reply: stored, published, handed on
        (again is harmless: a reply stored before is reused). How many messages it made."""
        acting = self.acting
        run = await asyncio.to_thread(acting.runs.get, run_id) if acting else None
        if run is None or not run.ended:
            logger.warning("run %s: not ended, or not known here; nothing to post", run_id)
            return 0
        root = await asyncio.to_thread(self.store.get, run.root_id)
        trigger = await asyncio.to_thread(self.store.get, run.trigger_id)
        if root is None or trigger is None:
            logger.warning("run %s: the message it answers is gone", run_id)
            return 0
        opened = await self._open(root.message)
        earlier = {r.message.id: r for r in opened.replies}
        reply: StoredMessage | Draft
        if run.id in earlier:
            reply = earlier[run.id]
        else:
            agent = find_agent(self.team.agents, run.agent)
            if agent is None:
                logger.warning("run %s: its agent %s left the team", run_id, run.agent)
                return 0
            reply = await self.answerer.run_reply(agent, run, trigger.message, root.message)
        tally = await self._hops(root.message, run.hop, earlier, given=[reply])
        await self._emit(tally.unsent)
        if self.summaries is not None:
            await self.summaries.after_message(
                root.message.group, tally.replies, tally.texts, tally.memory_types
            )
        return tally.replies

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
        if self.acting is not None and agent.code is not None:
            if (card := card_id(reply_id)) in earlier:
                return earlier[card]
            decision = self.acting.decide(agent, trigger.text)
            if decision.run:
                return await self.acting.start(agent, trigger, root, reply_id, hop, decision)
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
