"""``arena up``: the daemon with everything it needs, embedded where nothing is configured.

Starts, in order: the embedded Redis (when ``REDIS_URL`` is unset), the embedded MQTT broker
(when ``MQTT_URL`` is unset), the RQ worker processes, then the daemon. Stops in reverse order
on SIGINT/SIGTERM, after the daemon has finished the messages in hand.

The children never outlive it: on Linux they get SIGTERM when it dies, however it dies (Redis
then flushes its AOF). ``data/arena-up.pid`` records who runs on the data folder, so a start
after a crash stops what the crashed run left behind instead of refusing; and a Redis child
or a worker that ends while ``arena up`` runs is started again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import sys
from collections.abc import Callable

from orchestrator.adapters.mqtt_broker import MqttBroker, login_file
from orchestrator.adapters.redis_server import RedisServer
from orchestrator.adapters.spawn import check_port_free, die_with_parent
from orchestrator.adapters.urls import redact_url
from orchestrator.background.worker import forget_workers
from orchestrator.cli import console as console_process
from orchestrator.cli.occupant import (
    Previous,
    alive,
    claim_data_dir,
    release_data_dir,
    write_record,
)
from orchestrator.errors import ServiceError
from orchestrator.runtime import daemon
from orchestrator.settings import Settings
from orchestrator.web.listening import listen

__all__ = ["describe", "serve", "stop_on_signals"]

logger = logging.getLogger(__name__)

# A worker that ends is started again, but not sooner than this after its last start: one
# that cannot start (Redis away) is tried again every few seconds, not in a tight loop.
WORKER_RESTART_S = 5.0


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


# The children -----------------------------------------------------------------------------


async def _start_workers(settings: Settings, redis_url: str) -> list[asyncio.subprocess.Process]:
    return [await _start_worker(settings, redis_url) for _ in range(settings.workers)]


async def _start_worker(settings: Settings, redis_url: str) -> asyncio.subprocess.Process:
    env = dict(os.environ)
    env["REDIS_URL"] = redis_url
    env["ARENA_DATA_DIR"] = str(settings.data_dir.resolve())
    return await asyncio.create_subprocess_exec(
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


async def _keep_workers(
    settings: Settings,
    workers: list[asyncio.subprocess.Process],
    stop: asyncio.Event,
    record: Callable[[], None],
) -> None:
    """Start a worker again whenever one ends before ``stop`` is set (killed, or refused by a
    Redis that was restarting as it started), at most once per ``WORKER_RESTART_S`` for each:
    without one, no background job would run again."""
    started = [asyncio.get_running_loop().time()] * len(workers)
    while not stop.is_set():
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(1):
                await stop.wait()
        now = asyncio.get_running_loop().time()
        for slot, proc in enumerate(workers):
            if stop.is_set() or proc.returncode is None or now - started[slot] < WORKER_RESTART_S:
                continue
            logger.warning(
                "worker %d exited with code %d; starting another", proc.pid, proc.returncode
            )
            workers[slot] = await _start_worker(settings, settings.effective_redis_url)
            started[slot] = now
            record()


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


async def _signal_when(
    stop: asyncio.Event, children: Callable[[], list[asyncio.subprocess.Process]]
) -> None:
    await stop.wait()
    _signal_workers(children())


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
        write_record(settings, os.getpid(), redis_server.pid if redis_server else None, pids)

    try:
        # Taken before anything starts: a busy port or a missing token is one line, at once.
        web = listen(settings) if settings.web_port else None
        if settings.redis_url is None:
            redis_server = _embedded_redis(settings)
            await _start_redis(redis_server)
            record()
        await _forget_workers(settings, previous)
        if settings.mqtt_url is None:
            # Its publishing login is kept in the data folder for the daemon and the workers.
            keep = login_file(settings.data_dir)
            broker = MqttBroker(settings.mqtt_host, settings.mqtt_port, keep_login=keep)
            await broker.start()
        workers = await _start_workers(settings, settings.effective_redis_url)
        record()
        if web is not None:
            console = await console_process.start(settings, web, settings.effective_redis_url)
            web.close()  # the console's now
            say(await console_process.wait_ready(console))
        consoles = [console] if console is not None else []
        await _run_daemon(
            settings, stop, say, workers, lambda: [*workers, *consoles], redis_server, record
        )
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
        release_data_dir(settings)


async def _forget_workers(settings: Settings, previous: Previous) -> None:
    # A crashed run's workers are gone (stopped above, or by the parent-death signal) but may
    # still be registered: Redis was stopping too when they went.
    gone = [pid for pid in previous.workers if not alive(pid)]
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
    children: Callable[[], list[asyncio.subprocess.Process]],
    redis_server: RedisServer | None,
    record: Callable[[], None],
) -> None:
    # Workers (and the console) get SIGTERM as soon as stopping begins, so they finish their
    # current job while the daemon finishes the messages in hand.
    helpers = [
        asyncio.create_task(_signal_when(stop, children)),
        asyncio.create_task(_keep_workers(settings, workers, stop, record)),
    ]
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
