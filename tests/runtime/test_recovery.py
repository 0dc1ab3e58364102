"""Crash recovery: a daemon killed mid-message finishes it after a restart, replying once; one
stopped with SIGTERM finishes the message in hand first."""

from __future__ import annotations

import asyncio
import signal
import subprocess
from pathlib import Path

import pytest

from orchestrator.client import ArenaClient
from orchestrator.memory.db import make_engine
from tests.arena_helpers import (
    agent_of,
    group_of,
    make_settings,
    outbox,
    spawn_daemon,
)
from tests.fakes import FakeMessagesServer
from tests.history_seed import replies
from tests.waiting import wait_until

# Daemon processes take seconds to start on a loaded machine: wait generously, and end every
# process a test started whatever happens.
pytestmark = pytest.mark.timeout(300)
_WAIT_S = 120


def _spawn_daemon(settings, fake_url: str, log: Path) -> subprocess.Popen[bytes]:
    return spawn_daemon(
        settings, log, "crashy", ANTHROPIC_API_KEY="test", ANTHROPIC_BASE_URL=fake_url
    )


def _stop(proc: subprocess.Popen[bytes], timeout_s: float = 60) -> int:
    """SIGTERM, and SIGKILL if it has not exited within ``timeout_s``; its exit code."""
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise


async def test_killed_daemon_resumes_with_exactly_one_reply_each_and_sigterm_drains(
    tmp_path: Path, embedded_redis_url: str, embedded_mqtt_url: str
):
    """Kill -9 after the first agent's reply is published and while the hand-off is at the
    model: the restarted daemon reuses the stored reply and publishes each reply once. Then
    SIGTERM while a message is at the model: the daemon finishes it, then exits 0."""
    with FakeMessagesServer() as fake:
        fake.reply_fn = lambda r: "@pong over to you" if agent_of(r) == "ping" else "pong done"
        fake.script(latency_s=0)  # ping answers at once...
        fake.script(latency_s=60)  # ...pong's answer hangs until the daemon is killed
        settings = make_settings(tmp_path, embedded_redis_url, embedded_mqtt_url, fake.base_url)
        log = tmp_path / "daemon.log"
        client = ArenaClient(embedded_redis_url)
        message_id = client.post("crash", "@ping start", "alex")

        first = _spawn_daemon(settings, fake.base_url, log)
        try:
            await wait_until(lambda: len(fake.requests) == 2, timeout_s=_WAIT_S, what="pong's call")
        finally:
            first.send_signal(signal.SIGKILL)
            first.wait()
        assert [i["sender"] for i in outbox(embedded_redis_url, "crash")] == ["ping"]

        second = _spawn_daemon(settings, fake.base_url, log)
        try:
            await wait_until(
                lambda: any(i["type"] == "done" for i in outbox(embedded_redis_url, "crash")),
                timeout_s=_WAIT_S,
                what="the crashed message to be finished",
            )
            fake.latency_s = 1.5  # the next answer takes a while: SIGTERM comes meanwhile
            client.post("drain", "@pong slow one", "alex")
            await wait_until(
                lambda: len(fake.requests) == 4, timeout_s=_WAIT_S, what="the slow call"
            )
        finally:
            code = await asyncio.to_thread(_stop, second)
        client.close()
    assert code == 0, log.read_text()
    assert [i["type"] for i in outbox(embedded_redis_url, "drain")] == ["reply", "done"]

    items = outbox(embedded_redis_url, "crash")
    assert [(i["type"], i["sender"]) for i in items] == [
        ("reply", "ping"),
        ("reply", "pong"),
        ("done", ""),
    ]
    assert all(i["in_reply_to"] == message_id for i in items)
    # ping was asked once; pong twice (the first call died with the daemon).
    crash = [agent_of(r) for r in fake.requests if group_of(r) == "crash"]
    assert crash == ["ping", "pong", "pong"]
    engine = make_engine(settings.effective_database_url)
    stored = replies(engine, message_id)
    engine.dispose()
    assert [s.message.sender for s in stored] == ["ping", "pong"]
    assert "resuming 1 unfinished messages" in log.read_text()
