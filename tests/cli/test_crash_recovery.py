"""`arena up` that dies hard: its children go with it, the next `arena up` on the same data
folder starts by itself and answers everything once, and a Redis child that dies is started
again. Real `arena up` processes, the offline model (the refusals, which start nothing, run
the command in this process)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from click.testing import CliRunner
from rq import Worker
from rq.serializers import JSONSerializer

from orchestrator.adapters.redis_server import RedisServer
from orchestrator.background.queue import queue
from orchestrator.cli.main import main
from orchestrator.client import ArenaClient
from tests.arena_helpers import zombies_of
from tests.arena_up import (
    Arena,
    alive,
    answered,
    arenas,
    check_answered_once_in_order,
    post_messages,
    processes_on,
)
from tests.waiting import block_until

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(600),
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="parent-death signals, /proc"),
]


@pytest.fixture
def arena(tmp_path: Path) -> Iterator[Arena]:
    """`arena up` runs on a data folder of this test's; every process ends with the test."""
    yield from arenas(tmp_path)


GROUPS = [f"crash{n}" for n in range(4)]


def _stop(proc: subprocess.Popen[bytes]) -> int:
    proc.send_signal(signal.SIGTERM)
    return proc.wait(timeout=60)


def test_killed_arena_up_takes_its_children_along_and_a_restart_answers_everything(
    arena: Arena,
):
    """kill -9 of `arena up` mid-stream: its redis-server and worker exit; `arena up` alone
    then answers all 200 messages exactly once, in order per group, and leaves nothing."""
    first = arena.start()
    children = arena.record()
    assert children["up"] == first.pid
    assert isinstance(children["redis"], int)
    assert children["workers"]
    posted = post_messages(arena.url, GROUPS, 200)
    block_until(lambda: answered(arena.url, GROUPS) >= 10, timeout_s=120, what="the first answers")
    os.kill(first.pid, signal.SIGKILL)
    first.wait()
    pids = [children["redis"], *children["workers"]]  # type: ignore[list-item]
    block_until(lambda: not any(alive(p) for p in pids), timeout_s=60, what="the children to exit")
    block_until(
        lambda: not processes_on(arena.data), timeout_s=60, what="every process of the run to exit"
    )

    second = arena.start()
    block_until(lambda: answered(arena.url, GROUPS) >= 200, timeout_s=300, what="every answer")
    check_answered_once_in_order(arena.url, posted)

    def workers() -> list[object]:
        status = CliRunner().invoke(main, ["status", "--json"], env=arena.env)
        return list(json.loads(status.stdout)["workers"])

    # The new run's worker may register after the daemon has answered everything (a busy
    # machine); then there is one: the dead run's worker is forgotten.
    block_until(lambda: len(workers()) >= 1, timeout_s=60, what="the new run's worker")
    assert len(workers()) == 1
    children = arena.record()
    assert _stop(second) == 0, arena.log(1).read_text()[-3000:]
    said = arena.log(1).read_text()
    assert "is already running on" not in said
    assert "Traceback" not in said
    assert not (arena.data / "arena-up.pid").exists()
    pids = [children["redis"], *children["workers"]]  # type: ignore[list-item]
    assert not any(alive(p) for p in pids)
    assert processes_on(arena.data) == []


def _dead_pid() -> int:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    return gone.pid


def _register_worker(url: str, pid: int) -> str:
    """Register an RQ worker that ran as ``pid`` on this machine, as a crashed run leaves it."""
    with redis.Redis.from_url(url) as connection:
        worker = Worker([queue(connection)], connection=connection, serializer=JSONSerializer)
        worker.pid = pid
        worker.register_birth()
        return str(worker.name)


def _workers(url: str) -> list[str]:
    with redis.Redis.from_url(url) as connection:
        return [str(w.name) for w in Worker.all(connection=connection)]


