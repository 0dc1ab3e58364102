"""Reading a turn's layers: on the event loop when the group's last reading was cheap, in a
worker thread otherwise, with the same layers and the same record of what was recalled; the
files a turn reads (the group's summary, the agent's MEMORY.md and its daily logs) as they are
on disk at each turn, whatever the paths and days kept from the turns before."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import textwrap
import threading
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy.engine import Engine

from orchestrator.core.models import ChatMessage, MessageKind
from orchestrator.files import write_atomic
from orchestrator.memory.conversation.store import StoredMessage
from orchestrator.memory.db import make_engine
from orchestrator.memory.personal import PersonalLog
from orchestrator.memory.session.records import MemoryRecord
from orchestrator.memory.session.store import NewMemory, SessionMemory
from orchestrator.memory.summaries import summary_path
from orchestrator.runtime.briefing import INLINE_CPU_S, Briefing, Gathered
from orchestrator.runtime.wiring import Wiring
from orchestrator.settings import load_settings

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    made = make_engine(f"sqlite:///{tmp_path / 'arena.db'}")
    yield made
    made.dispose()


@pytest.fixture
def wiring(tmp_path: Path, engine: Engine) -> Wiring:
    agents = tmp_path / "agents"
    agents.mkdir()
    (agents / "plain.yaml").write_text(
        textwrap.dedent("""\
            id: plain
            name: Plain
            role: helper
            model: claude-test
            default: true
            """),
        encoding="utf-8",
    )
    settings = load_settings(
        agents_dir=agents, workspaces_dir=tmp_path / "ws", data_dir=tmp_path / "data"
    )
    return Wiring(settings, engine)


def _ask(group: str, n: int, at: datetime) -> ChatMessage:
    return ChatMessage(
        id=f"{n}-0",
        group=group,
        sender="alex",
        kind=MessageKind.HUMAN,
        text="when do the database backups run?",
        created_at=at,
    )


def _backups(session: SessionMemory) -> MemoryRecord:
    """A fact of group alpha that the question of :func:`_ask` recalls."""
    return session.write(
        NewMemory(
            scope="session",
            scope_id="alpha",
            type="fact",
            content="The database backups run nightly at two",
            agent="plain",
            group_id="alpha",
            now=T0,
        )
    ).record


class _Where:
    """Records on which thread each reading ran, and what CPU time each took (the briefing's
    CPU clock is this object's)."""

    def __init__(self, briefing: Briefing) -> None:
        self.threads: list[bool] = []  # True: on the event loop's thread
        self.cost = 0.0  # what the next reading takes
        self.now = 0.0
        self._gather = briefing.gather
        briefing.gather = self  # type: ignore[method-assign]
        briefing.cpu_clock = lambda: self.now

    def __call__(self, *args: object, **kwargs: object) -> Gathered:
        self.threads.append(threading.current_thread() is threading.main_thread())
        self.now += self.cost
        return self._gather(*args, **kwargs)  # type: ignore[arg-type]


def test_a_cheap_group_is_read_on_the_loop_and_recall_is_recorded_either_way(wiring: Wiring):
    """A group's first reading goes to a thread (there it took 10 ms of CPU: the next goes
    there too); once one proved cheap the next ones run on the event loop; a slow one sends
    the next back to a thread. What was recalled is recorded as used on both paths, at most
    once a minute."""
    session = wiring.session
    entry = _backups(session)
    briefing = wiring.briefing()
    briefing.on_loop = False  # as on PostgreSQL, whose readings wait on the network
    where = _Where(briefing)
    agent = wiring.team.get("plain")

    async def turns() -> list[Gathered]:
        found = []
        cheap = INLINE_CPU_S / 2
        costs = [(0, 0.01), (0.5, cheap), (2, cheap), (2.1, INLINE_CPU_S), (4, 0.0)]
        for n, (minutes, cost) in enumerate(costs):
            where.cost = cost
            at = T0 + timedelta(minutes=minutes)
            found.append(await briefing.for_turn(agent, _ask("alpha", n, at), at))
            if n == 1:  # within a minute of the last mark: not written again
                assert session.get(entry.id).last_used_at == T0
            if n == 2:
                assert session.get(entry.id).last_used_at == at  # marked on the loop's path
            if n == 3:  # within a minute of the last mark: not written again
                assert session.get(entry.id).last_used_at == T0 + timedelta(minutes=2)
        return found

    found = asyncio.run(turns())
    assert where.threads == [False, False, True, True, False]
    assert all([s.id for s in g.recall.snippets] == [entry.id] for g in found if g.recall)
    assert session.get(entry.id).last_used_at == T0 + timedelta(minutes=4)


def test_on_sqlite_every_reading_is_on_the_loop(wiring: Wiring) -> None:
    """SQLite's readers never wait for a writer: the first reading of a group and a slow one
    run on the event loop too (a thread would cost more than it spares)."""
    briefing = wiring.briefing()
    assert briefing.on_loop
    where = _Where(briefing)
    agent = wiring.team.get("plain")

    async def turns() -> None:
        for n, cost in enumerate((0.01, 0.05, 0.0)):
            where.cost = cost
            at = T0 + timedelta(minutes=n)
            await briefing.for_turn(agent, _ask("alpha", n, at), at)

    asyncio.run(turns())
    assert where.threads == [True, True, True]


def test_on_sqlite_recall_is_recorded_on_the_loop_unless_the_database_is_taken(
    wiring: Wiring, engine: Engine
) -> None:
    """What a turn recalled is recorded as used on the event loop when the database is free;
    when another process holds it, in a thread, which waits for it and then records it."""
    session = wiring.session
    entry = _backups(session)
    briefing = wiring.briefing()
    agent = wiring.team.get("plain")
    in_threads: list[bool] = []
    mark_used = session.mark_used

    def spied(ids: object, now: datetime) -> None:
        in_threads.append(threading.current_thread() is not threading.main_thread())
        mark_used(ids, now)  # type: ignore[arg-type]

    session.mark_used = spied  # type: ignore[method-assign]
    asyncio.run(briefing.for_turn(agent, _ask("alpha", 0, T0), T0))
    assert session.get(entry.id).last_used_at == T0
    assert in_threads == []

    later = T0 + timedelta(minutes=5)
    other = sqlite3.connect(str(engine.url.database), isolation_level=None)
    other.execute("BEGIN IMMEDIATE")

    async def held() -> None:
        turn = asyncio.create_task(briefing.for_turn(agent, _ask("alpha", 1, later), later))
        await asyncio.sleep(0.3)
        assert not turn.done()  # its record waits in a thread, not on the loop
        other.execute("ROLLBACK")
        await turn

    try:
        asyncio.run(held())
    finally:
        other.close()
    assert in_threads == [True]
    assert session.get(entry.id).last_used_at == later


def test_files_changed_on_disk_are_read_at_the_next_turn(wiring: Wiring) -> None:
    """Each turn sees the summary and MEMORY.md as they are on disk: created, replaced
    atomically, appended to in place, removed; each group its own summary."""
    briefing = wiring.briefing()
    agent = wiring.team.get("plain")
    summary = summary_path(wiring.settings.data_dir, "alpha")
    memory_md = briefing.personal.workspace("plain") / "MEMORY.md"

    def layers(group: str = "alpha") -> tuple[str, str]:
        found = briefing.gather(agent, _ask(group, 0, T0), T0).layers
        return found.summary, found.memory_md

    assert layers() == ("", "")
    write_atomic(summary, "alpha so far\n")
    write_atomic(memory_md, "- likes tea\n")
    assert layers() == ("alpha so far\n", "- likes tea\n")
    write_atomic(summary, "alpha, later\n")
    with memory_md.open("a", encoding="utf-8") as out:
        out.write("- and cake\n")
    assert layers() == ("alpha, later\n", "- likes tea\n- and cake\n")
    assert layers("beta") == ("", "- likes tea\n- and cake\n")
    write_atomic(summary_path(wiring.settings.data_dir, "beta"), "beta so far\n")
    assert layers("beta")[0] == "beta so far\n"
    os.unlink(summary)
    assert layers()[0] == ""


def test_the_logs_shown_follow_the_day_and_the_files(wiring: Wiring) -> None:
    """The logs layer shows yesterday's and today's logs of the day the turn falls on; on the
    next day, the next two; a note appended is shown at the next turn."""
    briefing = wiring.briefing()
    agent = wiring.team.get("plain")
    logs = briefing.personal
    zone = wiring.settings.zone

    def shown(at: datetime) -> str:
        return briefing.gather(agent, _ask("alpha", 0, at), at).layers.logs

    def write(day: datetime, text: str) -> None:
        path = logs.path("plain", day.astimezone(zone).date())
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, text)

    write(T0 - timedelta(days=1), "- yesterday's note\n")
    write(T0, "- today's note\n")
    assert shown(T0) == "- yesterday's note\n- today's note"
    write(T0, "- today's note\n- another\n")
    assert shown(T0) == "- yesterday's note\n- today's note\n- another"
    assert shown(T0 + timedelta(days=1)) == "- today's note\n- another"
    write(T0 + timedelta(days=1), "- tomorrow's note\n")
    assert shown(T0 + timedelta(days=1)) == "- today's note\n- another\n- tomorrow's note"
    assert shown(T0) == "- yesterday's note\n- today's note\n- another"


