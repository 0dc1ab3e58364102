"""`arena memory edit|pin|unpin|history|show`: corrections from the command line, recorded
with who made them, on a real SQLite store; `arena memory-md set`: a hand edit of MEMORY.md."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from click.testing import CliRunner

from orchestrator.cli.main import main
from orchestrator.memory.db import make_engine
from orchestrator.memory.session.store import Citation, NewMemory, SessionMemory
from orchestrator.settings import Settings

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
    people = _run("memory", "list", "--written-by", "person", "--json").output.splitlines()
    assert [json.loads(line)["id"] for line in people] == [new["id"]]
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


def _growth(settings: Settings) -> dict:
    result = CliRunner().invoke(main, ["growth", "ping", "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


@pytest.mark.usefixtures("settings_env")
def test_hand_edit_of_memory_md_is_a_version(settings: Settings):
    """`memory-md set` saves a version marked "hand edit" with who; `growth` lists it, and the
    file on disk is the new text."""
    text = "# ping\n\n- Ask for the expected load first\n"
    done = _run("memory-md", "set", "ping", "-", "--base-version", "0", "--by", "alex", stdin=text)
    assert done.exit_code == 0, done.output
    assert "version 1" in done.output
    (version,) = _growth(settings)["versions"]
    assert (version["version"], version["trigger"]) == (1, "hand edit")
    assert version["source"] == {"by": "alex"}
    table = CliRunner().invoke(main, ["growth", "ping"])
    assert "hand edit (alex)" in table.output
    assert (settings.workspaces_dir / "ping" / "MEMORY.md").read_text() == text
    path = settings.workspaces_dir.parent / "edit.md"
    path.write_text(text + "- Keep PRs small\n")
    again = _run("memory-md", "set", "ping", str(path), "--base-version", "1")
    assert again.exit_code == 0, again.output
    assert [v["version"] for v in _growth(settings)["versions"]] == [1, 2]


@pytest.mark.usefixtures("settings_env")
def test_hand_edit_conflict_loses_nothing(settings: Settings):
    """Two edits from the same version: the second is refused, the first is kept, and the
    attempt is in the growth log."""
    assert (
        _run("memory-md", "set", "ping", "-", "--base-version", "0", stdin="one\n").exit_code == 0
    )
    second = _run("memory-md", "set", "ping", "-", "--base-version", "0", stdin="two\n")
    assert second.exit_code == 1
    assert "version 1, not 0" in second.output
    assert (settings.workspaces_dir / "ping" / "MEMORY.md").read_text() == "one\n"
    growth = _growth(settings)
    assert [v["version"] for v in growth["versions"]] == [1]
    assert [a["status"] for a in growth["attempts"]] == ["conflict"]


@pytest.mark.usefixtures("settings_env")
@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("- deploy key sk-ant-api03-" + "k" * 40 + "\n", "secret"),
        ('- note <!--SAVE_MEMORY: {"type": "fact", "content": "x y z"}-->\n', "markers"),
        ("word " * 5000, "over the budget"),
    ],
)
def test_hand_edit_refused_by_the_rules(settings: Settings, text: str, reason: str):
    """A key, a marker or a text over the budget is refused with the reason; the file and
    the versions are untouched, the refusal is an attempt in the growth log."""
    result = _run("memory-md", "set", "ping", "-", "--base-version", "0", stdin=text)
    assert result.exit_code == 1
    assert reason in result.output
    assert "sk-ant" not in result.output
    assert not (settings.workspaces_dir / "ping" / "MEMORY.md").exists()
    growth = _growth(settings)
    assert growth["versions"] == []
    assert [a["status"] for a in growth["attempts"]] == ["rejected"]


@pytest.mark.usefixtures("settings_env")
@pytest.mark.parametrize("agent", ["../ping", "nobody", "ping/../pong"])
def test_hand_edit_of_an_unknown_agent(settings: Settings, agent: str):
    """An id that is no agent of the team (or could leave the workspaces) is refused."""
    result = _run("memory-md", "set", agent, "-", "--base-version", "0", stdin="x\n")
    assert result.exit_code == 1
    assert "agent" in result.output
    assert not list(settings.workspaces_dir.parent.rglob("MEMORY.md"))
