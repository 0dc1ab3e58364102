"""What a Claude Code run may touch: only paths inside the agent's personal workspace and the
run's checkout of the project. A ``PreToolUse`` hook (run by the SDK in this process) denies a
file tool's call on any other path, with the reason; the denial is the run's (it fails).

The file tools are checked by their path arguments, after ``..`` and symbolic links are
resolved. ``Bash`` is not: a command line is not a list of paths. It is given only to the
editor and tester profiles, and runs with the workspace and the project as its folders.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import claude_agent_sdk as sdk

__all__ = ["FILE_TOOLS", "PathGuard"]

FILE_TOOLS = ("Read", "Write", "Edit", "MultiEdit", "NotebookEdit", "Glob", "Grep", "LS")
_PATH_KEYS = ("file_path", "notebook_path", "path")


class PathGuard:
    """Denies file tools outside ``roots``; keeps the tools it denied."""

    def __init__(self, roots: Sequence[Path], cwd: Path) -> None:
        self.roots = tuple(root.resolve() for root in roots)
        self.cwd = cwd
        self.denied: list[str] = []

    def outside(self, data: dict[str, Any]) -> str | None:
        """The first path argument of a tool call outside the roots, else None."""
        for key in _PATH_KEYS:
            value = data.get(key)
            if not isinstance(value, str) or not value:
                continue
            path = Path(value)
            resolved = (path if path.is_absolute() else self.cwd / path).resolve()
            if not any(resolved.is_relative_to(root) for root in self.roots):
                return value
        return None

    async def check(
        self, data: sdk.HookInput, _tool_use_id: str | None, _context: sdk.HookContext
    ) -> sdk.HookJSONOutput:
        """The hook: deny a file tool's call on a path outside the roots."""
        tool = str(data.get("tool_name", ""))
        arguments = data.get("tool_input")
        path = self.outside(arguments) if isinstance(arguments, dict) else None
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

    def hooks(self) -> dict[Any, list[sdk.HookMatcher]]:
        """The SDK's ``hooks`` option that runs this guard before every file tool."""
        return {"PreToolUse": [sdk.HookMatcher(matcher="|".join(FILE_TOOLS), hooks=[self.check])]}
