"""While `arena up` runs, a command that reads is answered by its warm command server: the same
output, errors and exit code as a cold start, without this process importing the libraries;
Ctrl-C reaches the command, a command whose `arena` was killed ends, a server that cannot
answer (code changed on disk, switched off) leaves the command to run cold. Real `arena up`
and `arena` processes, the offline model."""

from __future__ import annotations

import contextlib
import fcntl
import os
import pty
import re
import signal
import socket
import stat
import struct
import subprocess
import sys
import termios
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from orchestrator.cli.main import main
from orchestrator.client import ArenaClient
from tests.arena_helpers import REPO, read_until, start_background, stop_process
from tests.arena_up import Arena, alive, arenas, processes_on
from tests.waiting import block_until

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(300),
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc, SO_PEERCRED"),
]

SQL = ("sqlalchemy", "sqlmodel")


@pytest.fixture(scope="module")
def arena(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Arena]:
    """One `arena up` for the module, with one question answered in group `demo`."""
    for running in arenas(tmp_path_factory.mktemp("warm")):
        running.start()
        with ArenaClient(running.url) as client:
            client.post_and_wait("demo", "@architect we decided to use JWT", "alex", 60)
        listening = running.data / "cli.sock"
        block_until(listening.exists, timeout_s=60, what="the command server")
        yield running


def run(arena: Arena, *args: str, **env: str) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    """`arena ARGS` as its own process; what it printed, and the packages that process
    imported (from Python's import log, which is kept out of its stderr)."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "orchestrator", *args],
        cwd=REPO,
        env={**arena.env, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    log = [line for line in done.stderr.splitlines() if line.startswith("import time:")]
    names = {line.rsplit("|", 1)[1].strip().split(".")[0] for line in log if "|" in line}
    stderr = "".join(
        line for line in done.stderr.splitlines(keepends=True) if not line.startswith("import time")
    )
    return subprocess.CompletedProcess(done.args, done.returncode, done.stdout, stderr), names


def command_server(arena: Arena) -> int:
    """The pid of the run's command server."""
    (pid,) = [p for p in processes_on(arena.data) if b"orchestrator.cli.warm" in _cmdline(p)]
    return pid


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def children_of(pid: int) -> list[int]:
    """The live child processes of ``pid``."""
    found = []
    for entry in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = entry.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid and fields[0] != "Z":
            found.append(int(entry.parent.name))
    return found


READS = [
    ("history", "demo"),
    ("history", "nobody-here"),
    ("history", "demo", "--limit", "0"),  # a usage error
    ("memory", "list", "--json"),
    ("memory", "show", "999"),
    ("logs", "architect"),
    ("route", "@tester what should we test first?"),
    ("dead-letters",),
    ("runs",),
    ("run", "show", "nope:1:architect"),  # no such run: exit 1
    ("approvals", "--state", "all"),
]


@pytest.mark.parametrize("args", READS, ids=[" ".join(a) for a in READS])
def test_a_read_is_answered_warm_as_it_is_answered_here(arena: Arena, args: tuple[str, ...]):
    """The warm answer prints and exits as the same command run in this process does (the
    cold path: the same click command, here), and its `arena` process imports no SQL
    library."""
    warm, imports = run(arena, *args)
    here = CliRunner().invoke(main, list(args), env=arena.env, prog_name="python -m orchestrator")
    assert (warm.stdout, warm.stderr, warm.returncode) == (here.stdout, here.stderr, here.exit_code)
    assert "orchestrator" in imports  # the import log was read
    assert sorted(imports & set(SQL)) == []


@pytest.mark.parametrize("args", [("history", "demo"), ("--help",)])
def test_switched_off_a_read_starts_cold_and_says_the_same(arena: Arena, args: tuple[str, ...]):
    """With ARENA_CLI_SERVER=false the command imports what it needs itself (SQL to read the
    history), to the same output as the warm answer (the help as wide, too)."""
    warm, warm_imports = run(arena, *args)
    cold, imports = run(arena, *args, ARENA_CLI_SERVER="false")
    assert (cold.stdout, cold.stderr, cold.returncode) == (warm.stdout, warm.stderr, 0)
    assert sorted(warm_imports & set(SQL)) == []
    assert (set(SQL) <= imports) is (args[0] == "history")


