"""What ``/api/approvals`` and ``/api/allow`` answer, as models: the runs' requests for the
person's approval as :meth:`orchestrator.memory.approvals.ApprovalRecord.as_dict` gives them
(``arena approvals --json``), a decision's outcome, and the agents' allow-lists. Times are
ISO 8601 in UTC."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from orchestrator.web.schemas import Answer

__all__ = [
    "AllowEntry",
    "AllowList",
    "AllowRemoval",
    "AllowRemoved",
    "Approval",
    "ApprovalDecided",
    "ApprovalList",
    "Approve",
    "Deny",
]

MAX_NOTE_CHARS = 2000


class Approval(Answer):
    """A run's request: what the agent wants to do, why, and what became of it."""

    id: str = Field(description="ap- and 10 lowercase hex digits.")
    run: str = Field(description="The run that asks (`GET /api/runs/{id}`).")
    group: str
    agent: str
    kind: str = Field(description="tool (a tool call) or cap (a run past a daily cap).")
    tool: str
    input: dict[str, Any] = Field(description="The tool's full input: the command, the path…")
    cwd: str = Field(description="Where it would run.")
    reason: str = Field(description="Why it is asked: deletes files, pushes, a path outside…")
    why: str = Field(description="The agent's last words before it asked.")
    preview: str = Field(description="What an edit would write ('' when there is nothing to show).")
    pattern: str | None = Field(
        description="What **Always** would put on the agent's allow-list (null: only once)."
    )
    decider: str = Field(description="Who may decide it.")
    state: str = Field(description="pending, approved, denied, expired, cancelled or orphaned.")
    created_at: str
    expires_at: str = Field(description="When it counts as denied unless decided.")
    decided_at: str | None
    decided_by: str | None
    note: str | None = Field(description="The decider's note (the agent is told it).")
    always: bool = Field(description="Approved with its pattern put on the allow-list.")
    used: bool = Field(description="The run has used the approval (once at most).")


class ApprovalList(Answer):
    """Requests, newest first."""

    approvals: list[Approval]


class ApprovalDecided(Answer):
    """A decision that counted: the request as it is now, and what happened in one line."""

    approval: Approval
    message: str


class AllowEntry(Answer):
    """A pattern an agent uses without asking (``Bash(npm install *)``, ``Write(/abs/path)``)."""

    agent: str
    pattern: str
    added_by: str
    added_at: str
    approval: str | None = Field(description="The request whose Always added it.")


class AllowList(Answer):
    """The allow-lists, by agent, oldest first."""

    rules: list[AllowEntry]


class AllowRemoved(Answer):
    """An allow-list entry removed: the agent asks again for what it allowed."""

    agent: str
    pattern: str
    message: str


class Approve(BaseModel):
    """Approve a request: once, or always (its pattern goes on the agent's allow-list)."""

    always: bool = Field(default=False, description="Also allow its pattern from now on.")
    note: str | None = Field(
        default=None, max_length=MAX_NOTE_CHARS, description="Told to the agent."
    )


class Deny(BaseModel):
    """Deny a request, with a note the agent is told (what to do instead)."""

    note: str | None = Field(
        default=None, max_length=MAX_NOTE_CHARS, description="Told to the agent."
    )


class AllowRemoval(BaseModel):
    """Which allow-list entry to remove."""

    agent: str = Field(min_length=1, max_length=64)
    pattern: str = Field(min_length=1, max_length=2000)
