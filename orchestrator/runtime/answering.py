"""One agent's answer to one message, and the notices the arena posts in a chain.

:class:`Answerer` gathers the agent's layers, builds its context, calls the model, applies
the markers the reply carried to memory and returns a :class:`Draft`: the reply (or, when the
agent could not answer, a notice saying so) with its :class:`ReplyMeta`, not stored yet.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Protocol

from orchestrator.caps.limits import OverCap
from orchestrator.core.context.build import build_context
from orchestrator.core.context.report import (
    ContextReport,
    RecalledSnippet,
    RecallReport,
)
from orchestrator.core.context.tokens import DriftCorrector
from orchestrator.core.context.transcript import Transcript
from orchestrator.core.markers import Marker, parse_markers
from orchestrator.core.models import AgentSpec, ChatMessage, Completion, MessageKind, Usage
from orchestrator.core.prompts import Prompts
from orchestrator.core.quick_init import quick_init
from orchestrator.core.tools import ToolCall, ToolResult, describe, schemas
from orchestrator.core.turns import LLM, ToolRunner, TurnResult, run_turn
from orchestrator.core.wire import NOTICE_SENDER
from orchestrator.errors import LLMError
from orchestrator.memory.conversation.meta import (
    MarkerMeta,
    ReplyError,
    ReplyMeta,
    ToolCallMeta,
    ToolsMeta,
    TurnMeta,
)
from orchestrator.memory.conversation.run_meta import reply_text, run_meta
from orchestrator.memory.recall.recaller import RecallResult
from orchestrator.memory.runs import RunRecord
from orchestrator.memory.tools import MemoryTools, ToolTurn
from orchestrator.memory.writer import MemoryWriter, Origin, WriteReport, marker_meta
from orchestrator.runtime.briefing import Briefing
from orchestrator.runtime.team import Team
from orchestrator.runtime.tuning import Tuning

__all__ = ["Answerer", "Counters", "Draft"]

logger = logging.getLogger(__name__)


class Counters(Protocol):
    """Running totals shown by ``arena status``."""

    async def count(self, amounts: Mapping[str, int]) -> None:
        """Add ``amounts`` to the named totals."""
        ...


@quick_init
@dataclass(frozen=True, slots=True)
class Draft:
    """A reply or notice not stored yet."""

    message: ChatMessage
    meta: ReplyMeta


@quick_init
@dataclass(frozen=True, slots=True, kw_only=True)
class _Asked:
    """One agent asked to answer: who, on which message, in the chain ``root`` started."""

    agent: AgentSpec
    trigger: ChatMessage
    root: ChatMessage
    reply_id: str
    hop: int


class Answerer:
    """Runs one agent's turn on one message (blocking steps in threads)."""

    def __init__(
        self,
        *,
        team: Team,
        llm: LLM,
        prompts: Prompts,
        briefing: Briefing,
        tuning: Tuning,
        transcript: Transcript,
        clock: Callable[[], datetime],
        drift: DriftCorrector,
        memory: MemoryWriter | None = None,
        counters: Counters | None = None,
        tools: MemoryTools | None = None,
        max_tool_steps: int = 0,
    ) -> None:
        self.team = team
        self.llm = llm
        self.prompts = prompts
        self.briefing = briefing
        self.tuning = tuning
        self.transcript = transcript
        self.clock = clock
        self.drift = drift
        self.memory = memory
        self.counters = counters
        self.tools = tools
        self.max_tool_steps = max_tool_steps

    async def answer(
        self, agent: AgentSpec, trigger: ChatMessage, root: ChatMessage, reply_id: str, hop: int
    ) -> Draft:
        """``agent``'s reply to ``trigger`` (a notice when it could not answer)."""
        asked = _Asked(agent=agent, trigger=trigger, root=root, reply_id=reply_id, hop=hop)
        recall: RecallReport | None = None
        context: ContextReport | None = None
        try:
            now = self.clock()
            gathered = await self.briefing.for_turn(agent, trigger, now)
            if gathered.recall is not None:
                recall = _recall_meta(gathered.recall)
            built = build_context(
                agent=agent,
                agents=self.team.agents,
                layers=gathered.layers,
                trigger=trigger,
                prompts=self.prompts,
                now=now.astimezone(self.tuning.zone),
                limits=self.tuning.limits(agent, self.drift.factor(agent.model)),
                transcript=self.transcript,
            )
            context = built.report
            request, runner = built.request, self._runner(asked, now)
            if runner is not None:
                request = replace(request, tools=schemas(agent.tools))
            result = await run_turn(request, self.llm, runner, self.max_tool_steps)
            self._observe_drift(
                built.report, result.steps[0] if result.steps else result.completion
            )
        except OverCap as exc:
            error = ReplyError(kind="budget", problem=str(exc), retryable=True)
            text = f"{agent.name} did not answer: {exc}"
            meta = _meta(asked, recall, context, notice="budget", error=error)
            return Draft(message=self.notice(root, reply_id, hop, text), meta=meta)
        except LLMError as exc:
            logger.warning("message %s: %s could not answer: %s", root.id, agent.id, exc)
            error = ReplyError(
                kind="llm", problem=exc.problem, status=exc.status, retryable=exc.retryable
            )
            return self._failed(asked, _meta(asked, recall, context, error=error), exc.problem)
        except Exception as exc:
            logger.exception("message %s: %s failed", root.id, agent.id)
            error = ReplyError(kind="internal", problem=f"{exc.__class__.__name__}: {exc}")
            meta = _meta(asked, recall, context, error=error)
            return self._failed(asked, meta, "an internal error")
        return await self._finish(asked, recall, context, result)

    async def _finish(
        self,
        asked: _Asked,
        recall: RecallReport | None,
        context: ContextReport | None,
        result: TurnResult,
    ) -> Draft:
        """Apply the reply's markers to memory, count them, and draft the reply (its record
        made once, with what the turn was given)."""
        report: WriteReport | None = None
        if self.memory is not None and result.markers:
            origin = Origin(
                agent=asked.agent.id,
                group=asked.root.group,
                reply_id=asked.reply_id,
                trigger_id=asked.trigger.id,
                now=self.clock(),
            )
            report = await _stored(self.memory, result.markers, origin)
        # Never more than a few KB, and nothing the gate refused: see marker_meta.
        markers = marker_meta(result.invalid, report)
        turn, tools = _turn_meta(result), _tools_meta(result)
        meta = _meta(asked, recall, context, turn=turn, markers=markers, tools=tools)
        await self._count(markers)
        reply = ChatMessage(
            id=asked.reply_id,
            group=asked.root.group,
            sender=asked.agent.id,
            kind=MessageKind.AGENT,
            text=result.visible or "(nothing to add)",
            created_at=self.clock(),
            in_reply_to=asked.root.id,
            hop=asked.hop,
        )
        return Draft(message=reply, meta=meta)

    async def run_reply(
        self, agent: AgentSpec, run: RunRecord, trigger: ChatMessage, root: ChatMessage
    ) -> Draft:
        """The agent's reply from a Claude Code run that ended: its final text's markers
        applied to memory as a turn's are, what the run changed and cost under what it said."""
        parsed = parse_markers(run.text)
        report: WriteReport | None = None
        if self.memory is not None and parsed.markers:
            origin = Origin(
                agent=agent.id,
                group=root.group,
                reply_id=run.id,
                trigger_id=trigger.id,
                now=self.clock(),
            )
            report = await _stored(self.memory, parsed.markers, origin)
        markers = marker_meta(parsed.invalid, report)
        await self._count(markers)
        ran = run_meta(run)
        usage = run.outcome.get("usage")
        turn = TurnMeta(
            provider="claude-code",
            model=agent.model,
            latency_ms=float(ran.duration_ms),
            stop_reason=run.status,
            usage=Usage(**usage) if isinstance(usage, dict) else Usage(),
        )
        context = run.outcome.get("context")
        meta = ReplyMeta(
            agent=agent.id,
            trigger=trigger.id,
            context=ContextReport.from_json(context) if isinstance(context, dict) else None,
            turn=turn,
            markers=markers,
            run=ran,
        )
        reply = ChatMessage(
            id=run.id,
            group=root.group,
            sender=agent.id,
            kind=MessageKind.AGENT,
            text=reply_text(parsed.visible, ran, run.problem),
            created_at=self.clock(),
            in_reply_to=root.id,
            hop=run.hop,
        )
        return Draft(message=reply, meta=meta)

    def _runner(self, asked: _Asked, now: datetime) -> ToolRunner | None:
        """What runs the agent's tool calls in this turn (None: no tools)."""
        tools = self.tools
        if tools is None or not asked.agent.tools or self.max_tool_steps <= 0:
            return None
        turn = ToolTurn(
            agent=asked.agent.id,
            group=asked.root.group,
            reply_id=asked.reply_id,
            trigger_id=asked.trigger.id,
            now=now,
            allowed=asked.agent.tools,
            recall=self.tuning.recall(asked.agent),
        )

        async def run(call: ToolCall) -> ToolResult:
            return await asyncio.to_thread(tools.run, call, turn)

        return run

    def _failed(self, asked: _Asked, meta: ReplyMeta, problem: str) -> Draft:
        text = f"{asked.agent.name} could not answer: {problem}"
        return Draft(message=self.notice(asked.root, asked.reply_id, asked.hop, text), meta=meta)

    def _observe_drift(self, report: ContextReport, completion: Completion) -> None:
        """Compare our estimate with what the provider counted (real providers only)."""
        usage = completion.usage
        actual = usage.input_tokens + usage.cache_read_tokens + usage.cache_creation_tokens
        if self.llm.offline or actual <= 0:
            return
        estimated = int(report.tokens.total / (report.correction or 1.0))
        self.drift.observe(completion.model, estimated, actual)

    async def _count(self, markers: MarkerMeta) -> None:
        if self.counters is None:
            return
        amounts = markers.amounts()
        if any(amounts.values()):
            await self.counters.count(amounts)

    def hop_limit_notices(
        self,
        targets: Sequence[str],
        triggers: Mapping[str, ChatMessage],
        root: ChatMessage,
        hop: int,
        hop_limit: int,
    ) -> list[Draft]:
        """One notice per agent a reply handed the turn to after the last hop: the group sees
        why the chain stopped. Each takes the id the agent's reply would have had."""
        return [
            Draft(
                message=self.notice(
                    root,
                    f"{root.id}:{hop + 1}:{target}",
                    hop + 1,
                    f"hop limit ({hop_limit}) reached: @{target} was not asked to answer",
                ),
                meta=ReplyMeta(notice="hop_limit", agent=target, trigger=triggers[target].id),
            )
            for target in targets
        ]

    def notice(self, root: ChatMessage, notice_id: str, hop: int, text: str) -> ChatMessage:
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


