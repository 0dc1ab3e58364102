"""``arena budget``: spending against the daily caps per agent, group and model, today and
over the last 7 days (``--json`` as ``GET /api/budget`` gives it).

Imported only when it runs (``ArenaGroup.lazy``).
"""

from __future__ import annotations

from datetime import datetime

import click
from rich.table import Table

from orchestrator.adapters.redis_client import connect
from orchestrator.caps.configured import cap_limits
from orchestrator.caps.ledger import read_days, read_enforced_caps
from orchestrator.caps.report import CapReport, cap_report
from orchestrator.cli.output import json_text, out
from orchestrator.client import ArenaClient
from orchestrator.core.agents import load_agents
from orchestrator.errors import BusError
from orchestrator.settings import Settings

__all__ = ["budget"]

DAYS = 7


def _money(micro: int | None) -> str:
    return "-" if micro is None else f"${micro / 1_000_000:,.2f}"


def _of(used: str, cap: str) -> str:
    return used if cap == "-" else f"{used} / {cap}"


def _report(settings: Settings) -> CapReport:
    now = datetime.now(settings.zone)
    with ArenaClient.from_settings(settings) as client:
        client.ping()  # one clear line when Redis is not there
    connection = connect(settings.effective_redis_url)
    try:
        counters = read_days(connection, settings.zone, now, DAYS)
        enforced = read_enforced_caps(connection)
    except BusError as exc:
        raise click.ClickException(f"cannot read the spend counters: {exc.problem}") from None
    finally:
        connection.close()
    if enforced is not None:  # the running daemon's caps, whatever this shell sets
        return cap_report(counters, enforced, now, enforced=True)
    limits = cap_limits(settings, load_agents(settings.agents_dir))
    return cap_report(counters, limits, now)


_CAPS_FROM = {
    "daemon": "caps as enforced by the running daemon",
    "settings": "caps from this shell's settings (no daemon running)",
}


@click.command()
@click.option("--json", "as_json", is_flag=True, help="The report as JSON.")
@click.pass_obj
def budget(settings: Settings, as_json: bool) -> None:
    """Show spending against the daily caps per agent, group and model."""
    report = _report(settings)
    if as_json:
        out.print(json_text(report.as_json(), indent=2))
        return
    when = report.resets_at.strftime("%Y-%m-%d %H:%M %Z")
    out.print(f"today {report.day.isoformat()} ({settings.tz}); caps reset {when}")
    out.print(_CAPS_FROM[report.caps_from] + ("" if report.caps_set else ": no daily caps set"))
    if not report.rows:
        out.print("no model calls counted in the last 7 days")
        return
    table = Table("scope", "name", "tokens today", "usd today", "tokens 7 days", "usd 7 days")
    for row in report.rows:
        tokens_cap = "-" if row.tokens_cap is None else f"{row.tokens_cap:,}"
        table.add_row(
            row.scope,
            "all agents" if row.name == "*" else row.name,
            _of(f"{row.tokens:,}", tokens_cap),
            _of(_money(row.micro_usd), _money(row.usd_cap_micro)),
            f"{row.week_tokens:,}",
            _money(row.week_micro_usd),
        )
    out.print(table)
    reached = [r for r in report.rows if r.tokens_cap is not None and r.tokens >= r.tokens_cap]
    reached += [
        r for r in report.rows if r.usd_cap_micro is not None and r.micro_usd >= r.usd_cap_micro
    ]
    for row in reached:
        who = "all agents" if row.scope == "all" else f"{row.scope} {row.name}"
        out.print(f"! {who} has reached its daily cap", style="yellow")
