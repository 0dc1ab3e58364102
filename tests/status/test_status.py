"""`arena status`: sizes, each agent's heartbeats, and the stuck checks, on a real Redis."""

from __future__ import annotations

import gc
import json
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import pytest
import redis
from click.testing import CliRunner
from rq import Worker
from rq.serializers import JSONSerializer

from orchestrator.background.queue import enqueue_prune, queue
from orchestrator.cli.main import main
from orchestrator.core.models import ChatMessage, MessageKind
from orchestrator.memory.conversation.store import HistoryStore
from orchestrator.memory.db import open_engine
from orchestrator.memory.session.store import NewMemory, SessionMemory
from orchestrator.memory.versions.store import VersionStore
from orchestrator.settings import Settings, load_settings
from orchestrator.status.report import ConsumerInfo, Jobs, Streams, stuck
from orchestrator.status.survey import status
from tests.arena_helpers import environment, make_settings
from tests.history_seed import write_history

T0 = datetime(2026, 5, 1, 23, 30, tzinfo=UTC)


@pytest.fixture
def env(tmp_path, embedded_redis_url, monkeypatch) -> Settings:
    """Settings in the environment, as `arena` reads them (no MQTT broker)."""
    settings = make_settings(tmp_path, embedded_redis_url, "mqtt://127.0.0.1:1", None)
    for name, value in environment(settings).items():
        monkeypatch.setenv(name, value)
    return load_settings()


def seed(settings: Settings) -> None:
    """Two messages, three memories (one forgotten), and heartbeat runs of ping and pong."""
    with open_engine(settings.effective_database_url) as engine:
        store = HistoryStore(engine)
        for n in range(2):
            write_history(
                store,
                ChatMessage(
                    id=f"{n}-0",
                    group="demo",
                    sender="alex",
                    kind=MessageKind.HUMAN,
                    text="hello",
                    created_at=T0,
                ),
            )
        memory = SessionMemory(engine)
        for content in ("we use JWT", "we use Postgres", "we ship on Friday"):
            entry = memory.write(
                NewMemory(
                    scope="session", scope_id="demo", type="decision", content=content, now=T0
                )
            ).record
        memory.forget(entry.id, now=T0)
        versions = VersionStore(engine)
        versions.add(
            "memory_md", "ping", "- a lesson\n", trigger="heartbeat", created_at=T0, tokens=4
        )
        versions.record_run(
            "memory_md", "ping", status="written", trigger="heartbeat", created_at=T0, version=1
        )
        later = T0 + timedelta(days=1)
        versions.record_run(
            "memory_md",
            "ping",
            status="error",
            trigger="heartbeat",
            created_at=later,
            reason="the model is unavailable",
        )
        versions.record_run(
            "memory_md", "pong", status="rejected", trigger="idle", created_at=T0, reason="empty"
        )
        versions.record_run(
            "memory_md", "pong", status="skipped", trigger="heartbeat", created_at=later
        )


def test_status_reports_sizes_and_heartbeats(env):
    """The JSON has the database's bytes on disk, row counts, folder sizes and each agent's
    last good heartbeat, with a newer failure shown and an older one not."""
    seed(env)
    (env.workspaces_dir / "ping").mkdir(parents=True)
    (env.workspaces_dir / "ping" / "MEMORY.md").write_bytes(b"x" * 1234)

    result = CliRunner().invoke(main, ["status", "--json"])

    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    storage = report["storage"]
    # What the command's stores kept of the database is gone with them; were one of their
    # connections still open when it measured, closing it now would change the files.
    gc.collect()
    db = env.data_dir / "arena.db"
    on_disk = sum(
        p.stat().st_size for p in (db, Path(f"{db}-wal"), Path(f"{db}-shm")) if p.exists()
    )
    assert storage["database"] == {"dialect": "sqlite", "bytes": on_disk}
    assert on_disk > 0
    assert storage["data_bytes"] >= on_disk
    assert storage["workspaces_bytes"] == 1234
    assert storage["messages"] == 2
    assert storage["memories"] == {"total": 3, "active": 2, "superseded": 0, "archived": 1}
    beats = {a["id"]: a["heartbeat"] for a in report["agents"]}
    ping, pong, helper = beats["ping"], beats["pong"], beats["helper"]
    assert ping["last_ok"]["at"] == T0.isoformat()
    assert ping["last_ok"]["version"] == 1
    assert ping["memory_md_version"] == 1
    assert ping["last_failed"]["status"] == "error"
    assert ping["last_failed"]["reason"] == "the model is unavailable"
    assert pong["last_ok"]["status"] == "skipped"
    assert pong["last_failed"] is None
    assert helper == {
        "last_ok": None,
        "last_failed": None,
        "memory_md_version": None,
        "memory_md_at": None,
        "last_hand_edit": None,
    }

    text = CliRunner().invoke(main, ["status"])
    assert text.exit_code == 0, text.output
    assert "storage: database" in text.output
    assert "2 messages, 3 memories (1 superseded or archived), workspaces 1.2 KB" in text.output
    assert "MEMORY.md version 1; failed since:" in text.output


