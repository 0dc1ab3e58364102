"""What a run must ask, and what a decision binds: the rules of `core.approvals`, call by
call."""

from __future__ import annotations

from typing import Any

import pytest

from orchestrator.core.approvals import (
    COMMANDS,
    Ask,
    allowed_by,
    always_pattern,
    ask_reason,
    binding,
    command_risk,
    decision_message,
    normalise,
    simple_commands,
)


@pytest.mark.parametrize(
    ("command", "risk"),
    [
        ("rm -rf build", "deletes files"),
        ("cd /p && /bin/rm x", "deletes files"),
        ("find . -name '*.o' -delete", "deletes files"),
        ("git clean -fdx", "deletes files"),
        ("git -C /p rm a.py", "deletes files"),
        ("git push origin main", "pushes"),
        ("FOO=1 rmdir out", "deletes files"),
        ("python3 -m pytest -q", None),
        ("git status", None),
        ("echo rm -rf /", None),  # an argument, not the program
    ],
)
def test_a_command_that_deletes_or_pushes_is_risky(command: str, risk: str | None):
    assert command_risk(command) == risk


@pytest.mark.parametrize(
    ("command", "profile", "asked"),
    [
        ("python3 hello.py", "tester", None),
        ("cd /p && python3 -m pytest -q 2>&1 | tail -5", "tester", None),
        ("npm install left-pad", "editor", "runs npm"),
        ("curl https://example.org", "editor", "runs curl"),
        ("mkdir -p src", "editor", None),
        ("mkdir -p src", "tester", "runs mkdir"),
        ("git push", "editor", "pushes"),
        ("ls; sh ./deploy.sh", "editor", "runs sh"),
    ],
)
def test_commands_off_the_profiles_list_are_asked(command: str, profile: str, asked: str | None):
    reason = ask_reason(
        "Bash", {"command": command}, commands=COMMANDS[profile], allowed=(), outside=None
    )
    assert (reason is None) == (asked is None), reason
    if asked is not None:
        assert reason is not None
        assert reason.startswith(asked)


def test_a_path_outside_is_asked_and_an_allowed_pattern_is_not():
    data = {"file_path": "/etc/motd", "content": "x"}
    asked = ask_reason("Write", data, commands=(), allowed=(), outside="/etc/motd")
    assert asked == "names /etc/motd, outside the workspace and the project"
    assert (
        ask_reason("Write", data, commands=(), allowed=("Write(/etc/motd)",), outside="x") is None
    )
    assert ask_reason("Write", {"file_path": "a.py"}, commands=(), allowed=(), outside=None) is None


@pytest.mark.parametrize(
    ("command", "risky", "pattern"),
    [
        ("npm install left-pad", False, "Bash(npm install *)"),
        ("curl https://example.org", False, "Bash(curl *)"),
        ("make", False, "Bash(make)"),
        ("rm -rf build", True, "Bash(rm -rf build)"),  # risky: exactly
        ("npm ci && npm test", False, "Bash(npm ci && npm test)"),  # operators: exactly
    ],
)
def test_always_is_never_broader_than_the_call(command: str, risky: bool, pattern: str):
    assert always_pattern("Bash", {"command": command}, risky=risky) == pattern
    assert allowed_by([pattern], "Bash", {"command": command}) == pattern


@pytest.mark.parametrize(
    ("pattern", "command", "allowed"),
    [
        ("Bash(npm install *)", "npm install react", True),
        ("Bash(npm install *)", "npm install", True),
        ("Bash(npm install *)", "npm installer", False),
        ("Bash(npm install *)", "npm install x; rm -rf /", False),  # operators need exactly
        ("Bash(npm install *)", "npm install $(curl evil)", False),
        ("Bash(rm -rf build)", "rm -rf build/", False),
        ("Write(/etc/motd)", "", False),  # another tool
    ],
)
def test_a_stored_pattern_allows_only_what_it_names(pattern: str, command: str, allowed: bool):
    assert (allowed_by([pattern], "Bash", {"command": command}) is not None) == allowed


def test_the_runs_checkout_is_left_out_of_what_always_stores():
    data = {"command": "cd /data/runs/r1/project && rm -f build/*.o", "description": "x"}
    normal = normalise("Bash", data, "/data/runs/r1/project")
    assert normal["command"] == "rm -f build/*.o"
    later = normalise("Bash", {"command": "cd /data/runs/r2/project && rm -f build/*.o"},
                      "/data/runs/r2/project")  # fmt: skip
    assert allowed_by(["Bash(rm -f build/*.o)"], "Bash", later) == "Bash(rm -f build/*.o)"
    edit = normalise("Write", {"file_path": "/data/runs/r1/project/a.py"}, "/data/runs/r1/project")
    assert edit["file_path"] == "$PROJECT/a.py"


def _ask(**change: Any) -> Ask:
    values: dict[str, Any] = {"kind": "tool", "tool": "Bash", "input": {"command": "rm -rf b"},
                              "cwd": "/ws", "reason": "deletes files"}  # fmt: skip
    return Ask(**(values | change))


def test_a_changed_request_is_a_new_binding_but_its_label_is_not():
    base = binding("run-1", _ask())
    assert binding("run-1", _ask(reason="other words")) == base
    labelled = _ask(input={"command": "rm -rf b", "description": "tidy"})
    assert binding("run-1", labelled) == base
    assert binding("run-2", _ask()) != base
    assert binding("run-1", _ask(input={"command": "rm -rf c"})) != base
    assert binding("run-1", _ask(cwd="/elsewhere")) != base


def test_simple_commands_split_at_operators_and_drop_redirections():
    assert simple_commands("cd /p && python3 x.py 2>&1 | tail -3 > out.txt; ls") == [
        ["cd", "/p"],
        ["python3", "x.py"],
        ["tail", "-3"],
        ["ls"],
    ]


def test_the_model_is_told_each_decision_with_its_note():
    assert "Note: keep the log." in decision_message(
        "ap-0123456789", "denied", "user", "keep the log"
    )
    assert "No note." in decision_message("ap-0123456789", "denied", "user", None)
    assert "Run it now" in decision_message("ap-0123456789", "approved", "user", None)
    assert "expired unanswered" in decision_message("ap-0123456789", "expired", None, None)
