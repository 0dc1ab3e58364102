"""The daemon's schedule: fire times, idle heartbeats, catch-up and the summary trigger."""

from __future__ import annotations

import asyncio
from datetime import UTC, date, datetime, timedelta
from datetime import time as clock_time
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
import redis
from rq import SimpleWorker
from rq.serializers import JSONSerializer

from orchestrator.background.idle import IdleGroup, IdleWatch
from orchestrator.background.queue import enqueue_distill, queue
from orchestrator.background.schedule import (
    HEARTBEAT,
    IDLE_CHECK,
    build_scheduler,
    catch_up,
    due_days,
    next_fire_times,
)
from orchestrator.core.models import ChatMessage, MessageKind
from orchestrator.errors import ConfigError
from orchestrator.memory.conversation.store import HistoryStore
from orchestrator.memory.db import make_engine
from orchestrator.memory.personal import PersonalLog
from orchestrator.memory.schema import PersonalDraft
from orchestrator.runtime.triggers import summary_due
from orchestrator.settings import Settings, load_settings
from tests.arena_helpers import REPO, write_team
from tests.history_seed import write_history

BERLIN = ZoneInfo("Europe/Berlin")
SHANGHAI = ZoneInfo("Asia/Shanghai")
T0 = datetime(2025, 3, 14, 9, 0, tzinfo=UTC)


def make(tmp_path: Path, **values: object) -> Settings:
    """Settings with folders under ``tmp_path``."""
    return load_settings(
        data_dir=tmp_path / "data",
        agents_dir=write_team(tmp_path),
        workspaces_dir=tmp_path / "workspaces",
        prompts_dir=REPO / "prompts",
        **values,
    )


# Fire times -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("now", "expected_utc"),
    [
        (datetime(2025, 3, 29, 12, 0, tzinfo=BERLIN), datetime(2025, 3, 29, 22, 30, tzinfo=UTC)),
        (datetime(2025, 3, 29, 23, 45, tzinfo=BERLIN), datetime(2025, 3, 30, 21, 30, tzinfo=UTC)),
        (datetime(2025, 10, 25, 23, 45, tzinfo=BERLIN), datetime(2025, 10, 26, 22, 30, tzinfo=UTC)),
    ],
    ids=["winter-time", "across-spring-forward", "across-fall-back"],
)
def test_heartbeat_fires_at_local_time_across_dst(tmp_path, now, expected_utc):
    """23:30 in Berlin is 22:30 UTC in winter and 21:30 UTC in summer, on the right day."""
    times = next_fire_times(make(tmp_path, tz="Europe/Berlin"), now)
    assert times[HEARTBEAT] == expected_utc
    assert times[HEARTBEAT].astimezone(BERLIN).time() == clock_time(23, 30)


def test_heartbeat_in_a_skipped_hour_fires_once_after_the_gap(tmp_path):
    """02:30 does not exist on the spring-forward day in Berlin: it fires once, at 03:30."""
    settings = make(tmp_path, tz="Europe/Berlin", heartbeat_cron="30 2 * * *")
    beat = next_fire_times(settings, datetime(2025, 3, 30, 0, 0, tzinfo=BERLIN))[HEARTBEAT]
    # APScheduler returns the wall time 02:30, which does not exist; as an instant it is 01:30 UTC.
    assert beat.astimezone(UTC) == datetime(2025, 3, 30, 1, 30, tzinfo=UTC)
    assert beat.astimezone(UTC).astimezone(BERLIN).time() == clock_time(3, 30)
    after = next_fire_times(settings, beat.astimezone(UTC) + timedelta(seconds=1))[HEARTBEAT]
    assert after.astimezone(UTC) == datetime(2025, 3, 31, 0, 30, tzinfo=UTC)


def test_heartbeat_in_shanghai(tmp_path):
    """Asia/Shanghai has no DST: 23:30 is always 15:30 UTC; just after it, the next day's."""
    settings = make(tmp_path, tz="Asia/Shanghai")
    times = next_fire_times(settings, datetime(2025, 6, 1, 23, 31, 20, tzinfo=SHANGHAI))
    assert times[HEARTBEAT] == datetime(2025, 6, 2, 15, 30, tzinfo=UTC)
    assert times[IDLE_CHECK] == datetime(2025, 6, 1, 23, 32, tzinfo=SHANGHAI)


