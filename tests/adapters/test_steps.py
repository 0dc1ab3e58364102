"""A run's steps as its worker publishes them: on the group's steps stream and on MQTT
``arena/groups/{group}/runs`` (QoS 1, JSON with the same fields); a broker away or misnamed
never fails the run: the steps still reach Redis, MQTT's are dropped with a warning. On a real
Redis and a real broker."""

from __future__ import annotations

import asyncio
import json
import logging

import aiomqtt
import pytest
from redis.asyncio import Redis

from orchestrator.adapters.mqtt import mqtt_client_args
from orchestrator.adapters.steps import StepPublisher
from orchestrator.core.coding import Step, runs_topic, steps_stream

RUN = "1-0:1:developer"


def _steps() -> list[Step]:
    at = "2026-01-05T09:00:00+00:00"
    return [
        Step(run=RUN, n=1, at=at, kind="tool", line="Write hello.py", tool="Write"),
        Step(run=RUN, n=2, at=at, kind="result", line="ok", tool="Write"),
        Step(run=RUN, n=3, at=at, kind="text", line="Done."),
    ]


async def _on_redis(redis: Redis, group: str) -> list[Step]:
    rows = await redis.xrange(steps_stream(group))
    return [Step.from_fields({k.decode(): v.decode() for k, v in f.items()}) for _, f in rows]


async def test_each_step_goes_to_the_steps_stream_and_mqtt(
    embedded_redis_url: str, embedded_mqtt_url: str, unique_name: str
):
    """A subscriber to the group's runs topic gets every step as JSON, in order, with QoS 1;
    the steps stream holds the same steps."""
    redis = Redis.from_url(embedded_redis_url)
    topic = runs_topic(unique_name)
    try:
        async with aiomqtt.Client(**mqtt_client_args(embedded_mqtt_url)) as subscriber:
            await subscriber.subscribe(topic, qos=1)
            async with StepPublisher(redis, embedded_mqtt_url) as steps:
                for step in _steps():
                    await steps.publish(unique_name, step)
            got = []
            async with asyncio.timeout(20):
                async for message in subscriber.messages:
                    got.append((str(message.topic), message.qos, json.loads(message.payload)))
                    if len(got) == 3:
                        break
        stored = await _on_redis(redis, unique_name)
    finally:
        await redis.aclose()
    assert got == [(topic, 1, step.as_dict()) for step in _steps()]
    assert got[2][2]["tool"] is None
    assert got[1][2]["n"] == 2
    assert stored == _steps()


@pytest.mark.parametrize("mqtt_url", ["mqtt://127.0.0.1:{port}", "http://nowhere"])
async def test_a_broker_away_or_misnamed_drops_the_steps_with_a_warning(
    embedded_redis_url: str, unique_name: str, free_port: int, mqtt_url: str, caplog
):
    """Nothing listens there (or the URL is not MQTT's): publishing neither fails nor waits
    for the broker, the steps are all on Redis, and a warning says MQTT did not get them."""
    caplog.set_level(logging.WARNING, logger="orchestrator.adapters.steps")
    redis = Redis.from_url(embedded_redis_url)
    try:
        async with StepPublisher(redis, mqtt_url.format(port=free_port)) as steps:
            for step in _steps():
                await steps.publish(unique_name, step)
        stored = await _on_redis(redis, unique_name)
    finally:
        await redis.aclose()
    assert stored == _steps()
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 1, warned
    assert "not published on MQTT" in warned[0]
