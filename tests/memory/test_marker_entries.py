"""The entries a reply keeps about its markers, typed: read from any stored row without an
exception, and written in the one shape the writer stores."""

from __future__ import annotations

import json

from orchestrator.memory.conversation.marker_entries import (
    Rejected,
    Saved,
    StoredMarker,
    UnreadableMarker,
)
from orchestrator.memory.conversation.meta import MarkerMeta, ReplyMeta
from tests.runtime.test_pipeline_meta import OLD_MARKERS

# Values of the wrong type, and lists that are not lists.
ODD = {
    "markers": [{"kind": 5, "payload": ["content"]}, {"kind": "memory", "payload": None}],
    "invalid_markers": [{"kind": "SAVE_MEMORY", "reason": 404, "length": "9", "sha256": 1}],
    "memory": {
        "saved": [{"kind": [], "action": 1, "id": "7", "type": None, "file": 2}, {"id": True}],
        "rejected": {"reason": "an object, not a list"},
    },
}


def test_odd_values_read_as_empty():
    """Values of the wrong type read as empty, a kind no marker has as None, never raising."""
    markers = ReplyMeta.from_json({"agent": "ping", **ODD}).markers
    assert markers == MarkerMeta(
        markers=(StoredMarker(kind=None), StoredMarker(kind="memory")),
        invalid_markers=(UnreadableMarker(kind=None, reason=""),),
        saved=(Saved(kind=None, action="", type=""), Saved(kind=None, action="", type="")),
        rejected=(),
    )
    assert ReplyMeta.from_json({"markers": "none", "memory": []}).markers == MarkerMeta()


def test_old_entries_written_again_take_the_stored_shape():
    """An old row's entries, read and written again, have every key the writer stores, in
    its order; missing ones empty, keys no version wrote dropped, non-objects skipped."""
    again = ReplyMeta.from_json(OLD_MARKERS).as_json()
    memory, personal = {"kind": "memory"}, {"kind": "personal"}
    assert json.dumps(again) == json.dumps(
        {
            "agent": None,
            "trigger": None,
            "markers": [
                {**memory, "payload": {"type": "Decision", "content": "we play chess"}},
                {**memory, "payload": {"content": "alex likes games"}},
                {"kind": None, "payload": {}},
                {**personal, "payload": {}},
            ],
            "invalid_markers": [
                {**memory, "reason": "not JSON", "length": 0, "sha256": ""},
                {"kind": None, "reason": "x", "length": 0, "sha256": ""},
            ],
            "memory": {
                "saved": [
                    {**memory, "action": "added", "id": 1, "type": "decision"},
                    {**memory, "action": "reinforced", "id": 2, "type": "fact"},
                    {**personal, "action": "appended", "file": "2026-01-05.md", "type": ""},
                    {"kind": None, "action": "", "file": None, "type": ""},
                ],
                "rejected": [
                    {
                        **memory,
                        "reason": "secret",
                        "detail": "an API key",
                        "length": 0,
                        "sha256": "",
                    },
                    {"kind": None, "reason": "duplicate", "detail": "", "length": 0, "sha256": ""},
                    {**personal, "reason": "schema", "detail": "", "length": 5, "sha256": ""},
                ],
            },
            "truncated": {"saved": 2, "rejected": 1},
        }
    )


def test_typed_entries_read_back_as_written():
    """Each entry the writer makes reads back equal from its stored form."""
    meta = MarkerMeta(
        markers=(
            StoredMarker(kind="personal", payload={"content": "ask first", "type": "lesson"}),
        ),
        invalid_markers=(
            UnreadableMarker(kind="memory", reason="not JSON", length=9, sha256="0123456789ab"),
        ),
        saved=(
            Saved(kind="memory", action="superseded", id=3, type="decision"),
            Saved(kind="personal", action="appended", file="2026-01-05.md", type="lesson"),
        ),
        rejected=(
            Rejected(kind="personal", reason="secret", detail="an API key", length=40, sha256="ab"),
        ),
        truncated={"rejected": 4},
    )
    assert MarkerMeta.from_json(meta.as_json()) == meta