def test_idle_check_absent_when_turned_off(tmp_path):
    """With idle_minutes=0 there is no idle check to fire."""
    times = next_fire_times(make(tmp_path, idle_minutes=0), T0)
    assert set(times) == {HEARTBEAT}


def test_bad_cron_line_is_refused():
    """A malformed heartbeat cron line fails when the settings are read."""
    with pytest.raises(ConfigError, match="ARENA_HEARTBEAT_CRON"):
        load_settings(heartbeat_cron="30 23 * *")


# Idle heartbeats --------------------------------------------------------------------------------


def _say(store: HistoryStore, n: int, sender: str, at: datetime, group: str = "demo") -> None:
    kind = MessageKind.HUMAN if sender == "alex" else MessageKind.AGENT
    write_history(
        store,
        ChatMessage(
            id=f"{group}-{n}", group=group, sender=sender, kind=kind, text="hi", created_at=at
        ),
    )


@pytest.fixture
def history(tmp_path) -> HistoryStore:
    """A message history in a real SQLite file."""
    engine = make_engine(f"sqlite:///{tmp_path / 'arena.db'}")
    yield HistoryStore(engine)
    engine.dispose()


def test_idle_group_reported_once_per_quiet_period(history):
    """A group quiet for 30 minutes is reported once, with the agents that spoke since."""
    watch = IdleWatch(history, {"ping", "pong", "helper"}, timedelta(minutes=30))
    _say(history, 1, "alex", T0)
    _say(history, 2, "ping", T0 + timedelta(minutes=1))
    _say(history, 3, "pong", T0 + timedelta(minutes=2))
    assert watch.check(T0 + timedelta(minutes=3)) == []  # still talking
    quiet = T0 + timedelta(minutes=32)
    assert watch.check(quiet) == [
        IdleGroup(group="demo", last_at=T0 + timedelta(minutes=2), agents=("ping", "pong"))
    ]
    assert watch.check(quiet + timedelta(minutes=1)) == []
    assert watch.check(quiet + timedelta(hours=5)) == []
    _say(history, 4, "alex", T0 + timedelta(hours=6))
    _say(history, 5, "helper", T0 + timedelta(hours=6, minutes=1))
    assert watch.check(T0 + timedelta(hours=6, minutes=10)) == []
    later = watch.check(T0 + timedelta(hours=7))
    assert [(q.group, q.agents) for q in later] == [("demo", ("helper",))]


def test_group_already_quiet_at_start_is_not_reported(history):
    """What went quiet before the daemon started is left to the catch-up."""
    _say(history, 1, "ping", T0)
    _say(history, 1, "pong", T0 + timedelta(minutes=5), group="live")
    watch = IdleWatch(history, {"ping", "pong"}, timedelta(minutes=30))
    assert watch.check(T0 + timedelta(minutes=31)) == []  # the first check takes note
    found = watch.check(T0 + timedelta(minutes=40))
    assert [(q.group, q.agents) for q in found] == [("live", ("pong",))]


# Catch-up ---------------------------------------------------------------------------------------


def _log(settings: Settings, agent: str, day: date) -> None:
    PersonalLog(settings.workspaces_dir, settings.zone).append(
        agent,
        PersonalDraft(content=f"a lesson of {day}", type="lesson"),
        source="demo/m",
        now=datetime.combine(day, clock_time(10, 0), settings.zone),
    )


def test_due_days_include_today_only_after_its_heartbeat(tmp_path):
    """Catch-up covers the last N days, and today once 23:30 has passed."""
    settings = make(tmp_path, tz="Asia/Shanghai", catch_up_days=3)
    before = datetime(2025, 6, 10, 23, 0, tzinfo=SHANGHAI)
    assert due_days(settings, before) == [date(2025, 6, 7), date(2025, 6, 8), date(2025, 6, 9)]
    after = datetime(2025, 6, 10, 23, 40, tzinfo=SHANGHAI)
    assert due_days(settings, after)[-1] == date(2025, 6, 10)
    assert due_days(make(tmp_path, catch_up_days=0), after) == []


def test_catch_up_asks_for_due_days_with_logs(tmp_path):
    """Only days in the window that have a daily log are asked for."""
    settings = make(tmp_path, catch_up_days=3)
    now = datetime(2025, 6, 10, 12, 0, tzinfo=UTC)
    for day in (date(2025, 6, 5), date(2025, 6, 8), date(2025, 6, 9), date(2025, 6, 10)):
        _log(settings, "ping", day)
    _log(settings, "pong", date(2025, 6, 7))
    asked: list[tuple[str, date, str]] = []
    catch_up(settings, now, ["helper", "ping", "pong"], lambda *a: asked.append(a))
    assert asked == [
        ("ping", date(2025, 6, 8), "catch-up"),
        ("ping", date(2025, 6, 9), "catch-up"),
        ("pong", date(2025, 6, 7), "catch-up"),
    ]


