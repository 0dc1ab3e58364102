"""``arena status``'s data: what the daemon is doing and how much is stored, gathered from
Redis, the database, RQ and the data folders into a :class:`~orchestrator.status.report.Status`."""

from __future__ import annotations

import asyncio
import contextlib
import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path

from rq import Worker
from sqlalchemy import text
from sqlalchemy.engine import Engine

from orchestrator.adapters.outbox import OutboxReader
from orchestrator.adapters.probes import ping_redis
from orchestrator.adapters.redis_client import connect, connect_async, translated
from orchestrator.adapters.stream_stats import stream_stats
from orchestrator.background.queue import fetch_job, queue
from orchestrator.core.agents import load_agents
from orchestrator.core.models import AgentSpec
from orchestrator.errors import BusError, OrchestratorError
from orchestrator.memory.db import open_engine
from orchestrator.memory.versions.hand_edit import HAND_EDIT
from orchestrator.memory.versions.store import Run, VersionStore
from orchestrator.runtime.wiring import Wiring
from orchestrator.settings import Settings
from orchestrator.status.report import (
    AgentStatus,
    Database,
    GroupStatus,
    Heartbeat,
    Jobs,
    Memories,
    RunSummary,
    Status,
    Storage,
    WorkerStatus,
    stuck,
)

__all__ = ["status"]

_FAILED_RUNS = ("error", "rejected", "conflict")


@dataclass(frozen=True, slots=True, kw_only=True)
class _Stored:
    """What the database holds: groups with their counts, sizes and the agents' heartbeats."""

    groups: tuple[GroupStatus, ...]  # outbox lengths are read from Redis later
    messages: int
    memories: Memories
    database: Database
    heartbeats: dict[str, Heartbeat]


async def status(settings: Settings, *, now: datetime | None = None) -> Status:
    """What the daemon is doing, from Redis, the database and the data folders.

    Args:
        settings: Where everything is, and the ``stuck_after_s`` threshold.
        now: The time ages are measured against (default: the current time).

    Raises:
        ServiceError: when Redis cannot be reached.
    """
    now = now or datetime.now(UTC)
    await ping_redis(settings.effective_redis_url, timeout_s=3)
    specs, agents_error = _agents(settings)
    redis = connect_async(settings.effective_redis_url)
    outboxes = OutboxReader(redis)
    try:
        streams = await stream_stats(redis)  # its own error says what it could not read
        try:
            stored = await asyncio.to_thread(_stored, settings, [a.id for a in specs])
            groups = [
                replace(g, outbox_length=await outboxes.length(g.group)) for g in stored.groups
            ]
            workers, jobs = await asyncio.to_thread(_background, settings, now)
        except BusError as exc:
            raise BusError(f"cannot read status: {exc.problem}") from exc
    finally:
        await redis.aclose()
    agents = tuple(_agent(a, stored.heartbeats[a.id]) for a in specs)
    return Status(
        streams=streams,
        groups=tuple(groups),
        agents=agents,
        workers=workers,
        jobs=jobs,
        storage=await asyncio.to_thread(_storage, settings, stored),
        stuck=tuple(stuck(streams, settings.stuck_after_s, jobs=jobs, workers=workers)),
        agents_error=agents_error,
    )


def _agents(settings: Settings) -> tuple[tuple[AgentSpec, ...], str | None]:
    """The team, or why its files cannot be read."""
    try:
        return load_agents(settings.agents_dir), None
    except OrchestratorError as exc:
        return (), str(exc)


def _agent(spec: AgentSpec, heartbeat: Heartbeat) -> AgentStatus:
    return AgentStatus(
        id=spec.id,
        name=spec.name,
        role=spec.role,
        model=spec.model,
        default=spec.default,
        heartbeat=heartbeat,
    )


def _stored(settings: Settings, agent_ids: Sequence[str]) -> _Stored:
    """Groups, row counts, the database's size and each agent's heartbeats (one engine)."""
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    with open_engine(settings.effective_database_url) as engine:
        wiring = Wiring(settings, engine)
        history, versions = wiring.history, wiring.versions
        numbers = wiring.session.stats()
        by_status = numbers["by_status"]
        groups = tuple(
            GroupStatus(
                group=g.group,
                messages=g.messages,
                last_at=g.last_at.isoformat() if g.last_at else None,
                outbox_length=0,
            )
            for g in history.groups()
        )
        messages = history.count()
        memories = Memories(
            total=numbers["total"],
            active=by_status.get("active", 0),
            superseded=by_status.get("superseded", 0),
            archived=by_status.get("archived", 0),
        )
        size = Database(dialect=engine.dialect.name, bytes=_postgres_bytes(engine))
        heartbeats = {agent: _heartbeat(versions, agent) for agent in agent_ids}
    if engine.dialect.name == "sqlite":
        # Measured with our connections closed: as the daemon leaves it, WAL included.
        size = Database(dialect=size.dialect, bytes=_sqlite_bytes(engine.url.database))
    return _Stored(
        groups=groups, messages=messages, memories=memories, database=size, heartbeats=heartbeats
    )


