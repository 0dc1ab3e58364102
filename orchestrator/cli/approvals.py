"""``arena approvals``, ``arena approve``, ``arena deny`` and ``arena allow``: the requests the
agents' runs make for the person's yes, deciding one, and the agents' allow-lists.

``approve`` and ``deny`` decide as the owner (``ARENA_OWNER``) through
:func:`orchestrator.runtime.approving.opened`, as the console and ``/approve`` typed in a group
do: the decision shows on the run's card and wakes a run that stopped waiting. Exit codes: 0
decided, 1 already decided or refused, 2 not an approval id or no such request. ``approvals``
and ``allow`` read the database only (the warm command server answers them). Imported only
when it runs (``ArenaGroup.lazy``).
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime

import click
from rich import box
from rich.table import Table
from rich.text import Text

from orchestrator.cli.output import fail, json_text, out
from orchestrator.cli.resources import wired
from orchestrator.core.approvals import STATES
from orchestrator.core.models import known_agent
from orchestrator.core.wire import validate_group
from orchestrator.errors import ValidationError
from orchestrator.memory.approvals import AllowRule, ApprovalRecord
from orchestrator.runtime.asked import approvals_json, asked
from orchestrator.settings import Settings

__all__ = ["allow", "approvals", "approve", "deny", "since"]

_NOTE = "A note for the agent (and the audit trail)."
_POLL_S = 0.25


def since(seconds: float) -> str:
    """A length of time in its largest unit: ``42s``, ``3m``, ``2h``, ``5d``."""
    whole = max(0, int(seconds))
    for unit, size in (("d", 86_400), ("h", 3600), ("m", 60)):
        if whole >= size:
            return f"{whole // size}{unit}"
    return f"{whole}s"


def _expires(record: ApprovalRecord, now: datetime) -> str:
    """When a pending request expires unanswered: ``in 26m``, or ``now``."""
    left = (record.expires_at - now).total_seconds()
    return f"in {since(left)}" if left > 0 else "now"


def _table(found: list[ApprovalRecord], now: datetime) -> Table:
    """The requests in 80 columns: each id whole (to copy into `arena approve`), its agent,
    group and run under it; what it asks with why under it."""
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    widest = max(len(line) for r in found for line in (r.run_id, f"{r.agent} in {r.group}"))
    table.add_column("id / agent in group / run", overflow="fold", min_width=min(widest, 32))
    table.add_column("what / why", overflow="fold", ratio=1)
    table.add_column("state", no_wrap=True)
    table.add_column("age / ends", no_wrap=True, justify="right")
    for r in found:
        who = Text(r.id)
        who.append(f"\n{r.agent} in {r.group}\n{r.run_id}", style="dim")
        what = Text(asked(r))
        if r.reason and r.kind != "cap":
            what.append(f"\n{r.reason}", style="dim")
        age = Text(since((now - r.created_at).total_seconds()))
        if r.pending:
            age.append(f"\n{_expires(r, now)}", style="dim")
        table.add_row(who, what, r.state, age)
    return table


@click.command()
@click.option("--group", help="Only this group's requests.")
@click.option(
    "--state",
    type=click.Choice([*STATES, "all"]),
    default="pending",
    show_default=True,
    help="Only the requests in this state ('all': every one).",
)
@click.option(
    "--limit",
    default=50,
    show_default=True,
    type=click.IntRange(1, 1000),
    help="At most this many requests.",
)
@click.option("--json", "as_json", is_flag=True, help="A JSON list ([] when there are none).")
@click.option("-q", "--ids", is_flag=True, help="Only the ids, newest first, one a line.")
@click.option(
    "--wait",
    "wait_s",
    type=click.FloatRange(0, 3600),
    is_flag=False,
    flag_value=60.0,
    default=None,
    metavar="[SECONDS]",
    help="Wait until there is such a request (default 60 s); exit 1 if none comes.",
)
@click.pass_obj
def approvals(
    settings: Settings, group: str | None, state: str, limit: int, as_json: bool, ids: bool,
    wait_s: float | None,
) -> None:  # fmt: skip
    """List the runs' requests for approval, newest first (the pending ones unless --state).

    Each with its id, agent, group and run, what it asks and why, its state, its age and
    when it expires unanswered. Decide one with `arena approve ID` or `arena deny ID`;
    `arena deny $(arena approvals -q --wait) --note "…"` decides the newest as it comes.
    """
    if group is not None:
        validate_group(group)
    deadline = time.monotonic() + (wait_s or 0.0)
    with wired(settings) as wiring:
        while True:
            found = wiring.approvals.listed(
                group=group, state=None if state == "all" else state, limit=limit
            )
            if found or wait_s is None or time.monotonic() >= deadline:
                break
            time.sleep(_POLL_S)
    if wait_s is not None and not found:
        fail(f"no such approval request came within {wait_s:g}s")
    if ids:
        for record in found:
            out.print(record.id, markup=False)
        return
    if as_json:
        out.print(json_text(approvals_json(found), indent=2))
        return
    if not found:
        which = "" if state == "all" else f"{state} "
        where = f" in group {group}" if group else ""
        out.print(f"no {which}approval requests{where}", markup=False)
        return
    out.print(_table(found, datetime.now(UTC)))


def _decide(
    settings: Settings, approval_id: str, *, approve: bool, note: str | None, always: bool
) -> None:
    """Decide as the owner; print the verdict's line; exit 0, 1 or 2 as the module says."""
    from orchestrator.runtime.approving import APPROVAL_ID, Verdict, opened

    if not APPROVAL_ID.match(approval_id):
        fail(f"id: {approval_id!r} is not an approval id (ap- and 10 hex digits)", 2)

    async def decide() -> Verdict:
        with wired(settings) as wiring:
            if wiring.approvals.get(approval_id) is None:  # before reaching for any service
                raise ValidationError("id", f"no approval {approval_id} (`arena approvals`)")
            async with opened(settings, wiring) as deciding:
                return await deciding.decide(
                    approval_id, approve=approve, by=settings.owner, note=note, always=always
                )

    try:
        verdict = asyncio.run(decide())
    except ValidationError as exc:
        fail(str(exc), 1 if exc.field == "note" else 2)
    if not verdict.ok:
        fail(verdict.message)
    out.print(verdict.message, markup=False)
    record = verdict.record
    if always and record is not None and not record.always:
        out.print("nothing stored for always: this request allows it only once", markup=False)


