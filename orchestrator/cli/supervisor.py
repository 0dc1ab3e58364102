"""``arena up``: the daemon with everything it needs, embedded where nothing is configured.

Starts, in order: the embedded Redis (when ``REDIS_URL`` is unset), the embedded MQTT broker
(when ``MQTT_URL`` is unset), the RQ worker processes, then the daemon. Stops in reverse order
on SIGINT/SIGTERM, after the daemon has finished the messages in hand.

The children never outlive it: on Linux they get SIGTERM when it dies, however it dies (Redis
then flushes its AOF). ``data/arena-up.pid`` records who runs on the data folder, so a start
after a crash stops what the crashed run left behind instead of refusing; and a Redis child
that dies while ``arena up`` runs is started again.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from orchestrator.adapters.mqtt_broker import MqttBroker
from orchestrator.adapters.redis_server import RedisServer
from orchestrator.adapters.spawn import check_port_free, die_with_parent
from orchestrator.adapters.urls import redact_url
from orchestrator.background.worker import forget_workers
from orchestrator.cli import console as console_process
from orchestrator.errors import ServiceError
from orchestrator.files import write_atomic
from orchestrator.runtime import daemon
from orchestrator.settings import Settings
from orchestrator.web.serve import listen

__all__ = ["Previous", "claim_data_dir", "describe", "serve", "stop_on_signals"]

logger = logging.getLogger(__name__)


def describe(settings: Settings) -> list[tuple[str, str]]:
    """Where everything is, as (what, where) lines for people."""
    data = settings.data_dir.resolve()
    # Configured URLs may carry passwords; the embedded services' descriptions never do.
    if settings.redis_url:
        redis = redact_url(settings.redis_url)
    elif settings.redis_port:
        redis = (
            f"embedded redis-server, {settings.public_redis_url}"
            f" (and unix socket {settings.redis_socket})"
        )
    else:
        redis = f"embedded redis-server, unix socket {settings.redis_socket}"
    mqtt = (
        redact_url(settings.mqtt_url)
        if settings.mqtt_url
        else (f"embedded broker, mqtt://{settings.mqtt_host}:{settings.mqtt_port}")
    )
    database = (
        redact_url(settings.database_url)
        if settings.database_url
        else (f"SQLite {data / 'arena.db'}")
    )
    if settings.anthropic_api_key is None:
        model = "offline provider (set ANTHROPIC_API_KEY for Anthropic)"
    else:
        model = f"Anthropic {settings.anthropic_base_url or '(default endpoint)'}"
    return [
        ("data", str(data)),
        ("redis", redis),
        ("mqtt", mqtt),
        ("database", database),
        ("model", model),
        ("agents", str(settings.agents_dir.resolve())),
    ]


def stop_on_signals(stop: asyncio.Event) -> None:
    """Set ``stop`` on SIGINT or SIGTERM (a second signal is ignored while stopping)."""
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)


# What runs on the data folder ---------------------------------------------------------------


def _record_path(settings: Settings) -> Path:
    return settings.data_dir / "arena-up.pid"


def _read_record(path: Path) -> dict[str, object]:
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        logger.warning("ignoring unreadable %s: %s", path, exc)
        return {}
    return record if isinstance(record, dict) else {}


def _pids(value: object) -> list[int]:
    values = value if isinstance(value, list) else [value]
    return [v for v in values if isinstance(v, int) and not isinstance(v, bool) and v > 1]


def _proc(pid: int, name: str) -> bytes | None:
    """``/proc/PID/name`` (a file's bytes, or a link's target), None when unreadable."""
    path = Path(f"/proc/{pid}/{name}")
    try:
        return os.fsencode(os.readlink(path)) if path.is_symlink() else path.read_bytes()
    except OSError:
        return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    stat = _proc(pid, "stat")  # a zombie has ended: only its exit status is left
    return stat is None or b") Z " not in stat


def _is_arena_up(pid: int) -> bool:
    """Whether ``pid`` is a live ``arena up`` (without /proc to tell: any live process)."""
    if pid == os.getpid() or not _alive(pid):
        return False  # the same pid as ours: an earlier run in a restarted container
    cmdline = _proc(pid, "cmdline")
    if cmdline is None:
        return not Path("/proc/self").exists()
    args = cmdline.split(b"\0")
    return b"up" in args and any(b"arena" in a or b"orchestrator" in a for a in args)


def _is_left_over(pid: int, kind: str, data_dir: Path) -> bool:
    """Whether ``pid`` is a redis-server or worker of an ``arena up`` on ``data_dir``."""
    if not _alive(pid):
        return False
    if kind == "redis":
        exe = _proc(pid, "exe") or b""
        return b"redis-server" in exe and _proc(pid, "cwd") == os.fsencode(data_dir)
    args = (_proc(pid, "cmdline") or b"").split(b"\0")
    environ = (_proc(pid, "environ") or b"").split(b"\0")
    return b"worker" in args and os.fsencode(f"ARENA_DATA_DIR={data_dir}") in environ


def _end(pids: list[int], timeout_s: float) -> None:
    """SIGTERM each process group, then SIGKILL what is still alive after ``timeout_s``."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            with contextlib.suppress(OSError):
                if os.getpgid(pid) == pid:  # a worker leads its group: take its job along
                    os.killpg(pid, sig)
                else:
                    os.kill(pid, sig)
        deadline = time.monotonic() + timeout_s
        while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
            time.sleep(0.05)
        pids = [pid for pid in pids if _alive(pid)]
        if not pids:
            return


