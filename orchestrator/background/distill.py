"""Heartbeat distillation: an agent's daily log and its ``MEMORY.md`` become a new ``MEMORY.md``.

:func:`run_distillation` is what the background job runs for one agent and one day
(``asyncio.run(run_distillation(...))`` in a worker). Only the model call needs the event
loop; the file and database work runs in a thread. The steps:

1. Read the day's log (``workspaces/<agent>/memory/YYYY-MM-DD.md``) and ``MEMORY.md``. A file
   that differs from its latest stored version (the first run, or a hand edit) is stored as a
   version first, so that nothing written by hand is lost.
2. No notes in the log, or this very log (same SHA-256) already distilled: "skipped", no call.
3. Ask the agent's model with ``prompts/distill.md.j2``. The offline provider is not asked:
   the distillation is done here, deterministically (:func:`distil_offline`).
4. Check the answer: not empty, within ``distill_budget_tokens``, no memory markers, and not
   dropping more than ``distill_max_drop_share`` of the previous entries unless the day's log
   calls them obsolete. A failing answer leaves ``MEMORY.md`` untouched: "rejected".
5. Write atomically unless the file changed since step 1 ("conflict"), and store the version.

Every attempt, whatever came of it, is kept in the growth log (``growth_runs``); a model error
is recorded there too and then raised, for the job layer to retry.

Entries. An entry of ``MEMORY.md`` is a non-blank line that is not a ``#`` heading, without
its list marker; a note of the log is an entry without its ``HH:MM`` time and its
``(source: …)``. Two entries are equal when their normalised forms are (lower case, spaces
collapsed, trailing punctuation removed). An old entry is kept by an answer that has an equal
entry, or one holding at least 70% of its words. The log calls an entry obsolete when one of
its notes says "obsolete", "no longer", "outdated", "replaced" or "superseded" and holds at
least half of the entry's words. Words are runs of three or more letters or digits, without
``[type]`` tags and a few common words.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from datetime import date, datetime
from typing import Any, Literal

from sqlalchemy.engine import Engine

from orchestrator.background.versioned_run import run_versioned
from orchestrator.core.agents import load_agents, workspace_dir
from orchestrator.core.markers import neutralise
from orchestrator.core.models import AgentSpec, ChatMessage, Completion, LLMRequest, MessageKind
from orchestrator.core.prompts import Prompts
from orchestrator.core.tokens import TokenCounter
from orchestrator.core.turns import LLM
from orchestrator.errors import ValidationError
from orchestrator.memory.personal import PersonalLog
from orchestrator.memory.versioned_file import VersionedFile, text_problem
from orchestrator.memory.versions import Kind, VersionStore, sha256_of
from orchestrator.settings import Settings

__all__ = [
    "DistillOutcome",
    "DistillStatus",
    "answer_text",
    "distil_offline",
    "entries",
    "log_notes",
    "run_distillation",
]

logger = logging.getLogger(__name__)

DistillStatus = Literal["written", "skipped", "rejected", "conflict"]

KIND: Kind = "memory_md"
MEMORY_FILE = "MEMORY.md"
TEMPLATE = "distill.md.j2"
SYSTEM_GROUP = "system"
TRIGGER_SENDER = "heartbeat"
_REQUEST = "Write the new MEMORY.md now: the Markdown bullet list only."
TEMPERATURE = 0.2
_KEPT_SHARE = 0.7
_OBSOLETE_CUES = ("obsolete", "no longer", "outdated", "replaced", "superseded")
# Words too common to tell two entries apart, and the cue words themselves.
_COMMON_WORDS = (
    "the and for with that this are was were has have had not but from our you your its into "
    "when then than all any can will would should use used using obsolete longer outdated "
    "replaced superseded"
)
_STOP_WORDS = frozenset(_COMMON_WORDS.split())
_LIST_MARKER_RE = re.compile(r"^(?:[-*+]|\d+[.)])\s+")
_NOTE_TIME_RE = re.compile(r"^\d{1,2}:\d{2}\s+")
_NOTE_SOURCE_RE = re.compile(r"\s*\(source:[^()]*\)\s*$")
_TAG_RE = re.compile(r"\[[^\]\s]{1,40}\]")
_WORD_RE = re.compile(r"[^\W_]{3,}")
_FENCE_RE = re.compile(r"^```[\w-]*\n(?P<body>.*)\n```$", re.DOTALL)


@dataclass(frozen=True, slots=True, kw_only=True)
class DistillOutcome:
    """What one distillation did; ``version`` is set when a new one was written."""

    status: DistillStatus
    agent: str
    day: date
    trigger: str
    version: int | None = None
    reason: str = ""
    tokens: int = 0
    lines_added: int = 0
    lines_removed: int = 0

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form, e.g. for the ``arena/agents/<agent>/growth`` event."""
        return {**asdict(self), "day": self.day.isoformat()}


