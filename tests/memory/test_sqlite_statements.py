"""A memory saved again goes to SQLite past SQLAlchemy (``SqliteStatement``): what it stores and
returns is what SQLAlchemy's own path stores and returns, byte for byte, and readers see it."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from orchestrator.memory.db import make_engine
from orchestrator.memory.session import scope_log
from orchestrator.memory.session.records import NewMemory, WriteOutcome
from orchestrator.memory.session.sqlite_rows import SqliteStatement
from orchestrator.memory.session.store import SessionMemory

T0 = datetime(2026, 5, 1, 9, 30, 15, 123456, tzinfo=UTC)


def _saves(folder: Path) -> tuple[list[WriteOutcome], list[tuple[Any, ...]]]:
    """The same memories saved, saved again (from other messages, one with more confidence
    and verified) and saved again by the same message: the outcomes and the rows stored."""
    engine = make_engine(f"sqlite:///{folder / 'arena.db'}")
    memory = SessionMemory(engine)

    def new(content: str, n: int, **rest: Any) -> NewMemory:
        return NewMemory(scope="session", scope_id="g1", type="decision", content=content,
                         now=T0 + timedelta(seconds=n), agent="architect", group_id="g1",
                         source_message_id=f"m{n}", **rest)  # fmt: skip

    outcomes = [
        memory.write(new("We keep the REST API, webhooks later", 0)),
        memory.write(new("we keep the REST API,  webhooks later", 1)),
        memory.write(new("We keep the REST API, webhooks later", 2, confidence=0.95)),
        memory.write(new("We keep the REST API, webhooks later", 3, verified=True)),
        memory.write(new("We keep the REST API, webhooks later", 3)),  # the same message again
        memory.write(new("Postgres for the session store — décidé", 4, tags=("db", "ünï"))),
        memory.write(new("Postgres for the session store — décidé", 5)),
    ]
    engine.dispose()
    with sqlite3.connect(folder / "arena.db") as raw:
        rows = raw.execute("SELECT * FROM memory_entries ORDER BY id").fetchall()
    return outcomes, rows


def test_saved_again_past_sqlalchemy_stores_what_sqlalchemy_stores(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "fast").mkdir()
    (tmp_path / "slow").mkdir()
    fast_outcomes, fast_rows = _saves(tmp_path / "fast")
    monkeypatch.setattr(SqliteStatement, "rows", lambda *_a, **_k: None)
    slow_outcomes, slow_rows = _saves(tmp_path / "slow")
    assert [o.action for o in fast_outcomes] == [
        "added", "reinforced", "reinforced", "reinforced", "reinforced", "added", "reinforced",
    ]  # fmt: skip
    assert fast_rows == slow_rows
    assert fast_outcomes == slow_outcomes
    kept = fast_outcomes[3].record
    assert (kept.count, kept.confidence, kept.verified) == (4, 1.0, True)
    assert kept.extra["reinforced_by"] == ["m1", "m2", "m3"]
    assert kept.last_seen_at == T0 + timedelta(seconds=3)
    assert fast_outcomes[4].record == kept  # the same message again: nothing new


def _fact(n: int) -> NewMemory:
    return NewMemory(
        scope="session",
        scope_id="g1",
        type="fact",
        content="the cache holds 5 minutes",
        now=T0 + timedelta(minutes=n),
        source_message_id=f"m{n}",
    )


def test_a_write_past_sqlalchemy_is_seen_by_recall_at_once(tmp_path: Path) -> None:
    """Saved again past SQLAlchemy still counts as this process's memory write: the entries
    held for recall are read again before the next search."""
    engine = make_engine(f"sqlite:///{tmp_path / 'arena.db'}")
    memory = SessionMemory(engine)
    first = memory.write(_fact(1))
    found = memory.resident.find(["cache"], [("session", "g1")], 5)
    assert found is not None
    assert found.hits[0][0].count == 1
    before = scope_log.written()
    again = memory.write(_fact(2))
    assert again.action == "reinforced"
    assert again.record.id == first.record.id
    assert scope_log.written() != before
    found = memory.resident.find(["cache"], [("session", "g1")], 5)
    assert found is not None
    assert found.hits[0][0].count == 2
    engine.dispose()
