"""Running git for the shared project: a clean environment for every call, git's refusals as
one line.

Every call runs the ``git`` found on ``PATH`` with an environment built here, never the
caller's: no ``GIT_*`` variable of the arena's process (a ``GIT_DIR`` or ``GIT_INDEX_FILE``
left by a hook would point git elsewhere), no system or global configuration
(``GIT_CONFIG_NOSYSTEM``, ``GIT_CONFIG_GLOBAL`` at the null device: the daemon runs unattended,
perhaps as another user, and a person's ``commit.gpgSign``, ``merge.ff=only`` or aliases must
not change or break its commits), the C locale (git's messages, which :func:`one_line` reports,
in English), no prompt and no pager. The project's own ``.git/config`` still applies, with a
few settings overridden on the command line (:data:`_OVERRIDES`), among them the hooks: the
arena's commits, worktrees and merges run no hook of the project (``core.hooksPath`` at the
null device). A hook is code from the project run unattended with the arena's rights; it may
wait for input, take minutes or change files behind the arena's back. A person's own git
commands still run them.

Everything here blocks: call it through ``asyncio.to_thread`` from async code.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path

from orchestrator.errors import ProjectError

__all__ = ["ANY_CODE", "GitResult", "git", "one_line"]

logger = logging.getLogger(__name__)

ANY_CODE = frozenset(range(256))
"""For ``ok``: every exit code is an answer the caller reads (a refusal it reports)."""

# Settings of the project's own configuration that would change what an unattended arena
# command does: hooks, signing (a prompt for a passphrase), an automatic stash of the person's
# changes around a merge, colours and quoted paths in what is parsed, a file-system monitor.
_OVERRIDES = (
    f"core.hooksPath={os.devnull}",
    "commit.gpgSign=false",
    "tag.gpgSign=false",
    "merge.autoStash=false",
    "core.fsmonitor=false",
    "core.quotePath=false",
    "color.ui=false",
    "advice.detachedHead=false",
)


@dataclass(frozen=True, slots=True, kw_only=True)
class GitResult:
    """What one git command printed and its exit code."""

    code: int
    out: str
    err: str


def git(
    args: Sequence[str],
    *,
    cwd: Path,
    project: Path,
    identity: tuple[str, str] | None = None,
    stdin: str | None = None,
    ok: Collection[int] = (0,),
) -> GitResult:
    """Run ``git ARGS`` in ``cwd`` with the arena's clean environment.

    Args:
        args: The arguments after ``git`` and the overrides.
        cwd: The folder git runs in (the project's checkout, or a run's).
        project: The project's folder, named in an error.
        identity: The name and e-mail of the author and committer of what the command commits.
        stdin: Text given on standard input (else none: git never waits for input).
        ok: Exit codes that are answers rather than failures (``merge-base --is-ancestor``'s 1).

    Raises:
        ProjectError: git is not installed, or it exited with another code: git's message in
            one line.
    """
    executable = shutil.which("git")
    if executable is None:
        raise ProjectError(str(project), "git is not installed (no `git` on PATH)")
    command = [executable, *_settings(identity), *args]
    logger.debug("git %s in %s", " ".join(args), cwd)
    try:
        done = subprocess.run(
            command,
            cwd=cwd,
            env=_environment(executable),
            input=stdin,
            stdin=None if stdin is not None else subprocess.DEVNULL,
            capture_output=True,
            encoding="utf-8",
            errors="surrogateescape",  # a file name not in UTF-8 comes back as it was
            check=False,
        )
    except OSError as exc:
        raise ProjectError(str(project), f"cannot run git in {cwd}: {exc.strerror}") from exc
    result = GitResult(code=done.returncode, out=done.stdout, err=done.stderr)
    if done.returncode not in ok:
        raise ProjectError(str(project), f"git {args[0]}: {one_line(result)}")
    return result


def one_line(result: GitResult) -> str:
    """Git's message in one line: its ``error:``/``fatal:`` lines with the files they list,
    hints and progress left out."""
    lines = (result.err or result.out).splitlines()
    kept: list[str] = []
    files: list[str] = []
    for line in lines:
        if line.startswith("\t"):
            files.append(line.strip())
        elif line.startswith(("error: ", "fatal: ", "CONFLICT ")):
            if files:
                kept[-1] += " " + ", ".join(files)
                files = []
            kept.append(line.removeprefix("error: ").removeprefix("fatal: "))
    if files and kept:
        kept[-1] += " " + ", ".join(files)
    text = "; ".join(kept) or next((line for line in lines if line.strip()), "")
    return text.strip() or f"exit code {result.code}"


def _settings(identity: tuple[str, str] | None) -> list[str]:
    pairs = list(_OVERRIDES)
    if identity is not None:
        name, email = identity
        pairs += [f"user.name={name}", f"user.email={email}"]
    return [arg for pair in pairs for arg in ("-c", pair)]


def _environment(executable: str) -> dict[str, str]:
    """The environment of every git call, built whole: nothing of the caller's but where git
    lives."""
    return {
        "PATH": os.pathsep.join([str(Path(executable).parent), os.defpath]),
        "LC_ALL": "C",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_PAGER": "cat",
        "GIT_EDITOR": "true",
        "GIT_MERGE_AUTOEDIT": "no",
    }
