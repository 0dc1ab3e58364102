"""What an agent sees at its turn, within its token budget.

The system prompt has a stable prefix (identity, rules, memory guide, the team: cached by
the provider) and a dynamic tail (time, group, the agent's own notes, and one references
block with the group's summary and recalled memories, each with its trust label and
citation). The conversation follows: everyone's messages are shown, the agent's own earlier
replies as ``assistant`` turns, everything else as labelled ``user`` turns. How much of each
layer fits is decided by :func:`orchestrator.core.budget.plan_context`. Marker-shaped text in
anything the agent did not just write itself is neutralised, so quoting a marker can never
make an agent save something.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import lru_cache
from typing import Any, Protocol
from zoneinfo import ZoneInfo

from orchestrator.core.budget import (
    BudgetRequest,
    ContextPlan,
    HistoryItem,
    LayerBudgets,
    RecallItem,
)
from orchestrator.core.budget import plan_context as plan_budget
from orchestrator.core.markers import neutralise
from orchestrator.core.models import AgentSpec, ChatMessage, LLMRequest, MessageKind
from orchestrator.core.prompts import Prompts
from orchestrator.core.tokens import TokenCounter

__all__ = [
    "BuiltContext",
    "ContextLimits",
    "Identity",
    "Layers",
    "PastMessage",
    "Reference",
    "SaidReference",
    "build_context",
    "conversation",
]


class Cited(Protocol):
    """Where a recalled memory came from."""

    @property
    def ref(self) -> str: ...

    @property
    def locator(self) -> str: ...


class Reference(Protocol):
    """A recalled memory as the context needs it (``memory.recall.Snippet`` is one)."""

    @property
    def id(self) -> int: ...

    @property
    def type(self) -> str: ...

    @property
    def trust(self) -> str: ...

    @property
    def score(self) -> float: ...

    @property
    def content(self) -> str: ...

    @property
    def created_at(self) -> datetime: ...

    @property
    def citation(self) -> Cited | None: ...


class Spoken(Protocol):
    """A stored message as a recalled reference shows it (``memory.history_index.Said``)."""

    @property
    def id(self) -> str: ...

    @property
    def sender(self) -> str: ...

    @property
    def text(self) -> str: ...

    @property
    def created_at(self) -> datetime: ...


class Left(Protocol):
    """A candidate recall left out, and why (``memory.recall.Dropped`` is one)."""

    @property
    def id(self) -> int | str: ...

    @property
    def layer(self) -> str: ...

    @property
    def reason(self) -> str: ...


class SaidReference(Protocol):
    """An earlier message recalled for this turn and, when it answers another sender's
    question, the message before it and that question (``memory.recall.RecalledMessage``
    is one)."""

    @property
    def said(self) -> Spoken: ...

    @property
    def previous(self) -> Spoken | None: ...

    @property
    def question(self) -> str: ...

    @property
    def score(self) -> float: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class Identity:
    """An agent's identity files: CLAUDE.md (its role) and SOUL.md (its character)."""

    claude: str = ""
    soul: str = ""

    def text(self) -> str:
        """Both files as one text, the role first."""
        return "\n\n".join(part.strip() for part in (self.claude, self.soul) if part.strip())


@dataclass(frozen=True, slots=True, kw_only=True)
class PastMessage:
    """A stored message with its token count (counted once, when it was stored)."""

    message: ChatMessage
    tokens: int


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


@dataclass(frozen=True, slots=True, kw_only=True)
class ContextLimits:
    """The window and the per-layer budgets of one agent."""

    window: int = 200_000
    reserved_output: int = 1024
    budgets: LayerBudgets = field(default_factory=LayerBudgets)
    correction: float = 1.0


@dataclass(frozen=True, slots=True, kw_only=True)
class BuiltContext:
    """The request to send, the plan that shaped it, and the report to keep with the reply."""

    request: LLMRequest
    plan: ContextPlan
    report: Mapping[str, Any]


def stamp(moment: datetime, tz: str) -> str:
    """A message's date and time as the agent sees it, in the configured zone."""
    return moment.astimezone(ZoneInfo(tz)).strftime("%Y-%m-%d %H:%M")


