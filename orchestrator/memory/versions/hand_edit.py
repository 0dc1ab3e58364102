"""A person's edit of an agent's ``MEMORY.md`` (``arena memory-md set``, the web's agent page):
saved atomically as a new version with trigger ``"hand edit"`` and who made it, only if the
file is still at the version the edit started from (no lost update), and only if it passes the
rules a distilled ``MEMORY.md`` must pass: no credential, no forbidden character, no memory
marker, within ``ARENA_DISTILL_BUDGET_TOKENS``. Refusals and conflicts are kept in the growth
log as attempts (their reasons, never the text). Blocking: call it from a thread.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from pathlib import Path

from orchestrator.core.agents import workspace_dir
from orchestrator.core.markers import parse_markers
from orchestrator.core.validation import character_problem
from orchestrator.errors import ValidationError
from orchestrator.memory.gate.secrets import find_secret
from orchestrator.memory.versions.file import VersionedFile
from orchestrator.memory.versions.store import Version, VersionStore

__all__ = [
    "HAND_EDIT",
    "MEMORY_FILE",
    "HandEditConflict",
    "HandEditRefused",
    "hand_edit_problem",
    "memory_md_file",
    "save_hand_edit",
]

HAND_EDIT = "hand edit"
MEMORY_FILE = "MEMORY.md"


class HandEditConflict(ValidationError):
    """The file is no longer at the version the edit started from."""

    def __init__(self, owner: str, base: int, current: int) -> None:
        self.current = current
        super().__init__(
            "base_version",
            f"{owner}'s MEMORY.md is at version {current}, not {base}: it changed since it "
            "was read; read it again and redo the edit",
        )


class HandEditRefused(ValidationError):
    """The text breaks a rule of ``MEMORY.md``; ``reason`` says which."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__("text", reason)


def memory_md_file(
    store: VersionStore, workspaces: Path, agent_id: str, count: Callable[[str], int]
) -> VersionedFile:
    """The versioned ``MEMORY.md`` of ``agent_id``.

    Raises:
        ValidationError: the id is not valid or its folder would lie outside ``workspaces``.
    """
    folder = workspace_dir(workspaces, agent_id)
    return VersionedFile(store, "memory_md", agent_id, folder / MEMORY_FILE, count)


def hand_edit_problem(text: str, budget_tokens: int, count: Callable[[str], int]) -> str | None:
    """Why ``text`` may not become ``MEMORY.md``, or None when it may."""
    kind = find_secret(text)
    if kind is not None:
        return f"secret: looks like a credential ({kind}); keep credentials out of memory"
    problem = character_problem(text)
    if problem is not None:
        return f"control_character: {problem}"
    parsed = parse_markers(text)
    found = len(parsed.markers) + len(parsed.invalid)
    if found:
        return f"markers: the text carries {found} memory marker{'s' if found > 1 else ''}"
    tokens = count(text)
    if tokens > budget_tokens:
        return f"too_long: {tokens} tokens, over the budget of {budget_tokens}"
    return None


def save_hand_edit(
    file: VersionedFile,
    text: str,
    *,
    base_version: int,
    by: str,
    now: datetime,
    budget_tokens: int,
) -> Version:
    """Save ``text`` as the next version of ``file`` if it is still at ``base_version``
    (0: it has none yet).

    A change made on disk since the latest version is first recorded as a version of its own,
    so an edit that started before it conflicts rather than overwrites it.

    Raises:
        HandEditConflict: the file is at another version (or changed while saving).
        HandEditRefused: the text breaks a rule, or changes nothing.
    """
    source = {"by": by}
    file.sync(now)
    latest = file.store.latest(file.kind, file.owner)
    current = latest.version if latest else 0
    if current != base_version:
        reason = f"edit of version {base_version}; the file is at {current}"
        file.note("conflict", reason, trigger=HAND_EDIT, now=now, source=source)
        raise HandEditConflict(file.owner, base_version, current)
    problem = hand_edit_problem(text, budget_tokens, file.count)
    if problem is None and latest is not None and latest.text == text:
        problem = f"unchanged: the text is version {current}'s"
    if problem is not None:
        file.note("rejected", problem, trigger=HAND_EDIT, now=now, source=source)
        raise HandEditRefused(problem)
    expected = latest.text if latest else ""
    version = file.replace(expected, text, trigger=HAND_EDIT, now=now, source=source)
    if version is None:
        reason = "the file changed while the edit was saved"
        file.note("conflict", reason, trigger=HAND_EDIT, now=now, source=source)
        raise HandEditConflict(file.owner, base_version, current + 1)
    return version