@dataclass(frozen=True, slots=True, kw_only=True)
class Previous:
    """What an earlier ``arena up`` on the data folder left: ``stopped`` says, for people,
    what was still running and has been stopped; ``workers`` are its workers' pids."""

    stopped: str | None = None
    workers: tuple[int, ...] = ()


def claim_data_dir(settings: Settings) -> Previous:
    """Record this ``arena up`` as the one running on the data folder.

    Stops what a crashed earlier run left running there (verified to be its redis-server and
    workers). Blocks for up to a few seconds: call it through a thread.

    Raises:
        ServiceError: another live ``arena up`` runs on the data folder.
    """
    data_dir = settings.data_dir.resolve()
    record = _read_record(_record_path(settings))
    for pid in _pids(record.get("up")):
        if _is_arena_up(pid):
            raise ServiceError(
                "data",
                f"`arena up` (pid {pid}) is already running on {data_dir}",
                hint="stop it first, or set ARENA_DATA_DIR to another folder",
            )
    workers = tuple(_pids(record.get("workers")))
    left = [(p, k) for k in ("redis", "workers") for p in _pids(record.get(k))]
    left = [(p, k) for p, k in left if _is_left_over(p, k, data_dir)]
    _write_record(settings, os.getpid(), None, [])
    if not left:
        return Previous(workers=workers)
    _end([p for p, _ in left], timeout_s=10)
    names = ", ".join(f"{'redis-server' if k == 'redis' else 'worker'} {p}" for p, k in left)
    logger.warning("stopped what the previous arena up left running: %s", names)
    return Previous(
        stopped=f"the previous run ended without stopping; stopped its {names}", workers=workers
    )


def _write_record(settings: Settings, up: int, redis: int | None, workers: list[int]) -> None:
    record = {"up": up, "redis": redis, "workers": workers}
    write_atomic(_record_path(settings), json.dumps(record) + "\n")


def _release_data_dir(settings: Settings) -> None:
    path = _record_path(settings)
    if os.getpid() in _pids(_read_record(path).get("up")):
        path.unlink(missing_ok=True)


# The children -----------------------------------------------------------------------------


async def _start_workers(settings: Settings, redis_url: str) -> list[asyncio.subprocess.Process]:
    env = dict(os.environ)
    env["REDIS_URL"] = redis_url
    env["ARENA_DATA_DIR"] = str(settings.data_dir.resolve())
    workers = []
    for _ in range(settings.workers):
        workers.append(
            await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "orchestrator",
                "worker",
                env=env,
                stdin=asyncio.subprocess.DEVNULL,
                start_new_session=True,
                # Spawned by the event loop's thread, which lives as long as `arena up`.
                preexec_fn=die_with_parent(signal.SIGTERM),
            )
        )
    return workers


def _signal_workers(workers: list[asyncio.subprocess.Process]) -> None:
    for proc in workers:
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)


async def _stop_workers(workers: list[asyncio.subprocess.Process], timeout_s: float) -> None:
    _signal_workers(workers)
    for proc in workers:
        try:
            async with asyncio.timeout(timeout_s):
                await proc.wait()
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)  # the worker and the job it runs
            await proc.wait()


async def _signal_when(stop: asyncio.Event, workers: list[asyncio.subprocess.Process]) -> None:
    await stop.wait()
    _signal_workers(workers)


