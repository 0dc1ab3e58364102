"""Rolling summaries: a group's previous summary and its messages since become a new one.

:func:`run_summary` is what the background job runs for one group (``asyncio.run`` in a
worker); only the model call needs the event loop. It reads ``data/memory/summary_<group>.md``
(storing a hand edit found there as a version first) and the group's messages after the last
one the latest summary covered, at most 200 at a time (notices left out). With none: "skipped",
no call. Otherwise it asks the model with ``prompts/summary.md.j2`` (the team's default agent's
model), checks the answer (not empty, within ``summary_budget_tokens``, no memory markers),
and writes it atomically unless the file changed meanwhile ("conflict"), as a new version
whose ``source`` names the messages it covered. Summaries are written only here, never
through markers. Every attempt is kept in the growth log; a model error is recorded, then
raised for the job layer to retry.

The offline provider is not asked: :func:`summarise_offline` carries the previous summary's
items forward and adds, from people's messages, each sentence stating a decision, requirement,
finished work or task (by its wording: :mod:`orchestrator.core.cues`, then "finished",
"working on", "can you" with an @mention…; no question is a decision, requirement or finished
work, and "that must have been hard" is no requirement), and from agents' replies their memory
markers, each as ``- YYYY-MM-DD HH:MM who: sentence``, the first saying of a thing kept. While
over the budget, the oldest item of the longest section goes.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, tzinfo
from typing import Any, Literal

from sqlalchemy.engine import Engine
from sqlmodel import Session, col, select

from orchestrator.background.distill import TEMPERATURE, answer_text, entries
from orchestrator.background.versioned_run import run_versioned
from orchestrator.core import cues
from orchestrator.core.agents import load_agents
from orchestrator.core.markers import neutralise
from orchestrator.core.models import ChatMessage, LLMRequest, MessageKind
from orchestrator.core.prompts import Prompts
from orchestrator.core.tokens import TokenCounter
from orchestrator.core.turns import LLM
from orchestrator.core.wire import validate_group
from orchestrator.memory.conversation.store import MessageRow
from orchestrator.memory.versioned_file import VersionedFile, text_problem
from orchestrator.memory.versions import Kind, VersionStore, summary_path
from orchestrator.settings import Settings

__all__ = ["Said", "SummaryOutcome", "SummaryStatus", "run_summary", "summarise_offline"]

logger = logging.getLogger(__name__)

SummaryStatus = Literal["written", "skipped", "rejected", "conflict"]

KIND: Kind = "summary"
TEMPLATE = "summary.md.j2"
TRIGGER_SENDER = "summary"
MAX_MESSAGES = 200
_MESSAGE_CHARS = 1500
_REQUEST = "Write the new summary now: the Markdown document only."
_SECTIONS = ("Goal", "Decisions", "Requirements", "Done", "In progress")
_TRIMMABLE = _SECTIONS[1:]
_NONE = "none yet"
# Sentence cues past decisions and requirements (see orchestrator.core.cues), checked in
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
class SummaryOutcome:
    """What one summary run did; ``version`` is set when a new one was written."""

    status: SummaryStatus
    group: str
    trigger: str
    version: int | None = None
    reason: str = ""
    tokens: int = 0
    upto_seq: int | None = None
    messages: int = 0
    lines_added: int = 0
    lines_removed: int = 0

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form, e.g. for an event."""
        return asdict(self)


@dataclass(frozen=True, slots=True, kw_only=True)
class Said:
    """One message as a summary reads it; ``markers`` are (type, content) pairs."""

    seq: int
    sender: str
    kind: str
    text: str
    at: datetime
    markers: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class _Job:
    group: str
    file: VersionedFile
    trigger: str
    now: datetime
    previous: str
    said: list[Said]
    source: dict[str, Any]


async def run_summary(
    settings: Settings,
    engine: Engine,
    llm: LLM,
    group: str,
    upto_seq: int | None,
    trigger: str,
    now: datetime,
) -> SummaryOutcome:
    """Update ``group``'s rolling summary with the messages since the last one.

    Args:
        settings: Folders, time zone and budget.
        engine: The database holding the messages and the growth log.
        llm: The model provider; with the offline one no call is made.
        group: Whose summary.
        upto_seq: The last message (by ``seq``) to include; None means the newest.
        trigger: Why it runs ("messages", "decision", "manual", …), kept with it.
        now: When it runs; must carry a time zone.

    Returns:
        The outcome: written (with the new version), skipped, rejected or conflict.

    Raises:
        ValidationError: for an invalid group id.
        LLMError: when the model call failed (recorded as an "error" run first).
        ValueError: when ``now`` carries no time zone.
    """
    counter = TokenCounter()
    return await run_versioned(
        functools.partial(_prepare, settings, engine, counter, group, upto_seq, trigger, now),
        lambda job: _answer(job, settings, llm, counter),
        lambda job, text: _finish(job, settings, counter, text),
        SummaryOutcome,
        now,
    )


def _prepare(
    settings: Settings,
    engine: Engine,
    counter: TokenCounter,
    group: str,
    upto_seq: int | None,
    trigger: str,
    now: datetime,
) -> _Job | SummaryOutcome:
    path = summary_path(settings.data_dir, validate_group(group))
    store = VersionStore(engine)
    file = VersionedFile(store, KIND, group, path, counter.count)
    file.sync(now)
    after = _covered(store, group)
    said = read_messages(engine, group, after=after, upto=upto_seq)
    upto, n = (said[-1].seq if said else after), len(said)
    job = _Job(
        group=group,
        file=file,
        trigger=trigger,
        now=now,
        previous=file.read(),
        said=said,
        source={"from_seq": said[0].seq if said else after, "upto_seq": upto, "messages": n},
    )
    if not said:
        return _record(job, "skipped", f"no new messages after #{after}")
    return job


