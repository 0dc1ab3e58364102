"""The warm command server of ``arena up``: the commands that read, answered without a cold start.

A new Python process spends most of an ``arena history`` importing libraries (the settings'
validation, SQL, Redis), not reading. While ``arena up`` runs, this server keeps one process
with everything imported, listening on ``data/cli.sock`` (owner only). The ``arena`` command
(:mod:`orchestrator.cli.launch`) hands it a read command: its arguments, environment, working
folder, umask and its own standard input, output and error (the descriptors themselves, passed
over the socket). The server forks; the child takes all of these on as its own and runs the
command as a fresh ``arena`` process would, writing straight to the person's terminal or pipe,
then reports the exit code. Nothing runs in the server itself: each command has a process of
its own, as before, only without the imports.

The child refuses, and the command then runs cold, when it was asked by another Python or
another copy of the code, or when the code changed on disk after the server started (the
server then exits, and ``arena up`` starts a fresh one). Signals the person sends to ``arena``
(Ctrl-C, SIGTERM, SIGHUP) are passed on; when ``arena`` goes away, its command is stopped.

Run as ``python -m orchestrator.cli.warm SOCKET`` (``arena up`` does).
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import io
import json
import logging
import os
import pkgutil
import signal
import socket
import struct
import sys
import threading
import time
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

__all__ = ["code_stamp", "main", "serve"]

# A request is a 4-byte length, then that much JSON; arguments and environment fit in 1 MiB.
_REQUEST_LIMIT = 1 << 20
# When the person's ``arena`` goes away, its command gets Ctrl-C, and this long to end.
_ORPHAN_GRACE_S = 5.0
_PACKAGE = Path(__file__).resolve().parents[1]

# Each module of the package: its path, modification time and size.
Stamp = tuple[tuple[str, int, int], ...]

logger = logging.getLogger(__name__)


def code_stamp() -> Stamp:
    """Each module of the package with its modification time and size: it changes with the
    code (a module edited, added or removed)."""
    found = []
    for folder, _, files in os.walk(_PACKAGE):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                info = os.stat(path)
                found.append((path, info.st_mtime_ns, info.st_size))
    return tuple(sorted(found))


def _preload() -> None:
    """Import every module of the package and what the commands load on first use."""
    for info in pkgutil.walk_packages([str(_PACKAGE)], prefix="orchestrator."):
        if info.name != "orchestrator.__main__":  # it would run the command
            importlib.import_module(info.name)
    # Loaded by the first call rather than by import: the SQLite dialect, the token counter.
    from sqlalchemy import create_engine

    create_engine("sqlite://").dispose()
    from orchestrator.core.context.tokens import TokenCounter

    TokenCounter().count("warm")


def serve(path: Path) -> None:
    """Import everything, listen on ``path`` and fork a child for each request, until SIGTERM
    or SIGINT, or until the code on disk changes."""
    _preload()
    stamp = code_stamp()
    if threading.active_count() > 1:  # forking would copy a lock some thread holds
        raise RuntimeError("a thread was started while importing; the server cannot fork")
    gc.collect()
    gc.freeze()  # the children share these pages: the collector must not touch them
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    with contextlib.suppress(FileNotFoundError):
        if path.is_socket():
            path.unlink()  # left by a server that was killed
    mask = os.umask(0o177)
    try:
        listener.bind(str(path))
    finally:
        os.umask(mask)
    listener.listen(64)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped by the kernel
    signal.signal(signal.SIGTERM, _stop)
    logger.debug("warm command server listening on %s", path)
    try:
        while True:
            conn, _ = listener.accept()
            try:
                pid = os.fork()
            except OSError:
                conn.close()
                continue
            if pid == 0:
                listener.close()
                _answer(conn, stamp)
            conn.close()
    except _Stopped:
        pass
    finally:
        listener.close()
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


class _Stopped(Exception):
    pass


def _stop(signum: int, frame: object) -> None:
    raise _Stopped


def _answer(conn: socket.socket, stamp: Stamp) -> NoReturn:
    """In the forked child: take on the request's process state, run it, report, exit."""
    code = 1
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        if _peer_uid(conn) != os.getuid():
            os._exit(1)
        try:
            request, fds = _receive(conn)
        except (OSError, ValueError):  # not a request of `arena`'s: nothing to answer
            os._exit(2)
        refusal = _refusal(request, stamp)
        if refusal is not None:
            _send(conn, {"refused": refusal})
            if refusal == "the code changed":
                os.kill(os.getppid(), signal.SIGTERM)  # `arena up` starts a fresh server
            os._exit(0)
        _take_on(request, fds)
        _send(conn, {"started": os.getpid()})
        ended = threading.Event()
        threading.Thread(target=_watch, args=(conn, ended), daemon=True).start()
        code = _run(request["argv"], str(request.get("prog") or "arena"))
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # too late to interrupt: it ended
        ended.set()
        _send(conn, {"exit": code})
    except BaseException:  # the child must never return into the server's loop
        with contextlib.suppress(BaseException):
            traceback.print_exc()
    finally:
        with contextlib.suppress(BaseException):
            logging.shutdown()
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def _peer_uid(conn: socket.socket) -> int:
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return int(struct.unpack("3i", creds)[1])


