"""The values of the shared project's runs: a run's id and checkout, what finishing it came to,
the changes it made and the project's history as :mod:`orchestrator.adapters.project` reads it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from orchestrator.errors import ValidationError

__all__ = [
    "ARENA",
    "TRAILER_GROUP",
    "TRAILER_MESSAGE",
    "TRAILER_RUN",
    "Checkout",
    "DiffStat",
    "FileChange",
    "Finished",
    "ProjectCommit",
    "branch_of",
    "check_identity",
    "check_run_id",
    "check_trailer",
]

ARENA = ("arena", "arena@localhost")
"""The author of what the arena itself commits: a folder's files found, a revert."""

TRAILER_RUN = "Arena-Run"
TRAILER_GROUP = "Arena-Group"
TRAILER_MESSAGE = "Arena-Message"

_RUN_ID = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")


def check_run_id(run_id: str) -> str:
    """Return ``run_id`` if it can name a run's branch and folder, else refuse it.

    Raises:
        ValidationError: not ``[a-z0-9][a-z0-9._-]{0,63}``, or holding ``..``, or ending in
            ``.`` or ``.lock`` (git refuses such branch names).
    """
    if not _RUN_ID.fullmatch(run_id) or ".." in run_id or run_id.endswith((".", ".lock")):
        shown = repr(run_id) if len(run_id) <= 70 else repr(run_id[:70]) + "..."
        raise ValidationError(
            "run id",
            f"{shown} is not 1-64 of a-z 0-9 . _ - starting with a letter or digit"
            " (no '..', no trailing '.' or '.lock')",
        )
    return run_id


def branch_of(run_id: str) -> str:
    """The branch a run's changes are committed on."""
    return f"arena/{check_run_id(run_id)}"


def check_identity(name: str, email: str) -> tuple[str, str]:
    """An author's name and e-mail as git records them, or a refusal.

    Raises:
        ValidationError: either is empty or holds ``<``, ``>`` or a line break.
    """
    for what, value in (("author name", name), ("author email", email)):
        if not value.strip() or any(c in value for c in "<>\n\r\0"):
            raise ValidationError(what, f"{value!r} is empty or holds <, > or a line break")
    return name.strip(), email.strip()


def check_trailer(what: str, value: str) -> str:
    """A trailer's value, one non-empty line, or a refusal."""
    if not value.strip() or any(c in value for c in "\n\r\0"):
        raise ValidationError(what, f"{value!r} is empty or holds a line break")
    return value.strip()


@dataclass(frozen=True, slots=True, kw_only=True)
class Checkout:
    """A run's own checkout of the project: a git worktree on the branch ``arena/{run_id}``,
    made from the project's commit ``base``."""

    run_id: str
    path: Path
    base: str

    def __post_init__(self) -> None:
        check_run_id(self.run_id)

    @property
    def branch(self) -> str:
        """The run's branch."""
        return branch_of(self.run_id)


@dataclass(frozen=True, slots=True, kw_only=True)
class FileChange:
    """One file a run changed: lines added and removed (none counted for a binary file)."""

    path: str
    insertions: int
    deletions: int
    binary: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class DiffStat:
    """What ``git diff --stat`` says of a run's changes."""

    files: tuple[FileChange, ...] = ()

    @property
    def insertions(self) -> int:
        """Lines added, over every file."""
        return sum(f.insertions for f in self.files)

    @property
    def deletions(self) -> int:
        """Lines removed, over every file."""
        return sum(f.deletions for f in self.files)


@dataclass(frozen=True, slots=True, kw_only=True)
class Finished:
    """What finishing a run came to.

    ``changed``: the run changed the project, committed as ``commit`` on its branch.
    ``merged``: the project's checked-out branch now holds it, at ``merged_as`` (``commit``
    itself when fast-forwarded, else the merge commit). Not merged, ``reason`` says why in one
    line and ``branch`` names the branch kept for review.
    """

    run_id: str
    changed: bool
    merged: bool = False
    commit: str | None = None
    merged_as: str | None = None
    branch: str | None = None
    reason: str = ""
    stat: DiffStat = field(default_factory=DiffStat)

    def __post_init__(self) -> None:
        if self.merged and not (self.changed and self.merged_as):
            raise ValueError("a merged run has changes and the commit it was merged as")
        if self.changed and not self.merged and not (self.branch and self.reason):
            raise ValueError("a run changed but not merged keeps its branch, with the reason")


@dataclass(frozen=True, slots=True, kw_only=True)
class ProjectCommit:
    """One commit of the project's history: who made it, its subject and its trailers."""

    sha: str
    author_name: str
    author_email: str
    authored_at: datetime
    subject: str
    trailers: tuple[tuple[str, str], ...] = ()

    def trailer(self, key: str) -> str | None:
        """The value of the trailer ``key`` (``Arena-Group``, ...), if the commit has one."""
        return next((value for k, value in self.trailers if k.lower() == key.lower()), None)
