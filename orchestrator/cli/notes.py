"""``arena logs`` and ``arena summary``: what an agent noted today and what a group's summary
says. Both read files only (no database), so they answer as soon as the settings are read."""

from __future__ import annotations

from datetime import date, datetime

import click

from orchestrator.cli.output import err, printable
from orchestrator.core.agents import load_agents, workspace_dir
from orchestrator.core.models import known_agent
from orchestrator.core.wire import validate_group
from orchestrator.memory.summaries import read_summary
from orchestrator.runtime.wiring import Wiring
from orchestrator.settings import Settings

__all__ = ["logs", "summary", "team_agent"]


def team_agent(settings: Settings, agent_id: str) -> str:
    """``agent_id`` if it is a valid id of one of the team's agents.

    Raises:
        ValidationError: an id that could leave the workspaces folder, or no such agent.
    """
    workspace_dir(settings.workspaces_dir, agent_id)
    return known_agent(load_agents(settings.agents_dir), agent_id).id


@click.command()
@click.argument("agent_id", metavar="AGENT")
@click.option(
    "--date",
    "day",
    type=click.DateTime(formats=["%Y-%m-%d"]),
    default=None,
    help="Which day (YYYY-MM-DD); default today in ARENA_TZ.",
)
@click.pass_obj
def logs(settings: Settings, agent_id: str, day: datetime | None) -> None:
    """Print AGENT's daily log."""
    agent_id = team_agent(settings, agent_id)
    wanted: date = day.date() if day is not None else datetime.now(settings.zone).date()
    personal = Wiring(settings).personal
    text = personal.read(agent_id, wanted)
    if not text:
        days = personal.days(agent_id)
        hint = f"; logs exist for {', '.join(d.isoformat() for d in days[-5:])}" if days else ""
        err.print(f"arena: {agent_id} has no log for {wanted.isoformat()}{hint}")
        return
    click.echo(printable(text), nl=False)


@click.command()
@click.argument("group")
@click.pass_obj
def summary(settings: Settings, group: str) -> None:
    """Print GROUP's rolling summary."""
    text = read_summary(settings.data_dir, validate_group(group))
    if not text.strip():
        err.print(f"arena: group {group!r} has no summary yet")
        return
    click.echo(printable(text), nl=False)
