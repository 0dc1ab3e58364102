"""The MQTT publisher: it sends what was queued in order, sends again what failed, and stops
when cancelled, however leaving the broker goes."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import aiomqtt
import paho.mqtt.client as mqtt
import pytest

from orchestrator.adapters.events import WINDOW, MqttPublisher
from orchestrator.adapters.mqtt import mqtt_client_args
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


async def _received(url: str, topic: str, count: int, publisher: MqttPublisher) -> list[bytes]:
    """What a subscriber to ``topic`` gets while ``publisher`` runs, until ``count`` arrived."""
    got: list[bytes] = []
    async with aiomqtt.Client(**mqtt_client_args(url)) as sub:
        await sub.subscribe(topic, qos=1)
        task = asyncio.create_task(publisher.run())
        try:
            async with asyncio.timeout(30):
                async for message in sub.messages:
                    got.append(bytes(message.payload))  # type: ignore[arg-type]
                    if len(set(got)) == count:
                        break
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    return got


async def test_many_queued_messages_arrive_all_in_order(
    embedded_mqtt_url: str, caplog: pytest.LogCaptureFixture
):
    """Several windows of messages queued at once reach a subscriber all, in queued order,
    without a warning (a window's messages awaiting their acknowledgements is no concern)."""
    caplog.set_level(logging.WARNING)
    publisher = MqttPublisher(embedded_mqtt_url)
    sent = [f"m{n}".encode() for n in range(3 * WINDOW + 5)]
    for payload in sent:
        publisher.publish("arena/test/order", payload)
    got = await _received(embedded_mqtt_url, "arena/test/order", len(sent), publisher)
    assert got == sent
    assert publisher.published == len(sent)
    assert publisher.queued == 0
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []


async def test_a_message_that_failed_is_sent_again_after_reconnecting(
    embedded_mqtt_url: str, monkeypatch: pytest.MonkeyPatch
):
    """One publish in a window fails (paho has no connection for it): it and every message
    after it are sent again on the next connection, in order, none lost (those before it that
    were not acknowledged yet, again too)."""
    real_publish = mqtt.Client.publish
    failed: list[bytes] = []

    def publish_failing_once(
        self: mqtt.Client, topic: str, payload: Any = None, *args: Any, **kw: Any
    ) -> mqtt.MQTTMessageInfo:
        if payload == b"m7" and not failed:
            failed.append(payload)
            info = mqtt.MQTTMessageInfo(0)
            info.rc = mqtt.MQTT_ERR_NO_CONN
            return info
        return real_publish(self, topic, payload, *args, **kw)

    monkeypatch.setattr(mqtt.Client, "publish", publish_failing_once)
    publisher = MqttPublisher(embedded_mqtt_url)
    sent = [f"m{n}".encode() for n in range(WINDOW + 10)]
    for payload in sent:
        publisher.publish("arena/test/again", payload)
    got = await _received(embedded_mqtt_url, "arena/test/again", len(sent), publisher)
    assert failed == [b"m7"]
    assert set(got) == set(sent)
    assert got[-(len(sent) - 7) :] == sent[7:]
    assert publisher.failures == 1


async def test_messages_awaiting_their_acknowledgement_still_count_as_queued(
    embedded_mqtt_url: str, monkeypatch: pytest.MonkeyPatch
):
    """Sent but not acknowledged is not done: ``queued`` counts them, so that whoever flushes
    before stopping waits for them too."""
    real_acknowledged = mqtt.Client._do_on_publish
    release = asyncio.Event()
    held: list[tuple[Any, ...]] = []

    def held_back(self: mqtt.Client, *args: Any) -> Any:
        if release.is_set():
            return real_acknowledged(self, *args)
        held.append((self, *args))
        return mqtt.MQTT_ERR_SUCCESS

    monkeypatch.setattr(mqtt.Client, "_do_on_publish", held_back)
    publisher = MqttPublisher(embedded_mqtt_url)
    for n in range(3):
        publisher.publish("arena/test/held", f"m{n}".encode())
    task = asyncio.create_task(publisher.run())
    try:
        await wait_until(lambda: len(held) == 3, timeout_s=20, what="all three acknowledged")
        assert publisher.queued == 3
        assert not await publisher.flush(0.2)
        release.set()
        for call in held:
            real_acknowledged(*call)
        assert await publisher.flush(20)
        assert publisher.queued == 0
        assert publisher.published == 3
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
