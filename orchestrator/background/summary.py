"""Rolling summaries: a group's previous summary and its messages since become a new one.

:func:`run_summary` is what the background job runs for one group (``asyncio.run`` in a
worker), on the steps every versioned job shares
(:mod:`orchestrator.memory.versions.run`). It reads ``data/memory/summary_<group>.md``
(storing a hand edit found there as a version first) and the group's messages after the last
one the latest summary covered, at most 200 at a time (notices left out). With none: "skipped",
no call. Otherwise it asks the model with ``prompts/summary.md.j2`` (the team's default agent's
model), or makes the summary offline (:mod:`orchestrator.offline.summariser`), checks
the answer (not empty, within ``summary_budget_tokens``, no memory markers), and writes it
atomically unless the file changed meanwhile ("conflict"), as a new version whose ``source``
names the messages it covered. Summaries are written only here, never through markers. Every
attempt is kept in the growth log; a model error is recorded, then raised for the job layer
to retry.
"""

from __future__ import annotations

import functools
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from sqlalchemy.engine import Engine

from orchestrator.core.agents import load_agents
from orchestrator.core.context.tokens import TokenCounter
from orchestrator.core.markers import neutralise
from orchestrator.core.models import ChatMessage, LLMRequest, MessageKind
from orchestrator.core.prompts import Prompts
from orchestrator.core.turns import LLM
from orchestrator.core.wire import validate_group
from orchestrator.memory.conversation.meta import ReplyMeta
from orchestrator.memory.conversation.store import HistoryStore, StoredMessage
from orchestrator.memory.summaries import summary_path
from orchestrator.memory.versions.file import VersionedFile
from orchestrator.memory.versions.run import (
    TEMPERATURE,
    Attempt,
    Rules,
    Status,
    run_versioned,
)
from orchestrator.memory.versions.store import Kind, VersionStore
from orchestrator.offline.summariser import SummaryMessage, cut, summarise_offline
from orchestrator.settings import Settings

__all__ = ["MAX_MESSAGES", "SummaryOutcome", "read_messages", "run_summary"]

KIND: Kind = "summary"
TEMPLATE = "summary.md.j2"
TRIGGER_SENDER = "summary"
MAX_MESSAGES = 200
_MESSAGE_CHARS = 1500
_REQUEST = "Write the new summary now: the Markdown document only."


@dataclass(frozen=True, slots=True, kw_only=True)
class SummaryOutcome:
    """What one summary run did; ``version`` is set when a new one was written."""

    status: Status
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
class _Job:
    group: str
    file: VersionedFile
    trigger: str
    now: datetime
    previous: str
    said: list[SummaryMessage]
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
    rules: Rules[_Job, SummaryOutcome] = Rules(
        label=f"summary of {group}",
        name="the summary",
        budget_tokens=settings.summary_budget_tokens,
        count=counter.count,
        skip=_skip,
        offline=lambda job: summarise_offline(
            job.group,
            job.previous,
            job.said,
            zone=settings.zone,
            budget_tokens=settings.summary_budget_tokens,
            count=counter.count,
        ),
        request=lambda job: _request(job, settings),
        problem=lambda job, answer: None,
        unchanged=lambda previous, text: text == previous,
        outcome=_outcome,
    )
    read = functools.partial(_read, settings, engine, counter, group, upto_seq, trigger, now)
    return await run_versioned(read, rules, llm, now)


def _read(
    settings: Settings,
    engine: Engine,
    counter: TokenCounter,
    group: str,
    upto_seq: int | None,
    trigger: str,
    now: datetime,
) -> _Job:
    """Read the summary, storing a hand edit as a version first, and the messages since."""
    path = summary_path(settings.data_dir, validate_group(group))
    store = VersionStore(engine)
    file = VersionedFile(store, KIND, group, path, counter.count)
    file.sync(now)
    after = _covered(store, group)
    said = read_messages(engine, group, after=after, upto=upto_seq)
    upto, n = (said[-1].seq if said else after), len(said)
    return _Job(
        group=group,
        file=file,
        trigger=trigger,
        now=now,
        previous=file.read(),
        said=said,
        source={"from_seq": said[0].seq if said else after, "upto_seq": upto, "messages": n},
    )


def _skip(job: _Job) -> str | None:
    return None if job.said else f"no new messages after #{job.source['from_seq']}"


def _covered(store: VersionStore, group: str) -> int:
    """The last message the newest generated summary covered (0 before the first)."""
    for version in reversed(store.history(KIND, group)):
        if "upto_seq" in version.source:
            return int(version.source["upto_seq"])
    return 0


def read_messages(
    engine: Engine, group: str, *, after: int, upto: int | None
) -> list[SummaryMessage]:
    """The group's messages after ``after`` (and up to ``upto``), oldest first, notices left
    out, at most :data:`MAX_MESSAGES`."""
    stored = HistoryStore(engine).said_after(group, after=after, upto=upto, limit=MAX_MESSAGES)
    return [_said(s) for s in stored]


def _said(stored: StoredMessage) -> SummaryMessage:
    m = stored.message
    return SummaryMessage(
        seq=stored.seq,
        sender=m.sender,
        kind=m.kind.value,
        text=m.text,
        at=m.created_at,
        markers=ReplyMeta.from_json(stored.meta).notes(),
    )


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
            "text": neutralise(cut(s.text, _MESSAGE_CHARS)),
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


def _outcome(job: _Job, attempt: Attempt) -> SummaryOutcome:
    return SummaryOutcome(
        status=attempt.status,
        group=job.group,
        trigger=job.trigger,
        version=attempt.version,
        reason=attempt.reason,
        tokens=attempt.tokens,
        upto_seq=job.source["upto_seq"],
        messages=len(job.said),
        lines_added=attempt.lines_added,
        lines_removed=attempt.lines_removed,
    )
