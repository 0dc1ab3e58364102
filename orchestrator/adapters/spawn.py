"""What starting a local server or child process asks of the system: a port free to listen
on (:func:`check_port_free`), a unix socket path short enough (:func:`socket_fits`), and a
child that ends with its parent (:func:`die_with_parent`).

``arena up`` uses both for what it runs: the embedded Redis and MQTT broker, and the workers.
"""

from __future__ import annotations

import ctypes
import errno
import os
import signal
import socket
import sys
from collections.abc import Callable
from pathlib import Path

from orchestrator.errors import ServiceError

__all__ = [
    "SOCKET_PATH_LIMIT",
    "check_port_free",
    "die_with_parent",
    "end_with_parent",
    "owner_gone",
    "process_owner",
    "socket_fits",
]

_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
# sun_path holds 108 bytes on Linux and 104 on macOS, including the trailing NUL.
SOCKET_PATH_LIMIT = 103 if sys.platform == "darwin" else 107


def socket_fits(path: Path) -> bool:
    """Whether a unix socket can be bound at ``path`` (its length is limited)."""
    return len(os.fsencode(path)) <= SOCKET_PATH_LIMIT


def die_with_parent(sig: signal.Signals) -> Callable[[], None] | None:
    """A ``preexec_fn`` that has the child receive ``sig`` when its parent dies (Linux).

    The kernel sends it when the *thread* that spawned the child ends, so spawn from a thread
    that lives as long as the process (the main thread, or the event loop's). Returns None
    where the kernel offers no such signal.
    """
    if not sys.platform.startswith("linux"):
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    prctl.restype = ctypes.c_int
    parent = os.getpid()

    def arm() -> None:
        prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
        if os.getppid() != parent:  # the parent died before the signal was armed
            os.kill(os.getpid(), sig)

    return arm


def end_with_parent(sig: signal.Signals) -> None:
    """Have this process receive ``sig`` when its parent dies (Linux; elsewhere nothing)."""
    if not sys.platform.startswith("linux"):
        return
    parent = os.getppid()
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
    if os.getppid() != parent:  # it died before the signal was armed
        os.kill(os.getpid(), sig)


def check_port_free(service: str, host: str, port: int, hint: str) -> None:
    """Check that a server could listen on ``host:port`` (by binding it for a moment).

    Raises:
        ServiceError: one line naming the port, with ``hint`` (the settings to change).
    """
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
        with socket.socket(family, kind, proto) as probe:
            # As the broker will: a socket in TIME_WAIT must not count as taken.
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind(address)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise ServiceError(service, f"port {port} on {host} is already in use", hint) from exc
        reason = exc.strerror or str(exc)
        raise ServiceError(service, f"cannot listen on {host}:{port}: {reason}", hint) from exc


def _started(pid: int) -> str | None:
    """When process ``pid`` started (clock ticks since boot, Linux), None if it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[-1].split()
    return fields[19] if len(fields) > 19 and fields[0] != "Z" else None


def process_owner() -> str:
    """This process, as ``host:pid:start``: a pid reused by another process does not match."""
    return f"{socket.gethostname()}:{os.getpid()}:{_started(os.getpid()) or '?'}"


def owner_gone(owner: str) -> bool | None:
    """Whether the process ``owner`` (from :func:`process_owner`) has ended: None when it ran
    on another host (or this system cannot tell)."""
    host, _, rest = owner.partition(":")
    pid, _, start = rest.partition(":")
    if host != socket.gethostname() or not pid.isdigit() or start == "?":
        return None
    return _started(int(pid)) != start
