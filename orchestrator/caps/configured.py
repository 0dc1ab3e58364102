"""The caps in force by configuration: what the settings and each agent's own YAML set.

The one place settings become :class:`~orchestrator.caps.limits.CapLimits`: the daemon's
guard, ``arena budget``, ``arena check``, the console's metrics and
:class:`orchestrator.runtime.tuning.Tuning` all ask here.
"""

from __future__ import annotations

from collections.abc import Sequence

from orchestrator.caps.limits import CapLimits
from orchestrator.core.models import AgentSpec
from orchestrator.settings import Settings

__all__ = ["cap_limits"]


def cap_limits(settings: Settings, agents: Sequence[AgentSpec]) -> CapLimits:
    """The caps ``settings`` and the agents' own YAML set."""
    return CapLimits(
        agent_tokens=settings.cap_agent_tokens_per_day,
        group_tokens=settings.cap_group_tokens_per_day,
        all_tokens=settings.cap_tokens_per_day,
        agent_usd=settings.cap_agent_usd_per_day,
        group_usd=settings.cap_group_usd_per_day,
        all_usd=settings.cap_usd_per_day,
        agents={a.id: a.caps for a in agents if a.caps},
    )