def test_log_paths_follow_the_folder_checked_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The path of a day's log is kept while the folder's check holds; a folder checked again
    (a workspace moved meanwhile) is read from where it now is."""
    workspaces = tmp_path / "ws"
    log = PersonalLog(workspaces, UTC)
    day = T0.date()
    log.path("plain", day).parent.mkdir(parents=True)
    log.path("plain", day).write_text("- first\n", encoding="utf-8")
    clock = [100.0]
    monkeypatch.setattr("orchestrator.memory.personal.time.monotonic", lambda: clock[0])
    assert log.read_days("plain", [day]) == ["- first\n"]
    os.rename(workspaces, tmp_path / "old")
    workspaces.mkdir()
    log.path("plain", day).parent.mkdir(parents=True)
    log.path("plain", day).write_text("- second\n", encoding="utf-8")
    assert log.read_days("plain", [day]) == ["- second\n"]  # the same path, another file
    clock[0] += PersonalLog.READ_CHECK_S
    assert log.read_days("plain", [day, day + timedelta(days=1)]) == ["- second\n", ""]
    assert log.workspace("plain") is log.workspace("plain")


class _Window:
    """A group's recent messages as the daemon's cache hands them out: the same objects turn
    after turn, in a window that slides."""

    def __init__(self) -> None:
        self.messages: list[StoredMessage] = []

    def recent(self, group: str, limit: int) -> list[StoredMessage]:
        return self.messages[-limit:]


def _stored(seq: int, text: str | None = None) -> StoredMessage:
    message = _ask("alpha", seq, T0 + timedelta(minutes=seq))
    return StoredMessage(
        seq=seq, message=replace(message, text=text or f"message {seq}"), status="done", tokens=3
    )


def test_the_history_layer_follows_the_window_of_recent_messages(wiring: Wiring) -> None:
    """Turn after turn the history layer is the group's recent messages as they are then: the
    window slid by new messages, shrunk, read again from the database (new objects, a text
    corrected), or another group's."""
    window = _Window()
    briefing = wiring.briefing(window)
    agent = wiring.team.get("plain")

    def shown(trigger_seq: int) -> list[tuple[int, str, int]]:
        trigger = window.messages[-1].message if window.messages else _ask("alpha", 0, T0)
        layers = briefing.gather(agent, trigger, T0 + timedelta(minutes=trigger_seq)).layers
        return [(int(p.message.id.split("-")[0]), p.message.text, p.tokens) for p in layers.history]

    def expected() -> list[tuple[int, str, int]]:
        return [(s.seq, s.message.text, 3) for s in window.messages[-wiring.tuning.history_limit :]]

    window.messages = [_stored(n) for n in range(1, 4)]
    assert shown(3) == expected()
    window.messages += [_stored(4), _stored(5)]  # new messages at the end
    assert shown(5) == expected()
    window.messages = [*window.messages[2:], _stored(6)]  # the oldest let go
    assert shown(6) == expected()
    window.messages = window.messages[:-1]  # fewer than before
    assert shown(6) == expected()
    window.messages[1] = _stored(window.messages[1].seq, "corrected")  # read again
    assert shown(6) == expected()
    window.messages = [_stored(s.seq) for s in window.messages]  # all of them new objects
    assert shown(6) == expected()
    window.messages = [_stored(n) for n in range(10, 12)]  # nothing in common
    assert shown(11) == expected()
    window.messages = []
    assert shown(12) == []
