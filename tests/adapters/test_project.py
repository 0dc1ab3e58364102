"""The shared project with real git in temporary folders: each run in its own worktree,
committed by its agent with trailers, merged one at a time, and a person's work never lost."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.adapters.checkouts import Checkout, Finished
from orchestrator.adapters.project import Project
from orchestrator.errors import ProjectError, ValidationError
from tests.arena_helpers import REPO

PERSON = ("-c", "user.name=person", "-c", "user.email=person@example.org")
CLEAN_GIT = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null", "LC_ALL": "C"}


def git(cwd: Path, *args: str) -> str:
    """What git prints in ``cwd``, run as the person (their own identity, no config)."""
    done = subprocess.run(
        ["git", *PERSON, *args],
        cwd=cwd,
        env={"PATH": "/usr/bin:/bin:/usr/local/bin", **CLEAN_GIT},
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


def files_of(folder: Path) -> dict[str, bytes]:
    """Every file of a checkout but git's own, byte for byte."""
    return {
        str(p.relative_to(folder)): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and ".git" not in p.relative_to(folder).parts
    }


def finish(
    project: Project, checkout: Checkout, agent: str = "developer", message: str = "Work"
) -> Finished:
    """Finish a run as ``agent`` answering message ``1-0`` of group ``demo``."""
    return project.finish(
        checkout, agent, f"{agent}@arena.local", message, group="demo", message_id="1-0"
    )


@pytest.fixture
def project(tmp_path: Path) -> Project:
    """A project with one committed file, ``app.py``, and a ``.gitignore``."""
    folder = tmp_path / "shared"
    folder.mkdir()
    (folder / "app.py").write_text("print('app')\n")
    (folder / ".gitignore").write_text(".env\n")
    made = Project(folder)
    made.ensure()
    return made


def test_a_runs_change_is_committed_by_its_agent_with_trailers_and_merged(
    project: Project, tmp_path: Path
) -> None:
    """A run's new file lands in the person's checkout, by the agent, with the trailers."""
    run = project.start("r1", tmp_path / "runs" / "r1" / "project")
    (run.path / "hello.py").write_text("print('hello')\n")
    (run.path / "app.py").write_text("print('app')\nprint('more')\n")

    done = finish(project, run, message="Add hello.py")

    assert done.changed
    assert done.merged
    assert done.merged_as == done.commit
    assert (project.path / "hello.py").read_text() == "print('hello')\n"
    assert {(f.path, f.insertions, f.deletions) for f in done.stat.files} == {
        ("app.py", 1, 0),
        ("hello.py", 1, 0),
    }
    assert (done.stat.insertions, done.stat.deletions) == (2, 0)
    who = git(project.path, "log", "-1", "--format=%an <%ae>|%cn <%ce>", done.commit or "")
    assert who == "developer <developer@arena.local>|developer <developer@arena.local>"
    last = project.log(1)[0]
    assert (last.sha, last.subject, last.author_name) == (done.commit, "Add hello.py", "developer")
    assert last.trailers == (("Arena-Run", "r1"), ("Arena-Group", "demo"), ("Arena-Message", "1-0"))
    assert not run.path.exists()
    assert git(project.path, "branch", "--list", "arena/*") == ""
    assert git(project.path, "worktree", "list", "--porcelain").count("worktree ") == 1


def test_a_file_name_not_in_utf8_is_merged_and_reported_as_named(
    project: Project, tmp_path: Path
) -> None:
    """A run's file whose name is not UTF-8 is merged, its stat naming it as the disk does."""
    name = os.fsdecode(b"caf\xe9.txt")
    run = project.start("r1", tmp_path / "r1")
    (run.path / name).write_text("menu\n")

    done = finish(project, run)

    assert done.merged
    assert [f.path for f in done.stat.files] == [name]
    assert (project.path / name).read_text() == "menu\n"


def test_two_runs_at_once_on_different_files_both_merge_each_with_its_own_files(
    project: Project, tmp_path: Path
) -> None:
    """Two runs started together are both merged; each commit holds only its run's file."""
    first = project.start("r1", tmp_path / "r1")
    second = project.start("r2", tmp_path / "r2")
    (first.path / "one.py").write_text("one\n")
    (second.path / "two.py").write_text("two\n")

    a = finish(project, first, "developer")
    b = finish(project, second, "tester")

    assert a.merged
    assert b.merged
    assert git(project.path, "show", "--format=", "--name-only", a.commit or "") == "one.py"
    assert git(project.path, "show", "--format=", "--name-only", b.commit or "") == "two.py"
    merge = project.log(1)[0]
    assert merge.sha == b.merged_as != b.commit
    assert (merge.author_name, merge.subject) == ("tester", "Merge run r2 into main")
    assert merge.trailer("Arena-Run") == "r2"
    assert git(project.path, "rev-parse", "HEAD^1", "HEAD^2").split() == [a.commit, b.commit]
    assert {"one.py", "two.py"} <= set(files_of(project.path))


