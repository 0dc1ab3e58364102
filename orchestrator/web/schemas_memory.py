"""What the console's API of memory answers, as models: session memories (listed, searched,
one with why it is remembered, corrected), a group's rolling summary, an agent's files
(``MEMORY.md`` now, its growth, a version's diff, its daily logs) and the context of a turn
(a preview, or the report stored with a past reply). Times are ISO 8601.

The context and recall reports are sent as they were made (a past reply's as its turn stored
it): objects whose keys are described, not fixed, by the schema.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from orchestrator.web.schemas import AgentView, Answer, optional_key

__all__ = [
    "AgentDetail",
    "AgentFiles",
    "Attempt",
    "CitedMessage",
    "ContextBudgets",
    "ContextPreview",
    "DailyLog",
    "Growth",
    "LeftOut",
    "LogLine",
    "MemoryChange",
    "MemoryCitation",
    "MemoryDetail",
    "MemoryEdited",
    "MemoryEntry",
    "MemoryList",
    "MemoryMdNow",
    "MemoryOut",
    "MemorySearch",
    "RecallHit",
    "ReplyReport",
    "StepTokens",
    "Summarized",
    "Summary",
    "SummaryDiff",
    "SummaryVersion",
    "ToolCall",
    "ToolsReport",
    "VersionDiff",
    "VersionRow",
]

_REPORT = (
    "The context cost report: window, reserved_output, correction, available, tokens (per "
    "layer and total), decisions, over_budget, recall (ids), history_messages, citations "
    "and recall_dropped."
)


class MemoryCitation(Answer):
    """Where a memory came from: ``kind`` (e.g. message), ``ref`` (its id), ``locator`` (a
    path to resolve it) and the ``scope`` it was said in."""

    kind: str
    ref: str
    locator: str
    scope: str


class MemoryOut(Answer):
    """A stored memory entry (``arena memory export``)."""

    id: int
    scope: str
    scope_id: str
    namespace: str
    type: str
    content: str
    key: str | None
    status: str = Field(description="active, superseded or archived.")
    confidence: float
    verified: bool
    tags: list[str]
    task_id: str | None
    agent: str
    group_id: str | None
    source_message_id: str | None
    citation: MemoryCitation | None
    written_by: str = Field(description="agent, job, import or person.")
    count: int
    created_at: str
    updated_at: str
    last_seen_at: str
    last_used_at: str | None
    supersedes: int | None
    superseded_by: int | None
    extra: dict[str, Any]


class MemoryEntry(MemoryOut):
    """A memory, and whether it is pinned."""

    pinned: bool


class LeftOut(Answer):
    """Why a turn would leave a memory out: the recall layer that dropped it, and why."""

    layer: str
    reason: str


class RecallHit(MemoryOut):
    """A memory recall found: its score and trust label, and why a turn would leave it out
    (``kept`` false)."""

    recalled_in: str = Field(description="The group it was recalled in.")
    score: float | None
    similarity: float | None
    trust: str
    pinned: bool
    kept: bool
    dropped: LeftOut | None


class MemoryList(Answer):
    """The newest memories matching the filters."""

    memories: list[MemoryEntry]


class MemorySearch(Answer):
    """Recall for ``agent`` over ``query``: what a turn would keep first, then what it would
    leave out."""

    query: str
    agent: str
    memories: list[RecallHit]


class CitedMessage(Answer):
    """The message a memory cites."""

    id: str
    group: str
    sender: str
    text: str
    created_at: str


class MemoryChange(Answer):
    """A change made to a memory (``arena memory history --json``)."""

    entry_id: int
    action: str = Field(description="forget, restore, edit, pin or unpin.")
    by: str
    at: str
    old_content: str | None
    new_content: str | None
    new_entry_id: int | None
    reason: str | None


class MemoryDetail(MemoryOut):
    """A memory, why it is remembered (the message it cites, its reinforcements) and every
    change to it."""

    pinned: bool
    reinforced: int
    cited_message: CitedMessage | None
    history: list[MemoryChange]


class MemoryEdited(Answer):
    """A correction: the old entry (now superseded) and the new one."""

    old: MemoryOut
    new: MemoryOut


class SummaryVersion(Answer):
    """One version of a group's rolling summary."""

    version: int
    created_at: str
    trigger: str
    tokens: int
    lines_added: int
    lines_removed: int
    sha256: str
    source: dict[str, Any]


