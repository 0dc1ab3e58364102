"""RQ jobs on a real Redis: dedup by job id, retries, the failed registry, real job functions."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import threading
from datetime import UTC, date, datetime, timedelta
from datetime import time as clock_time
from pathlib import Path
from typing import Any

import aiomqtt
import pytest
import redis
from click.testing import CliRunner
from rq import SimpleWorker, Worker
from rq.job import JobStatus
from rq.serializers import JSONSerializer

from orchestrator.adapters.mqtt import mqtt_client_args
from orchestrator.background.listing import list_jobs, store_schedule
from orchestrator.background.queue import (
    JobPolicy,
    distill_job_id,
    enqueue_distill,
    enqueue_summary,
    fetch_job,
    queue,
    summary_job_id,
)
from orchestrator.cli.main import main
from orchestrator.core.models import ChatMessage, MessageKind
from orchestrator.core.wire import growth_topic
from orchestrator.memory.conversation.store import HistoryStore
from orchestrator.memory.db import make_engine
from orchestrator.memory.personal import PersonalLog
from orchestrator.memory.schema import PersonalDraft
from orchestrator.settings import Settings, load_settings
from tests.arena_helpers import REPO, worker_process, write_team
from tests.arena_up import processes_on
from tests.fakes import FakeMessagesServer
from tests.history_seed import write_history
from tests.waiting import block_until

DAY = date(2025, 3, 14)
# The timeout is not what these tests are about: a first attempt that imports the model SDK on
# a busy machine must not run out of it.
FAST = JobPolicy(retries=2, retry_intervals_s=(0,), timeout_s=300)


def _env(tmp_path: Path, redis_url: str, mqtt_url: str) -> dict[str, str]:
    return {
        "REDIS_URL": redis_url,
        "MQTT_URL": mqtt_url,
        "ARENA_DATA_DIR": str(tmp_path / "data"),
        "ARENA_AGENTS_DIR": str(write_team(tmp_path)),
        "ARENA_WORKSPACES_DIR": str(tmp_path / "workspaces"),
        "ARENA_PROMPTS_DIR": str(REPO / "prompts"),
    }


@pytest.fixture
def dead_mqtt(free_port: int) -> str:
    """An MQTT URL where nothing listens."""
    return f"mqtt://127.0.0.1:{free_port}"


@pytest.fixture
def settings_overrides(embedded_redis_url: str, dead_mqtt: str) -> dict[str, Any]:
    """The embedded Redis, and a broker nobody answers at (the offline model)."""
    return {"redis_url": embedded_redis_url, "mqtt_url": dead_mqtt}


# Job functions read the settings from the environment, as a worker does.
in_environment = pytest.mark.usefixtures("settings_env")


def work(connection: redis.Redis) -> None:
    """Run every queued job in this process, as a worker would."""
    worker = SimpleWorker([queue(connection)], connection=connection, serializer=JSONSerializer)
    worker.work(burst=True, logging_level="ERROR")


def write_log(settings: Settings, agent: str, day: date, *notes: str) -> Path:
    """Append notes to an agent's daily log of ``day``."""
    log = PersonalLog(settings.workspaces_dir, settings.zone)
    for minute, text in enumerate(notes):
        now = datetime.combine(day, clock_time(9, minute), UTC)
        path = log.append(
            agent, PersonalDraft(content=text, type="lesson"), source="demo/m", now=now
        )
    return path


@in_environment
def test_job_enqueued_twice_runs_once(settings, connection):
    """The same agent, day and log enqueued twice is one job that runs once."""
    write_log(settings, "ping", DAY, "Ask for the expected load first")
    first = enqueue_distill(connection, "ping", DAY, "heartbeat", settings=settings)
    second = enqueue_distill(connection, "ping", DAY, "idle", settings=settings)
    assert (first.enqueued, second.enqueued) == (True, False)
    assert first.job_id == second.job_id == "distill_ping_2025-03-14"
    assert second.detail == "already queued"
    work(connection)
    again = enqueue_distill(connection, "ping", DAY, "catch-up", settings=settings)
    assert not again.enqueued
    assert again.detail == "already done for this input"
    job = fetch_job(connection, first.job_id)
    assert job is not None
    assert len(job.results()) == 1
    assert job.return_value()["status"] == "written"


