"""What an agent sees at its turn, within its token budget.

The system prompt has a stable prefix (identity, rules, memory guide, the team: cached by
the provider) and a dynamic tail (time, group, the agent's own notes, and one references
block with the group's summary and recalled memories, each with its trust label and
citation). The conversation follows: everyone's messages are shown, the agent's own earlier
replies as ``assistant`` turns, everything else as labelled ``user`` turns. How much of each
layer fits is decided by :func:`orchestrator.core.context.budget.plan_context`. Marker-shaped
text in anything the agent did not just write itself is neutralised, so quoting a marker can
never make an agent save something. The labelled conversation is
:mod:`orchestrator.core.context.transcript`; the references block is
:mod:`orchestrator.core.context.references`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from orchestrator.core.context.budget import plan_context as plan_budget
from orchestrator.core.context.plan import BudgetRequest, ContextPlan, LayerBudgets
from orchestrator.core.context.references import (
    Known,
    Left,
    Reference,
    SaidReference,
    citations,
    recall_items,
)
from orchestrator.core.context.report import ContextReport, LayerTokens, LeftOutCandidate
from orchestrator.core.context.transcript import PastMessage, Transcript, conversation
from orchestrator.core.markers import neutralise
from orchestrator.core.models import AgentSpec, ChatMessage, LLMRequest, minute_text
from orchestrator.core.prompts import Prompts
from orchestrator.core.quick_init import quick_init

__all__ = [
    "BuiltContext",
    "ContextLimits",
    "Identity",
    "Layers",
    "PastMessage",
    "build_context",
]


@quick_init
@dataclass(frozen=True, slots=True, kw_only=True)
class Identity:
    """An agent's identity files: CLAUDE.md (its role) and SOUL.md (its character)."""

    claude: str = ""
    soul: str = ""

    def text(self) -> str:
        """Both files as one text, the role first."""
        claude, soul = self.claude.strip(), self.soul.strip()
        return f"{claude}\n\n{soul}" if claude and soul else claude or soul


@quick_init
@dataclass(frozen=True, slots=True, kw_only=True)
class Layers:
    """Everything an agent could see at a turn, before the budget is applied."""

    identity: Identity
    summary: str = ""
    memory_md: str = ""
    logs: str = ""
    recalled: Sequence[Reference] = ()
    said: Sequence[SaidReference] = ()
    history: Sequence[PastMessage] = ()
    left_out: Sequence[Left] = ()  # what recall's layers dropped, for the cost report
    knowledge: Sequence[Known] = ()  # passages of the sources this turn may see


@quick_init
@dataclass(frozen=True, slots=True, kw_only=True)
class ContextLimits:
    """The window and the per-layer budgets of one agent (the daemon's come from ``Settings``
    and the agent's YAML: see :meth:`orchestrator.runtime.tuning.Tuning.limits`)."""

    window: int
    reserved_output: int
    budgets: LayerBudgets
    correction: float = 1.0


@quick_init
@dataclass(frozen=True, slots=True, kw_only=True)
class BuiltContext:
    """The request to send, the plan that shaped it, and the report to keep with the reply."""

    request: LLMRequest
    plan: ContextPlan
    report: ContextReport


def build_context(
    *,
    agent: AgentSpec,
    agents: Sequence[AgentSpec],
    layers: Layers,
    trigger: ChatMessage,
    prompts: Prompts,
    now: datetime,
    limits: ContextLimits,
    transcript: Transcript,
) -> BuiltContext:
    """Fit the layers into the agent's budget and build the model request (``transcript``
    labels the conversation and holds the zone and the token counter).

    Raises:
        TemplateError: when a prompt template fails to render.
    """
    counter, tz = transcript.counter, transcript.tz
    roster = tuple(agents)  # each member has id, name and role, read as attributes
    base: dict[str, Any] = {
        "agent": agent,
        "roster": roster,
        "group": trigger.group,
        "trigger": trigger,
        "now": minute_text(now),
        "tz": tz,
    }
    # The prompt's own text, every layer empty: the same for a while in each group.
    empty = _render(
        prompts, base, identity="", summary="", memory_md="", logs="", refs=(), kept=True
    )
    items, roles = transcript.items(agent.id, layers.history, trigger)
    recall = recall_items(
        layers.recalled, layers.said, tz, counter, transcript.lines, layers.knowledge
    )
    plan = plan_budget(
        BudgetRequest(
            window=limits.window,
            reserved_output=limits.reserved_output,
            overhead_tokens=counter.count(empty[0]) + counter.count(empty[1]),
            identity=layers.identity.text(),
            summary=layers.summary,
            memory_md=layers.memory_md,
            logs=layers.logs,
            recall=recall,
            history=items,
            correction=limits.correction,
        ),
        limits.budgets,
        counter,
    )
    system, tail = _render(
        prompts,
        base,
        identity=plan.identity,
        summary=neutralise(plan.summary),
        memory_md=neutralise(plan.memory_md),
        logs=neutralise(plan.logs),
        refs=[item.text for item in plan.recall],
        knowledge=bool(layers.knowledge),
    )
    shown = {item.id for item in plan.recall}
    cited = citations(layers.recalled, layers.said, shown, layers.knowledge)
    report = ContextReport(
        window=limits.window,
        reserved_output=limits.reserved_output,
        correction=limits.correction,
        available=plan.available,
        tokens=LayerTokens.of(plan.tokens),
        decisions=plan.decisions,
        over_budget=plan.over_budget,
        recall=tuple(item.id for item in plan.recall),
        history_messages=len(plan.history),
        citations=cited,
        recall_dropped=tuple(
            d
            if type(d) is LeftOutCandidate
            else LeftOutCandidate(id=d.id, layer=d.layer, reason=d.reason)
            for d in layers.left_out
        ),
    )
    request = LLMRequest(
        agent=agent,
        trigger=trigger,
        model=agent.model,
        system=system,
        system_tail=tail,
        messages=conversation(plan.history, roles),
        max_tokens=limits.reserved_output,
        temperature=agent.temperature,
    )
    return BuiltContext(request=request, plan=plan, report=report)


def _render(
    prompts: Prompts,
    base: Mapping[str, Any],
    *,
    identity: str,
    summary: str,
    memory_md: str,
    logs: str,
    refs: Sequence[str],
    kept: bool = False,
    knowledge: bool = False,
) -> tuple[str, str]:
    # The stable prefix: rendered again only when a value it reads changes (the team, the
    # group, the identity); the tail with the layers (``kept`` False) at every turn.
    system = prompts.render_kept_stripped("system.md.j2", **base, identity=identity)
    layers = {"summary": summary, "memory_md": memory_md, "logs": logs, "references": refs}
    if kept:
        tail = prompts.render_kept_stripped("turn.md.j2", **base, **layers, knowledge=knowledge)
    else:
        tail = prompts.render("turn.md.j2", **base, **layers, knowledge=knowledge).strip()
    return system, tail
