"""``arena check`` and ``arena status``: what is configured, what is running, and how much is
stored."""

from __future__ import annotations

import asyncio
import contextlib
import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import redis as sync_redis
from redis.asyncio import Redis
from redis.exceptions import RedisError
from rq import Worker
from sqlalchemy import text
from sqlalchemy.engine import Engine

from orchestrator.adapters.bus import stream_stats
from orchestrator.adapters.probes import ping_mqtt, ping_redis
from orchestrator.background.queue import fetch_job, queue
from orchestrator.core.agents import load_agents
from orchestrator.core.context import ContextLimits, Identity, Layers, PastMessage, build_context
from orchestrator.core.models import AgentSpec, ChatMessage, MessageKind
from orchestrator.core.prompts import Prompts
from orchestrator.core.tokens import TokenCounter
from orchestrator.core.wire import outbox_stream
from orchestrator.errors import BusError, OrchestratorError
from orchestrator.memory.conversation.store import HistoryStore
from orchestrator.memory.db import make_engine
from orchestrator.memory.records import STATUSES
from orchestrator.memory.session import SessionMemory
from orchestrator.memory.versions import Run, VersionStore
from orchestrator.settings import Settings

__all__ = ["CheckResult", "run_checks", "status"]


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckResult:
    """One line of ``arena check``."""

    name: str
    ok: bool
    detail: str


def _check_agents(settings: Settings) -> CheckResult:
    try:
        agents = load_agents(settings.agents_dir)
    except OrchestratorError as exc:
        return CheckResult(name="agents", ok=False, detail=str(exc))
    default = next((a.id for a in agents if a.default), agents[0].id)
    ids = ", ".join(a.id for a in agents)
    return CheckResult(name="agents", ok=True, detail=f"{ids} (default: {default})")


def _check_templates(settings: Settings) -> CheckResult:
    prompts = Prompts(settings.prompts_dir)
    names = prompts.names()
    if not names:
        return CheckResult(name="templates", ok=False, detail=f"none in {settings.prompts_dir}")
    try:
        agents = load_agents(settings.agents_dir)
        sample = ChatMessage(
            id="0-1",
            group="check",
            sender="user",
            kind=MessageKind.HUMAN,
            text="@architect we decided to use JWT",
            created_at=datetime.now(UTC),
        )
        layers = Layers(
            identity=Identity(claude="role", soul="character"),
            summary="goal: a sample",
            memory_md="- a lesson",
            logs="- 10:00 [note] a note",
            history=[PastMessage(message=sample, tokens=8)],
        )
        build_context(
            agent=agents[0],
            agents=agents,
            layers=layers,
            trigger=sample,
            prompts=prompts,
            now=sample.created_at,
            tz=settings.tz,
            limits=ContextLimits(),
            counter=TokenCounter(),
        )
        _render_job_templates(prompts, agents[0], settings)
        unknown = sorted(set(names) - KNOWN_TEMPLATES)
        if unknown:
            return CheckResult(
                name="templates",
                ok=False,
                detail=f"no sample data to render {', '.join(unknown)} with",
            )
    except OrchestratorError as exc:
        return CheckResult(name="templates", ok=False, detail=str(exc))
    return CheckResult(name="templates", ok=True, detail=", ".join(names))


KNOWN_TEMPLATES = frozenset(
    {"system.md.j2", "turn.md.j2", "memory_guide.md.j2", "distill.md.j2", "summary.md.j2"}
)


def _render_job_templates(prompts: Prompts, agent: AgentSpec, settings: Settings) -> None:
    """Render the background jobs' templates on sample data."""
    prompts.render(
        "distill.md.j2",
        agent=agent,
        day="2026-01-01",
        memory_md="- an old lesson",
        log="- 10:00 [lesson] a new lesson",
        budget_tokens=settings.distill_budget_tokens,
        max_drop_percent=round(settings.distill_max_drop_share * 100),
    )
    prompts.render(
        "summary.md.j2",
        group="check",
        previous="goal: a sample",
        messages=[
            {
                "seq": 1,
                "when": "2026-01-01 10:00",
                "sender": "user",
                "kind": "human",
                "text": "we decided to use JWT",
            }
        ],
        budget_tokens=settings.summary_budget_tokens,
        tz=settings.tz,
    )


