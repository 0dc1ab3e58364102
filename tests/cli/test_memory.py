"""`arena memory` list, forget/restore, stats and export, on a real SQLite store."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from click.testing import CliRunner

from orchestrator.cli.main import main
from orchestrator.memory.db import make_engine
from orchestrator.memory.session.store import Citation, NewMemory, SessionMemory

T0 = datetime(2026, 4, 1, 10, 0, tzinfo=UTC)


@pytest.fixture
def data_dir(tmp_path: Path, monkeypatch) -> Path:
    """A data folder with three session memories in two groups."""
    data = tmp_path / "data"
    data.mkdir()
    monkeypatch.setenv("ARENA_DATA_DIR", str(data))
    engine = make_engine(f"sqlite:///{data / 'arena.db'}")
    memory = SessionMemory(engine)
    for group, type_, content in [
        ("alpha", "decision", "We use JWT for sessions"),
        ("alpha", "task", "Write the token refresh endpoint"),
        ("beta", "fact", "The staging server is in Frankfurt"),
    ]:
        memory.write(
            NewMemory(
                scope="session",
                scope_id=group,
                type=type_,
                content=content,
                now=T0,
                agent="architect",
                group_id=group,
                source_message_id="1-0:1:architect",
                citation=Citation(kind="message", ref="1-0:1:architect", scope="session"),
            )
        )
    engine.dispose()
    return data


def _json_lines(output: str) -> list[dict]:
    return [json.loads(line) for line in output.splitlines() if line.strip()]


def test_list_filters_by_group_and_type(data_dir: Path):
    """`list --group` shows that group's memories only; `--type` narrows further."""
    alpha = _json_lines(
        CliRunner().invoke(main, ["memory", "list", "--group", "alpha", "--json"]).output
    )
    assert sorted(r["type"] for r in alpha) == ["decision", "task"]
    tasks = _json_lines(
        CliRunner()
        .invoke(main, ["memory", "list", "--group", "alpha", "--type", "task", "--json"])
        .output
    )
    assert [r["content"] for r in tasks] == ["Write the token refresh endpoint"]


def test_forget_is_soft_and_restore_brings_it_back(data_dir: Path):
    """A forgotten memory is archived (not searchable) and restore makes it active again."""
    first = _json_lines(CliRunner().invoke(main, ["memory", "search", "JWT", "--json"]).output)
    entry = str(first[0]["id"])
    forgot = CliRunner().invoke(main, ["memory", "forget", entry])
    assert forgot.exit_code == 0
    assert "archived" in forgot.output
    assert _json_lines(CliRunner().invoke(main, ["memory", "search", "JWT", "--json"]).output) == []
    archived = _json_lines(
        CliRunner().invoke(main, ["memory", "list", "--status", "archived", "--json"]).output
    )
    assert [str(r["id"]) for r in archived] == [entry]
    assert CliRunner().invoke(main, ["memory", "restore", entry]).exit_code == 0
    again = _json_lines(CliRunner().invoke(main, ["memory", "search", "JWT", "--json"]).output)
    assert [str(r["id"]) for r in again] == [entry]


def test_stats_and_export(data_dir: Path):
    """Stats count by scope, type and status; export writes the group's memories as JSON."""
    stats = json.loads(CliRunner().invoke(main, ["memory", "stats", "--json"]).output)
    assert stats["total"] == 3
    assert stats["by_type"] == {"decision": 1, "fact": 1, "task": 1}
    exported = CliRunner().invoke(main, ["memory", "export", "alpha"])
    assert exported.exit_code == 0, exported.output
    target = data_dir / "memory" / "session_alpha.json"
    entries = json.loads(target.read_text())
    assert sorted(e["content"] for e in entries) == [
        "We use JWT for sessions",
        "Write the token refresh endpoint",
    ]
    assert all(e["citation"]["ref"] == "1-0:1:architect" for e in entries)


def test_unknown_id_and_bad_group_are_clear_errors(data_dir: Path):
    """A missing id or an invalid group is one clear line, exit 1."""
    missing = CliRunner().invoke(main, ["memory", "show", "999"])
    assert missing.exit_code == 1
    assert "no memory with id 999" in missing.output
    bad = CliRunner().invoke(main, ["memory", "export", "../etc"])
    assert bad.exit_code == 1
    assert "not a valid group id" in bad.output