def _prefix(message: ChatMessage, tz: str, dated: bool = True) -> str:
    """The label before a message: when, who and what ("[2026-03-01 14:05 alex (human)]: ",
    or without the date: "[14:05 alex (human)]: ")."""
    when = stamp(message.created_at, tz)
    when = when if dated else when[len(_day(message, tz)) + 1 :]
    if message.kind is MessageKind.NOTICE:
        return f"[{when} arena notice]: "
    return f"[{when} {message.sender} ({message.kind.value})]: "


def _day(message: ChatMessage, tz: str) -> str:
    return _day_of(message.created_at, tz)


@lru_cache(maxsize=16384)
def _day_of(moment: datetime, tz: str) -> str:
    return stamp(moment, tz)[:10]


def _history_item(
    agent_id: str,
    message: ChatMessage,
    tokens: int,
    context: tuple[TokenCounter, str, bool],
) -> HistoryItem:
    """A stored message as ``agent_id`` sees it: its own replies unlabelled (a dated label
    there would teach the model to start its replies with one), everything else labelled
    with its time and sender, and its date unless the message labelled before it is of the
    same day (``context``: the counter, the zone and that), marker-shaped text neutralised
    in both (rows stored before markers of every spelling were stripped may hold one)."""
    if message.kind is MessageKind.AGENT and message.sender == agent_id:
        return _own_reply(message, tokens)
    counter, tz, same_day = context
    return _labelled(message, tokens, counter, tz, not same_day)


# Both remembered, because a group's recent messages are shown again at every turn; a
# labelled message is the same for every agent, so it is labelled (and its label's tokens
# counted) once, whichever agent sees it, the turn it is the trigger included.
@lru_cache(maxsize=4096)
def _own_reply(message: ChatMessage, tokens: int) -> HistoryItem:
    text = neutralise(message.text)
    return HistoryItem(id=message.id, text=text, tokens=tokens, own_reply=True, agent_reply=True)


@lru_cache(maxsize=16384)
def _labelled(
    message: ChatMessage, tokens: int, counter: TokenCounter, tz: str, dated: bool = True
) -> HistoryItem:
    prefix = _prefix(message, tz, dated)
    label_tokens = counter.count(prefix)
    date = "" if dated else _day(message, tz) + " "
    return HistoryItem(
        id=message.id,
        text=prefix + neutralise(message.text),
        tokens=tokens + label_tokens,
        agent_reply=message.kind is MessageKind.AGENT,
        date=date,
        date_tokens=counter.count(_prefix(message, tz)) - label_tokens if date else 0,
    )


def _history_items(
    agent_id: str,
    history: Sequence[PastMessage],
    trigger: ChatMessage,
    counter: TokenCounter,
    tz: str,
) -> tuple[list[HistoryItem], dict[str, str]]:
    """Planner items (trigger last) and each item's role. A labelled message states its date
    only when the one labelled before it is of another day."""
    items: list[HistoryItem] = []
    roles: dict[str, str] = {}
    trigger_tokens = None
    day = ""
    for past in history:
        if past.message.id == trigger.id:
            if trigger_tokens is None:
                trigger_tokens = past.tokens
            continue
        item = _history_item(
            agent_id, past.message, past.tokens, (counter, tz, _day(past.message, tz) == day)
        )
        if not item.own_reply:
            day = _day(past.message, tz)
        items.append(item)
        roles[item.id] = "assistant" if item.own_reply else "user"
    base = trigger_tokens if trigger_tokens is not None else counter.count(trigger.text)
    items.append(_labelled(trigger, base, counter, tz, _day(trigger, tz) != day))
    roles[trigger.id] = "user"
    return items, roles


def conversation(
    items: Sequence[HistoryItem], roles: Mapping[str, str]
) -> tuple[Mapping[str, str], ...]:
    """Alternating user/assistant turns, merging neighbours of one role; starts with a user."""
    turns: list[dict[str, str]] = []
    for item in items:
        role = roles[item.id]
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"] += "\n\n" + item.text
        else:
            turns.append({"role": role, "content": item.text})
    while turns and turns[0]["role"] != "user":
        turns.pop(0)
    return tuple(turns)


