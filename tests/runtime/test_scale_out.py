"""Several daemons on one Redis: they share the partitions, keep each group's order, and a
daemon that dies hands its groups over. Real daemon processes, the offline model."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import subprocess
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
from click.testing import CliRunner, Result

from orchestrator.cli.main import main
from orchestrator.core.wire import PARTITIONS, lease_key, outbox_stream
from orchestrator.settings import Settings
from tests.arena_helpers import environment, make_settings, spawn_daemon
from tests.waiting import block_until, wait_until

# Real processes on a machine that may be busy: generous waits, and no test timeout shorter
# than their sum.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]
Spawn = Callable[..., subprocess.Popen[bytes]]


@pytest.fixture
def spawn() -> Iterator[Spawn]:
    """``spawn_daemon``; every daemon still running when the test ends, however it ends, is
    killed with its process group."""
    procs: list[subprocess.Popen[bytes]] = []

    def start(settings: Settings, log: Path, consumer: str, **env: str) -> subprocess.Popen[bytes]:
        proc = spawn_daemon(settings, log, consumer, **env)
        procs.append(proc)
        return proc

    try:
        yield start
    finally:
        for proc in procs:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def _owners(url: str) -> Counter[str]:
    with redis.Redis.from_url(url, decode_responses=True) as client:
        holders = client.mget([lease_key(f"p{p}") for p in range(PARTITIONS)])
    return Counter(h for h in holders if h)


async def _wait_for_owners(url: str, expected: dict[str, int], logs: list[Path]) -> None:
    """Wait until the partitions are held as ``expected``; say who holds what if not."""
    try:
        await wait_until(lambda: _owners(url) == expected, timeout_s=180, what="the partitions")
    except AssertionError:
        tails = "\n".join(f"--- {log.name}\n{log.read_text()[-1500:]}" for log in logs)
        raise AssertionError(f"partitions held {dict(_owners(url))}\n{tails}") from None


def _post(url: str, groups: int, messages: int, start: int = 0) -> dict[str, list[str]]:
    """Post ``messages`` messages round-robin over ``groups`` groups; their ids per group."""
    posted: dict[str, list[str]] = {}
    with redis.Redis.from_url(url, decode_responses=True) as client:
        for n in range(start, start + messages):
            group = f"g{n % groups:02d}"
            entry_id = client.xadd("arena:inbox", {"group": group, "text": f"note {n}"})
            posted.setdefault(group, []).append(entry_id)
    return posted


def _answered(url: str, groups: list[str]) -> int:
    with redis.Redis.from_url(url) as client:
        pipe = client.pipeline()
        for group in groups:
            pipe.xlen(outbox_stream(group))
        return sum(pipe.execute()) // 2  # a reply and a "done" per message


def _check_order(url: str, posted: dict[str, list[str]]) -> None:
    """Every message has exactly one reply and one "done", in posting order per group."""
    with redis.Redis.from_url(url, decode_responses=True) as client:
        for group, ids in posted.items():
            items = [f for _id, f in client.xrange(outbox_stream(group))]
            replies = [i["in_reply_to"] for i in items if i["type"] == "reply"]
            dones = [i["in_reply_to"] for i in items if i["type"] == "done"]
            assert replies == ids, group
            assert dones == ids, group


def _stop(*procs: subprocess.Popen[bytes]) -> list[int]:
    """SIGTERM each daemon and wait for its exit code (the ``spawn`` fixture kills any that
    hangs)."""
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    return [proc.wait(timeout=120) for proc in procs]


def _handled(log: Path) -> int:
    found = re.findall(r"daemon stopped after (\d+) messages", log.read_text())
    return int(found[-1]) if found else -1


def _status(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> Result:
    for name, value in environment(settings).items():
        monkeypatch.setenv(name, value)
    return CliRunner().invoke(main, ["status"])


def _refuses_a_twin(settings: Settings, name: str, log: Path, spawn: Spawn) -> None:
    """A daemon started under the name ``name`` that a live daemon holds exits 1 with one line."""
    twin = spawn(settings, log, name)
    try:
        code = twin.wait(120)
    except subprocess.TimeoutExpired:
        twin.send_signal(signal.SIGUSR1)  # its threads' and tasks' stacks, into its log
        with contextlib.suppress(AssertionError):  # evidence for the failure below, if it comes
            block_until(lambda: "Current thread" in log.read_text(), timeout_s=5, what="stacks")
        twin.kill()
        twin.wait()
        pytest.fail(f"the daemon named {name!r} twice did not exit within 120 s\n{log.read_text()}")
    said = log.read_text()
    assert code == 1, said
    assert f"ARENA_CONSUMER: another daemon runs as {name!r}" in said
    assert "Traceback" not in said


async def _prints_stacks_on_sigusr1(daemon: subprocess.Popen[bytes], log: Path) -> None:
    """`kill -USR1` makes a daemon print every thread's and every task's stack to its log; it
    keeps running."""
    daemon.send_signal(signal.SIGUSR1)
    await wait_until(
        lambda: "Current thread" in log.read_text(), timeout_s=30, what="the threads' stacks"
    )
    await wait_until(
        lambda: "Task 'leases.renew', awaiting:" in log.read_text(),
        timeout_s=30,
        what="the tasks' stacks",
    )
    assert daemon.poll() is None


async def test_two_daemons_share_320_messages_over_16_groups_in_order(
    tmp_path: Path, embedded_redis_url: str, embedded_mqtt_url: str, monkeypatch, spawn: Spawn
):
    """Two daemons split the partitions, answer 320 messages (one group per partition) once
    each in order, both do a share, and give every lease back on a clean stop. While they run,
    a third daemon under a live one's name is refused with one line, and `kill -USR1` makes a
    daemon print every thread's and task's stack to its log and go on."""
    settings = make_settings(tmp_path, embedded_redis_url, embedded_mqtt_url, None)
    logs = [tmp_path / "alpha.log", tmp_path / "beta.log"]
    # Leases long enough that a busy machine's pauses do not cost one (a daemon that loses a
    # partition mid-message has it finished again by the next owner: answered once, handled twice).
    procs = [
        spawn(settings, logs[0], "alpha", ARENA_LEASE_TTL_S="4"),
        spawn(settings, logs[1], "beta", ARENA_LEASE_TTL_S="4"),
    ]
    try:
        await _wait_for_owners(embedded_redis_url, {"alpha": 8, "beta": 8}, logs)
        shown = await asyncio.to_thread(_status, settings, monkeypatch)
        assert "daemons alive: alpha, beta; router: " in shown.output
        assert re.search(r"alpha: partitions (\d+,){7}\d+\b", shown.output)
        assert re.search(r"beta: partitions (\d+,){7}\d+\b", shown.output)
        # g00 to g15 fall in the 16 partitions one each: both daemons have groups to answer.
        posted = await asyncio.to_thread(_post, embedded_redis_url, 16, 320)
        await asyncio.to_thread(_refuses_a_twin, settings, "alpha", tmp_path / "twin.log", spawn)
        await wait_until(
            lambda: _answered(embedded_redis_url, list(posted)) >= 320,
            timeout_s=480,
            what="320 answers",
        )
        await _prints_stacks_on_sigusr1(procs[1], logs[1])
    finally:
        codes = _stop(*procs)
    assert codes == [0, 0], logs[0].read_text()[-2000:] + logs[1].read_text()[-2000:]
    _check_order(embedded_redis_url, posted)
    handled = [_handled(log) for log in logs]
    if any("lost partitions" in log.read_text() for log in logs):
        # A lease ran out in a pause: the messages in hand were finished by both daemons.
        assert sum(handled) >= 320
    else:
        assert sum(handled) == 320
    assert min(handled) > 0  # both did a share of the work
    # Stopped cleanly: every lease was given back.
    assert _owners(embedded_redis_url) == {}


async def test_a_killed_daemon_hands_its_groups_over(
    tmp_path: Path, embedded_redis_url: str, embedded_mqtt_url: str, spawn: Spawn
):
    """Kill -9 one of two daemons mid-stream: within a few lease periods the other owns every
    partition, and every message is answered once, in order."""
    settings = make_settings(tmp_path, embedded_redis_url, embedded_mqtt_url, None)
    survivor_log, victim_log = tmp_path / "survivor.log", tmp_path / "victim.log"
    survivor = spawn(settings, survivor_log, "survivor", ARENA_LEASE_TTL_S="1")
    victim = spawn(settings, victim_log, "victim", ARENA_LEASE_TTL_S="1")
    try:
        await _wait_for_owners(
            embedded_redis_url, {"survivor": 8, "victim": 8}, [survivor_log, victim_log]
        )
        posted = await asyncio.to_thread(_post, embedded_redis_url, 20, 150)
        await wait_until(
            lambda: _answered(embedded_redis_url, list(posted)) >= 30,
            timeout_s=180,
            what="30 answers",
        )
        victim.send_signal(signal.SIGKILL)
        victim.wait()
        more = await asyncio.to_thread(_post, embedded_redis_url, 20, 150, 150)
        await _wait_for_owners(
            embedded_redis_url, {"survivor": PARTITIONS}, [survivor_log, victim_log]
        )
        for group, ids in more.items():
            posted[group] += ids
        await wait_until(
            lambda: _answered(embedded_redis_url, list(posted)) >= 300,
            timeout_s=300,
            what="300 answers",
        )
    finally:
        codes = _stop(survivor)
    assert codes == [0], survivor_log.read_text()[-3000:]
    _check_order(embedded_redis_url, posted)
    assert "took partitions" in survivor_log.read_text()
