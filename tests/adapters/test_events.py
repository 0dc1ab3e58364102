"""The MQTT publisher: it stops when cancelled, however leaving the broker goes."""

from __future__ import annotations

import asyncio
from typing import Any

import aiomqtt
import pytest

from orchestrator.adapters.events import MqttPublisher
from tests.waiting import wait_until


async def test_cancelled_publisher_stops_even_when_leaving_the_broker_fails(
    embedded_mqtt_url: str, monkeypatch: pytest.MonkeyPatch
):
    """A disconnect that fails on the way out (aiomqtt raising MqttError from its exit) does
    not swallow the cancellation: the publisher ends instead of connecting again."""
    real_exit = aiomqtt.Client.__aexit__

    async def failing_exit(self: aiomqtt.Client, *exc: Any) -> None:
        await real_exit(self, *exc)
        if exc[0] is asyncio.CancelledError:
            raise aiomqtt.MqttError("Operation timed out")

    monkeypatch.setattr(aiomqtt.Client, "__aexit__", failing_exit)
    publisher = MqttPublisher(embedded_mqtt_url)
    task = asyncio.create_task(publisher.run())
    await wait_until(lambda: publisher.connected, timeout_s=20, what="the publisher to connect")
    task.cancel()
    done, _ = await asyncio.wait([task], timeout=10)
    assert task in done, "the publisher went on after being cancelled"
    assert task.cancelled()
