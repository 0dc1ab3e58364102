"""Approvals as values: what a run must ask the person before doing, what exactly it asks,
the binding that ties a decision to exactly that request, and the patterns "always" stores.

No I/O: whether a path lies inside the run's folders is the caller's to say (``outside``).

What is asked (:func:`ask_reason`):

- a ``Bash`` command that deletes (``rm``, ``rmdir``, ``unlink``, ``shred``, ``git rm``,
  ``git clean``, ``find … -delete``) or pushes (``git push``);
- a ``Bash`` command one of whose simple commands is on neither the profile's list of commands
  (:data:`COMMANDS`, or the agent's ``code.commands``) nor the agent's allow-list;
- a command or a file edit naming a path outside the agent's workspace and the project;
- a run that would go past a daily cap (kind ``cap``, asked before it starts).

A pattern the person allowed "always" is never broader than what the card showed: a
deletion, a push, a path outside or a command line with shell operators is allowed exactly;
another command by its program and subcommand (``npm install *``); a file by its path.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

__all__ = [
    "COMMANDS",
    "DECIDED",
    "EDIT_TOOLS",
    "PROJECT",
    "STATES",
    "ApprovalKind",
    "ApprovalState",
    "Ask",
    "allowed_by",
    "always_pattern",
    "ask_reason",
    "awaiting_message",
    "binding",
    "command_risk",
    "decision_message",
    "describe_ask",
    "normalise",
    "parse_pattern",
    "simple_commands",
]

PROJECT = "$PROJECT"
ApprovalKind = Literal["tool", "cap"]
ApprovalState = Literal["pending", "approved", "denied", "expired", "cancelled", "orphaned"]
STATES: tuple[ApprovalState, ...] = (
    "pending",
    "approved",
    "denied",
    "expired",
    "cancelled",
    "orphaned",
)
DECIDED: tuple[ApprovalState, ...] = ("approved", "denied", "expired", "cancelled", "orphaned")
EDIT_TOOLS = ("Write", "Edit", "MultiEdit", "NotebookEdit")

# The commands a profile runs without asking (each a pattern: ``word`` exactly, ``word *`` with
# anything after). Everything else is asked.
_LOOKING = ("cd *", "ls", "ls *", "pwd", "cat *", "head *", "tail *", "wc *", "grep *",
            "find *", "echo *", "printf *", "diff *", "true", "test *", "which *")  # fmt: skip
_RUNNING = ("python *", "python3 *", "pytest", "pytest *", "node *", "npm test", "npm test *",
            "make test", "git status", "git status *", "git diff", "git diff *", "git log",
            "git log *", "git show *")  # fmt: skip
_MAKING = ("mkdir *", "touch *", "cp *", "mv *", "sed *", "git add *", "git commit *",
           "npm run *", "make", "make *")  # fmt: skip
COMMANDS: Mapping[str, tuple[str, ...]] = {
    "reader": (),
    "tester": (*_LOOKING, *_RUNNING),
    "editor": (*_LOOKING, *_RUNNING, *_MAKING),
}

_REDIRECT_RE = re.compile(r"[<>]+&?|&>+")
_GIT_OPTIONS_WITH_VALUES = frozenset({"-C", "-c", "--git-dir", "--work-tree", "--namespace"})
_OPERATORS = re.compile(r"[;&|<>`\n]|\$\(")
_DELETERS = frozenset({"rm", "rmdir", "unlink", "shred"})
_PATTERN = re.compile(r"^(?P<tool>[A-Za-z][A-Za-z0-9_]*)\((?P<spec>.+)\)$", re.DOTALL)


@dataclass(frozen=True, slots=True, kw_only=True)
class Ask:
    """What a run asks: the tool and its full input (or, for a cap, what it would spend), the
    working directory, a preview (an edit's new text), why (the agent's last words) and the
    pattern "always" would allow (None: only once)."""

    kind: ApprovalKind
    tool: str
    input: Mapping[str, Any]
    cwd: str
    reason: str
    preview: str = ""
    pattern: str | None = None


def binding(run_id: str, ask: Ask) -> str:
    """A digest over exactly what is asked, in which run: a changed request is a new request.
    A command's ``description`` (the model's label for it) is left out."""
    meant = {k: v for k, v in ask.input.items() if k != "description"}
    canonical = json.dumps(
        [run_id, ask.kind, ask.tool, meant, ask.cwd], sort_keys=True, ensure_ascii=False
    )
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def simple_commands(command: str) -> list[list[str]]:
    """A command line's simple commands, each as its words (split at ``;``, ``&&``, ``||``,
    ``|``, ``&`` and new lines; redirections dropped with their target). Unreadable quoting:
    the whole line as one command of whitespace-split words."""
    try:
        lexer = shlex.shlex(command, posix=True, punctuation_chars=";&|()<>")
        lexer.whitespace_split = True
        words = list(lexer)
    except ValueError:
        return [command.split()]
    commands: list[list[str]] = [[]]
    redirect = False
    for at, word in enumerate(words):
        after = words[at + 1] if at + 1 < len(words) else ""
        if set(word) <= set(";&|()\n"):
            commands.append([])
            redirect = False
        elif _REDIRECT_RE.fullmatch(word):
            redirect = True
        elif redirect:
            redirect = False  # the redirection's target (a file, or ``1`` of ``>&1``)
        elif word.isdigit() and _REDIRECT_RE.fullmatch(after):
            continue  # the stream a redirection is of: ``2`` of ``2>&1``
        else:
            commands[-1].append(word)
    return [c for c in commands if c]


def _program(words: Sequence[str]) -> list[str]:
    """A simple command's words from its program on (``VAR=value`` assignments dropped)."""
    at = 0
    while at < len(words) and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[at]):
        at += 1
    return list(words[at:])


