"""``arena up``'s web console, in a process of its own: ``arena web`` serving the socket that
``arena up`` bound (so a busy port or a missing token stops ``arena up`` at once, before
anything starts).

Its own process, so that people watching rooms and reading pages never slow the daemon: the
console's work (reading messages, rendering them, feeding event streams) runs beside the
daemon's event loop, not in it. It is tied to ``arena up`` like the workers (it ends when
``arena up`` dies), gets SIGTERM as soon as stopping begins, and says when it answers.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import sys

from orchestrator.adapters.spawn import die_with_parent
from orchestrator.errors import ServiceError
from orchestrator.settings import Settings

__all__ = ["INHERITED_SOCKET", "start", "stop", "wait_ready"]

INHERITED_SOCKET = "ARENA_WEB_FD"
"""The variable that hands ``arena web`` the file descriptor of a socket to serve on."""
READY = "arena: console"
_READY_TIMEOUT_S = 60.0


async def start(
    settings: Settings, sock: socket.socket, redis_url: str
) -> asyncio.subprocess.Process:
    """``arena web`` on ``sock`` (bound by the caller, who may close its copy afterwards)."""
    env = dict(os.environ)
    env["REDIS_URL"] = redis_url
    env["ARENA_DATA_DIR"] = str(settings.data_dir.resolve())
    env[INHERITED_SOCKET] = str(sock.fileno())
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "orchestrator",
        "web",
        env=env,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        pass_fds=(sock.fileno(),),
        start_new_session=True,
        # Spawned by the event loop's thread, which lives as long as `arena up`.
        preexec_fn=die_with_parent(signal.SIGTERM),
    )


async def wait_ready(process: asyncio.subprocess.Process) -> str:
    """The line the console prints once it answers (``arena: console URL``).

    Raises:
        ServiceError: it ended, or did not answer within a minute (its reason is on stderr).
    """
    assert process.stdout is not None
    try:
        async with asyncio.timeout(_READY_TIMEOUT_S):
            while line := (await process.stdout.readline()).decode(errors="replace"):
                if line.startswith(READY):
                    return line.strip()
    except TimeoutError:
        raise ServiceError("console", "the web console did not answer within a minute") from None
    code = await process.wait()
    raise ServiceError("console", f"the web console ended at start (exit {code}; see above)")


async def stop(process: asyncio.subprocess.Process, timeout_s: float) -> None:
    """SIGTERM, then SIGKILL what is left after ``timeout_s``."""
    if process.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGTERM)
    try:
        async with asyncio.timeout(timeout_s):
            await process.wait()
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        await process.wait()
