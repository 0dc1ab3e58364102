"""Memory saved on the event loop when that waits for nothing: one marker whose entry the
database takes at once is stored right there, as a worker thread would store it; a reply the
loop must not wait for (the database held by another writer, a personal log's file, several
markers) is left whole to the thread, nothing stored twice or lost."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from sqlalchemy.engine import Engine

from orchestrator.core.markers import parse_markers
from orchestrator.memory.db import open_engine
from orchestrator.memory.gate.rules import GateConfig
from orchestrator.memory.personal import PersonalLog
from orchestrator.memory.quick import driver_of
from orchestrator.memory.session import scope_log
from orchestrator.memory.session.store import NewMemory, SessionMemory
from orchestrator.memory.transactions import BUSY_TIMEOUT_MS, QuickWriter, writing
from orchestrator.memory.wal import checkpoints_of, settle
from orchestrator.memory.writer import MemoryWriter, Origin

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
DECIDED = '<!--SAVE_MEMORY:{"type": "decision", "content": "We use JWT", "confidence": 0.9}-->'
FACT = '<!--SAVE_MEMORY:{"type": "fact", "content": "The API is on port 8080"}-->'
LESSON = '<!--SAVE_TO_PERSONAL:{"content": "Ask for the load first", "type": "lesson"}-->'


def _writer(engine: Engine, tmp_path: Path) -> MemoryWriter:
    return MemoryWriter(
        SessionMemory(engine),
        PersonalLog(tmp_path / "ws", ZoneInfo("UTC")),
        GateConfig(),
        ZoneInfo("UTC"),
    )


def _origin(n: int) -> Origin:
    return Origin(agent="dev", group="g", reply_id=f"{n}-0:1:dev", trigger_id=f"{n}-0", now=NOW)


def _log(tmp_path: Path) -> str:
    path = tmp_path / "ws" / "dev" / "memory" / "2026-03-01.md"
    return path.read_text(encoding="utf-8") if path.exists() else ""


def test_one_memory_is_stored_on_the_calling_thread_as_apply_stores_it(engine, tmp_path):
    """Added, then reinforced by a later reply: the same report and rows as apply() gives; a
    decision added leaves its note for the agent's log to the caller."""
    writer = _writer(engine, tmp_path)
    first = writer.apply_now(parse_markers(DECIDED).markers, _origin(1))
    assert first is not None
    assert [(s.action, s.type) for s in first.report.saved] == [("added", "decision")]
    assert [c.draft.content for c in first.checkpoints] == ["decision: We use JWT"]
    assert _log(tmp_path) == ""  # noted by the caller, in a thread
    writer.note_checkpoints(first.checkpoints)
    assert "decision: We use JWT" in _log(tmp_path)
    again = writer.apply_now(parse_markers(DECIDED).markers, _origin(2))
    assert again is not None
    assert again.checkpoints == ()
    assert [s.action for s in again.report.saved] == ["reinforced"]
    threaded = writer.apply(parse_markers(DECIDED).markers, _origin(3))
    assert [s.action for s in threaded.saved] == ["reinforced"]
    (entry,) = writer.session.list(scope="session", scope_id="g")
    assert (entry.count, entry.extra["reinforced_by"]) == (3, ["2-0:1:dev", "3-0:1:dev"])


def test_what_the_gate_refuses_is_reported_without_a_write(engine, tmp_path):
    writer = _writer(engine, tmp_path)
    low = '<!--SAVE_MEMORY:{"type": "fact", "content": "maybe", "confidence": 0.1}-->'
    applied = writer.apply_now(parse_markers(low).markers, _origin(1))
    assert applied is not None
    assert [r.reason for r in applied.report.rejected] == ["low_confidence"]
    assert writer.session.list(scope="session", scope_id="g") == []


@pytest.mark.parametrize(
    "reply", [LESSON, DECIDED + FACT, '<!--SAVE_MEMORY:{"content": 3}-->'], ids=str.__len__
)
def test_a_log_line_several_markers_or_an_unreadable_one_go_to_the_thread(engine, tmp_path, reply):
    """Nothing stored here: apply() in a thread stores (or reports) all of it."""
    writer = _writer(engine, tmp_path)
    assert writer.apply_now(parse_markers(reply).markers, _origin(1)) is None
    assert writer.session.list(scope="session", scope_id="g") == []
    assert _log(tmp_path) == ""


