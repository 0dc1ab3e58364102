"""What ``arena status`` reports, as values: the streams, groups, agents with their heartbeats
(and their last hand edit of ``MEMORY.md``), workers, background jobs and storage, and
:func:`stuck`, what has made no progress.

:mod:`orchestrator.status.survey` gathers a :class:`Status`, its :class:`Streams` as
:func:`orchestrator.adapters.stream_stats.stream_stats` reads them; :meth:`Status.as_dict` is
the ``--json`` form (its keys are a public interface: monitors read them).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from orchestrator.adapters.stream_stats import ConsumerInfo, Partition, Streams

__all__ = [
    "AgentStatus",
    "ConsumerInfo",
    "Database",
    "GroupStatus",
    "Heartbeat",
    "Jobs",
    "Memories",
    "Partition",
    "RunSummary",
    "Status",
    "Storage",
    "Streams",
    "WorkerStatus",
    "stuck",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupStatus:
    """A group: its stored messages, the last one's time (ISO 8601) and its outbox's length."""

    group: str
    messages: int
    last_at: str | None
    outbox_length: int


@dataclass(frozen=True, slots=True, kw_only=True)
class RunSummary:
    """One attempt to distil an agent's MEMORY.md (times are ISO 8601)."""

    at: str
    status: str
    trigger: str
    version: int | None
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Heartbeat:
    """An agent's last successful heartbeat (a distillation of its MEMORY.md), its last failed
    one when that is newer, its MEMORY.md's latest version, and the last hand edit of it.

    A hand edit is a person's, not a heartbeat: one the gate refused (``status`` "rejected")
    or that came too late (``"conflict"``) is ``last_hand_edit``, never ``last_failed``.
    """

    last_ok: RunSummary | None = None
    last_failed: RunSummary | None = None
    memory_md_version: int | None = None
    memory_md_at: str | None = None
    last_hand_edit: RunSummary | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentStatus:
    """One agent of the team, with its heartbeat."""

    id: str
    name: str
    role: str
    model: str
    default: bool
    heartbeat: Heartbeat


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerStatus:
    """A background worker (RQ), with its heartbeat's age at the time of the report."""

    name: str
    state: str
    queues: tuple[str, ...]
    last_heartbeat: str | None
    heartbeat_age_s: float | None


@dataclass(frozen=True, slots=True, kw_only=True)
class Jobs:
    """The background queue's counts, and how long its oldest job has waited."""

    queued: int = 0
    oldest_queued_s: float | None = None
    running: int = 0
    retrying: int = 0
    failed: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class Database:
    """The database's dialect and its size on disk (None when unknown)."""

    dialect: str
    bytes: int | None


@dataclass(frozen=True, slots=True, kw_only=True)
class Memories:
    """Stored memories, in all and by status."""

    total: int
    active: int
    superseded: int
    archived: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Storage:
    """What is stored and how much room it takes."""

    database: Database
    messages: int
    memories: Memories
    workspaces_bytes: int
    data_bytes: int
    history_retention_days: int
    archive_retention_days: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Status:
    """Everything ``arena status`` reports. ``agents_error`` says why the agent files could
    not be read (then ``agents`` is empty)."""

    streams: Streams
    groups: tuple[GroupStatus, ...]
    agents: tuple[AgentStatus, ...]
    workers: tuple[WorkerStatus, ...]
    jobs: Jobs
    storage: Storage
    stuck: tuple[str, ...]
    agents_error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """The ``--json`` form: plain dicts and lists, with the keys monitors read."""
        data = asdict(self)
        error = data.pop("agents_error")
        if error is not None:
            data["agents"] = [{"error": error}]
        return data


def stuck(
    streams: Streams,
    after_s: float,
    *,
    jobs: Jobs | None = None,
    workers: Sequence[WorkerStatus] = (),
) -> list[str]:
    """What has made no progress for longer than ``after_s`` (for monitors).

    Args:
        streams: The inbound streams.
        after_s: The threshold.
        jobs: The background queue's counts.
        workers: The background workers, each with its heartbeat's age.
    """
    problems = []
    limit_ms = after_s * 1000
    if streams.pending and streams.oldest_pending_idle_ms > limit_ms:
        problems.append(f"a message has been in hand for {streams.oldest_pending_idle_ms // 1000}s")
    if streams.lag:
        freshest = min((c.idle_ms for c in streams.consumers), default=None)
        if freshest is None or freshest > limit_ms:
            problems.append(
                f"{streams.lag} messages wait and no daemon has read the inbox for "
                f"{'ever' if freshest is None else str(freshest // 1000) + 's'}"
            )
    waited = jobs.oldest_queued_s if jobs else None
    if jobs and waited is not None and waited > after_s:
        ages = [w.heartbeat_age_s for w in workers if w.heartbeat_age_s is not None]
        if not ages or min(ages) > after_s:
            beat = "no worker is running" if not ages else f"the last one {int(min(ages))}s ago"
            problems.append(
                f"{jobs.queued} background jobs wait (the oldest for "
                f"{int(waited)}s) and no worker has a heartbeat: {beat}"
            )
    return problems
