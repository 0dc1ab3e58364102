"""MQTT out: group replies published as JSON (QoS 1) without ever blocking message handling.

``publish()`` only queues; a background task keeps one connection to the broker, reconnects
with backoff when it is lost and sends what was queued meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections import deque
from collections.abc import Callable
from typing import Any

import aiomqtt
import paho.mqtt.client as mqtt
from paho.mqtt.properties import Properties
from paho.mqtt.reasoncodes import ReasonCode

from orchestrator.adapters.mqtt import mqtt_address

__all__ = ["MqttPublisher"]

logger = logging.getLogger(__name__)

WINDOW = 32  # messages sent before their acknowledgements are awaited
ACK_TIMEOUT_S = 10.0  # for a window's acknowledgements: then the connection is made again


class MqttPublisher:
    """Queues MQTT messages and sends them from a task of its own (``run``)."""

    def __init__(self, url: str, *, queue_size: int = 10_000, max_backoff_s: float = 30.0) -> None:
        self._address = mqtt_address(url)
        self._queue: deque[tuple[str, bytes]] = deque()
        self._queue_size = queue_size
        self._wakeup = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._max_backoff_s = max_backoff_s
        self._sending = 0  # taken from the queue, not yet acknowledged
        self.connected = False
        self.failures = 0  # attempts to connect that failed, and connections lost
        self.published = 0
        self.dropped = 0

    def publish(self, topic: str, payload: bytes) -> None:
        """Queue a message; the oldest queued one is dropped if the queue is full."""
        if len(self._queue) >= self._queue_size:
            self._queue.popleft()
            self.dropped += 1
            if self.dropped == 1 or self.dropped % 1000 == 0:
                logger.warning("mqtt queue full: %d messages dropped so far", self.dropped)
        self._queue.append((topic, payload))
        self._idle.clear()
        self._wakeup.set()

    @property
    def queued(self) -> int:
        """Messages not yet sent: waiting, or sent and not yet acknowledged."""
        return len(self._queue) + self._sending

    async def flush(self, timeout_s: float) -> bool:
        """Wait until everything queued has been sent, at most ``timeout_s``."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s):
                await self._idle.wait()
                return True
        return False

    async def run(self) -> None:
        """Keep a connection and send queued messages until cancelled."""
        backoff = 0.5
        refused = False
        while True:
            try:
                identifier = f"arena-{os.getpid()}-{id(self):x}"
                client_args = self._address.client_args()
                async with aiomqtt.Client(
                    **client_args, identifier=identifier, max_inflight_messages=WINDOW
                ) as client:
                    if not self.connected:
                        logger.info("mqtt connected to %s", self._address.where)
                    self.connected = True
                    backoff = 0.5
                    await self._send_all(client)
            except aiomqtt.MqttError as exc:
                self.failures += 1
                if _cancelled():
                    # Leaving the client on cancellation can fail (a disconnect that times
                    # out); its error must not swallow the cancellation.
                    raise asyncio.CancelledError from exc
                if self.connected:
                    logger.warning("mqtt connection lost (%s); retrying", exc)
                elif isinstance(exc, aiomqtt.MqttCodeError) and not refused:
                    # Retrying does not fix credentials: say so once, not at every attempt.
                    logger.warning(
                        "mqtt broker at %s refused the connection (%s); check MQTT_URL",
                        self._address.where,
                        exc,
                    )
                else:
                    logger.debug("mqtt connect failed (%s); retrying in %.1fs", exc, backoff)
                refused = isinstance(exc, aiomqtt.MqttCodeError) and not self.connected
                self.connected = False
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, self._max_backoff_s)

    async def _send_all(self, client: aiomqtt.Client) -> None:
        while True:
            while self._queue:
                batch = [self._queue.popleft() for _ in range(min(WINDOW, len(self._queue)))]
                await self._send(client, batch)
            self._idle.set()
            self._wakeup.clear()
            if _cancelled():
                # Python 3.11's wait_for (aiomqtt's connect) drops a cancellation
                # that lands as its wait ends; waiting for more to send would then never end.
                raise asyncio.CancelledError
            await self._wakeup.wait()

    async def _send(self, client: aiomqtt.Client, batch: list[tuple[str, bytes]]) -> None:
        """Send ``batch`` in order, up to :data:`WINDOW` unacknowledged at once; what was not
        acknowledged goes back to the front of the queue (and the error is raised).

        The window goes to aiomqtt's paho-mqtt client one call a message, and its
        acknowledgements are awaited together: ``aiomqtt.Client.publish`` makes each message a
        task, an event and a timeout of its own, a third of what MQTT cost the daemon."""
        self._sending = len(batch)
        window = _Window(client._client)
        try:
            window.send(batch)
            await window.acknowledged(ACK_TIMEOUT_S)
        except BaseException:
            self._queue.extendleft(reversed(batch[window.first_unacknowledged() :]))
            raise
        finally:
            window.close()
            self._sending = 0
        self.published += len(batch)


class _Window:
    """The messages of one window handed to paho-mqtt, and which of them the broker has
    acknowledged: paho's ``on_publish`` crosses them off (and passes on what is not theirs
    to the callback it had, aiomqtt's)."""

    def __init__(self, paho: mqtt.Client) -> None:
        self._paho = paho
        self._mids: list[int] = []
        self._waiting: set[int] = set()
        self._done = asyncio.Event()
        self._restored = paho.on_publish
        # aiomqtt's, of paho's second callback version (five arguments)
        self._chained: Callable[..., object] | None = self._restored
        paho.on_publish = self._on_publish

    def send(self, batch: list[tuple[str, bytes]]) -> None:
        """Hand ``batch`` to paho in order.

        Raises:
            aiomqtt.MqttCodeError: paho refused one (no connection, say); those before it,
                not yet acknowledged, are sent again with it on the next connection.
        """
        for topic, payload in batch:
            info = self._paho.publish(topic, payload, qos=1)
            if info.rc != mqtt.MQTT_ERR_SUCCESS:
                raise aiomqtt.MqttCodeError(info.rc, "Could not publish message")
            self._mids.append(info.mid)
            self._waiting.add(info.mid)

    async def acknowledged(self, timeout_s: float) -> None:
        """Wait until the broker has acknowledged every message handed to paho.

        Raises:
            aiomqtt.MqttError: not within ``timeout_s`` (the connection is lost, say).
        """
        if not self._waiting:
            return
        try:
            async with asyncio.timeout(timeout_s):
                await self._done.wait()
        except TimeoutError:
            raise aiomqtt.MqttError("Operation timed out") from None

    def first_unacknowledged(self) -> int:
        """The position in the batch of the first message not acknowledged."""
        return next(
            (n for n, mid in enumerate(self._mids) if mid in self._waiting), len(self._mids)
        )

    def close(self) -> None:
        self._paho.on_publish = self._restored

    def _on_publish(
        self, client: mqtt.Client, userdata: Any, mid: int, code: ReasonCode, props: Properties
    ) -> None:
        if mid in self._waiting:
            self._waiting.discard(mid)
            if not self._waiting:
                self._done.set()
        elif self._chained is not None:
            self._chained(client, userdata, mid, code, props)


def _cancelled() -> bool:
    """Whether the running task has been asked to stop."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0