@click.command()
@click.argument("approval_id", metavar="ID")
@click.option(
    "--always",
    is_flag=True,
    help="Also put the request's pattern on its agent's allow-list (never asked again).",
)
@click.option("--note", help=_NOTE)
@click.pass_obj
def approve(settings: Settings, approval_id: str, always: bool, note: str | None) -> None:
    """Approve request ID as the owner; its run goes on.

    Exit 0 when approved now, 1 when it was decided before (what and by whom is said) or the
    decision is refused, 2 when ID is not an approval id or there is no such request.
    """
    _decide(settings, approval_id, approve=True, note=note, always=always)


@click.command()
@click.argument("approval_id", metavar="ID")
@click.option("--note", help=_NOTE)
@click.pass_obj
def deny(settings: Settings, approval_id: str, note: str | None) -> None:
    """Deny request ID as the owner; its run is told (with the note) and goes on without it.

    Exit codes as for `arena approve`.
    """
    _decide(settings, approval_id, approve=False, note=note, always=False)


class _AllowGroup(click.Group):
    """``arena allow [AGENT]`` lists; ``arena allow remove AGENT PATTERN`` removes. The first
    word that is not an option is AGENT unless it names a subcommand."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        words = [a for a in args if not a.startswith("-")]
        if words and words[0] not in self.commands:
            ctx.meta["allow.agent"] = words[0]
            args = args[: args.index(words[0])] + args[args.index(words[0]) + 1 :]
        return super().parse_args(ctx, args)


def _rules_table(rules: list[AllowRule], settings: Settings) -> Table:
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("agent", no_wrap=True)
    table.add_column("pattern", overflow="fold", ratio=1)
    table.add_column("added by / at / from", overflow="fold")
    for rule in rules:
        stamp = rule.added_at.astimezone(settings.zone).strftime("%Y-%m-%d %H:%M")
        origin = Text(rule.added_by)
        origin.append(f"\n{stamp}", style="dim")
        if rule.approval_id:
            origin.append(f"\n{rule.approval_id}", style="dim")
        table.add_row(rule.agent, rule.pattern, origin)
    return table


def _agent(settings: Settings, name: str) -> str:
    """``name`` if it is an agent of the team; else one line and exit 2."""
    from orchestrator.core.agents import load_agents  # YAML: only when an agent is named

    try:
        return known_agent(load_agents(settings.agents_dir), name).id
    except ValidationError as exc:
        fail(str(exc), 2)


@click.group(cls=_AllowGroup, invoke_without_command=True)
@click.option("--json", "as_json", is_flag=True, help="A JSON list ([] when there are none).")
@click.pass_context
def allow(ctx: click.Context, as_json: bool) -> None:
    """Show the agents' allow-lists: what each runs without asking.

    `arena allow [AGENT]`: each pattern with its agent, who added it, when and from which
    request (`arena approve ID --always` adds one). `arena allow remove AGENT PATTERN`
    removes one.
    """
    if ctx.invoked_subcommand is not None:
        return
    settings: Settings = ctx.obj
    name = ctx.meta.get("allow.agent")
    agent = _agent(settings, name) if isinstance(name, str) else None
    with wired(settings) as wiring:
        rules = wiring.approvals.allowed(agent)
    if as_json:
        out.print(json_text([r.as_dict() for r in rules], indent=2))
        return
    if not rules:
        none = (
            f"{agent} has no allow-list entry: it asks as its profile says"
            if agent
            else "no allow-list entries: every agent asks as its profile says"
        )
        out.print(none, markup=False)
        return
    out.print(_rules_table(rules, settings))


@allow.command()
@click.argument("agent")
@click.argument("pattern")
@click.pass_obj
def remove(settings: Settings, agent: str, pattern: str) -> None:
    """Remove PATTERN from AGENT's allow-list: it asks again. Exit 1 when it was not there."""
    agent = _agent(settings, agent)
    with wired(settings) as wiring:
        removed = wiring.approvals.disallow(agent, pattern)
    if not removed:
        fail(f"{pattern} is not on {agent}'s allow-list (`arena allow {agent}`)")
    out.print(f"{pattern} removed from {agent}'s allow-list", markup=False)