async def _start_redis(server: RedisServer, timeout_s: float = 30) -> None:
    # Spawned by the event loop's thread, which lives as long as `arena up` (the parent-death
    # signal follows the spawning thread); only the wait for PING runs in a worker thread.
    offset = server.spawn()
    await asyncio.to_thread(server.wait_until_ready, offset, timeout_s)


async def _keep_redis(server: RedisServer, stop: asyncio.Event, record: Callable[[], None]) -> None:
    """Start the embedded Redis again whenever it dies, until ``stop`` is set.

    A Redis that cannot be started again stops everything (and the error is raised).
    """
    while not stop.is_set():
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(0.5):
                await stop.wait()
        code = server.returncode
        if stop.is_set() or code is None:
            continue
        logger.warning("redis-server exited with code %d; starting it again", code)
        try:
            await _start_redis(server)
        except ServiceError:
            stop.set()
            raise
        record()


async def serve(
    settings: Settings, stop: asyncio.Event, say: Callable[[str], None] = print
) -> None:
    """Run everything until ``stop`` is set, then stop everything.

    Raises:
        OrchestratorError: when a service cannot start, or the embedded Redis died and
            could not be started again.
    """
    daemon.ensure_data_dir(settings)
    previous = await asyncio.to_thread(claim_data_dir, settings)
    if previous.stopped:
        say(f"arena: {previous.stopped}")
    redis_server: RedisServer | None = None
    broker: MqttBroker | None = None
    workers: list[asyncio.subprocess.Process] = []
    web: socket.socket | None = None
    console: asyncio.subprocess.Process | None = None

    def record() -> None:
        pids = [w.pid for w in workers]
        _write_record(settings, os.getpid(), redis_server.pid if redis_server else None, pids)

    try:
        # Taken before anything starts: a busy port or a missing token is one line, at once.
        web = listen(settings) if settings.web_port else None
        if settings.redis_url is None:
            redis_server = _embedded_redis(settings)
            await _start_redis(redis_server)
            record()
        await _forget_workers(settings, previous)
        if settings.mqtt_url is None:
            broker = MqttBroker(settings.mqtt_host, settings.mqtt_port)
            await broker.start()
        workers = await _start_workers(settings, settings.effective_redis_url)
        record()
        if web is not None:
            console = await console_process.start(settings, web, settings.effective_redis_url)
            web.close()  # the console's now
            say(await console_process.wait_ready(console))
        children = [*workers, console] if console is not None else workers
        await _run_daemon(settings, stop, say, children, redis_server, record)
    finally:
        if web is not None:
            web.close()
        if console is not None:
            await console_process.stop(console, timeout_s=5)
        await _stop_workers(workers, timeout_s=5)
        if broker is not None:
            await broker.stop()
        if redis_server is not None:
            await asyncio.to_thread(redis_server.stop)
        _release_data_dir(settings)


async def _forget_workers(settings: Settings, previous: Previous) -> None:
    # A crashed run's workers are gone (stopped above, or by the parent-death signal) but may
    # still be registered: Redis was stopping too when they went.
    gone = [pid for pid in previous.workers if not _alive(pid)]
    if gone:
        await asyncio.to_thread(forget_workers, settings.effective_redis_url, gone)


def _embedded_redis(settings: Settings) -> RedisServer:
    if settings.redis_port:
        check_port_free(
            "redis", "127.0.0.1", settings.redis_port, "set ARENA_REDIS_PORT or REDIS_URL"
        )
    return RedisServer(
        settings.data_dir, unix_socket=settings.redis_socket, port=settings.redis_port, tied=True
    )


async def _run_daemon(
    settings: Settings,
    stop: asyncio.Event,
    say: Callable[[str], None],
    workers: list[asyncio.subprocess.Process],
    redis_server: RedisServer | None,
    record: Callable[[], None],
) -> None:
    # Workers (and the console) get SIGTERM as soon as stopping begins, so they finish their
    # current job while the daemon finishes the messages in hand.
    helpers = [asyncio.create_task(_signal_when(stop, workers))]
    if redis_server is not None:
        helpers.append(asyncio.create_task(_keep_redis(redis_server, stop, record)))
    try:
        await daemon.run(settings, stop, ready=lambda: say("arena: ready"))
    finally:
        stop.set()
        for task in helpers:
            task.cancel()
        results = await asyncio.gather(*helpers, return_exceptions=True)
    for result in results:
        if isinstance(result, Exception):
            raise result
