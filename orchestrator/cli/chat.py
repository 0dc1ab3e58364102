"""``arena post``, ``tail``, ``history``, ``dead-letters``, ``retry`` and ``route``: talking
to the groups and reading what was said.

``arena --help`` and ``arena post`` must start quickly: each command imports the client, the
database or the agent files when it runs (``tests/cli/test_startup.py``).
"""

from __future__ import annotations

import re
import sys
from typing import Any

import click
from rich.markup import escape

from orchestrator.cli.output import err, fail, json_text, out
from orchestrator.core.coding import Step
from orchestrator.core.wire import DEFAULT_SENDER, Outbound, validate_group
from orchestrator.errors import BusError, ValidationError
from orchestrator.settings import Settings

__all__ = ["dead_letters", "history", "post", "retry", "route", "tail"]

# A Redis stream entry id, as `arena dead-letters` lists them.
_ENTRY_ID = re.compile(r"[0-9]{1,20}-[0-9]{1,20}")
# How much of a dead letter's text `arena dead-letters` shows (`--json` has all of it).
_TEXT_SHOWN = 200


def _print_item(item: Outbound) -> None:
    if item.type == "notice":
        out.print(f"! {item.text}", style="yellow")
    else:
        out.print(f"{item.sender}: ", style="bold cyan", end="")
        out.print(item.text)


def _print_step(step: Step, shown_run: str | None) -> str:
    """One step of a run, indented under its card: the agent and the run on the first of a
    run's steps in a row (``  developer run 1-0:1:developer · Write hello.py``), then the
    step alone (``  · ok``); returns the run shown."""
    head = f"{step.agent} run {step.run} " if step.run != shown_run else ""
    out.print(f"  {head}· {step.line}", style="red" if step.is_error else "dim")
    return step.run


@click.command()
@click.argument("group")
@click.argument("text")
@click.option(
    "--sender",
    default=DEFAULT_SENDER,
    show_default=True,
    help="Who is speaking: a person's name, never an agent's, 'arena' or 'system'.",
)
@click.option(
    "--wait",
    "wait_s",
    type=float,
    is_flag=False,
    flag_value=60.0,
    default=None,
    metavar="[SECONDS]",
    help="Wait for the replies and print them (default 60 s).",
)
@click.pass_obj
def post(settings: Settings, group: str, text: str, sender: str, wait_s: float | None) -> None:
    """Post TEXT to GROUP and print the message id ('-' reads TEXT from stdin)."""
    from orchestrator.client import ArenaClient

    if text == "-":
        # `echo hi | arena post demo -` posts "hi": the line end a pipe adds is no part of it.
        text = sys.stdin.read().rstrip("\r\n")
    with ArenaClient.from_settings(settings) as client:
        after = client.last_reply_id(group) if wait_s is not None else "$"
        message_id = client.post(group, text, sender)
        out.print(message_id)
        if wait_s is None:
            return
        try:
            for item in client.replies(group, message_id, wait_s, after=after):
                _print_item(item)
        except TimeoutError:
            fail(f"no complete answer within {wait_s:g}s; is the daemon running? (`arena status`)")


@click.command()
@click.argument("group")
@click.option("--limit", default=20, show_default=True, type=click.IntRange(1, 100_000))
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
@click.pass_obj
def history(settings: Settings, group: str, limit: int, as_json: bool) -> None:
    """Print GROUP's latest messages, oldest first."""
    from orchestrator.cli.resources import wired

    validate_group(group)
    with wired(settings) as wiring:
        messages = wiring.history.recent(group, limit)
    if as_json:
        for stored in messages:
            out.print(json_text(stored.as_dict()))
        return
    if not messages:
        err.print(f"arena: no messages in group {group!r} yet")
        return
    for stored in messages:
        m = stored.message
        stamp = m.created_at.astimezone(settings.zone).strftime("%Y-%m-%d %H:%M:%S")
        who = f"[dim]{stamp}[/] [bold]{escape(m.sender)}[/] ({escape(m.kind.value)}): "
        out.print(who, markup=True, end="")
        out.print(m.text)
        _print_tool_calls(stored.meta)


def _print_tool_calls(meta: dict[str, Any]) -> None:
    """The memory tools a reply called, one dim line each, and its model calls' tokens."""
    from orchestrator.memory.conversation.meta import ReplyMeta

    tools = ReplyMeta.from_json(meta).tools
    if tools is None:
        return
    for call in tools.calls:
        mark = " (error)" if call.is_error else ""
        out.print(f"  [dim]tool: {escape(call.line)}{mark}[/]", markup=True)
    steps = ", ".join(
        f"{u.input_tokens + u.cache_read_tokens + u.cache_creation_tokens:,}+{u.output_tokens:,}"
        for u in tools.steps
    )
    out.print(f"  [dim]{len(tools.steps)} model calls (tokens in+out: {steps})[/]", markup=True)