def test_catch_up_enqueues_exactly_the_missed_days(tmp_path, embedded_redis_url, monkeypatch):
    """With a real queue, a day whose heartbeat already ran is not enqueued again."""
    settings = make(tmp_path, catch_up_days=3, redis_url=embedded_redis_url)
    for name, value in {
        "REDIS_URL": embedded_redis_url,
        "MQTT_URL": "mqtt://127.0.0.1:1",
        "ARENA_DATA_DIR": str(settings.data_dir),
        "ARENA_AGENTS_DIR": str(settings.agents_dir),
        "ARENA_WORKSPACES_DIR": str(settings.workspaces_dir),
        "ARENA_PROMPTS_DIR": str(settings.prompts_dir),
    }.items():
        monkeypatch.setenv(name, value)
    settings.data_dir.mkdir()
    now = datetime(2025, 6, 10, 12, 0, tzinfo=UTC)
    for day in (date(2025, 6, 8), date(2025, 6, 9)):
        _log(settings, "ping", day)
    with redis.Redis.from_url(embedded_redis_url) as connection:
        enqueue_distill(connection, "ping", date(2025, 6, 9), "heartbeat", settings=settings)
        worker = SimpleWorker([queue(connection)], connection=connection, serializer=JSONSerializer)
        worker.work(burst=True, logging_level="ERROR")

        def enqueue(agent: str, day: date, trigger: str) -> object:
            return enqueue_distill(connection, agent, day, trigger, settings=settings)

        catch_up(settings, now, ["ping", "pong"], enqueue)
        assert queue(connection).get_job_ids() == ["distill_ping_2025-06-08"]


# The scheduler ----------------------------------------------------------------------------------


async def test_scheduler_registers_jobs_and_runs_catch_up_at_start(tmp_path, history):
    """Started, it has a heartbeat per agent and the idle check, and catches up at once."""
    settings = make(tmp_path, tz="Europe/Berlin", catch_up_days=2)
    now = datetime.now(UTC)
    yesterday = now.astimezone(BERLIN).date() - timedelta(days=1)
    _log(settings, "pong", yesterday)
    asked: list[tuple[str, date, str]] = []
    published: list[dict[str, datetime]] = []
    done = asyncio.Event()
    loop = asyncio.get_running_loop()

    def enqueue(agent: str, day: date, trigger: str) -> object:
        asked.append((agent, day, trigger))
        loop.call_soon_threadsafe(done.set)
        return None

    scheduler = build_scheduler(
        settings,
        enqueue,
        lambda: now,
        agents=["ping", "pong"],
        history=history,
        on_schedule=published.append,
    )
    scheduler.start()
    try:
        async with asyncio.timeout(10):
            await done.wait()
        jobs = {job.id: job for job in scheduler.get_jobs()}
        assert set(jobs) == {"heartbeat:ping", "heartbeat:pong", IDLE_CHECK, "publish"}
        expected = next_fire_times(settings, datetime.now(UTC))[HEARTBEAT]
        assert jobs["heartbeat:ping"].next_run_time == expected
    finally:
        scheduler.shutdown(wait=False)
        await asyncio.sleep(0)
    assert asked == [("pong", yesterday, "catch-up")]
    assert published[0] == next_fire_times(settings, now)


# Summary trigger --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("count", "text", "every", "expected"),
    [
        (1, "hello", 20, None),
        (19, "hello", 20, None),
        (20, "hello", 20, "messages"),
        (25, "hello", 20, "messages"),
        (1, "[decision] we use JWT", 20, "decision"),
        (1, "New [Requirement]: SSO login", 20, "requirement"),
        (3, "[task_assigned] @developer build the API", 20, "task"),
        (20, "[decision] we ship Friday", 20, "decision"),
        (500, "hello", 0, None),
        (1, "a decision without the tag", 20, None),
    ],
)
def test_summary_due(count, text, every, expected):
    """Summaries are due every N messages, and at once on decisions, requirements and tasks."""
    assert summary_due(count, text, every) == expected