def command_risk(command: str) -> str | None:
    """What makes a command line risky: it deletes files or pushes; None otherwise."""
    for words in simple_commands(command):
        argv = _program(words)
        if not argv:
            continue
        program = argv[0].rsplit("/", 1)[-1]
        if program in _DELETERS:
            return "deletes files"
        if program == "find" and "-delete" in argv:
            return "deletes files"
        if program == "git" and len(argv) > 1:
            sub = _git_subcommand(argv[1:])
            if sub in ("rm", "clean"):
                return "deletes files"
            if sub == "push":
                return "pushes"
    return None


def _git_subcommand(words: Sequence[str]) -> str:
    """git's subcommand among its words (``-C path`` and the like skipped)."""
    skip = False
    for word in words:
        if skip:
            skip = False
        elif word in _GIT_OPTIONS_WITH_VALUES:
            skip = True
        elif not word.startswith("-"):
            return word
    return ""


def _matches(entry: str, words: Sequence[str]) -> bool:
    """Whether a simple command (its words) fits a command pattern (``word``, ``word *``)."""
    line = " ".join(words)
    if entry.endswith(" *"):
        stem = entry[:-2]
        return line == stem or line.startswith(stem + " ")
    return line == entry


def parse_pattern(pattern: str) -> tuple[str, str] | None:
    """``Tool(spec)`` as its tool and spec; None when it is not one."""
    found = _PATTERN.match(pattern.strip())
    return (found["tool"], found["spec"]) if found else None


def allowed_by(patterns: Sequence[str], tool: str, data: Mapping[str, Any]) -> str | None:
    """The first stored pattern (``Bash(git push *)``, ``Write(/abs/path)``) that allows this
    call, else None. A command with shell operators is allowed only by its exact line."""
    for pattern in patterns:
        parsed = parse_pattern(pattern)
        if parsed is None or parsed[0] != tool:
            continue
        spec = parsed[1]
        if tool == "Bash":
            command = str(data.get("command", "")).strip()
            if command == spec:
                return pattern
            if _OPERATORS.search(command) or not spec.endswith(" *"):
                continue
            try:
                words = shlex.split(command)
            except ValueError:
                continue
            if _matches(spec, words):
                return pattern
        elif spec == _path_of(data):
            return pattern
    return None


def _path_of(data: Mapping[str, Any]) -> str:
    for key in ("file_path", "notebook_path", "path"):
        value = data.get(key)
        if isinstance(value, str) and value:
            return value
    return ""


