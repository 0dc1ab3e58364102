"""Reading a turn's layers: on the event loop when the group's last reading was cheap, in a
worker thread otherwise, with the same layers and the same record of what was recalled."""

from __future__ import annotations

import asyncio
import textwrap
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy.engine import Engine

from orchestrator.core.models import ChatMessage, MessageKind
from orchestrator.memory.db import make_engine
from orchestrator.memory.session.store import NewMemory
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
    entry = session.write(
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
    briefing = wiring.briefing()
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