@dataclass(frozen=True, slots=True, kw_only=True)
class _Job:
    """One distillation in progress: what was read at the start."""

    agent: AgentSpec
    file: VersionedFile
    day: date
    trigger: str
    now: datetime
    previous: str
    log: str
    source: dict[str, Any]


async def run_distillation(
    settings: Settings,
    engine: Engine,
    llm: LLM,
    agent_id: str,
    day: date,
    trigger: str,
    now: datetime,
) -> DistillOutcome:
    """Distil ``agent_id``'s log of ``day`` and its ``MEMORY.md`` into a new ``MEMORY.md``.

    Args:
        settings: Folders, time zone, budget and drop share.
        engine: The database holding the growth log.
        llm: The model provider; with the offline one no call is made.
        agent_id: Whose memory.
        day: Which daily log, a date in the configured time zone.
        trigger: Why it runs ("heartbeat", "idle", "manual", "catch-up", …), kept with it.
        now: When it runs; must carry a time zone.

    Returns:
        The outcome: written (with the new version), skipped, rejected or conflict.

    Raises:
        ValidationError: for an unknown or invalid agent id.
        LLMError: when the model call failed (recorded as an "error" run first).
        ValueError: when ``now`` carries no time zone.
    """
    counter = TokenCounter()
    return await run_versioned(
        functools.partial(_prepare, settings, engine, counter, agent_id, day, trigger, now),
        lambda job: _answer(job, settings, llm, counter),
        lambda job, text: _finish(job, settings, counter, text),
        DistillOutcome,
        now,
    )


def _prepare(
    settings: Settings,
    engine: Engine,
    counter: TokenCounter,
    agent_id: str,
    day: date,
    trigger: str,
    now: datetime,
) -> _Job | DistillOutcome:
    """Steps 1 and 2: read, record a hand edit, and stop early when the log holds nothing new."""
    folder = workspace_dir(settings.workspaces_dir, agent_id)
    agent = _agent(settings, agent_id)
    store = VersionStore(engine)
    file = VersionedFile(store, KIND, agent_id, folder / MEMORY_FILE, counter.count)
    file.sync(now)
    log = PersonalLog(settings.workspaces_dir, settings.zone).read(agent_id, day)
    job = _Job(
        agent=agent,
        file=file,
        day=day,
        trigger=trigger,
        now=now,
        previous=file.read(),
        log=log,
        source={"logs": [{"date": day.isoformat(), "sha256": sha256_of(log)}]},
    )
    if not log_notes(log):
        return _record(job, "skipped", "no notes in the day's log")
    if _already_distilled(store, agent_id, job.source):
        return _record(job, "skipped", "the day's log was already distilled")
    return job


def _agent(settings: Settings, agent_id: str) -> AgentSpec:
    agents = load_agents(settings.agents_dir)
    for agent in agents:
        if agent.id == agent_id:
            return agent
    known = ", ".join(a.id for a in agents)
    raise ValidationError("agent", f"no agent {agent_id!r} (agents: {known})")


