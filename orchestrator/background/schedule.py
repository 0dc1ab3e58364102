"""The daemon's schedule, on APScheduler 3.x: it only enqueues; RQ workers do the work.

Jobs of the scheduler (times in ``ARENA_TZ``):

    heartbeat:{agent}  daily (``ARENA_HEARTBEAT_CRON``, default 23:30): distil the agent's
                       log of the day (trigger ``heartbeat``)
    idle-check         every minute: a group whose last message is ``ARENA_IDLE_MINUTES`` old
                       and that has had messages since it last went quiet gets a heartbeat for
                       the agents that spoke in it (trigger ``idle``), once per quiet period
    catch-up           once at start: every day of the last ``ARENA_CATCH_UP_DAYS`` (and today,
                       once its heartbeat time has passed) that has a daily log (trigger
                       ``catch-up``); the job ids skip days already distilled from the same log
    publish            every minute: the next fire times go to Redis, for ``arena jobs``
    prune              daily at 04:15, only when a retention limit is set
                       (``ARENA_HISTORY_RETENTION_DAYS``, ``ARENA_ARCHIVE_RETENTION_DAYS``):
                       delete old history and archived memories (trigger ``daily``)

The idle check's reading of the history is :mod:`orchestrator.background.idle`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from datetime import UTC, date, datetime, time, timedelta

from apscheduler.schedulers.asyncio import AsyncIOScheduler
from apscheduler.triggers.cron import CronTrigger
from sqlalchemy.engine import Engine

from orchestrator.adapters.redis_client import Connection, connect, translated
from orchestrator.background.idle import History, IdleWatch
from orchestrator.background.listing import store_schedule
from orchestrator.background.queue import enqueue_distill, enqueue_prune
from orchestrator.background.retention import enabled as retention_enabled
from orchestrator.core.wire import schedule_key
from orchestrator.errors import BusError
from orchestrator.memory.conversation.store import HistoryStore
from orchestrator.memory.personal import PersonalLog
from orchestrator.settings import Settings

__all__ = [
    "HEARTBEAT",
    "IDLE_CHECK",
    "PRUNE",
    "Schedule",
    "build_scheduler",
    "catch_up",
    "due_days",
    "heartbeat_trigger",
    "next_fire_times",
    "prune_trigger",
    "start_schedule",
]

logger = logging.getLogger(__name__)

HEARTBEAT = "heartbeat"
IDLE_CHECK = "idle-check"
PRUNE = "prune"
PRUNE_CRON = "15 4 * * *"  # a quiet hour, after the evening heartbeats

Clock = Callable[[], datetime]
Enqueue = Callable[[str, date, str], object]
"""``enqueue(agent_id, day, trigger)``: enqueue a distillation (blocking; run in a thread)."""
EnqueuePrune = Callable[[date, str], object]
"""``enqueue_prune(day, trigger)``: enqueue the day's retention run (blocking)."""


def heartbeat_trigger(settings: Settings) -> CronTrigger:
    """The daily heartbeat's trigger, in the configured time zone."""
    return CronTrigger.from_crontab(settings.heartbeat_cron, timezone=settings.zone)


def prune_trigger(settings: Settings) -> CronTrigger:
    """The daily retention run's trigger, in the configured time zone."""
    return CronTrigger.from_crontab(PRUNE_CRON, timezone=settings.zone)


def _every_minute(settings: Settings) -> CronTrigger:
    return CronTrigger(minute="*", timezone=settings.zone)


def next_fire_times(settings: Settings, now: datetime) -> dict[str, datetime]:
    """When the heartbeat, the idle check and the retention run (when on) next fire at or after
    ``now`` (aware)."""
    times: dict[str, datetime] = {}
    beat = heartbeat_trigger(settings).get_next_fire_time(None, now)
    if beat is not None:
        times[HEARTBEAT] = beat
    if settings.idle_minutes:
        times[IDLE_CHECK] = _every_minute(settings).get_next_fire_time(None, now)
    if retention_enabled(settings):
        times[PRUNE] = prune_trigger(settings).get_next_fire_time(None, now)
    return times


