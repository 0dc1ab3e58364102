"""The console's room lists the memory tools a reply called, one line each, from the meta
the reply stored (which reads back as it was written)."""

from __future__ import annotations

from datetime import UTC, datetime

from orchestrator.core.models import ChatMessage, MessageKind, Usage
from orchestrator.memory.conversation.meta import ReplyMeta, ToolCallMeta, ToolsMeta, TurnMeta
from orchestrator.memory.conversation.rows import StoredMessage
from orchestrator.web.views import from_stored

NOW = datetime(2026, 5, 4, 12, 0, tzinfo=UTC)
TOOLS = ToolsMeta(
    calls=(
        ToolCallMeta(
            name="memory_search",
            input_chars=22,
            result_chars=120,
            is_error=False,
            line='memory_search("database") → 2 hits',
        ),
        ToolCallMeta(
            name="memory_forget",
            input_chars=12,
            result_chars=18,
            is_error=True,
            line='memory_forget("m:9") → error: reason is required',
        ),
    ),
    steps=(Usage(input_tokens=100, output_tokens=5), Usage(input_tokens=140, output_tokens=30)),
)


def test_tools_meta_reads_back_as_written():
    """ReplyMeta keeps the tool calls and every step's tokens through its stored JSON."""
    meta = ReplyMeta(
        agent="architect",
        trigger="1-0",
        turn=TurnMeta(
            provider="anthropic",
            model="m",
            latency_ms=1.0,
            stop_reason="end_turn",
            usage=Usage(input_tokens=240, output_tokens=35),
        ),
        tools=TOOLS,
    )
    assert ReplyMeta.from_json(meta.as_json()) == meta
    assert ReplyMeta.from_json({"agent": "a"}).tools is None


def test_room_message_lists_the_tool_calls():
    """A stored reply's Msg carries one line per tool call, errors marked."""
    reply = ChatMessage(
        id="1-0:1:architect",
        group="demo",
        sender="architect",
        kind=MessageKind.AGENT,
        text="We chose Postgres.",
        created_at=NOW,
        in_reply_to="1-0",
        hop=1,
    )
    turn = TurnMeta(
        provider="anthropic",
        model="m",
        latency_ms=1.0,
        stop_reason="end_turn",
        usage=Usage(input_tokens=240, output_tokens=35),
    )
    meta = ReplyMeta(agent="architect", trigger="1-0", turn=turn, tools=TOOLS).as_json()
    stored = StoredMessage(seq=2, message=reply, status="done", meta=meta)
    msg = from_stored(stored, trigger=None, agents=(), hop_limit=3).as_dict()
    assert [t["line"] for t in msg["tools"]] == [c.line for c in TOOLS.calls]
    assert [t["is_error"] for t in msg["tools"]] == [False, True]
    assert msg["usage"]["calls"] == 2