def _already_distilled(store: VersionStore, agent_id: str, source: dict[str, Any]) -> bool:
    """Whether a version, or a run that found nothing to change, already read this very log."""
    wanted = source["logs"][0]
    read = [v.source for v in store.history(KIND, agent_id)]
    read += [r.source for r in store.runs(KIND, agent_id) if r.status == "skipped"]
    return any(wanted in done.get("logs", []) for done in read)


async def _answer(job: _Job, settings: Settings, llm: LLM, counter: TokenCounter) -> str | None:
    """Step 3: the new MEMORY.md, from the model or made offline (None: cut off)."""
    if llm.name == "offline":
        return distil_offline(
            job.previous,
            job.log,
            budget_tokens=settings.distill_budget_tokens,
            max_drop_share=settings.distill_max_drop_share,
            count=counter.count,
        )
    request = await asyncio.to_thread(_request, job, settings)
    return answer_text(await llm.complete(request))


def _request(job: _Job, settings: Settings) -> LLMRequest:
    system = Prompts(settings.prompts_dir).render(
        TEMPLATE,
        agent=job.agent,
        day=job.day.isoformat(),
        memory_md=neutralise(job.previous.strip()),
        log=neutralise(job.log.strip()),
        budget_tokens=settings.distill_budget_tokens,
        max_drop_percent=round(settings.distill_max_drop_share * 100),
    )
    trigger = ChatMessage(
        id=f"heartbeat-{job.agent.id}-{job.day.isoformat()}",
        group=SYSTEM_GROUP,
        sender=TRIGGER_SENDER,
        kind=MessageKind.NOTICE,
        text=_REQUEST,
        created_at=job.now,
    )
    return LLMRequest(
        agent=job.agent,
        trigger=trigger,
        model=job.agent.model,
        system=system,
        messages=({"role": "user", "content": _REQUEST},),
        # Room for a full answer even where the model's tokeniser counts more than ours.
        max_tokens=2 * settings.distill_budget_tokens,
        temperature=TEMPERATURE,
    )


def answer_text(completion: Completion) -> str | None:
    """The file a model wrote, without a code fence around it all; None when the answer was
    cut off at ``max_tokens``, so that it is rejected rather than written half."""
    if completion.stop_reason == "max_tokens":
        return None
    stripped = completion.text.strip()
    fenced = _FENCE_RE.match(stripped)
    return fenced.group("body").strip() if fenced else stripped


def _finish(
    job: _Job, settings: Settings, counter: TokenCounter, answer: str | None
) -> DistillOutcome:
    """Steps 4 and 5: check the answer, then write it unless someone else wrote first."""
    if answer is None:
        return _record(job, "rejected", "the answer was cut off at its token limit")
    problem = text_problem(answer, settings.distill_budget_tokens, counter.count)
    problem = problem or _drop_problem(job.previous, answer, job.log, settings)
    if problem:
        return _record(job, "rejected", problem)
    text = answer.strip() + "\n"
    if _keys(entries(text)) == _keys(entries(job.previous)):
        return _record(job, "skipped", "the answer changes nothing")
    version = job.file.replace(
        job.previous, text, trigger=job.trigger, now=job.now, source=job.source
    )
    if version is None:
        return _record(job, "conflict", "MEMORY.md changed while the answer was being written")
    added, removed = version.lines_added, version.lines_removed
    logger.debug(
        "distilled %s: version %d (+%d -%d lines)", job.agent.id, version.version, added, removed
    )
    return DistillOutcome(
        status="written",
        agent=job.agent.id,
        day=job.day,
        trigger=job.trigger,
        version=version.version,
        tokens=version.tokens,
        lines_added=added,
        lines_removed=removed,
    )


def _record(job: _Job, status: DistillStatus, reason: str) -> DistillOutcome:
    """Keep an attempt that wrote nothing, and say what came of it."""
    job.file.note(status, reason, trigger=job.trigger, now=job.now, source=job.source)
    logger.debug("distillation of %s %s %s: %s", job.agent.id, job.day, status, reason)
    return DistillOutcome(
        status=status, agent=job.agent.id, day=job.day, trigger=job.trigger, reason=reason
    )


