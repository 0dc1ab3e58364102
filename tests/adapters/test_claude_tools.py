"""The arena's own tools in a Claude Code run: the real bundled CLI, driven by a local Messages
API, is offered ``mcp__arena__<name>``, calls it without asking, and the answer (or the error)
reaches the model's next request."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from orchestrator.adapters.claude_code import ClaudeCode, RunRequest, RunStep, bundled_cli
from orchestrator.adapters.claude_tools import ExtraTool
from orchestrator.adapters.messages_api import MessagesApiServer
from orchestrator.core.models import PROFILES, CodeSpec
from orchestrator.offline.coder import Text, ToolUse, Turn
from tests.arena_helpers import REPO

pytestmark = pytest.mark.skipif(bundled_cli() is None, reason="claude-agent-sdk is not installed")


async def _search(data: Mapping[str, Any]) -> str:
    if data.get("query") == "boom":
        raise ValueError("the index is unreachable")
    return (
        f"[docs/deploy.md#L3-5@0123456789ab] (trusted)\n> ship with make deploy ({data['query']})"
    )


SEARCH = ExtraTool(
    name="knowledge_search",
    description="Search the documents you may read.",
    schema={
        "type": "object",
        "properties": {"query": {"type": "string"}},
        "required": ["query"],
        "additionalProperties": False,
    },
    call=_search,
)


@pytest.mark.parametrize(
    ("query", "expected"),
    [("release", "ship with make deploy (release)"), ("boom", "the index is unreachable")],
)
async def test_a_run_calls_an_arena_tool_and_the_model_reads_its_answer(
    tmp_path: Path, query: str, expected: str
):
    offered: list[list[str]] = []
    results: list[str] = []

    def responder(request: Mapping[str, Any]) -> Turn:
        offered.append([tool["name"] for tool in request.get("tools", [])])
        last = request["messages"][-1]["content"]
        answers = (
            [b for b in last if b.get("type") == "tool_result"] if isinstance(last, list) else []
        )
        if answers:
            content = answers[0]["content"]
            results.append(content if isinstance(content, str) else content[0]["text"])
            return Turn(content=(Text(text="Found it."),), stop_reason="end_turn")
        call = ToolUse(id="toolu_1", name="mcp__arena__knowledge_search", input={"query": query})
        return Turn(content=(call,), stop_reason="tool_use")

    workspace, project = tmp_path / "ws", tmp_path / "project"
    workspace.mkdir()
    project.mkdir()
    steps: list[RunStep] = []

    async def on_step(step: RunStep) -> None:
        steps.append(step)

    with MessagesApiServer(responder) as server:
        request = RunRequest(
            prompt="how do we ship?",
            system="",
            workspace=workspace,
            project=project,
            config_dir=tmp_path / "config",
            model="claude-test",
            code=CodeSpec(profile="editor", tools=PROFILES["editor"]),
            api_key="test",
            base_url=server.base_url,
            tools=(SEARCH,),
        )
        outcome = await ClaudeCode(tmp_path / "launcher").run(request, on_step)
    assert "mcp__arena__knowledge_search" in offered[0]
    assert outcome.denials == ()
    assert len(results) == 1
    assert expected in results[0]
    assert outcome.text == "Found it."


@pytest.mark.parametrize("adapter", [True, False], ids=["with-adapter", "sdk-alone"])
def test_the_sdk_s_advisory_that_read_tools_skip_the_callback_is_silenced(adapter: bool):
    """The read tools run unasked by design: the SDK's warning of it (once per run, in the
    run worker's log) is silenced where the arena's runs are made, not elsewhere."""
    code = (
        ("import orchestrator.adapters.claude_code\n" if adapter else "")
        + "import warnings, claude_agent_sdk as sdk\n"
        + "warnings.warn('shadowed', sdk.CanUseToolShadowedWarning)\n"
    )
    done = subprocess.run(
        [sys.executable, "-W", "always", "-c", code],
        capture_output=True, text=True, timeout=60, check=True, cwd=REPO,
    )  # fmt: skip
    assert ("CanUseToolShadowedWarning" in done.stderr) is not adapter
