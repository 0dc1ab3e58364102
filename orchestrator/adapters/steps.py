"""A run's steps published as they happen, by the worker that runs it: appended to the group's
steps stream (``arena tail`` and the console read it beside the outbound stream) and sent on
MQTT ``arena/groups/{group}/runs`` (QoS 1, JSON).

MQTT never holds the run up: a step is only queued for a connection kept by a task of its own
(:class:`~orchestrator.adapters.events.MqttPublisher`), and at the run's end what is still
queued gets a short while to go out when the broker is connected (or being connected to for
the first time), none when it is away; what is left is dropped, with a warning.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from types import TracebackType
from typing import Any, Self

from orchestrator.adapters.events import MqttPublisher
from orchestrator.adapters.redis_client import AsyncConnection, translated
from orchestrator.core.coding import Step, runs_topic, steps_stream
from orchestrator.errors import ConfigError

__all__ = ["STEPS_KEPT", "StepPublisher"]

logger = logging.getLogger(__name__)

STEPS_KEPT = 10_000  # about this many of a group's latest steps stay on its stream


class StepPublisher:
    """Publishes a run's steps on Redis and MQTT; enter it for the run's length.

    Args:
        redis: the connection the steps are appended with.
        mqtt_url: the broker to publish on, with the arena's login (None: no MQTT).
        flush_s: at the end, how long what is queued may take to go out.
    """

    def __init__(
        self, redis: AsyncConnection, mqtt_url: str | None, *, flush_s: float = 2.0
    ) -> None:
        self.redis = redis
        self.flush_s = flush_s
        self._mqtt: MqttPublisher | None = None
        self._task: asyncio.Task[None] | None = None
        if mqtt_url is not None:
            try:
                self._mqtt = MqttPublisher(mqtt_url)
            except ConfigError as exc:
                logger.warning("run steps not published on MQTT: %s", exc)

    async def __aenter__(self) -> Self:
        if self._mqtt is not None:
            self._task = asyncio.create_task(self._mqtt.run(), name="orchestrator.steps.mqtt")
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        mqtt, task = self._mqtt, self._task
        if mqtt is None or task is None:
            return
        if mqtt.queued and (mqtt.connected or not mqtt.failures):
            await mqtt.flush(self.flush_s)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        if mqtt.queued:
            logger.warning(
                "%d run steps not published on MQTT (the broker did not take them)", mqtt.queued
            )

    async def publish(self, group: str, step: Step) -> None:
        """Queue ``step`` for MQTT, then append it to the group's steps stream.

        Raises:
            BusError: Redis did not take it.
        """
        if self._mqtt is not None:
            self._mqtt.publish(runs_topic(group), step.json())
        fields: dict[Any, Any] = step.fields()
        with translated():
            await self.redis.xadd(steps_stream(group), fields, maxlen=STEPS_KEPT, approximate=True)
