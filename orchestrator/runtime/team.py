"""The team: the agents in file order, their identity files and their router, loaded once.

Looking an agent up by id is :meth:`Team.get` here and
:func:`orchestrator.core.models.known_agent` below the runtime (one rule: an unknown id is
refused with the ids there are).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from orchestrator.core.agents import load_agents, read_identity
from orchestrator.core.context.build import Identity
from orchestrator.core.models import AgentSpec, RouteDecision, known_agent
from orchestrator.core.routing import Router
from orchestrator.settings import Settings

__all__ = ["Team", "load_team"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Team:
    """The agents, in file order, with their identity files; routes among them.

    Raises:
        ValueError: if ``agents`` is empty (a team routes to at least one agent).
    """

    agents: tuple[AgentSpec, ...]
    identities: Mapping[str, Identity] = field(default_factory=dict)
    router: Router = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "router", Router(self.agents))

    @property
    def ids(self) -> tuple[str, ...]:
        """The agents' ids, in file order."""
        return tuple(agent.id for agent in self.agents)

    def get(self, agent_id: str) -> AgentSpec:
        """The agent with this id.

        Raises:
            ValidationError: no agent has that id (the message lists the ids there are).
        """
        return known_agent(self.agents, agent_id)

    def identity(self, agent_id: str) -> Identity:
        """The agent's CLAUDE.md and SOUL.md (empty for an id the team does not know)."""
        return self.identities.get(agent_id, Identity())

    def route(self, text: str) -> RouteDecision:
        """Who answers ``text``, and why: mentions, then rules, then the default agent."""
        return self.router.route(text)

    def handoffs(self, reply_text: str, author: str) -> tuple[str, ...]:
        """The agents a reply hands the turn to: those it mentions, never its author."""
        return self.router.handoffs(reply_text, author)


def load_team(settings: Settings) -> Team:
    """The agents of ``settings.agents_dir`` and their identity files.

    Raises:
        AgentDefinitionError: naming the first bad file and field.
    """
    agents = load_agents(settings.agents_dir)
    identities = {}
    for agent in agents:
        claude, soul = read_identity(settings.workspaces_dir, agent.id)
        identities[agent.id] = Identity(claude=claude, soul=soul)
    return Team(agents=agents, identities=identities)
