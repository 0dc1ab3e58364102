"""The composition root: builds every adapter from ``Settings`` and runs the consumer, the
leases that share the work with other daemons, and the schedule.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from orchestrator.adapters.bus import Bus
from orchestrator.adapters.events import MqttPublisher
from orchestrator.adapters.leases import Leases
from orchestrator.adapters.metrics import MetricsRecorder
from orchestrator.adapters.mqtt_broker import publisher_url
from orchestrator.adapters.probes import ping_redis
from orchestrator.adapters.providers import build_llm
from orchestrator.adapters.redis_client import (
    AsyncConnection,
    Connection,
    connect,
    connect_pool,
    translated,
)
from orchestrator.adapters.steps import StepPublisher
from orchestrator.adapters.summary_counts import SummaryCounts
from orchestrator.background.queue import enqueue_run
from orchestrator.background.schedule import start_schedule
from orchestrator.caps.guard import make_guard
from orchestrator.caps.ledger import publish_caps
from orchestrator.core.coding import run_ended_fields
from orchestrator.core.turns import LLM
from orchestrator.core.wire import inbox_stream
from orchestrator.errors import ConfigError, OrchestratorError
from orchestrator.memory.approvals import ApprovalRecord
from orchestrator.memory.conversation.indexing import BackgroundIndexing
from orchestrator.memory.conversation.recent import RecentMessages
from orchestrator.memory.db import make_engine
from orchestrator.memory.runs import RunStore
from orchestrator.runtime.acting import Acting, run_job_id, run_timeout_s
from orchestrator.runtime.approving import Approvals, approval_step, approvals_for
from orchestrator.runtime.briefing import save_drift
from orchestrator.runtime.consumer import Consumer
from orchestrator.runtime.coordinator import Coordinator
from orchestrator.runtime.freshness import keep_embedded, keep_fresh
from orchestrator.runtime.outlets import EventSink, Outbox
from orchestrator.runtime.pipeline import Pipeline
from orchestrator.runtime.team import load_team
from orchestrator.runtime.triggers import SummaryTrigger
from orchestrator.runtime.wiring import Wiring
from orchestrator.settings import Settings

__all__ = ["build_pipeline", "ensure_data_dir", "run"]

logger = logging.getLogger(__name__)


def ensure_data_dir(settings: Settings) -> None:
    """Create the data folder (and its parents) if it does not exist yet.

    Raises:
        ConfigError: naming ARENA_DATA_DIR and why the folder cannot be made.
    """
    folder = settings.data_dir
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise ConfigError("ARENA_DATA_DIR", f"{folder} exists and is not a folder") from None
    except OSError as exc:
        reason = exc.strerror or exc.__class__.__name__
        raise ConfigError("ARENA_DATA_DIR", f"cannot create {folder}: {reason}") from None


def _acting(settings: Settings, wiring: Wiring) -> tuple[Acting | None, Connection | None]:
    """Turns that are Claude Code runs, when an agent acts (and the connection that enqueues
    their jobs)."""
    acting_agents = [a for a in wiring.team.agents if a.code is not None]
    if not acting_agents:
        return None, None
    queue = connect(settings.effective_redis_url)
    timeout_s = run_timeout_s(acting_agents)

    async def enqueue(run_id: str) -> None:
        await asyncio.to_thread(enqueue_run, queue, run_id, run_job_id(run_id), timeout_s)

    runs = RunStore(wiring.engine)
    return Acting(team=wiring.team, runs=runs, enqueue=enqueue, clock=_utcnow), queue


def _approvals(
    settings: Settings, wiring: Wiring, queue: Connection, redis: AsyncConnection
) -> Approvals:
    """Decisions as the daemon makes them: ``/approve`` typed in a group, expiries, orphans
    (shown on the run's card through the steps stream; a waiting run woken by a job)."""
    steps = StepPublisher(redis, None)

    async def announce(record: ApprovalRecord) -> None:
        await steps.publish(record.group, approval_step(record))

    return approvals_for(settings, wiring, queue, announce)


def build_pipeline(
    wiring: Wiring,
    *,
    outbox: Outbox,
    events: EventSink,
    llm: LLM,
    recent: RecentMessages | None = None,
    **outlets: Any,
) -> Pipeline:
    """The daemon's pipeline over ``wiring``'s team, stores and settings: replies go to
    ``outbox`` and ``events``, a group's recent messages come from ``recent`` (the daemon's
    cache); ``outlets`` are the pipeline's other optional parts (caps, metrics, dead letters,
    acting, ...). ``tests/bench/turn_cpu.py`` builds its pipeline here too."""
    settings = wiring.settings
    return Pipeline(
        team=wiring.team,
        store=wiring.history,
        outbox=outbox,
        events=events,
        llm=llm,
        prompts=wiring.prompts,
        briefing=wiring.briefing(recent),
        tuning=wiring.tuning,
        transcript=wiring.transcript,
        hop_limit=settings.hop_limit,
        memory=wiring.writer,
        tools=wiring.tools,
        max_tool_steps=settings.max_tool_steps,
        recent=recent,
        **outlets,
    )


EMBEDDING = "knowledge-embedding"  # the lease of the daemon that embeds knowledge chunks


def _keep_knowledge(
    wiring: Wiring, leases: Leases, consumer: Consumer, stop: asyncio.Event, poll_s: float
) -> list[asyncio.Task[None]]:
    """The tasks that keep knowledge fresh: its files checked, and when embeddings are on its
    new chunks embedded, by one daemon of several (the holder of the :data:`EMBEDDING`
    lease), more slowly while it has messages in hand."""
    tasks = [keep_fresh(wiring.indexer, stop, poll_s)]
    if wiring.knowledge_vectors is not None:

        async def ours() -> bool:
            return EMBEDDING in await leases.acquire([EMBEDDING], take=1)

        def busy() -> bool:
            return consumer.dispatcher.inflight > 0

        tasks.append(keep_embedded(wiring.knowledge_vectors, stop, poll_s, ours, busy))
    return tasks


REAP_EVERY_S = 5.0


def _watch_runs(
    acting: Acting, approvals: Approvals, redis: AsyncConnection, stop: asyncio.Event
) -> asyncio.Task[None]:
    """Every few seconds, the runs whose worker died here are recorded lost and their end is
    posted: their reply says so, in the group's order. Requests past their time expire (and
    wake their run), those of runs gone are orphaned, and a waiting run asked to stop gets a
    job that ends it."""

    async def watch() -> None:
        while not stop.is_set():
            try:
                await approvals.sweep()
                for run in await asyncio.to_thread(acting.runs.waiting):
                    if run.cancel_requested:
                        await approvals.wake(run, "cancel")
                for run in await acting.reap():
                    logger.warning("run %s: its worker died; reported lost", run.id)
                    with translated():
                        fields = run_ended_fields(run.group, run.id)
                        await redis.xadd(inbox_stream(), fields)  # type: ignore[arg-type]
            except OrchestratorError as exc:
                logger.warning("could not look for lost runs: %s", exc)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), REAP_EVERY_S)

    return asyncio.create_task(watch(), name="orchestrator.runtime.daemon.watch_runs")


