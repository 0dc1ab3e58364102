"""The settings turned into the working values a turn and a memory write are held to: the
context window and layer budgets, recall's layers, the memory gate, the daily caps.

The one place where ``Settings`` and an agent's YAML overrides become those values: a turn,
``arena context``, ``arena check``, the console's previews and searches all ask here, so
none of them plans with numbers the daemon does not use.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from zoneinfo import ZoneInfo

from orchestrator.caps.configured import cap_limits
from orchestrator.caps.limits import CapLimits
from orchestrator.core.context.budget import LayerBudgets
from orchestrator.core.context.build import ContextLimits
from orchestrator.core.models import AgentSpec
from orchestrator.memory.gate.rules import GateConfig
from orchestrator.memory.recall.recaller import RecallConfig
from orchestrator.settings import Settings

__all__ = ["Tuning"]


@dataclass(frozen=True, slots=True)
class Tuning:
    """The working values of ``settings`` (per agent where its YAML may override them)."""

    settings: Settings

    @property
    def tz(self) -> str:
        """The zone agents see times in (its IANA name)."""
        return self.settings.tz

    @property
    def zone(self) -> ZoneInfo:
        """The zone agents see times in."""
        return self.settings.zone

    @property
    def history_limit(self) -> int:
        """How many of a group's newest messages the history layer may show."""
        return self.settings.history_limit

    def limits(self, agent: AgentSpec, correction: float = 1.0) -> ContextLimits:
        """``agent``'s window and layer budgets: the settings, with its YAML's overrides;
        ``correction`` is the token factor learnt for its model."""
        s = self.settings
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

    def recall(self, agent: AgentSpec) -> RecallConfig:
        """``agent``'s recall layers: the settings, with its YAML's overrides."""
        s = self.settings
        values: dict[str, Any] = {
            "relevance_floor": s.recall_relevance_floor,
            "max_entries": s.recall_max_entries,
            "char_budget": s.recall_char_budget,
            "require_source": s.recall_require_source,
        }
        values.update(agent.recall)
        return RecallConfig(**values)

    @property
    def gate(self) -> GateConfig:
        """What the memory gate lets through: the confidence floor and the daily limit."""
        s = self.settings
        return GateConfig(min_confidence=s.memory_min_confidence, daily_limit=s.memory_daily_limit)

    def caps(self, agents: Sequence[AgentSpec]) -> CapLimits:
        """The daily caps the settings and ``agents``' own YAML set."""
        return cap_limits(self.settings, agents)