def test_the_socket_is_the_owners_alone_and_junk_on_it_changes_nothing(arena: Arena):
    """cli.sock is mode 0600; a connection that sends junk is dropped without a word in the
    log of `arena up`, and the next command is answered warm."""
    path = arena.data / "cli.sock"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    for junk in (b"", b"\x00\x00\x00\x05hello", b"GET / HTTP/1.1\r\n\r\n", b"\xff" * 4):
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.connect(str(path))
            conn.sendall(junk)
            conn.shutdown(socket.SHUT_WR)
            conn.settimeout(10)
            with contextlib.suppress(ConnectionResetError):  # closed with the junk unread
                assert conn.recv(100) == b""
    done, imports = run(arena, "history", "demo")
    assert done.returncode == 0
    assert "we decided to use JWT" in done.stdout
    assert sorted(imports & set(SQL)) == []
    assert "Traceback" not in arena.log(0).read_text()


def test_ctrl_c_reaches_the_command_and_a_killed_arena_ends_its_command(arena: Arena):
    """`arena tail` answered warm: Ctrl-C ends it as it ends a cold one (exit 0) and its
    command's process goes; kill -9 of another `arena tail` ends that one's command too."""
    server = command_server(arena)
    env = dict(arena.env)
    tail = start_background([sys.executable, "-m", "orchestrator", "tail", "demo"], env)
    try:
        read_until(tail, "following group demo", 60)
        (command,) = children_of(server)
        tail.send_signal(signal.SIGINT)
        assert tail.wait(timeout=30) == 0
        block_until(lambda: not alive(command), timeout_s=30, what="the command to end")
    finally:
        stop_process(tail)

    killed = start_background([sys.executable, "-m", "orchestrator", "tail", "demo"], env)
    try:
        read_until(killed, "following group demo", 60)
        (command,) = children_of(server)
        killed.kill()
        killed.wait(timeout=30)
        block_until(lambda: not alive(command), timeout_s=30, what="the orphaned command to end")
    finally:
        stop_process(killed)
    assert children_of(server) == []


def test_changed_code_is_not_answered_by_the_old_server_which_arena_up_replaces(arena: Arena):
    """After a module of the package changes on disk, the next read runs cold (with the new
    code), the old server exits, and `arena up` starts one that answers warm again."""
    old = command_server(arena)
    module = REPO / "orchestrator" / "cli" / "launch.py"
    before = module.stat()
    os.utime(module, ns=(before.st_atime_ns, before.st_mtime_ns + 1_000_000_000))
    try:
        done, imports = run(arena, "history", "demo")
        assert done.returncode == 0
        assert "we decided to use JWT" in done.stdout
        assert set(SQL) <= imports  # cold

        def old_gone() -> bool:
            # A busy machine may make `arena` give up its handshake with the server (and run
            # the command itself) before the server saw the request: ask again until it has.
            if alive(old):
                run(arena, "history", "demo")
            return not alive(old)

        block_until(old_gone, timeout_s=90, what="the old server to exit")

        def warm_again() -> bool:
            pids = [p for p in processes_on(arena.data) if b"cli.warm" in _cmdline(p)]
            return bool(pids) and (arena.data / "cli.sock").exists()

        block_until(warm_again, timeout_s=60, what="a new command server")
        done, imports = run(arena, "history", "demo")
        assert done.returncode == 0
        assert "we decided to use JWT" in done.stdout
        assert sorted(imports & set(SQL)) == []
    finally:
        os.utime(module, ns=(before.st_atime_ns, before.st_mtime_ns))


def on_a_terminal(arena: Arena, *args: str, **env: str) -> bytes:
    """What `arena ARGS` writes to a terminal 60 columns wide."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 60, 0, 0))
    try:
        done = subprocess.run(
            [sys.executable, "-m", "orchestrator", *args],
            cwd=REPO,
            env={**arena.env, "TERM": "xterm-256color", **env},
            stdin=subprocess.DEVNULL,
            stdout=follower,
            stderr=follower,
            timeout=120,
            check=False,
        )
        os.close(follower)
        follower = -1
        written = b""
        with contextlib.suppress(OSError):  # EIO once everything written was read
            while chunk := os.read(leader, 65536):
                written += chunk
    finally:
        os.close(leader)
        if follower >= 0:
            os.close(follower)
    assert done.returncode == 0, written
    return written


def test_on_a_terminal_a_warm_answer_has_the_colours_and_width_of_a_cold_one(arena: Arena):
    """On a terminal the warm table is the cold one byte for byte: its colours and its width
    are the terminal's, not those of the server's output when it started."""
    warm = on_a_terminal(arena, "memory", "list")
    cold = on_a_terminal(arena, "memory", "list", ARENA_CLI_SERVER="false")
    assert b"\x1b[1m" in cold  # bold headers: colours are on
    shown = re.sub(r"\x1b\[[0-9;]*m", "", cold.decode())
    assert max(len(line) for line in shown.splitlines()) <= 60
    assert warm == cold
