"""``arena check``: the settings, every agent file, every template rendered on sample data,
the database, Redis and MQTT, each one line that is ok or says what is wrong."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from dataclasses import dataclass
from datetime import UTC, datetime

from orchestrator.adapters.mqtt import ping_mqtt
from orchestrator.adapters.probes import ping_redis
from orchestrator.adapters.redis_client import connect_async
from orchestrator.caps.configured import cap_limits
from orchestrator.caps.guard import unpriced_dollar_cap
from orchestrator.caps.ledger import enforced_caps
from orchestrator.caps.limits import CapLimits
from orchestrator.cli.occupant import running_mqtt_url
from orchestrator.cli.resources import wired
from orchestrator.core.agents import load_agents
from orchestrator.core.context.build import (
    Identity,
    Layers,
    PastMessage,
    build_context,
)
from orchestrator.core.context.tokens import TokenCounter
from orchestrator.core.context.transcript import Transcript
from orchestrator.core.models import AgentSpec, ChatMessage, MessageKind
from orchestrator.core.prompts import Prompts
from orchestrator.errors import BusError, OrchestratorError
from orchestrator.runtime.tuning import Tuning
from orchestrator.settings import Settings

__all__ = ["CheckResult", "run_checks"]


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckResult:
    """One line of ``arena check``."""

    name: str
    ok: bool
    detail: str


def _check_agents(settings: Settings) -> tuple[tuple[AgentSpec, ...] | None, CheckResult]:
    """The agents (None when their files do not load: read once for every check) and what
    the agents line says."""
    try:
        agents = load_agents(settings.agents_dir)
    except OrchestratorError as exc:
        return None, CheckResult(name="agents", ok=False, detail=str(exc))
    default = next((a.id for a in agents if a.default), agents[0].id)
    ids = ", ".join(a.id for a in agents)
    return agents, CheckResult(name="agents", ok=True, detail=f"{ids} (default: {default})")


# What a check that needs the agents says when they do not load (the agents line says why).
_AGENTS_FIRST = "not checked: the agent files do not load"


def _check_caps(settings: Settings, agents: tuple[AgentSpec, ...] | None) -> CheckResult:
    """The daily caps set, and models a dollar cap would price at the dearest listed row."""
    if agents is None:  # the agents line says what is wrong
        return CheckResult(name="caps", ok=False, detail=_AGENTS_FIRST)
    problem = unpriced_dollar_cap(settings, agents)
    if problem is not None:
        return CheckResult(name="caps", ok=False, detail=str(problem))
    limits = cap_limits(settings, agents)
    if not limits.any:
        return CheckResult(name="caps", ok=True, detail="no daily caps set")
    detail = _describe_caps(limits)
    dollars = any(u is not None for u in (limits.agent_usd, limits.group_usd, limits.all_usd))
    dollars = dollars or any("usd_per_day" in a.caps for a in agents)
    unpriced = sorted({a.model for a in agents} - set(settings.model_prices))
    if dollars and unpriced:
        detail += f" (not in ARENA_MODEL_PRICES, priced as the dearest: {', '.join(unpriced)})"
    return CheckResult(name="caps", ok=True, detail=detail)


def _describe_caps(limits: CapLimits) -> str:
    """``daily per group 2,000 tokens; all agents $5.00`` (``no daily caps set``)."""
    shared = [
        ("per agent", limits.agent_tokens, limits.agent_usd),
        ("per group", limits.group_tokens, limits.group_usd),
        ("all agents", limits.all_tokens, limits.all_usd),
    ]
    own = [
        (agent, caps.get("tokens_per_day"), caps.get("usd_per_day"))
        for agent, caps in (limits.agents or {}).items()
    ]
    parts = [
        f"{who} {_per_day(tokens, usd)}"
        for who, tokens, usd in (*shared, *own)
        if tokens is not None or usd is not None
    ]
    return "daily " + "; ".join(parts) if parts else "no daily caps set"


def _per_day(tokens: float | None, usd: float | None) -> str:
    amounts = ([f"{int(tokens):,} tokens"] if tokens is not None else []) + (
        [f"${usd:,.2f}"] if usd is not None else []
    )
    return " and ".join(amounts)


async def _check_enforced(
    settings: Settings, agents: tuple[AgentSpec, ...] | None
) -> CheckResult | None:
    """The caps the running daemon enforces, when they differ from this shell's."""
    try:
        redis = connect_async(settings.effective_redis_url, socket_timeout=3)
    except ValueError:  # a malformed URL: the redis line says what is wrong
        return None
    try:
        enforced = await enforced_caps(redis)
    except (BusError, OSError, ValueError):
        return None  # the redis line says what is wrong
    finally:
        await redis.aclose()
    if enforced is None:
        return None
    local = cap_limits(settings, agents) if agents is not None else None
    if local is not None and local.as_json() == enforced.as_json():
        return None
    detail = f"the running daemon enforces other caps: {_describe_caps(enforced)}"
    return CheckResult(name="enforced", ok=True, detail=detail)


def _check_templates(settings: Settings, agents: tuple[AgentSpec, ...] | None) -> CheckResult:
    prompts = Prompts(settings.prompts_dir)
    names = prompts.names()
    if not names:
        return CheckResult(name="templates", ok=False, detail=f"none in {settings.prompts_dir}")
    if agents is None:  # the agents line says what is wrong
        return CheckResult(name="templates", ok=False, detail=_AGENTS_FIRST)
    try:
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
            limits=Tuning(settings).limits(agents[0]),
            transcript=Transcript(TokenCounter(), settings.tz),
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


def _mqtt_url(settings: Settings) -> str:
    """``MQTT_URL``, else the broker of the ``arena up`` running on the data folder (whatever
    port this shell's settings name), else the one the settings name."""
    return settings.mqtt_url or running_mqtt_url(settings) or settings.effective_mqtt_url


async def _check_service(name: str, probe: Awaitable[None]) -> CheckResult:
    try:
        await probe
    except OrchestratorError as exc:
        return CheckResult(name=name, ok=False, detail=str(exc))
    return CheckResult(name=name, ok=True, detail="reachable")


def _check_database(settings: Settings) -> CheckResult:
    try:
        with wired(settings) as wiring:
            count = wiring.history.count()
    except OrchestratorError as exc:
        return CheckResult(name="database", ok=False, detail=str(exc))
    return CheckResult(name="database", ok=True, detail=f"{count} messages stored")


async def run_checks(settings: Settings) -> list[CheckResult]:
    """Check the configuration, agent files, templates and services."""
    agents, agents_line = _check_agents(settings)
    results = [
        CheckResult(name="settings", ok=True, detail=f"data in {settings.data_dir.resolve()}"),
        agents_line,
        _check_templates(settings, agents),
        _check_caps(settings, agents),
        await asyncio.to_thread(_check_database, settings),
        await _check_service("redis", ping_redis(settings.effective_redis_url, timeout_s=3)),
        await _check_service("mqtt", ping_mqtt(_mqtt_url(settings), timeout_s=3)),
    ]
    enforced = await _check_enforced(settings, agents)
    return results if enforced is None else [*results, enforced]
