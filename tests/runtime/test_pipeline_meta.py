"""What is recorded about a reply: typed in the pipeline, stored as the same JSON as ever."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import text

from orchestrator.core.models import ChatMessage, MessageKind
from orchestrator.memory.conversation.meta import ReplyMeta
from orchestrator.runtime.tally import Tally
from tests.arena_helpers import agent_of
from tests.runtime.test_pipeline import _human, _pipeline

ANSWERED = {
    "agent": "ping",
    "trigger": "1-0",
    "recall": {"snippets": [{"id": "m1", "score": 0.5, "trust": "high"}], "dropped": []},
    "context": {"tokens": {"total": 10}},
    "provider": "anthropic",
    "model": "claude",
    "latency_ms": 12.5,
    "stop_reason": "end_turn",
    "usage": {
        "input_tokens": 7,
        "output_tokens": 3,
        "cache_read_tokens": 1,
        "cache_creation_tokens": 0,
    },
    "attempts": {"count": 2, "failed": ["529 overloaded_error"]},
    "markers": [{"kind": "memory", "payload": {"type": "Decision", "content": "Use JWT"}}],
    "invalid_markers": [
        {"kind": "personal", "reason": "not JSON", "length": 3, "sha256": "0123456789ab"}
    ],
    "memory": {
        "saved": [{"kind": "memory", "action": "added", "id": 4, "type": "decision"}],
        "rejected": [
            {
                "kind": "memory",
                "reason": "low_confidence",
                "detail": "confidence 0.1 is below 0.7",
                "length": 76,
                "sha256": "c2eab61d8dd8",
            }
        ],
    },
    "truncated": {"saved": 2},
}
FAILED = {
    "agent": "pong",
    "trigger": "1-0",
    "context": {"tokens": {"total": 10}},
    "error": {"kind": "llm", "problem": "overloaded", "status": 529, "retryable": True},
}
BROKEN = {"agent": "pong", "trigger": "1-0", "error": {"kind": "internal", "problem": "E: x"}}
NOTICE = {"notice": "hop_limit", "agent": "pong", "trigger": "1-0:1:ping"}
# Markers as older versions or a hand-made import stored them: keys missing (no length, hash,
# type or kind), keys no version wrote, and entries that are not objects.
OLD_MARKERS: dict[str, Any] = {
    "markers": [
        {"kind": "memory", "payload": {"type": "Decision", "content": "we play chess"}},
        "not an entry",
        {"kind": "memory", "payload": {"content": "alex likes games"}, "seen": 2},
        {"payload": "not an object"},
        {"kind": "personal"},
    ],
    "invalid_markers": [{"kind": "memory", "reason": "not JSON"}, {"reason": "x", "note": 1}, 3],
    "memory": {
        "saved": [
            {"kind": "memory", "action": "added", "id": 1, "type": "decision"},
            {"kind": "memory", "action": "reinforced", "id": 2, "type": "fact", "by": "ping"},
            None,
            {"kind": "personal", "action": "appended", "file": "2026-01-05.md"},
            {},
        ],
        "rejected": [
            {"kind": "memory", "reason": "secret", "detail": "an API key"},
            {"reason": "duplicate"},
            {"kind": "personal", "reason": "schema", "detail": "", "length": 5, "seen": True},
            "junk",
        ],
    },
    "truncated": {"saved": 2, "rejected": 1},
}


def test_stored_meta_reads_back_and_writes_the_same_json():
    """Each kind of reply meta reads into ReplyMeta and back to the same keys, same order."""
    for stored in (ANSWERED, FAILED, BROKEN, NOTICE):
        again = ReplyMeta.from_json(stored).as_json()
        assert json.dumps(again) == json.dumps(stored)


def test_what_the_tally_and_the_summary_read():
    """Tokens, saved memory types, failures and the markers' notes, typed."""
    answered = ReplyMeta.from_json(ANSWERED)
    assert (answered.usage.input_tokens, answered.usage.output_tokens) == (7, 3)
    assert answered.saved_types() == ["decision"]
    assert answered.failure() is None
    assert answered.notes() == (("decision", "Use JWT"),)
    assert answered.markers is not None
    assert answered.markers.amounts() == {
        "markers_invalid": 1,
        "memory_saved": 3,
        "memory_rejected": 1,
    }
    assert ReplyMeta.from_json(FAILED).failure() == "pong: overloaded"
    imported = ReplyMeta.from_json({"imported": True, "line": 3})
    assert (imported.usage.input_tokens, imported.notes(), imported.failure()) == (0, (), None)


def test_old_marker_entries_count_as_they_always_did():
    """A reply stored with old or hand-made marker entries gives the same memory counts, saved
    types and notes: what is missing reads as empty, what is not an entry is skipped."""
    meta = ReplyMeta.from_json({"agent": "ping", "trigger": "1-0", **OLD_MARKERS})
    reply = ChatMessage(
        id="1-0:1:ping",
        group="g",
        sender="ping",
        kind=MessageKind.AGENT,
        text="noted",
        created_at=datetime(2026, 1, 5, 9, 0, tzinfo=UTC),
        in_reply_to="1-0",
        hop=1,
    )
    tally = Tally()
    tally.add(reply, meta)
    (sample,) = tally.samples
    assert (sample.saved, sample.reinforced, sample.rejected) == (5, 1, 4)
    assert tally.memory_types == ["decision", "fact", "", ""]
    assert meta.notes() == (("decision", "we play chess"), ("", "alex likes games"))
    assert meta.markers is not None
    assert meta.markers.amounts() == {
        "markers_invalid": 2,
        "memory_saved": 6,
        "memory_rejected": 4,
    }


async def test_the_pipeline_stores_reply_meta_keys_in_their_usual_order(tmp_path, store, fake_llm):
    """A reply and a failure notice, as the daemon stores them: the JSON text in the row has
    the keys in the order they have always had."""
    fake_llm.reply_fn = lambda r: f"{agent_of(r)} answers"
    fake_llm.script(status=500)
    pipeline, outbox, _events, llm = await _pipeline(tmp_path, store, fake_llm.base_url)
    await pipeline.handle(_human("@ping @pong both of you please"))
    await llm.aclose()
    notice = next(i for i in outbox.items if i.type == "notice")
    reply = next(i for i in outbox.items if i.type == "reply")
    with store.engine.connect() as conn:
        rows = dict(conn.execute(text("SELECT id, meta FROM messages")).all())
    assert list(json.loads(rows[reply.id])) == [
        "agent",
        "trigger",
        "recall",
        "context",
        "provider",
        "model",
        "latency_ms",
        "stop_reason",
        "usage",
        "attempts",
        "markers",
        "invalid_markers",
    ]
    failed = json.loads(rows[notice.id])
    assert list(failed) == ["agent", "trigger", "recall", "context", "error"]
    assert list(failed["error"]) == ["kind", "problem", "status", "retryable"]
