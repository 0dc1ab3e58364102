"""What a Claude Code run may touch: only paths inside the agent's personal workspace and the
run's checkout of the project. A ``PreToolUse`` hook (run by the SDK in this process) denies a
file tool's call on any other path, with the reason; the denial is the run's (it fails).

The file tools are checked by their path arguments, after ``..`` and symbolic links are
resolved. A ``Bash`` command line is checked word by word: a word that names a path outside
the roots (an absolute path, one under ``~``, or a relative one that climbs out of the working
directory with ``..``) denies the command; a command's program itself (``/usr/bin/env``) and
``/dev/null`` may be named. This keeps a run from wandering off by mistake; it is not a sandbox
(a command can still reach elsewhere through a variable or a script it writes), which is why
``Bash`` is given only to the editor and tester profiles.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import claude_agent_sdk as sdk

__all__ = ["FILE_TOOLS", "PathGuard"]

FILE_TOOLS = ("Read", "Write", "Edit", "MultiEdit", "NotebookEdit", "Glob", "Grep", "LS")
_PATH_KEYS = ("file_path", "notebook_path", "path")
# Words that end one simple command and start the next (whose first word is a program).
_SEPARATORS = frozenset({";", "&&", "||", "|", "&", "(", ")", "\n"})
_REDIRECTIONS = frozenset({">", ">>", "<", "<<", ">&", "&>", "<>", ">|", "2>", "2>>"})
_ANYWHERE = ("/dev/null", "/dev/stdout", "/dev/stderr", "/dev/stdin")


def _command_words(command: str) -> Iterator[str]:
    """The words of a command line that may name paths: every word but each simple command's
    program (and its variable assignments); for ``--flag=value`` and ``NAME=value``, the
    value. Unreadable quoting yields the line's whitespace-split words."""
    try:
        lexer = shlex.shlex(command, posix=True, punctuation_chars=";&|()<>")
        lexer.whitespace_split = True
        words = list(lexer)
    except ValueError:
        words = command.split()
    program_next = True
    for word in words:
        if word in _SEPARATORS or set(word) <= set(";&|()"):
            program_next = True
            continue
        if word in _REDIRECTIONS or set(word) <= set("<>&"):
            continue
        name, sep, value = word.partition("=")
        if sep and (name.startswith("-") or name.isidentifier()):
            yield value
            continue
        if program_next:
            program_next = False
            continue
        yield word


class PathGuard:
    """Denies file tools and commands outside ``roots``; keeps the tools it denied."""

    def __init__(self, roots: Sequence[Path], cwd: Path) -> None:
        self.roots = tuple(root.resolve() for root in roots)
        self.cwd = cwd
        self.denied: list[str] = []

    def outside(self, data: dict[str, Any]) -> str | None:
        """The first path argument of a tool call outside the roots, else None."""
        for key in _PATH_KEYS:
            value = data.get(key)
            if isinstance(value, str) and value and not self._inside(value):
                return value
        return None

    def outside_command(self, command: str) -> str | None:
        """The first word of a command line that names a path outside the roots, else None."""
        for word in _command_words(command):
            if word in _ANYWHERE:
                continue
            if word.startswith("~"):
                return word
            names_path = word.startswith("/") or ".." in Path(word).parts
            if names_path and not self._inside(word):
                return word
        return None

    def _inside(self, value: str) -> bool:
        path = Path(value)
        resolved = (path if path.is_absolute() else self.cwd / path).resolve()
        return any(resolved.is_relative_to(root) for root in self.roots)

    async def check(
        self, data: sdk.HookInput, _tool_use_id: str | None, _context: sdk.HookContext
    ) -> sdk.HookJSONOutput:
        """The hook: deny a file tool's call on a path outside the roots."""
        tool = str(data.get("tool_name", ""))
        arguments = data.get("tool_input")
        path = None
        if isinstance(arguments, dict):
            command = arguments.get("command")
            if tool == "Bash" and isinstance(command, str):
                path = self.outside_command(command)
            else:
                path = self.outside(arguments)
        if path is None:
            return {}
        self.denied.append(tool)
        reason = f"{path} is outside the agent's workspace and the project"
        return {
            "hookSpecificOutput": {
                "hookEventName": "PreToolUse",
                "permissionDecision": "deny",
                "permissionDecisionReason": reason,
            }
        }

    def hooks(self, only: Sequence[str] | None = None) -> dict[Any, list[sdk.HookMatcher]]:
        """The SDK's ``hooks`` option that runs this guard before every file tool and command
        (or only before the tools ``only`` names: the others are asked of the gate, which
        checks the same paths)."""
        tools = "|".join(only if only is not None else (*FILE_TOOLS, "Bash"))
        return {"PreToolUse": [sdk.HookMatcher(matcher=tools, hooks=[self.check])]}
