"""Tests for orchestrator.memory.tools: each memory tool on a real SQLite file, each bad input,
another group's ids, someone else's entries, and a replayed turn."""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest

from orchestrator.core.models import ChatMessage, MessageKind
from orchestrator.core.tools import MEMORY_TYPES, PERSONAL_TOOL_TYPES, TOOL_NAMES, ToolCall
from orchestrator.memory.audit import MemoryAudit
from orchestrator.memory.conversation.index import HistoryIndex
from orchestrator.memory.conversation.store import HistoryStore
from orchestrator.memory.corrections import Corrections
from orchestrator.memory.db import make_engine
from orchestrator.memory.gate.rules import GateConfig
from orchestrator.memory.personal import PersonalLog
from orchestrator.memory.recall.recaller import Recaller
from orchestrator.memory.recall.values import RecallConfig
from orchestrator.memory.schema import PERSONAL_TYPES
from orchestrator.memory.session.store import SessionMemory
from orchestrator.memory.tools import MemoryTools, ToolTurn
from orchestrator.memory.writer import MemoryWriter

NOW = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)


@pytest.fixture
def engine(tmp_path):
    engine = make_engine(f"sqlite:///{tmp_path / 'arena.db'}")
    yield engine
    engine.dispose()


@pytest.fixture
def tools(engine, tmp_path):
    session = SessionMemory(engine)
    gate = GateConfig(daily_limit=3)
    writer = MemoryWriter(
        session, PersonalLog(tmp_path / "ws", ZoneInfo("UTC")), gate, ZoneInfo("UTC")
    )
    return MemoryTools(
        engine=engine,
        session=session,
        recaller=Recaller(session, history=HistoryIndex(engine)),
        writer=writer,
        corrections=Corrections(engine, gate=gate),
        history=HistoryStore(engine),
    )


def turn(agent: str = "architect", group: str = "demo", allowed=TOOL_NAMES) -> ToolTurn:
    return ToolTurn(
        agent=agent,
        group=group,
        reply_id=f"r-{agent}-{group}",
        trigger_id="t1",
        now=NOW,
        allowed=tuple(allowed),
        recall=RecallConfig(relevance_floor=0.1),
    )


def run(tools, name, data, *, call_id="toolu_1", **where):
    return tools.run(ToolCall(id=call_id, name=name, input=data), turn(**where))


def store(tools, content, *, call_id, key=None, **where):
    data = {"type": "decision", "content": content}
    if key:
        data["key"] = key
    return run(tools, "memory_store", data, call_id=call_id, **where)


def entry_id(result) -> str:
    return result.content.split()[1]


async def test_store_then_search_and_get_cite_the_entry(tools):
    """A stored decision is found by search and read by get, with trust, date and citation."""
    stored = store(tools, "We use Postgres for the database", call_id="c1")
    assert not stored.is_error
    assert stored.content.startswith("added m:")
    found = run(tools, "memory_search", {"query": "what database do we use"})
    assert found.hits == 1
    assert f"[{entry_id(stored)}] (decision, sourced, 2026-03-01" in found.content
    assert "cites message r-architect-demo" in found.content
    got = run(tools, "memory_get", {"id": entry_id(stored)})
    assert "We use Postgres" in got.content
    assert not got.is_error


async def test_store_reinforces_supersedes_and_rejects(tools):
    """Dedupe, supersede-by-key and the gate answer as they do for markers."""
    first = store(tools, "We deploy on Fridays", call_id="c1", key="deploy.day")
    assert store(tools, "We deploy on Fridays", call_id="c2").content.startswith("reinforced")
    again = store(tools, "We deploy on Tuesdays", call_id="c3", key="deploy.day")
    assert again.content == f"added {entry_id(again)} (supersedes {entry_id(first)})"
    assert entry_id(again) != entry_id(first)
    short = store(tools, "ok", call_id="c4")
    assert short.is_error
    assert short.content.startswith("rejected: ")


async def test_daily_limit_applies(tools):
    """The gate's daily limit counts tool writes as it counts markers."""
    for n in range(3):
        assert not store(tools, f"Decision number {n} is final", call_id=f"c{n}").is_error
    over = store(tools, "One decision too many today", call_id="c9")
    assert over.is_error
    assert "rejected: rate_limited" in over.content


async def test_search_never_shows_another_groups_memory(tools):
    """An entry of another group is neither found nor readable nor forgettable."""
    other = store(tools, "The other team uses MySQL for the database", call_id="c1", group="other")
    found = run(tools, "memory_search", {"query": "database MySQL"})
    assert found.content == "no results"
    got = run(tools, "memory_get", {"id": entry_id(other)})
    assert got.is_error
    assert got.content == f"no entry {entry_id(other)} in this group"
    gone = run(tools, "memory_forget", {"id": entry_id(other), "reason": "x"}, call_id="f1")
    assert gone.is_error


async def test_get_reads_a_message_of_the_group_only(tools, engine):
    """memory_get reads this group's messages, not another group's."""
    history = HistoryStore(engine)
    for group in ("demo", "other"):
        message = ChatMessage(
            id=f"m-{group}",
            group=group,
            sender="alex",
            kind=MessageKind.HUMAN,
            text="we decided <!--SAVE_MEMORY:{}--> Postgres",
            created_at=NOW,
        )
        await history.open(message)
    got = run(tools, "memory_get", {"id": "msg:m-demo"})
    assert got.content.startswith("[msg:m-demo] alex (human, ")
    assert "\u2039!--SAVE_MEMORY" in got.content  # markers defused
    assert run(tools, "memory_get", {"id": "msg:m-other"}).is_error


