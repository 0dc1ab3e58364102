"""Agents that act: the ``runtime``/``code:`` fields of an agent file, when a turn becomes a
run, how a run's tool calls read on its card, and its steps on the wire and in order."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from orchestrator.core.agents import load_agents
from orchestrator.core.coding import Step, decide_run, describe_tool, in_order
from orchestrator.core.models import PROFILES, CodeSpec
from orchestrator.core.routing import RuleSet
from orchestrator.core.wire import Outbound
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


def _step(n: int, **extra: object) -> Step:
    fields = {"run": "1-0:1:developer", "n": n, "at": "2026-01-05T09:00:00+00:00", "kind": "tool"}
    return Step(**{**fields, "line": f"step {n}", **extra})  # type: ignore[arg-type]


def test_a_step_reads_back_from_its_stream_fields_and_is_json_with_types():
    """Stream fields are strings (no tool: empty, an error: true); the JSON keeps the types."""
    step = _step(3, kind="result", line="error: Exit code 1", tool="Bash", is_error=True)
    assert step.fields() == {
        "run": "1-0:1:developer", "n": "3", "at": "2026-01-05T09:00:00+00:00",
        "kind": "result", "line": "error: Exit code 1", "tool": "Bash", "is_error": "true",
    }  # fmt: skip
    assert Step.from_fields(step.fields()) == step
    text = _step(4, kind="text", line="Done.")
    assert text.fields()["tool"] == ""
    assert Step.from_fields(text.fields()) == text
    assert text.as_dict()["tool"] is None
    assert step.agent == "developer"
    assert Step.from_fields({"run": "r", "n": "x"}).n == 0  # what is unreadable is left empty


def _item(kind: str, item_id: str) -> Outbound:
    return Outbound(type=kind, id=item_id, group="g", in_reply_to="1-0")  # type: ignore[arg-type]


def test_steps_fall_between_their_card_and_their_reply_in_the_same_millisecond():
    """Ids tell only the millisecond across two streams: there, a card comes before the
    steps and a reply after; otherwise the earlier millisecond first."""
    card, reply, done = _item("notice", "c"), _item("reply", "r"), _item("done", "d")
    steps = [("5-0", _step(1)), ("5-1", _step(2)), ("7-0", _step(3))]
    merged = in_order([("5-0", card), ("5-1", reply), ("6-0", done)], steps, 100)
    assert [item for _, item in merged] == [
        card,
        steps[0][1],
        steps[1][1],
        reply,
        done,
        steps[2][1],
    ]


def test_a_full_read_leaves_the_other_streams_later_entries_for_the_next():
    """When one stream gave as many as asked, what the other gave after its last millisecond
    is left for the next read (which could bring earlier entries of the full one)."""
    steps = [("5-0", _step(1)), ("6-0", _step(2))]
    merged = in_order([("4-0", _item("reply", "a")), ("5-0", _item("reply", "b"))], steps, 2)
    assert [entry for entry, _ in merged] == ["4-0", "5-0", "5-0"]
