"""The offline coder and the person's approvals: how it answers a call that was denied,
awaits a decision, or comes back decided (the messages of
:func:`orchestrator.core.approvals.awaiting_message` and
:func:`~orchestrator.core.approvals.decision_message`). No I/O.

- A call awaiting approval ends the turn: "I'm waiting for approval ap-…".
- Denied with a note that names what may go instead — a glob (``build/*.o``, ``*.tmp``) or
  "the .o files" — the coder asks again, narrower: ``rm -f FOLDER/GLOB`` in the folder it was
  cleaning (once; denied again, it stops). Denied otherwise: it says it did not run the call,
  and quotes the note. Expired or withdrawn: it says it did not run it.
- Woken by a decision (the prompt is the decision): approved, it makes the awaited call again,
  exactly; denied or expired, as above.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["Retry", "after_result", "on_wake"]

_ID = r"(?P<id>ap-[0-9a-f]{10})"
_AWAITING_RE = re.compile(rf"Awaiting approval {_ID}")
_APPROVED_RE = re.compile(rf"Approval {_ID} was approved by (?P<by>\S+)\.")
_DENIED_RE = re.compile(
    rf"Approval {_ID} was denied by (?P<by>\S+)\.(?: Note: (?P<note>.*?)\.?)?(?: No note\.)?"
    r" Do not run it; answer the note\.",
    re.DOTALL,
)
_CLOSED_RE = re.compile(rf"Approval {_ID} (?:expired unanswered|was (?P<state>cancelled|orphaned))")
_GLOB_RE = re.compile(r"(?<![\w/.*-])((?:[\w.-]+/)*[\w.-]*\*[\w.*-]*)")
_EXT_RE = re.compile(r"(?<![\w])\.(\w{1,10}) files\b", re.IGNORECASE)
_CD_RE = re.compile(r"^cd (?P<root>\S+) && ")


@dataclass(frozen=True, slots=True, kw_only=True)
class Retry:
    """A call to make (again, or narrower), after the line that says why."""

    tool: str
    input: Mapping[str, Any]
    intro: str


def _command(call: Mapping[str, Any]) -> str:
    return str(call.get("command", ""))


def _narrower(call: Mapping[str, Any], note: str) -> Retry | None:
    """The cleaning the note allows instead, in the same folder; None when it names none."""
    command = _command(call)
    found = _CD_RE.match(command)
    if found is None:
        return None
    try:
        words = shlex.split(command[found.end() :])
    except ValueError:
        return None
    if not words or words[0] != "rm" or len(words) < 2:
        return None
    folder = words[-1].rstrip("/")
    glob = (found_glob := _GLOB_RE.search(note)) and found_glob.group(1)
    if not glob and (ext := _EXT_RE.search(note)) is not None:
        glob = f"*.{ext.group(1)}"
    if not glob or ".." in glob.split("/"):
        return None
    target = glob if "/" in glob else f"{folder}/{glob}"
    narrower = f"cd {found['root']} && rm -f {target}"
    if narrower == command:
        return None
    return Retry(
        tool="Bash",
        input={"command": narrower, "description": f"remove {target}"},
        intro=f"Understood. I'll only remove {target}.",
    )


def after_result(
    tool: str, call: Mapping[str, Any], result: str, tried: Sequence[Mapping[str, Any]]
) -> Retry | str | None:
    """What follows a call whose result is an approval's (None: it is not one)."""
    shown = f"`{_command(call)}`" if tool == "Bash" else f"{tool} {call.get('file_path', '')}"
    if (awaiting := _AWAITING_RE.search(result)) is not None:
        return f"I'm waiting for approval {awaiting['id']} to run {shown}."
    if (denied := _DENIED_RE.search(result)) is not None:
        note = (denied["note"] or "").strip()
        retry = _narrower(call, note) if note and len(tried) < 2 else None
        if retry is not None:
            return retry
        said = f' Your note: "{note}"' if note else ""
        return f"Understood: I did not run {shown} ({denied['id']} was denied).{said}"
    if (closed := _CLOSED_RE.search(result)) is not None:
        how = closed["state"] or "expired unanswered"
        return f"I did not run {shown}: approval {closed['id']} {how}."
    return None


def on_wake(
    prompt: str, messages: Sequence[Any], tried: Sequence[Mapping[str, Any]]
) -> Retry | str | None:
    """The turn of a run woken by a decision (``prompt``; None when it is no decision)."""
    found = _APPROVED_RE.search(prompt) or _DENIED_RE.search(prompt) or _CLOSED_RE.search(prompt)
    if found is None:
        return None
    awaited = _awaited(messages, found["id"])
    if awaited is None:
        return f"I have no call waiting for {found['id']}."
    tool, call = awaited
    if found.re is _APPROVED_RE:
        return Retry(tool=tool, input=call, intro=f"Approved ({found['id']}): running it now.")
    return after_result(tool, call, prompt, tried)


def _awaited(messages: Sequence[Any], approval_id: str) -> tuple[str, Mapping[str, Any]] | None:
    """The call whose result said it awaits ``approval_id``."""
    calls: dict[str, tuple[str, Mapping[str, Any]]] = {}
    found = None
    for message in messages:
        content = message.get("content") if isinstance(message, dict) else None
        for block in content if isinstance(content, list) else ():
            if not isinstance(block, dict):
                continue
            if block.get("type") == "tool_use":
                data = block.get("input")
                calls[str(block.get("id"))] = (
                    str(block.get("name", "")),
                    data if isinstance(data, dict) else {},
                )
            elif block.get("type") == "tool_result":
                text = _text(block.get("content"))
                if f"Awaiting approval {approval_id}" in text:
                    found = calls.get(str(block.get("tool_use_id")), found)
    return found


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""
