"""``arena context AGENT GROUP``: the context the agent's next turn would get, without a call."""

from __future__ import annotations

import click
from rich.table import Table

from orchestrator.cli.output import json_text, out
from orchestrator.cli.resources import database
from orchestrator.core.context.report import ContextReport
from orchestrator.core.wire import validate_group
from orchestrator.runtime.preview import next_trigger, preview
from orchestrator.runtime.team import load_team
from orchestrator.runtime.wiring import Wiring
from orchestrator.settings import Settings

__all__ = ["context"]

LAYERS = ("overhead", "identity", "summary", "memory_md", "logs", "recall", "history")


def _print_recall(report: ContextReport) -> None:
    """What the references cite, and how many candidates recall's layers left out."""
    for citation in report.citations:
        if citation.is_message:
            out.print(f"cites message {citation.id} ({citation.trust})", markup=False)
        elif citation.trust.startswith(("knowledge", "lore")):
            why = f": {citation.why}" if citation.why else ""
            out.print(f"cites {citation.ref} ({citation.trust}){why}", markup=False)
        else:
            out.print(
                f"cites memory {citation.id} ({citation.trust}): {citation.ref}",
                markup=False,
            )
    layers: dict[str, int] = {}
    for dropped in report.recall_dropped:
        layers[dropped.layer] = layers.get(dropped.layer, 0) + 1
    if layers:
        counts = ", ".join(f"{layer} {n}" for layer, n in sorted(layers.items()))
        out.print(f"recall left out {sum(layers.values())} candidates ({counts})", markup=False)


@click.command()
@click.argument("agent_id", metavar="AGENT")
@click.argument("group")
@click.option("--message", default=None, help="Build it as if this message were posted next.")
@click.option("--json", "as_json", is_flag=True, help="The request and the report as JSON.")
@click.pass_obj
def context(
    settings: Settings, agent_id: str, group: str, message: str | None, as_json: bool
) -> None:
    """Show the context AGENT's next turn in GROUP would get: each layer with its tokens, the
    budget decisions and the citations. Nothing is sent to the model."""
    validate_group(group)
    team = load_team(settings)
    agent = team.get(agent_id)
    with database(settings) as engine:
        wiring = Wiring(settings, engine, team=team)
        trigger = next_trigger(wiring.history, group, message)
        made = preview(wiring, agent, trigger)
    if as_json:
        out.print(json_text(made.as_json(agent, group), indent=2))
        return
    built = made.built
    request = built.request
    report = built.report
    tokens = report.tokens
    table = Table("layer", "tokens")
    for name in LAYERS:
        table.add_row(name, str(getattr(tokens, name)))
    table.add_row("total", str(tokens.total))
    out.print(
        f"{agent.id} in {group}: window {report.window}, reserved output "
        f"{report.reserved_output}, available {report.available}",
        markup=False,
    )
    out.print(table)
    for decision in report.decisions or ["everything fits"]:
        out.print(f"- {decision}", markup=False)
    _print_recall(report)
    out.print("\n[bold]system (cached prefix)[/]", markup=True)
    out.print(request.system, markup=False)
    out.print("\n[bold]system (this turn)[/]", markup=True)
    out.print(request.system_tail, markup=False)
    out.print(f"\n[bold]conversation[/] ({len(request.messages)} turns)", markup=True)
    for turn in request.messages:
        out.print(f"{turn['role']}: ", style="dim", end="")
        out.print(turn["content"])