def test_a_database_held_by_another_process_is_not_waited_for(engine, tmp_path):
    """Another connection (another process's) holds the database: None at once, nothing
    stored; once it lets go, the write goes through."""
    writer = _writer(engine, tmp_path)
    other = sqlite3.connect(str(engine.url.database), isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    try:
        started = time.monotonic()
        assert writer.apply_now(parse_markers(FACT).markers, _origin(1)) is None
        assert time.monotonic() - started < 1.0  # the busy timeout is ten seconds
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert writer.session.list(scope="session", scope_id="g") == []
    applied = writer.apply_now(parse_markers(FACT).markers, _origin(1))
    assert applied is not None
    assert [s.action for s in applied.report.saved] == ["added"]
    assert [e.content for e in writer.session.list(scope="session", scope_id="g")] == [
        "The API is on port 8080"
    ]


def test_a_writer_of_this_process_is_not_waited_for(engine, tmp_path):
    """A worker thread in a write transaction (:func:`writing`): None until it is done."""
    writer = _writer(engine, tmp_path)
    inside, release = threading.Event(), threading.Event()

    def hold() -> None:
        with writing(engine):
            inside.set()
            release.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert inside.wait(10)
        assert writer.apply_now(parse_markers(FACT).markers, _origin(1)) is None
    finally:
        release.set()
        holder.join()
    assert writer.apply_now(parse_markers(FACT).markers, _origin(1)) is not None


def test_a_failed_block_rolls_back_and_the_writer_is_used_again(engine):
    """What a block wrote before it raised is not kept; the next block writes."""
    quick = QuickWriter(engine)

    def fail() -> None:
        with quick.transaction() as conn:
            assert conn is not None
            conn.exec_driver_sql("CREATE TABLE scratch (n INTEGER)")
            raise RuntimeError("stop")

    with pytest.raises(RuntimeError):
        fail()
    with quick.transaction() as conn:
        assert conn is not None
        conn.exec_driver_sql("CREATE TABLE scratch (n INTEGER)")
        conn.exec_driver_sql("INSERT INTO scratch VALUES (1)")
    with engine.connect() as read:
        assert read.exec_driver_sql("SELECT n FROM scratch").all() == [(1,)]


@pytest.mark.parametrize("engine", ["postgres"], indirect=True)
def test_other_databases_are_left_to_the_thread(engine, tmp_path):
    """Only SQLite's writes are made here (elsewhere a write waits on the network): apply()
    stores it, in a thread."""
    writer = _writer(engine, tmp_path)
    with QuickWriter(engine).transaction() as conn:
        assert conn is None
    assert writer.apply_now(parse_markers(FACT).markers, _origin(1)) is None
    assert [s.action for s in writer.apply(parse_markers(FACT).markers, _origin(1)).saved] == [
        "added"
    ]


def test_its_connection_is_its_own_and_the_pool_keeps_its_settings(engine):
    """The writer's connection waits for no lock and leaves checkpoints aside for good; it is
    not the pool's: after more transactions than the pool holds connections none is lent out,
    and the pool's connections still wait for locks and checkpoint."""
    quick = QuickWriter(engine)
    for _ in range(40):
        with quick.transaction() as conn:
            assert conn is not None
            assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == 0
            assert conn.exec_driver_sql("PRAGMA wal_autocheckpoint").scalar() == 0
    assert engine.pool.checkedout() == 0
    with engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == BUSY_TIMEOUT_MS
        assert conn.exec_driver_sql("PRAGMA wal_autocheckpoint").scalar() == 1000


def test_the_log_of_writes_made_on_the_loop_is_copied_back_in_a_thread(engine: Engine):
    """Writes on the loop leave checkpoints aside; a thread copies the write-ahead log back
    after them, at most every so often, so it does not grow for as long as the daemon runs.
    Without it (checkpoints never due) the same writes grow the log past what they wrote."""
    wal = Path(f"{engine.url.database}-wal")
    quick = QuickWriter(engine)
    with writing(engine) as conn:
        driver_of(conn).execute("CREATE TABLE scratch (body BLOB)")
    checkpoints = checkpoints_of(engine)
    page = b"x" * 4000

    def write(transactions: int) -> None:
        for _ in range(transactions):
            with quick.transaction() as conn:
                assert conn is not None
                driver_of(conn).execute("INSERT INTO scratch VALUES (?)", (page,))
            checkpoints.wait()

    checkpoints.every_s = 3600.0  # never due
    write(500)
    assert wal.stat().st_size > 500 * 4000
    before = checkpoints.done
    checkpoints.every_s = 0.0  # due after every commit (when none runs)
    write(10)  # the first one's checkpoint copies the whole log back
    assert checkpoints.done > before
    size = wal.stat().st_size
    write(300)  # the log is written from its start again: it does not grow
    assert wal.stat().st_size <= size
    assert checkpoints.done >= before + 300


def test_a_checkpoint_under_way_is_waited_for_before_the_engine_is_let_go(engine: Engine):
    """``settle`` returns once a checkpoint running in its thread is done: nothing writes the
    database's files after their owner is done with them (``arena status`` measures them
    then). An engine without checkpoints is settled at once."""
    checkpoints = checkpoints_of(engine)
    started, release = threading.Event(), threading.Event()
    checkpoint = checkpoints._checkpoint

    def slow() -> None:
        started.set()
        release.wait(10)
        checkpoint()

    checkpoints._checkpoint = slow  # type: ignore[method-assign]
    checkpoints.every_s = 0.0
    checkpoints.after_commit()
    assert started.wait(10)
    threading.Timer(0.2, release.set).start()
    settle(engine)
    assert checkpoints.done == 1
    settle(engine)  # nothing under way: at once


def test_a_memory_saved_on_the_loop_is_counted_once_its_commit_is_done(engine: Engine):
    """A memory saved on the loop's connection counts as this process's write to memory (recall
    reads the change log then); a later transaction there that changes no memory (a use mark)
    is not counted again."""
    session = SessionMemory(engine)
    before = scope_log.written()
    outcome = session.write_now(
        NewMemory(
            scope="session",
            scope_id="g",
            type="fact",
            content="The release train leaves on Thursdays",
            agent="ana",
            group_id="g",
            now=NOW,
        )
    )
    assert outcome is not None
    counted = scope_log.written()
    assert counted != before
    asyncio.run(session.mark_used_soon([outcome.record.id], NOW))
    assert session.get(outcome.record.id).last_used_at == NOW
    assert scope_log.written() == counted


def test_a_database_opened_for_a_block_is_left_closed_while_its_stores_live_on(tmp_path: Path):
    """``open_engine`` closes, as its block ends, the connections its stores keep outside the
    pool (a reader's, the loop's writer's), not when they are collected: the last connection
    closed, SQLite copies the write-ahead log back and removes it, and nothing holds the file."""
    url = f"sqlite:///{tmp_path / 'arena.db'}"
    with open_engine(url) as engine:
        session = SessionMemory(engine)
        written = session.write_now(
            NewMemory(scope="session", scope_id="g", type="fact", content="Port 8080", now=NOW)
        )
        assert written is not None
        assert [m.content for m, _ in session.search("port", scopes=[("session", "g")])] == [
            "Port 8080"
        ]
    assert session is not None  # still alive, its connections closed all the same
    assert not (tmp_path / "arena.db-wal").exists()
    check = sqlite3.connect(tmp_path / "arena.db", timeout=0)
    try:
        check.execute("BEGIN EXCLUSIVE")  # nobody else holds it
        check.rollback()
    finally:
        check.close()
    with open_engine(url) as engine:  # the stores made afresh read what was written
        found = SessionMemory(engine).search("port", scopes=[("session", "g")])
        assert [m.content for m, _ in found] == ["Port 8080"]
