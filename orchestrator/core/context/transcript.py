"""The conversation as an agent sees it: each stored message labelled with its time and sender
(its date only when the message labelled before it is of another day), the agent's own replies
unlabelled, and the alternating user/assistant turns the model takes."""

from __future__ import annotations

import operator
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from zoneinfo import ZoneInfo

from orchestrator.core.context.plan import HistoryItem
from orchestrator.core.context.tokens import TokenCounter
from orchestrator.core.kept import Bounded, Kept
from orchestrator.core.markers import neutralise
from orchestrator.core.models import ChatMessage, MessageKind, minute_text
from orchestrator.core.quick_init import quick_init

__all__ = ["Lines", "PastMessage", "Transcript", "conversation", "stamp"]

Lines = Bounded[Hashable, tuple[str, int]]
"""Lines of text made for agents, each with its tokens, by what each is made of (recalled
memories' lines)."""


@quick_init
@dataclass(frozen=True, slots=True, kw_only=True)
class PastMessage:
    """A stored message with its token count (counted once, when it was stored)."""

    message: ChatMessage
    tokens: int


def stamp(moment: datetime, tz: str) -> str:
    """A message's date and time as the agent sees it, in the configured zone."""
    return minute_text(moment.astimezone(ZoneInfo(tz)))


def _prefix(message: ChatMessage, when: str) -> str:
    """The label before a message: when, who and what ("[2026-03-01 14:05 alex (human)]: ",
    or without the date: "[14:05 alex (human)]: ")."""
    if message.kind is MessageKind.NOTICE:
        return f"[{when} arena notice]: "
    return f"[{when} {message.sender} ({message.kind.value})]: "


class Transcript:
    """A group's stored messages as each agent sees them, in one time zone.

    A group's recent messages are shown again at every turn and a labelled message is the
    same for every agent, so each is labelled (and its label's tokens counted) once, whichever
    agent sees it, the turn it is the trigger included: the labels are remembered, up to
    ``size`` of them, by this object (one per daemon, built where the daemon is wired).
    """

    def __init__(self, counter: TokenCounter, tz: str, *, size: int = 32768) -> None:
        self.counter = counter
        self.tz = tz
        self._zone = ZoneInfo(tz)
        self._stamp = lru_cache(maxsize=size)(self._stamp_of)
        # Each message's items and day, by the message object (see orchestrator.core.kept).
        self._forms: Kept[ChatMessage, _Forms] = Kept(size)
        self.lines: Lines = Bounded(16_384)  # recalled memories' (core.context.references)
        # Each agent's last call in each group.
        self._runs: Bounded[tuple[str, str], _Run] = Bounded(_RUNS_KEPT)

    def items(
        self, agent_id: str, history: Sequence[PastMessage], trigger: ChatMessage
    ) -> tuple[list[HistoryItem], dict[str, str]]:
        """Planner items (trigger last) and each item's role. A labelled message states its
        date only when the one labelled before it is of another day.

        What the agent's previous call in the group labelled is taken again when this
        history starts with that one's (the group grew by new messages at its end): only the
        new messages are gone over, from where that call's trigger was left out on."""
        run = self._runs.get((agent_id, trigger.group))
        resume = None if run is None else run.resume_for(history, trigger.id)
        if run is not None and resume is not None:
            start, count, day = resume
            items = run.items[:count]
            roles, ids = run.roles, run.ids
            trigger_tokens = run.trigger_tokens if run.trigger_id == trigger.id else None
        else:
            start, day, items, roles, ids, trigger_tokens = 0, "", [], {}, set(), None
        trigger_id = trigger.id
        skipped: tuple[int, int, str] | None = None
        forms_of = self._forms_of
        for at in range(start, len(history)):
            past = history[at]
            message = past.message
            ids.add(message.id)
            if message.id == trigger_id:
                if trigger_tokens is None:
                    trigger_tokens = past.tokens
                    skipped = (at, len(items), day)
                continue
            forms = forms_of(message, past.tokens)
            # Its own replies unlabelled (a dated label there would teach the model to start
            # its replies with one), everything else labelled with its time and sender.
            if message.sender == agent_id and message.kind is _AGENT:
                items.append(forms.own or forms.make_own())
                roles[message.id] = "assistant"
                continue
            if forms.day != day:
                day = forms.day
                items.append(forms.dated or self._labelled(forms, dated=True))
            else:
                items.append(forms.undated or self._labelled(forms, dated=False))
            roles[message.id] = "user"
        if skipped is None and run is not None and resume is not None:
            skipped = run.skipped if run.trigger_id == trigger_id else None
        self._runs.put(
            (agent_id, trigger.group),
            _Run(list(history), trigger_id, items, roles, day, trigger_tokens, ids, skipped),
        )
        base = trigger_tokens if trigger_tokens is not None else self.counter.count(trigger.text)
        forms = forms_of(trigger, base)
        dated = forms.day != day
        last = (forms.dated if dated else forms.undated) or self._labelled(forms, dated)
        shown = {**roles, trigger_id: "user"}
        return [*items, last], shown

    def _forms_of(self, message: ChatMessage, tokens: int) -> _Forms:
        """``message``'s forms so far (made as they are needed), kept by the message object."""
        forms = self._forms.find(message, None)
        if forms is None or forms.tokens != tokens:
            day = self._stamp(message.created_at)[:10]
            forms = self._forms.keep(message, None, _Forms(message, tokens, day))
        return forms

    def _labelled(self, forms: _Forms, dated: bool) -> HistoryItem:
        item = self._label(forms.message, forms.tokens, dated)
        if dated:
            forms.dated = item
        else:
            forms.undated = item
        return item

    def _stamp_of(self, moment: datetime) -> str:
        return minute_text(moment.astimezone(self._zone))

    def _label(self, message: ChatMessage, tokens: int, dated: bool) -> HistoryItem:
        """A message labelled with its time and sender (and its date, when ``dated``),
        marker-shaped text neutralised (rows stored before markers of every spelling were
        stripped may hold one)."""
        when = self._stamp(message.created_at)
        prefix = _prefix(message, when if dated else when[11:])
        label_tokens = self.counter.count(prefix)
        return HistoryItem(
            id=message.id,
            text=prefix + neutralise(message.text),
            tokens=tokens + label_tokens,
            agent_reply=message.kind is MessageKind.AGENT,
            date="" if dated else when[:10] + " ",
            date_tokens=0 if dated else self.counter.count(_prefix(message, when)) - label_tokens,
        )


