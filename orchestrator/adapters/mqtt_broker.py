"""The embedded MQTT broker: ``amqtt`` serving clients in the calling event loop, where only
the arena publishes on its topics.

When ``MQTT_URL`` is unset, ``arena up`` runs a :class:`MqttBroker` on loopback. Anyone may
subscribe without a login; publishing on ``arena/...`` takes the arena's login (user ``arena``,
a password made for each run), which the broker keeps in the data folder (``mqtt-login``, read
by its owner only) for the arena's processes there: :func:`publisher_url`. The rules are
:mod:`orchestrator.adapters.mqtt_guard`'s.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import TracebackType
from typing import Any, Self
from urllib.parse import quote

from orchestrator.adapters.spawn import check_port_free
from orchestrator.errors import ServiceError
from orchestrator.files import write_atomic
from orchestrator.settings import Settings

__all__ = ["PUBLISHER", "MqttBroker", "login_file", "publisher_url"]

logger = logging.getLogger(__name__)

PUBLISHER = "arena"  # the user name the arena publishes under on the embedded broker
_GUARD = "orchestrator.adapters.mqtt_guard"


def login_file(data_dir: Path) -> Path:
    """Where the running embedded broker's publishing password is kept (mode 0600)."""
    return data_dir / "mqtt-login"


def publisher_url(settings: Settings) -> str:
    """The URL the arena publishes with: ``MQTT_URL`` as set, else the embedded broker's with
    the arena's login from the data folder (with none kept there, no login: the embedded
    broker then drops what is published on the arena's topics)."""
    if settings.mqtt_url:
        return settings.mqtt_url
    try:
        password = login_file(settings.data_dir).read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        return settings.effective_mqtt_url
    return _login_url(settings.mqtt_host, settings.mqtt_port, password)


def _login_url(host: str, port: int, password: str) -> str:
    return f"mqtt://{PUBLISHER}:{quote(password, safe='')}@{host}:{port}"


class MqttBroker:
    """The embedded MQTT broker (``amqtt``) over TCP: anyone may subscribe; only the arena's
    login (:data:`PUBLISHER` and ``password``) may publish on the arena's topics.

    Its INFO logging is lowered to WARNING unless this module logs at DEBUG.
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 1883,
        *,
        password: str | None = None,
        keep_login: Path | None = None,
    ) -> None:
        """A broker to start on ``host:port``.

        Args:
            host: the address to listen on.
            port: the TCP port.
            password: the arena's publishing password; by default a new random one.
            keep_login: a file to keep the password in while the broker runs (see
                :func:`login_file`), for the arena's other processes; never printed.
        """
        self.host = host
        self.port = port
        self._password = password or secrets.token_urlsafe(32)
        self._keep_login = keep_login
        self._broker: Any = None

    @property
    def url(self) -> str:
        """How clients reach the broker, without a login (to subscribe)."""
        return f"mqtt://{self.host}:{self.port}"

    @property
    def publisher_url(self) -> str:
        """How the arena reaches the broker to publish, with its login (a secret)."""
        return _login_url(self.host, self.port, self._password)

    async def start(self) -> None:
        """Listen on ``host:port``.

        Raises:
            ServiceError: the port is taken or the broker failed to start.
        """
        if self._broker is not None:
            return
        # amqtt reports a taken port obscurely, so try the bind ourselves first.
        check_port_free("mqtt", self.host, self.port, "set ARENA_MQTT_PORT or MQTT_URL")
        _quiet_broker_logs()
        # Imported here: amqtt is heavy and only `arena up` needs it.
        from amqtt.broker import Broker

        login = {"username": PUBLISHER, "password": self._password}
        config = {
            "listeners": {"default": {"type": "tcp", "bind": f"{self.host}:{self.port}"}},
            "plugins": {
                f"{_GUARD}.ArenaLogin": login,
                f"{_GUARD}.ArenaTopics": {"username": PUBLISHER},
            },
        }
        broker = Broker(config)
        broker.stream_connected = _closing_when_done(broker.stream_connected)
        try:
            await broker.start()
        except Exception as exc:
            problem = f"the embedded broker failed to start on {self.host}:{self.port}: {exc}"
            raise ServiceError("mqtt", problem, hint="set MQTT_URL to use another broker") from exc
        self._broker = broker
        if self._keep_login is not None:
            # Readable by this user only (write_atomic's default mode is 0600).
            await asyncio.to_thread(write_atomic, self._keep_login, self._password + "\n")
        logger.info("MQTT broker listening at %s", self.url)

    async def stop(self) -> None:
        """Disconnect every client and close the listener."""
        broker, self._broker = self._broker, None
        if broker is not None:
            if self._keep_login is not None:
                self._keep_login.unlink(missing_ok=True)
            await broker.shutdown()
            logger.info("MQTT broker at %s stopped", self.url)

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()


def _closing_when_done(
    connected: Callable[..., Awaitable[None]],
) -> Callable[..., Awaitable[None]]:
    """amqtt's connection handler, closing the connection when it returns: amqtt leaves it
    open when a client goes before its CONNECT, and the socket leaks."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, **kw: Any) -> None:
        try:
            await connected(reader, writer, **kw)
        finally:
            writer.close()

    return handle


def _quiet_broker_logs() -> None:
    if logger.isEnabledFor(logging.DEBUG):
        return
    for name in ("amqtt", "transitions"):
        noisy = logging.getLogger(name)
        if noisy.level == logging.NOTSET:  # leave explicit configuration alone
            noisy.setLevel(logging.WARNING)
