"""``arena growth``: how an agent's ``MEMORY.md`` grew, version by version."""

from __future__ import annotations

import difflib
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import click
from rich.table import Table
from rich.text import Text

from orchestrator.cli.notes import team_agent
from orchestrator.cli.output import err, json_text, out, printable
from orchestrator.cli.resources import wired
from orchestrator.errors import ValidationError
from orchestrator.memory.versions.store import Run, Version, VersionStore
from orchestrator.settings import Settings

__all__ = ["growth"]

_MINUS = "\u2212"  # a real minus sign, as wide as "+"
_DIFF_STYLES = (("+++", "bold"), ("---", "bold"), ("@@", "cyan"), ("+", "green"), ("-", "red"))


@contextmanager
def _store(settings: Settings) -> Iterator[VersionStore]:
    with wired(settings) as wiring:
        yield wiring.versions


def _stamp(settings: Settings, when: datetime) -> str:
    return when.astimezone(settings.zone).strftime("%Y-%m-%d %H:%M")


@click.command()
@click.argument("agent_id", metavar="AGENT")
@click.option("--json", "as_json", is_flag=True, help="Versions and attempts as JSON.")
@click.option("--diff", "diff_n", type=click.IntRange(1), metavar="N", help="Diff of version N.")
@click.option("--show", "show_n", type=click.IntRange(1), metavar="N", help="Text of version N.")
@click.pass_obj
def growth(
    settings: Settings, agent_id: str, as_json: bool, diff_n: int | None, show_n: int | None
) -> None:
    """Show how AGENT's MEMORY.md grew: every version and every attempt that wrote none."""
    agent_id = team_agent(settings, agent_id)
    with _store(settings) as store:
        versions = store.history("memory_md", agent_id)
        runs = [r for r in store.runs("memory_md", agent_id) if r.status != "written"]
    if show_n is not None:
        click.echo(printable(_version(versions, show_n, agent_id).text), nl=False)
        return
    if diff_n is not None:
        _print_diff(versions, diff_n, agent_id)
        return
    if as_json:
        data: dict[str, Any] = {
            "agent": agent_id,
            "versions": [v.as_dict() for v in versions],
            "attempts": [r.as_dict() for r in runs],
        }
        click.echo(json_text(data, indent=2))
        return
    if not versions and not runs:
        err.print(f"arena: {agent_id} has no MEMORY.md versions yet")
        return
    _print_timeline(settings, agent_id, versions, runs)


def _print_timeline(
    settings: Settings, agent_id: str, versions: list[Version], runs: list[Run]
) -> None:
    """The versions, then the attempts that wrote none; cells are text, never markup."""
    table = Table(
        "version", "date", "trigger", "tokens", "+", _MINUS, title=f"{agent_id} MEMORY.md"
    )
    for v in versions:
        by = v.source.get("by")
        trigger = f"{v.trigger} ({by})" if isinstance(by, str) and by else v.trigger
        numbers = (v.version, _stamp(settings, v.created_at), trigger, v.tokens)
        table.add_row(*map(_cell, numbers), f"+{v.lines_added}", f"{_MINUS}{v.lines_removed}")
    out.print(table)
    if runs:
        attempts = Table("date", "trigger", "outcome", "reason", title="attempts that wrote none")
        for r in runs:
            cells = (_stamp(settings, r.created_at), r.trigger, r.status, r.reason)
            attempts.add_row(*map(_cell, cells))
        out.print(attempts)


def _cell(value: object) -> Text:
    return Text(printable(str(value)))


def _version(versions: list[Version], number: int, agent_id: str) -> Version:
    for v in versions:
        if v.version == number:
            return v
    latest = f"the latest is {versions[-1].version}" if versions else "there are none yet"
    raise ValidationError("version", f"{agent_id} has no version {number} ({latest})")


def _print_diff(versions: list[Version], number: int, agent_id: str) -> None:
    new = _version(versions, number, agent_id)
    old = _version(versions, number - 1, agent_id).text if number > 1 else ""
    lines = difflib.unified_diff(
        old.splitlines(keepends=True),
        new.text.splitlines(keepends=True),
        fromfile=f"{agent_id}/MEMORY.md v{number - 1}",
        tofile=f"{agent_id}/MEMORY.md v{number}",
    )
    for line in lines:
        text = line.rstrip("\n")
        style = next((s for prefix, s in _DIFF_STYLES if text.startswith(prefix)), None)
        out.print(text, style=style)