def due_days(settings: Settings, now: datetime) -> list[date]:
    """The days catch-up covers, oldest first: the last ``catch_up_days`` before today, and
    today once today's heartbeat time has passed."""
    if settings.catch_up_days <= 0:
        return []
    today = now.astimezone(settings.zone).date()
    days = [today - timedelta(days=n) for n in range(settings.catch_up_days, 0, -1)]
    midnight = datetime.combine(today, time(), settings.zone)
    first = heartbeat_trigger(settings).get_next_fire_time(None, midnight)
    if first is not None and first.date() == today and first <= now:
        days.append(today)
    return days


def catch_up(
    settings: Settings, now: datetime, agents: Sequence[str], enqueue: Enqueue
) -> list[tuple[str, date]]:
    """Enqueue a distillation for every due day with a daily log (blocking file reads).

    Returns:
        The (agent, day) pairs asked for; ``enqueue`` skips those already done.
    """
    days = set(due_days(settings, now))
    logs = PersonalLog(settings.workspaces_dir, settings.zone)
    asked = [(agent, day) for agent in agents for day in logs.days(agent) if day in days]
    for agent, day in asked:
        enqueue(agent, day, "catch-up")
    return asked


class _Tasks:
    """What the scheduler's jobs do; each blocking step runs in a thread."""

    def __init__(
        self,
        settings: Settings,
        enqueue: Enqueue,
        clock: Clock,
        agents: Sequence[str],
        watch: IdleWatch | None,
        on_schedule: Callable[[dict[str, datetime]], None] | None,
        enqueue_prune: EnqueuePrune | None = None,
    ) -> None:
        self.settings = settings
        self.enqueue = enqueue
        self.enqueue_prune = enqueue_prune
        self.clock = clock
        self.agents = agents
        self.watch = watch
        self.on_schedule = on_schedule

    async def run(self, what: str, func: Callable[[], object]) -> None:
        """Run ``func`` in a thread; a failure is logged and the schedule carries on."""
        try:
            await asyncio.to_thread(func)
        except Exception:
            logger.exception("scheduled %s failed", what)

    async def heartbeat(self, agent: str) -> None:
        today = self.clock().astimezone(self.settings.zone).date()
        await self.run(f"heartbeat of {agent}", lambda: self.enqueue(agent, today, HEARTBEAT))

    async def prune(self) -> None:
        assert self.enqueue_prune is not None
        enqueue_prune = self.enqueue_prune
        today = self.clock().astimezone(self.settings.zone).date()
        await self.run(PRUNE, lambda: enqueue_prune(today, "daily"))

    async def idle_check(self) -> None:
        await self.run(IDLE_CHECK, self._idle_check)

    async def publish(self) -> None:
        await self.run("publish", self._publish)

    async def start(self) -> None:
        await self.publish()
        await self.run(
            "catch-up", lambda: catch_up(self.settings, self.clock(), self.agents, self.enqueue)
        )

    def _idle_check(self) -> None:
        assert self.watch is not None
        for quiet in self.watch.check(self.clock()):
            day = quiet.last_at.astimezone(self.settings.zone).date()
            for agent in quiet.agents:
                self.enqueue(agent, day, "idle")

    def _publish(self) -> None:
        if self.on_schedule is not None:
            self.on_schedule(next_fire_times(self.settings, self.clock()))


