"""Handling one person's message: route it, run the chosen agents, store and publish replies.

Agents answer in hops. Hop 1 is the agents the message was routed to; a reply that
@mentions another agent hands the turn to it in the next hop, up to ``hop_limit`` hops, and
an agent never answers its own reply. Every step is idempotent: a reply is stored under the
id ``{message id}:{hop}:{agent}`` and published once, so handling a message again after a
crash finishes what was missing without a second reply.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from sqlalchemy.engine import Connection

from orchestrator.core.context import Identity, build_context
from orchestrator.core.models import AgentSpec, ChatMessage, Completion, MessageKind, RouteDecision
from orchestrator.core.prompts import Prompts
from orchestrator.core.routing import handoff_targets, route
from orchestrator.core.tokens import DriftCorrector, TokenCounter
from orchestrator.core.turns import LLM, TurnResult, run_turn
from orchestrator.core.wire import Outbound, group_topic
from orchestrator.errors import LLMError
from orchestrator.memory.conversation.recent import RecentMessages
from orchestrator.memory.conversation.store import (
    Closing,
    HistoryStore,
    NewReply,
    Opened,
    StoredMessage,
)
from orchestrator.memory.recall import RecallResult
from orchestrator.memory.transactions import BatchedWrites
from orchestrator.memory.writer import MemoryWriter, Origin, WriteReport, marker_meta
from orchestrator.runtime.briefing import Briefing

__all__ = ["Counters", "DeadLetters", "EventSink", "Outbox", "Pipeline", "Team"]

logger = logging.getLogger(__name__)

NOTICE_SENDER = "arena"


class Outbox(Protocol):
    """Where replies are appended (the group's outbound Redis stream)."""

    async def publish_all(self, items: Sequence[Outbound]) -> int:
        """Append ``items`` in order, each unless it was appended before; how many now."""
        ...


class Counters(Protocol):
    """Running totals shown by ``arena status``."""

    async def count(self, amounts: Mapping[str, int]) -> None:
        """Add ``amounts`` to the named totals."""
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

    async def dead_letter(self, entry_id: str, raw: Mapping[bytes, bytes], reason: str) -> None:
        """Keep the message's fields with the reason."""
        ...


class EventSink(Protocol):
    """Where replies are announced (MQTT); must never block."""

    def publish(self, topic: str, payload: bytes) -> None:
        """Queue one event."""
        ...


@dataclass(frozen=True, slots=True, kw_only=True)
class Team:
    """The agents, in file order, with their identity files."""

    agents: tuple[AgentSpec, ...]
    identities: Mapping[str, Identity] = field(default_factory=dict)

    def get(self, agent_id: str) -> AgentSpec:
        """The agent with this id."""
        for agent in self.agents:
            if agent.id == agent_id:
                return agent
        raise KeyError(agent_id)


@dataclass(slots=True)
class _Tally:
    replies: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    agents: list[str] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    memory_types: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    hop_limit_reached: list[str] = field(default_factory=list)
    closed: bool = False  # the message's final record is stored
    unsent: list[StoredMessage] = field(default_factory=list)  # stored, not yet published


@dataclass(frozen=True, slots=True)
class _Draft:
    """A reply not stored yet."""

    message: ChatMessage
    meta: dict[str, Any]


def _closing(opened: StoredMessage, tally: _Tally, decision: RouteDecision) -> Closing:
    """The message's final record: done, or failed when an agent could not answer. Its meta
    is merged here with the stored one (nobody else writes a message while it is handled)."""
    meta: dict[str, Any] = {**opened.meta, "replies": tally.replies}
    if tally.hop_limit_reached:
        meta["hop_limit_reached"] = tally.hop_limit_reached
    if tally.failures:
        meta["failures"] = tally.failures
    return Closing(
        message_id=opened.message.id,
        status="failed" if tally.failures else "done",
        route=decision.as_dict(),
        meta=meta,
        replace=True,
    )


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
        counter: TokenCounter,
        hop_limit: int = 3,
        clock: Callable[[], datetime] = _utcnow,
        memory: MemoryWriter | None = None,
        counters: Counters | None = None,
        drift: DriftCorrector | None = None,
        summaries: SummaryHook | None = None,
        dead_letters: DeadLetters | None = None,
        recent: RecentMessages | None = None,
    ) -> None:
        self.team = team
        self.store = store
        # Many groups' messages are stored together: one thread hand-off, one transaction.
        self.writes = BatchedWrites(store.engine)
        self.outbox = outbox
        self.events = events
        self.llm = llm
        self.prompts = prompts
        self.briefing = briefing
        self.counter = counter
        self.hop_limit = hop_limit
        self.clock = clock
        self.memory = memory
        self.counters = counters
        self.drift = drift or DriftCorrector()
        self.summaries = summaries
        self.dead_letters = dead_letters
        self.recent = recent
        self._slots = {a.id: asyncio.Semaphore(a.max_concurrency) for a in team.agents}

    def forget(self, groups: Callable[[str], bool]) -> None:
        """Let go of what is kept in memory of the history of the groups ``groups`` accepts
        (another daemon may have answered them meanwhile)."""
        if self.recent is not None:
            self.recent.forget(groups)

    async def _open(self, message: ChatMessage) -> Opened:
        """Store a person's message with its token count (counted once, here) unless it is
        stored; with the replies an earlier attempt left."""

        def job(conn: Connection) -> Opened:
            return self.store.open_in(conn, message, tokens=self.counter.count(message.text))

        opened = await self.writes.run(job)
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
        decision = route(message.text, self.team.agents)
        earlier = {r.message.id: r for r in opened.replies}
        tally = await self._run_hops(opened.stored, decision, earlier)
        if not tally.closed:  # no agent to answer
            closing = _closing(opened.stored, tally, decision)
            await self._store_hop([], closing)
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
            (time.perf_counter() - started) * 1000,
        )
        return tally.replies

    async def _run_hops(
        self, opened: StoredMessage, decision: RouteDecision, earlier: Mapping[str, StoredMessage]
    ) -> _Tally:
        """Run the hops, storing each hop's replies in one step (the last hop's together with
        the message's final record); replies an earlier attempt stored are reused."""
        message = opened.message
        tally = _Tally()
        targets: list[str] = list(decision.agents)
        triggers: dict[str, ChatMessage] = dict.fromkeys(targets, message)
        hop = 1
        while targets and hop <= self.hop_limit:
            results = await asyncio.gather(
                *(self._turn(self.team.get(a), triggers[a], message, hop, earlier) for a in targets)
            )
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
                notices = self._hop_limit_notices(targets, triggers, message, hop)
                results = [*results, *notices]
                tally.replies += len(notices)
                tally.texts.extend(n.message.text for n in notices)
            closing = _closing(opened, tally, decision) if last else None
            stored = await self._store_hop(results, closing)
            if last:
                tally.unsent = stored
            else:
                await self._emit(stored)
            tally.closed = last
            hop += 1
        return tally

    def _tally_hop(
        self, results: Sequence[StoredMessage | _Draft], tally: _Tally
    ) -> tuple[list[str], dict[str, ChatMessage]]:
        """Count a hop's replies; the agents they hand the turn to, and on which reply."""
        next_targets: list[str] = []
        next_triggers: dict[str, ChatMessage] = {}
        for reply in results:
            tally.replies += 1
            tally.agents.append(reply.message.sender)
            usage = reply.meta.get("usage") or {}
            tally.tokens_in += int(usage.get("input_tokens", 0))
            tally.tokens_out += int(usage.get("output_tokens", 0))
            tally.texts.append(reply.message.text)
            saved = (reply.meta.get("memory") or {}).get("saved") or []
            tally.memory_types.extend(str(s.get("type", "")) for s in saved)
            error = reply.meta.get("error") or {}
            if error:
                tally.failures.append(f"{reply.meta.get('agent')}: {error.get('problem')}")
            if reply.message.kind is not MessageKind.AGENT:
                continue
            for target in handoff_targets(
                reply.message.text, reply.message.sender, self.team.agents
            ):
                if target not in next_triggers:
                    next_targets.append(target)
                    next_triggers[target] = reply.message
        return next_targets, next_triggers

    async def _store_hop(
        self, results: Sequence[StoredMessage | _Draft], closing: Closing | None
    ) -> list[StoredMessage]:
        """Store a hop's new replies (and close the message) in one transaction."""
        drafts = [r for r in results if isinstance(r, _Draft)]
        if not drafts and closing is None:
            return [r for r in results if isinstance(r, StoredMessage)]

        def job(conn: Connection) -> list[StoredMessage]:
            replies = [
                NewReply(message=d.message, meta=d.meta, tokens=self.counter.count(d.message.text))
                for d in drafts
            ]
            return self.store.record_in(conn, replies, closing=closing)

        new = await self.writes.run(job)
        if self.recent is not None:
            for stored in new:
                self.recent.remember(stored)
        fresh = iter(new)
        return [r if isinstance(r, StoredMessage) else next(fresh) for r in results]

    async def _dead_letter(self, message: ChatMessage, tally: _Tally) -> None:
        """Keep a message an agent could not answer for ``arena retry``."""
        if self.dead_letters is None:
            return
        reason = "model failed: " + "; ".join(tally.failures)
        raw = {
            b"group": message.group.encode(),
            b"sender": message.sender.encode(),
            b"text": message.text.encode(),
        }
        await self.dead_letters.dead_letter(message.id, raw, reason[:500])

    async def _turn(
        self,
        agent: AgentSpec,
        trigger: ChatMessage,
        root: ChatMessage,
        hop: int,
        earlier: Mapping[str, StoredMessage],
    ) -> StoredMessage | _Draft:
        reply_id = f"{root.id}:{hop}:{agent.id}"
        if reply_id in earlier:
            return earlier[reply_id]
        async with self._slots[agent.id]:
            reply, meta = await self._answer(agent, trigger, root, reply_id, hop)
        return _Draft(message=reply, meta=meta)

    async def _answer(
        self, agent: AgentSpec, trigger: ChatMessage, root: ChatMessage, reply_id: str, hop: int
    ) -> tuple[ChatMessage, dict[str, Any]]:
        meta: dict[str, Any] = {"agent": agent.id, "trigger": trigger.id}
        try:
            now = self.clock()
            gathered = await asyncio.to_thread(
                self.briefing.gather, agent, trigger, now, mark_used=True
            )
            if gathered.recall is not None:
                meta["recall"] = _recall_meta(gathered.recall)
            built = build_context(
                agent=agent,
                agents=self.team.agents,
                layers=gathered.layers,
                trigger=trigger,
                prompts=self.prompts,
                now=now.astimezone(self.briefing.zone),
                tz=self.briefing.settings.tz,
                limits=self.briefing.limits(agent, self.drift.factor(agent.model)),
                counter=self.counter,
            )
            meta["context"] = dict(built.report)
            result = await run_turn(built.request, self.llm)
            self._observe_drift(built.report, result.completion)
        except LLMError as exc:
            logger.warning("message %s: %s could not answer: %s", root.id, agent.id, exc)
            meta["error"] = {
                "kind": "llm",
                "problem": exc.problem,
                "status": exc.status,
                "retryable": exc.retryable,
            }
            return self._notice(agent, root, reply_id, hop, exc.problem), meta
        except Exception as exc:
            logger.exception("message %s: %s failed", root.id, agent.id)
            meta["error"] = {"kind": "internal", "problem": f"{exc.__class__.__name__}: {exc}"}
            return self._notice(agent, root, reply_id, hop, "an internal error"), meta
        meta.update(_turn_meta(result))
        report: WriteReport | None = None
        if self.memory is not None and result.markers:
            origin = Origin(
                agent=agent.id,
                group=root.group,
                reply_id=reply_id,
                trigger_id=trigger.id,
                now=self.clock(),
            )
            report = await asyncio.to_thread(self.memory.apply, result.markers, origin)
        # Never more than a few KB, and nothing the gate refused: see marker_meta.
        meta.update(marker_meta(result.invalid, report))
        await self._count(meta)
        reply = ChatMessage(
            id=reply_id,
            group=root.group,
            sender=agent.id,
            kind=MessageKind.AGENT,
            text=result.visible or "(nothing to add)",
            created_at=self.clock(),
            in_reply_to=root.id,
            hop=hop,
        )
        return reply, meta

    def _observe_drift(self, report: Mapping[str, Any], completion: Completion) -> None:
        """Compare our estimate with what the provider counted (real providers only)."""
        usage = completion.usage
        actual = usage.input_tokens + usage.cache_read_tokens + usage.cache_creation_tokens
        if completion.provider == "offline" or actual <= 0:
            return
        correction = float(report.get("correction", 1.0)) or 1.0
        estimated = int(report["tokens"]["total"] / correction)
        self.drift.observe(completion.model, estimated, actual)

    async def _count(self, meta: dict[str, Any]) -> None:
        if self.counters is None:
            return
        memory = meta.get("memory") or {}
        truncated = meta.get("truncated") or {}
        amounts = {
            "markers_invalid": len(meta["invalid_markers"]) + truncated.get("invalid_markers", 0),
            "memory_saved": len(memory.get("saved") or []) + truncated.get("saved", 0),
            "memory_rejected": len(memory.get("rejected") or []) + truncated.get("rejected", 0),
        }
        if any(amounts.values()):
            await self.counters.count(amounts)

    def _hop_limit_notices(
        self,
        targets: Sequence[str],
        triggers: Mapping[str, ChatMessage],
        root: ChatMessage,
        hop: int,
    ) -> list[_Draft]:
        """One notice per agent a reply handed the turn to after the last hop: the group sees
        why the chain stopped. Each takes the id the agent's reply would have had."""
        return [
            _Draft(
                message=self._arena_notice(
                    root,
                    f"{root.id}:{hop + 1}:{target}",
                    hop + 1,
                    f"hop limit ({self.hop_limit}) reached: @{target} was not asked to answer",
                ),
                meta={"notice": "hop_limit", "agent": target, "trigger": triggers[target].id},
            )
            for target in targets
        ]

    def _notice(
        self, agent: AgentSpec, root: ChatMessage, reply_id: str, hop: int, problem: str
    ) -> ChatMessage:
        return self._arena_notice(root, reply_id, hop, f"{agent.name} could not answer: {problem}")

    def _arena_notice(self, root: ChatMessage, notice_id: str, hop: int, text: str) -> ChatMessage:
        """A notice from the arena in the chain that ``root`` started, at ``hop``."""
        return ChatMessage(
            id=notice_id,
            group=root.group,
            sender=NOTICE_SENDER,
            kind=MessageKind.NOTICE,
            text=text,
            created_at=self.clock(),
            in_reply_to=root.id,
            hop=hop,
        )

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


def _recall_meta(result: RecallResult) -> dict[str, Any]:
    return {
        "snippets": [
            {"id": s.id, "score": round(s.score, 3), "trust": s.trust} for s in result.snippets
        ],
        "dropped": [{"id": d.id, "layer": d.layer, "reason": d.reason} for d in result.dropped],
    }


def _turn_meta(result: TurnResult) -> dict[str, Any]:
    completion = result.completion
    usage = completion.usage
    return {
        "provider": completion.provider,
        "model": completion.model,
        "latency_ms": round(completion.latency_ms, 1),
        "stop_reason": completion.stop_reason,
        "usage": {
            "input_tokens": usage.input_tokens,
            "output_tokens": usage.output_tokens,
            "cache_read_tokens": usage.cache_read_tokens,
            "cache_creation_tokens": usage.cache_creation_tokens,
        },
        # How many calls the answer took, and why the earlier ones failed (429, 529, ...).
        "attempts": {
            "count": len(completion.failed_attempts) + 1,
            "failed": list(completion.failed_attempts),
        },
    }