def ask_reason(
    tool: str,
    data: Mapping[str, Any],
    *,
    commands: Sequence[str],
    allowed: Sequence[str],
    outside: str | None,
) -> str | None:
    """Why this tool call must be asked (None: it runs without asking).

    Args:
        tool: the tool's name.
        data: its input.
        commands: the command patterns the agent runs without asking (its profile's or its own).
        allowed: the agent's allow-list (patterns the person allowed "always").
        outside: the first path the call names outside the workspace and the project (the
            caller resolved it), else None.
    """
    if allowed_by(allowed, tool, data) is not None:
        return None
    if outside is not None:
        return f"names {outside}, outside the workspace and the project"
    if tool != "Bash":
        return None
    command = str(data.get("command", ""))
    risk = command_risk(command)
    if risk is not None:
        return risk
    for words in simple_commands(command):
        argv = _program(words)
        if argv and not any(_matches(entry, argv) for entry in commands):
            return f"runs {argv[0]}, which is not on the list of commands it runs unasked"
    return None


def always_pattern(tool: str, data: Mapping[str, Any], *, risky: bool) -> str | None:
    """The pattern "always" would store for this call, never broader than the call: a risky
    call, or one with shell operators, exactly; another command by its program and first
    subcommand (``npm install *``); a file by its path. None when nothing fits."""
    if tool == "Bash":
        command = str(data.get("command", "")).strip()
        if not command:
            return None
        try:
            words = _program(shlex.split(command))
        except ValueError:
            return f"Bash({command})"
        if risky or _OPERATORS.search(command) or not words:
            return f"Bash({command})"
        stem = words[:1]
        if len(words) > 1 and re.fullmatch(r"[a-z][a-z0-9_-]*", words[1]):
            stem = words[:2]
        if stem == words:
            return f"Bash({command})"
        return f"Bash({' '.join(stem)} *)"
    path = _path_of(data)
    return f"{tool}({path})" if path else None


def normalise(tool: str, data: Mapping[str, Any], project: str) -> dict[str, Any]:
    """A call as the allow-list sees it: the run's own checkout of the project written
    ``$PROJECT`` (each run has its own), and a command's leading ``cd $PROJECT &&`` dropped,
    so "always" holds in later runs too."""

    def plain(value: Any) -> Any:
        return value.replace(project, PROJECT) if isinstance(value, str) and project else value

    normal = {key: plain(value) for key, value in data.items()}
    if tool == "Bash":
        command = str(normal.get("command", "")).strip()
        normal["command"] = re.sub(rf"^cd {re.escape(PROJECT)}/?\s*(?:&&|;)\s*", "", command)
    return normal


# A run's own checkout of the project: ``{data}/runs/{run}/project``.
_CHECKOUT_RE = re.compile(r"(?<![\w$])/\S*?/runs/[a-z0-9-]+/project(?=[/\s;&|)]|$)")


def describe_ask(ask: Ask) -> str:
    """One line for what is asked: ``Bash: cd $PROJECT && rm -rf build``, ``Write
    /etc/motd``, or the cap (a run's own checkout written ``$PROJECT``)."""
    if ask.kind == "cap":
        return ask.reason
    if ask.tool == "Bash":
        line = f"Bash: {ask.input.get('command', '')}"
    else:
        line = f"{ask.tool} {_path_of(ask.input)}".strip()
    return _CHECKOUT_RE.sub(PROJECT, line)


# What the model is told: as a denied tool's result while the run goes on, or as the prompt
# of a run woken by the decision (the offline coder reads these back).
def awaiting_message(approval_id: str) -> str:
    """A tool's result when the run stops to wait for the person."""
    return (
        f"Awaiting approval {approval_id}: the person has not answered yet. Do not retry it or "
        f"work around it; end your turn saying you wait for approval {approval_id}."
    )


def decision_message(approval_id: str, state: str, by: str | None, note: str | None) -> str:
    """A decided request as the model reads it (a tool's result, or a woken run's prompt)."""
    if state == "approved":
        return f"Approval {approval_id} was approved by {by}. Run it now, exactly as asked."
    said = f" Note: {note.rstrip()}" if note else " No note."
    said += "" if said.endswith((".", "!", "?")) else "."
    if state == "denied":
        return f"Approval {approval_id} was denied by {by}.{said} Do not run it; answer the note."
    if state == "expired":
        return f"Approval {approval_id} expired unanswered: treat it as denied. Do not run it."
    return f"Approval {approval_id} was {state}. Do not run it."
