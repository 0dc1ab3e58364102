"""The offline model as a coding agent: the turns a Claude Code run gets without an API key.

:func:`next_turn` reads a Messages API request body, as the ``claude`` CLI sends it (``system``,
``messages`` with text, ``tool_use`` and ``tool_result`` blocks, ``tools``), and returns the
model's next :class:`Turn`: text, or one tool call. The same request gets the same turn; no I/O.

The task is the last user message written as text (not one carrying tool results), its
``<system-reminder>`` sections dropped: in a ``claude -p`` run, the prompt. The arena writes it
as a line ``Project: /absolute/path`` (the shared project) and the person's request; a file the
request names is relative to the project. The rules, the first that matches wins, case aside:

1. "create|write|add FILE that prints TEXT" (or "FILE printing TEXT") calls ``Write`` with
   ``PROJECT/FILE`` and a program printing TEXT (``print("TEXT")`` for ``.py``,
   ``console.log("TEXT");`` for ``.js``, ``echo 'TEXT'`` for ``.sh``, the text itself for any
   other file); once the result is back: "Created FILE: it prints TEXT.". TEXT runs to the end
   of its line or sentence; quoted, to the closing quote.
2. "clean|empty|delete|remove the DIR folder|directory" calls ``Bash`` with
   ``cd PROJECT && rm -rf DIR`` (a deletion: the person is asked, see
   :mod:`orchestrator.offline.asking` for what follows a denial or a wait);
   "run the tests" calls ``Bash`` with ``cd PROJECT && python3 -m pytest -q``;
3. "check|verify|test|run FILE" calls ``Bash`` with ``cd PROJECT && python3 FILE`` (``node``
   for ``.js``, ``sh`` for ``.sh``, ``cat`` for any other file); after either, a text reports
   the exit code and the output;
4. anything else gets a short text answer and no tool call.

In a transcript (the arena's runs give the conversation, each message labelled
``[time sender (kind)]: ``), the request is the last message: what came before is not asked
again. A request that goes on "then ask @AGENT (or the AGENT) to check|verify|test|run it" hands the
turn on:
after a file was created, the text that ends the turn asks ``@AGENT`` to check that file.

A tool that the request's ``tools`` does not offer is never called: the answer says it is
missing, as it says when there is no ``Project:`` line or the file is not a relative path
inside the project. The turn ends after one tool call, once its result is back, with a text
reporting it; a ``tool_result`` with ``is_error`` makes that text say what failed.

A tool call comes after one line of text saying what it is for. Its id is ``toolu_offline_``
and 16 hex digits hashed from the task and the step, so a turn replayed keeps its ids. Quoted
output loses its ``@`` and its marker-shaped text (as the chat model's replies do), so a
program's output can neither hand the turn on nor save a memory. The text that ends the turn
carries the chat model's markers for the request (:func:`orchestrator.offline.model.markers`):
a decision, requirement, task or lesson in it is saved as from any reply.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from orchestrator.core.markers import neutralise
from orchestrator.offline.asking import Retry, after_result, on_wake
from orchestrator.offline.model import markers

__all__ = ["Block", "StopReason", "Text", "ToolUse", "Turn", "next_turn"]

StopReason = Literal["tool_use", "end_turn"]

_REMINDER_RE = re.compile(r"<system-reminder>.*?</system-reminder>", re.DOTALL)
_PROJECT_RE = re.compile(r"^[ \t]*Project:[ \t]*(?P<path>\S[^\n]*?)[ \t]*$", re.MULTILINE)
_FILE = r"(?P<file>[\w.-]+(?:/[\w.-]+)*\.\w+)"
_CREATE_RE = re.compile(
    r"\b(?:create|write|add)\s+(?:an?\s+|the\s+)?(?:(?:new\s+)?(?:file|script|program)\s+)?"
    rf"(?:called\s+|named\s+)?{_FILE}\s+(?:that\s+prints|which\s+prints|printing|to\s+print)"
    r"\s+(?P<text>[^\n]+)",
    re.IGNORECASE,
)
_CLEAN_RE = re.compile(
    r"\b(?:clean|empty|delete|remove)\s+(?:out\s+|up\s+)?(?:the\s+)?"
    r"(?P<dir>[\w.-]+(?:/[\w.-]+)*)\s+(?:folder|directory|dir)\b",
    re.IGNORECASE,
)
_TESTS_RE = re.compile(r"\brun\s+(?:all\s+)?(?:the\s+)?(?:unit\s+)?tests\b(?!\.?\w)", re.IGNORECASE)
_RUN_RE = re.compile(
    rf"\b(?:check|verify|test|run)\s+(?:the\s+)?(?:(?:file|script|program)\s+)?{_FILE}(?![\w/])",
    re.IGNORECASE,
)
_LABEL_RE = re.compile(r"^\[[^\]\n]*\((?:human|agent)\)\]: ", re.MULTILINE)
_HANDOFF_RE = re.compile(
    r"\bthen\s+ask\s+(?:@|the\s+)(?P<agent>[\w-]+)\s+to\s+(?P<verb>check|verify|test|run)\b",
    re.IGNORECASE,
)
_QUOTES = {'"': '"', "'": "'", "`": "`", "\u201c": "\u201d", "\u2018": "\u2019"}
_RUNNERS = {".py": "python3", ".js": "node", ".sh": "sh"}
_OUTPUT_LIMIT = 500
_HELP = (
    "[offline] No model is configured (set ANTHROPIC_API_KEY), so this offline coding agent "
    'only creates a file that prints a text ("create hello.py that prints hello"), runs a file '
    '("check hello.py") or runs the tests ("run the tests") in the project.'
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Text:
    """A text block of the model's answer."""

    text: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolUse:
    """A ``tool_use`` block: the model calls tool ``name`` with ``input``."""

    id: str
    name: str
    input: Mapping[str, Any] = field(default_factory=dict)


