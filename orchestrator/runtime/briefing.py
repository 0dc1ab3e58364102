"""Gathering an agent's layers for a turn: identity, the group's summary, MEMORY.md, the
personal logs, recalled memories and recent history, from files and stores.

Blocking I/O: call :meth:`Briefing.gather` from a thread. What is gathered is then fitted
into the agent's budget by :func:`orchestrator.core.context.build.build_context`.

The team (:func:`load_team`), a briefing on a database (:func:`make_briefing`) and the token
factors learnt by earlier runs (:func:`load_drift`) are built here, for the daemon and for
what previews a turn (``arena context``, the console) without loading the daemon.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Protocol
from zoneinfo import ZoneInfo

from sqlalchemy.engine import Engine

from orchestrator.core.agents import load_agents, read_identity
from orchestrator.core.context.budget import LayerBudgets
from orchestrator.core.context.build import ContextLimits, Identity, Layers, PastMessage
from orchestrator.core.context.tokens import DriftCorrector, TokenCounter
from orchestrator.core.models import AgentSpec, ChatMessage
from orchestrator.files import write_atomic
from orchestrator.memory.conversation.index import HistoryIndex
from orchestrator.memory.conversation.store import HistoryStore, StoredMessage
from orchestrator.memory.personal import PersonalLog
from orchestrator.memory.recall.recaller import RecallConfig, Recaller, RecallResult
from orchestrator.memory.session.store import SessionMemory
from orchestrator.memory.summaries import read_summary
from orchestrator.settings import Settings

__all__ = [
    "Briefing",
    "Gathered",
    "RecentSource",
    "Team",
    "context_limits",
    "load_drift",
    "load_team",
    "make_briefing",
    "save_drift",
]

logger = logging.getLogger(__name__)


_SOURCE_RE = re.compile(r"\(source: ([a-z0-9][a-z0-9_-]{0,63})/[^()]*\)\s*$")


def _from_group(line: str) -> str | None:
    """The group a daily-log line came from, if it says.

    The log layer shows an agent only the lines written in the group it is answering: one
    group's decisions never reach another group's context through the raw logs. What an
    agent learns across groups reaches them through its distilled MEMORY.md.
    """
    match = _SOURCE_RE.search(line)
    return match.group(1) if match else None


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return ""


class RecentSource(Protocol):
    """Where a group's recent messages come from (the history store, or its cache)."""

    def recent(self, group: str, limit: int) -> list[StoredMessage]:
        """The ``limit`` newest messages of ``group``, oldest first."""
        ...


@dataclass(frozen=True, slots=True, kw_only=True)
class Gathered:
    """The layers of a turn, and what recall did."""

    layers: Layers
    recall: RecallResult | None


