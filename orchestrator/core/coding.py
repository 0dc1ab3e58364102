"""Agents that act: when an agent's turn becomes a Claude Code run on the shared project, what
the run may do, and how its steps read in the room.

An agent answers through the Messages API unless its YAML says ``runtime: claude-code``; then a
``code:`` mapping (every field optional) sets what its runs may do::

    runtime: claude-code
    code:
      acts: rules            # "rules" (default): only a turn a rule below matches is a run;
                             # "always": every turn of this agent is a run
      rules:                 # the routing rules' format; the owner is always this agent
        - name: implement
          keywords: [implement, fix, create, add, write, refactor]
      profile: editor        # reader (default) | editor | tester: the tools it starts with
      tools: [Read, Grep]    # instead of the profile's tools, exactly these
      permission_mode: dontAsk   # dontAsk (default) | acceptEdits | plan | default
      max_turns: 30          # model calls in one run
      inactivity_s: 300      # no event from the CLI for this long ends the run
      wall_s: 1800           # a run never takes longer than this

A turn the rules do not match is answered as any other, through the Messages API: the agent
still talks. The profiles: a **reader** reads (``Read``, ``Glob``, ``Grep``); an **editor**
(the developer) also writes and runs commands (``Write``, ``Edit``, ``Bash``); a **tester** reads
and runs commands (``Bash``) but edits nothing. Web tools are never given unless listed in
``tools``; ``AskUserQuestion`` never (nobody answers a terminal prompt), and
``bypassPermissions`` is refused. Under ``dontAsk`` a tool outside the list is denied, and a run
with a denial counts as failed even when the CLI reports success.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from orchestrator.core.models import (
    GROUP_ID_RE,
    NEVER_TOOLS,
    PERMISSION_MODES,
    PROFILES,
    RUNTIMES,
    WEB_TOOLS,
    CodeSpec,
    RouteDecision,
)
from orchestrator.core.routing import RuleSet
from orchestrator.errors import ValidationError

__all__ = [
    "NEVER_TOOLS",
    "PERMISSION_MODES",
    "PROFILES",
    "RUNTIMES",
    "RUN_FIELD",
    "WEB_TOOLS",
    "CodeSpec",
    "RunDecision",
    "decide_run",
    "describe_tool",
    "run_ended",
    "run_ended_fields",
    "steps_stream",
]

# On the inbound stream, an entry ``{group, run}`` says a run ended: the daemon then posts the
# run's reply in the group's order. It carries nothing else (the run is read from the
# database), so a forged one only makes the daemon look again at a run that ended.
RUN_FIELD = "run"
_RUN_ID_LIMIT = 200


@dataclass(frozen=True, slots=True, kw_only=True)
class RunDecision:
    """Whether a turn is a run, and why (shown beside the routing reason)."""

    run: bool
    why: str

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form, stored with the reply."""
        return {"run": self.run, "why": self.why}


def decide_run(
    code: CodeSpec | None, rules: RuleSet | None, text: str, agent_id: str
) -> RunDecision:
    """Whether ``agent_id``'s turn on ``text`` is a run on the project, and why.

    Args:
        code: the agent's ``code:`` (None: it answers through the Messages API only).
        rules: ``code.rules`` compiled (see :class:`~orchestrator.core.routing.RuleSet`).
        text: the message the agent answers.
        agent_id: the agent.
    """
    if code is None:
        return RunDecision(run=False, why="answers through the Messages API")
    if code.acts == "always":
        return RunDecision(run=True, why=f"{agent_id} acts on every turn (code.acts: always)")
    decision: RouteDecision | None = rules.first(text) if rules is not None else None
    if decision is None:
        return RunDecision(run=False, why="no code rule matched: a reply, not a run")
    return RunDecision(run=True, why=f"code {decision.detail}")


def describe_tool(name: str, data: Mapping[str, Any], root: str = "") -> str:
    """One line for a tool call on a run card: ``Read app.py``, ``Bash: pytest -q``.

    ``root`` (the project's folder) is left out of paths, so they read as the project's.
    """

    def path(key: str) -> str:
        value = str(data.get(key, ""))
        if root and value.startswith(root.rstrip("/") + "/"):
            value = value[len(root.rstrip("/")) + 1 :]
        return value

    if name in ("Read", "Write", "Edit", "MultiEdit", "NotebookEdit"):
        target = path("file_path") or path("notebook_path")
        return f"{name} {target}".strip()
    if name == "Bash":
        command = " ".join(str(data.get("command", "")).split())
        return f"Bash: {_clip(command, 160)}"
    if name in ("Glob", "Grep"):
        return f"{name} {_clip(str(data.get('pattern', '')), 120)}".strip()
    return name


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def run_ended_fields(group: str, run_id: str) -> dict[str, str]:
    """The inbound entry that says run ``run_id`` of ``group`` ended."""
    return {"group": group, RUN_FIELD: run_id}


def run_ended(fields: Mapping[str, str]) -> tuple[str, str] | None:
    """``(group, run id)`` when an inbound entry says a run ended (None: a message)."""
    run_id = fields.get(RUN_FIELD)
    if run_id is None:
        return None
    group = fields.get("group", "")
    if not GROUP_ID_RE.match(group) or not run_id or len(run_id) > _RUN_ID_LIMIT:
        raise ValidationError(RUN_FIELD, "a run's end names a group and a run id")
    return group, run_id


def steps_stream(group: str) -> str:
    """The stream a group's runs' steps are appended to as they happen."""
    return f"arena:group:{group}:steps"