_AGENT = MessageKind.AGENT  # a module's name is read faster than an enum's member
_RUNS_KEPT = 8192


@dataclass(slots=True)
class _Run:
    """What one call of :meth:`Transcript.items` went over and made (its trigger's item
    left out); ``skipped``: where it left its trigger out (the history's index, how many
    items were made before it, the day then), if the history held it."""

    history: list[PastMessage]
    trigger_id: str
    items: list[HistoryItem]
    roles: dict[str, str]
    day: str
    trigger_tokens: int | None
    ids: set[str]
    skipped: tuple[int, int, str] | None

    def resume_for(
        self, history: Sequence[PastMessage], trigger_id: str
    ) -> tuple[int, int, str] | None:
        """Where a call on ``history`` for ``trigger_id`` can go on from this one (the
        history's index, how many of its items hold, the day then), or None."""
        seen = len(self.history)
        if seen == 0 or len(history) < seen or history[seen - 1] is not self.history[-1]:
            return None
        if not all(map(operator.is_, history[:seen], self.history)):
            return None
        if trigger_id == self.trigger_id:
            return seen, len(self.items), self.day
        if trigger_id in self.ids:  # an earlier message answered again: go over all of it
            return None
        return self.skipped or (seen, len(self.items), self.day)


@dataclass(slots=True)
class _Forms:
    """A message's items as they were needed: its own author's (unlabelled), labelled without
    and with its date; and its day in the zone."""

    message: ChatMessage
    tokens: int
    day: str
    own: HistoryItem | None = None
    undated: HistoryItem | None = None
    dated: HistoryItem | None = None

    def make_own(self) -> HistoryItem:
        message = self.message
        text = neutralise(message.text)
        self.own = HistoryItem(
            id=message.id, text=text, tokens=self.tokens, own_reply=True, agent_reply=True
        )
        return self.own


def conversation(
    items: Sequence[HistoryItem], roles: Mapping[str, str]
) -> tuple[Mapping[str, str], ...]:
    """Alternating user/assistant turns, merging neighbours of one role; starts with a user."""
    runs: list[tuple[str, list[str]]] = []  # each turn's role and texts
    last: str | None = None
    texts: list[str] = []
    for item in items:
        role = roles[item.id]
        if role == last:
            texts.append(item.text)
        else:
            last, texts = role, [item.text]
            runs.append((role, texts))
    first = 0
    while first < len(runs) and runs[first][0] != "user":
        first += 1
    return tuple(
        {"role": role, "content": texts[0] if len(texts) == 1 else "\n\n".join(texts)}
        for role, texts in runs[first:]
    )
