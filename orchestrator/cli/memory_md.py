"""``arena memory-md set AGENT FILE --base-version N``: a person's edit of an agent's
``MEMORY.md``, saved as a new version (trigger "hand edit") that ``arena growth`` lists."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TextIO

import click

from orchestrator.cli.corrections import actor
from orchestrator.cli.output import out
from orchestrator.cli.resources import wired
from orchestrator.core.agents import load_agents
from orchestrator.core.models import known_agent
from orchestrator.errors import ValidationError
from orchestrator.memory.versions.hand_edit import memory_md_file, save_hand_edit
from orchestrator.settings import Settings

__all__ = ["memory_md"]


@click.group(name="memory-md")
def memory_md() -> None:
    """Edit an agent's MEMORY.md by hand, as a new version that `arena growth` lists."""


@memory_md.command(name="set")
@click.argument("agent_id", metavar="AGENT")
@click.argument("source", metavar="FILE", type=click.File("r", encoding="utf-8"))
@click.option(
    "--base-version",
    required=True,
    type=click.IntRange(0),
    metavar="N",
    help="The version your text was edited from (see `arena growth AGENT`; 0: none yet). "
    "Refused when MEMORY.md has moved on since, so no edit is lost.",
)
@click.option("--by", default=None, metavar="NAME", help="Who edits (default: the OS user).")
@click.pass_obj
def set_(
    settings: Settings, agent_id: str, source: TextIO, base_version: int, by: str | None
) -> None:
    """Replace AGENT's MEMORY.md with FILE ('-' reads stdin), saved atomically as a new
    version with trigger "hand edit". The text must hold no credential and no memory marker
    and fit in ARENA_DISTILL_BUDGET_TOKENS."""
    agent = known_agent(load_agents(settings.agents_dir), agent_id)
    try:
        text = source.read()
    except UnicodeDecodeError as exc:
        raise ValidationError("FILE", "not UTF-8 text") from exc
    who = actor(by)
    with wired(settings) as wiring:
        file = memory_md_file(
            wiring.versions, settings.workspaces_dir, agent.id, wiring.counter.count
        )
        version = save_hand_edit(
            file,
            text,
            base_version=base_version,
            by=who,
            now=datetime.now(UTC),
            budget_tokens=settings.distill_budget_tokens,
        )
    out.print(
        f"{agent.id}'s MEMORY.md is now version {version.version} ({version.tokens} tokens, "
        f"+{version.lines_added} -{version.lines_removed} lines)",
        markup=False,
    )
