"""The rolling summary made without a model, the same for the same input, and the messages it
is made from (:class:`SummaryMessage`).

:func:`summarise_offline` carries the previous summary's items forward and adds, from people's
messages, each sentence stating a decision, requirement, finished work or task (by its
wording: :mod:`orchestrator.offline.cues`, then "finished", "working on", "can you" with an
@mention…; no question is a decision, requirement or finished work, and "that must have been
hard" is no requirement), and from agents' replies their memory markers, each as
``- YYYY-MM-DD HH:MM who: sentence``, the first saying of a thing kept. While over the
budget, the oldest item of the longest section goes.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, tzinfo

from orchestrator.core.markers import neutralise
from orchestrator.core.models import MessageKind
from orchestrator.offline import cues
from orchestrator.offline.distiller import entries

__all__ = ["SummaryMessage", "cut", "summarise_offline"]

_SECTIONS = ("Goal", "Decisions", "Requirements", "Done", "In progress")
_TRIMMABLE = _SECTIONS[1:]
_NONE = "none yet"
# Sentence cues past decisions and requirements (see orchestrator.offline.cues), checked in
# this order: finished work and work in progress in statements, and a request ("please", "can
# you") in a sentence that @mentions someone.
_DONE = ("done:", "is done", "finished", "completed", "implemented", "merged", "shipped")
_PROGRESS = ("todo:", "task:", "working on", "in progress")
_ASKS = ("please ", "can you")
_STATED = {"decision": "Decisions", "requirement": "Requirements"}
_MENTION_RE = re.compile(r"(?<![\w.])@[A-Za-z0-9]")
_MARKER_SECTIONS = {
    "decision": "Decisions",
    "requirement": "Requirements",
    "constraint": "Requirements",
    "task": "In progress",
    "task_assigned": "In progress",
}
_SENTENCE_SPLIT_RE = re.compile(r"(?<=[.!?\u3002\uff01\uff1f])\s+|\n+")
_ITEM_PREFIX_RE = re.compile(r"^\d{4}-\d{2}-\d{2} \d{2}:\d{2} [^:]{1,64}: ")
_HEADING_RE = re.compile(r"^#{2,}\s*(?P<name>.+?)\s*$")
_ITEM_CHARS = 240
_TOTAL_RE = re.compile(r"^- (\d+) messages so far", re.MULTILINE)


@dataclass(frozen=True, slots=True, kw_only=True)
class SummaryMessage:
    """One message as a summary reads it; ``markers`` are (type, content) pairs."""

    seq: int
    sender: str
    kind: str
    text: str
    at: datetime
    markers: tuple[tuple[str, str], ...] = ()


def summarise_offline(
    group: str,
    previous: str,
    said: Sequence[SummaryMessage],
    *,
    zone: tzinfo,
    budget_tokens: int,
    count: Callable[[str], int],
) -> str:
    """The new summary without a model, the same for the same input (see the module doc)."""
    sections = _parse(previous)
    for message in said:
        stamp = f"{message.at.astimezone(zone):%Y-%m-%d %H:%M} {message.sender}"
        for section, sentence in _items_of(message):
            _add(sections[section], f"{stamp}: {cut(sentence, _ITEM_CHARS)}")
    if not sections["Goal"]:
        sections["Goal"] = _goal(said)
    activity = _activity(previous, said, zone)
    while True:
        text = _render(group, sections, activity)
        longest = max(_TRIMMABLE, key=lambda name: len(sections[name]))
        if count(text) <= budget_tokens or not sections[longest]:
            return text
        sections[longest].pop(0)


def _parse(previous: str) -> dict[str, list[str]]:
    """The items of each known section of a summary; other text is left behind."""
    sections: dict[str, list[str]] = {name: [] for name in _SECTIONS}
    current: str | None = None
    for line in previous.splitlines():
        heading = _HEADING_RE.match(line.strip())
        if heading:
            name = heading.group("name").strip().capitalize()
            current = name if name in sections else None
        elif current is not None:
            for item in entries(line):
                if item.lower() != _NONE:
                    _add(sections[current], item)
    return sections


def _items_of(message: SummaryMessage) -> list[tuple[str, str]]:
    """(section, sentence) pairs: people's sentences by wording, agents' markers by type."""
    if message.kind != MessageKind.HUMAN.value:
        return [
            (_MARKER_SECTIONS[kind], " ".join(neutralise(content).split()))
            for kind, content in message.markers
            if kind in _MARKER_SECTIONS and content.strip()
        ]
    found = []
    for sentence, question in cues.sentences(neutralise(message.text)):
        section = _section_of(sentence, question)
        if section is not None:
            found.append((section, _clean(sentence)))
    return found


def _section_of(sentence: str, question: bool) -> str | None:
    """The section a person's sentence belongs in by its wording, or None."""
    if (stated := cues.states(sentence, question=question)) is not None:
        return _STATED[stated]
    lowered = sentence.lower()
    if not question and any(cue in lowered for cue in _DONE):
        return "Done"
    if (not question and any(cue in lowered for cue in _PROGRESS)) or (
        any(cue in lowered for cue in _ASKS) and _MENTION_RE.search(sentence)
    ):
        return "In progress"
    return None


def _activity(previous: str, said: Sequence[SummaryMessage], zone: tzinfo) -> str:
    """How many messages the summaries have covered, and who wrote the latest ones."""
    earlier = _TOTAL_RE.search(previous)
    total = (int(earlier.group(1)) if earlier else 0) + len(said)
    if not said:
        return f"{total} messages so far"
    last = f"{said[-1].at.astimezone(zone):%Y-%m-%d %H:%M}"
    senders = Counter(s.sender for s in said).most_common()
    who = ", ".join(f"{sender} {n}" for sender, n in senders)
    span = f"#{said[0].seq}-#{said[-1].seq}, until {last}"
    return f"{total} messages so far; the latest {len(said)} ({span}): {who}"


def _goal(said: Sequence[SummaryMessage]) -> list[str]:
    """The first sentence of four words or more a person wrote, as the goal until one is set."""
    for message in said:
        if message.kind == MessageKind.HUMAN.value:
            for sentence in _sentences(message.text):
                if len(sentence.split()) >= 4:
                    return [cut(sentence, _ITEM_CHARS)]
    return []


def _sentences(text: str) -> list[str]:
    parts = (" ".join(p.split()) for p in _SENTENCE_SPLIT_RE.split(neutralise(text)))
    return [p.replace("@", "") for p in parts if p]


def _clean(sentence: str) -> str:
    return " ".join(sentence.split()).replace("@", "")


def _add(items: list[str], item: str) -> None:
    """Append ``item`` unless the section already says the same (who and when aside)."""
    key = _item_key(item)
    if all(_item_key(existing) != key for existing in items):
        items.append(item)


def _item_key(item: str) -> str:
    return " ".join(_ITEM_PREFIX_RE.sub("", item).replace("@", "").lower().split()).rstrip(".!?")


def _render(group: str, sections: dict[str, list[str]], activity: str) -> str:
    lines = [f"# Summary of {group}"]
    for name in _SECTIONS:
        lines += ["", f"## {name}", *(f"- {item}" for item in sections[name] or [_NONE])]
    lines += ["", "## Activity", f"- {activity}"]
    return "\n".join(lines) + "\n"


def cut(text: str, limit: int) -> str:
    """``text``, cut to ``limit`` characters with an ellipsis when longer."""
    return text if len(text) <= limit else text[: limit - 1] + "…"