Block = Text | ToolUse


@dataclass(frozen=True, slots=True, kw_only=True)
class Turn:
    """The model's next message: its content blocks and why it stopped."""

    content: tuple[Block, ...]
    stop_reason: StopReason

    def __post_init__(self) -> None:
        if not self.content:
            raise ValueError("a turn has at least one content block")
        calls = any(isinstance(block, ToolUse) for block in self.content)
        if calls != (self.stop_reason == "tool_use"):
            raise ValueError("a turn stops for tool_use exactly when it calls a tool")


@dataclass(frozen=True, slots=True, kw_only=True)
class _Step:
    """One tool call made for the task, and what came back."""

    call: ToolUse
    result: str
    is_error: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class _Task:
    text: str
    position: int  # the task message's index, part of the tool ids' hash
    steps: tuple[_Step, ...]


def next_turn(request: Mapping[str, Any]) -> Turn:
    """The offline coding agent's next turn for a Messages API request body.

    Args:
        request: The body the CLI posted to ``/v1/messages``.

    Returns:
        The text or the tool call the rules in the module docstring give.
    """
    messages = request.get("messages", [])
    task = _task(messages)
    offered = {str(tool.get("name")) for tool in request.get("tools", []) if isinstance(tool, dict)}
    tried = [step.call.input for step in task.steps]
    if task.steps:
        last = task.steps[-1]
        follow = after_result(last.call.name, last.call.input, last.result, tried)
        if isinstance(follow, Retry):
            return _call(task, follow.tool, follow.input, follow.intro)
        text = follow if follow is not None and last.is_error else _report(task, last)
    elif isinstance(woken := on_wake(task.text, messages, tried), Retry):
        return _call(task, woken.tool, woken.input, woken.intro)
    elif woken is not None:
        text = woken
    elif isinstance(move := _first_move(task, offered), Turn):
        return move
    else:
        text = move
    memory, personal = markers(_request(task.text))
    return Turn(content=(Text(text="\n".join([text, *memory, *personal])),), stop_reason="end_turn")


@dataclass(frozen=True, slots=True, kw_only=True)
class _Plan:
    """What a task asks for: the tool, what for, the file it names and the call's input."""

    tool: str
    purpose: str
    file: str
    printed: str = ""
    folder: str = ""  # a folder to clean

    def input(self, root: str) -> dict[str, Any]:
        if self.tool == "Write":
            return {
                "file_path": f"{root.rstrip('/')}/{self.file}",
                "content": _program(self.file, self.printed),
            }
        if self.folder:
            command = f"rm -rf {shlex.quote(self.folder)}"
        elif self.file:
            runner = _RUNNERS.get(_suffix(self.file), "cat")
            command = f"{runner} {shlex.quote(self.file)}"
        else:
            command = "python3 -m pytest -q"
        return {"command": f"cd {shlex.quote(root)} && {command}", "description": self.purpose}


def _request(text: str) -> str:
    """The request in a task: the last labelled message of a transcript, else all of it."""
    request = _PROJECT_RE.sub("", text)
    labels = list(_LABEL_RE.finditer(request))
    return request[labels[-1].end() :] if labels else request


def _plan(text: str) -> _Plan | None:
    """What the request asks for (the rules of the module docstring), or None."""
    request = _request(text)
    if (create := _CREATE_RE.search(request)) is not None:
        name = create["file"]
        return _Plan(tool="Write", purpose=f"create {name}", file=name, printed=_printed(create))
    if (clean := _CLEAN_RE.search(request)) is not None:
        folder = clean["dir"]
        return _Plan(tool="Bash", purpose=f"clean {folder}", file="", folder=folder)
    if _TESTS_RE.search(request) is not None:
        return _Plan(tool="Bash", purpose="run the tests", file="")
    if (run := _RUN_RE.search(request)) is not None:
        return _Plan(tool="Bash", purpose=f"run {run['file']}", file=run["file"])
    return None


