"""The context an agent's next turn in a group would get, built as a turn builds it, without a
model call and without writing anything (``arena context`` and the console's context
inspector show it)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from orchestrator.core.context.build import BuiltContext, ContextLimits, build_context
from orchestrator.core.models import AgentSpec, ChatMessage, MessageKind
from orchestrator.core.wire import DEFAULT_SENDER
from orchestrator.memory.conversation.store import HistoryStore
from orchestrator.runtime.wiring import Wiring

__all__ = ["Preview", "next_trigger", "preview"]


@dataclass(frozen=True, slots=True)
class Preview:
    """A turn's context as it would be built, and the limits it was built within."""

    built: BuiltContext
    limits: ContextLimits

    def as_json(self, agent: AgentSpec, group: str) -> dict[str, Any]:
        """The request (system prompt, its per-turn tail, the turns), the cost report and the
        layers' budgets, as ``arena context --json`` prints them."""
        request = self.built.request
        budgets = self.limits.budgets
        return {
            "agent": agent.id,
            "group": group,
            "model": request.model,
            "system": request.system,
            "system_tail": request.system_tail,
            "messages": [dict(m) for m in request.messages],
            "report": self.built.report.as_json(),
            "budgets": {
                "identity": budgets.identity,
                "summary": budgets.summary,
                "memory_md": budgets.memory_md,
                "logs": budgets.logs,
                "recall": budgets.recall,
            },
        }


def next_trigger(store: HistoryStore, group: str, message: str | None) -> ChatMessage:
    """``message`` as if posted next; without one, the group's latest message (or a
    placeholder when it has none)."""
    if message is None and (latest := store.recent(group, 1)):
        return latest[0].message
    return ChatMessage(
        id="next",
        group=group,
        sender=DEFAULT_SENDER,
        kind=MessageKind.HUMAN,
        text=message if message is not None else "(no message yet)",
        created_at=datetime.now(UTC),
    )


def preview(wiring: Wiring, agent: AgentSpec, trigger: ChatMessage) -> Preview:
    """What ``agent``'s turn on ``trigger`` would be given (a dry run: recalled memories are
    not marked as used)."""
    now = datetime.now(UTC)
    gathered = wiring.briefing().gather(agent, trigger, now)
    limits = wiring.tuning.limits(agent, wiring.drift().factor(agent.model))
    built = build_context(
        agent=agent,
        agents=wiring.team.agents,
        layers=gathered.layers,
        trigger=trigger,
        prompts=wiring.prompts,
        now=now.astimezone(wiring.tuning.zone),
        limits=limits,
        transcript=wiring.transcript,
    )
    return Preview(built=built, limits=limits)