class SummaryDiff(Answer):
    """A summary version's text and its unified diff against the one before."""

    version: int
    text: str
    diff: str


class Summary(Answer):
    """A group's rolling summary (empty: none yet) and its versions, oldest first."""

    group: str
    text: str
    versions: list[SummaryVersion]
    version: SummaryDiff | None = optional_key("The version asked for, with ?version=.")


class Summarized(Answer):
    """The summary job: its id, its status and one line on its outcome."""

    job_id: str
    enqueued: bool = Field(description="False: the same job was already queued.")
    status: str
    detail: str


class AgentDetail(AgentView):
    """An agent: its id, name, role, colour, description and model."""

    description: str
    model: str


class MemoryMdNow(Answer):
    """``MEMORY.md`` now: its text, its tokens against the budget, entries and version."""

    text: str
    tokens: int
    budget_tokens: int
    entries: int
    version: int = Field(description="Its latest version (0: none yet).")


class AgentFiles(Answer):
    """An agent, its identity files (null: absent) and its ``MEMORY.md``."""

    agent: AgentDetail
    identity: dict[str, str | None]
    memory_md: MemoryMdNow


class VersionRow(Answer):
    """A version of ``MEMORY.md``: when, why, its size and its changes."""

    version: int
    at: str
    trigger: str
    tokens: int
    entries: int
    lines_added: int
    lines_removed: int
    source: dict[str, Any]


class VersionDiff(VersionRow):
    """A version of ``MEMORY.md`` with its text and its diff against the one before."""

    text: str
    diff: str


class Attempt(Answer):
    """An attempt that wrote no version, and why."""

    at: str
    trigger: str
    status: str = Field(description="skipped, rejected, conflict or error.")
    reason: str


class Growth(Answer):
    """How ``MEMORY.md`` grew (``arena growth --json``)."""

    agent: str
    budget_tokens: int
    versions: list[VersionRow]
    attempts: list[Attempt]


class LogLine(Answer):
    """A line of a daily log, with the group and message it came from (null: not said)."""

    text: str
    group: str | None
    message_id: str | None


class DailyLog(Answer):
    """An agent's log of one day, and the days that have one."""

    agent: str
    date: str
    lines: list[LogLine]
    days: list[str]


class ContextBudgets(Answer):
    """Each layer's token budget."""

    identity: int
    summary: int
    memory_md: int
    logs: int
    recall: int


class ContextPreview(Answer):
    """The context an agent's next turn would get (``arena context --json``)."""

    agent: str
    group: str
    model: str
    system: str
    system_tail: str = Field(description="The part of the system prompt each turn changes.")
    messages: list[dict[str, str]] = Field(description="The turns: role and content.")
    report: dict[str, Any] = Field(description=_REPORT)
    budgets: ContextBudgets


class ToolCall(Answer):
    """A memory tool call of a turn."""

    name: str
    input_chars: int
    result_chars: int
    is_error: bool
    line: str


class StepTokens(Answer):
    """One model call's tokens."""

    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    cache_creation_tokens: int


class ToolsReport(Answer):
    """The memory tools a turn called and every model call's tokens, in order."""

    calls: list[ToolCall]
    steps: list[StepTokens]


class ReplyReport(Answer):
    """The context cost report stored with a past reply."""

    id: str
    group: str
    agent: str | None
    created_at: str
    report: dict[str, Any] = Field(description=_REPORT)
    recall: dict[str, Any] | None = Field(description="What recall found, kept and left out.")
    tools: ToolsReport | None = Field(description="Null: it called no memory tool.")
