"""What the token budget of a turn takes and gives: the layers' caps, the candidate messages
and memories with their token counts, the request, and the plan.

The planning itself is :mod:`orchestrator.core.context.budget`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from orchestrator.core.quick_init import quick_init

__all__ = ["BudgetRequest", "ContextPlan", "HistoryItem", "LayerBudgets", "RecallItem"]


@quick_init
@dataclass(frozen=True, slots=True, kw_only=True)
class LayerBudgets:
    """Token caps of layers 1 to 5, and how history behaves when the window is tight.

    The caps have no defaults here: the daemon's come from ``Settings`` (``ARENA_BUDGET_*``)
    and an agent's YAML, so a plan is never made with numbers the daemon does not use.
    ``min_history_messages`` newest messages are kept even when they overflow what remains,
    so that the degradation steps, not the fill, decide what to give up. An older agent reply
    trimmed in degradation step 2 is cut to ``trimmed_reply`` tokens.
    """

    identity: int
    summary: int
    memory_md: int
    logs: int
    recall: int
    min_history_messages: int = 6
    trimmed_reply: int = 120

    def __post_init__(self) -> None:
        for name in ("identity", "summary", "memory_md", "logs", "recall", "trimmed_reply"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} budget must be >= 0")
        if self.min_history_messages < 1:
            raise ValueError("min_history_messages must be >= 1 (the trigger)")


@quick_init
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


@quick_init
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


@quick_init
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


@quick_init
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
