"""``arena web``: the web console alone, against the configured services (``arena up`` runs
the same command beside the daemon, on the socket it bound)."""

from __future__ import annotations

import asyncio
import os
import socket

import click

from orchestrator.cli.console import INHERITED_SOCKET
from orchestrator.cli.output import out
from orchestrator.cli.supervisor import stop_on_signals
from orchestrator.client import ArenaClient
from orchestrator.errors import ConfigError
from orchestrator.logs import configure
from orchestrator.settings import Settings
from orchestrator.web.listening import listen, url
from orchestrator.web.serve import serve

__all__ = ["web"]


@click.command()
@click.pass_obj
def web(settings: Settings) -> None:
    """Serve the web console alone, against the configured services.

    It posts and follows replies through the Redis of REDIS_URL (else the embedded Redis of
    an `arena up` running on ARENA_DATA_DIR) and reads the history from DATABASE_URL (else
    the SQLite file in ARENA_DATA_DIR); a running daemon answers. It listens on
    ARENA_WEB_HOST:ARENA_WEB_PORT (default 127.0.0.1:8080); a host other than loopback needs
    ARENA_WEB_TOKEN, which every page and API call then asks for. `arena up` starts the same
    console itself. Stops on Ctrl-C or SIGTERM.
    """
    configure(settings.log_level)
    if not settings.web_port:
        raise ConfigError("ARENA_WEB_PORT", "is 0 (no console): set a port to serve it on")
    inherited = os.environ.get(INHERITED_SOCKET)  # `arena up` bound it
    sock = socket.socket(fileno=int(inherited)) if inherited else listen(settings)
    with ArenaClient.from_settings(settings) as client:
        client.ping()

    async def _web() -> None:
        stop = asyncio.Event()
        stop_on_signals(stop)
        await serve(
            settings, stop, sock, ready=lambda: out.print(f"arena: console {url(settings)}")
        )

    asyncio.run(_web())
    out.print("arena: stopped")
