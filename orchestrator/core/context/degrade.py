"""The budget's plan while it is built (:class:`DraftPlan`), and the degradation steps that shrink
it when it exceeds the window, in the fixed order :mod:`orchestrator.core.context.budget`
documents."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from orchestrator.core.context.plan import HistoryItem, LayerBudgets, RecallItem
from orchestrator.core.context.tokens import TokenCounter

__all__ = ["DraftPlan", "count_of", "degrade"]

# Trimming older agent replies never touches the newest messages: they carry the thread.
PROTECTED_NEWEST = 2


@dataclass(slots=True, kw_only=True)
class DraftPlan:
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
        """``raw`` tokens as the corrected estimate."""
        return math.ceil(raw * self.correction)

    def raw_limit(self, budget: int) -> int:
        """The most raw tokens whose corrected estimate stays within ``budget``."""
        if budget <= 0:
            return 0
        correction = self.correction
        limit = math.floor(budget / correction)
        while limit > 0 and math.ceil(limit * correction) > budget:
            limit -= 1
        return limit

    def tokens(self) -> dict[str, int]:
        """Corrected estimates per layer, with the overhead and the total."""
        correction, raw, ceil = self.correction, self.raw.get, math.ceil
        out = {layer: ceil(raw(layer, 0) * correction) for layer in _LAYERS}
        out["overhead"] = ceil(self.overhead * correction)
        out["total"] = sum(out.values())
        return out

    def excess(self) -> int:
        """How many corrected tokens the plan is over what is available (<= 0: it fits)."""
        correction, raw, ceil = self.correction, self.raw.get, math.ceil
        total = sum([ceil(raw(layer, 0) * correction) for layer in _LAYERS])
        return total + ceil(self.overhead * correction) - self.available


_LAYERS = ("identity", "summary", "memory_md", "logs", "recall", "history")


def count_of(n: int, singular: str, plural: str) -> str:
    """``n`` with the singular or plural noun."""
    return f"{n} {singular if n == 1 else plural}"


def _drop_recall(draft: DraftPlan) -> None:
    """Degradation 1: drop recalled memories, lowest score first."""
    dropped = 0
    while draft.recall and draft.excess() > 0:
        draft.raw["recall"] -= draft.recall.pop().tokens
        dropped += 1
    if dropped:
        memories = count_of(dropped, "recalled memory", "recalled memories")
        draft.decisions.append(f"dropped {memories}")


def _trim_replies(draft: DraftPlan, budget: int) -> None:
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
        replies = count_of(trimmed, "older agent reply", "older agent replies")
        draft.decisions.append(f"trimmed {replies} to head+tail")


def _shrink_window(draft: DraftPlan) -> None:
    """Degradation 3: leave out the oldest messages, never the trigger."""
    drop = 0
    while drop < len(draft.history) - 1 and draft.excess() > 0:
        draft.raw["history"] -= draft.history[drop].tokens
        drop += 1
    del draft.history[:drop]
    if drop:
        omitted = count_of(drop, "oldest message", "oldest messages")
        draft.decisions.append(f"history window shrunk: {omitted} left out")


def _shrink_text(
    layer: str, trim: Callable[[str, int], str], note: str
) -> Callable[[DraftPlan], None]:
    """Degradations 4 to 6: cut one text layer by the excess, down to nothing if needed."""

    def step(draft: DraftPlan) -> None:
        if not draft.texts[layer]:
            return
        target = max(0, draft.scaled(draft.raw[layer]) - draft.excess())
        text = trim(draft.texts[layer], draft.raw_limit(target))
        draft.texts[layer] = text
        draft.raw[layer] = draft.counter.count(text)
        draft.decisions.append(note.format(tokens=draft.scaled(draft.raw[layer])))

    return step


def degrade(draft: DraftPlan, budgets: LayerBudgets) -> None:
    """Degrade in the fixed order until the plan fits, stopping as soon as it does."""
    if draft.excess() <= 0:
        return
    counter = draft.counter
    steps: tuple[Callable[[DraftPlan], None], ...] = (
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