async def _check_service(name: str, probe: Any) -> CheckResult:
    try:
        await probe
    except OrchestratorError as exc:
        return CheckResult(name=name, ok=False, detail=str(exc))
    return CheckResult(name=name, ok=True, detail="reachable")


def _check_database(settings: Settings) -> CheckResult:
    try:
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        engine = make_engine(settings.effective_database_url)
        count = HistoryStore(engine).count()
        engine.dispose()
    except OrchestratorError as exc:
        return CheckResult(name="database", ok=False, detail=str(exc))
    return CheckResult(name="database", ok=True, detail=f"{count} messages stored")


async def run_checks(settings: Settings) -> list[CheckResult]:
    """Check the configuration, agent files, templates and services."""
    results = [
        CheckResult(name="settings", ok=True, detail=f"data in {settings.data_dir.resolve()}"),
        _check_agents(settings),
        _check_templates(settings),
        await asyncio.to_thread(_check_database, settings),
        await _check_service("redis", ping_redis(settings.effective_redis_url, timeout_s=3)),
        await _check_service("mqtt", ping_mqtt(settings.effective_mqtt_url, timeout_s=3)),
    ]
    return results


async def status(settings: Settings, *, now: datetime | None = None) -> dict[str, Any]:
    """What the daemon is doing, from Redis, the database and the data folders.

    Args:
        settings: Where everything is, and the ``stuck_after_s`` threshold.
        now: The time ages are measured against (default: the current time).

    Raises:
        ServiceError: when Redis cannot be reached.
    """
    now = now or datetime.now(UTC)
    await ping_redis(settings.effective_redis_url, timeout_s=3)
    agents = _agents(settings)
    agent_ids = [a["id"] for a in agents if "id" in a]
    redis = Redis.from_url(settings.effective_redis_url)
    try:
        streams = await stream_stats(redis)
        stored = await asyncio.to_thread(_stored, settings, agent_ids)
        outbox = {}
        for group in stored["groups"]:
            outbox[group["group"]] = await redis.xlen(outbox_stream(group["group"]))
        workers, jobs = await asyncio.to_thread(_background, settings, now)
    except RedisError as exc:
        raise BusError(f"cannot read status: {exc}") from exc
    finally:
        await redis.aclose()
    for group in stored["groups"]:
        group["outbox_length"] = outbox.get(group["group"], 0)
    for agent in agents:
        if "id" in agent:
            agent["heartbeat"] = stored["heartbeats"][agent["id"]]
    return {
        "streams": streams,
        "groups": stored["groups"],
        "agents": agents,
        "workers": workers,
        "jobs": jobs,
        "storage": await asyncio.to_thread(_storage, settings, stored),
        "stuck": stuck(streams, settings.stuck_after_s, jobs=jobs, workers=workers),
    }


def stuck(
    streams: dict[str, Any],
    after_s: float,
    *,
    jobs: dict[str, Any] | None = None,
    workers: Sequence[dict[str, Any]] = (),
) -> list[str]:
    """What has made no progress for longer than ``after_s`` (for monitors).

    Args:
        streams: From ``bus.stream_stats``.
        after_s: The threshold.
        jobs: The ``jobs`` part of :func:`status` (``queued``, ``oldest_queued_s``).
        workers: The ``workers`` part of :func:`status` (each with ``heartbeat_age_s``).
    """
    problems = []
    limit_ms = after_s * 1000
    if streams["pending"] and streams["oldest_pending_idle_ms"] > limit_ms:
        problems.append(
            f"a message has been in hand for {streams['oldest_pending_idle_ms'] // 1000}s"
        )
    consumers = streams["consumers"]
    if streams["lag"]:
        freshest = min((c["idle_ms"] for c in consumers), default=None)
        if freshest is None or freshest > limit_ms:
            problems.append(
                f"{streams['lag']} messages wait and no daemon has read the inbox for "
                f"{'ever' if freshest is None else str(freshest // 1000) + 's'}"
            )
    waited = (jobs or {}).get("oldest_queued_s")
    if waited is not None and waited > after_s:
        ages = [w["heartbeat_age_s"] for w in workers if w["heartbeat_age_s"] is not None]
        if not ages or min(ages) > after_s:
            beat = "no worker is running" if not ages else f"the last one {int(min(ages))}s ago"
            problems.append(
                f"{jobs['queued'] if jobs else 0} background jobs wait (the oldest for "
                f"{int(waited)}s) and no worker has a heartbeat: {beat}"
            )
    return problems


