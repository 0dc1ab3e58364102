"""The token budget of one agent turn: which layers of context it gets, and how much of each.

Pure planning over texts and pre-counted messages; no I/O. Layers are filled in this order,
each first capped to its own budget (:class:`LayerBudgets`):

1. identity (CLAUDE.md + SOUL.md), keeping its start;
2. the group's rolling summary, keeping its start;
3. the agent's MEMORY.md, keeping its newest lines;
4. today's and yesterday's personal logs, keeping their newest lines;
5. recalled session memories, best score first, as many as fit;
6. recent history, newest first, in whatever remains of the window after the reserved
   output, the fixed prompt text and the layers above. The trigger message is always kept,
   and so are the newest ``min_history_messages`` messages, even when they overflow.

When the total still exceeds the window, degrade in this fixed order, stopping as soon as
it fits:

1. drop recalled memories, lowest score first, until none are left;
2. trim older agent replies (not the trigger, not the 2 newest messages) to head+tail
   with a marker;
3. shrink the history window, oldest first, never the trigger;
4. truncate the logs, down to nothing if needed;
5. shrink MEMORY.md to its newest lines, down to nothing if needed;
6. truncate the summary, down to nothing if needed.

Identity is never dropped or shrunk below its own budget cap. If identity, the trigger and
the fixed prompt text alone exceed the window, the plan keeps them anyway and is marked
over budget. Every step taken, and every cut made by a cap, is recorded in the plan's
decisions, in order.

Every estimate is multiplied by the request's correction factor (see
:class:`orchestrator.core.tokens.DriftCorrector`) before it is compared with a budget.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

from orchestrator.core.tokens import TokenCounter

__all__ = [
    "BudgetRequest",
    "ContextPlan",
    "HistoryItem",
    "LayerBudgets",
    "RecallItem",
    "plan_context",
]

logger = logging.getLogger(__name__)

# Trimming older agent replies never touches the newest messages: they carry the thread.
PROTECTED_NEWEST = 2


@dataclass(frozen=True, slots=True, kw_only=True)
class LayerBudgets:
    """Token caps of layers 1 to 5, and how history behaves when the window is tight.

    ``min_history_messages`` newest messages are kept even when they overflow what remains,
    so that the degradation steps, not the fill, decide what to give up. An older agent reply
    trimmed in degradation step 2 is cut to ``trimmed_reply`` tokens.
    """

    identity: int = 500
    summary: int = 500
    memory_md: int = 800
    logs: int = 600
    recall: int = 400
    min_history_messages: int = 6
    trimmed_reply: int = 120

    def __post_init__(self) -> None:
        for name in ("identity", "summary", "memory_md", "logs", "recall", "trimmed_reply"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} budget must be >= 0")
        if self.min_history_messages < 1:
            raise ValueError("min_history_messages must be >= 1 (the trigger)")


@dataclass(frozen=True, slots=True, kw_only=True)
class HistoryItem:
    """One message as the model will see it (label included), with its stored token count.

    ``date`` is the date its label leaves out, because an earlier message states that day,
    with its tokens: when the item is the oldest labelled one shown, the plan puts the date
    back (after the label's opening ``[``)."""

    id: str
    text: str
    tokens: int
    own_reply: bool = False
    agent_reply: bool = False
    date: str = ""
    date_tokens: int = 0

    def __post_init__(self) -> None:
        if self.tokens < 0:
            raise ValueError("tokens must be >= 0")


@dataclass(frozen=True, slots=True, kw_only=True)
class RecallItem:
    """One recalled session memory as it will be shown, with its token count and score."""

    id: str
    text: str
    tokens: int
    score: float

    def __post_init__(self) -> None:
        if self.tokens < 0:
            raise ValueError("tokens must be >= 0")


@dataclass(frozen=True, slots=True, kw_only=True)
class BudgetRequest:
    """Everything one turn could show the model, before budgeting.

    ``overhead_tokens`` counts the fixed prompt text (rules, roster, memory guide, tail).
    ``history`` is oldest first and its last item is the trigger, which is always kept.
    """

    window: int
    reserved_output: int
    overhead_tokens: int
    identity: str
    summary: str = ""
    memory_md: str = ""
    logs: str = ""
    recall: Sequence[RecallItem] = ()
    history: Sequence[HistoryItem]
    correction: float = 1.0

    def __post_init__(self) -> None:
        if self.window < 1:
            raise ValueError("window must be >= 1")
        if self.reserved_output < 0 or self.overhead_tokens < 0:
            raise ValueError("reserved_output and overhead_tokens must be >= 0")
        if not self.history:
            raise ValueError("history must end with the trigger message")
        if not (math.isfinite(self.correction) and self.correction > 0):
            raise ValueError("correction must be a positive number")


@dataclass(frozen=True, slots=True, kw_only=True)
class ContextPlan:
    """What the turn shows the model, with its estimated tokens and the decisions taken.

    ``tokens`` holds corrected estimates for identity, summary, memory_md, logs, recall,
    history, overhead and total.
    """

    identity: str
    summary: str
    memory_md: str
    logs: str
    recall: tuple[RecallItem, ...]
    history: tuple[HistoryItem, ...]
    tokens: Mapping[str, int]
    available: int
    decisions: tuple[str, ...]
    over_budget: bool

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready summary for the context cost report."""
        return {
            "available": self.available,
            "tokens": dict(self.tokens),
            "decisions": list(self.decisions),
            "over_budget": self.over_budget,
            "recall": [item.id for item in self.recall],
            "history_messages": len(self.history),
        }


@dataclass(slots=True, kw_only=True)
class _Draft:
    """The plan while it is being built; token counts here are raw, before correction."""

    counter: TokenCounter
    correction: float
    available: int
    overhead: int
    texts: dict[str, str] = field(default_factory=dict)
    raw: dict[str, int] = field(default_factory=dict)
    recall: list[RecallItem] = field(default_factory=list)
    history: list[HistoryItem] = field(default_factory=list)
    decisions: list[str] = field(default_factory=list)

    def scaled(self, raw: int) -> int:
        return math.ceil(raw * self.correction)

    def raw_limit(self, budget: int) -> int:
        """The most raw tokens whose corrected estimate stays within ``budget``."""
        if budget <= 0:
            return 0
        limit = math.floor(budget / self.correction)
        while limit > 0 and self.scaled(limit) > budget:
            limit -= 1
        return limit

    def tokens(self) -> dict[str, int]:
        layers = ("identity", "summary", "memory_md", "logs", "recall", "history")
        out = {layer: self.scaled(self.raw.get(layer, 0)) for layer in layers}
        out["overhead"] = self.scaled(self.overhead)
        out["total"] = sum(out.values())
        return out

    def excess(self) -> int:
        return self.tokens()["total"] - self.available


def _count(n: int, singular: str, plural: str) -> str:
    return f"{n} {singular if n == 1 else plural}"


_CAP_NOTES = {
    "identity": "identity truncated to its {budget}-token budget",
    "summary": "summary truncated to its {budget}-token budget",
    "memory_md": "MEMORY.md kept to its newest lines within its {budget}-token budget",
    "logs": "logs kept to their newest lines within their {budget}-token budget",
}


def _cap_texts(draft: _Draft, request: BudgetRequest, budgets: LayerBudgets) -> None:
    """Layers 1 to 4: cap each text to its own budget."""
    counter = draft.counter
    trimmers: dict[str, Callable[[str, int], str]] = {
        "identity": counter.truncate_head,
        "summary": counter.truncate_head,
        "memory_md": counter.keep_tail_lines,
        "logs": counter.keep_tail_lines,
    }
    for layer, trim in trimmers.items():
        text: str = getattr(request, layer)
        budget: int = getattr(budgets, layer)
        raw = counter.count(text)
        limit = draft.raw_limit(budget)
        if raw > limit:
            text = trim(text, limit)
            raw = counter.count(text)
            draft.decisions.append(_CAP_NOTES[layer].format(budget=budget))
        draft.texts[layer] = text
        draft.raw[layer] = raw


def _cap_recall(draft: _Draft, recall: Sequence[RecallItem], budget: int) -> None:
    """Layer 5: the best-scored recalled memories that fit the recall budget."""
    limit = draft.raw_limit(budget)
    used = 0
    for item in sorted(recall, key=lambda r: r.score, reverse=True):
        if used + item.tokens <= limit:
            draft.recall.append(item)
            used += item.tokens
    draft.raw["recall"] = used
    left_out = len(recall) - len(draft.recall)
    if left_out:
        draft.decisions.append(
            f"left out {left_out} of {_count(len(recall), 'recalled memory', 'recalled memories')}"
            f" beyond the {budget}-token recall budget"
        )


def _fill_history(draft: _Draft, history: Sequence[HistoryItem], min_messages: int) -> None:
    """Layer 6: newest first into what remains; stops at the first message that does not fit."""
    remaining = draft.available - draft.tokens()["total"]
    room = draft.raw_limit(remaining)
    fitted = used = 0
    for item in reversed(history):
        if used + item.tokens > room:
            break
        used += item.tokens
        fitted += 1
    keep = max(fitted, min(min_messages, len(history)))
    draft.history = list(history[len(history) - keep :])
    draft.raw["history"] = used if keep == fitted else sum(item.tokens for item in draft.history)
    left_out = len(history) - keep
    omitted = f"{_count(left_out, 'oldest message', 'oldest messages')} left out"
    if keep > fitted:
        note = f"history kept its newest {_count(keep, 'message', 'messages')} (the minimum)"
        note += f" over the {max(remaining, 0)} tokens that remained"
        draft.decisions.append(f"{note}; {omitted}" if left_out else note)
    elif left_out:
        draft.decisions.append(f"history filled the {remaining} tokens that remained: {omitted}")


def _state_first_date(draft: _Draft) -> None:
    """The oldest labelled message shown states its date: the ones after it may give only
    their time."""
    for index, item in enumerate(draft.history):
        if item.own_reply:
            continue
        if item.date:
            text = item.text[:1] + item.date + item.text[1:]
            tokens = item.tokens + item.date_tokens
            draft.history[index] = replace(item, text=text, tokens=tokens, date="", date_tokens=0)
            draft.raw["history"] += item.date_tokens
        return


def _drop_recall(draft: _Draft) -> None:
    """Degradation 1: drop recalled memories, lowest score first."""
    dropped = 0
    while draft.recall and draft.excess() > 0:
        draft.raw["recall"] -= draft.recall.pop().tokens
        dropped += 1
    if dropped:
        draft.decisions.append(f"dropped {_count(dropped, 'recalled memory', 'recalled memories')}")


def _trim_replies(draft: _Draft, budget: int) -> None:
    """Degradation 2: trim older agent replies to head+tail, oldest first."""
    target = draft.raw_limit(budget)
    trimmed = 0
    for index in range(len(draft.history) - PROTECTED_NEWEST):
        if draft.excess() <= 0:
            break
        item = draft.history[index]
        if not (item.agent_reply or item.own_reply) or item.tokens <= target:
            continue
        text = draft.counter.head_tail(item.text, target)
        tokens = draft.counter.count(text)
        if tokens < item.tokens:
            draft.history[index] = replace(item, text=text, tokens=tokens)
            draft.raw["history"] -= item.tokens - tokens
            trimmed += 1
    if trimmed:
        replies = _count(trimmed, "older agent reply", "older agent replies")
        draft.decisions.append(f"trimmed {replies} to head+tail")


def _shrink_window(draft: _Draft) -> None:
    """Degradation 3: leave out the oldest messages, never the trigger."""
    drop = 0
    while drop < len(draft.history) - 1 and draft.excess() > 0:
        draft.raw["history"] -= draft.history[drop].tokens
        drop += 1
    del draft.history[:drop]
    if drop:
        omitted = _count(drop, "oldest message", "oldest messages")
        draft.decisions.append(f"history window shrunk: {omitted} left out")


def _shrink_text(
    layer: str, trim: Callable[[str, int], str], note: str
) -> Callable[[_Draft], None]:
    """Degradations 4 to 6: cut one text layer by the excess, down to nothing if needed."""

    def step(draft: _Draft) -> None:
        if not draft.texts[layer]:
            return
        target = max(0, draft.scaled(draft.raw[layer]) - draft.excess())
        text = trim(draft.texts[layer], draft.raw_limit(target))
        draft.texts[layer] = text
        draft.raw[layer] = draft.counter.count(text)
        draft.decisions.append(note.format(tokens=draft.scaled(draft.raw[layer])))

    return step


def _degrade(draft: _Draft, budgets: LayerBudgets) -> None:
    counter = draft.counter
    steps: tuple[Callable[[_Draft], None], ...] = (
        _drop_recall,
        lambda d: _trim_replies(d, budgets.trimmed_reply),
        _shrink_window,
        _shrink_text("logs", counter.keep_tail_lines, "logs truncated to {tokens} tokens"),
        _shrink_text(
            "memory_md",
            counter.keep_tail_lines,
            "MEMORY.md shrunk to its newest lines ({tokens} tokens)",
        ),
        _shrink_text("summary", counter.truncate_head, "summary truncated to {tokens} tokens"),
    )
    for step in steps:
        if draft.excess() <= 0:
            return
        step(draft)


def plan_context(
    request: BudgetRequest,
    budgets: LayerBudgets | None = None,
    counter: TokenCounter | None = None,
) -> ContextPlan:
    """Decide what of each layer fits the window, degrading in the documented order.

    Only the identity, summary, MEMORY.md and logs texts, and history items that get
    trimmed, are tokenised; history and recall otherwise use their stored counts.

    Args:
        request: the candidate layers, the window and the correction factor.
        budgets: caps of layers 1 to 5; the defaults when omitted.
        counter: the token counter to use; a new one when omitted.

    Returns:
        The plan: the texts and items to show, corrected token estimates per layer and
        every decision taken.
    """
    budgets = budgets or LayerBudgets()
    draft = _Draft(
        counter=counter or TokenCounter(),
        correction=request.correction,
        available=request.window - request.reserved_output,
        overhead=request.overhead_tokens,
    )
    _cap_texts(draft, request, budgets)
    _cap_recall(draft, request.recall, budgets.recall)
    _fill_history(draft, request.history, budgets.min_history_messages)
    _degrade(draft, budgets)
    _state_first_date(draft)
    tokens = draft.tokens()
    over_budget = tokens["total"] > draft.available
    if over_budget:
        draft.decisions.append(
            f"over budget: identity, trigger and fixed prompt text need {tokens['total']}"
            f" tokens but only {draft.available} are available"
        )
    logger.debug(
        "context plan: %d/%d tokens, %s", tokens["total"], draft.available, draft.decisions
    )
    return ContextPlan(
        identity=draft.texts["identity"],
        summary=draft.texts["summary"],
        memory_md=draft.texts["memory_md"],
        logs=draft.texts["logs"],
        recall=tuple(draft.recall),
        history=tuple(draft.history),
        tokens=MappingProxyType(tokens),
        available=draft.available,
        decisions=tuple(draft.decisions),
        over_budget=over_budget,
    )