def build_scheduler(
    settings: Settings,
    enqueue: Enqueue,
    clock: Clock,
    *,
    agents: Sequence[str],
    history: History,
    on_schedule: Callable[[dict[str, datetime]], None] | None = None,
    enqueue_prune: EnqueuePrune | None = None,
) -> AsyncIOScheduler:
    """A scheduler with the jobs above, not started yet (``start()`` needs a running loop).

    Args:
        settings: the cron line, idle minutes, catch-up days and time zone.
        enqueue: ``enqueue(agent_id, day, trigger)``, called in a thread.
        clock: the current time (aware); what "today" and "quiet" are measured against.
        agents: the team's agent ids.
        history: where the idle check reads groups and who spoke.
        on_schedule: receives the next fire times at start and every minute (in a thread).
        enqueue_prune: ``enqueue_prune(day, trigger)``, called in a thread once a day when a
            retention limit is set.
    """
    watch = None
    if settings.idle_minutes:
        watch = IdleWatch(history, agents, timedelta(minutes=settings.idle_minutes))
    tasks = _Tasks(settings, enqueue, clock, agents, watch, on_schedule, enqueue_prune)
    scheduler = AsyncIOScheduler(
        timezone=settings.zone,
        job_defaults={"coalesce": True, "max_instances": 1, "misfire_grace_time": 3600},
    )
    for agent in agents:
        beat = heartbeat_trigger(settings)
        scheduler.add_job(tasks.heartbeat, beat, args=[agent], id=f"{HEARTBEAT}:{agent}")
    minutely = _every_minute(settings)
    if watch is not None:
        scheduler.add_job(tasks.idle_check, minutely, id=IDLE_CHECK, misfire_grace_time=30)
    if on_schedule is not None:
        scheduler.add_job(tasks.publish, minutely, id="publish", misfire_grace_time=30)
    if enqueue_prune is not None and retention_enabled(settings):
        scheduler.add_job(tasks.prune, prune_trigger(settings), id=PRUNE)
    scheduler.add_job(tasks.start, id="catch-up")  # no trigger: once, as soon as it starts
    return scheduler


class Schedule:
    """The daemon's running scheduler and the Redis connection its jobs enqueue through."""

    def __init__(self, scheduler: AsyncIOScheduler, connection: Connection) -> None:
        self.scheduler = scheduler
        self.connection = connection

    async def stop(self) -> None:
        """Stop firing (a job in hand is not waited for) and withdraw the published times."""
        if self.scheduler.running:
            self.scheduler.shutdown(wait=False)
        await asyncio.sleep(0)  # the shutdown runs as a loop callback
        await asyncio.to_thread(self._close)

    def _close(self) -> None:
        with contextlib.suppress(BusError), translated():
            self.connection.delete(schedule_key())
        self.connection.close()


async def start_schedule(
    settings: Settings, engine: Engine, agents: Sequence[str]
) -> Schedule | None:
    """Start the schedule on the running loop; on failure log it and return None.

    Message handling does not depend on the schedule, so the daemon carries on without it.
    """
    connection: Connection | None = None
    try:
        connection = connect(settings.effective_redis_url, socket_timeout=10)
        bound = connection

        def enqueue(agent: str, day: date, trigger: str) -> object:
            result = enqueue_distill(bound, agent, day, trigger, settings=settings)
            level = logging.INFO if result.enqueued else logging.DEBUG
            logger.log(level, "%s %s: %s", trigger, result.job_id, result.detail)
            return result

        def prune(day: date, trigger: str) -> object:
            result = enqueue_prune(bound, day, trigger, settings=settings)
            logger.info("%s %s: %s", trigger, result.job_id, result.detail)
            return result

        scheduler = build_scheduler(
            settings,
            enqueue,
            lambda: datetime.now(UTC),
            agents=agents,
            history=HistoryStore(engine),
            on_schedule=lambda times: store_schedule(bound, times, datetime.now(UTC)),
            enqueue_prune=prune,
        )
        scheduler.start()
    except Exception:
        logger.exception("the schedule did not start; heartbeats will not run on their own")
        if connection is not None:
            await asyncio.to_thread(connection.close)
        return None
    return Schedule(scheduler, connection)
