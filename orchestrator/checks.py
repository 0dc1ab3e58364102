"""``arena check`` and ``arena status``: what is configured, and what is running."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import redis as sync_redis
from redis.asyncio import Redis
from redis.exceptions import RedisError
from rq import Worker

from orchestrator.agents import load_agents
from orchestrator.bus import stream_stats
from orchestrator.context import ContextLimits, Identity, Layers, PastMessage, build_context
from orchestrator.errors import BusError, OrchestratorError
from orchestrator.memory.db import make_engine
from orchestrator.memory.history import HistoryStore
from orchestrator.models import AgentSpec, ChatMessage, MessageKind
from orchestrator.prompts import Prompts
from orchestrator.services import ping_mqtt, ping_redis
from orchestrator.settings import Settings
from orchestrator.tokens import TokenCounter
from orchestrator.wire import outbox_stream

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


async def status(settings: Settings) -> dict[str, Any]:
    """What the daemon is doing, from Redis and the database.

    Raises:
        ServiceError: when Redis cannot be reached.
    """
    await ping_redis(settings.effective_redis_url, timeout_s=3)
    redis = Redis.from_url(settings.effective_redis_url)
    try:
        streams = await stream_stats(redis)
        groups = await asyncio.to_thread(_groups, settings)
        outbox = {}
        for group in groups:
            outbox[group["group"]] = await redis.xlen(outbox_stream(group["group"]))
        workers = await asyncio.to_thread(_workers, settings)
    except RedisError as exc:
        raise BusError(f"cannot read status: {exc}") from exc
    finally:
        await redis.aclose()
    for group in groups:
        group["outbox_length"] = outbox.get(group["group"], 0)
    agents: list[dict[str, Any]] = []
    try:
        agents = [
            {"id": a.id, "name": a.name, "role": a.role, "model": a.model, "default": a.default}
            for a in load_agents(settings.agents_dir)
        ]
    except OrchestratorError as exc:
        agents = [{"error": str(exc)}]
    return {
        "streams": streams,
        "groups": groups,
        "agents": agents,
        "workers": workers,
        "stuck": stuck(streams, settings.stuck_after_s),
    }


def stuck(streams: dict[str, Any], after_s: float) -> list[str]:
    """What has made no progress for longer than ``after_s`` (for monitors)."""
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
    return problems


def _groups(settings: Settings) -> list[dict[str, Any]]:
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    engine = make_engine(settings.effective_database_url)
    try:
        infos = HistoryStore(engine).groups()
    finally:
        engine.dispose()
    return [
        {
            "group": g.group,
            "messages": g.messages,
            "last_at": g.last_at.isoformat() if g.last_at else None,
        }
        for g in infos
    ]


def _workers(settings: Settings) -> list[dict[str, Any]]:
    connection = sync_redis.Redis.from_url(settings.effective_redis_url)
    try:
        return [
            {
                "name": w.name,
                "state": str(w.get_state()),
                "queues": w.queue_names(),
                "last_heartbeat": w.last_heartbeat.isoformat() if w.last_heartbeat else None,
            }
            for w in Worker.all(connection=connection)
        ]
    finally:
        connection.close()
