"""Running the console: checks before it starts (:func:`check`, :func:`listen`) and
:func:`serve`, uvicorn in the caller's event loop until ``stop`` is set.

uvicorn installs no signal handlers here (``arena up`` owns SIGINT and SIGTERM) and logs
through the package's logging (``orchestrator.logs``): its access lines at INFO, which the
log set-up keeps off the terminal unless ``ARENA_LOG_LEVEL=DEBUG``.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import ipaddress
import logging
import socket
from collections.abc import Callable, Iterator

import uvicorn

from orchestrator.errors import ConfigError, ServiceError
from orchestrator.settings import Settings
from orchestrator.web.app import create_app

__all__ = ["check", "is_loopback", "listen", "serve", "url"]

_PORT_HINT = "set ARENA_WEB_PORT to another port, or 0 for no console"


def is_loopback(host: str) -> bool:
    """Whether ``host`` is a loopback address (or ``localhost``)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check(settings: Settings) -> None:
    """Refuse a console that anyone on the network could use.

    Raises:
        ConfigError: the console listens beyond loopback and ``ARENA_WEB_TOKEN`` is unset.
    """
    if settings.web_token is None and not is_loopback(settings.web_host):
        raise ConfigError(
            "ARENA_WEB_TOKEN",
            f"the console would listen on {settings.web_host}, beyond this machine, with no "
            "token: set ARENA_WEB_TOKEN (or ARENA_WEB_HOST=127.0.0.1)",
        )


def url(settings: Settings) -> str:
    """Where people open the console."""
    host = settings.web_host
    host = f"[{host}]" if ":" in host else host
    return f"http://{host}:{settings.web_port}"


def listen(settings: Settings) -> socket.socket:
    """:func:`check`, then the console's listening socket.

    Raises:
        ConfigError: see :func:`check`.
        ServiceError: the port is taken (one line naming ``ARENA_WEB_PORT``).
    """
    check(settings)
    host, port = settings.web_host, settings.web_port
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
        sock = socket.socket(family, kind, proto)
    except OSError as exc:
        raise ServiceError(
            "console", f"cannot listen on {host}:{port}: {exc}", _PORT_HINT
        ) from None
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(128)
    except OSError as exc:
        sock.close()
        problem = (
            f"port {port} on {host} is already in use"
            if exc.errno == errno.EADDRINUSE
            else f"cannot listen on {host}:{port}: {exc.strerror or exc}"
        )
        raise ServiceError("console", problem, _PORT_HINT) from None
    sock.set_inheritable(True)
    return sock


class _NoQuery(logging.Filter):
    """Access lines without the query string: a token put there by mistake stays out of logs."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and len(args) == 5 and isinstance(args[2], str):
            record.args = (*args[:2], args[2].partition("?")[0], *args[3:])
        return True


_ACCESS = logging.getLogger("uvicorn.access")
if not any(isinstance(f, _NoQuery) for f in _ACCESS.filters):
    _ACCESS.addFilter(_NoQuery())


class _Server(uvicorn.Server):
    """uvicorn leaving the process's signals alone, and saying when it answers."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.answering = asyncio.Event()

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started:
            self.answering.set()

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


async def serve(
    settings: Settings,
    stop: asyncio.Event,
    sock: socket.socket,
    *,
    ready: Callable[[], None] = lambda: None,
    failed: asyncio.Event | None = None,
    keepalive_s: float = 15.0,
) -> None:
    """Serve the console on ``sock`` until ``stop`` is set; ``ready`` is called once it
    answers, ``failed`` (``arena up``'s stop) is set if it fails. The socket is closed when
    it ends.

    Raises:
        ServiceError: when the console could not start.
    """
    config = uvicorn.Config(
        create_app(settings, keepalive_s=keepalive_s),
        log_config=None,
        access_log=True,
        lifespan="on",
        server_header=False,
        proxy_headers=False,
        timeout_graceful_shutdown=1,  # then open event streams are ended
    )
    server = _Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]), name="orchestrator.web.serve")
    try:
        answering = asyncio.create_task(server.answering.wait())
        await asyncio.wait([task, answering], return_when=asyncio.FIRST_COMPLETED)
        answering.cancel()
        if server.started:
            ready()
            stopping = asyncio.create_task(stop.wait())
            await asyncio.wait([task, stopping], return_when=asyncio.FIRST_COMPLETED)
            stopping.cancel()
        server.should_exit = True
        await task
    except SystemExit:  # uvicorn exits when its app cannot start
        raise ServiceError("console", "the web console could not start (see the log)") from None
    except Exception:
        if failed is not None:
            failed.set()
        raise
    finally:
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, SystemExit):
                await task
        sock.close()
