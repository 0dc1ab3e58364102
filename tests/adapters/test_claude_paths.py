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


@pytest.mark.skipif(bundled_cli() is None, reason="claude-agent-sdk is not installed")
async def test_a_write_outside_the_project_is_denied_and_fails_the_run(tmp_path: Path):
    """The model asks to write a file outside both roots: the file is never written, the run
    is failed with the denied tool named, and its steps show the refusal."""
    outside = tmp_path / "outside.txt"
    workspace, project = tmp_path / "ws", tmp_path / "project"
    workspace.mkdir()
    project.mkdir()

    def responder(request: Mapping[str, Any]) -> Turn:
        last = request["messages"][-1]["content"]
        answered = isinstance(last, list) and any(b.get("type") == "tool_result" for b in last)
        if answered:
            return Turn(content=(Text(text="Done."),), stop_reason="end_turn")
        call = ToolUse(id="toolu_1", name="Write",
                       input={"file_path": str(outside), "content": "x\n"})  # fmt: skip
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
    assert "Write" in outcome.denials
    assert any(s.kind == "result" and s.is_error for s in steps)