def _utcnow() -> datetime:
    return datetime.now(UTC)


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
    ensure_data_dir(settings)
    team = load_team(settings)
    await ping_redis(settings.effective_redis_url, timeout_s=5)
    engine = await asyncio.to_thread(make_engine, settings.effective_database_url)
    wiring = Wiring(settings, engine, team=team)
    redis = connect_pool(
        settings.effective_redis_url,
        max_connections=settings.redis_max_connections,
        timeout_s=30,
    )
    provider = llm or build_llm(settings)
    publisher = MqttPublisher(publisher_url(settings))
    bus = Bus(redis, settings.consumer)
    drift = wiring.drift()
    loaded = drift.snapshot()
    summaries = SummaryTrigger(
        SummaryCounts(redis), connect(settings.effective_redis_url), settings
    )
    store = wiring.history
    # This daemon is the only writer of the groups of the partitions it holds; on taking a
    # partition over, the consumer has it let go of that partition's groups.
    recent = RecentMessages(store, settings.history_limit, verify=False)
    metrics = MetricsRecorder(redis)
    caps = make_guard(settings, redis, team.agents, publisher, metrics)
    acting, runs_queue = _acting(settings, wiring)
    # `/approve` typed in a group decides; a waiting run is woken by a job on the runs queue.
    approvals = _approvals(settings, wiring, runs_queue, redis) if runs_queue is not None else None
    pipeline = build_pipeline(
        wiring,
        outbox=bus,
        events=publisher,
        llm=provider,
        recent=recent,
        acting=acting,
        counters=bus,
        drift=drift,
        summaries=summaries,
        dead_letters=bus,
        metrics=metrics,
        caps=caps,
        approvals=approvals,
    )
    consumer = Consumer(bus, pipeline, settings, metrics=metrics)
    leases = Leases(redis, settings.consumer, int(settings.lease_ttl_s * 1000))
    coordinator = Coordinator(leases, consumer.idle)
    mqtt_task: asyncio.Task[None] | None = None
    # Messages stored before the history index existed are indexed while the daemon answers.
    indexing = BackgroundIndexing(engine)
    schedule = None
    try:
        await bus.ensure_group()
        # First: a daemon refused its consumer name starts nothing else.
        async with coordinator.holding(stop):
            # Only now: a connection cancelled while it opens outlives the loop (aiomqtt).
            mqtt_task = asyncio.create_task(
                publisher.run(), name="orchestrator.adapters.events.publish"
            )
            # Heartbeats and catch-up only enqueue RQ jobs; start_schedule logs a failure and
            # returns None, so messages are handled with or without it.
            schedule = await start_schedule(settings, engine, [a.id for a in team.agents])
            await publish_caps(redis, caps.limits)  # what `arena budget` elsewhere shows
            await bus.record_team(consumer.agents)  # who clients refuse as a person's sender
            logger.info(
                "daemon %s: %d agents (%s), model provider %s",
                settings.consumer,
                len(team.agents),
                ", ".join(a.id for a in team.agents),
                provider.name,
            )
            if ready is not None:
                ready()
            watch = None
            if acting is not None and approvals is not None:
                watch = _watch_runs(acting, approvals, redis, stop)
            fresh = _keep_knowledge(wiring, leases, consumer, stop, settings.knowledge_poll_s)
            try:
                await consumer.run(stop, coordinator)
            finally:
                for task in fresh:
                    task.cancel()
                if watch is not None:
                    watch.cancel()
        await publisher.flush(timeout_s=2)
    finally:
        if schedule is not None:
            await schedule.stop()
        if drift.snapshot() != loaded:  # learnt something: a refused daemon writes nothing
            save_drift(settings, drift)
        summaries.close()
        if runs_queue is not None:
            runs_queue.close()
        if mqtt_task is not None:
            mqtt_task.cancel()
            await asyncio.gather(mqtt_task, return_exceptions=True)
        await provider.aclose()
        await caps.aclose()
        await metrics.aclose()
        await redis.aclose()
        await indexing.stop()
        engine.dispose()
        logger.info("daemon stopped after %d messages", consumer.handled)
