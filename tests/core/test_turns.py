"""The tool loop of one turn through the real Anthropic SDK against the fake Messages API:
tool_use → our memory tools on a real SQLite file → tool_result → the final text, up to the
step limit, with errors as is_error results and every step through the caps (real Redis)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest
from redis.asyncio import Redis

from orchestrator.caps.guard import CapGuard, CappedLLM, price_table
from orchestrator.caps.ledger import CapLedger
from orchestrator.caps.limits import CapLimits, OverCap
from orchestrator.core.context.tokens import TokenCounter
from orchestrator.core.models import LLMRequest
from orchestrator.core.tools import TOOL_NAMES, ToolCall, ToolResult, schemas
from orchestrator.core.turns import run_turn
from orchestrator.memory.conversation.index import HistoryIndex
from orchestrator.memory.conversation.store import HistoryStore
from orchestrator.memory.corrections import Corrections
from orchestrator.memory.db import make_engine
from orchestrator.memory.gate.rules import GateConfig
from orchestrator.memory.personal import PersonalLog
from orchestrator.memory.recall.recaller import Recaller
from orchestrator.memory.recall.values import RecallConfig
from orchestrator.memory.session.store import SessionMemory
from orchestrator.memory.tools import MemoryTools, ToolTurn
from orchestrator.memory.writer import MemoryWriter
from tests.arena_helpers import ARCHITECT, llm_request
from tests.fakes import text_block, tool_use

NOW = datetime(2026, 5, 4, 12, 0, tzinfo=UTC)
AGENT = ARCHITECT


def _request(text: str = "what did we decide about the database?") -> LLMRequest:
    return llm_request(text, at=NOW, tools=tuple(schemas(TOOL_NAMES)))


@pytest.fixture
def memory_tools(tmp_path):
    engine = make_engine(f"sqlite:///{tmp_path / 'arena.db'}")
    session = SessionMemory(engine)
    gate = GateConfig()
    zone = ZoneInfo("UTC")
    yield MemoryTools(
        engine=engine,
        session=session,
        recaller=Recaller(session, history=HistoryIndex(engine)),
        writer=MemoryWriter(session, PersonalLog(tmp_path / "ws", zone), gate, zone),
        corrections=Corrections(engine, gate=gate),
        history=HistoryStore(engine),
    )
    engine.dispose()


@pytest.fixture
def runner(memory_tools):
    turn = ToolTurn(
        agent="architect",
        group="demo",
        reply_id="r1",
        trigger_id="1-0",
        now=NOW,
        allowed=TOOL_NAMES,
        recall=RecallConfig(relevance_floor=0.1),
    )

    async def run(call: ToolCall) -> ToolResult:
        return memory_tools.run(call, turn)

    return run


@pytest.fixture
async def redis(redis_url: str) -> AsyncIterator[Redis]:
    client = Redis.from_url(redis_url)
    yield client
    await client.aclose()


def _tool_step(fake_llm, name, data, call_id):
    fake_llm.script(
        content=[text_block("Let me look."), tool_use(name, data, call_id)], stop_reason="tool_use"
    )


async def test_two_step_loop_stores_then_searches(model, fake_llm, runner):
    """store, search, final text: each result goes back as a tool_result; the text replies."""
    _tool_step(
        fake_llm,
        "memory_store",
        {"type": "decision", "content": "We use Postgres for the database"},
        "toolu_a",
    )
    _tool_step(fake_llm, "memory_search", {"query": "database"}, "toolu_b")
    fake_llm.script("We decided on Postgres [m:1].")
    result = await run_turn(_request(), model, runner, max_steps=4)
    assert result.visible == "We decided on Postgres [m:1]."
    assert len(result.steps) == 3
    assert [c.name for e in result.exchanges for c in e.calls] == ["memory_store", "memory_search"]
    sent = fake_llm.requests
    assert all(r["tools"][0]["input_schema"]["additionalProperties"] is False for r in sent)
    last = sent[-1]["messages"]
    assert [m["role"] for m in last] == ["user", "assistant", "user", "assistant", "user"]
    (stored,) = last[2]["content"]
    assert stored == {
        "type": "tool_result",
        "tool_use_id": "toolu_a",
        "content": "added m:1",
        "is_error": False,
    }
    (found,) = last[4]["content"]
    assert found["content"].startswith("[m:1] (decision, sourced, 2026-05-04, cites message r1)")


async def test_max_steps_then_the_model_must_answer(model, fake_llm, runner):
    """After max_steps rounds the last call forbids tools; its text is the reply."""
    for n in range(3):
        _tool_step(fake_llm, "memory_search", {"query": f"q{n}"}, f"toolu_{n}")
    result = await run_turn(_request(), model, runner, max_steps=2)
    assert len(fake_llm.requests) == 3
    assert fake_llm.requests[-1]["tool_choice"] == {"type": "none"}
    assert "tool_choice" not in fake_llm.requests[0]
    assert result.visible == "Let me look."
    assert len(result.exchanges) == 2


async def test_bad_input_goes_back_as_is_error(model, fake_llm, runner):
    """A wrong call is answered with is_error and a one-line reason; the turn carries on."""
    _tool_step(fake_llm, "memory_forget", {"id": "m:42"}, "toolu_x")
    fake_llm.script("Sorry, I could not.")
    result = await run_turn(_request(), model, runner, max_steps=4)
    assert result.visible == "Sorry, I could not."
    (block,) = fake_llm.requests[-1]["messages"][-1]["content"]
    assert block["is_error"] is True
    assert block["content"] == "reason is required"


async def test_no_tools_sends_none(model, fake_llm):
    """Without a runner (tools off) no tools are sent and one call makes the reply."""
    fake_llm.script("plain")
    result = await run_turn(_request(), model, None, max_steps=4)
    assert result.visible == "plain"
    assert "tools" not in fake_llm.requests[0]


async def test_every_step_goes_through_the_caps(model, fake_llm, runner, redis):
    """Each model call of the loop is counted; a cap passed mid-loop lets the turn finish its
    steps (they are paid for) and refuses the next turn before it reaches the model."""
    guard = CapGuard(
        ledger=CapLedger(redis, UTC),
        limits=CapLimits(group_tokens=10_000),
        price=price_table({}),
        clock=lambda: NOW,
    )
    capped = CappedLLM(model, guard, TokenCounter())
    usage = {
        "input_tokens": 100,
        "output_tokens": 10,
        "cache_read_input_tokens": 0,
        "cache_creation_input_tokens": 0,
    }
    fake_llm.script(
        content=[tool_use("memory_search", {"query": "db"}, "t1")],
        stop_reason="tool_use",
        usage=usage,
    )
    fake_llm.script("done", usage=usage)
    await run_turn(_request(), capped, runner, max_steps=4)
    (day,) = await guard.ledger.read_days(NOW, 1)
    assert day[1]["tokens:group:demo"] == 220

    tight = CapGuard(
        ledger=CapLedger(redis, UTC),
        limits=CapLimits(group_tokens=300),
        price=price_table({}),
        clock=lambda: NOW,
    )
    capped = CappedLLM(model, tight, TokenCounter())
    fake_llm.script(
        content=[tool_use("memory_search", {"query": "db"}, "t2")],
        stop_reason="tool_use",
        usage=usage,
    )
    fake_llm.script("Postgres.", usage=usage)
    result = await run_turn(_request(), capped, runner, max_steps=4)
    assert result.visible == "Postgres."
    assert len(fake_llm.requests) == 4  # the second step ran though the first passed the cap
    (day,) = await tight.ledger.read_days(NOW, 1)
    assert day[1]["tokens:group:demo"] == 440
    with pytest.raises(OverCap) as refused:
        await run_turn(_request(), capped, runner, max_steps=4)
    assert "440 of 300 tokens" in str(refused.value)
    assert len(fake_llm.requests) == 4  # the next turn never reached the model
