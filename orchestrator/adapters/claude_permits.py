"""What a Claude Code run asks before a tool runs, through the SDK's permission callback
(``can_use_tool``), and how the CLI's own answers are read.

With a **gate** (:class:`Gate`, the arena's approvals), the CLI runs in its ``default``
permission mode: the read tools run unasked (the path guard still keeps them to the roots);
every edit and command comes to the gate, which lets it run, or denies it with a message the
model reads as the tool's result (the person's note, or that the request awaits the person).
Denials the gate made are decisions, not failures: they do not fail the run as the CLI's own
denials do. Without a gate the CLI runs in the agent's mode with its tools allowed outright.
"""

from __future__ import annotations

import warnings
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import claude_agent_sdk as sdk

from orchestrator.core.models import Usage

# The read tools run unasked by design (above), so the callback never sees them; the SDK warns
# of that at every run, a line in the log each time. Silenced as its documentation says.
warnings.filterwarnings("ignore", category=sdk.CanUseToolShadowedWarning)

__all__ = [
    "READ_TOOLS",
    "Emit",
    "Gate",
    "Permit",
    "denied_tool",
    "failure",
    "first_line",
    "permission_callback",
    "text_of",
    "usage_of",
]

READ_TOOLS = ("Read", "Glob", "Grep", "LS")
# A step the gate shows on the run's card: kind, line, tool, approval id.
Emit = Callable[[str, str, str | None, str | None], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class Permit:
    """The gate's answer: run the tool, or not and why (the model reads ``message``)."""

    allow: bool
    message: str = ""


class Gate(Protocol):
    """Decides each edit and command of one run; ``awaiting`` names the request the run
    stopped for (None while it goes on)."""

    awaiting: str | None

    async def __call__(self, tool: str, data: dict[str, Any], emit: Emit) -> Permit:
        """Whether ``tool`` may run with ``data``; ``emit`` shows a step on the card."""
        ...


def permission_callback(gate: Gate, emit: Emit, decided: set[str]) -> sdk.CanUseTool:
    """The SDK's ``can_use_tool`` asking ``gate``; the tool calls it denied go in ``decided``."""

    async def check(
        tool: str, data: dict[str, Any], context: sdk.ToolPermissionContext
    ) -> sdk.PermissionResultAllow | sdk.PermissionResultDeny:
        permit = await gate(tool, data, emit)
        if permit.allow:
            return sdk.PermissionResultAllow()
        if context.tool_use_id:
            decided.add(context.tool_use_id)
        return sdk.PermissionResultDeny(message=permit.message)

    return check


def usage_of(total: Mapping[str, Any] | None, calls: Mapping[str, Mapping[str, Any]]) -> Usage:
    """The run's tokens: the CLI's total, else the sum of the calls seen."""
    parts = [total] if total is not None else list(calls.values())

    def tokens(key: str) -> int:
        return sum(int(part.get(key) or 0) for part in parts)

    return Usage(
        input_tokens=tokens("input_tokens"),
        output_tokens=tokens("output_tokens"),
        cache_read_tokens=tokens("cache_read_input_tokens"),
        cache_creation_tokens=tokens("cache_creation_input_tokens"),
    )


def failure(result: sdk.ResultMessage, denials: tuple[str, ...]) -> str:
    """Why a run the CLI ended failed: its errors, its error text, the tools it was denied."""
    if result.errors:
        return "; ".join(result.errors)
    if result.is_error and result.result:  # an API error says so there, subtype "success"
        return first_line(result.result)
    if denials:
        return f"denied {', '.join(denials)}"
    return f"the run ended: {result.subtype}"


def denied_tool(denial: Any) -> tuple[str, str | None]:
    """A denial the CLI reports: the tool's name and its call's id."""
    if isinstance(denial, Mapping):
        tool = str(denial.get("tool_name") or denial.get("tool") or "a tool")
        return tool, denial.get("tool_use_id")
    return str(getattr(denial, "tool_name", "a tool")), getattr(denial, "tool_use_id", None)


def text_of(content: str | list[dict[str, Any]] | None) -> str:
    """A tool result's text."""
    if isinstance(content, str):
        return content
    return " ".join(str(part.get("text", "")) for part in content or () if isinstance(part, dict))


def first_line(text: str, limit: int = 200) -> str:
    """The first line of ``text`` that says something, printable, at most ``limit`` long."""
    line = next((part.strip() for part in text.splitlines() if part.strip()), "")
    if len(line) > limit:
        line = line[: limit - 1] + "…"
    return "".join(c if c.isprintable() else "?" for c in line)
