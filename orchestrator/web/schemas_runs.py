"""What ``/api/runs`` answers, as models: the agents' Claude Code runs as ``arena runs --json``
and ``arena run show --json`` print them (:meth:`orchestrator.memory.runs.RunRecord.as_dict`),
and what asking one to stop did. Times are ISO 8601 in UTC."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from orchestrator.web.schemas import Answer

__all__ = ["Run", "RunCancel", "RunDetail", "RunStep", "Runs"]

_OUTCOME = (
    "How it ended, as its worker recorded it ({} while it has not ended): turns, duration_ms, "
    "cost_usd, usage (input_tokens, output_tokens, cache_read_tokens, cache_creation_tokens), "
    "denials (tools refused), session_id; what it changed in the project: files, stat "
    "(git diff --stat), commit, merged, branch (kept for review when not merged) and reason "
    "(why not merged, or why nothing was committed)."
)


class Run(Answer):
    """A Claude Code run: an agent's turn done on the shared project."""

    id: str = Field(description="The id its reply takes: MESSAGE:HOP:AGENT.")
    group: str
    agent: str
    trigger_id: str = Field(description="The message it answers.")
    root_id: str = Field(description="The person's message the turn began with.")
    hop: int
    status: str = Field(
        description="queued, running, done, failed, cancelled, stalled, timed_out, crashed or lost."
    )
    why: str = Field(description="Why the turn became a run.")
    created_at: str
    started_at: str | None
    finished_at: str | None
    cancel_requested: bool = Field(description="Someone asked it to stop.")
    text: str = Field(description="What the agent said at its end (its reply's text).")
    problem: str | None = Field(description="Why it did not end well.")
    outcome: dict[str, Any] = Field(description=_OUTCOME)


class Runs(Answer):
    """The newest runs, newest first."""

    runs: list[Run]


class RunStep(Answer):
    """One step of a run, as its card shows it: a tool called, its result, text, or a request
    for the person's approval (asked, then decided)."""

    n: int
    at: str
    kind: str = Field(description="tool, result, text or approval.")
    line: str
    tool: str | None
    is_error: bool
    approval: str | None = Field(
        default=None,
        description="For an approval step: the request's id (`GET /api/approvals/{id}`).",
    )


class RunDetail(Run):
    """A run with its steps, in order, and its requests for approval, oldest first
    (``arena run show --json``)."""

    steps: list[RunStep]
    approvals: list[dict[str, Any]] = Field(
        description="Each request as `arena approvals --json` gives it: id, what, tool, input, "
        "reason, state, created_at, decided_at, decided_by, note, always, pattern, …"
    )


class RunCancel(Answer):
    """A run asked to stop: queued (it will not start) or running (it stops within seconds)."""

    id: str
    status: str = Field(description="queued or running: what it was when asked.")
    detail: str = Field(description="What happens now, in one line.")
