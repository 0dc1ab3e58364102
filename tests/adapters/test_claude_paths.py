"""A Claude Code run touches only the agent's workspace and the project: a file tool's call on
any other path is denied, and the run fails naming the tool (the real bundled CLI, driven by
a local Messages API that asks for the call)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from orchestrator.adapters.claude_code import ClaudeCode, RunRequest, RunStep, bundled_cli
from orchestrator.adapters.claude_paths import PathGuard
from orchestrator.adapters.messages_api import MessagesApiServer
from orchestrator.core.models import PROFILES, CodeSpec
from orchestrator.offline.coder import Text, ToolUse, Turn


def test_paths_inside_the_roots_pass_and_the_rest_is_named(tmp_path: Path):
    """Relative paths count from the workspace; `..` and symbolic links cannot leave a root."""
    workspace, project = tmp_path / "ws", tmp_path / "project"
    workspace.mkdir()
    project.mkdir()
    (project / "escape").symlink_to("/etc")
    guard = PathGuard((workspace, project), workspace)
    assert guard.outside({"file_path": str(project / "a.py")}) is None
    assert guard.outside({"file_path": "notes.md"}) is None
    assert guard.outside({"path": str(workspace)}) is None
    assert guard.outside({"pattern": "*.py"}) is None
    assert guard.outside({"file_path": "/etc/passwd"}) == "/etc/passwd"
    assert guard.outside({"file_path": str(project / ".." / "x")}) == str(project / ".." / "x")
    assert guard.outside({"file_path": str(project / "escape" / "hosts")}) is not None
    assert guard.outside({"path": "../elsewhere"}) == "../elsewhere"


@pytest.mark.parametrize(
    ("command", "named"),
    [
        ("python3 hello.py", None),
        ("python3 -m pytest -q 2>/dev/null", None),
        ("/usr/bin/env python3 -c 'print(1)'", None),  # a program may be named anywhere
        ("PROJECT cd && python3 -m pytest --rootdir=PROJECT", None),
        ("git -C PROJECT log --oneline | head -3", None),
        ("rm -rf build && mkdir -p build", None),
        ("cat /etc/passwd", "/etc/passwd"),
        ("ls -la /", "/"),
        ("echo hi >/etc/motd", "/etc/motd"),
        ("python3 x.py; cat ../../secret", "../../secret"),
        ("cp notes.md ~/notes.md", "~/notes.md"),
        ("pytest --basetemp=/var/tmp/x", "/var/tmp/x"),
        ("OUT=/root/out python3 x.py", "/root/out"),
        ("cd PROJECT/escape && ls", "PROJECT/escape"),
        ("cat 'half quoted", None),
    ],
)
def test_a_command_naming_a_path_outside_the_roots_is_named(
    tmp_path: Path, command: str, named: str | None
):
    """Each word of a command line that names a path (not the program it runs) must be in a
    root once `..` and symbolic links are resolved."""
    workspace, project = tmp_path / "ws", tmp_path / "project"
    workspace.mkdir()
    project.mkdir()
    (project / "escape").symlink_to("/etc")
    guard = PathGuard((workspace, project), workspace)
    command = command.replace("PROJECT cd", f"cd {project}").replace("PROJECT", str(project))
    expected = named.replace("PROJECT", str(project)) if named else None
    assert guard.outside_command(command) == expected


@pytest.mark.skipif(bundled_cli() is None, reason="claude-agent-sdk is not installed")
@pytest.mark.parametrize("tool", ["Write", "Bash"])
async def test_a_write_outside_the_project_is_denied_and_fails_the_run(tmp_path: Path, tool: str):
    """The model asks to write a file outside both roots, with the file tool or a command: the
    file is never written, the run is failed with the denied tool named, and its steps show the
    refusal."""
    outside = tmp_path / "outside.txt"
    arguments = (
        {"file_path": str(outside), "content": "x\n"}
        if tool == "Write"
        else {"command": f"echo x > {outside}", "description": "write"}
    )
    workspace, project = tmp_path / "ws", tmp_path / "project"
    workspace.mkdir()
    project.mkdir()

    def responder(request: Mapping[str, Any]) -> Turn:
        last = request["messages"][-1]["content"]
        answered = isinstance(last, list) and any(b.get("type") == "tool_result" for b in last)
        if answered:
            return Turn(content=(Text(text="Done."),), stop_reason="end_turn")
        call = ToolUse(id="toolu_1", name=tool, input=arguments)
        return Turn(content=(call,), stop_reason="tool_use")

    steps: list[RunStep] = []

    async def on_step(step: RunStep) -> None:
        steps.append(step)

    with MessagesApiServer(responder) as server:
        request = RunRequest(
            prompt="write outside",
            system="",
            workspace=workspace,
            project=project,
            config_dir=tmp_path / "config",
            model="claude-test",
            code=CodeSpec(profile="editor", tools=PROFILES["editor"]),
            api_key="test",
            base_url=server.base_url,
        )
        outcome = await ClaudeCode(tmp_path / "launcher").run(request, on_step)
    assert not outside.exists()
    assert outcome.status == "failed"
    assert tool in outcome.denials
    assert any(s.kind == "result" and s.is_error for s in steps)