def _reference_line(ref: Reference) -> str:
    citation = ref.citation
    source = (citation.locator or citation.ref) if citation else "no source"
    day = ref.created_at.strftime("%Y-%m-%d")
    return f"({ref.type}, {ref.trust}, {day}, source: {source}) {neutralise(ref.content)}"


def _said_line(said: Spoken, tz: str, answers: str = "") -> str:
    """One recalled message: its trust label (who said it, when), its id as citation, what it
    answers, then its text. All on one line, so no line of it can pass for another reference."""
    text = " ".join(neutralise(said.text).split())
    label = f"said by {said.sender} on {stamp(said.created_at, tz)} (message {said.id})"
    return f"{label}{answers}: {text}"


def _said_lines(ref: SaidReference, tz: str) -> str:
    """A recalled message, with the question it answers when it answers one."""
    if ref.previous is None or not ref.question:
        return _said_line(ref.said, tz)
    asked = " ".join(neutralise(ref.question).split())
    return _said_line(ref.said, tz, f', answering {ref.previous.sender}\'s "{asked}"')


def _recall_items(layers: Layers, tz: str, counter: TokenCounter) -> list[RecallItem]:
    """Recalled memories and messages as the planner takes them, ranked together."""
    items = [
        RecallItem(id=str(r.id), text=line, tokens=counter.count(line), score=r.score)
        for r in layers.recalled
        for line in [_reference_line(r)]
    ]
    items += [
        RecallItem(id=_said_id(r), text=line, tokens=counter.count(line), score=r.score)
        for r in layers.said
        for line in [_said_lines(r, tz)]
    ]
    return items


def _said_id(ref: SaidReference) -> str:
    return f"message {ref.said.id}"


def _citations(layers: Layers, kept: set[str]) -> list[dict[str, Any]]:
    """What the references shown cite: a memory's source, or a message's id (and the id of
    the message whose question it answers)."""
    citations: list[dict[str, Any]] = [
        {"id": r.id, "ref": r.citation.ref if r.citation else None, "trust": r.trust}
        for r in layers.recalled
        if str(r.id) in kept
    ]
    for said in layers.said:
        if _said_id(said) in kept:
            shown = [said.previous, said.said] if said.previous else [said.said]
            citations += [{"id": s.id, "ref": s.id, "trust": f"said by {s.sender}"} for s in shown]
    return citations


def build_context(
    *,
    agent: AgentSpec,
    agents: Sequence[AgentSpec],
    layers: Layers,
    trigger: ChatMessage,
    prompts: Prompts,
    now: datetime,
    tz: str,
    limits: ContextLimits,
    counter: TokenCounter,
) -> BuiltContext:
    """Fit the layers into the agent's budget and build the model request.

    Raises:
        TemplateError: when a prompt template fails to render.
    """
    roster = tuple(agents)  # each member has id, name and role, read as attributes
    base: dict[str, Any] = {
        "agent": agent,
        "roster": roster,
        "group": trigger.group,
        "trigger": trigger,
        "now": now.strftime("%Y-%m-%d %H:%M"),
        "tz": tz,
    }
    empty = _render(prompts, base, identity="", summary="", memory_md="", logs="", refs=[])
    items, roles = _history_items(agent.id, layers.history, trigger, counter, tz)
    recall = _recall_items(layers, tz, counter)
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
    )
    citations = _citations(layers, {item.id for item in plan.recall})
    report = {
        "window": limits.window,
        "reserved_output": limits.reserved_output,
        "correction": limits.correction,
        **plan.as_dict(),
        "citations": citations,
        "recall_dropped": [
            {"id": d.id, "layer": d.layer, "reason": d.reason} for d in layers.left_out
        ],
    }
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
) -> tuple[str, str]:
    # Rendered every time: a template renders in about 20 us, as fast as a key covering
    # every value it reads can be worked out, and a shorter key once told the wrong sender.
    system = prompts.render("system.md.j2", **base, identity=identity).strip()
    tail = prompts.render(
        "turn.md.j2",
        **base,
        summary=summary,
        memory_md=memory_md,
        logs=logs,
        references=refs,
    ).strip()
    return system, tail
