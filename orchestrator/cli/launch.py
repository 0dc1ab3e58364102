"""The ``arena`` command's first step: a command that reads is handed to the warm command server
of a running ``arena up`` when there is one (:mod:`orchestrator.cli.warm`), every other command,
and every command when no server answers, runs here as it always has.

This module imports nothing but the standard library's smallest parts, so handing over costs a
few milliseconds where starting cold costs most of a second. The server is found as
``cli.sock`` in the data folder (``ARENA_DATA_DIR``, else ``./data``), the folder the command's
own settings name; ``ARENA_CLI_SERVER=false`` runs every command here.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import sys
from collections.abc import Iterator
from types import FrameType
from typing import Any

__all__ = ["READS", "main"]

# The commands handed over: they read and write nothing, so a command stopped because its
# ``arena`` went away loses nothing. A group's entry names its subcommands that read.
READS: dict[str, frozenset[str] | None] = {
    "history": None,
    "tail": None,
    "dead-letters": None,
    "route": None,
    "status": None,
    "check": None,
    "jobs": None,
    "budget": None,
    "growth": None,
    "logs": None,
    "summary": None,
    "context": None,
    "runs": None,
    "run": frozenset({"show"}),
    "approvals": None,
    "memory": frozenset({"list", "search", "show", "stats", "history"}),
}
_HELP = frozenset({"--help", "-h", "--version"})
_FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_HANDSHAKE_S = 10.0
_FALSE = frozenset({"0", "false", "f", "no", "n", "off"})


def main() -> None:
    """Run ``arena``: through the warm server when it reads and one answers, else here."""
    argv = sys.argv[1:]
    if _reads(argv) and _enabled():
        try:
            code = _hand_over(argv)
        except KeyboardInterrupt:
            code = 130
        if code is not None:
            sys.exit(code)
    from orchestrator.cli.main import main as run_here

    run_here()


def _reads(argv: list[str]) -> bool:
    if not argv or argv[0] in _HELP:
        return True
    if argv[0] not in READS:
        return False
    subcommands = READS[argv[0]]
    if subcommands is None:
        return True
    rest = [arg for arg in argv[1:] if not arg.startswith("-")]
    return not rest or rest[0] in subcommands


def _setting(name: str) -> str | None:
    """An ``ARENA_`` setting as the settings read it: the name in any case."""
    wanted = f"ARENA_{name}"
    found = [value for key, value in os.environ.items() if key.upper() == wanted]
    return found[0] if found else None


def _enabled() -> bool:
    value = _setting("CLI_SERVER")
    return value is None or value.strip().lower() not in _FALSE


def _socket_path() -> str:
    return os.path.join(_setting("DATA_DIR") or "data", "cli.sock")


def _hand_over(argv: list[str]) -> int | None:
    """Run ``argv`` in the warm server; its exit code, or None when none would take it."""
    try:
        for fd in (0, 1, 2):
            os.fstat(fd)
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.settimeout(_HANDSHAKE_S)
        conn.connect(_socket_path())
    except (OSError, ValueError):  # no server, a stale socket, a closed descriptor
        return None
    with conn:
        try:
            body = json.dumps(_request(argv)).encode()
            socket.send_fds(conn, [len(body).to_bytes(4, "big")], [0, 1, 2])
            conn.sendall(body)
            replies = _replies(conn)
            first = next(replies, {})
        except OSError:
            return None
        if "started" not in first:
            return None  # refused: another installation, or the code changed
        conn.settimeout(None)
        return _follow(conn, replies)


def _request(argv: list[str]) -> dict[str, object]:
    return {
        "argv": argv,
        "prog": _program(),
        "env": dict(os.environ),
        "cwd": os.getcwd(),
        "umask": _umask(),
        "python": sys.executable,
        "package": os.path.dirname(os.path.dirname(os.path.realpath(__file__))),
        "path": sys.path[1:],
        "stdin": _how(sys.stdin),
        "stdout": _how(sys.stdout),
        "stderr": _how(sys.stderr),
    }


def _program() -> str:
    """The command's name in its usage lines, as click would tell it in this process."""
    package = getattr(sys.modules.get("__main__"), "__package__", None)
    if not package:
        return os.path.basename(sys.argv[0])
    name = os.path.splitext(os.path.basename(sys.argv[0]))[0]
    return f"python -m {package}" + ("" if name == "__main__" else f".{name}")


def _umask() -> int:
    mask = os.umask(0o22)
    os.umask(mask)
    return mask


def _how(stream: object) -> dict[str, str]:
    return {
        "encoding": str(getattr(stream, "encoding", None) or ""),
        "errors": str(getattr(stream, "errors", None) or ""),
    }


def _follow(conn: socket.socket, replies: Iterator[dict[str, Any]]) -> int:
    """Wait for the command's exit code, passing on the signals this process gets."""
    sent: list[int] = []

    def forward(signum: int, frame: FrameType | None) -> None:
        sent.append(signum)
        with contextlib.suppress(OSError):
            conn.sendall(f"{signum}\n".encode())

    for signum in _FORWARDED:
        if signal.getsignal(signum) is not signal.SIG_IGN:  # as the shell left it
            signal.signal(signum, forward)
    for reply in replies:
        if "exit" in reply:
            return int(reply["exit"])
    if sent:  # the command ended on the signal: so does this process
        signal.signal(sent[-1], signal.SIG_DFL)
        os.kill(os.getpid(), sent[-1])
    print("arena: the command server stopped before the command ended", file=sys.stderr)
    return 1


def _replies(conn: socket.socket) -> Iterator[dict[str, Any]]:
    """The server's replies, one JSON object a line, until it closes the connection."""
    pending = b""
    while True:
        try:
            data = conn.recv(4096)
        except InterruptedError:
            continue
        except OSError:
            return
        if not data:
            return
        pending += data
        *lines, pending = pending.split(b"\n")
        for line in lines:
            try:
                reply = json.loads(line)
            except ValueError:
                continue
            if isinstance(reply, dict):
                yield reply