def test_restart_cleans_up_a_crashed_run_refuses_a_live_one_and_restarts_a_killed_redis(
    arena: Arena,
):
    """What a dead `arena up` left is cleaned up by the next one, which starts normally: its
    redis-server still running is stopped, its gone worker no longer counted; a second
    `arena up` on a folder in use is refused with one line. kill -9 of the embedded
    redis-server: `arena up` starts it again, says so once, and a message posted afterwards is
    answered. kill -9 of its worker: another is started, and runs a background job."""
    arena.data.mkdir()
    orphan = RedisServer(arena.data, unix_socket=arena.data / "redis.sock")
    orphan.start()
    try:
        assert orphan.pid is not None
        worker_pid = _dead_pid()
        stale = _register_worker(orphan.url, worker_pid)
        record = {"up": _dead_pid(), "redis": orphan.pid, "workers": [worker_pid]}
        (arena.data / "arena-up.pid").write_text(json.dumps(record))
        running = arena.start()
        assert orphan.returncode is not None  # it got SIGTERM
        said = arena.log(0).read_text()
        assert f"stopped its redis-server {record['redis']}" in said
        block_until(lambda: len(_workers(arena.url)) == 1, timeout_s=120, what="the new worker")
        assert stale not in _workers(arena.url)

        again = arena.run("up")
        assert again.exit_code == 1
        assert f"`arena up` (pid {running.pid}) is already running on" in again.stderr
        assert "Traceback" not in again.output

        victim = arena.record()["redis"]
        assert isinstance(victim, int)
        os.kill(victim, signal.SIGKILL)
        block_until(
            lambda: isinstance(arena.record()["redis"], int) and arena.record()["redis"] != victim,
            timeout_s=60,
            what="a new redis-server",
        )
        with ArenaClient(arena.url) as client:
            _, replies = client.post_and_wait(GROUPS[0], "still there?", "alex", 60)
        assert [r.type for r in replies] == ["reply"]

        def workers() -> list[int]:
            return list(arena.record()["workers"])  # type: ignore[call-overload]

        (worker,) = workers()
        os.kill(worker, signal.SIGKILL)
        block_until(
            lambda: [p for p in workers() if p != worker and alive(p)],
            timeout_s=60,
            what="a worker",
        )
        heartbeat = arena.run("heartbeat", "ping", "--wait", "60")  # a worker answers it
        assert heartbeat.exit_code == 0, heartbeat.output
        assert "ping: " in heartbeat.stdout
        assert _stop(running) == 0
        said = arena.log(0).read_text()
        assert said.count("starting it again") == 1
        assert f"worker {worker} exited with code -9; starting another" in said
    finally:
        orphan.stop()


def test_a_busy_redis_port_is_one_line_naming_the_setting(arena: Arena):
    """`arena up` with its Redis port taken says so in one line naming ARENA_REDIS_PORT."""
    with socket.create_server(("127.0.0.1", 0)) as taken:
        arena.env["ARENA_REDIS_PORT"] = str(taken.getsockname()[1])
        result = arena.run("up")
    port = arena.env["ARENA_REDIS_PORT"]
    assert result.exit_code == 1
    line = f"arena: redis: port {port} on 127.0.0.1 is already in use"
    assert f"{line} (set ARENA_REDIS_PORT or REDIS_URL)" in result.stderr.splitlines()
    assert "Traceback" not in result.output
    assert not (arena.data / "arena-up.pid").exists()  # nothing left claiming the folder


def test_commands_say_when_the_redis_of_a_running_arena_up_is_restarting(arena: Arena):
    """kill -9 of the embedded redis-server, its restart held back for a while: `arena post`,
    `status` and `jobs` say in one line that the Redis of the running `arena up` is not
    answering (not that nothing runs) and exit 1; `arena history` reads on. Once it is back,
    messages are answered, and `arena up` printed no traceback and its worker left no zombie.
    With `arena up` stopped, `arena post` says to start it."""
    running = arena.start()
    with ArenaClient(arena.url) as client:
        client.post_and_wait(GROUPS[0], "before", "alex", 60)
    block_until(lambda: len(_workers(arena.url)) == 1, timeout_s=120, what="the worker")
    record = arena.record()
    victim, workers = record["redis"], record["workers"]
    assert isinstance(victim, int)
    assert isinstance(workers, list)
    os.kill(running.pid, signal.SIGSTOP)  # it cannot start Redis again
    try:
        outage = time.monotonic()
        os.kill(victim, signal.SIGKILL)
        block_until(lambda: not alive(victim), timeout_s=30, what="redis-server to exit")
        socket_url = f"unix://{(arena.data / 'redis.sock').resolve()}"
        said = f"arena: redis: the Redis of `arena up` (pid {running.pid}) at {socket_url} is"
        for args in (["post", GROUPS[0], "during"], ["status"], ["jobs"]):
            result = arena.run(*args)
            assert result.exit_code == 1, (args, result.output)
            assert result.stderr.splitlines() == [
                f"{said} not answering; it may be restarting (try again in a moment)"
            ], args
        history = arena.run("history", GROUPS[0])
        assert history.exit_code == 0
        assert "before" in history.stdout
        time.sleep(max(0.0, 7 - (time.monotonic() - outage)))  # longer than redis-py retries
    finally:
        os.kill(running.pid, signal.SIGCONT)
    block_until(
        lambda: arena.record()["redis"] not in (victim, None),
        timeout_s=60,
        what="a new redis-server",
    )
    with ArenaClient(arena.url) as client:
        _, replies = client.post_and_wait(GROUPS[0], "after", "alex", 60)
    assert [r.type for r in replies] == ["reply"]
    assert all(alive(pid) for pid in workers)
    assert [zombies_of(pid) for pid in workers] == [[] for _ in workers]
    assert _stop(running) == 0
    assert "Traceback" not in arena.log(0).read_text()
    stopped = arena.run("post", GROUPS[0], "anyone?")
    assert stopped.exit_code == 1
    assert "(start the daemon with `arena up`" in stopped.stderr
