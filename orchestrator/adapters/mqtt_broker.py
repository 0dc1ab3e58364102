"""The embedded MQTT broker: ``amqtt`` serving anonymous clients in the calling event loop.

When ``MQTT_URL`` is unset, ``arena up`` runs a :class:`MqttBroker` on loopback.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any, Self

from orchestrator.adapters.spawn import check_port_free
from orchestrator.errors import ServiceError

__all__ = ["MqttBroker"]

logger = logging.getLogger(__name__)


class MqttBroker:
    """The embedded MQTT broker (``amqtt``), serving anonymous clients over TCP.

    Its INFO logging is lowered to WARNING unless this module logs at DEBUG.
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 1883) -> None:
        self.host = host
        self.port = port
        self._broker: Any = None

    @property
    def url(self) -> str:
        """How clients reach the broker."""
        return f"mqtt://{self.host}:{self.port}"

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

        config = {
            "listeners": {"default": {"type": "tcp", "bind": f"{self.host}:{self.port}"}},
            "plugins": {
                "amqtt.plugins.authentication.AnonymousAuthPlugin": {"allow_anonymous": True}
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
        logger.info("MQTT broker listening at %s", self.url)

    async def stop(self) -> None:
        """Disconnect every client and close the listener."""
        broker, self._broker = self._broker, None
        if broker is not None:
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