def test_two_runs_editing_one_file_the_second_is_kept_for_review(
    project: Project, tmp_path: Path
) -> None:
    """The second run's conflicting edit is not merged: its branch is kept, main untouched."""
    first = project.start("r1", tmp_path / "r1")
    second = project.start("r2", tmp_path / "r2")
    (first.path / "app.py").write_text("print('first')\n")
    (second.path / "app.py").write_text("print('second')\n")
    assert finish(project, first).merged
    head = git(project.path, "rev-parse", "HEAD")

    done = finish(project, second, "tester")

    assert done.changed
    assert not done.merged
    assert done.reason == "conflict with main in app.py"
    assert done.branch == "arena/r2"
    assert git(project.path, "rev-parse", "HEAD") == head
    assert (project.path / "app.py").read_text() == "print('first')\n"
    assert git(project.path, "status", "--porcelain") == ""
    assert project.log(1, "arena/r2")[0].sha == done.commit
    assert git(project.path, "show", "arena/r2:app.py") == "print('second')"
    assert not second.path.exists()


def test_a_persons_uncommitted_work_survives_every_step(project: Project, tmp_path: Path) -> None:
    """A person's edits, staged or not, and untracked and ignored files outlive every step."""
    (project.path / "notes.md").write_text("notes\n")
    git(project.path, "add", "notes.md")
    git(project.path, "commit", "-qm", "Add notes")
    (project.path / "notes.md").write_text("notes\nmy unsaved line\n")
    (project.path / "app.py").write_text("print('app')\n# staged by me\n")
    git(project.path, "add", "app.py")
    (project.path / "scratch.txt").write_bytes(b"mine \x00\xff\n")
    (project.path / ".env").write_text("SECRET=person\n")
    mine = files_of(project.path)

    def unchanged_but(*names: str) -> dict[str, bytes]:
        now = files_of(project.path)
        assert {name: now[name] for name in mine} == mine
        return {name: now[name] for name in names}

    clean = project.start("r1", tmp_path / "r1")
    assert clean.path.joinpath("notes.md").read_text() == "notes\n"  # the committed state
    (clean.path / "new.py").write_text("new\n")
    assert finish(project, clean).merged
    assert unchanged_but("new.py") == {"new.py": b"new\n"}

    for run_id, name, reason in [
        ("r2", "notes.md", "Your local changes to the following files would be overwritten"),
        ("r3", "app.py", "Your local changes to the following files would be overwritten"),
        ("r4", "scratch.txt", "untracked working tree files would be overwritten by merge"),
        ("r5", ".env", "untracked working tree files would be overwritten by merge"),
    ]:
        run = project.start(run_id, tmp_path / run_id)
        (run.path / ".gitignore").write_text("")  # so that the run can commit its .env
        (run.path / name).write_text("the run's\n")
        done = finish(project, run)
        assert not done.merged
        assert reason in done.reason
        assert name in done.reason
        assert done.branch == f"arena/{run_id}"
        unchanged_but()

    cancelled = project.start("r6", tmp_path / "r6")
    (cancelled.path / "notes.md").write_text("cancelled\n")
    project.cancel(cancelled)
    unchanged_but()
    with pytest.raises(ProjectError, match="would be overwritten"):
        project.revert(git(project.path, "rev-parse", "HEAD~1"))  # "Add notes": my notes.md
    unchanged_but()
    project.revert(git(project.path, "rev-parse", "HEAD"))  # the run's new.py
    assert unchanged_but() == {}
    assert not (project.path / "new.py").exists()
    assert git(project.path, "diff", "--cached", "--name-only") == "app.py"
    assert git(project.path, "diff", "--name-only") == "notes.md"


def test_a_checkout_on_no_branch_is_not_merged_into(project: Project, tmp_path: Path) -> None:
    """With the person's checkout detached, a run is kept on its branch, HEAD untouched."""
    run = project.start("r1", tmp_path / "r1")
    (run.path / "new.py").write_text("new\n")
    git(project.path, "checkout", "-q", "--detach")
    head = git(project.path, "rev-parse", "HEAD")

    done = finish(project, run)

    assert not done.merged
    assert done.reason == "the project's checkout is on no branch"
    assert done.branch == "arena/r1"
    assert git(project.path, "rev-parse", "HEAD") == head
    assert not (project.path / "new.py").exists()