def _first_move(task: _Task, offered: set[str]) -> Turn | str:
    """The tool call that starts the task, or the text that answers it."""
    plan = _plan(task.text)
    if plan is None:
        return _HELP
    if plan.tool not in offered:
        return f"I cannot {plan.purpose}: the {plan.tool} tool is not available to me."
    project = _PROJECT_RE.search(task.text)
    if project is None:
        return f"I cannot {plan.purpose}: the request names no project (a line Project: /path)."
    root = project["path"].rstrip("/") or "/"
    if not root.startswith("/"):
        return f"I cannot {plan.purpose}: the project {root} is not an absolute path."
    if ".." in plan.file.split("/") or ".." in plan.folder.split("/"):
        return f"I cannot {plan.purpose}: {plan.file} is not a path inside the project."
    intro = f"I'll {plan.purpose} in {root}."
    return _call(task, plan.tool, plan.input(root), intro)


def _report(task: _Task, step: _Step) -> str:
    """The text that ends the turn, from the last tool call and its result."""
    output = _quote(step.result)
    if step.call.name == "Write":
        name = str(step.call.input.get("file_path", "")).rsplit("/", 1)[-1]
        if step.is_error:
            return f"Writing {name} failed: {output}"
        plan = _plan(task.text)
        printed = f": it prints {_clean(plan.printed)}" if plan and plan.printed else ""
        handoff = _HANDOFF_RE.search(_request(task.text))
        ask = f"\n\n@{handoff['agent']} please {handoff['verb'].lower()} {name}." if handoff else ""
        return f"Created {name}{printed}.{ask}"
    command = _clean(str(step.call.input.get("command", "")))
    if step.is_error:
        return f"Running `{command}` failed: {output}"
    if not output:
        return f"Ran `{command}`: exit code 0, no output."
    return f"Ran `{command}`: exit code 0, output:\n{output}"


def _task(messages: Any) -> _Task:
    """The last text the user wrote, and the tool calls made for it since."""
    position, text = -1, ""
    for index, message in enumerate(messages):
        if _role(message) != "user" or _has(message, "tool_result"):
            continue
        written = _REMINDER_RE.sub("", _texts(message)).strip()
        if written:
            position, text = index, written
    calls: dict[str, ToolUse] = {}
    steps: list[_Step] = []
    for message in messages[position + 1 :]:
        for block in _blocks(message):
            if block.get("type") == "tool_use":
                call_id = str(block.get("id", ""))
                data = block.get("input")
                calls[call_id] = ToolUse(
                    id=call_id,
                    name=str(block.get("name", "")),
                    input=data if isinstance(data, dict) else {},
                )
            elif block.get("type") == "tool_result" and block.get("tool_use_id") in calls:
                call = calls[block["tool_use_id"]]
                result = _texts({"content": block.get("content", "")})
                steps.append(_Step(call=call, result=result, is_error=bool(block.get("is_error"))))
    return _Task(text=text, position=position, steps=tuple(steps))


def _call(task: _Task, tool: str, data: Mapping[str, Any], intro: str) -> Turn:
    seed = f"{task.position}\n{len(task.steps)}\n{task.text}"
    call_id = "toolu_offline_" + hashlib.sha256(seed.encode()).hexdigest()[:16]
    call = ToolUse(id=call_id, name=tool, input=dict(data))
    blocks: tuple[Block, ...] = (Text(text=intro), call) if intro else (call,)
    return Turn(content=blocks, stop_reason="tool_use")


def _printed(create: re.Match[str]) -> str:
    """TEXT of "prints TEXT": up to its closing quote, else to the end of the sentence."""
    raw = create["text"].strip()
    close = _QUOTES.get(raw[:1])
    if close is not None and close in raw[1:]:
        return raw[1 : raw.index(close, 1)]
    sentence = re.split(r"[.;]\s|,?\s+(?:and\s+)?then\b", raw, maxsplit=1)[0]
    return sentence.rstrip(". ").strip() or raw


def _program(name: str, text: str) -> str:
    suffix = _suffix(name)
    if suffix == ".py":
        return f"print({json.dumps(text, ensure_ascii=False)})\n"
    if suffix == ".js":
        return f"console.log({json.dumps(text, ensure_ascii=False)});\n"
    if suffix == ".sh":
        return f"#!/bin/sh\necho {shlex.quote(text)}\n"
    return f"{text}\n"


def _suffix(name: str) -> str:
    return "." + name.rsplit(".", 1)[-1].lower()


def _role(message: Any) -> str:
    return str(message.get("role", "")) if isinstance(message, dict) else ""


def _blocks(message: Any) -> list[dict[str, Any]]:
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [block for block in content or [] if isinstance(block, dict)]


def _has(message: Any, kind: str) -> bool:
    return any(block.get("type") == kind for block in _blocks(message))


def _texts(message: Any) -> str:
    return "\n".join(str(b.get("text", "")) for b in _blocks(message) if b.get("type") == "text")


def _clean(text: str) -> str:
    """Text safe to repeat in a reply: no ``@`` to start a mention, no marker."""
    return neutralise(text.replace("@", ""))


def _quote(output: str) -> str:
    quoted = _clean(_REMINDER_RE.sub("", output).strip())
    if quoted == "(Bash completed with no output)":  # what the CLI says for none
        return ""
    if len(quoted) > _OUTPUT_LIMIT:
        quoted = quoted[: _OUTPUT_LIMIT - 1] + "\u2026"
    return quoted
