"""``arena jobs``, ``arena heartbeat`` and ``arena summarize`` against a real Redis and an RQ
worker in this process."""

from __future__ import annotations

import json
import signal
from concurrent.futures import ThreadPoolExecutor, wait
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import redis
from click.testing import CliRunner
from rq import SimpleWorker
from rq.serializers import JSONSerializer

from orchestrator.background.queue import queue
from orchestrator.cli import jobs as cli_jobs
from orchestrator.cli.main import main
from orchestrator.core.models import ChatMessage, MessageKind
from orchestrator.memory.db import make_engine
from orchestrator.memory.personal import PersonalLog
from orchestrator.memory.schema import PersonalDraft
from orchestrator.settings import load_settings
from tests.arena_helpers import set_team_environment
from tests.history_seed import write_history


@pytest.fixture
def env(tmp_path, embedded_redis_url, free_port, monkeypatch) -> dict[str, str]:
    """An Agent Arena under ``tmp_path`` in the environment (offline model, no broker)."""
    values = set_team_environment(
        tmp_path,
        monkeypatch,
        REDIS_URL=embedded_redis_url,
        MQTT_URL=f"mqtt://127.0.0.1:{free_port}",
    )
    settings = load_settings()
    PersonalLog(settings.workspaces_dir, settings.zone).append(
        "ping",
        PersonalDraft(content="Ask for the expected load first", type="lesson"),
        source="demo/m1",
        now=datetime(2025, 3, 14, 9, 0, tzinfo=UTC),
    )
    return values


def arena(*args: str):
    """Run an `arena` subcommand in this process."""
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def arena_with_a_worker(*args: str):
    """Run an `arena` subcommand in a thread while this thread works the job queues as a
    worker does, until the command ends."""
    # RQ sets its own SIGINT and SIGTERM handlers for a worker in this process.
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    with (
        redis.Redis.from_url(load_settings().effective_redis_url) as connection,
        ThreadPoolExecutor(1) as pool,
    ):
        command = pool.submit(arena, *args)
        try:
            while not wait([command], timeout=0.05).done:
                worker = SimpleWorker(
                    [queue(connection)], connection=connection, serializer=JSONSerializer
                )
                worker.work(burst=True, logging_level="ERROR")
        finally:
            for sig, handler in handlers.items():
                signal.signal(sig, handler)
        return command.result()


def test_jobs_without_daemon_shows_the_planned_schedule(env):
    """With no daemon publishing, `arena jobs --json` shows when the schedule would fire."""
    queued = arena("heartbeat", "ping", "--date", "2025-03-14")
    assert queued.exit_code == 0, queued.output
    assert "distill_ping_2025-03-14: enqueued" in queued.output
    rows = json.loads(arena("jobs", "--json").stdout)
    assert sorted((r["id"], r["status"]) for r in rows[:2]) == [
        ("heartbeat", "not running"),
        ("idle-check", "not running"),
    ]
    assert rows[0]["next_run_at"] <= rows[1]["next_run_at"]  # soonest first
    assert (rows[2]["id"], rows[2]["status"]) == ("distill_ping_2025-03-14", "queued")
    assert rows[2]["trigger"] == "manual"


def test_heartbeat_refuses_unknown_agents_and_bad_dates(env):
    """An unknown agent or a malformed date is one line on stderr and exit 1."""
    unknown = arena("heartbeat", "ghost")
    assert unknown.exit_code == 1
    assert "no agent 'ghost' (agents: helper, ping, pong)" in unknown.stderr
    bad = arena("heartbeat", "ping", "--date", "14.03.2025")
    assert bad.exit_code == 1
    assert "date: '14.03.2025' is not a date (YYYY-MM-DD)" in bad.stderr


def test_wait_without_a_worker_says_so(env, monkeypatch):
    """`--wait` with no worker running stops after a few seconds and says what to start."""
    monkeypatch.setattr(cli_jobs, "NO_WORKER_AFTER_S", 0.3)
    result = arena("heartbeat", "ping", "--date", "2025-03-14", "--wait", "20")
    assert result.exit_code == 1
    assert "no worker is running" in result.stderr
    assert "arena worker" in result.stderr


def test_heartbeat_and_summarize_wait_for_the_outcome(env):
    """With a worker, `--wait` prints the outcome; asking again finds it done."""
    first = arena_with_a_worker("heartbeat", "ping", "--date", "2025-03-14", "--wait", "30")
    assert first.exit_code == 0, first.output
    assert "ping: MEMORY.md version 1 written (" in first.stdout
    again = arena_with_a_worker("heartbeat", "ping", "--date", "2025-03-14", "--wait", "30")
    assert again.exit_code == 0, again.output
    assert "not enqueued, already done for this input (--force runs it again)" in again.stdout
    forced = arena_with_a_worker(
        "heartbeat", "ping", "--date", "2025-03-14", "--force", "--wait", "30"
    )
    assert forced.exit_code == 0, forced.output
    assert "ping: skipped: " in forced.stdout

    engine = make_engine(load_settings().effective_database_url)
    start = datetime(2025, 3, 14, 9, 0, tzinfo=UTC)
    for n, text in enumerate(["Let us build a login", "[decision] we use JWT"]):
        write_history(
            engine,
            ChatMessage(
                id=f"m{n}",
                group="demo",
                sender="alex",
                kind=MessageKind.HUMAN,
                text=text,
                created_at=start + timedelta(minutes=n),
            ),
        )
    engine.dispose()
    summary = arena_with_a_worker("summarize", "demo", "--wait", "30")
    assert summary.exit_code == 0, summary.output
    assert "summary_demo_2: enqueued" in summary.stdout
    assert "demo: summary version 1 written (" in summary.stdout
    listing = arena("jobs")
    assert "distill_ping_2025-03-14" in listing.stdout
    assert "summary_demo_2" in listing.stdout


def test_summarize_needs_messages(env):
    """A group without messages has nothing to summarise."""
    result = arena("summarize", "empty")
    assert result.exit_code == 1
    assert "group 'empty' has no messages yet" in result.stderr


def test_summarize_rejects_bad_group_ids(env, tmp_path: Path):
    """A malformed group id is refused before anything is enqueued."""
    result = arena("summarize", "Not A Group")
    assert result.exit_code == 1
    assert "not a valid group id" in result.stderr
