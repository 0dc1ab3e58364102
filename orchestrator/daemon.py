"""The composition root: builds every adapter from ``Settings`` and runs the consumer loop.

The consumer reads the inbound stream through a consumer group. On start it first finishes
what a previous run left unacknowledged (its own pending entries, then entries other
consumers left idle for ``claim_idle_ms``). Each entry is validated (bad ones go to the
dead-letter stream), handled in its group's order, and acknowledged only when its replies are
stored and published.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from redis.asyncio import Redis
from redis.exceptions import RedisError
from sqlalchemy.engine import Engine

from orchestrator.agents import load_agents, read_identity
from orchestrator.breaker import CircuitBreaker
from orchestrator.briefing import Briefing
from orchestrator.bus import Bus, Entry
from orchestrator.context import Identity
from orchestrator.dispatch import GroupDispatcher
from orchestrator.errors import ValidationError
from orchestrator.events import MqttPublisher
from orchestrator.files import write_atomic
from orchestrator.llm import AnthropicProvider
from orchestrator.memory.db import make_engine
from orchestrator.memory.gate import GateConfig
from orchestrator.memory.history import HistoryStore
from orchestrator.memory.personal import PersonalLog
from orchestrator.memory.recall import Recaller
from orchestrator.memory.session import SessionMemory
from orchestrator.memory.writer import MemoryWriter
from orchestrator.models import ChatMessage
from orchestrator.offline import OfflineProvider
from orchestrator.pipeline import Pipeline, Team
from orchestrator.prompts import Prompts
from orchestrator.schedule import start_schedule
from orchestrator.services import ping_redis
from orchestrator.settings import Settings
from orchestrator.tokens import DriftCorrector, TokenCounter
from orchestrator.triggers import SummaryTrigger
from orchestrator.turns import LLM
from orchestrator.wire import parse_inbound

__all__ = [
    "Consumer",
    "build_llm",
    "load_drift",
    "load_team",
    "make_briefing",
    "make_writer",
    "run",
    "save_drift",
]

logger = logging.getLogger(__name__)

READ_BLOCK_MS = 500
READ_COUNT = 200
CLAIM_EVERY_S = 15.0


@dataclass(frozen=True, slots=True)
class _Work:
    entry_id: str
    message: ChatMessage


class Consumer:
    """Reads inbound entries and hands each to the pipeline in its group's order."""

    def __init__(self, bus: Bus, pipeline: Pipeline, settings: Settings) -> None:
        self.bus = bus
        self.pipeline = pipeline
        self.settings = settings
        self.dispatcher: GroupDispatcher[_Work] = GroupDispatcher(
            self._handle, settings.max_inflight
        )
        self.handled = 0
        self._in_hand: set[str] = set()
        # Look for abandoned messages about twice per idle limit (at most every 15 s).
        self._claim_every_s = min(CLAIM_EVERY_S, max(0.5, settings.claim_idle_ms / 2000))

    async def run(self, stop: asyncio.Event) -> None:
        """Consume until ``stop`` is set, then finish the work in hand."""
        await self.bus.ensure_group()
        await self._recover()
        last_claim = time.monotonic()
        backoff = 0.5
        while not stop.is_set():
            try:
                entries = await self.bus.read_new(READ_COUNT, READ_BLOCK_MS)
                if time.monotonic() - last_claim > self._claim_every_s:
                    entries += await self.bus.claim_stale(self.settings.claim_idle_ms)
                    last_claim = time.monotonic()
            except RedisError as exc:
                logger.warning("redis read failed (%s); retrying in %.1fs", exc, backoff)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 10.0)
                continue
            backoff = 0.5
            for entry in entries:
                await self._submit(entry)
        finished = await self.dispatcher.drain(self.settings.shutdown_timeout_s)
        if not finished:
            logger.warning(
                "stopping with %d messages unfinished; they are handled after a restart",
                self.dispatcher.inflight,
            )
            await self.dispatcher.cancel()

    async def _recover(self) -> None:
        own = await self.bus.read_own_pending()
        stale = await self.bus.claim_stale(self.settings.claim_idle_ms)
        if own or stale:
            logger.info("resuming %d unfinished messages", len(own) + len(stale))
        for entry in own + stale:
            await self._submit(entry)

    async def _submit(self, entry: Entry) -> None:
        entry_id, raw = entry
        if entry_id in self._in_hand:
            return  # reclaimed while still being handled here (a slow model call)
        try:
            message = parse_inbound(
                entry_id, raw, self.settings.max_message_bytes, datetime.now(UTC)
            )
        except ValidationError as exc:
            logger.warning("message %s rejected: %s", entry_id, exc)
            await self.bus.dead_letter(entry_id, raw, str(exc))
            await self.bus.ack(entry_id)
            return
        self._in_hand.add(entry_id)
        await self.dispatcher.submit(message.group, _Work(entry_id, message))

    async def _handle(self, work: _Work) -> None:
        try:
            await self._handle_once(work)
        except RedisError as exc:
            # Redis went away mid-message: leave it unacknowledged. Every step is idempotent,
            # so claiming it again once Redis is back finishes it without a second reply.
            logger.warning("message %s interrupted (%s); it will be resumed", work.entry_id, exc)
        finally:
            self._in_hand.discard(work.entry_id)

    async def _handle_once(self, work: _Work) -> None:
        try:
            await self.pipeline.handle(work.message)
        except RedisError:
            raise
        except Exception as exc:
            logger.exception("message %s failed", work.entry_id)
            raw = {
                b"group": work.message.group.encode(),
                b"sender": work.message.sender.encode(),
                b"text": work.message.text.encode(),
            }
            await asyncio.shield(
                self.bus.dead_letter(work.entry_id, raw, f"internal error: {exc!r}"[:500])
            )
        await asyncio.shield(self.bus.ack(work.entry_id))
        self.handled += 1


