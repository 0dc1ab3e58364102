"""The launcher that runs the coding CLI in a process group of its own ends the whole group:
on a signal, when the program ends, and when whoever started it dies."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from orchestrator.adapters.process_group import alive, wait_ended
from tests.arena_helpers import REPO
from tests.waiting import block_until

LAUNCH = [sys.executable, "-m", "orchestrator.adapters.process_group"]


def _script(tmp_path: Path, body: str) -> Path:
    """A shell script that writes the pids of what it starts to ``pids``."""
    path = tmp_path / "program.sh"
    path.write_text("#!/bin/sh\n" + textwrap.dedent(body), encoding="utf-8")
    path.chmod(0o755)
    return path


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead for our purpose.
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split(") ")[-1].startswith("Z"))


def _pids(tmp_path: Path, count: int) -> list[int]:
    pids_file = tmp_path / "pids"
    block_until(
        lambda: pids_file.exists() and len(pids_file.read_text().split()) >= count,
        timeout_s=10,
        what=f"{count} pids written",
    )
    return [int(p) for p in pids_file.read_text().split()]


def test_a_signal_ends_the_group_even_a_child_that_ignores_sigterm(tmp_path: Path):
    """SIGTERM to the launcher ends the program and its children, SIGKILL for the stubborn."""
    program = _script(
        tmp_path,
        f"""
        ( trap '' TERM; sleep 300 ) & echo $! >> {tmp_path}/pids
        sleep 300 & echo $! >> {tmp_path}/pids
        wait
        """,
    )
    launcher = subprocess.Popen([*LAUNCH, str(program)], cwd=REPO)
    pids = _pids(tmp_path, 2)
    launcher.send_signal(signal.SIGTERM)
    assert launcher.wait(timeout=10) == 128 + signal.SIGTERM
    block_until(lambda: not any(_alive(p) for p in pids), timeout_s=10, what="the group ended")


def test_what_the_program_leaves_running_is_ended_with_it(tmp_path: Path):
    """A background process the program started does not outlive it; its status is passed on."""
    program = _script(
        tmp_path,
        f"""
        sleep 300 & echo $! >> {tmp_path}/pids
        exit 3
        """,
    )
    done = subprocess.run([*LAUNCH, str(program)], cwd=REPO, timeout=20, check=False)
    assert done.returncode == 3
    (pid,) = _pids(tmp_path, 1)
    assert not _alive(pid)


def test_what_the_program_left_in_a_session_of_its_own_is_ended_too(tmp_path: Path):
    """A process the program started in a new session (as Claude Code starts each Bash
    command) and left behind, deaf to SIGTERM, is killed when the program ends."""
    stubborn = (
        "import os, signal, time; os.setsid(); signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        f"open({str(tmp_path / 'pids')!r}, 'a').write(f'{{os.getpid()}}\\n'); time.sleep(300)"
    )
    program = _script(
        tmp_path,
        f"""
        {sys.executable} -c "{stubborn}" &
        while [ ! -s {tmp_path}/pids ]; do sleep 0.01; done
        exit 0
        """,
    )
    done = subprocess.run([*LAUNCH, str(program)], cwd=REPO, timeout=20, check=False)
    assert done.returncode == 0
    (pid,) = _pids(tmp_path, 1)
    assert not _alive(pid)


def test_the_group_ends_when_whoever_started_the_launcher_dies(tmp_path: Path):
    """Killing the launcher's parent (a worker killed mid-run) ends the program too."""
    program = _script(
        tmp_path,
        f"""
        echo $$ >> {tmp_path}/pids
        sleep 300
        """,
    )
    starter = subprocess.Popen(
        [sys.executable, "-c", "import subprocess, sys; subprocess.run(sys.argv[1:])", *LAUNCH,
         str(program)],
        cwd=REPO,
    )  # fmt: skip
    (pid,) = _pids(tmp_path, 1)
    starter.kill()
    starter.wait(timeout=10)
    block_until(lambda: not _alive(pid), timeout_s=10, what="the program ended")


def test_a_program_that_cannot_start_is_a_clear_error(tmp_path: Path):
    """A missing program is one line on stderr and status 127."""
    done = subprocess.run(
        [*LAUNCH, str(tmp_path / "nothing")], cwd=REPO, capture_output=True, text=True, check=False
    )
    assert done.returncode == 127
    assert done.stderr.startswith("cannot start ")


def test_with_env_the_program_sees_only_the_variables_named(tmp_path: Path):
    """--env passes on the named variables and the SDK's own, never the rest (no secrets)."""
    env = {
        **os.environ,
        "MODEL_KEY": "k",
        "ARENA_WEB_TOKEN": "secret",
        "REDIS_URL": "redis://x",
        "CLAUDE_AGENT_SDK_VERSION": "1",
    }
    done = subprocess.run(
        [*LAUNCH, "--env=MODEL_KEY,PATH", "/usr/bin/env"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    names = {line.split("=", 1)[0] for line in done.stdout.splitlines()}
    assert {"MODEL_KEY", "PATH", "CLAUDE_AGENT_SDK_VERSION"} <= names
    assert not names & {"ARENA_WEB_TOKEN", "REDIS_URL", "HOME"}


def test_a_process_counts_as_ended_once_it_is_a_zombie_and_can_be_waited_for() -> None:
    """``alive`` is false for an ended process its parent has not reaped yet; ``wait_ended``
    returns when it ends, and says so, or gives up after its time."""
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert alive(sleeper.pid)
        assert not wait_ended(sleeper.pid, 0.2)
        sleeper.send_signal(signal.SIGKILL)
        assert wait_ended(sleeper.pid, 10)  # a zombie until reaped below
        assert not alive(sleeper.pid)
    finally:
        sleeper.kill()
        sleeper.wait()
    assert not alive(sleeper.pid)
