"""`arena up` that dies hard: its children go with it, the next `arena up` on the same data
folder starts by itself and answers everything once, and a Redis child that dies is started
again. Real `arena up` processes, the offline model (the refusals, which start nothing, run
the command in this process)."""

from __future__ import annotations

import contextlib
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
from click.testing import CliRunner, Result
from rq import Worker
from rq.serializers import JSONSerializer

from orchestrator.adapters.redis_server import RedisServer
from orchestrator.background.queue import queue
from orchestrator.cli.main import main
from orchestrator.client import ArenaClient
from orchestrator.core.wire import outbox_stream
from tests.arena_helpers import REPO, write_team, zombies_of
from tests.ports import free_port

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(600),
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="parent-death signals, /proc"),
]

GROUPS = [f"crash{n}" for n in range(4)]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    with contextlib.suppress(OSError):
        return ") Z " not in stat.read_text()  # a zombie has ended
    return True


def _processes_on(data: Path) -> list[int]:
    """Live processes started for ``data`` (their environment names it), zombies aside."""
    wanted = os.fsencode(f"ARENA_DATA_DIR={data}")
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            if wanted in (entry / "environ").read_bytes().split(b"\0") and _alive(int(entry.name)):
                found.append(int(entry.name))
    return found


def _wait_until(predicate, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


class Arena:
    """`arena up` processes on one data folder, all ended when the test ends."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.data = tmp_path / "data"
        self.redis_port = free_port()
        self.env = {
            "PATH": os.environ.get("PATH", ""),
            "ARENA_DATA_DIR": str(self.data),
            "ARENA_AGENTS_DIR": str(write_team(tmp_path)),
            "ARENA_WORKSPACES_DIR": str(tmp_path / "workspaces"),
            "ARENA_PROMPTS_DIR": str(REPO / "prompts"),
            "ARENA_MQTT_PORT": str(free_port()),
            "ARENA_REDIS_PORT": str(self.redis_port),
            "ARENA_WORKERS": "1",
            "ARENA_WEB_PORT": "0",  # no console: tests run side by side
            "ARENA_LEASE_TTL_S": "2",
            "PYTHONUNBUFFERED": "1",
        }
        self.procs: list[subprocess.Popen[bytes]] = []
        self.seen: set[int] = set()  # every pid any run recorded

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.redis_port}/0"

    def log(self, n: int) -> Path:
        return self.tmp_path / f"up-{n}.log"

    def start(self) -> subprocess.Popen[bytes]:
        """Start `arena up` and wait until it is ready."""
        log = self.log(len(self.procs))
        with log.open("ab") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "orchestrator", "up"],
                cwd=REPO,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.procs.append(proc)
        _wait_until(
            lambda: "arena: ready" in log.read_text() or proc.poll() is not None, 120, "ready"
        )
        assert proc.poll() is None, log.read_text()[-3000:]
        self.record()
        return proc

    def run(self, *args: str) -> Result:
        """Run `arena ARGS` on this data folder in this process, to its end (for a command that
        stops at once: the refusals); what it printed is kept."""
        return CliRunner().invoke(main, list(args), env=self.env)

    def record(self) -> dict[str, object]:
        """The pid file of the run on the data folder (its pids are remembered)."""
        path = self.data / "arena-up.pid"
        record: dict[str, object] = json.loads(path.read_text()) if path.exists() else {}
        for value in record.values():
            for pid in value if isinstance(value, list) else [value]:
                if isinstance(pid, int):
                    self.seen.add(pid)
        return record

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        self.record()
        for pid in self.seen:
            if _alive(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)


@pytest.fixture
def arena(tmp_path: Path) -> Iterator[Arena]:
    """`arena up` runs on a data folder of this test's; every process ends with the test."""
    runs = Arena(tmp_path)
    try:
        yield runs
    finally:
        runs.close()


def _post(url: str, count: int) -> dict[str, list[str]]:
    posted: dict[str, list[str]] = {}
    with redis.Redis.from_url(url, decode_responses=True) as client:
        for n in range(count):
            group = GROUPS[n % len(GROUPS)]
            entry = client.xadd("arena:inbox", {"group": group, "sender": "alex", "text": f"n{n}"})
            posted.setdefault(group, []).append(entry)
    return posted


def _answered(url: str) -> int:
    with redis.Redis.from_url(url) as client:
        dones = 0
        for group in GROUPS:
            dones += sum(
                1 for _id, f in client.xrange(outbox_stream(group)) if f[b"type"] == b"done"
            )
        return dones


def _check_each_answered_once_in_order(url: str, posted: dict[str, list[str]]) -> None:
    with redis.Redis.from_url(url, decode_responses=True) as client:
        for group, ids in posted.items():
            items = [f for _id, f in client.xrange(outbox_stream(group))]
            assert [i["in_reply_to"] for i in items if i["type"] == "reply"] == ids, group
            assert [i["in_reply_to"] for i in items if i["type"] == "done"] == ids, group


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
    posted = _post(arena.url, 200)
    _wait_until(lambda: _answered(arena.url) >= 10, 120, "the first answers")
    os.kill(first.pid, signal.SIGKILL)
    first.wait()
    pids = [children["redis"], *children["workers"]]  # type: ignore[list-item]
    _wait_until(lambda: not any(_alive(p) for p in pids), 60, "the children to exit")
    _wait_until(lambda: not _processes_on(arena.data), 60, "every process of the run to exit")

    second = arena.start()
    _wait_until(lambda: _answered(arena.url) >= 200, 300, "every answer")
    _check_each_answered_once_in_order(arena.url, posted)

    def workers() -> list[object]:
        status = CliRunner().invoke(main, ["status", "--json"], env=arena.env)
        return list(json.loads(status.stdout)["workers"])

    # The new run's worker may register after the daemon has answered everything (a busy
    # machine); then there is one: the dead run's worker is forgotten.
    _wait_until(lambda: len(workers()) >= 1, 60, "the new run's worker")
    assert len(workers()) == 1
    children = arena.record()
    assert _stop(second) == 0, arena.log(1).read_text()[-3000:]
    said = arena.log(1).read_text()
    assert "is already running on" not in said
    assert "Traceback" not in said
    assert not (arena.data / "arena-up.pid").exists()
    pids = [children["redis"], *children["workers"]]  # type: ignore[list-item]
    assert not any(_alive(p) for p in pids)
    assert _processes_on(arena.data) == []


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
        _wait_until(lambda: len(_workers(arena.url)) == 1, 120, "the new worker")
        assert stale not in _workers(arena.url)

        again = arena.run("up")
        assert again.exit_code == 1
        assert f"`arena up` (pid {running.pid}) is already running on" in again.stderr
        assert "Traceback" not in again.output

        victim = arena.record()["redis"]
        assert isinstance(victim, int)
        os.kill(victim, signal.SIGKILL)
        _wait_until(
            lambda: isinstance(arena.record()["redis"], int) and arena.record()["redis"] != victim,
            60,
            "a new redis-server",
        )
        with ArenaClient(arena.url) as client:
            _, replies = client.post_and_wait(GROUPS[0], "still there?", "alex", 60)
        assert [r.type for r in replies] == ["reply"]

        def workers() -> list[int]:
            return list(arena.record()["workers"])  # type: ignore[call-overload]

        (worker,) = workers()
        os.kill(worker, signal.SIGKILL)
        _wait_until(lambda: [p for p in workers() if p != worker and _alive(p)], 60, "a worker")
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
    _wait_until(lambda: len(_workers(arena.url)) == 1, 120, "the worker")
    record = arena.record()
    victim, workers = record["redis"], record["workers"]
    assert isinstance(victim, int)
    assert isinstance(workers, list)
    os.kill(running.pid, signal.SIGSTOP)  # it cannot start Redis again
    try:
        outage = time.monotonic()
        os.kill(victim, signal.SIGKILL)
        _wait_until(lambda: not _alive(victim), 30, "redis-server to exit")
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
    _wait_until(lambda: arena.record()["redis"] not in (victim, None), 60, "a new redis-server")
    with ArenaClient(arena.url) as client:
        _, replies = client.post_and_wait(GROUPS[0], "after", "alex", 60)
    assert [r.type for r in replies] == ["reply"]
    assert all(_alive(pid) for pid in workers)
    assert [zombies_of(pid) for pid in workers] == [[] for _ in workers]
    assert _stop(running) == 0
    assert "Traceback" not in arena.log(0).read_text()
    stopped = arena.run("post", GROUPS[0], "anyone?")
    assert stopped.exit_code == 1
    assert "(start the daemon with `arena up`" in stopped.stderr
