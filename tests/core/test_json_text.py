"""JSON as the package writes it: compact UTF-8 that any reader reads back, and what orjson
refuses but the standard library takes still written."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from orchestrator.core.json_text import json_bytes, json_text


def test_compact_utf8_that_reads_back_the_same() -> None:
    value = {"agent": "dev", "text": "signés — naïvely 👋", "n": [1, 2.5, None, True], 3: "three"}
    text = json_text(value)
    assert text == '{"agent":"dev","text":"signés — naïvely 👋","n":[1,2.5,null,true],"3":"three"}'
    assert json_bytes(value) == text.encode("utf-8")
    assert json.loads(text) == json.loads(json.dumps(value))


@pytest.mark.parametrize(
    "value",
    [
        {"content": "a model's marker: \ud800 alone"},
        {"big": 2**70, "small": -(2**70)},
        ["\udc00", {"nested": "\ud83d"}],
    ],
)
def test_what_orjson_refuses_is_written_by_the_standard_library(value: object) -> None:
    text = json_text(value)
    assert text.isascii()
    assert json.loads(text) == value
    assert json_bytes(value) == text.encode("ascii")


@pytest.mark.parametrize("value", [{"when": object()}, {1, 2}, {"pair": b"bytes"}])
def test_what_json_cannot_hold_is_a_type_error(value: object) -> None:
    with pytest.raises(TypeError):
        json_text(value)
    with pytest.raises(TypeError):
        json_bytes(value)


def test_times_are_written_as_text() -> None:
    """orjson writes a datetime where the standard library refuses one: as RFC 3339 text."""
    assert json_text({"at": datetime(2026, 5, 1, 9, 30, tzinfo=UTC)}) == (
        '{"at":"2026-05-01T09:30:00+00:00"}'
    )
