"""The shared project: a git repository the agents change, one worktree per run, nothing lost.

The strategy (docs/projects.md tells it for readers):

- The project is a folder with its own git repository, checked out by a person
  (:meth:`Project.ensure` makes one: a missing or empty folder gets an empty first commit, a
  folder of files without git gets them committed by the arena; nothing is ever deleted).
- A run never works in the person's checkout. :meth:`Project.start` gives it a git worktree of
  its own, on a new branch ``arena/{run_id}``, from the project's ``HEAD`` commit: the
  committed state. The person's uncommitted and untracked files stay where they are, unseen.
- :meth:`Project.finish` commits everything the run changed in its worktree (``git add -A``
  there only, so a commit holds the run's files and no other's), with the agent as author and
  committer and trailers naming the run, the group and the message. Then, one at a time per
  project (an ``flock`` on the project's git folder, across threads and processes), it brings
  the commit into the project's checked-out branch. If that branch moved since the run
  started, the merge commit (``--no-ff``, by the agent) is made in the run's own worktree, so a
  conflict never reaches the person's files; it is aborted there and the run is not merged.
  The person's checkout itself is only ever fast-forwarded (``git merge --ff-only
  --no-overwrite-ignore``), which git does whole or not at all: when it would overwrite a file
  the person changed, an untracked or an ignored file of theirs, git refuses and nothing of
  theirs is touched. Not merged, the run's branch is kept for review, with the reason.
  The run's worktree is removed either way; merged, its branch is deleted too.
- :meth:`Project.cancel` removes a run's worktree and what it left uncommitted (the run's, not
  a person's); :meth:`Project.revert` reverts a commit by the arena, made in a scratch worktree
  and fast-forwarded the same way, so it is refused, touching nothing, where the person has
  uncommitted changes to the same files; :meth:`Project.log` reads the history with trailers.

Every git call runs with a clean environment and without the project's hooks
(:mod:`orchestrator.adapters.git`). Everything here blocks: call it through
``asyncio.to_thread`` from async code.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
from pathlib import Path

from orchestrator.adapters.checkouts import (
    ARENA,
    TRAILER_GROUP,
    TRAILER_MESSAGE,
    TRAILER_RUN,
    Checkout,
    Finished,
    ProjectCommit,
    branch_of,
    check_identity,
    check_trailer,
)
from orchestrator.adapters.git import ANY_CODE, GitResult, one_line
from orchestrator.adapters.repository import Repository
from orchestrator.errors import ValidationError
from orchestrator.files import locked_folder

__all__ = ["Project"]

logger = logging.getLogger(__name__)

_FOUND = "Start the project with the files found in its folder"


class Project:
    """The shared project at ``path``: its runs' checkouts, their commits and merges."""

    def __init__(self, path: Path) -> None:
        self.path = path.resolve()
        self._repo = Repository(self.path)

    def ensure(self) -> None:
        """Make the folder a git repository with a first commit, if it is not one yet.

        A missing or empty folder gets ``git init -b main`` and an empty commit; a folder of
        files gets them committed by the arena (ignored ones stay as they are); a repository
        with no commit gets an empty first commit, its index and files untouched. Nothing is
        deleted.

        Raises:
            ProjectError: the path is a file, or lies inside another repository that tracks
                files in it, or git failed.
        """
        repo = self._repo
        if self.path.exists() and not self.path.is_dir():
            raise repo.error("is not a folder")
        self.path.mkdir(parents=True, exist_ok=True)
        with locked_folder(self.path):  # two processes ensuring one project take turns
            if (self.path / ".git").exists():
                if repo.head() is None:
                    repo.first_commit()
                return
            repo.refuse_enclosed()
            found = any(self.path.iterdir())
            repo.git("init", "-q", "-b", "main")
            if not found:
                repo.first_commit()
                return
            repo.git("add", "-A")
            repo.git("commit", "-q", "--no-verify", "-m", _FOUND, identity=ARENA)
            logger.info("project %s: the files found in it committed", self.path)

    def start(self, run_id: str, where: Path) -> Checkout:
        """Give run ``run_id`` its own worktree at ``where``, on a new branch ``arena/{run_id}``
        from the project's ``HEAD`` commit.

        Raises:
            ValidationError: a bad run id, or ``where`` inside the project (nothing made).
            ProjectError: the branch or ``where`` exists already, the project has no commit
                (call :meth:`ensure`), or git failed.
        """
        repo, branch = self._repo, branch_of(run_id)
        where = where.resolve()
        if where.is_relative_to(self.path):
            raise ValidationError("checkout", f"{where} lies inside the project {self.path}")
        if where.exists() and (not where.is_dir() or any(where.iterdir())):
            raise repo.error(f"run {run_id}: {where} exists already")
        if repo.rev(f"refs/heads/{branch}") is not None:
            raise repo.error(f"run {run_id}: the branch {branch} exists already")
        base = repo.head()
        if base is None:
            raise repo.error("has no commit yet (ensure() makes one)")
        repo.git("worktree", "add", "-q", "-b", branch, str(where), base)
        return Checkout(run_id=run_id, path=where, base=base)

    def finish(
        self,
        checkout: Checkout,
        author_name: str,
        author_email: str,
        message: str,
        *,
        group: str,
        message_id: str,
        merge: bool = True,
    ) -> Finished:
        """Commit what the run changed, by the agent, and bring it into the project's branch
        (unless ``merge`` is False: a run that did not end well is kept for review).

        Args:
            checkout: The run's checkout, from :meth:`start`.
            author_name: The agent, author and committer of the commit (and of a merge).
            author_email: The agent's e-mail address.
            message: The commit message; trailers ``Arena-Run``, ``Arena-Group`` and
                ``Arena-Message`` are added to it.
            group: The group the run answered in.
            message_id: The id of the message that asked for it.
            merge: Whether to bring the commit in; else its branch is kept.

        Returns:
            No change: ``changed=False`` (branch and worktree removed). Else the commit, its
            ``stat`` and whether it was merged; not merged, the reason and the branch kept.

        Raises:
            ValidationError: a bad author, message, group or message id (nothing done).
            ProjectError: git failed to commit in the run's worktree.
        """
        repo = self._repo
        identity = check_identity(author_name, author_email)
        trailers = _trailers(checkout.run_id, group, message_id)
        if not message.strip():
            raise ValidationError("commit message", "is empty")
        tip = self._commit_run(checkout, identity, f"{message.strip()}\n\n{trailers}\n")
        if tip == checkout.base:
            repo.remove_worktree(checkout.path)
            repo.delete_branch(checkout.branch)
            return Finished(run_id=checkout.run_id, changed=False)
        stat = repo.stat(checkout.base, tip)
        with repo.locked():
            if merge:
                merged_as, reason = self._merge(checkout, tip, identity, trailers)
            else:
                merged_as, reason = None, "the run did not end well: kept for review"
            repo.remove_worktree(checkout.path)
            if merged_as is not None:
                repo.delete_branch(checkout.branch)
        if merged_as is None:
            logger.info("run %s: not merged, %s kept: %s", checkout.run_id, checkout.branch, reason)
        else:
            logger.info("run %s: merged as %s", checkout.run_id, merged_as[:12])
        return Finished(
            run_id=checkout.run_id,
            changed=True,
            merged=merged_as is not None,
            commit=tip,
            merged_as=merged_as,
            branch=None if merged_as is not None else checkout.branch,
            reason=reason,
            stat=stat,
        )

    def cancel(self, checkout: Checkout) -> bool:
        """Remove a run's worktree with whatever it left uncommitted (the run's); delete its
        branch unless it holds a commit of the run's. Returns whether the branch was kept."""
        repo = self._repo
        repo.remove_worktree(checkout.path)
        tip = repo.rev(f"refs/heads/{checkout.branch}")
        if tip is None:
            return False
        if tip == checkout.base:
            repo.delete_branch(checkout.branch)
            return False
        return True

    def revert(self, commit: str) -> str:
        """Revert ``commit`` on the project's checked-out branch, by the arena; a merge commit
        against its first parent. Returns the new commit.

        Raises:
            ValidationError: ``commit`` is empty or starts with ``-``.
            ProjectError: the commit is unknown or not in the branch's history, the revert
                conflicts, or the person's checkout has uncommitted changes to its files;
                the person's checkout is left untouched.
        """
        repo = self._repo
        if commit.startswith("-") or not commit.strip():
            raise ValidationError("commit", f"{commit!r} is not a commit")
        sha = repo.rev(f"{commit}^{{commit}}")
        if sha is None:
            raise repo.error(f"no commit {commit!r}")
        with repo.locked():
            branch, head = repo.branch(), repo.head()
            if branch is None or head is None:
                raise repo.error("its checkout is on no branch")
            if not repo.is_ancestor(sha, head):
                raise repo.error(f"{sha[:12]} is not in the history of {branch}")
            target = self._revert_aside(sha, head)
            advanced = repo.fast_forward(target)
            if advanced.code != 0:
                raise repo.error(f"revert of {sha[:12]} refused: {one_line(advanced)}")
        logger.info("project %s: %s reverted as %s", self.path, sha[:12], target[:12])
        return target

    def log(self, limit: int = 20, ref: str = "HEAD") -> tuple[ProjectCommit, ...]:
        """The last ``limit`` commits of ``ref`` (the checked-out branch, or a run's kept
        branch), newest first, with their authors and trailers."""
        return self._repo.log(limit, ref)

    def _commit_run(self, checkout: Checkout, identity: tuple[str, str], text: str) -> str:
        """Commit everything in the run's worktree, there only; the run's last commit."""
        repo, where = self._repo, checkout.path
        repo.git("add", "-A", cwd=where)
        if repo.git("diff", "--cached", "--quiet", cwd=where, ok={0, 1}).code:
            repo.git(
                *("commit", "-q", "--no-verify", "--cleanup=whitespace", "-F", "-"),
                cwd=where,
                identity=identity,
                stdin=text,
            )
        tip = repo.rev("HEAD", cwd=where)
        if tip is None:
            raise repo.error(f"run {checkout.run_id}: its checkout has no HEAD")
        if repo.rev(f"refs/heads/{checkout.branch}") != tip:  # the run moved off its branch
            repo.git("update-ref", f"refs/heads/{checkout.branch}", tip)
        return tip

    def _merge(
        self, checkout: Checkout, tip: str, identity: tuple[str, str], trailers: str
    ) -> tuple[str | None, str]:
        """Bring ``tip`` into the checked-out branch, under the lock: the commit the branch
        is at now, or None and why not."""
        repo = self._repo
        branch, head = repo.branch(), repo.head()
        if branch is None or head is None:
            return None, "the project's checkout is on no branch"
        target = tip
        if not repo.is_ancestor(head, tip):  # the branch moved: merge in the run's worktree
            where, subject = checkout.path, f"Merge run {checkout.run_id} into {branch}"
            repo.git("checkout", "-q", "--detach", head, cwd=where)
            merging = repo.git(
                *("merge", "-q", "--no-ff", "--no-edit", "-m", f"{subject}\n\n{trailers}"),
                checkout.branch,
                cwd=where,
                identity=identity,
                ok=ANY_CODE,
            )
            if merging.code != 0:
                return None, self._abort_merge(where, branch, merging)
            merge = repo.rev("HEAD", cwd=where)
            if merge is None:
                return None, f"cannot merge into {branch}: no merge commit was made"
            target = merge
        advanced = repo.fast_forward(target)
        if advanced.code != 0:
            return None, one_line(advanced)  # git's refusal: nothing of the person's touched
        return target, ""

    def _abort_merge(self, where: Path, branch: str, merging: GitResult) -> str:
        """Abort a merge in a run's worktree; why it failed, in one line."""
        repo = self._repo
        listed = repo.git("diff", "--name-only", "--diff-filter=U", "-z", cwd=where, ok=ANY_CODE)
        repo.git("merge", "--abort", cwd=where, ok=ANY_CODE)
        conflicted = [name for name in listed.out.split("\0") if name]
        if conflicted:
            return f"conflict with {branch} in {', '.join(conflicted)}"
        return f"cannot merge into {branch}: {one_line(merging)}"

    def _revert_aside(self, sha: str, head: str) -> str:
        """Revert ``sha`` on ``head`` in a scratch worktree, by the arena; the revert commit."""
        repo = self._repo
        scratch = Path(tempfile.mkdtemp(prefix="arena-revert-"))
        where = scratch / "checkout"
        try:
            repo.git("worktree", "add", "-q", "--detach", str(where), head)
            parents = repo.git("rev-list", "--parents", "-n1", sha).out.split()
            mainline = ["-m", "1"] if len(parents) > 2 else []
            reverting = repo.git(
                "revert", "--no-edit", *mainline, sha, cwd=where, identity=ARENA, ok=ANY_CODE
            )
            if reverting.code != 0:
                repo.git("revert", "--abort", cwd=where, ok=ANY_CODE)
                raise repo.error(f"cannot revert {sha[:12]}: {one_line(reverting)}")
            reverted = repo.rev("HEAD", cwd=where)
            if reverted is None or reverted == head:
                raise repo.error(f"cannot revert {sha[:12]}: nothing to revert")
            return reverted
        finally:
            repo.git("worktree", "remove", "--force", str(where), ok=ANY_CODE)
            shutil.rmtree(scratch, ignore_errors=True)
            repo.git("worktree", "prune")


def _trailers(run_id: str, group: str, message_id: str) -> str:
    group = check_trailer("group", group)
    message_id = check_trailer("message id", message_id)
    return f"{TRAILER_RUN}: {run_id}\n{TRAILER_GROUP}: {group}\n{TRAILER_MESSAGE}: {message_id}"
