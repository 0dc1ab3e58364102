"""What a turn's recall costs: a group the history layer shows whole is not searched (there is
nothing older to find), while a longer one still is."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from click.testing import CliRunner
from sqlalchemy import event
from sqlalchemy.engine import Engine

from orchestrator.cli.main import main
from orchestrator.core.models import ChatMessage, MessageKind
from orchestrator.memory.conversation.store import HistoryStore
from tests.history_seed import write_history

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)


# `arena context` in this process reads the settings from the environment.
pytestmark = pytest.mark.usefixtures("settings_env")


@pytest.fixture
def settings_overrides() -> dict[str, Any]:
    """A history window of 20 messages; no services."""
    return {
        "redis_url": "redis://127.0.0.1:1",
        "mqtt_url": "mqtt://127.0.0.1:1",
        "history_limit": 20,
    }


def _chat(store: HistoryStore, count: int) -> None:
    for n in range(count):
        text = "The Hetzner budget is 400 euros." if n == 0 else f"filler line number {n}"
        write_history(
            store,
            ChatMessage(
                id=f"{1_700_000_000_000 + n}-0",
                group="plans",
                sender="alex",
                kind=MessageKind.HUMAN,
                text=text,
                created_at=T0 + timedelta(minutes=n),
            ),
        )


@contextmanager
def _searches() -> Iterator[list[str]]:
    """The statements that search the conversation's index, run by any connection opened
    meanwhile (through SQLAlchemy or straight through the driver)."""
    seen: list[str] = []

    def record(statement: str) -> None:
        if "history_fts MATCH" in statement:
            seen.append(statement)

    def trace(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.set_trace_callback(record)

    event.listen(Engine, "connect", trace)
    try:
        yield seen
    finally:
        event.remove(Engine, "connect", trace)


def _context(question: str) -> dict[str, Any]:
    result = CliRunner().invoke(
        main, ["context", "helper", "plans", "--message", question, "--json"]
    )
    assert result.exit_code == 0, result.output
    data: dict[str, Any] = json.loads(result.output)
    return data


def test_a_group_the_window_shows_whole_is_not_searched(store: HistoryStore) -> None:
    _chat(store, 19)
    with _searches() as seen:
        data = _context("what was the Hetzner budget?")
    assert seen == []
    conversation = "\n".join(turn["content"] for turn in data["messages"])
    assert "The Hetzner budget is 400 euros." in conversation


def test_a_group_longer_than_the_window_is_searched(store: HistoryStore) -> None:
    _chat(store, 40)
    with _searches() as seen:
        data = _context("what was the Hetzner budget?")
    assert seen
    assert "The Hetzner budget is 400 euros." in data["system_tail"]
