"""The conversation as an agent sees it: each stored message labelled with its time and sender
(its date only when the message labelled before it is of another day), the agent's own replies
unlabelled, and the alternating user/assistant turns the model takes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from zoneinfo import ZoneInfo

from orchestrator.core.context.plan import HistoryItem
from orchestrator.core.context.tokens import TokenCounter
from orchestrator.core.markers import neutralise
from orchestrator.core.models import ChatMessage, MessageKind

__all__ = ["PastMessage", "conversation", "history_items", "stamp"]


@dataclass(frozen=True, slots=True, kw_only=True)
class PastMessage:
    """A stored message with its token count (counted once, when it was stored)."""

    message: ChatMessage
    tokens: int


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


def history_items(
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