def _drop_problem(previous: str, answer: str, log: str, settings: Settings) -> str | None:
    """Why the answer drops too many previous entries, or None when it does not."""
    old = entries(previous)
    if not old:
        return None
    new = entries(answer)
    keys, word_sets = _keys(new), [_words(e) for e in new]
    notes = log_notes(log)
    dropped = [
        e for e in old if not _is_kept(e, keys, word_sets) and not _declared_obsolete(e, notes)
    ]
    share = settings.distill_max_drop_share
    if len(dropped) <= share * len(old):
        return None
    return (
        f"the answer drops {len(dropped)} of {len(old)} previous entries that the log does not "
        f"call obsolete (at most {share:.0%} may go), e.g. {dropped[0][:80]!r}"
    )


# --- entries, notes and words -------------------------------------------------------------


def entries(text: str) -> list[str]:
    """The entries of a ``MEMORY.md``: non-blank lines but headings, without list markers."""
    found = []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            found.append(_LIST_MARKER_RE.sub("", stripped))
    return found


def log_notes(log: str) -> list[str]:
    """The notes of a daily log, each without its time and its source."""
    notes = (_NOTE_SOURCE_RE.sub("", _NOTE_TIME_RE.sub("", e)) for e in entries(log))
    return [note for note in notes if note]


def _key(entry: str) -> str:
    return " ".join(entry.lower().split()).rstrip(".;:,!")


def _keys(items: Sequence[str]) -> set[str]:
    return {_key(e) for e in items}


def _words(text: str) -> set[str]:
    words = _WORD_RE.findall(_TAG_RE.sub(" ", text.lower()))
    return {w for w in words if w not in _STOP_WORDS}


def _is_kept(entry: str, keys: set[str], word_sets: Sequence[set[str]]) -> bool:
    if _key(entry) in keys:
        return True
    words = _words(entry)
    need = math.ceil(_KEPT_SHARE * len(words))
    return bool(words) and any(len(words & other) >= need for other in word_sets)


def _declared_obsolete(entry: str, notes: Sequence[str]) -> bool:
    words = _words(entry)
    if not words:
        return False
    need = math.ceil(len(words) / 2)
    return any(
        any(cue in note.lower() for cue in _OBSOLETE_CUES) and len(words & _words(note)) >= need
        for note in notes
    )


# --- the offline distillation -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Item:
    text: str
    old: bool


def distil_offline(
    previous: str,
    log: str,
    *,
    budget_tokens: int,
    max_drop_share: float,
    count: Callable[[str], int],
) -> str:
    """The new ``MEMORY.md`` without a model, the same for the same input.

    The previous entries the log calls obsolete go; the log's notes are added after the
    rest; equal entries are kept once, at their newest place. While the list is over the
    budget, the oldest entry goes: a previous one while fewer than ``max_drop_share`` of the
    previous entries have gone, otherwise the oldest of the day's notes.

    Returns:
        A Markdown bullet list, one entry per line.
    """
    notes = log_notes(log)
    old = [e for e in entries(previous) if not _declared_obsolete(e, notes)]
    items = [_Item(e, True) for e in old] + [_Item(n, False) for n in notes]
    seen: set[str] = set()
    unique: list[_Item] = []
    for item in reversed(items):
        if _key(item.text) not in seen:
            seen.add(_key(item.text))
            unique.append(item)
    unique.reverse()
    allowed = math.floor(max_drop_share * len(entries(previous)))
    return _fit(unique, budget_tokens, allowed, count)


def _fit(items: list[_Item], budget_tokens: int, allowed: int, count: Callable[[str], int]) -> str:
    dropped_old = 0
    while items and count(_render(items)) > budget_tokens:
        index = next(
            (i for i, item in enumerate(items) if dropped_old < allowed or not item.old), None
        )
        if index is None:
            break  # only previous entries are left, and no more of them may go
        dropped_old += items.pop(index).old
    return _render(items)


def _render(items: Sequence[_Item]) -> str:
    return "".join(f"- {item.text}\n" for item in items)