@in_environment
def test_grown_log_runs_again(settings, connection):
    """Notes added after a heartbeat ran make the next one run on the longer log."""
    write_log(settings, "ping", DAY, "Ask for the expected load first")
    enqueue_distill(connection, "ping", DAY, "idle", settings=settings)
    work(connection)
    write_log(settings, "ping", DAY, "Write the test before the fix")
    result = enqueue_distill(connection, "ping", DAY, "heartbeat", settings=settings)
    assert result.enqueued
    assert result.detail == "input changed since the last run"
    work(connection)
    job = fetch_job(connection, result.job_id)
    assert job is not None
    assert job.get_meta()["trigger"] == "heartbeat"
    assert job.return_value()["status"] == "written"


@in_environment
def test_concurrent_enqueues_create_one_job(settings, connection):
    """Eight callers enqueueing the same input at once create exactly one job."""
    write_log(settings, "ping", DAY, "Ask for the expected load first")
    barrier = threading.Barrier(8)
    results = []

    def enqueue() -> None:
        with redis.Redis.from_url(settings.effective_redis_url) as own:
            barrier.wait()
            results.append(enqueue_distill(own, "ping", DAY, "heartbeat", settings=settings))

    threads = [threading.Thread(target=enqueue) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(r.enqueued for r in results) == [False] * 7 + [True]
    assert queue(connection).get_job_ids() == [distill_job_id("ping", DAY)]


@in_environment
def test_concurrent_replacements_create_one_job(settings, connection):
    """Callers racing to re-run a finished job whose log grew still create one job."""
    write_log(settings, "ping", DAY, "Ask for the expected load first")
    enqueue_distill(connection, "ping", DAY, "idle", settings=settings)
    work(connection)
    write_log(settings, "ping", DAY, "Write the test before the fix")
    barrier = threading.Barrier(6)
    results = []

    def enqueue() -> None:
        with redis.Redis.from_url(settings.effective_redis_url) as own:
            barrier.wait()
            results.append(enqueue_distill(own, "ping", DAY, "heartbeat", settings=settings))

    threads = [threading.Thread(target=enqueue) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(r.enqueued for r in results) == 1
    assert queue(connection).get_job_ids() == [distill_job_id("ping", DAY)]


@in_environment
def test_failing_job_is_retried_then_failed_and_listed(settings, connection, monkeypatch):
    """A job whose model keeps failing runs 1 + 2 retries times, then is failed, error shown."""
    write_log(settings, "ping", DAY, "Ask for the expected load first")
    with FakeMessagesServer() as model:
        model.script(status=500, times=10)
        monkeypatch.setenv("ANTHROPIC_API_KEY", "test")
        monkeypatch.setenv("ANTHROPIC_BASE_URL", model.base_url)
        monkeypatch.setenv("ARENA_MODEL_MAX_RETRIES", "0")
        result = enqueue_distill(connection, "ping", DAY, "manual", settings=settings, policy=FAST)
        work(connection)
        attempts = len(model.requests)
    assert attempts == 3
    job = fetch_job(connection, result.job_id)
    assert job is not None
    assert job.get_status() is JobStatus.FAILED
    assert job.retries_left == 0
    assert result.job_id in queue(connection).failed_job_registry.get_job_ids()
    row = {r.id: r for r in list_jobs(connection)}[result.job_id]
    assert (row.status, row.kind, row.target, row.result) == (
        "failed",
        "distill",
        "ping",
        None,
    )
    assert row.error is not None
    assert row.error.startswith("orchestrator.errors.LLMError")
    assert "500" in row.error


@in_environment
def test_failed_job_runs_again_only_when_forced(settings, connection):
    """A failed job is not repeated by a schedule, but a forced run replaces it."""
    policy = JobPolicy(retries=0)
    enqueue_distill(connection, "ghost", DAY, "heartbeat", settings=settings, policy=policy)
    work(connection)
    again = enqueue_distill(connection, "ghost", DAY, "heartbeat", settings=settings)
    assert not again.enqueued
    assert again.status == "failed"
    forced = enqueue_distill(connection, "ghost", DAY, "manual", settings=settings, force=True)
    assert forced.enqueued
    assert forced.detail == "forced to run again"
    job = fetch_job(connection, forced.job_id)
    assert job is not None
    assert job.get_status() is JobStatus.QUEUED
    assert job.results() == []


@in_environment
def test_list_jobs_shows_schedule_queued_and_finished(settings, connection):
    """`arena jobs` sees the daemon's next fire times, waiting jobs and finished outcomes."""
    write_log(settings, "ping", DAY, "Ask for the expected load first")
    enqueue_distill(connection, "ping", DAY, "heartbeat", settings=settings)
    work(connection)
    enqueue_distill(connection, "pong", DAY, "manual", settings=settings)
    at = datetime(2025, 3, 14, 23, 30, tzinfo=UTC)
    store_schedule(connection, {"heartbeat": at}, datetime.now(UTC))
    rows = list_jobs(connection)
    assert [(r.id, r.status) for r in rows] == [
        ("heartbeat", "scheduled"),
        ("distill_pong_2025-03-14", "queued"),
        ("distill_ping_2025-03-14", "finished"),
    ]
    assert rows[0].next_run_at == at.isoformat()
    finished = rows[2]
    assert finished.result is not None
    assert finished.result["status"] == "written"
    assert finished.trigger == "heartbeat"
    assert finished.ended_at is not None
    dicts = [r.as_dict() for r in rows]
    assert {tuple(d) for d in dicts} == {tuple(dicts[0])}  # every row has the same keys
    json.dumps(dicts)


def _collect_growth(url: str, topic: str, ready: threading.Event, got: list[bytes]) -> None:
    async def run() -> None:
        async with aiomqtt.Client(**mqtt_client_args(url)) as client:
            await client.subscribe(topic, qos=1)
            ready.set()
            async with asyncio.timeout(20):
                async for message in client.messages:
                    got.append(bytes(message.payload))  # type: ignore[arg-type]
                    return

    asyncio.run(run())


@in_environment
def test_offline_distillation_writes_a_version_and_announces_it(
    settings, connection, embedded_mqtt_url, monkeypatch
):
    """The job on the offline provider writes MEMORY.md version 1 and publishes the growth."""
    monkeypatch.setenv("MQTT_URL", embedded_mqtt_url)
    write_log(settings, "ping", DAY, "Ask for the expected load first")
    ready, got = threading.Event(), []
    listener = threading.Thread(
        target=_collect_growth, args=(embedded_mqtt_url, growth_topic("ping"), ready, got)
    )
    listener.start()
    assert ready.wait(10)
    enqueue_distill(connection, "ping", DAY, "heartbeat", settings=settings)
    work(connection)
    listener.join(20)
    job = fetch_job(connection, distill_job_id("ping", DAY))
    assert job is not None
    outcome = job.return_value()
    assert outcome["status"] == "written"
    assert outcome["version"] == 1
    assert "expected load" in (settings.workspaces_dir / "ping" / "MEMORY.md").read_text()
    event = json.loads(got[0])
    assert (event["agent"], event["day"], event["version"]) == ("ping", "2025-03-14", 1)
    assert event["trigger"] == "heartbeat"


@in_environment
def test_unreachable_broker_does_not_fail_the_job(settings, connection, caplog):
    """A growth event that cannot be published is logged; the job still succeeds."""
    write_log(settings, "ping", DAY, "Ask for the expected load first")
    enqueue_distill(connection, "ping", DAY, "heartbeat", settings=settings)
    work(connection)
    job = fetch_job(connection, distill_job_id("ping", DAY))
    assert job is not None
    assert job.get_status() is JobStatus.FINISHED
    assert job.return_value()["status"] == "written"
    assert "growth event for ping not published" in caplog.text


@in_environment
def test_summary_enqueued_twice_runs_once(settings, connection):
    """A summary up to the same message is one job; the offline provider writes it."""
    engine = make_engine(settings.effective_database_url)
    store = HistoryStore(engine)
    start = datetime(2025, 3, 14, 9, 0, tzinfo=UTC)
    for n in range(3):
        write_history(
            store,
            ChatMessage(
                id=f"m{n}",
                group="demo",
                sender="alex",
                kind=MessageKind.HUMAN,
                text=f"[decision] we use JWT, point {n}",
                created_at=start + timedelta(minutes=n),
            ),
        )
    engine.dispose()
    first = enqueue_summary(connection, "demo", 3, "messages", settings=settings)
    second = enqueue_summary(connection, "demo", 3, "decision", settings=settings)
    assert (first.enqueued, second.enqueued) == (True, False)
    assert first.job_id == summary_job_id("demo", 3) == "summary_demo_3"
    work(connection)
    job = fetch_job(connection, first.job_id)
    assert job is not None
    assert job.return_value()["status"] in ("written", "skipped")
    assert len(job.results()) == 1


@pytest.mark.slow
def test_worker_killed_mid_job_leaves_memory_md_whole(tmp_path, embedded_redis_url, dead_mqtt):
    """kill -9 of a worker mid-distillation leaves the old MEMORY.md, no temp files, and
    nothing running: the job's own process (a group of its own) ends with the worker."""
    env = _env(tmp_path, embedded_redis_url, dead_mqtt)
    (tmp_path / "data").mkdir()
    settings = load_settings(**{k.removeprefix("ARENA_").lower(): v for k, v in env.items()})
    write_log(settings, "ping", DAY, "Ask for the expected load first")
    memory_md = settings.workspaces_dir / "ping" / "MEMORY.md"
    old = "# ping\n\n- Keep answers short\n"
    memory_md.write_text(old, encoding="utf-8")
    with FakeMessagesServer(latency_s=30) as model:
        env |= {"ANTHROPIC_API_KEY": "test", "ANTHROPIC_BASE_URL": model.base_url}
        env["ARENA_MODEL_MAX_RETRIES"] = "0"
        with (
            redis.Redis.from_url(embedded_redis_url) as connection,
            worker_process({**os.environ, **env}, tmp_path / "worker.log") as worker,
        ):
            result = enqueue_distill(connection, "ping", DAY, "heartbeat", settings=settings)

            def called() -> bool:
                assert worker.poll() is None, (tmp_path / "worker.log").read_text()
                return bool(model.requests)

            block_until(called, timeout_s=20, what="the worker to call the model")
            job = fetch_job(connection, result.job_id)
            assert job is not None
            assert job.get_status() is JobStatus.STARTED
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait(10)
            block_until(
                lambda: processes_on(settings.data_dir) == [],
                timeout_s=10,
                what="the job's process to end with its worker",
            )
    assert memory_md.read_text(encoding="utf-8") == old
    leftovers = [p.name for p in memory_md.parent.rglob("*") if p.name.endswith(".tmp")]
    assert leftovers == []


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_second_worker_requeues_the_retries_once_the_first_stops(
    tmp_path, embedded_redis_url, dead_mqtt
):
    """Two workers: when the one that requeues due retries stops, the other takes its place,
    so a heartbeat that fails afterwards is still retried when due."""
    env = _env(tmp_path, embedded_redis_url, dead_mqtt)
    (tmp_path / "data").mkdir()
    settings = load_settings(**{k.removeprefix("ARENA_").lower(): v for k, v in env.items()})
    today = datetime.now(settings.zone).date()
    write_log(settings, "ping", today, "Ask for the expected load first")
    with FakeMessagesServer() as model:
        env |= {"ANTHROPIC_API_KEY": "test", "ANTHROPIC_BASE_URL": model.base_url}
        env = {**os.environ, **env, "ARENA_MODEL_MAX_RETRIES": "0"}
        with (
            redis.Redis.from_url(embedded_redis_url) as connection,
            worker_process(env, tmp_path / "first.log") as first,
        ):
            arena = queue(connection)
            block_until(lambda: arena.scheduler_pid is not None, timeout_s=60, what="a scheduler")
            with worker_process(env, tmp_path / "second.log") as second:

                def second_idle() -> bool:
                    workers = Worker.all(connection=connection, serializer=JSONSerializer)
                    return any(w.pid == second.pid and w.get_state() == "idle" for w in workers)

                block_until(second_idle, timeout_s=60, what="the second worker")
                first.send_signal(signal.SIGTERM)
                assert first.wait(30) == 0
                model.script(status=500)  # the first attempt fails: a retry in 10 s
                said = CliRunner().invoke(main, ["heartbeat", "ping"], env=env)
                assert said.exit_code == 0, said.output
                job_id = distill_job_id("ping", today)

                def finished() -> bool:
                    job = fetch_job(connection, job_id)
                    return job is not None and job.get_status() is JobStatus.FINISHED

                block_until(finished, timeout_s=60, what="the retry to run")
    assert len(model.requests) == 2
