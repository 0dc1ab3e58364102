"""Run a program in a process group of its own, and end the whole group with it.

    python -m orchestrator.adapters.process_group [--env=NAME,...] PROGRAM [ARG ...]

The coding CLI runs the commands it is asked to (tests, servers, scripts), and those run
commands of their own; stopping the CLI alone leaves them running. This launcher starts
``PROGRAM`` as the leader of a new session, passing on its standard streams, and waits:

- a SIGTERM, SIGINT or SIGHUP it receives is sent to the whole group; whatever is still
  alive :data:`GRACE_S` seconds later is killed (SIGKILL), a child that ignores SIGTERM
  included;
- when ``PROGRAM`` ends, what it left behind is ended the same way: in its group, and in
  any group or session of their own (on Linux, where the launcher adopts the orphans and
  finds every process below it in ``/proc``);
- when the process that started the launcher dies (a worker killed mid-run), the kernel sends
  the launcher SIGTERM (Linux), so nothing is orphaned.

With ``--env``, ``PROGRAM`` gets only the environment variables named there (and those the
Claude Agent SDK sets to talk to its CLI, :data:`SDK_VARIABLES`): whoever starts the launcher
may pass its whole environment on, the program sees only what it was meant to.

When ``ARENA_RUN_PIDFILE`` names a file, the launcher writes its pid there first: whoever
started it through a library that hides the process can still end the group (SIGTERM to it).

It exits with ``PROGRAM``'s status (128 + the signal for a signal). Standard library only: it
starts before every run.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from types import FrameType

__all__ = ["GRACE_S", "PIDFILE_ENV", "SDK_VARIABLES", "alive", "end_group", "main", "wait_ended"]

GRACE_S = 3.0
PIDFILE_ENV = "ARENA_RUN_PIDFILE"
SDK_VARIABLES = ("CLAUDE_CODE_ENTRYPOINT", "CLAUDE_CODE_SDK_READS_SESSION_STATE", "PWD")
_SDK_PREFIX = "CLAUDE_AGENT_SDK_"


def _environment(names: str) -> dict[str, str]:
    keep = {name for name in names.split(",") if name} | set(SDK_VARIABLES)
    return {k: v for k, v in os.environ.items() if k in keep or k.startswith(_SDK_PREFIX)}


def end_group(pgid: int, grace_s: float = GRACE_S) -> None:
    """SIGTERM every process of the group ``pgid`` and every process below this one, then
    SIGKILL what is left after ``grace_s`` seconds (orphans this process adopted are reaped
    meanwhile).

    The processes below this one are found whatever their group or session: Claude Code runs
    each Bash command in a session of its own, so what a command leaves running is out of the
    CLI's group, and is this process's once its shell ends (it is their subreaper).
    """
    if not _signal_all(pgid, signal.SIGTERM):
        return
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        _reap()
        if not _signal_all(pgid, 0):
            return
        time.sleep(0.02)
    # SIGKILL cannot be ignored: what is still found after a sweep was forked meanwhile.
    deadline = time.monotonic() + 1.0
    while _signal_all(pgid, signal.SIGKILL) and time.monotonic() < deadline:
        time.sleep(0.02)
        _reap()


def alive(pid: int) -> bool:
    """Whether process ``pid`` is running (a zombie has ended: its parent only has to reap it)."""
    if not os.path.isdir("/proc/self"):  # no /proc here: ask the kernel
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat:
            state = stat.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False  # it ended while we looked
    return state not in ("Z", "X")


def wait_ended(pid: int, timeout_s: float) -> bool:
    """Wait until process ``pid`` has ended, at most ``timeout_s``; whether it has."""
    deadline = time.monotonic() + timeout_s
    while alive(pid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.02)
    return True


def _signal_all(pgid: int, signum: int) -> bool:
    """Send ``signum`` to the group ``pgid`` and to every process below this one; whether
    there was any (0 only asks)."""
    found = False
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signum)
        found = True
    for pid in _descendants():
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)
            found = True
    return found


def _descendants() -> set[int]:
    """The living processes below this one, read from ``/proc`` (none where there is none)."""
    children: dict[int, list[int]] = {}
    with contextlib.suppress(OSError):
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            try:
                with open(f"/proc/{name}/stat", encoding="ascii", errors="replace") as stat:
                    state, ppid = stat.read().rsplit(")", 1)[1].split()[:2]
            except (OSError, ValueError):
                continue  # it ended while we looked
            if state not in ("Z", "X"):  # a zombie is dead: its parent reaps it
                children.setdefault(int(ppid), []).append(int(name))
    found: set[int] = set()
    todo = [os.getpid()]
    while todo:
        for pid in children.get(todo.pop(), ()):
            if pid not in found:
                found.add(pid)
                todo.append(pid)
    return found


def _reap() -> None:
    """Collect every child of this process that has ended (orphans it adopted included)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _orphaned() -> None:
    """In the child: killed if the launcher itself is killed (SIGKILL leaves it no time)."""
    _prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG


