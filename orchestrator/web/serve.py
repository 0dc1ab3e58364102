"""Running the console: :func:`serve`, uvicorn in the caller's event loop until ``stop`` is
set, on the socket :func:`orchestrator.web.listening.listen` made.

uvicorn installs no signal handlers here (``arena up`` owns SIGINT and SIGTERM) and logs
through the package's logging (``orchestrator.logs``): its access lines at INFO, which the
log set-up keeps off the terminal unless ``ARENA_LOG_LEVEL=DEBUG``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Callable, Iterator

import uvicorn
from fastapi import FastAPI

from orchestrator.errors import ServiceError
from orchestrator.memory.db import make_engine
from orchestrator.settings import Settings
from orchestrator.web.app import create_app

__all__ = ["serve"]


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
    try:
        # Opened here, not as the app starts: a database that cannot be opened is one clear
        # error (uvicorn would print the app's traceback and exit).
        engine = make_engine(settings.effective_database_url)
    except Exception:
        sock.close()
        if failed is not None:
            failed.set()
        raise
    try:
        app = create_app(settings, keepalive_s=keepalive_s, engine=engine)
        await _serve(app, stop, sock, ready=ready, failed=failed)
    finally:
        engine.dispose()


async def _serve(
    app: FastAPI,
    stop: asyncio.Event,
    sock: socket.socket,
    *,
    ready: Callable[[], None],
    failed: asyncio.Event | None,
) -> None:
    """uvicorn serving ``app`` on ``sock`` (see :func:`serve`)."""
    config = uvicorn.Config(
        app,
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