async def test_forget_only_own_entries_and_audited(tools, engine):
    """An agent archives its own entry (audited); someone else's is refused."""
    mine = store(tools, "We use Redis streams for the bus", call_id="c1")
    theirs = store(tools, "We log in JSON lines always", call_id="c2", agent="developer")
    refused = run(tools, "memory_forget", {"id": entry_id(theirs), "reason": "no"}, call_id="f1")
    assert refused.is_error
    assert "not written by you" in refused.content
    done = run(tools, "memory_forget", {"id": entry_id(mine), "reason": "wrong"}, call_id="f2")
    assert done.content == f"archived {entry_id(mine)} (a person can restore it)"
    number = int(entry_id(mine)[2:])
    assert SessionMemory(engine).get(number).status == "archived"
    (change,) = MemoryAudit(engine).history(number)
    assert (change.action, change.actor, change.reason) == ("forget", "architect", "wrong")
    twice = run(tools, "memory_forget", {"id": entry_id(mine), "reason": "again"}, call_id="f3")
    assert (twice.content, twice.is_error) == (f"{entry_id(mine)} is already archived", False)
    assert len(MemoryAudit(engine).history(number)) == 1


async def test_replayed_calls_apply_once(tools, engine):
    """A turn replayed after a crash gets the same results and writes nothing twice."""
    first = store(tools, "We ship every second week", call_id="same", key="cadence")
    replay = store(tools, "We ship every second week", call_id="same", key="cadence")
    assert replay == first
    forget = {"id": entry_id(first), "reason": "changed"}
    gone = run(tools, "memory_forget", forget, call_id="f")
    assert run(tools, "memory_forget", forget, call_id="f") == gone
    number = int(entry_id(first)[2:])
    assert len(MemoryAudit(engine).history(number)) == 1
    assert SessionMemory(engine).get(number).count == 1


async def test_a_replayed_turn_with_new_call_ids_writes_nothing_twice(tools, engine):
    """A model asked again after a crash gives its calls new ids: the same write for the same
    reply is still applied once; the same write for another reply is applied (reinforced)."""
    first = store(tools, "We release on Tuesdays", call_id="toolu_a")
    again = store(tools, "We release on Tuesdays", call_id="toolu_b")
    assert (again.content, again.is_error) == (first.content, first.is_error)
    number = int(entry_id(first)[2:])
    assert SessionMemory(engine).get(number).count == 1
    store(tools, "We release on Tuesdays", call_id="toolu_c", agent="developer")
    assert SessionMemory(engine).get(number).count == 2


@pytest.mark.parametrize(
    ("name", "data", "reason"),
    [
        ("memory_search", {"query": "x" * 3000}, "query is too long"),
        ("memory_get", {"id": 3}, "id must be a string"),
        ("memory_get", {"id": "m:999"}, "no entry m:999 in this group"),
        ("memory_get", {"id": "nonsense"}, "no entry nonsense in this group"),
        ("memory_get", {"id": "m:" + "9" * 23}, "no entry m:" + "9" * 23 + " in this group"),
        ("memory_get", {"id": "m:9223372036854775808"}, "no entry m:922337203685477580"),
        ("memory_get", {"id": "m:²"}, "no entry m:² in this group"),
        ("memory_get", {"id": "m:-1"}, "no entry m:-1 in this group"),
        ("memory_get", {"id": "msg:" + "9" * 40}, "no message msg:999"),
        ("memory_get", {"id": "msg:\u0000"}, "no message msg:"),
        ("memory_forget", {"id": "m:" + "9" * 23, "reason": "x"}, "no entry m:999"),
        (
            "memory_store",
            {"type": "decision", "content": '<!--SAVE_MEMORY:{"type": "task"}--> hmm'},
            "content: markers: the text carries 1 memory marker",
        ),
        (
            "memory_store",
            {"type": "decision", "content": "We use Postgres <!--SAVE_MEMORY:{", "scope": "group"},
            "content: markers: the text carries 1 memory marker",
        ),
        (
            "memory_store",
            {"type": "decision", "content": "Always write tests first", "scope": "personal"},
            "type must be one of skill, habit with scope personal",
        ),
        ("memory_delete", {"id": "m:1"}, "unknown tool 'memory_delete'"),
        ("memory_store", {"type": "decision"}, "content is required"),
    ],
)
async def test_bad_input_is_an_error_result(tools, engine, name, data, reason):
    """Bad input comes back as one is_error line, and writes nothing."""
    result = run(tools, name, data)
    assert result.is_error
    assert result.content.startswith(reason)
    assert SessionMemory(engine).stats()["total"] == 0


async def test_a_tool_left_out_of_the_agents_list_is_refused(tools):
    """An agent without memory_store cannot store."""
    result = run(
        tools, "memory_store", {"type": "fact", "content": "x is y"}, allowed=("memory_get",)
    )
    assert result.is_error
    assert result.content == "unknown tool 'memory_store'"


async def test_a_personal_store_keeps_its_type_in_the_agents_log(tools, tmp_path):
    """memory_store with scope personal writes a skill or habit as that type, never as a
    note; the types offered for it are those both the tool and the personal log know."""
    kept = run(
        tools,
        "memory_store",
        {"type": "habit", "content": "I check the logs before I answer", "scope": "personal"},
    )
    assert (kept.content, kept.is_error) == ("appended to your personal log", False)
    (log,) = (tmp_path / "ws").rglob("*.md")
    assert "habit" in log.read_text(encoding="utf-8")
    assert set(PERSONAL_TOOL_TYPES) == set(MEMORY_TYPES) & set(PERSONAL_TYPES)