def _prctl(option: int, value: int) -> None:
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)


_USAGE = "usage: python -m orchestrator.adapters.process_group [--env=NAME,...] PROGRAM [ARG ...]"


def main(argv: list[str]) -> int:
    """Run ``argv`` in its own process group; its exit status."""
    env: dict[str, str] | None = None
    if argv and argv[0].startswith("--env="):
        env, argv = _environment(argv[0].removeprefix("--env=")), argv[1:]
    if not argv:
        sys.stderr.write(_USAGE + "\n")
        return 2
    parent = os.getppid()
    _prctl(1, int(signal.SIGTERM))  # PR_SET_PDEATHSIG: end with the process that started us
    if os.getppid() != parent:  # it died before that was armed
        return 143
    _prctl(36, 1)  # PR_SET_CHILD_SUBREAPER: the group's orphans become ours, to reap
    if pidfile := os.environ.get(PIDFILE_ENV):
        # Whole or not at all: whoever stops the run may read it at any moment.
        with contextlib.suppress(OSError):
            partial = f"{pidfile}.{os.getpid()}"
            with open(partial, "w", encoding="ascii") as out:
                out.write(f"{os.getpid()}\n")
            os.replace(partial, pidfile)
    # The signals are taken before the program starts: one that came while it was starting
    # would otherwise end this process alone and leave the group running.
    group = _Group()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, group.stop)
    signal.signal(signal.SIGALRM, group.kill)
    try:
        child = subprocess.Popen(argv, start_new_session=True, env=env, preexec_fn=_orphaned)
    except OSError as exc:
        sys.stderr.write(f"cannot start {argv[0]}: {exc.strerror or exc}\n")
        return 127 if not group.stopping else 128 + group.stopping[0]
    return _supervise(child, group)


class _Group:
    """The program's process group once it started, and the signals asking it to stop."""

    def __init__(self) -> None:
        self.pgid: int | None = None
        self.stopping: list[int] = []

    def stop(self, signum: int, _frame: FrameType | None) -> None:
        if not self.stopping:
            # Whatever ignores SIGTERM is killed when the grace period ends (SIGALRM).
            signal.setitimer(signal.ITIMER_REAL, GRACE_S)
        self.stopping.append(signum)
        self.send(signal.SIGTERM)

    def kill(self, _signum: int, _frame: FrameType | None) -> None:
        self.send(signal.SIGKILL)

    def send(self, signum: int) -> None:
        if self.pgid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pgid, signum)


def _supervise(child: subprocess.Popen[bytes], group: _Group) -> int:
    """Wait for ``child``, passing signals on to its group; end the group after it."""
    group.pgid = child.pid
    if group.stopping:  # asked to stop while it was starting
        group.send(signal.SIGTERM)
    status = child.wait()
    signal.setitimer(signal.ITIMER_REAL, 0)
    end_group(child.pid)  # whatever it left running
    if status < 0:
        return 128 - status
    if group.stopping and status == 0:
        return 128 + group.stopping[0]
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
