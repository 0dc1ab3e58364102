"""Outages: with the MQTT broker unreachable, messages are still answered, and the queued
events are published once it can be reached again."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path

import aiomqtt

from orchestrator.adapters.mqtt import mqtt_client_args
from orchestrator.adapters.redis_server import RedisServer
from orchestrator.client import ArenaClient
from orchestrator.core.wire import group_topic
from tests.arena_helpers import make_settings, outbox, running_daemon
from tests.fakes import FakeMessagesServer
from tests.waiting import wait_until


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(ConnectionError):
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    writer.close()


@contextlib.asynccontextmanager
async def tcp_proxy(listen_port: int, target_port: int) -> AsyncIterator[None]:
    """Forward 127.0.0.1:listen_port to 127.0.0.1:target_port while the block runs."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", target_port)
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))

    server = await asyncio.start_server(handle, "127.0.0.1", listen_port)
    try:
        yield
    finally:
        server.close()


async def test_broker_unreachable_does_not_block_and_events_follow(
    tmp_path: Path, embedded_redis_url: str, embedded_mqtt_url: str, free_port: int
):
    """The daemon's broker address refuses connections: the reply is still stored and on the
    stream. Once the address forwards to a broker, the queued events are published."""
    unreachable = f"mqtt://127.0.0.1:{free_port}"
    broker_port = int(embedded_mqtt_url.rsplit(":", 1)[1])
    with FakeMessagesServer() as fake:
        settings = make_settings(tmp_path, embedded_redis_url, unreachable, fake.base_url)
        async with (
            aiomqtt.Client(**mqtt_client_args(embedded_mqtt_url)) as sub,
            running_daemon(settings),
        ):
            await sub.subscribe(group_topic("down"), qos=1)
            client = ArenaClient(embedded_redis_url)
            message_id, replies = await asyncio.to_thread(
                client.post_and_wait, "down", "@ping are you there?", "alex", 20
            )
            client.close()
            assert [r.type for r in replies] == ["reply"]
            seen: list[dict] = []
            async with tcp_proxy(free_port, broker_port), asyncio.timeout(45):
                async for event in sub.messages:
                    seen.append(json.loads(event.payload))  # type: ignore[arg-type]
                    if seen[-1]["type"] == "done":
                        break
    assert [e["type"] for e in seen] == ["reply", "done"]
    assert seen[0]["in_reply_to"] == message_id


async def test_redis_restart_loses_nothing(tmp_path: Path, embedded_mqtt_url: str, caplog):
    """Redis stops and comes back (AOF): the daemon reconnects by itself, what was said before
    is still there, and a message posted after the restart is answered."""
    server = RedisServer(tmp_path / "redis", unix_socket=tmp_path / "redis" / "r.sock")
    server.start()
    try:
        with FakeMessagesServer() as fake:
            settings = make_settings(
                tmp_path, server.url, embedded_mqtt_url, fake.base_url, claim_idle_ms=1000
            )
            async with running_daemon(settings):
                client = ArenaClient(server.url)
                first, _ = await asyncio.to_thread(
                    client.post_and_wait, "steady", "@ping before", "alex", 20
                )
                await asyncio.to_thread(server.stop)
                await wait_until(
                    lambda: any("redis read failed" in r.getMessage() for r in caplog.records),
                    timeout_s=20,
                    what="the daemon's reads to fail",
                )
                await asyncio.to_thread(server.start)
                second, replies = await asyncio.to_thread(
                    client.post_and_wait, "steady", "@ping after", "alex", 30
                )
                client.close()
        assert [r.type for r in replies] == ["reply"]
        assert any("redis read failed" in r.getMessage() for r in caplog.records)
        items = outbox(server.url, "steady")
        assert [(i["type"], i["in_reply_to"]) for i in items] == [
            ("reply", first),
            ("done", first),
            ("reply", second),
            ("done", second),
        ]
    finally:
        server.stop()