class Briefing:
    """Reads what an agent may see at its turn."""

    def __init__(
        self,
        *,
        settings: Settings,
        identities: Mapping[str, Identity],
        store: RecentSource,
        personal: PersonalLog,
        recaller: Recaller | None,
        counter: TokenCounter,
    ) -> None:
        self.settings = settings
        self.identities = identities
        self.store = store
        self.personal = personal
        self.recaller = recaller
        self.counter = counter
        self.zone = ZoneInfo(settings.tz)

    def recall_config(self, agent: AgentSpec) -> RecallConfig:
        """The agent's recall layers: the settings, with the agent's own overrides."""
        s = self.settings
        values: dict[str, Any] = {
            "relevance_floor": s.recall_relevance_floor,
            "max_entries": s.recall_max_entries,
            "char_budget": s.recall_char_budget,
            "require_source": s.recall_require_source,
        }
        values.update(agent.recall)
        return RecallConfig(**values)

    def limits(self, agent: AgentSpec, correction: float = 1.0) -> ContextLimits:
        """The agent's window and layer budgets: the settings, with its own overrides."""
        return context_limits(self.settings, agent, correction)

    def gather(
        self, agent: AgentSpec, trigger: ChatMessage, now: datetime, *, mark_used: bool = False
    ) -> Gathered:
        """Read every layer for ``agent``'s turn on ``trigger``.

        Only reads, unless ``mark_used``: then the recalled memories are recorded as used at
        ``now``, as they are when the turn is taken (a preview, such as ``arena context``,
        writes nothing).
        """
        folder = self.personal.workspace(agent.id)
        limit = self.settings.history_limit
        recent = self.store.recent(trigger.group, limit)
        # Recall searches the messages older than those the history layer shows; when the
        # layer holds fewer than it may, it holds the whole group and there are none.
        older = len(recent) >= limit
        recall = self._recall(agent, trigger, now, recent[0].seq if older else None, older)
        if recall is not None and mark_used and self.recaller is not None:
            self.recaller.mark_used(recall, now)
        layers = Layers(
            identity=self.identities.get(agent.id, Identity()),
            summary=read_summary(self.settings.data_dir, trigger.group),
            memory_md=_read(folder / "MEMORY.md"),
            logs=self._logs(agent.id, trigger.group, now),
            recalled=recall.snippets if recall else (),
            said=recall.messages if recall else (),
            history=self._history(recent),
            left_out=recall.dropped if recall else (),
        )
        return Gathered(layers=layers, recall=recall)

    def _logs(self, agent_id: str, group: str, now: datetime) -> str:
        today = now.astimezone(self.zone).date()
        parts = self.personal.read_days(agent_id, [today - timedelta(days=1), today])
        lines = [
            line
            for part in parts
            for line in part.splitlines()
            if line.strip() and _from_group(line) in (None, group)
        ]
        return "\n".join(lines)

    def _history(self, stored: list[StoredMessage]) -> list[PastMessage]:
        return [
            PastMessage(
                message=s.message,
                tokens=s.tokens if s.tokens is not None else self.counter.count(s.message.text),
            )
            for s in stored
        ]

    def _recall(
        self,
        agent: AgentSpec,
        trigger: ChatMessage,
        now: datetime,
        before_seq: int | None,
        older: bool,
    ) -> RecallResult | None:
        config = self.recall_config(agent)
        if self.recaller is None or config.max_entries == 0:
            return None
        return self.recaller.recall(
            trigger.text,
            group=trigger.group,
            agent=agent.id,
            config=config,
            now=now,
            before_seq=before_seq,
            messages=older,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Team:
    """The agents, in file order, with their identity files."""

    agents: tuple[AgentSpec, ...]
    identities: Mapping[str, Identity] = field(default_factory=dict)

    def get(self, agent_id: str) -> AgentSpec:
        """The agent with this id."""
        for agent in self.agents:
            if agent.id == agent_id:
                return agent
        raise KeyError(agent_id)


def load_team(settings: Settings) -> Team:
    """Load the agents and their identity files."""
    agents = load_agents(settings.agents_dir)
    identities = {}
    for agent in agents:
        claude, soul = read_identity(settings.workspaces_dir, agent.id)
        identities[agent.id] = Identity(claude=claude, soul=soul)
    return Team(agents=agents, identities=identities)


def make_briefing(
    settings: Settings, engine: Engine, team: Team, recent: RecentSource | None = None
) -> Briefing:
    """What gathers each agent's layers, on the given database (recent messages from
    ``recent``, else read from the database each time)."""
    session = SessionMemory(engine)
    return Briefing(
        settings=settings,
        identities=team.identities,
        store=recent or HistoryStore(engine),
        personal=PersonalLog(settings.workspaces_dir, settings.zone),
        recaller=Recaller(session, history=HistoryIndex(engine)),
        counter=TokenCounter(),
    )


def context_limits(settings: Settings, agent: AgentSpec, correction: float = 1.0) -> ContextLimits:
    """``agent``'s window and layer budgets: the settings, with its YAML's overrides. The one
    place the budgets a turn is planned with are made (a turn, ``arena context``, ``arena
    check``)."""
    s = settings
    o = agent.context
    budgets = LayerBudgets(
        identity=o.get("identity", s.budget_identity),
        summary=o.get("summary", s.budget_summary),
        memory_md=o.get("memory_md", s.budget_memory_md),
        logs=o.get("logs", s.budget_logs),
        recall=o.get("recall", s.budget_recall),
    )
    return ContextLimits(
        window=o.get("window", s.context_window),
        reserved_output=o.get("reserved_output", s.reserved_output_tokens or agent.max_tokens),
        budgets=budgets,
        correction=correction,
    )


def _drift_path(settings: Settings) -> Path:
    return settings.data_dir / "drift.json"


def load_drift(settings: Settings) -> DriftCorrector:
    """The per-model token correction factors learnt by earlier runs."""
    drift = DriftCorrector()
    try:
        drift.restore(json.loads(_drift_path(settings).read_text(encoding="utf-8")))
    except FileNotFoundError:
        pass
    except (ValueError, TypeError, AttributeError) as exc:
        logger.warning("ignoring unreadable %s: %s", _drift_path(settings), exc)
    return drift


def save_drift(settings: Settings, drift: DriftCorrector) -> None:
    """Keep the correction factors for the next run."""
    factors = drift.snapshot()
    if factors:
        write_atomic(_drift_path(settings), json.dumps(factors, indent=2) + "\n")
