"""The offline coder and approvals: it asks narrower after a denial whose note says what may
go, says so after any other end, and makes the awaited call again once woken approved."""

from __future__ import annotations

from typing import Any

from orchestrator.core.approvals import awaiting_message, decision_message
from orchestrator.offline.coder import Text, ToolUse, next_turn

TASK = "Project: /p\n\n[12:00 user (human)]: @coder clean the build folder"
CALL = {"type": "tool_use", "id": "toolu_1", "name": "Bash",
        "input": {"command": "cd /p && rm -rf build", "description": "clean build"}}  # fmt: skip
APPROVAL = "ap-0123456789"


def _after(result: str, *later: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": TASK},
        {"role": "assistant", "content": [CALL]},
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_1",
                    "content": result,
                    "is_error": True,
                }
            ],
        },
        *later,
    ]


def _turn(messages: list[dict[str, Any]]) -> Any:
    return next_turn({"messages": messages, "tools": [{"name": "Bash"}]})


def _text(turn: Any) -> str:
    return " ".join(b.text for b in turn.content if isinstance(b, Text))


def test_the_first_move_cleans_the_folder_it_was_asked_to():
    turn = _turn([{"role": "user", "content": TASK}])
    (call,) = [b for b in turn.content if isinstance(b, ToolUse)]
    assert call.input["command"] == "cd /p && rm -rf build"


def test_a_denial_whose_note_names_what_may_go_is_asked_again_narrower():
    note = "keep the log, only remove the .o files"
    turn = _turn(_after(decision_message(APPROVAL, "denied", "user", note)))
    (call,) = [b for b in turn.content if isinstance(b, ToolUse)]
    assert call.input["command"] == "cd /p && rm -f build/*.o"
    glob = _turn(_after(decision_message(APPROVAL, "denied", "user", "only build/tmp/*")))
    assert [b.input["command"] for b in glob.content if isinstance(b, ToolUse)] == [
        "cd /p && rm -f build/tmp/*"
    ]


def test_any_other_end_is_said_and_nothing_more_is_run():
    denied = _turn(_after(decision_message(APPROVAL, "denied", "user", "not today")))
    assert denied.stop_reason == "end_turn"
    assert f'({APPROVAL} was denied). Your note: "not today"' in _text(denied)
    waiting = _turn(_after(awaiting_message(APPROVAL)))
    assert f"I'm waiting for approval {APPROVAL}" in _text(waiting)


def test_woken_approved_it_makes_the_awaited_call_again_and_expired_it_does_not():
    wake = {"role": "user", "content": decision_message(APPROVAL, "approved", "user", None)}
    turn = _turn(_after(awaiting_message(APPROVAL), {"role": "assistant", "content": [
        {"type": "text", "text": f"I'm waiting for approval {APPROVAL}."}]}, wake))  # fmt: skip
    (call,) = [b for b in turn.content if isinstance(b, ToolUse)]
    assert call.input == CALL["input"]
    expired = {"role": "user", "content": decision_message(APPROVAL, "expired", None, None)}
    told = _turn(_after(awaiting_message(APPROVAL), expired))
    assert told.stop_reason == "end_turn"
    assert f"approval {APPROVAL} expired unanswered" in _text(told)