def _heartbeat(versions: VersionStore, agent: str) -> Heartbeat:
    """The agent's last successful distillation, its last failed one if that is newer, and its
    last hand edit (a person's attempt: never a heartbeat, whatever came of it)."""
    runs = versions.runs("memory_md", agent)
    beats = [r for r in reversed(runs) if r.trigger != HAND_EDIT]
    ok = next((r for r in beats if r.status in ("written", "skipped")), None)
    failed = next((r for r in beats if r.status in _FAILED_RUNS), None)
    if failed is not None and ok is not None and failed.created_at <= ok.created_at:
        failed = None
    hand_edit = next((r for r in reversed(runs) if r.trigger == HAND_EDIT), None)
    latest = versions.latest("memory_md", agent)
    return Heartbeat(
        last_ok=_run(ok),
        last_failed=_run(failed),
        memory_md_version=latest.version if latest else None,
        memory_md_at=latest.created_at.isoformat() if latest else None,
        last_hand_edit=_run(hand_edit),
    )


def _run(run: Run | None) -> RunSummary | None:
    if run is None:
        return None
    return RunSummary(
        at=run.created_at.isoformat(),
        status=run.status,
        trigger=run.trigger,
        version=run.version,
        reason=run.reason,
    )


def _postgres_bytes(engine: Engine) -> int | None:
    if engine.dialect.name != "postgresql":
        return None
    with engine.connect() as conn:
        return int(conn.execute(text("SELECT pg_database_size(current_database())")).scalar_one())


def _sqlite_bytes(path: str | None) -> int | None:
    """The database file with its write-ahead log and shared-memory index."""
    if not path or path == ":memory:":
        return None
    return sum(_file_bytes(Path(path + suffix)) for suffix in ("", "-wal", "-shm"))


def _file_bytes(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def _folder_bytes(folder: Path) -> int:
    """The bytes of the regular files under ``folder`` (symbolic links are not followed)."""
    total = 0
    for root, _dirs, files in os.walk(folder):
        for name in files:
            with contextlib.suppress(OSError):  # removed while we walk
                info = os.lstat(os.path.join(root, name))
                if stat.S_ISREG(info.st_mode):
                    total += info.st_size
    return total


def _storage(settings: Settings, stored: _Stored) -> Storage:
    return Storage(
        database=stored.database,
        messages=stored.messages,
        memories=stored.memories,
        workspaces_bytes=_folder_bytes(settings.workspaces_dir),
        data_bytes=_folder_bytes(settings.data_dir),
        history_retention_days=settings.history_retention_days,
        archive_retention_days=settings.archive_retention_days,
    )


def _background(settings: Settings, now: datetime) -> tuple[tuple[WorkerStatus, ...], Jobs]:
    """RQ's workers with their heartbeat's age, and the queue's counts.

    Raises:
        BusError: when Redis cannot be read.
    """
    connection = connect(settings.effective_redis_url)
    try:
        with translated():
            workers = tuple(
                WorkerStatus(
                    name=w.name,
                    state=str(w.get_state()),
                    queues=tuple(w.queue_names()),
                    last_heartbeat=w.last_heartbeat.isoformat() if w.last_heartbeat else None,
                    heartbeat_age_s=_age_s(w.last_heartbeat, now),
                )
                for w in Worker.all(connection=connection)
            )
            q = queue(connection)
            oldest_ids = q.get_job_ids(0, 1)
            oldest = fetch_job(connection, oldest_ids[0]) if oldest_ids else None
            jobs = Jobs(
                queued=q.count,
                oldest_queued_s=_age_s(oldest.enqueued_at, now) if oldest else None,
                running=q.started_job_registry.count,
                retrying=q.scheduled_job_registry.count,
                failed=q.failed_job_registry.count,
            )
            return workers, jobs
    finally:
        connection.close()


def _age_s(then: datetime | None, now: datetime) -> float | None:
    """Seconds from ``then`` to ``now``; RQ's times are naive UTC."""
    if then is None:
        return None
    return round((now - (then if then.tzinfo else then.replace(tzinfo=UTC))).total_seconds(), 1)
