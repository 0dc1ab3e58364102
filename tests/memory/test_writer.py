"""What became of each marker: typed write results (saved, reinforced, rejected), kept in a
reply's meta as the same JSON as ever."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

from sqlalchemy import text

from orchestrator.core.json_text import json_text
from orchestrator.core.markers import parse_markers
from orchestrator.core.models import ChatMessage, MessageKind
from orchestrator.memory.conversation.marker_entries import Rejected, Saved
from orchestrator.memory.conversation.meta import ReplyMeta
from orchestrator.memory.conversation.store import HistoryStore, NewReply
from orchestrator.memory.db import make_engine
from orchestrator.memory.gate.rules import GateConfig
from orchestrator.memory.personal import PersonalLog
from orchestrator.memory.session.store import SessionMemory
from orchestrator.memory.writer import RECOUNT_S, MemoryWriter, Origin, marker_meta

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


# A reply's stored meta, byte for byte: what the untyped writer stored (a real run) ----------

NOTE = '<!--SAVE_TO_PERSONAL:{"content": "note ' + "z" * 1900 + '"}-->'
MANY = " ".join(
    [NOTE] * 9
    + ['<!--SAVE_MEMORY:{"type": "fact", "content": "The API lives on port 8080"}-->'] * 12
    + ['<!--SAVE_MEMORY:{"type": "fact", "content": "perhaps", "confidence": 0.1}-->'] * 21
    + ["<!--SAVE_MEMORY:{nope}-->"] * 21
)
SAVED_JWT = (
    '{"kind": "memory", "payload": {"type": "decision", '
    '"content": "We use JWT \\u2014 sign\\u00e9s, na\\u00efvely", "confidence": 0.9}}'
)
GOLDEN_REPLY = (
    '{"agent": "dev", "trigger": "1-0", "markers": ['
    + SAVED_JWT
    + ", "
    + SAVED_JWT
    + ', {"kind": "personal", "payload": {"content": "Ask for the load first", "type": "lesson"}}'
    '], "invalid_markers": [{"kind": "memory", '
    '"reason": "not JSON: Expecting property name enclosed in double quotes", '
    '"length": 29, "sha256": "e2a306856400"}, {"kind": "personal", '
    '"reason": "unterminated (no \'-->\'); not JSON: Unterminated string starting at", '
    '"length": 37, "sha256": "8eb0d4401ee8"}], "memory": {"saved": ['
    '{"kind": "memory", "action": "added", "id": 1, "type": "decision"}, '
    '{"kind": "memory", "action": "reinforced", "id": 1, "type": "decision"}, '
    '{"kind": "personal", "action": "appended", "file": "2026-03-01.md", "type": "lesson"}], '
    '"rejected": [{"kind": "memory", "reason": "low_confidence", '
    '"detail": "confidence 0.1 is below 0.7", "length": 78, "sha256": "05eefd86c9ef"}]}}'
)
NOTE_KEPT = '{"kind": "personal", "payload": {"content": "note ' + "z" * 1900 + '"}}'
BROKEN_KEPT = (
    '{"kind": "memory", "reason": "not JSON: Expecting property name enclosed in double '
    'quotes", "length": 25, "sha256": "c2cbd0eb8817"}'
)
APPENDED = '{"kind": "personal", "action": "appended", "file": "2026-03-01.md", "type": "note"}'
FACT = '{"kind": "memory", "action": "%s", "id": 2, "type": "fact"}'
LOW = (
    '{"kind": "memory", "reason": "low_confidence", "detail": "confidence 0.1 is below 0.7", '
    '"length": 76, "sha256": "c2eab61d8dd8"}'
)
GOLDEN_MANY = (
    '{"agent": "dev", "trigger": "1-0", "markers": ['
    + ", ".join([NOTE_KEPT] * 4)
    + '], "invalid_markers": ['
    + ", ".join([BROKEN_KEPT] * 20)
    + '], "memory": {"saved": ['
    + ", ".join([APPENDED] * 9 + [FACT % "added"] + [FACT % "reinforced"] * 10)
    + '], "rejected": ['
    + ", ".join([LOW] * 20)
    + ']}, "truncated": {"saved": 1, "rejected": 1, "invalid_markers": 1, "markers": 17}}'
)


def test_reply_meta_is_stored_byte_for_byte_as_before(tmp_path):
    """Saved (added, reinforced, appended), rejected and unreadable markers, and a reply
    whose lists were cut to size, stored through the real writer and history store: the
    row's JSON text holds what it has always held, key for key in the same order, written as
    the package writes JSON (compact, UTF-8: ``core.json_text``)."""
    jwt = '{"type": "decision", "content": "We use JWT — signés, naïvely", "confidence": 0.9}'
    reply = (
        f"ok <!--SAVE_MEMORY:{jwt}--><!--SAVE_MEMORY:{jwt}-->"
        '<!--SAVE_TO_PERSONAL:{"content": "Ask for the load first", "type": "lesson"}-->'
        '<!--SAVE_MEMORY:{"type": "decision", "content": "maybe", "confidence": 0.1}-->'
        '<!--SAVE_MEMORY:{not json}--> <!--SAVE_TO_PERSONAL:{"content": "cut'
    )
    engine = make_engine(f"sqlite:///{tmp_path / 'arena.db'}")
    try:
        writer = MemoryWriter(
            SessionMemory(engine),
            PersonalLog(tmp_path / "ws", ZoneInfo("UTC")),
            GateConfig(),
            ZoneInfo("UTC"),
        )
        rows = []
        for hop, text_ in enumerate((reply, MANY), start=1):
            parsed = parse_markers(text_)
            reply_id = f"1-0:{hop}:dev"
            origin = Origin(agent="dev", group="g", reply_id=reply_id, trigger_id="1-0", now=NOW)
            report = writer.apply(parsed.markers, origin)
            meta = ReplyMeta(
                agent="dev", trigger="1-0", markers=marker_meta(parsed.invalid, report)
            )
            message = ChatMessage(
                id=reply_id,
                group="g",
                sender="dev",
                kind=MessageKind.AGENT,
                text=parsed.visible,
                created_at=NOW,
                in_reply_to="1-0",
                hop=hop,
            )
            rows.append(NewReply(message=message, meta=meta.as_json()))
        with engine.begin() as conn:
            HistoryStore(engine).record_in(conn, rows)
        with engine.connect() as conn:
            stored = conn.execute(text("SELECT meta FROM messages ORDER BY seq")).scalars().all()
    finally:
        engine.dispose()
    assert stored == [json_text(json.loads(GOLDEN_REPLY)), json_text(json.loads(GOLDEN_MANY))]
    assert "We use JWT — signés, naïvely" in stored[0]


def _saving(*contents: str) -> list:
    return parse_markers(
        "ok "
        + "".join(
            f'<!--SAVE_MEMORY:{{"type": "fact", "content": "{c}", "confidence": 0.9}}-->'
            for c in contents
        )
    ).markers


def test_the_daily_limit_counts_what_an_agent_added_in_a_group(tmp_path):
    """With a limit of 3 an agent's fourth new memory of the day in a group is refused (a
    repeat before it, a reinforcement, added nothing); another group, another agent and the
    next day count afresh; what another writer added counts once its count is read again."""
    engine = make_engine(f"sqlite:///{tmp_path / 'arena.db'}")
    clock = [0.0]
    try:
        session = SessionMemory(engine)
        writer = MemoryWriter(
            session,
            PersonalLog(tmp_path / "ws", ZoneInfo("UTC")),
            GateConfig(daily_limit=3),
            ZoneInfo("UTC"),
            clock=lambda: clock[0],
        )

        def save(*contents: str, agent: str = "ping", group: str = "g", now=NOW):
            origin = Origin(agent=agent, group=group, reply_id="r", trigger_id="t", now=now)
            report = writer.apply(_saving(*contents), origin)
            return [s.action for s in report.saved], [r.reason for r in report.rejected]

        assert save("one thing", "two things") == (["added"] * 2, [])
        assert save("one thing") == (["reinforced"], [])
        assert save("three things") == (["added"], [])
        assert save("four things") == ([], ["rate_limited"])
        assert save("four things", group="h") == (["added"], [])
        assert save("four things", agent="pong") == (["added"], [])
        assert save("a new day", now=NOW.replace(day=2)) == (["added"], [])
        other = MemoryWriter(
            session,
            PersonalLog(tmp_path / "ws", ZoneInfo("UTC")),
            GateConfig(daily_limit=3),
            ZoneInfo("UTC"),
        )
        origin = Origin(agent="ping", group="k", reply_id="r", trigger_id="t", now=NOW)
        assert save("five things", group="k") == (["added"], [])
        other.apply(_saving("six things", "seven things"), origin)  # another process
        assert save("eight things", group="k") == (["added"], [])  # counted a moment ago
        clock[0] += RECOUNT_S
        assert save("nine things", group="k") == ([], ["rate_limited"])
    finally:
        engine.dispose()
