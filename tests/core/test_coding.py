"""Agents that act: the ``runtime``/``code:`` fields of an agent file, when a turn becomes a
run, and how a run's tool calls read on its card."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from orchestrator.core.agents import load_agents
from orchestrator.core.coding import decide_run, describe_tool
from orchestrator.core.models import PROFILES, CodeSpec
from orchestrator.core.routing import RuleSet
from orchestrator.errors import AgentDefinitionError

BASE = {"id": "developer", "name": "Developer", "role": "developer", "model": "claude-x"}


def _load(tmp_path: Path, **fields: object) -> object:
    (tmp_path / "developer.yaml").write_text(yaml.safe_dump({**BASE, **fields}), encoding="utf-8")
    (spec,) = load_agents(tmp_path)
    return spec


def test_an_agent_answers_through_the_messages_api_unless_it_says_otherwise(tmp_path: Path):
    """No runtime: the Messages API, no code settings, and no turn is ever a run."""
    spec = _load(tmp_path)
    assert spec.runtime == "messages"
    assert spec.code is None
    assert decide_run(spec.code, None, "implement it", spec.id).run is False


def test_claude_code_defaults_are_safe(tmp_path: Path):
    """runtime: claude-code alone reads (no edits), denies what it was not given, acts always."""
    spec = _load(tmp_path, runtime="claude-code")
    assert spec.code == CodeSpec(acts="always", tools=PROFILES["reader"])
    assert spec.code.refused_tools == ("WebFetch", "WebSearch", "AskUserQuestion")
    assert spec.code.edits is False
    assert decide_run(spec.code, None, "hello", spec.id).run is True


def test_code_rules_decide_which_turns_are_runs_and_say_why(tmp_path: Path):
    """With rules, a matching turn is a run (the rule and keyword named), others are replies."""
    rules = [{"name": "implement", "keywords": ["implement", "fix", "run the tests"]}]
    spec = _load(tmp_path, runtime="claude-code", code={"profile": "editor", "rules": rules})
    assert spec.code.acts == "rules"
    assert spec.code.edits is True
    compiled = RuleSet(spec.code.rules, spec.id)
    run = decide_run(spec.code, compiled, "please FIX the login bug", spec.id)
    assert run.run is True
    assert "implement" in run.why
    assert "fix" in run.why
    assert decide_run(spec.code, compiled, "could you run the tests?", spec.id).run is True
    talk = decide_run(spec.code, compiled, "what do you think of the design?", spec.id)
    assert talk.run is False
    assert talk.as_dict() == {"run": False, "why": "no code rule matched: a reply, not a run"}


def test_web_tools_only_when_listed_and_never_a_terminal_prompt(tmp_path: Path):
    """Listing WebFetch gives it; AskUserQuestion is refused with the reason."""
    spec = _load(tmp_path, runtime="claude-code", code={"tools": ["Read", "WebFetch"]})
    assert spec.code.tools == ("Read", "WebFetch")
    assert "WebFetch" not in spec.code.refused_tools
    with pytest.raises(AgentDefinitionError, match="code: AskUserQuestion is never given"):
        _load(tmp_path, runtime="claude-code", code={"tools": ["Read", "AskUserQuestion"]})


@pytest.mark.parametrize(
    ("fields", "field", "problem"),
    [
        ({"code": {"profile": "editor"}}, "code", "only read with runtime: claude-code"),
        ({"runtime": "claude-code", "code": {"profile": "admin"}}, "code.profile", ""),
        (
            {"runtime": "claude-code", "code": {"permission_mode": "bypassPermissions"}},
            "code.permission_mode",
            "",
        ),
        ({"runtime": "claude-code", "code": {"max_turns": 0}}, "code.max_turns", ""),
        ({"runtime": "claude-code", "code": {"wall_s": -1}}, "code.wall_s", ""),
        ({"runtime": "shell"}, "runtime", ""),
        (
            {"runtime": "claude-code", "code": {"rules": [{"keywords": ["x"], "agents": ["a"]}]}},
            "code.rules",
            "a run is the agent's own",
        ),
        (
            {"runtime": "claude-code", "code": {"rules": [{"patterns": ["("]}]}},
            "code.rules[0].patterns[0]",
            "invalid regular expression",
        ),
    ],
)
def test_bad_code_settings_name_the_field(tmp_path: Path, fields, field, problem):
    """Each mistake is refused naming the file and the field."""
    with pytest.raises(AgentDefinitionError) as caught:
        _load(tmp_path, **fields)
    message = str(caught.value)
    assert f": {field}:" in message
    assert problem in message


@pytest.mark.parametrize(
    ("name", "data", "line"),
    [
        ("Read", {"file_path": "/p/src/app.py"}, "Read src/app.py"),
        ("Write", {"file_path": "/elsewhere/x.py"}, "Write /elsewhere/x.py"),
        ("Bash", {"command": "cd /p &&\n  pytest -q"}, "Bash: cd /p && pytest -q"),
        ("Grep", {"pattern": "TODO"}, "Grep TODO"),
        ("Task", {"prompt": "x"}, "Task"),
    ],
)
def test_a_tool_call_reads_as_one_line(name, data, line):
    """Paths in the project read as the project's; commands on one line; others by name."""
    assert describe_tool(name, data, "/p") == line


def test_a_long_command_is_clipped():
    """A command longer than a card's line ends with an ellipsis."""
    line = describe_tool("Bash", {"command": "echo " + "x" * 500})
    assert len(line) == len("Bash: ") + 160
    assert line.endswith("…")
