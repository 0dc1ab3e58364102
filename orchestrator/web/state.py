"""What the console's handlers share while the app runs: the settings, the wiring (the team,
the working values and the stores), the history reader and the Redis clients
(:class:`Console`), opened and closed by the app's lifespan."""

from __future__ import annotations

from dataclasses import dataclass

from fastapi import Request

from orchestrator.adapters.redis_client import AsyncConnection
from orchestrator.client import ArenaClient
from orchestrator.core.models import AgentSpec
from orchestrator.runtime.approving import Approvals
from orchestrator.runtime.wiring import Wiring
from orchestrator.settings import Settings
from orchestrator.web.feeds import RoomFeeds
from orchestrator.web.rooms import Rooms

__all__ = ["Console", "console"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Console:
    """The open resources of a running console.

    ``client`` posts and retries as ``arena post`` does (blocking: call it from a thread);
    ``redis`` reads the outbound streams for server-sent events, each watched room's through
    its one shared reader in ``feeds``; ``approvals`` decides the runs' requests (a decision
    is shown on its run's card and wakes the run).
    """

    settings: Settings
    wiring: Wiring
    rooms: Rooms
    client: ArenaClient
    redis: AsyncConnection
    feeds: RoomFeeds
    approvals: Approvals
    keepalive_s: float = 15.0

    @property
    def agents(self) -> tuple[AgentSpec, ...]:
        """The team's agents, in file order."""
        return self.wiring.team.agents


def console(request: Request) -> Console:
    """The running console (a FastAPI dependency)."""
    found: Console = request.app.state.console
    return found
