"""The shared project's git repository, as :mod:`orchestrator.adapters.project` uses it: what
it reads (``HEAD``, the checked-out branch, a diff's stat, the history with its trailers) and
the few moves it makes on it (a first commit, a fast-forward of the person's checkout, a
worktree removed), with the lock that has them take turns.

Everything here blocks: call it through ``asyncio.to_thread`` from async code.
"""

from __future__ import annotations

import contextlib
from collections.abc import Collection, Iterator
from datetime import datetime
from pathlib import Path

from orchestrator.adapters.checkouts import ARENA, DiffStat, FileChange, ProjectCommit
from orchestrator.adapters.git import ANY_CODE, GitResult, git
from orchestrator.errors import ProjectError
from orchestrator.files import locked_folder

__all__ = ["Repository"]

_STARTED = "Start the project"
_LOG_FIELDS = "%H%x1f%an%x1f%ae%x1f%aI%x1f%s%x1f%(trailers:only,unfold)%x1e"


class Repository:
    """The git repository checked out at ``path`` (the person's checkout)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def git(
        self,
        *args: str,
        cwd: Path | None = None,
        identity: tuple[str, str] | None = None,
        stdin: str | None = None,
        ok: Collection[int] = (0,),
    ) -> GitResult:
        """Run ``git ARGS`` in the person's checkout, or in ``cwd`` (a run's worktree)."""
        return git(
            args, cwd=cwd or self.path, project=self.path, identity=identity, stdin=stdin, ok=ok
        )

    def error(self, problem: str) -> ProjectError:
        """The project's error for ``problem``."""
        return ProjectError(str(self.path), problem)

    def rev(self, name: str, *, cwd: Path | None = None) -> str | None:
        """The object ``name`` names (``HEAD``, ``refs/heads/x``, ``sha^{commit}``), if any."""
        found = self.git(
            "rev-parse", "-q", "--verify", "--end-of-options", name, cwd=cwd, ok=ANY_CODE
        )
        return (found.out.strip() or None) if found.code == 0 else None

    def head(self) -> str | None:
        """The commit checked out, None before the first commit."""
        return self.rev("HEAD^{commit}")

    def branch(self) -> str | None:
        """The checked-out branch, None when detached."""
        return self.git("symbolic-ref", "-q", "--short", "HEAD", ok=ANY_CODE).out.strip() or None

    def is_ancestor(self, older: str, newer: str) -> bool:
        """Whether ``older`` is ``newer`` or in its history."""
        return self.git("merge-base", "--is-ancestor", older, newer, ok=ANY_CODE).code == 0

    def fast_forward(self, target: str) -> GitResult:
        """Move the person's checkout to ``target``, whole or not at all: git refuses (a
        non-zero code) rather than overwrite a file the person changed, an untracked or an
        ignored one."""
        return self.git("merge", "-q", "--ff-only", "--no-overwrite-ignore", target, ok=ANY_CODE)

    def remove_worktree(self, where: Path) -> None:
        """Remove the worktree at ``where`` with what it holds uncommitted; forget it if it is
        gone already (a crash, a clean-up)."""
        if where.exists():
            self.git("worktree", "remove", "--force", str(where))
        else:
            self.git("worktree", "prune")

    def delete_branch(self, branch: str) -> None:
        """Delete ``branch``, merged or not."""
        self.git("branch", "-q", "-D", branch)

    def stat(self, base: str, tip: str) -> DiffStat:
        """What ``git diff --stat base tip`` says: files, lines added and removed."""
        out = self.git("diff", "--numstat", "-z", "--no-renames", base, tip, "--").out
        files = []
        for record in out.split("\0"):
            if record:
                added, removed, name = record.split("\t", 2)
                binary = added == "-"
                files.append(
                    FileChange(
                        path=name,
                        insertions=0 if binary else int(added),
                        deletions=0 if binary else int(removed),
                        binary=binary,
                    )
                )
        return DiffStat(files=tuple(files))

    def log(self, limit: int, ref: str) -> tuple[ProjectCommit, ...]:
        """The last ``limit`` commits of ``ref``, newest first."""
        if self.rev(f"{ref}^{{commit}}") is None:
            return ()
        out = self.git("log", f"-n{max(limit, 0)}", f"--format={_LOG_FIELDS}", ref, "--").out
        return tuple(_commit(record) for record in out.split("\x1e") if record.strip())

    def first_commit(self) -> None:
        """An empty first commit on the unborn branch, by the arena; the index and the files
        left as they are (a commit from the index would take in what a person staged)."""
        tree = self.git("mktree", stdin="").out.strip()
        first = self.git("commit-tree", tree, "-m", _STARTED, identity=ARENA).out.strip()
        self.git("update-ref", "HEAD", first, "")

    def refuse_enclosed(self) -> None:
        """Refuse a folder without ``.git`` that is part of another repository (its git
        folder, or a folder it tracks files in): a repository of its own there would hide
        them from that one."""
        inside = self.git("rev-parse", "--is-inside-git-dir", ok=ANY_CODE)
        if inside.code != 0:
            return  # in no repository
        if inside.out.strip() == "true":
            raise self.error("lies inside a git repository's own folder")
        if self.git("ls-files", "-z", "--", ".").out:
            top = self.git("rev-parse", "--show-toplevel").out.strip()
            raise self.error(
                f"holds files the repository at {top} tracks: make {top} the project,"
                " or choose a folder it tracks nothing in"
            )

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the project's lock: an ``flock`` on its git folder, so that merges, reverts and
        branch deletions take turns across threads and processes."""
        common = Path(self.git("rev-parse", "--git-common-dir").out.strip())
        with locked_folder(common if common.is_absolute() else self.path / common):
            yield


def _commit(record: str) -> ProjectCommit:
    sha, name, email, when, subject, trailer_text = record.strip("\n").split("\x1f", 5)
    pairs = (line.partition(":") for line in trailer_text.splitlines() if ":" in line)
    return ProjectCommit(
        sha=sha,
        author_name=name,
        author_email=email,
        authored_at=datetime.fromisoformat(when),
        subject=subject,
        trailers=tuple((key.strip(), value.strip()) for key, _, value in pairs),
    )
