"""Our own CPU per memory tool step: a turn whose model calls ``memory_search`` once, then
answers, against the same turn without tools.

    python tests/bench/tool_steps.py [--entries N] [--turns T]

The model is a stand-in answering at once (its cost is not ours); the tools run for real on
an SQLite file holding N memories of one group. Per turn, the process's CPU time is taken
with and without the tool step; the difference is what a step costs us (the search, the
tool_result built and the second request), printed as median and p95 in ms. The issue's
target: at most 3 ms per step.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from zoneinfo import ZoneInfo

from orchestrator.core.models import AgentSpec, ChatMessage, Completion, LLMRequest, MessageKind
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
from orchestrator.memory.session.records import NewMemory
from orchestrator.memory.session.store import SessionMemory
from orchestrator.memory.tools import MemoryTools, ToolTurn
from orchestrator.memory.writer import MemoryWriter

NOW = datetime(2026, 5, 4, 12, 0, tzinfo=UTC)
AGENT = AgentSpec(id="architect", name="Architect", role="architect", model="m")
TOPICS = ("database", "cache", "queue", "auth", "deploy", "logging", "metrics", "search")


class _Model:
    """Answers at once: a memory_search first when tools are offered, then text."""

    name = "bench"
    offline = False

    async def complete(self, request: LLMRequest) -> Completion:
        if request.tools and not request.exchanges:
            call = ToolCall(id="toolu_b", name="memory_search", input={"query": "database"})
            return Completion(text="", model="m", provider="bench", tool_calls=(call,))
        return Completion(text="We use Postgres.", model="m", provider="bench")

    async def aclose(self) -> None:
        return None


def _request(tools: bool) -> LLMRequest:
    trigger = ChatMessage(
        id="1-0", group="demo", sender="alex", kind=MessageKind.HUMAN, text="db?", created_at=NOW
    )
    return LLMRequest(
        agent=AGENT,
        trigger=trigger,
        model="m",
        system="You are the architect. " * 200,
        messages=({"role": "user", "content": "what did we decide about the database?"},),
        max_tokens=100,
        temperature=0.5,
        tools=tuple(schemas(TOOL_NAMES)) if tools else (),
    )


def _tools(folder: Path, entries: int) -> MemoryTools:
    engine = make_engine(f"sqlite:///{folder / 'arena.db'}")
    session = SessionMemory(engine)
    session.write_many(
        [
            NewMemory(
                scope="session",
                scope_id="demo",
                type="decision",
                content=f"decision {n}: the {TOPICS[n % len(TOPICS)]} uses option {n}",
                agent="architect",
                group_id="demo",
                now=NOW,
            )
            for n in range(entries)
        ]
    )
    zone = ZoneInfo("UTC")
    gate = GateConfig()
    return MemoryTools(
        engine=engine,
        session=session,
        recaller=Recaller(session, history=HistoryIndex(engine)),
        writer=MemoryWriter(session, PersonalLog(folder / "ws", zone), gate, zone),
        corrections=Corrections(engine, gate=gate),
        history=HistoryStore(engine),
    )


async def _measure(tools: MemoryTools, turns: int) -> list[float]:
    turn = ToolTurn(
        agent="architect",
        group="demo",
        reply_id="r",
        trigger_id="1-0",
        now=NOW,
        allowed=TOOL_NAMES,
        recall=RecallConfig(),
    )

    async def runner(call: ToolCall) -> ToolResult:
        return tools.run(call, turn)

    model, samples = _Model(), []
    for _ in range(turns):
        start = time.process_time()
        await run_turn(_request(False), model)
        plain = time.process_time() - start
        start = time.process_time()
        result = await run_turn(_request(True), model, runner, 4)
        looped = time.process_time() - start
        assert len(result.steps) == 2
        samples.append((looped - plain) * 1000)
    return sorted(samples)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=1000)
    parser.add_argument("--turns", type=int, default=300)
    parser.add_argument("--json", type=Path, default=None, help="write the figures here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        tools = _tools(Path(folder), args.entries)
        samples = asyncio.run(_measure(tools, args.turns))
        tools.engine.dispose()
    median, p95 = statistics.median(samples), samples[int(len(samples) * 0.95)]
    print(f"tool step CPU ({args.entries} memories, {args.turns} turns)")
    print("  measure            ms")
    print(f"  median per step    {median:.2f}")
    print(f"  p95 per step       {p95:.2f}   (target <= 3)")
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        figures = {"entries": args.entries, "turns": args.turns, "median_ms": median, "p95_ms": p95}
        args.json.write_text(json.dumps(figures, indent=2))
    print(f"tool_step_median_ms={median:.2f} tool_step_p95_ms={p95:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
