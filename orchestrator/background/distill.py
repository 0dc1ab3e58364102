"""Heartbeat distillation: an agent's daily log and its ``MEMORY.md`` become a new ``MEMORY.md``.

:func:`run_distillation` is what the background job runs for one agent and one day
(``asyncio.run(run_distillation(...))`` in a worker), on the steps every versioned job shares
(:mod:`orchestrator.memory.versions.run`). What is its own:

1. It reads the day's log (``workspaces/<agent>/memory/YYYY-MM-DD.md``) and ``MEMORY.md``.
2. No notes in the log, or this very log (same SHA-256) already distilled: "skipped", no call.
3. It asks the agent's model with ``prompts/distill.md.j2``. The offline provider is not asked:
   the distillation is done here, deterministically
   (:func:`orchestrator.offline.distiller.distil_offline`).
4. Besides the shared checks, an answer may not drop more than ``distill_max_drop_share`` of
   the previous entries unless the day's log calls them obsolete
   (:func:`orchestrator.offline.distiller.drop_problem`); one holding the same entries as
   before changes nothing.

Every attempt, whatever came of it, is kept in the growth log (``growth_runs``); a model error
is recorded there too and then raised, for the job layer to retry.
"""

from __future__ import annotations

import functools
from dataclasses import asdict, dataclass
from datetime import date, datetime
from typing import Any

from sqlalchemy.engine import Engine

from orchestrator.core.agents import load_agents, workspace_dir
from orchestrator.core.context.tokens import TokenCounter
from orchestrator.core.markers import neutralise
from orchestrator.core.models import AgentSpec, ChatMessage, LLMRequest, MessageKind, known_agent
from orchestrator.core.prompts import Prompts
from orchestrator.core.turns import LLM
from orchestrator.memory.personal import PersonalLog
from orchestrator.memory.versions.file import VersionedFile
from orchestrator.memory.versions.run import (
    TEMPERATURE,
    Attempt,
    Rules,
    Status,
    run_versioned,
)
from orchestrator.memory.versions.store import Kind, VersionStore, sha256_of
from orchestrator.offline.distiller import distil_offline, drop_problem, log_notes, same_entries
from orchestrator.settings import Settings

__all__ = ["DistillOutcome", "run_distillation"]

KIND: Kind = "memory_md"
MEMORY_FILE = "MEMORY.md"
TEMPLATE = "distill.md.j2"
SYSTEM_GROUP = "system"
TRIGGER_SENDER = "heartbeat"
_REQUEST = "Write the new MEMORY.md now: the Markdown bullet list only."


@dataclass(frozen=True, slots=True, kw_only=True)
class DistillOutcome:
    """What one distillation did; ``version`` is set when a new one was written."""

    status: Status
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
    store: VersionStore
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
    share = settings.distill_max_drop_share
    rules: Rules[_Job, DistillOutcome] = Rules(
        label=f"distillation of {agent_id} {day}",
        name=MEMORY_FILE,
        budget_tokens=settings.distill_budget_tokens,
        count=counter.count,
        skip=_skip,
        offline=lambda job: distil_offline(
            job.previous,
            job.log,
            budget_tokens=settings.distill_budget_tokens,
            max_drop_share=share,
            count=counter.count,
        ),
        request=lambda job: _request(job, settings),
        problem=lambda job, answer: drop_problem(job.previous, answer, job.log, share),
        unchanged=same_entries,
        outcome=_outcome,
    )
    read = functools.partial(_read, settings, engine, counter, agent_id, day, trigger, now)
    return await run_versioned(read, rules, llm, now)


def _read(
    settings: Settings,
    engine: Engine,
    counter: TokenCounter,
    agent_id: str,
    day: date,
    trigger: str,
    now: datetime,
) -> _Job:
    """Read the day's log and ``MEMORY.md``, storing a hand edit of it as a version first."""
    folder = workspace_dir(settings.workspaces_dir, agent_id)
    agent = _agent(settings, agent_id)
    store = VersionStore(engine)
    file = VersionedFile(store, KIND, agent_id, folder / MEMORY_FILE, counter.count)
    file.sync(now)
    log = PersonalLog(settings.workspaces_dir, settings.zone).read(agent_id, day)
    return _Job(
        agent=agent,
        file=file,
        store=store,
        day=day,
        trigger=trigger,
        now=now,
        previous=file.read(),
        log=log,
        source={"logs": [{"date": day.isoformat(), "sha256": sha256_of(log)}]},
    )


def _agent(settings: Settings, agent_id: str) -> AgentSpec:
    return known_agent(load_agents(settings.agents_dir), agent_id)


def _skip(job: _Job) -> str | None:
    """Why there is nothing to distil: no notes, or this very log was distilled before."""
    if not log_notes(job.log):
        return "no notes in the day's log"
    if _already_distilled(job.store, job.agent.id, job.source):
        return "the day's log was already distilled"
    return None


def _already_distilled(store: VersionStore, agent_id: str, source: dict[str, Any]) -> bool:
    """Whether a version, or a run that found nothing to change, already read this very log."""
    wanted = source["logs"][0]
    read = [v.source for v in store.history(KIND, agent_id)]
    read += [r.source for r in store.runs(KIND, agent_id) if r.status == "skipped"]
    return any(wanted in done.get("logs", []) for done in read)


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


def _outcome(job: _Job, attempt: Attempt) -> DistillOutcome:
    return DistillOutcome(
        status=attempt.status,
        agent=job.agent.id,
        day=job.day,
        trigger=job.trigger,
        version=attempt.version,
        reason=attempt.reason,
        tokens=attempt.tokens,
        lines_added=attempt.lines_added,
        lines_removed=attempt.lines_removed,
    )
