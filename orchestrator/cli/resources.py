"""What the ``arena`` commands open: the database, in its data folder, and the one "known
agent?" check of an id given on the command line."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from sqlalchemy.engine import Engine

from orchestrator.core.models import AgentSpec
from orchestrator.errors import ValidationError
from orchestrator.memory.db import open_engine
from orchestrator.settings import Settings

__all__ = ["database", "known_agent"]


@contextmanager
def database(settings: Settings) -> Iterator[Engine]:
    """The configured database for one ``with`` block (the data folder is made first).

    Raises:
        ServiceError: when the database cannot be opened.
    """
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    with open_engine(settings.effective_database_url) as engine:
        yield engine


def known_agent(agents: Sequence[AgentSpec], agent_id: str) -> AgentSpec:
    """The team's agent with the id ``agent_id``.

    Raises:
        ValidationError: no agent has that id (the message lists the ids there are).
    """
    for agent in agents:
        if agent.id == agent_id:
            return agent
    known = ", ".join(a.id for a in agents)
    raise ValidationError("agent", f"no agent {agent_id!r} (agents: {known})")
