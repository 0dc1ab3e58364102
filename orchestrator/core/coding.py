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

A run's steps are published as they happen, each as a :class:`Step`: on the group's steps
stream ``arena:group:{group}:steps`` (string fields) and on MQTT ``arena/groups/{group}/runs``
(QoS 1, JSON), for ``arena tail`` and the console's run card.
"""

from __future__ import annotations

import json
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
from orchestrator.core.wire import Outbound
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
    "Seen",
    "Step",
    "decide_run",
    "describe_tool",
    "in_order",
    "run_ended",
    "run_ended_fields",
    "runs_topic",
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


def runs_topic(group: str) -> str:
    """The MQTT topic a group's runs' steps are published on."""
    return f"arena/groups/{group}/runs"


@dataclass(frozen=True, slots=True, kw_only=True)
class Step:
    """One step of a run as it is published: a tool called (``Write hello.py``), its result
    (``ok``, ``error: …``) or a line the model wrote.

    ``run`` is the run's id, which is its reply's (``{message id}:{hop}:{agent}``); ``n``
    counts the run's steps from 1 and, with ``run``, names a step (one read twice is the same
    step); ``at`` is ISO 8601; ``tool`` the tool's name (None for a text).
    """

    run: str
    n: int
    at: str
    kind: str  # tool, result, text or approval
    line: str
    tool: str | None = None
    is_error: bool = False
    # For an ``approval`` step: the request's id (asked, or how it was decided).
    approval: str | None = None

    @property
    def agent(self) -> str:
        """The agent whose run it is (the last part of the run's id)."""
        return self.run.rpartition(":")[2]

    def fields(self) -> dict[str, str]:
        """Stream entry fields (all strings; no tool is ``""``, ``is_error`` is
        ``true`` or ``false``)."""
        return {
            "run": self.run,
            "n": str(self.n),
            "at": self.at,
            "kind": self.kind,
            "line": self.line,
            "tool": self.tool or "",
            "is_error": "true" if self.is_error else "false",
        } | ({"approval": self.approval} if self.approval else {})

    def as_dict(self) -> dict[str, Any]:
        """The JSON form (MQTT, the console's events): the same fields, typed."""
        return {
            "run": self.run,
            "n": self.n,
            "at": self.at,
            "kind": self.kind,
            "line": self.line,
            "tool": self.tool,
            "is_error": self.is_error,
            "approval": self.approval,
        }

    def json(self) -> bytes:
        """MQTT payload."""
        return json.dumps(self.as_dict(), ensure_ascii=False).encode("utf-8")

    @classmethod
    def from_fields(cls, fields: Mapping[str, str]) -> Step:
        """Read a step back from stream fields (what is missing or not readable is left
        empty, as :meth:`orchestrator.core.wire.Outbound.from_fields` does)."""
        number = fields.get("n", "0")
        return cls(
            run=fields.get("run", ""),
            n=int(number) if number.isdecimal() else 0,
            at=fields.get("at", ""),
            kind=fields.get("kind", ""),
            line=fields.get("line", ""),
            tool=fields.get("tool") or None,
            is_error=fields.get("is_error", "").lower() in ("true", "1"),
            approval=fields.get("approval") or None,
        )


Seen = tuple[str, Outbound | Step]  # (its stream's entry id, an outbound item or a step)


def _ms(entry_id: str) -> int:
    return int(entry_id.partition("-")[0])


def _before(posted: tuple[str, Outbound], step: tuple[str, Step]) -> bool:
    """Whether an outbound item came before a step. Entry ids tell only to the millisecond
    across two streams (each counts its own entries within one): in the same millisecond, a
    notice (a run's card) comes first, a reply (a run's end) after."""
    posted_ms, step_ms = _ms(posted[0]), _ms(step[0])
    if posted_ms != step_ms:
        return posted_ms < step_ms
    return posted[1].type == "notice"


def in_order(
    posted: list[tuple[str, Outbound]], steps: list[tuple[str, Step]], count: int
) -> list[Seen]:
    """A group's outbound items and its runs' steps, read ``count`` at most from each stream
    (each in its stream's order), as one list in the order they were added.

    A stream that gave ``count`` may hold more: what the other gave after its last entry's
    millisecond is left for the next read, which could bring something that comes before.
    """
    merged: list[Seen] = []
    i = j = 0
    while i < len(posted) and j < len(steps):
        if _before(posted[i], steps[j]):
            merged.append(posted[i])
            i += 1
        else:
            merged.append(steps[j])
            j += 1
    merged += [*posted[i:], *steps[j:]]
    full = [_ms(part[-1][0]) for part in (posted, steps) if part and len(part) >= count]
    if full:
        merged = [seen for seen in merged if _ms(seen[0]) <= min(full)]
    return merged
