"""What became of each marker: typed write results (saved, reinforced, rejected), kept in a
reply's meta as the same JSON as ever."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

from orchestrator.core.markers import parse_markers
from orchestrator.memory.db import make_engine
from orchestrator.memory.gate.rules import GateConfig
from orchestrator.memory.personal import PersonalLog
from orchestrator.memory.session.store import SessionMemory
from orchestrator.memory.writer import MemoryWriter, Origin, Rejected, Saved, marker_meta

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
REPLY = (
    'ok <!--SAVE_MEMORY:{"type": "decision", "content": "We use JWT", "confidence": 0.9}-->'
    '<!--SAVE_MEMORY:{"type": "decision", "content": "We use JWT", "confidence": 0.9}-->'
    '<!--SAVE_TO_PERSONAL:{"content": "Ask for the load first", "type": "lesson"}-->'
    '<!--SAVE_MEMORY:{"type": "decision", "content": "maybe", "confidence": 0.1}-->'
)
# What the untyped writer kept for this reply (a real run), keys in their stored order.
GOLDEN_MEMORY = {
    "saved": [
        {"kind": "memory", "action": "added", "id": 1, "type": "decision"},
        {"kind": "memory", "action": "reinforced", "id": 1, "type": "decision"},
        {"kind": "personal", "action": "appended", "file": "2026-03-01.md", "type": "lesson"},
    ],
    "rejected": [
        {
            "kind": "memory",
            "reason": "low_confidence",
            "detail": "confidence 0.1 is below 0.7",
            "length": 78,
            "sha256": "05eefd86c9ef",
        }
    ],
}


def test_markers_become_typed_results_stored_as_before(tmp_path):
    """A save, its repeat, a personal line and a low-confidence refusal come back typed, and
    the reply keeps them as the same JSON the untyped writer stored."""
    engine = make_engine(f"sqlite:///{tmp_path / 'arena.db'}")
    try:
        writer = MemoryWriter(
            SessionMemory(engine),
            PersonalLog(tmp_path / "ws", ZoneInfo("UTC")),
            GateConfig(),
            ZoneInfo("UTC"),
        )
        parsed = parse_markers(REPLY)
        origin = Origin(agent="dev", group="g", reply_id="1-0:1:dev", trigger_id="1-0", now=NOW)
        report = writer.apply(parsed.markers, origin)
    finally:
        engine.dispose()
    assert [type(r) for r in (*report.saved, *report.rejected)] == [Saved] * 3 + [Rejected]
    assert [s.reinforced for s in report.saved] == [False, True, False]
    assert (report.saved[2].file, report.rejected[0].reason) == ("2026-03-01.md", "low_confidence")
    stored = marker_meta(parsed.invalid, report).as_json()
    assert json.dumps(stored["memory"]) == json.dumps(GOLDEN_MEMORY)
