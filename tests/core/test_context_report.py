"""The context and recall reports a reply keeps: typed where they are made and read, stored
as the same JSON as ever, and rows stored by older versions still read."""

from __future__ import annotations

import json
from dataclasses import fields
from typing import Any

from orchestrator.core.context import report as module
from orchestrator.core.context.build import Identity, Layers
from orchestrator.core.context.report import (
    CitedSource,
    ContextReport,
    LayerTokens,
    LeftOutCandidate,
    RecalledSnippet,
    RecallReport,
)
from orchestrator.core.models import MessageKind
from tests.core.test_context import _build, _msg, _past, _Ref

# What build_context reported for the turn below before the report was typed (a real run).
GOLDEN: dict[str, Any] = {
    "window": 2000,
    "reserved_output": 100,
    "correction": 1.0,
    "available": 1900,
    "tokens": {
        "identity": 3,
        "summary": 1,
        "memory_md": 0,
        "logs": 0,
        "recall": 30,
        "history": 31,
        "overhead": 373,
        "total": 438,
    },
    "decisions": ["identity truncated to its 3-token budget"],
    "over_budget": False,
    "recall": ["1"],
    "history_messages": 2,
    "citations": [{"id": 1, "ref": "1-0:1:dev", "trust": "sourced"}],
    "recall_dropped": [
        {"id": 7, "layer": "repeat", "reason": "repeats memory 1"},
        {"id": "5-0", "layer": "relevance_floor", "reason": "0.12 < 0.4"},
    ],
}
# A report as stored before recall said what it left out: no recall_dropped.
OLD_REPORT: dict[str, Any] = {
    key: value for key, value in GOLDEN.items() if key != "recall_dropped"
}
RECALL: dict[str, Any] = {
    "snippets": [{"id": 4, "score": 0.812, "trust": "sourced"}],
    "dropped": [{"id": "9-0", "layer": "max_entries", "reason": "beyond 5 entries"}],
}


class _Left:
    def __init__(self, id: int | str, layer: str, reason: str) -> None:
        self.id, self.layer, self.reason = id, layer, reason


def test_a_new_report_is_stored_as_before():
    """The typed report of a turn serialises to the dict the untyped one was."""
    history = [
        _msg(1, "alex", MessageKind.HUMAN, "hello"),
        _msg(2, "alex", MessageKind.HUMAN, "what next?"),
    ]
    layers = Layers(
        identity=Identity(claude="ROLE " * 20),
        summary="SUM",
        recalled=[_Ref(1, "RECALLED")],
        history=_past(*history),
        left_out=[
            _Left(7, "repeat", "repeats memory 1"),
            _Left("5-0", "relevance_floor", "0.12 < 0.4"),
        ],
    )
    report = _build(layers, history[-1], window=2000, identity=3).report
    assert json.dumps(report.as_json()) == json.dumps(GOLDEN)
    assert (report.tokens.total, report.citations[0].ref) == (438, "1-0:1:dev")
    assert [d.layer for d in report.recall_dropped] == ["repeat", "relevance_floor"]


def test_stored_reports_read_back_and_write_the_same_json():
    """A new report, an old one without recall_dropped and a recall report each read into
    their types and back to the same JSON, keys in the same order."""
    for stored in (GOLDEN, OLD_REPORT, {"tokens": {"total": 10}}, {}):
        assert json.dumps(ContextReport.from_json(stored).as_json()) == json.dumps(stored)
    for stored in (RECALL, {"snippets": []}, {}):
        assert json.dumps(RecallReport.from_json(stored).as_json()) == json.dumps(stored)
    old = ContextReport.from_json(OLD_REPORT)
    assert (old.recall_dropped, old.has("recall_dropped"), old.has("tokens")) == ((), False, True)
    recall = RecallReport.from_json(RECALL)
    assert (recall.snippets[0].score, recall.dropped[0].id) == (0.812, "9-0")


def test_a_new_report_writes_every_field_as_the_generic_form_does():
    """A report made here (every key) is written field by field, as the stored form of a
    dataclass is: each field once, in field order."""
    cited = (CitedSource(id=1, ref="1-0:1:dev", trust="sourced"),)
    dropped = (LeftOutCandidate(id="5-0", layer="relevance_floor", reason="0.12 < 0.4"),)
    values = [
        LayerTokens(identity=1, summary=2, memory_md=3, logs=4, recall=5, history=6, overhead=7),
        ContextReport(
            window=9,
            reserved_output=8,
            correction=1.25,
            available=7,
            tokens=LayerTokens(identity=1, total=1),
            decisions=("a", "b"),
            over_budget=True,
            recall=("1",),
            history_messages=3,
            citations=cited,
            recall_dropped=dropped,
        ),
        RecallReport(snippets=(RecalledSnippet(id=4, score=0.5, trust="t"),), dropped=dropped),
    ]
    for value in values:
        data = value.as_json()
        assert data == module._stored(value, None)
        assert list(data) == [f.name for f in fields(value) if f.name != "recorded"]
