"""Retention: old history and archived memories go only when asked, and nothing else goes."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import pytest
import redis
from click.testing import CliRunner
from rq import SimpleWorker
from rq.serializers import JSONSerializer
from sqlalchemy import text
from sqlalchemy.engine import Engine

from orchestrator.background.queue import enqueue_prune, fetch_job, prune_job_id, queue
from orchestrator.background.retention import prune
from orchestrator.background.schedule import PRUNE, build_scheduler, next_fire_times
from orchestrator.cli.main import main
from orchestrator.core.models import ChatMessage, MessageKind
from orchestrator.memory.conversation.store import HistoryStore
from orchestrator.memory.db import make_engine
from orchestrator.memory.session.store import NewMemory, SessionMemory
from orchestrator.memory.versions.store import VersionStore
from orchestrator.settings import Settings, load_settings
from tests.arena_helpers import REPO, write_team
from tests.databases import on_each_database
from tests.history_seed import write_history

NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
OLD = NOW - timedelta(days=40)
RECENT = NOW - timedelta(days=10)


def limits(tmp_path: Path, **values: object) -> Settings:
    return load_settings(data_dir=tmp_path / "data", workspaces_dir=tmp_path / "ws", **values)


def say(store: HistoryStore, group: str, n: int, at: datetime) -> int:
    """Store message ``n`` of ``group``, said at ``at``; return its seq."""
    message = ChatMessage(
        id=f"{group}-{n}",
        group=group,
        sender="alex",
        kind=MessageKind.HUMAN,
        text=f"message {n}",
        created_at=at,
    )
    assert write_history(store, message)
    stored = store.get(message.id)
    assert stored is not None
    return stored.seq


def summarised(engine: Engine, group: str, upto_seq: int) -> None:
    """Record a generated summary of ``group`` covering messages up to ``upto_seq``."""
    VersionStore(engine).add(
        "summary",
        group,
        f"goal: up to {upto_seq}",
        trigger="messages",
        created_at=NOW - timedelta(days=1),
        tokens=5,
        source={"from_seq": 1, "upto_seq": upto_seq, "messages": upto_seq},
    )


def ids(store: HistoryStore, group: str) -> list[str]:
    return [m.message.id for m in store.recent(group, 1000)]


@on_each_database
def test_history_goes_only_when_old_and_summarised(engine, tmp_path):
    """Messages older than the limit go once the summary covers them; newer ones, ones the
    summary has not reached and groups without a summary stay, and are counted."""
    store = HistoryStore(engine)
    seqs = [say(store, "alpha", n, OLD + timedelta(minutes=n)) for n in range(3)]
    say(store, "alpha", 3, RECENT)
    say(store, "beta", 0, OLD)
    summarised(engine, "alpha", seqs[1])

    report = prune(engine, limits(tmp_path, history_retention_days=30), NOW)

    assert ids(store, "alpha") == ["alpha-2", "alpha-3"]
    assert ids(store, "beta") == ["beta-0"]
    assert report.messages == {"alpha": 2}
    assert report.kept_unsummarised == {"alpha": 1, "beta": 1}
    assert report.history_before == NOW - timedelta(days=30)
    assert [v.version for v in VersionStore(engine).history("summary", "alpha")] == [1]


@on_each_database
def test_nothing_goes_when_retention_is_off(engine, tmp_path):
    """With both limits at 0 (the default), even years-old, summarised data stays."""
    store = HistoryStore(engine)
    seq = say(store, "alpha", 0, NOW - timedelta(days=3000))
    summarised(engine, "alpha", seq)
    memory = SessionMemory(engine)
    entry = memory.write(remember("we use MySQL", at=NOW - timedelta(days=3000))).record
    memory.forget(entry.id, now=NOW - timedelta(days=3000))

    report = prune(engine, limits(tmp_path), NOW)

    assert report.as_dict()["messages_total"] == 0
    assert report.memories == 0
    assert report.history_before is None
    assert report.archive_before is None
    assert ids(store, "alpha") == ["alpha-0"]
    assert memory.get(entry.id) is not None


class WordEmbedder:
    """One dimension per known word, so entries get stored vectors."""

    WORDS = ("mysql", "postgres", "jwt", "sessions", "redis")

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return [[float(w in t.lower()) for w in self.WORDS] for t in texts]


def remember(content: str, *, at: datetime, key: str | None = None) -> NewMemory:
    return NewMemory(
        scope="session",
        scope_id="alpha",
        type="decision",
        content=content,
        now=at,
        key=key,
        agent="ping",
        group_id="alpha",
    )


@on_each_database
def test_archived_memories_go_after_the_limit_with_their_vectors(engine, tmp_path):
    """Superseded and forgotten entries go once archived longer than the limit, with their
    vectors and full-text rows; active entries of any age and recent archives stay."""
    memory = SessionMemory(engine, embedder=WordEmbedder())
    old_db = memory.write(remember("we use MySQL", at=OLD, key="db")).record
    new_db = memory.write(remember("we use Postgres", at=OLD, key="db")).record
    forgotten = memory.write(remember("auth with JWT", at=OLD)).record
    memory.forget(forgotten.id, now=OLD)
    lately = memory.write(remember("cache in Redis", at=OLD)).record
    memory.forget(lately.id, now=RECENT)
    settings = limits(tmp_path, archive_retention_days=30)

    dry = prune(engine, settings, NOW, dry_run=True)
    assert dry.memories == 2
    assert memory.get(old_db.id) is not None

    report = prune(engine, settings, NOW)

    assert report.memories == 2
    assert memory.get(old_db.id) is None
    assert memory.get(forgotten.id) is None
    assert memory.get(new_db.id) is not None
    assert memory.restore(lately.id) is not None
    with engine.connect() as conn:
        vectors = {row[0] for row in conn.execute(text("SELECT entry_id FROM memory_vectors"))}
        if engine.dialect.name == "sqlite":  # raises if the index lost track of a row
            conn.execute(text("INSERT INTO memory_fts(memory_fts) VALUES ('integrity-check')"))
    assert vectors == {new_db.id, lately.id}
    assert [r.id for r, _ in memory.search("Postgres", scopes=[("session", "alpha")])] == [
        new_db.id
    ]


@on_each_database
def test_forgetting_again_does_not_restart_the_clock(engine, tmp_path):
    """An entry forgotten twice counts from the first time."""
    memory = SessionMemory(engine)
    entry = memory.write(remember("we use MySQL", at=OLD)).record
    memory.forget(entry.id, now=OLD)
    memory.forget(entry.id, now=RECENT)
    assert prune(engine, limits(tmp_path, archive_retention_days=30), NOW).memories == 1


# The command -------------------------------------------------------------------------------------


@pytest.fixture
def env(tmp_path, monkeypatch) -> Settings:
    """Settings in the environment, as `arena` reads them (SQLite under tmp_path)."""
    values = {
        "ARENA_DATA_DIR": str(tmp_path / "data"),
        "ARENA_AGENTS_DIR": str(write_team(tmp_path)),
        "ARENA_WORKSPACES_DIR": str(tmp_path / "ws"),
        "ARENA_PROMPTS_DIR": str(REPO / "prompts"),
        "ARENA_HISTORY_RETENTION_DAYS": "30",
        "ARENA_ARCHIVE_RETENTION_DAYS": "30",
    }
    for name, value in values.items():
        monkeypatch.setenv(name, value)
    (tmp_path / "data").mkdir()
    return load_settings()


def seed(settings: Settings, now: datetime) -> None:
    """Old summarised messages and an old forgotten memory, relative to ``now``."""
    engine = make_engine(settings.effective_database_url)
    try:
        store = HistoryStore(engine)
        old = now - timedelta(days=40)
        seqs = [say(store, "alpha", n, old + timedelta(minutes=n)) for n in range(3)]
        summarised(engine, "alpha", seqs[-1])
        say(store, "alpha", 3, now)
        memory = SessionMemory(engine)
        entry = memory.write(remember("we use MySQL", at=old)).record
        memory.forget(entry.id, now=old)
    finally:
        engine.dispose()


def counts(settings: Settings) -> tuple[int, int]:
    engine = make_engine(settings.effective_database_url)
    try:
        return HistoryStore(engine).count(), SessionMemory(engine).stats()["total"]
    finally:
        engine.dispose()


def test_prune_dry_run_changes_nothing_then_prune_deletes(env):
    """`arena prune --dry-run` reports what would go and deletes nothing; `arena prune` then
    deletes exactly that."""
    seed(env, datetime.now(UTC))
    runner = CliRunner()

    dry = runner.invoke(main, ["prune", "--dry-run", "--json"])
    assert dry.exit_code == 0, dry.output
    would = json.loads(dry.output)
    assert (would["dry_run"], would["messages"], would["memories"]) == (True, {"alpha": 3}, 1)
    assert counts(env) == (4, 1)
    text_dry = runner.invoke(main, ["prune", "--dry-run"])
    assert "would delete 3 messages" in text_dry.output
    assert counts(env) == (4, 1)

    done = runner.invoke(main, ["prune"])
    assert done.exit_code == 0, done.output
    assert "deleted 3 messages" in done.output
    assert "deleted 1 superseded or forgotten" in done.output
    assert counts(env) == (1, 0)


# The daily job and its schedule -----------------------------------------------------------------


def test_prune_job_runs_once_a_day_on_a_worker(env, embedded_redis_url, monkeypatch):
    """The daily job, run by an RQ worker, prunes and reports; the same day's job is not
    enqueued twice."""
    monkeypatch.setenv("REDIS_URL", embedded_redis_url)
    seed(env, datetime.now(UTC))
    day = date(2026, 6, 1)
    with redis.Redis.from_url(embedded_redis_url) as connection:
        assert enqueue_prune(connection, day, "daily", settings=env).enqueued
        assert not enqueue_prune(connection, day, "daily", settings=env).enqueued
        worker = SimpleWorker([queue(connection)], connection=connection, serializer=JSONSerializer)
        worker.work(burst=True, logging_level="ERROR")
        job = fetch_job(connection, prune_job_id(day))
        assert job is not None
        result = job.return_value()
        assert not enqueue_prune(connection, day, "daily", settings=env).enqueued
    assert result["messages"] == {"alpha": 3}
    assert result["memories"] == 1
    assert counts(env) == (1, 0)


@on_each_database
def test_prune_is_scheduled_daily_only_when_a_limit_is_set(tmp_path, engine):
    """With a limit, the scheduler has a daily prune at 04:15 local time; without, none."""
    fixed = datetime(2026, 3, 28, 12, 0, tzinfo=UTC)  # the night before Berlin's clocks change

    def scheduled(settings: Settings) -> set[str]:
        scheduler = build_scheduler(
            settings,
            lambda *_: None,
            lambda: fixed,
            agents=["ping"],
            history=HistoryStore(engine),
            enqueue_prune=lambda *_: None,
        )
        return {job.id for job in scheduler.get_jobs()}

    on = limits(tmp_path, history_retention_days=30, tz="Europe/Berlin")
    off = limits(tmp_path, tz="Europe/Berlin")
    assert PRUNE in scheduled(on)
    assert PRUNE not in scheduled(off)
    assert next_fire_times(on, fixed)[PRUNE] == datetime(2026, 3, 29, 2, 15, tzinfo=UTC)
    assert PRUNE not in next_fire_times(off, fixed)
