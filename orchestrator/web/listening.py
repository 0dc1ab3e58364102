"""Where the console listens: the checks before it starts (:func:`check`), its listening socket
(:func:`listen`, bound by ``arena up`` or ``arena web`` before anything else starts) and its
address (:func:`url`). Nothing here imports the web stack, so ``arena up`` binds the console's
port without loading it (the console runs in a child process of its own)."""

from __future__ import annotations

import errno
import ipaddress
import socket

from orchestrator.errors import ConfigError, ServiceError
from orchestrator.settings import Settings

__all__ = ["check", "is_loopback", "listen", "url"]

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