def _covered(store: VersionStore, group: str) -> int:
    """The last message the newest generated summary covered (0 before the first)."""
    for version in reversed(store.history(KIND, group)):
        if "upto_seq" in version.source:
            return int(version.source["upto_seq"])
    return 0


def read_messages(engine: Engine, group: str, *, after: int, upto: int | None) -> list[Said]:
    """The group's messages after ``after`` (and up to ``upto``), oldest first, notices left
    out, at most :data:`MAX_MESSAGES`."""
    query = select(MessageRow).where(
        MessageRow.group_id == group,
        col(MessageRow.seq) > after,
        MessageRow.kind != MessageKind.NOTICE.value,
    )
    if upto is not None:
        query = query.where(col(MessageRow.seq) <= upto)
    with Session(engine) as session:
        rows = session.exec(query.order_by(col(MessageRow.seq)).limit(MAX_MESSAGES)).all()
    return [_said(row) for row in rows]


def _said(row: MessageRow) -> Said:
    assert row.seq is not None
    markers = []
    for marker in (row.meta or {}).get("markers") or []:
        payload = marker.get("payload") if isinstance(marker, dict) else None
        if isinstance(payload, dict) and isinstance(payload.get("content"), str):
            markers.append((str(payload.get("type", "")).lower(), payload["content"]))
    at = row.created_at if row.created_at.tzinfo else row.created_at.replace(tzinfo=UTC)
    return Said(
        seq=row.seq, sender=row.sender, kind=row.kind, text=row.text, at=at, markers=tuple(markers)
    )


async def _answer(job: _Job, settings: Settings, llm: LLM, counter: TokenCounter) -> str | None:
    if llm.name == "offline":
        return summarise_offline(
            job.group,
            job.previous,
            job.said,
            zone=settings.zone,
            budget_tokens=settings.summary_budget_tokens,
            count=counter.count,
        )
    request = await asyncio.to_thread(_request, job, settings)
    return answer_text(await llm.complete(request))


def _request(job: _Job, settings: Settings) -> LLMRequest:
    """A request to the team's default agent's model, which writes the summaries."""
    agents = load_agents(settings.agents_dir)
    agent = next((a for a in agents if a.default), agents[0])
    messages = [
        {
            "seq": s.seq,
            "when": f"{s.at.astimezone(settings.zone):%Y-%m-%d %H:%M}",
            "sender": s.sender,
            "kind": s.kind,
            "text": neutralise(_cut(s.text, _MESSAGE_CHARS)),
        }
        for s in job.said
    ]
    system = Prompts(settings.prompts_dir).render(
        TEMPLATE,
        group=job.group,
        previous=neutralise(job.previous.strip()),
        messages=messages,
        budget_tokens=settings.summary_budget_tokens,
        tz=settings.tz,
    )
    trigger = ChatMessage(
        id=f"summary-{job.group}-{job.source['upto_seq']}",
        group=job.group,
        sender=TRIGGER_SENDER,
        kind=MessageKind.NOTICE,
        text=_REQUEST,
        created_at=job.now,
    )
    return LLMRequest(
        agent=agent,
        trigger=trigger,
        model=agent.model,
        system=system,
        messages=({"role": "user", "content": _REQUEST},),
        max_tokens=2 * settings.summary_budget_tokens,
        temperature=TEMPERATURE,
    )


def _finish(
    job: _Job, settings: Settings, counter: TokenCounter, answer: str | None
) -> SummaryOutcome:
    if answer is None:
        return _record(job, "rejected", "the answer was cut off at its token limit")
    problem = text_problem(answer, settings.summary_budget_tokens, counter.count)
    if problem:
        return _record(job, "rejected", problem)
    text = answer.strip() + "\n"
    if text == job.previous:
        return _record(job, "skipped", "the answer changes nothing")
    version = job.file.replace(
        job.previous, text, trigger=job.trigger, now=job.now, source=job.source
    )
    if version is None:
        return _record(job, "conflict", "the summary changed while the answer was being written")
    logger.debug("summarised %s: version %d", job.group, version.version)
    return SummaryOutcome(
        status="written",
        group=job.group,
        trigger=job.trigger,
        version=version.version,
        tokens=version.tokens,
        upto_seq=job.source["upto_seq"],
        messages=len(job.said),
        lines_added=version.lines_added,
        lines_removed=version.lines_removed,
    )


def _record(job: _Job, status: SummaryStatus, reason: str) -> SummaryOutcome:
    job.file.note(status, reason, trigger=job.trigger, now=job.now, source=job.source)
    logger.debug("summary of %s %s: %s", job.group, status, reason)
    return SummaryOutcome(
        status=status,
        group=job.group,
        trigger=job.trigger,
        reason=reason,
        upto_seq=job.source["upto_seq"],
        messages=len(job.said),
    )


# --- the offline summary -------------------------------------------------------------------


def summarise_offline(
    group: str,
    previous: str,
    said: Sequence[Said],
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
            _add(sections[section], f"{stamp}: {_cut(sentence, _ITEM_CHARS)}")
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


def _items_of(message: Said) -> list[tuple[str, str]]:
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


def _activity(previous: str, said: Sequence[Said], zone: tzinfo) -> str:
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


def _goal(said: Sequence[Said]) -> list[str]:
    """The first sentence of four words or more a person wrote, as the goal until one is set."""
    for message in said:
        if message.kind == MessageKind.HUMAN.value:
            for sentence in _sentences(message.text):
                if len(sentence.split()) >= 4:
                    return [_cut(sentence, _ITEM_CHARS)]
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


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
