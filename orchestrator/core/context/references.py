"""The references block of a turn: recalled memories and earlier messages as the agent reads
them (each on one line, with its trust label and citation, marker-shaped text neutralised),
passages of knowledge (a header line with the source's trust and the locator, then the passage
quoted line by line, so no line of it can pass for another reference), and the citations the
context report keeps for those shown.

What recall hands over is described by protocols (:class:`Reference`, :class:`SaidReference`):
the core does not import memory's values.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Protocol

from orchestrator.core.context.plan import RecallItem
from orchestrator.core.context.report import CitedSource
from orchestrator.core.context.tokens import TokenCounter
from orchestrator.core.context.transcript import Lines, stamp
from orchestrator.core.kept import Bounded
from orchestrator.core.markers import neutralise

__all__ = [
    "Cited",
    "Known",
    "Left",
    "Reference",
    "SaidReference",
    "Spoken",
    "citations",
    "recall_items",
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
    """A stored message as a recalled reference shows it (``memory.conversation.index.Said``)."""

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


class Known(Protocol):
    """A passage of knowledge recalled for this turn (``memory.recall.Passage`` is one) or a
    lorebook entry its messages brought in (``core.lore.LoreHit``): ``kind`` (``knowledge``
    or ``lore``), its id among the references (``key``: ``chunk 12``, ``lore 3``), where it is
    (``path#L12-40@digest``, ``book#3``), its heading path, its text, its source's trust
    (``trusted`` or ``external``), its rank and why it was given."""

    @property
    def kind(self) -> str: ...

    @property
    def key(self) -> str: ...

    @property
    def locator(self) -> str: ...

    @property
    def heading(self) -> str: ...

    @property
    def text(self) -> str: ...

    @property
    def trust(self) -> str: ...

    @property
    def score(self) -> float: ...

    @property
    def why(self) -> str: ...


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


def _reference_line(ref: Reference, lines: Lines, counter: TokenCounter) -> tuple[str, int]:
    """``ref``'s line and its tokens (kept in ``lines``: the same memories are recalled turn
    after turn)."""
    citation = ref.citation
    source = (citation.locator or citation.ref) if citation else "no source"
    key = (ref.type, ref.trust, ref.created_at, source, ref.content)
    line = lines.get(key)
    if line is None:
        day = ref.created_at.strftime("%Y-%m-%d")
        text = f"({ref.type}, {ref.trust}, {day}, source: {source}) {neutralise(ref.content)}"
        line = (text, counter.count(text))
        lines.put(key, line)
    return line


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


def _said_item(ref: SaidReference, tz: str, lines: Lines, counter: TokenCounter) -> tuple[str, int]:
    """A recalled message's line and its tokens, kept in ``lines`` by all it is made of: in a
    long group the same messages are recalled turn after turn (the counter's own memory of
    texts is shared with every message and reply, and forgets them)."""
    said, previous = ref.said, ref.previous
    asker = None if previous is None or not ref.question else previous.sender
    key = ("said", said.id, said.sender, said.created_at, said.text, asker, ref.question, tz)
    line = lines.get(key)
    if line is None:
        text = _said_lines(ref, tz)
        line = (text, counter.count(text))
        lines.put(key, line)
    return line


def _passage_text(known: Known) -> str:
    """A passage as the agent reads it: its header, then each line quoted with ``> ``."""
    section = f", section: {' '.join(known.heading.split())}" if known.heading else ""
    header = f"({known.kind}, {known.trust}, source: {known.locator}{section})"
    quoted = "\n".join(f"> {line}" for line in neutralise(known.text).splitlines())
    return f"{header}\n{quoted}"


def recall_items(
    recalled: Sequence[Reference],
    said: Sequence[SaidReference],
    tz: str,
    counter: TokenCounter,
    lines: Lines | None = None,
    known: Sequence[Known] = (),
) -> list[RecallItem]:
    """Recalled memories, messages and passages of knowledge as the planner takes them,
    ranked together (the memories' lines kept in ``lines``, when given)."""
    kept: Lines = lines if lines is not None else Bounded(len(recalled) or 1)
    items = []
    for r in recalled:
        line, tokens = _reference_line(r, kept, counter)
        items.append(RecallItem(id=str(r.id), text=line, tokens=tokens, score=r.score))
    for message in said:
        line, tokens = _said_item(message, tz, kept, counter)
        items.append(
            RecallItem(id=_said_id(message), text=line, tokens=tokens, score=message.score)
        )
    for k in known:
        text = _passage_text(k)
        items.append(RecallItem(id=k.key, text=text, tokens=counter.count(text), score=k.score))
    return items


def _said_id(ref: SaidReference) -> str:
    return f"message {ref.said.id}"


def citations(
    recalled: Sequence[Reference],
    said: Sequence[SaidReference],
    kept: set[str],
    known: Sequence[Known] = (),
) -> tuple[CitedSource, ...]:
    """What the references shown cite: a memory's source, a message's id (and the id of
    the message whose question it answers), or a passage's locator, with why it was found."""
    found = [
        CitedSource(id=r.id, ref=r.citation.ref if r.citation else None, trust=r.trust)
        for r in recalled
        if str(r.id) in kept
    ]
    for ref in said:
        if _said_id(ref) in kept:
            shown = [ref.previous, ref.said] if ref.previous else [ref.said]
            found += [CitedSource(id=s.id, ref=s.id, trust=f"said by {s.sender}") for s in shown]
    found += [
        CitedSource(id=k.key, ref=k.locator, trust=f"{k.kind}, {k.trust}", why=k.why)
        for k in known
        if k.key in kept
    ]
    return tuple(found)
