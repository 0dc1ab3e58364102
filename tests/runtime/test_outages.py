"""Outages: with the MQTT broker unreachable, messages are still answered, and the queued
events are published once it can be reached again; after a Redis restart the daemon answers
and the worker's background jobs go on."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import time
from collections.abc import AsyncIterator
from datetime import datetime
from pathlib import Path

import aiomqtt
import pytest
import redis
from click.testing import CliRunner
from rq.job import JobStatus
from rq.scheduler import RQScheduler

from orchestrator.adapters.mqtt import mqtt_client_args
from orchestrator.adapters.redis_server import RedisServer
from orchestrator.background.queue import distill_job_id, fetch_job, queue
from orchestrator.cli.main import main
from orchestrator.client import ArenaClient
from orchestrator.core.wire import Outbound, group_topic, outbox_stream
from orchestrator.memory.personal import PersonalLog
from orchestrator.memory.schema import PersonalDraft
from tests.arena_helpers import (
    environment,
    make_settings,
    outbox,
    read_until,
    running_daemon,
    start_background,
    stop_process,
    worker_process,
    zombies_of,
)
from tests.fakes import FakeMessagesServer
from tests.waiting import block_until, wait_until

# Longer than redis-py's own attempts to reconnect (ten, backing off up to about 5 s in all),
# as when a loaded machine restarts Redis slowly.
OUTAGE_S = 7


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
    # The same broker and login (the arena's: only it may publish there), at a closed port.
    address, _, broker_port = embedded_mqtt_url.rpartition(":")
    unreachable = f"{address}:{free_port}"
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
            async with tcp_proxy(free_port, int(broker_port)), asyncio.timeout(45):
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


@pytest.mark.slow
@pytest.mark.timeout(180)
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_retry_due_after_a_redis_restart_runs(tmp_path: Path, free_port: int):
    """kill -9 of Redis for a while, then a restart on its socket and AOF (as `arena up` does):
    a heartbeat that failed before and waits for its retry runs when due, the worker prints no
    traceback and leaves no zombie, and on SIGTERM lets go of the scheduler lock."""
    server = RedisServer(tmp_path / "redis", unix_socket=tmp_path / "redis" / "r.sock")
    server.start()
    try:
        with FakeMessagesServer() as model:
            settings = make_settings(
                tmp_path, server.url, f"mqtt://127.0.0.1:{free_port}", model.base_url
            )
            now = datetime.now(settings.zone)
            note = PersonalDraft(content="Ask for the load", type="lesson")
            PersonalLog(settings.workspaces_dir, settings.zone).append(
                "ping", note, source="demo/m", now=now
            )
            env = {
                "PATH": os.environ.get("PATH", ""),
                **environment(settings),
                "ANTHROPIC_API_KEY": "test",
                "ANTHROPIC_BASE_URL": model.base_url,
                "ARENA_MODEL_MAX_RETRIES": "0",
            }
            log = tmp_path / "worker.log"
            with (
                redis.Redis.from_url(server.url) as connection,
                worker_process(env, log) as worker,
            ):
                arena = queue(connection)
                block_until(
                    lambda: arena.scheduler_pid is not None,
                    timeout_s=60,
                    what="the scheduler's lock",
                )
                model.script(status=500)  # the first attempt fails: a retry in 10 s
                said = CliRunner().invoke(main, ["heartbeat", "ping"], env=env)
                assert said.exit_code == 0, said.output
                job_id = distill_job_id("ping", now.date())

                def status() -> JobStatus | None:
                    job = fetch_job(connection, job_id)
                    return job.get_status() if job is not None else None

                block_until(
                    lambda: status() is JobStatus.SCHEDULED,
                    timeout_s=60,
                    what="the failed first attempt",
                )
                assert server.pid is not None
                before = log.stat().st_size  # the model's error was told, with its traceback
                server.kill()  # and wait: start() right after must start a new one
                time.sleep(OUTAGE_S)  # the scenario: Redis stays down this long
                server.start()
                try:
                    block_until(
                        lambda: status() is JobStatus.FINISHED,
                        timeout_s=60,
                        what="the retry to run",
                    )
                except AssertionError as exc:  # what the worker said tells why
                    said_then = log.read_bytes()[before:].decode(errors="replace")[-4000:]
                    raise AssertionError(f"{exc} ({status()}); worker:\n{said_then}") from None
                assert len(model.requests) == 2
                # A job's forked process may end a moment before the worker waits for it; a
                # zombie that stays (RQ's own scheduler process, once it had died) is the fault.
                block_until(
                    lambda: zombies_of(worker.pid) == [], timeout_s=10, what="no zombie child"
                )
                worker.send_signal(signal.SIGTERM)
                assert worker.wait(30) == 0
                assert connection.get(RQScheduler.get_locking_key(arena.name)) is None
        since = log.read_bytes()[before:].decode()
        assert "Traceback" not in since, since
    finally:
        server.stop()


@pytest.mark.slow
def test_tail_waits_out_a_redis_restart_and_goes_on(tmp_path: Path):
    """`arena tail` while its Redis is killed and restarted: it says Redis is not answering,
    then that it answers again, and prints the reply published after the restart."""
    server = RedisServer(tmp_path / "redis", unix_socket=tmp_path / "redis" / "r.sock")
    server.start()
    env = {
        "PATH": os.environ.get("PATH", ""),
        "REDIS_URL": server.url,
        "ARENA_DATA_DIR": str(tmp_path / "data"),
    }
    tail = start_background([sys.executable, "-m", "orchestrator", "tail", "restarts"], env)
    try:
        read_until(tail, "following group restarts", timeout_s=60)
        assert server.pid is not None
        server.kill()  # and wait: start() right after must start a new one
        read_until(tail, "Redis is not answering", timeout_s=30)
        server.start()
        read_until(tail, "Redis answers again; following group restarts", timeout_s=30)
        reply = Outbound(
            type="reply",
            id="1-0:1:ping",
            group="restarts",
            in_reply_to="1-0",
            sender="ping",
            kind="agent",
            text="after the restart",
        )
        with redis.Redis.from_url(server.url) as raw:
            raw.xadd(outbox_stream("restarts"), reply.fields())
        printed = read_until(tail, "after the restart", timeout_s=30)
        assert tail.poll() is None
        assert not any("Traceback" in line for line in printed)
    finally:
        stop_process(tail)
        server.stop()
