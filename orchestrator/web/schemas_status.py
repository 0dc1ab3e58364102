"""What ``GET /api/status`` and ``GET /api/budget`` answer, as models: the status as
``arena status --json`` prints it (:mod:`orchestrator.status.report`, whose keys monitors
read) and the spending against the daily caps as ``arena budget --json`` does
(:mod:`orchestrator.caps.report`). Times are ISO 8601; dollars are numbers."""

from __future__ import annotations

from pydantic import Field

from orchestrator.web.schemas import Answer

__all__ = [
    "AgentHeartbeat",
    "AgentStatus",
    "AgentsError",
    "ConsumerStatus",
    "DatabaseSize",
    "DayTotal",
    "GroupStatus",
    "JobCounts",
    "MemoryCounts",
    "PartitionStatus",
    "RunSummary",
    "SpendReport",
    "SpendRow",
    "Spending",
    "SpendingToday",
    "Status",
    "StorageStatus",
    "StreamStatus",
    "WorkerStatus",
]


class ConsumerStatus(Answer):
    """A daemon reading the inbound streams: entries in hand, and how long since it read."""

    name: str
    pending: int
    idle_ms: int


class PartitionStatus(Answer):
    """One inbound partition: its length, entries in hand, and the daemon holding it."""

    partition: int
    length: int
    pending: int
    owner: str | None


class StreamStatus(Answer):
    """The inbound streams, the live daemons and the leases they hold."""

    totals: dict[str, int] = Field(description="The daemons' counters by name.")
    inbox_length: int
    pending: int
    pending_by_consumer: dict[str, int]
    lag: int | None
    oldest_pending_idle_ms: int
    consumers: list[ConsumerStatus]
    dead_letters: int
    router: str | None = Field(description="The daemon holding the router lease.")
    daemons: list[str]
    partitions: list[PartitionStatus]


class GroupStatus(Answer):
    """A group: its stored messages, the last one's time and its outbox's length."""

    group: str
    messages: int
    last_at: str | None
    outbox_length: int


class RunSummary(Answer):
    """One attempt to distil an agent's MEMORY.md, or a hand edit of it."""

    at: str
    status: str = Field(description="written, skipped, rejected, conflict or error.")
    trigger: str
    version: int | None
    reason: str


class AgentHeartbeat(Answer):
    """An agent's last successful and failed heartbeats, its MEMORY.md's latest version and
    the last hand edit of it."""

    last_ok: RunSummary | None
    last_failed: RunSummary | None
    memory_md_version: int | None
    memory_md_at: str | None
    last_hand_edit: RunSummary | None


class AgentStatus(Answer):
    """One agent of the team, with its heartbeat."""

    id: str
    name: str
    role: str
    model: str
    default: bool
    heartbeat: AgentHeartbeat


class AgentsError(Answer):
    """Why the agent files could not be read (then the only item of ``agents``)."""

    error: str


class WorkerStatus(Answer):
    """A background worker (RQ), with its heartbeat's age when the status was read."""

    name: str
    state: str
    queues: list[str]
    last_heartbeat: str | None
    heartbeat_age_s: float | None


class JobCounts(Answer):
    """The background queue's counts, and how long its oldest job has waited."""

    queued: int
    oldest_queued_s: float | None
    running: int
    retrying: int
    failed: int


class DatabaseSize(Answer):
    """The database's dialect and its size on disk (null: unknown)."""

    dialect: str
    bytes: int | None


class MemoryCounts(Answer):
    """Stored memories, in all and by status."""

    total: int
    active: int
    superseded: int
    archived: int


class StorageStatus(Answer):
    """What is stored and how much room it takes."""

    database: DatabaseSize
    messages: int
    memories: MemoryCounts
    workspaces_bytes: int
    data_bytes: int
    history_retention_days: int
    archive_retention_days: int


class Status(Answer):
    """Streams, daemons, partitions, groups, agents, workers, jobs and storage, and what has
    made no progress (``arena status --json``)."""

    streams: StreamStatus
    groups: list[GroupStatus]
    agents: list[AgentStatus | AgentsError]
    workers: list[WorkerStatus]
    jobs: JobCounts
    storage: StorageStatus
    stuck: list[str] = Field(description="What has made no progress, one line each.")


class SpendingToday(Answer):
    """Today's tokens and dollars, and the caps they count against (null: none)."""

    tokens: int
    usd: float
    tokens_cap: int | None
    usd_cap: float | None


class Spending(Answer):
    """Tokens and dollars over a span of days."""

    tokens: int
    usd: float


class SpendRow(Answer):
    """One agent's, group's or model's spending (``all``: everyone's)."""

    scope: str = Field(description="agent, group, model or all.")
    name: str
    today: SpendingToday
    last_days: Spending


class DayTotal(Answer):
    """Everyone's spending on one day."""

    day: str
    tokens: int
    usd: float


class SpendReport(Answer):
    """Spending against the daily caps (``arena budget --json``)."""

    day: str
    resets_at: str = Field(description="When today's caps reset (midnight in ARENA_TZ).")
    days: int
    caps_set: bool = Field(description="Whether any cap is in force.")
    caps_from: str = Field(
        description="daemon: the caps the running daemon enforces; settings: the console's."
    )
    rows: list[SpendRow]
    totals: list[DayTotal] = Field(description="Each day's total, today first.")