def _meta(
    asked: _Asked, recall: RecallReport | None, context: ContextReport | None, **rest: Any
) -> ReplyMeta:
    """The reply's record: what the turn was given, and ``rest``."""
    return ReplyMeta(
        agent=asked.agent.id, trigger=asked.trigger.id, recall=recall, context=context, **rest
    )


def _recall_meta(result: RecallResult) -> RecallReport:
    return RecallReport(
        snippets=tuple(
            RecalledSnippet(id=s.id, score=round(s.score, 3), trust=s.trust)
            for s in result.snippets
        ),
        dropped=result.dropped,
    )


def _tools_meta(result: TurnResult) -> ToolsMeta | None:
    """Each tool call and each step's tokens, when the model called tools."""
    if not result.exchanges:
        return None
    calls = tuple(
        ToolCallMeta(
            name=call.name,
            input_chars=res.input_chars,
            result_chars=len(res.content),
            is_error=res.is_error,
            line=describe(call, res),
        )
        for exchange in result.exchanges
        for call, res in zip(exchange.calls, exchange.results, strict=True)
    )
    return ToolsMeta(calls=calls, steps=tuple(step.usage for step in result.steps))


def _turn_meta(result: TurnResult) -> TurnMeta:
    """The last call's model and stop reason; every step's tokens and time together."""
    completion = result.completion
    steps = result.steps or (completion,)
    usage = Usage(
        input_tokens=sum(s.usage.input_tokens for s in steps),
        output_tokens=sum(s.usage.output_tokens for s in steps),
        cache_read_tokens=sum(s.usage.cache_read_tokens for s in steps),
        cache_creation_tokens=sum(s.usage.cache_creation_tokens for s in steps),
    )
    return TurnMeta(
        provider=completion.provider,
        model=completion.model,
        latency_ms=round(sum(s.latency_ms for s in steps), 1),
        stop_reason=completion.stop_reason,
        usage=usage,
        # How many calls the answer took, and why the earlier ones failed (429, 529, ...).
        failed_attempts=tuple(f for s in steps for f in s.failed_attempts),
    )


async def _stored(memory: MemoryWriter, markers: Sequence[Marker], origin: Origin) -> WriteReport:
    """The markers stored on the event loop when that waits for nothing (the usual reply: one
    memory saved), else in a worker thread: handing it over costs more than the write."""
    applied = memory.apply_now(markers, origin)
    if applied is None:
        return await asyncio.to_thread(memory.apply, markers, origin)
    if applied.checkpoints:
        await asyncio.to_thread(memory.note_checkpoints, applied.checkpoints)
    return applied.report