def test_a_refusal_is_one_line_and_makes_nothing(project: Project, tmp_path: Path) -> None:
    """A second run with a taken id, or a revert of no commit, is refused in one line."""
    project.start("r1", tmp_path / "r1")

    with pytest.raises(ProjectError) as taken:
        project.start("r1", tmp_path / "again")
    with pytest.raises(ProjectError) as unknown:
        project.revert("nope")

    assert str(taken.value) == f"project {project.path}: run r1: the branch arena/r1 exists already"
    assert str(unknown.value) == f"project {project.path}: no commit 'nope'"
    assert not (tmp_path / "again").exists()
    with pytest.raises(ProjectError, match="is not a folder"):
        Project(project.path / "app.py").ensure()


def test_a_run_with_no_change_leaves_nothing_behind(project: Project, tmp_path: Path) -> None:
    """A run that changed nothing commits nothing; its worktree and branch are gone."""
    head = git(project.path, "rev-parse", "HEAD")
    run = project.start("r1", tmp_path / "r1")

    done = finish(project, run)

    assert not done.changed
    assert not done.merged
    assert done.commit is None
    assert git(project.path, "rev-parse", "HEAD") == head
    assert git(project.path, "branch", "--list", "arena/*") == ""
    assert not run.path.exists()


def test_cancel_removes_the_worktree_and_keeps_only_a_branch_with_commits(
    project: Project, tmp_path: Path
) -> None:
    """Cancelling drops what a run left uncommitted, and its branch unless it committed."""
    idle = project.start("r1", tmp_path / "r1")
    (idle.path / "half.py").write_text("half\n")
    committed = project.start("r2", tmp_path / "r2")
    (committed.path / "done.py").write_text("done\n")
    git(committed.path, "add", "done.py")
    git(committed.path, "commit", "-qm", "Done by the run itself")

    assert project.cancel(idle) is False
    assert project.cancel(committed) is True

    assert not idle.path.exists()
    assert not committed.path.exists()
    assert git(project.path, "branch", "--list", "arena/*") == "arena/r2"
    assert not (project.path / "half.py").exists()
    assert not (project.path / "done.py").exists()


def test_revert_undoes_a_run_by_the_arena_and_refuses_a_conflict(
    project: Project, tmp_path: Path
) -> None:
    """A merged run is reverted by the arena; a revert that conflicts is refused cleanly."""
    run = project.start("r1", tmp_path / "r1")
    (run.path / "app.py").write_text("print('run')\n")
    done = finish(project, run)

    reverted = project.revert(done.commit or "")

    assert (project.path / "app.py").read_text() == "print('app')\n"
    last = project.log(1)[0]
    assert (last.sha, last.author_name, last.author_email) == (reverted, "arena", "arena@localhost")
    assert last.subject == 'Revert "Work"'
    (project.path / "app.py").write_text("print('person')\n")
    git(project.path, "commit", "-qam", "Mine")
    head = git(project.path, "rev-parse", "HEAD")
    with pytest.raises(ProjectError, match=r"cannot revert [0-9a-f]{12}: could not revert"):
        project.revert(done.commit or "")
    assert git(project.path, "rev-parse", "HEAD") == head
    assert git(project.path, "status", "--porcelain") == ""
    assert git(project.path, "worktree", "list", "--porcelain").count("worktree ") == 1


@pytest.mark.parametrize(
    "run_id", ["", "../escape", "a/b", "Upper", "-x", "a..b", "x.lock", "x.", "a" * 65, "a\nb"]
)
def test_a_bad_run_id_is_refused_with_nothing_made(
    project: Project, tmp_path: Path, run_id: str
) -> None:
    """A run id that could escape its folder or name no branch is refused, in one line."""
    with pytest.raises(ValidationError, match=r"^run id: ") as refused:
        project.start(run_id, tmp_path / "run")
    assert "\n" not in str(refused.value)
    assert not (tmp_path / "run").exists()
    assert git(project.path, "branch", "--list", "arena/*") == ""


def test_a_folder_of_files_without_git_becomes_the_project(tmp_path: Path) -> None:
    """A folder's files are committed as found, by the arena, and nothing is touched."""
    folder = tmp_path / "found"
    (folder / "src").mkdir(parents=True)
    (folder / "src" / "main.py").write_text("print('main')\n")
    (folder / "README").write_bytes(b"\xff readme\n")
    before = files_of(folder)

    Project(folder).ensure()
    Project(folder).ensure()

    assert files_of(folder) == before
    assert git(folder, "log", "--format=%an <%ae> %s") == (
        "arena <arena@localhost> Start the project with the files found in its folder"
    )
    assert git(folder, "status", "--porcelain") == ""
    assert git(folder, "branch", "--show-current") == "main"