@click.command()
@click.argument("group")
@click.pass_obj
def tail(settings: Settings, group: str) -> None:
    """Follow GROUP's replies as they are published, and the steps of its runs as they happen
    (Ctrl-C to stop); while Redis does not answer (a restart), it says so and waits, then
    goes on where it was."""
    from orchestrator.client import ArenaClient

    validate_group(group)
    with ArenaClient.from_settings(settings) as client:
        client.ping()
        after = client.last_reply_id(group)
        steps = client.last_step_id(group)

        def outage(problem: BusError | None) -> None:
            if problem is None:
                err.print(f"arena: Redis answers again; following group {group}")
            else:
                err.print(f"arena: Redis is not answering ({problem.problem}); waiting for it")

        try:  # from the line that says so on, Ctrl-C ends the following normally
            err.print(f"arena: following group {group}; Ctrl-C to stop")
            run: str | None = None  # the run whose steps are being printed
            for item in client.follow(group, after=after, outage=outage, steps=steps):
                if isinstance(item, Step):
                    run = _print_step(item, run)
                elif item is not None and item.type != "done":
                    _print_item(item)
                    run = None
        except KeyboardInterrupt:
            return


@click.command(name="dead-letters")
@click.option("--limit", default=50, show_default=True, type=click.IntRange(1, 10_000))
@click.option("--json", "as_json", is_flag=True, help="A JSON list ([] when there are none).")
@click.pass_obj
def dead_letters(settings: Settings, limit: int, as_json: bool) -> None:
    """List messages that were rejected or could not be answered, with the reason."""
    from orchestrator.client import ArenaClient

    with ArenaClient.from_settings(settings) as client:
        letters = client.dead_letters(limit)
    if as_json:
        out.print(json_text(letters, indent=2))
        return
    if not letters:
        out.print("no dead letters")
        return
    for letter in letters:
        _print_dead_letter(letter)


def _print_dead_letter(letter: dict[str, str]) -> None:
    """One dead letter: its ids whole on the first line (to copy into `arena retry`), the
    reason and the start of the text under them, wrapped rather than cut."""
    head = [letter["id"]]
    if letter.get("entry_id"):
        head.append(f"message {letter['entry_id']}")
    if letter.get("group"):
        head.append(f"group {letter['group']}")
    out.print("  ".join(head))
    out.print(f"  reason: {letter.get('reason', '')}")
    text = letter.get("text")
    if text is not None:
        shown = text if len(text) <= _TEXT_SHOWN else text[:_TEXT_SHOWN] + "…"
        out.print(f"  text: {shown}")


@click.command()
@click.argument("dead_letter_id", metavar="ID")
@click.pass_obj
def retry(settings: Settings, dead_letter_id: str) -> None:
    """Post a dead letter's message again (see `arena dead-letters`); prints the new id."""
    from orchestrator.client import ArenaClient

    if not _ENTRY_ID.fullmatch(dead_letter_id):
        raise ValidationError(
            "id", f"not a message id: {dead_letter_id!r} (expected like 1700000000000-0)"
        )
    with ArenaClient.from_settings(settings) as client:
        out.print(client.retry(dead_letter_id))


@click.command()
@click.argument("text")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_obj
def route(settings: Settings, text: str, as_json: bool) -> None:
    """Show which agents would answer TEXT, and why (a dry run over the real rules).

    A command for the arena (`/approve ID`, `/deny ID`) goes to no agent: said so."""
    from orchestrator.runtime.chat_commands import parse_command

    command = parse_command(text)
    if command is not None:
        shown = command.route
        if as_json:
            out.print(json_text(shown))
            return
        out.print("agents:   none", markup=False)
        out.print(f"reason:   command\ndetail:   {shown['detail']}", markup=False)
        return
    from orchestrator.core.agents import load_agents  # the agent files only when routed
    from orchestrator.core.routing import route as decide

    decision = decide(text, load_agents(settings.agents_dir))
    if as_json:
        out.print(json_text(decision.as_dict()))
        return
    out.print(f"agents:   {', '.join(decision.agents)}", markup=False)
    out.print(f"reason:   {decision.reason.value}", markup=False)
    if decision.rule:
        out.print(f"rule:     {decision.rule}", markup=False)
    if decision.keywords_hit:
        out.print(f"keywords: {', '.join(decision.keywords_hit)}", markup=False)
    if decision.detail:
        out.print(f"detail:   {decision.detail}", markup=False)