def load_team(settings: Settings) -> Team:
    """Load the agents and their identity files."""
    agents = load_agents(settings.agents_dir)
    identities = {}
    for agent in agents:
        claude, soul = read_identity(settings.workspaces_dir, agent.id)
        identities[agent.id] = Identity(claude=claude, soul=soul)
    return Team(agents=agents, identities=identities)


def make_briefing(settings: Settings, engine: Engine, team: Team) -> Briefing:
    """What gathers each agent's layers, on the given database."""
    session = SessionMemory(engine)
    return Briefing(
        settings=settings,
        identities=team.identities,
        store=HistoryStore(engine),
        personal=PersonalLog(settings.workspaces_dir, settings.zone),
        recaller=Recaller(session),
        counter=TokenCounter(),
    )


def make_writer(settings: Settings, engine: Engine) -> MemoryWriter:
    """The memory write path: gate, session memory and personal logs."""
    return MemoryWriter(
        SessionMemory(engine),
        PersonalLog(settings.workspaces_dir, settings.zone),
        GateConfig(
            min_confidence=settings.memory_min_confidence,
            daily_limit=settings.memory_daily_limit,
        ),
        settings.zone,
    )


def _drift_path(settings: Settings) -> Path:
    return settings.data_dir / "drift.json"


def load_drift(settings: Settings) -> DriftCorrector:
    """The per-model token correction factors learnt by earlier runs."""
    drift = DriftCorrector()
    try:
        drift.restore(json.loads(_drift_path(settings).read_text(encoding="utf-8")))
    except FileNotFoundError:
        pass
    except (ValueError, TypeError, AttributeError) as exc:
        logger.warning("ignoring unreadable %s: %s", _drift_path(settings), exc)
    return drift


def save_drift(settings: Settings, drift: DriftCorrector) -> None:
    """Keep the correction factors for the next run."""
    factors = drift.snapshot()
    if factors:
        write_atomic(_drift_path(settings), json.dumps(factors, indent=2) + "\n")


def build_llm(settings: Settings) -> LLM:
    """The Anthropic provider when a key is set, else the offline one."""
    if settings.anthropic_api_key is None:
        return OfflineProvider()
    provider = AnthropicProvider(
        api_key=settings.anthropic_api_key.get_secret_value(),
        base_url=settings.anthropic_base_url,
        timeout_s=settings.model_timeout_s,
        max_retries=settings.model_max_retries,
    )
    return CircuitBreaker(
        provider, threshold=settings.breaker_threshold, cooldown_s=settings.breaker_cooldown_s
    )


async def run(
    settings: Settings,
    stop: asyncio.Event,
    *,
    ready: Callable[[], None] | None = None,
    llm: LLM | None = None,
) -> None:
    """Run the daemon until ``stop`` is set.

    Raises:
        OrchestratorError: when configuration or a service is wrong at start.
    """
    team = load_team(settings)
    prompts = Prompts(settings.prompts_dir)
    await ping_redis(settings.effective_redis_url, timeout_s=5)
    engine = await asyncio.to_thread(make_engine, settings.effective_database_url)
    redis = Redis.from_url(settings.effective_redis_url, socket_timeout=30)
    provider = llm or build_llm(settings)
    publisher = MqttPublisher(settings.effective_mqtt_url)
    bus = Bus(redis, settings.consumer)
    drift = load_drift(settings)
    summaries = SummaryTrigger(redis, settings)
    pipeline = Pipeline(
        team=team,
        store=HistoryStore(engine),
        outbox=bus,
        events=publisher,
        llm=provider,
        prompts=prompts,
        briefing=make_briefing(settings, engine, team),
        counter=TokenCounter(),
        hop_limit=settings.hop_limit,
        memory=make_writer(settings, engine),
        counters=bus,
        drift=drift,
        summaries=summaries,
        dead_letters=bus,
    )
    consumer = Consumer(bus, pipeline, settings)
    mqtt_task = asyncio.create_task(publisher.run(), name="orchestrator.events.publish")
    schedule = None
    try:
        # Heartbeats and catch-up only enqueue RQ jobs; start_schedule logs a failure and
        # returns None, so messages are handled with or without it.
        schedule = await start_schedule(settings, engine, [a.id for a in team.agents])
        logger.info(
            "daemon %s: %d agents (%s), model provider %s",
            settings.consumer,
            len(team.agents),
            ", ".join(a.id for a in team.agents),
            provider.name,
        )
        if ready is not None:
            ready()
        await consumer.run(stop)
        await publisher.flush(timeout_s=2)
    finally:
        if schedule is not None:
            await schedule.stop()
        save_drift(settings, drift)
        summaries.close()
        mqtt_task.cancel()
        await asyncio.gather(mqtt_task, return_exceptions=True)
        await provider.aclose()
        await redis.aclose()
        engine.dispose()
        logger.info("daemon stopped after %d messages", consumer.handled)
