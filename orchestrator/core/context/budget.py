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
:class:`orchestrator.core.context.tokens.DriftCorrector`) before it is compared with a budget.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from operator import attrgetter
from types import MappingProxyType

from orchestrator.core.context.degrade import DraftPlan, count_of, degrade
from orchestrator.core.context.plan import (
    BudgetRequest,
    ContextPlan,
    HistoryItem,
    LayerBudgets,
    RecallItem,
)
from orchestrator.core.context.tokens import TokenCounter

__all__ = [
    "BudgetRequest",
    "ContextPlan",
    "HistoryItem",
    "LayerBudgets",
    "RecallItem",
    "plan_context",
]

logger = logging.getLogger(__name__)

_CAP_NOTES = {
    "identity": "identity truncated to its {budget}-token budget",
    "summary": "summary truncated to its {budget}-token budget",
    "memory_md": "MEMORY.md kept to its newest lines within its {budget}-token budget",
    "logs": "logs kept to their newest lines within their {budget}-token budget",
}

_TRIMMERS: dict[str, Callable[[TokenCounter], Callable[[str, int], str]]] = {
    "identity": attrgetter("truncate_head"),
    "summary": attrgetter("truncate_head"),
    "memory_md": attrgetter("keep_tail_lines"),
    "logs": attrgetter("keep_tail_lines"),
}


def _cap_texts(draft: DraftPlan, request: BudgetRequest, budgets: LayerBudgets) -> None:
    """Layers 1 to 4: cap each text to its own budget."""
    counter = draft.counter
    count, texts, counts = counter.count, draft.texts, draft.raw
    for layer, text, budget in (
        ("identity", request.identity, budgets.identity),
        ("summary", request.summary, budgets.summary),
        ("memory_md", request.memory_md, budgets.memory_md),
        ("logs", request.logs, budgets.logs),
    ):
        raw = count(text)
        limit = draft.raw_limit(budget)
        if raw > limit:
            trim = _TRIMMERS[layer](counter)
            text = trim(text, limit)
            raw = count(text)
            draft.decisions.append(_CAP_NOTES[layer].format(budget=budget))
        texts[layer] = text
        counts[layer] = raw


_SCORE = attrgetter("score")


def _cap_recall(draft: DraftPlan, recall: Sequence[RecallItem], budget: int) -> None:
    """Layer 5: the best-scored recalled memories that fit the recall budget."""
    limit = draft.raw_limit(budget)
    used = 0
    for item in sorted(recall, key=_SCORE, reverse=True):
        if used + item.tokens <= limit:
            draft.recall.append(item)
            used += item.tokens
    draft.raw["recall"] = used
    left_out = len(recall) - len(draft.recall)
    if left_out:
        memories = count_of(len(recall), "recalled memory", "recalled memories")
        draft.decisions.append(
            f"left out {left_out} of {memories} beyond the {budget}-token recall budget"
        )


def _fill_history(draft: DraftPlan, history: Sequence[HistoryItem], min_messages: int) -> None:
    """Layer 6: newest first into what remains; stops at the first message that does not fit."""
    remaining = -draft.excess()  # what is available less the plan's total
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
    if keep > fitted:
        note = f"history kept its newest {count_of(keep, 'message', 'messages')} (the minimum)"
        note += f" over the {max(remaining, 0)} tokens that remained"
        draft.decisions.append(f"{note}; {_omitted(left_out)}" if left_out else note)
    elif left_out:
        draft.decisions.append(
            f"history filled the {remaining} tokens that remained: {_omitted(left_out)}"
        )


def _omitted(left_out: int) -> str:
    return f"{count_of(left_out, 'oldest message', 'oldest messages')} left out"


def _state_first_date(draft: DraftPlan) -> None:
    """The oldest labelled message shown states its date: the ones after it may give only
    their time."""
    for index, item in enumerate(draft.history):
        if item.own_reply:
            continue
        if item.date:
            text = item.text[:1] + item.date + item.text[1:]
            tokens = item.tokens + item.date_tokens
            draft.history[index] = HistoryItem(
                id=item.id,
                text=text,
                tokens=tokens,
                own_reply=item.own_reply,
                agent_reply=item.agent_reply,
            )
            draft.raw["history"] += item.date_tokens
        return


def plan_context(
    request: BudgetRequest,
    budgets: LayerBudgets,
    counter: TokenCounter | None = None,
) -> ContextPlan:
    """Decide what of each layer fits the window, degrading in the documented order.

    Only the identity, summary, MEMORY.md and logs texts, and history items that get
    trimmed, are tokenised; history and recall otherwise use their stored counts.

    Args:
        request: the candidate layers, the window and the correction factor.
        budgets: caps of layers 1 to 5 and the history rules.
        counter: the token counter to use; a new one when omitted.

    Returns:
        The plan: the texts and items to show, corrected token estimates per layer and
        every decision taken.
    """
    draft = DraftPlan(
        counter=counter or TokenCounter(),
        correction=request.correction,
        available=request.window - request.reserved_output,
        overhead=request.overhead_tokens,
    )
    _cap_texts(draft, request, budgets)
    _cap_recall(draft, request.recall, budgets.recall)
    _fill_history(draft, request.history, budgets.min_history_messages)
    degrade(draft, budgets)
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
