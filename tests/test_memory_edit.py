"""`arena memory edit|pin|unpin|history|show`: corrections from the command line, recorded
with who made them, on a real SQLite store."""

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
def entry(tmp_path: Path, monkeypatch) -> str:
    """A data folder with one session memory; its id."""
    data = tmp_path / "data"
    data.mkdir()
    monkeypatch.setenv("ARENA_DATA_DIR", str(data))
    engine = make_engine(f"sqlite:///{data / 'arena.db'}")
    outcome = SessionMemory(engine).write(
        NewMemory(
            scope="session",
            scope_id="alpha",
            type="decision",
            content="We use JWT for sessions",
            now=T0,
            agent="architect",
            group_id="alpha",
            source_message_id="1-0:1:architect",
            citation=Citation(kind="message", ref="1-0:1:architect", scope="session"),
        )
    )
    engine.dispose()
    return str(outcome.record.id)


def _run(*args: str, stdin: str | None = None):
    return CliRunner().invoke(main, list(args), input=stdin)


def _show(entry_id: str) -> dict:
    return json.loads(_run("memory", "show", entry_id, "--json").output)


def test_edit_supersedes_and_show_links_both_ways(entry: str):
    """`edit` writes a new entry; `show` reports the old superseded, each naming the other."""
    done = _run("memory", "edit", entry, "We use opaque session tokens", "--by", "alex")
    assert done.exit_code == 0, done.output
    old = _show(entry)
    assert old["status"] == "superseded"
    new = _show(str(old["superseded_by"]))
    assert new["supersedes"] == int(entry)
    assert new["content"] == "We use opaque session tokens"
    assert new["citation"]["ref"] == "1-0:1:architect"
    text = _run("memory", "show", entry).output
    assert f"superseded_by:{old['superseded_by']}" in text.replace(" ", "")


def test_edit_reads_stdin_and_history_says_who(entry: str):
    """`edit ID -` reads the text from stdin; `history` shows who changed what."""
    assert _run("memory", "edit", entry, "-", "--by", "sam", stdin="We use PASETO\n").exit_code == 0
    changes = [
        json.loads(line) for line in _run("memory", "history", entry, "--json").output.splitlines()
    ]
    assert [(c["action"], c["by"], c["old_content"], c["new_content"]) for c in changes] == [
        ("edit", "sam", "We use JWT for sessions", "We use PASETO")
    ]
    table = _run("memory", "history", entry).output
    assert "sam" in table
    assert "edit" in table


def test_edit_refused_by_the_gate(entry: str):
    """An API key or a marker in an edit is refused with the gate's reason, in one line."""
    key = _run("memory", "edit", entry, "token sk-ant-api03-" + "x" * 40)
    assert key.exit_code == 1
    assert "secret" in key.output
    assert "Traceback" not in key.output
    marker = _run(
        "memory", "edit", entry, 'a <!--SAVE_MEMORY: {"type":"fact","content":"x y z"}-->'
    )
    assert marker.exit_code == 1
    assert "marker" in marker.output
    assert _show(entry)["status"] == "active"


def test_pin_unpin_forget_restore_recorded(entry: str):
    """Pin, unpin, forget and restore each leave a line in the history, by the OS user or --by."""
    for action in ("pin", "unpin", "forget", "restore"):
        assert _run("memory", action, entry, "--by", "alex").exit_code == 0
    assert _show(entry)["pinned"] is False
    assert _run("memory", "pin", entry).exit_code == 0
    assert _show(entry)["pinned"] is True
    lines = _run("memory", "history", entry, "--json").output.splitlines()
    actions = [json.loads(line)["action"] for line in lines]
    assert actions == ["pin", "unpin", "forget", "restore", "pin"]
    assert json.loads(lines[-1])["by"]  # the OS user


def test_unknown_id_is_one_line(entry: str):
    """An unknown id is one clear line and exit code 1."""
    result = _run("memory", "history", "999999")
    assert result.exit_code == 1
    assert "no memory with id 999999" in result.output
