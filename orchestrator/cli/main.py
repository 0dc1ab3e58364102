"""The ``arena`` command: the root group, which loads ``Settings`` once and is the one place
where errors are handled (an ``OrchestratorError`` is one clear line on stderr and exit code 1,
never a traceback; Ctrl-C is exit code 130).

The subcommands live in modules by family: :mod:`~orchestrator.cli.serve` (``up``,
``daemon``, ``worker``), :mod:`~orchestrator.cli.chat` (``post``, ``tail``, ``history``,
``dead-letters``, ``retry``, ``route``), :mod:`~orchestrator.cli.status` (``status``,
``check``, ``prune``), and the commands of :attr:`ArenaGroup.lazy`.

The daemon's modules (the model SDK above all) take seconds to import, so the commands above
import what they use when they run, and ``arena --help`` lists the commands of
:attr:`ArenaGroup.lazy` without importing their modules: ``--help`` and ``arena post`` start
quickly (``tests/cli/test_startup.py`` keeps the heavy libraries out of both). What the
commands print goes through :mod:`orchestrator.cli.output`.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any, ClassVar

import click

from orchestrator.cli import chat, serve, status
from orchestrator.cli.output import fail
from orchestrator.errors import OrchestratorError, ServiceError
from orchestrator.settings import Settings, load_settings

__all__ = ["ArenaGroup", "main"]


class ArenaGroup(click.Group):
    """The root command and the error boundary of every subcommand. The commands in
    :attr:`lazy` are imported only when they run; ``arena --help`` lists them from their
    summary here (the tests check that each equals the command's own)."""

    lazy: ClassVar[dict[str, tuple[str, str]]] = {
        "memory": ("orchestrator.cli.memory", "Inspect and manage the groups' session memory."),
        "knowledge": (
            "orchestrator.cli.knowledge",
            "Documents, project files and folders agents may read, cited to the line.",
        ),
        "memory-md": (
            "orchestrator.cli.memory_md",
            "Edit an agent's MEMORY.md by hand, as a new version that `arena growth` lists.",
        ),
        "context": (
            "orchestrator.cli.context",
            "Show the context AGENT's next turn in GROUP would get: each layer with its "
            "tokens, the budget decisions and the citations.",
        ),
        "jobs": (
            "orchestrator.cli.jobs",
            "List the daemon's schedule and recent background jobs with their outcome.",
        ),
        "heartbeat": (
            "orchestrator.cli.jobs",
            "Distil AGENT's daily log into a new MEMORY.md now (a background job).",
        ),
        "summarize": (
            "orchestrator.cli.jobs",
            "Update GROUP's rolling summary up to its latest message now (a background job).",
        ),
        "growth": (
            "orchestrator.cli.growth",
            "Show how AGENT's MEMORY.md grew: every version and every attempt that wrote none.",
        ),
        "logs": ("orchestrator.cli.notes", "Print AGENT's daily log."),
        "summary": ("orchestrator.cli.notes", "Print GROUP's rolling summary."),
        "import": (
            "orchestrator.cli.imports",
            "Bring an existing conversation into GROUP from FILE (JSON Lines; '-' reads stdin).",
        ),
        "budget": (
            "orchestrator.cli.caps",
            "Show spending against the daily caps per agent, group and model.",
        ),
        "runs": ("orchestrator.cli.runs", "List the agents' Claude Code runs, newest first."),
        "run": (
            "orchestrator.cli.runs",
            "Show one Claude Code run in full, stop it, or revert its change.",
        ),
        "approvals": (
            "orchestrator.cli.approvals",
            "List the runs' requests for approval, newest first (the pending ones unless --state).",
        ),
        "approve": (
            "orchestrator.cli.approvals",
            "Approve request ID as the owner; its run goes on.",
        ),
        "deny": (
            "orchestrator.cli.approvals",
            "Deny request ID as the owner; its run is told (with the note) and goes on without it.",
        ),
        "allow": (
            "orchestrator.cli.approvals",
            "Show the agents' allow-lists: what each runs without asking.",
        ),
        "web": (
            "orchestrator.cli.web",
            "Serve the web console alone, against the configured services.",
        ),
    }

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted([*super().list_commands(ctx), *self.lazy])

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.lazy:
            module = importlib.import_module(self.lazy[cmd_name][0])
            found = (c for c in vars(module).values() if isinstance(c, click.Command))
            return next(c for c in found if c.name == cmd_name)
        return super().get_command(ctx, cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The command list, without importing the lazy commands."""
        names = self.list_commands(ctx)
        limit = formatter.width - 6 - max(len(name) for name in names)
        rows: list[tuple[str, str]] = []
        for name in names:
            if name in self.lazy:
                summary = click.Command(name, help=self.lazy[name][1])
                rows.append((name, summary.get_short_help_str(limit)))
            elif (command := super().get_command(ctx, name)) is not None and not command.hidden:
                rows.append((name, command.get_short_help_str(limit)))
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def invoke(self, ctx: click.Context) -> Any:
        """Run the root callback and the subcommand; our errors become one line on stderr."""
        try:
            return super().invoke(ctx)
        except OrchestratorError as exc:
            fail(str(_for_people(ctx, exc)))
        except KeyboardInterrupt:
            sys.exit(130)


def _for_people(ctx: click.Context, exc: OrchestratorError) -> OrchestratorError:
    """A service not answering is told in the light of who runs on the data folder."""
    if isinstance(exc, ServiceError) and isinstance(ctx.obj, Settings):
        # Imported on this path only: `arena --help` and `arena post` stay quick.
        from orchestrator.cli.occupant import while_up

        return while_up(ctx.obj, exc)
    return exc


@click.group(cls=ArenaGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="agent-arena", prog_name="arena")
@click.pass_context
def main(ctx: click.Context) -> None:
    """Agent Arena: one person and a team of AI role agents in group chats.

    Start everything with `arena up`; talk to it with `arena post`. Settings come from the
    environment (REDIS_URL, MQTT_URL, DATABASE_URL, ANTHROPIC_API_KEY, ARENA_*): see
    docs/configuration.md. With nothing set, Redis and MQTT run embedded and data lives in
    ./data.
    """
    ctx.obj = load_settings()


for _command in (
    serve.up,
    serve.daemon,
    serve.worker,
    chat.post,
    chat.history,
    chat.tail,
    chat.dead_letters,
    chat.retry,
    chat.route,
    status.status,
    status.prune,
    status.check,
):
    main.add_command(_command)