def _agents(settings: Settings) -> list[dict[str, Any]]:
    try:
        return [
            {"id": a.id, "name": a.name, "role": a.role, "model": a.model, "default": a.default}
            for a in load_agents(settings.agents_dir)
        ]
    except OrchestratorError as exc:
        return [{"error": str(exc)}]


def _stored(settings: Settings, agent_ids: Sequence[str]) -> dict[str, Any]:
    """Groups, row counts, the database's size and each agent's heartbeats (one engine)."""
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    engine = make_engine(settings.effective_database_url)
    try:
        history = HistoryStore(engine)
        versions = VersionStore(engine)
        memories = SessionMemory(engine).stats()
        stored: dict[str, Any] = {
            "groups": [
                {
                    "group": g.group,
                    "messages": g.messages,
                    "last_at": g.last_at.isoformat() if g.last_at else None,
                }
                for g in history.groups()
            ],
            "messages": history.count(),
            "memories": {
                "total": memories["total"],
                **{status: memories["by_status"].get(status, 0) for status in STATUSES},
            },
            "database": {"dialect": engine.dialect.name, "bytes": _postgres_bytes(engine)},
            "heartbeats": {agent: _heartbeat(versions, agent) for agent in agent_ids},
        }
    finally:
        engine.dispose()
    if engine.dialect.name == "sqlite":
        # Measured with our connections closed: as the daemon leaves it, WAL included.
        stored["database"]["bytes"] = _sqlite_bytes(engine.url.database)
    return stored


_FAILED_RUNS = ("error", "rejected", "conflict")


def _heartbeat(versions: VersionStore, agent: str) -> dict[str, Any]:
    """The agent's last successful distillation, and its last failed one if that is newer."""
    runs = versions.runs("memory_md", agent)
    ok = next((r for r in reversed(runs) if r.status in ("written", "skipped")), None)
    failed = next((r for r in reversed(runs) if r.status in _FAILED_RUNS), None)
    if failed is not None and ok is not None and failed.created_at <= ok.created_at:
        failed = None
    latest = versions.latest("memory_md", agent)
    return {
        "last_ok": _run(ok),
        "last_failed": _run(failed),
        "memory_md_version": latest.version if latest else None,
        "memory_md_at": latest.created_at.isoformat() if latest else None,
    }


def _run(run: Run | None) -> dict[str, Any] | None:
    if run is None:
        return None
    return {
        "at": run.created_at.isoformat(),
        "status": run.status,
        "trigger": run.trigger,
        "version": run.version,
        "reason": run.reason,
    }


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


def _storage(settings: Settings, stored: dict[str, Any]) -> dict[str, Any]:
    return {
        "database": stored["database"],
        "messages": stored["messages"],
        "memories": stored["memories"],
        "workspaces_bytes": _folder_bytes(settings.workspaces_dir),
        "data_bytes": _folder_bytes(settings.data_dir),
        "history_retention_days": settings.history_retention_days,
        "archive_retention_days": settings.archive_retention_days,
    }


def _background(settings: Settings, now: datetime) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """RQ's workers with their heartbeat's age, and the queue's counts."""
    connection = sync_redis.Redis.from_url(settings.effective_redis_url)
    try:
        workers = [
            {
                "name": w.name,
                "state": str(w.get_state()),
                "queues": w.queue_names(),
                "last_heartbeat": w.last_heartbeat.isoformat() if w.last_heartbeat else None,
                "heartbeat_age_s": _age_s(w.last_heartbeat, now),
            }
            for w in Worker.all(connection=connection)
        ]
        q = queue(connection)
        oldest_ids = q.get_job_ids(0, 1)
        oldest = fetch_job(connection, oldest_ids[0]) if oldest_ids else None
        jobs = {
            "queued": q.count,
            "oldest_queued_s": _age_s(oldest.enqueued_at, now) if oldest else None,
            "running": q.started_job_registry.count,
            "retrying": q.scheduled_job_registry.count,
            "failed": q.failed_job_registry.count,
        }
        return workers, jobs
    finally:
        connection.close()


def _age_s(then: datetime | None, now: datetime) -> float | None:
    """Seconds from ``then`` to ``now``; RQ's times are naive UTC."""
    if then is None:
        return None
    return round((now - (then if then.tzinfo else then.replace(tzinfo=UTC))).total_seconds(), 1)