def _receive(conn: socket.socket) -> tuple[dict[str, Any], list[int]]:
    conn.settimeout(10)
    head, fds, _, _ = socket.recv_fds(conn, 4, 3)
    while len(head) < 4:
        more = conn.recv(4 - len(head))
        if not more:
            raise ConnectionError("the request ended early")
        head += more
    size = int.from_bytes(head, "big")
    if len(fds) != 3 or size > _REQUEST_LIMIT:
        raise ValueError("a malformed request")
    body = bytearray()
    while len(body) < size:
        more = conn.recv(min(65536, size - len(body)))
        if not more:
            raise ConnectionError("the request ended early")
        body += more
    conn.settimeout(None)
    request = json.loads(body)
    if not isinstance(request, dict):
        raise ValueError("a malformed request")
    return request, fds


def _refusal(request: dict[str, Any], stamp: Stamp) -> str | None:
    """Why this server must not answer the request (another Python or code), or None."""
    if request.get("python") != sys.executable or request.get("package") != str(_PACKAGE):
        return "another installation"
    if request.get("path") != sys.path[1:]:
        return "another module path"
    if code_stamp() != stamp:
        return "the code changed"
    return None


def _take_on(request: dict[str, Any], fds: list[int]) -> None:
    """Become the person's process: their descriptors, environment, folder and umask."""
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.environ.clear()
    os.environ.update(request["env"])
    time.tzset()
    os.chdir(request["cwd"])
    os.umask(int(request["umask"]))
    sys.argv = [str(request.get("prog") or "arena"), *request["argv"]]
    streams: list[tuple[int, str, dict[str, str]]] = [
        (0, "r", request["stdin"]),
        (1, "w", request["stdout"]),
        (2, "w", request["stderr"]),
    ]
    sys.stdin, sys.stdout, sys.stderr = (_stream(fd, mode, how) for fd, mode, how in streams)
    logging.root.handlers.clear()
    logging.root.setLevel(logging.WARNING)
    from orchestrator.cli import output

    output.renew()  # made at import, for the server's streams and environment


def _stream(fd: int, mode: str, how: dict[str, str]) -> Any:
    """A text stream on ``fd`` as a fresh interpreter would make it (line-buffered on a
    terminal, with the caller's encoding)."""
    tty = os.isatty(fd)
    raw = io.FileIO(fd, mode, closefd=False)
    buffered: Any = io.BufferedWriter(raw) if mode == "w" else io.BufferedReader(raw)
    return io.TextIOWrapper(
        buffered,
        encoding=how.get("encoding") or "utf-8",
        errors=how.get("errors") or "strict",
        line_buffering=(tty and mode == "w") or fd == 2,
    )


def _run(argv: list[str], prog: str) -> int:
    from orchestrator.cli.main import main

    try:
        main.main(args=argv, prog_name=prog)
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            return exc.code or 0
        print(exc.code, file=sys.stderr)
        return 1


def _watch(conn: socket.socket, ended: threading.Event) -> None:
    """Pass on the signals ``arena`` forwards; when it goes away, stop the command."""
    for signum in _signals(conn):
        if not ended.is_set():
            os.kill(os.getpid(), signum)
    if ended.is_set():
        return
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(_ORPHAN_GRACE_S)
    os._exit(1)


def _signals(conn: socket.socket) -> Iterator[int]:
    pending = b""
    while True:
        try:
            data = conn.recv(64)
        except OSError:
            return
        if not data:
            return
        pending += data
        *lines, pending = pending.split(b"\n")
        for line in lines:
            if line.strip().isdigit() and int(line) in _FORWARDED:
                yield int(line)


_FORWARDED = {int(signal.SIGINT), int(signal.SIGTERM), int(signal.SIGHUP)}


def _send(conn: socket.socket, message: dict[str, Any]) -> None:
    with contextlib.suppress(OSError):
        conn.sendall(json.dumps(message).encode() + b"\n")


def main() -> None:
    """``python -m orchestrator.cli.warm SOCKET``."""
    if len(sys.argv) != 2:
        sys.exit("usage: python -m orchestrator.cli.warm SOCKET")
    with contextlib.suppress(KeyboardInterrupt):
        serve(Path(sys.argv[1]))


if __name__ == "__main__":
    main()