def _hand_edit(tmp_path: Path, text: str, base_version: int) -> int:
    """`arena memory-md set pong` with ``text``: its exit code."""
    source = tmp_path / "MEMORY.md"
    source.write_text(text, encoding="utf-8")
    args = ["memory-md", "set", "pong", str(source), "--base-version", str(base_version)]
    return CliRunner().invoke(main, args).exit_code


def _pong_line(output: str) -> str:
    return next(line for line in output.splitlines() if line.strip().startswith("pong:"))


def test_a_refused_hand_edit_is_reported_as_one_not_as_a_failed_heartbeat(env, tmp_path):
    """After its last good heartbeat, pong's MEMORY.md is edited by hand, then edited again
    with a key in it (refused by the gate): `arena status` says "hand edit saved", then "hand
    edit refused" with the reason, in text and JSON; its heartbeat has not failed."""
    seed(env)
    assert _hand_edit(tmp_path, "- [decision] we use JWT\n", base_version=0) == 0
    saved = json.loads(CliRunner().invoke(main, ["status", "--json"]).output)
    beat = next(a["heartbeat"] for a in saved["agents"] if a["id"] == "pong")
    assert beat["last_ok"]["trigger"] == "heartbeat"  # a hand edit is no heartbeat
    assert beat["last_hand_edit"]["status"] == "written"
    assert "; hand edit saved " in _pong_line(CliRunner().invoke(main, ["status"]).output)

    key = "sk-ant-api03-" + "a1B2c3D4" * 8
    assert _hand_edit(tmp_path, f"- [fact] the key is {key}\n", base_version=1) == 1
    result = CliRunner().invoke(main, ["status", "--json"])
    assert result.exit_code == 0, result.output
    beat = next(a["heartbeat"] for a in json.loads(result.output)["agents"] if a["id"] == "pong")
    assert beat["last_failed"] is None
    assert beat["last_ok"]["status"] == "skipped"
    refused = beat["last_hand_edit"]
    assert (refused["status"], refused["trigger"]) == ("rejected", "hand edit")
    assert refused["reason"].startswith("secret: looks like a credential")

    line = _pong_line(CliRunner().invoke(main, ["status"]).output)
    assert "; hand edit refused " in line
    assert ": secret: looks like a credential" in line
    assert "failed" not in line
    assert key not in line


def _queue_old_job(connection: redis.Redis, settings: Settings, age: timedelta) -> None:
    """A background job that has waited in the queue for ``age``."""
    job = queue(connection).fetch_job(
        enqueue_prune(connection, date(2026, 5, 1), "test", settings=settings).job_id
    )
    assert job is not None
    job.enqueued_at = datetime.now(UTC) - age
    job.save()


def test_queued_jobs_without_a_live_worker_are_stuck(env, connection, monkeypatch):
    """Jobs waiting longer than the threshold with no worker heartbeat make `arena status`
    exit 1; a worker with a fresh heartbeat, or a short wait, does not."""
    monkeypatch.setenv("ARENA_STUCK_AFTER_S", "60")
    _queue_old_job(connection, env, timedelta(minutes=5))

    result = CliRunner().invoke(main, ["status", "--json"])

    assert result.exit_code == 1, result.output
    report = json.loads(result.output)
    assert report["jobs"]["queued"] == 1
    assert report["jobs"]["oldest_queued_s"] >= 300
    assert report["stuck"] == [
        "1 background jobs wait (the oldest for "
        f"{int(report['jobs']['oldest_queued_s'])}s) and no worker has a heartbeat: "
        "no worker is running"
    ]

    worker = Worker([queue(connection)], connection=connection, serializer=JSONSerializer)
    worker.register_birth()
    try:
        alive = CliRunner().invoke(main, ["status", "--json"])
        assert alive.exit_code == 0, alive.output
        assert json.loads(alive.output)["workers"][0]["heartbeat_age_s"] < 60
    finally:
        worker.register_death()


async def test_a_worker_silent_past_the_threshold_is_not_live(env, connection):
    """Measured an hour later, the same worker's heartbeat is too old: the jobs are stuck."""
    _queue_old_job(connection, env, timedelta(seconds=1))
    worker = Worker([queue(connection)], connection=connection, serializer=JSONSerializer)
    worker.register_birth()
    try:
        now = await status(env)
        later = await status(env, now=datetime.now(UTC) + timedelta(hours=1))
    finally:
        worker.register_death()
    assert now.stuck == ()
    assert len(later.stuck) == 1
    assert "the last one 3" in later.stuck[0]  # about 3600 s ago


def test_stream_checks_are_kept():
    """A message in hand too long, or waiting unread, is still reported with no jobs at all."""
    streams = Streams(
        pending=1,
        oldest_pending_idle_ms=90_000,
        lag=2,
        consumers=(ConsumerInfo(name="d1", pending=1, idle_ms=90_000),),
    )
    assert stuck(streams, 60, jobs=Jobs(queued=0, oldest_queued_s=None)) == [
        "a message has been in hand for 90s",
        "2 messages wait and no daemon has read the inbox for 90s",
    ]
    assert stuck(streams, 120) == []