def test_ensure_starts_a_missing_project_and_an_unborn_repository(tmp_path: Path) -> None:
    """A missing folder gets an empty first commit; so does a repository with none, whose
    staged and untracked files stay as they were."""
    Project(tmp_path / "new" / "project").ensure()
    assert git(tmp_path / "new" / "project", "log", "--format=%an %s") == "arena Start the project"

    unborn = tmp_path / "unborn"
    unborn.mkdir()
    git(unborn, "init", "-q", "-b", "trunk")
    (unborn / "staged.txt").write_text("staged\n")
    git(unborn, "add", "staged.txt")
    (unborn / "loose.txt").write_text("loose\n")

    Project(unborn).ensure()

    assert git(unborn, "log", "--format=%s", "trunk") == "Start the project"
    assert git(unborn, "status", "--porcelain") == "A  staged.txt\n?? loose.txt"


def test_a_folder_another_repository_tracks_is_refused(tmp_path: Path) -> None:
    """A folder whose files another repository tracks is refused, and no .git is made."""
    outer = tmp_path / "outer"
    (outer / "sub").mkdir(parents=True)
    (outer / "sub" / "kept.py").write_text("kept\n")
    git(outer, "init", "-q")
    git(outer, "add", "-A")
    git(outer, "commit", "-qm", "outer")

    with pytest.raises(ProjectError, match=f"holds files the repository at {outer} tracks"):
        Project(outer / "sub").ensure()

    assert not (outer / "sub" / ".git").exists()
    assert git(outer, "status", "--porcelain") == ""


def test_git_runs_without_the_callers_git_variables_config_or_the_projects_hooks(
    project: Project, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A caller's GIT_DIR, a global signing setting and the project's failing hooks change
    nothing of a run's commit and merge."""
    elsewhere = tmp_path / "elsewhere"
    git(tmp_path, "init", "-q", str(elsewhere))
    monkeypatch.setenv("GIT_DIR", str(elsewhere / ".git"))
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / ".gitconfig").write_text("[commit]\n\tgpgSign = true\n")
    hooks = project.path / ".git" / "hooks"
    for hook in ("pre-commit", "post-checkout", "post-merge", "commit-msg"):
        (hooks / hook).write_text(f"#!/bin/sh\ntouch {tmp_path}/{hook}-ran\nexit 1\n")
        (hooks / hook).chmod(0o755)
    first = project.start("r1", tmp_path / "r1")
    second = project.start("r2", tmp_path / "r2")
    (first.path / "one.py").write_text("one\n")
    (second.path / "two.py").write_text("two\n")

    assert finish(project, first).merged
    assert finish(project, second).merged

    assert not list(tmp_path.glob("*-ran"))
    assert git(elsewhere, "--git-dir", str(elsewhere / ".git"), "branch", "--list") == ""


def test_two_processes_finishing_at_once_both_merge(project: Project, tmp_path: Path) -> None:
    """Runs finished by separate processes at the same moment take turns: all are merged."""
    go = tmp_path / "go"
    script = (
        "import sys, time\n"
        "from pathlib import Path\n"
        "from orchestrator.adapters.checkouts import Checkout, Finished\n"
        "from orchestrator.adapters.project import Project\n"
        "folder, run_id, where, base, go = sys.argv[1:]\n"
        "while not Path(go).exists():\n"
        "    time.sleep(0.005)\n"
        "checkout = Checkout(run_id=run_id, path=Path(where), base=base)\n"
        "done = Project(Path(folder)).finish(checkout, run_id, 'a@b', run_id, group='g',"
        " message_id='1-0')\n"
        "print(done.merged, done.reason)\n"
    )
    children = []
    for n in range(4):
        run = project.start(f"r{n}", tmp_path / f"r{n}")
        (run.path / f"file{n}.py").write_text(f"{n}\n")
        args = [str(project.path), run.run_id, str(run.path), run.base, str(go)]
        children.append(
            subprocess.Popen(
                [sys.executable, "-c", script, *args], cwd=REPO, stdout=subprocess.PIPE, text=True
            )
        )
    go.touch()
    outputs = [child.communicate(timeout=50)[0].strip() for child in children]

    assert outputs == ["True"] * 4
    assert {f"file{n}.py" for n in range(4)} <= set(files_of(project.path))
    assert git(project.path, "status", "--porcelain") == ""
