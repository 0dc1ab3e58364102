"""``arena up``: the daemon with everything it needs, embedded where nothing is configured.

Starts, in order: the embedded Redis (when ``REDIS_URL`` is unset), the embedded MQTT broker
(when ``MQTT_URL`` is unset), the RQ worker processes, the warm command server
(:mod:`orchestrator.cli.warm`, unless ``ARENA_CLI_SERVER=false``), then the daemon. Stops in
reverse order on SIGINT/SIGTERM, after the daemon has finished the messages in hand.

The children never outlive it: on Linux they get SIGTERM when it dies, however it dies (Redis
then flushes its AOF). ``data/arena-up.pid`` records who runs on the data folder, so a start
after a crash stops what the crashed run left behind instead of refusing; and a Redis child
a worker or the command server that ends while ``arena up`` runs is started again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
from collections.abc import Callable

from orchestrator.adapters.mqtt_broker import MqttBroker, login_file
from orchestrator.adapters.redis_server import RedisServer
from orchestrator.adapters.spawn import check_port_free, socket_fits
from orchestrator.adapters.urls import redact_url
from orchestrator.background.worker import forget_workers
from orchestrator.cli import console as console_process
from orchestrator.cli.children import keep, signal_all, start_child, stop_all
from orchestrator.cli.occupant import (
    Previous,
    alive,
    claim_data_dir,
    release_data_dir,
    write_record,
)
from orchestrator.core.agents import load_agents
from orchestrator.errors import OrchestratorError, ServiceError
from orchestrator.runtime import daemon
from orchestrator.settings import Settings
from orchestrator.web.listening import listen

__all__ = ["describe", "serve", "stop_on_signals"]

logger = logging.getLogger(__name__)

# A worker that ends is started again, but not sooner than this after its last start: one
# that cannot start (Redis away) is tried again every few seconds, not in a tight loop.


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


async def _start_workers(
    settings: Settings, redis_url: str, *, runs: bool = False
) -> list[asyncio.subprocess.Process]:
    count = settings.workers
    if runs:  # only for a team with an agent that acts on the project
        count = settings.run_workers if await asyncio.to_thread(_acts, settings) else 0
    return [await _start_worker(settings, redis_url, runs=runs) for _ in range(count)]


def _acts(settings: Settings) -> bool:
    """Whether an agent of the team acts through Claude Code (bad agent files: the daemon
    says what is wrong with them)."""
    try:
        return any(agent.code is not None for agent in load_agents(settings.agents_dir))
    except OrchestratorError:
        return False


async def _start_worker(
    settings: Settings, redis_url: str, *, runs: bool = False
) -> asyncio.subprocess.Process:
    env = dict(os.environ)
    env["REDIS_URL"] = redis_url
    env["ARENA_DATA_DIR"] = str(settings.data_dir.resolve())
    return await start_child(["worker", "--runs"] if runs else ["worker"], env)


async def _start_daemon(settings: Settings, slot: int) -> asyncio.subprocess.Process:
    """An ``arena daemon`` beside this process's own, under a consumer name of its own (the
    same for the slot after a restart): the same settings, the services this run started."""
    env = dict(os.environ)
    env["REDIS_URL"] = settings.effective_redis_url
    env["ARENA_DATA_DIR"] = str(settings.data_dir.resolve())
    env["ARENA_CONSUMER"] = f"{settings.consumer}-{slot + 2}"
    # Its log lines go where this process's go; its "ready" is this process's to say.
    return await start_child(["daemon"], env, stdout=asyncio.subprocess.DEVNULL)


async def _start_warm(settings: Settings) -> asyncio.subprocess.Process:
    return await start_child(
        ["-m", "orchestrator.cli.warm", str(settings.cli_socket.resolve())],
        dict(os.environ),
        stdout=asyncio.subprocess.DEVNULL,
        module=False,
    )


async def _start_warm_if(
    settings: Settings, say: Callable[[str], None]
) -> list[asyncio.subprocess.Process]:
    """The warm command server, when it is on and its socket path fits."""
    if not settings.cli_server:
        return []
    if not socket_fits(settings.cli_socket.resolve()):
        say(f"arena: commands start cold: the socket path {settings.cli_socket} is too long")
        return []
    return [await _start_warm(settings)]


async def _keep_workers(
    settings: Settings,
    workers: list[asyncio.subprocess.Process],
    stop: asyncio.Event,
    record: Callable[[], None],
) -> None:
    """Keep the background workers and, after them in ``workers``, the run workers."""
    url, plain = settings.effective_redis_url, settings.workers
    background, runs = workers[:plain], workers[plain:]

    def after() -> None:
        workers[:] = [*background, *runs]
        record()

    await asyncio.gather(
        keep(background, "worker", lambda _: _start_worker(settings, url), stop, after),
        keep(runs, "run worker", lambda _: _start_worker(settings, url, runs=True), stop, after),
    )


async def _signal_when(
    stop: asyncio.Event, children: Callable[[], list[asyncio.subprocess.Process]]
) -> None:
    await stop.wait()
    signal_all(children())


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
    warm: list[asyncio.subprocess.Process] = []
    extra: list[asyncio.subprocess.Process] = []  # the daemons beyond this process's own
    web: socket.socket | None = None
    console: asyncio.subprocess.Process | None = None

    def record() -> None:
        pids = [w.pid for w in [*workers, *extra]]
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
            login = login_file(settings.data_dir)
            broker = MqttBroker(settings.mqtt_host, settings.mqtt_port, keep_login=login)
            await broker.start()
        workers = await _start_workers(settings, settings.effective_redis_url)
        workers += await _start_workers(settings, settings.effective_redis_url, runs=True)
        # This process runs one daemon; the others share the inbox's partitions with it.
        extra = [await _start_daemon(settings, slot) for slot in range(settings.daemons - 1)]
        record()
        warm = await _start_warm_if(settings, say)
        if web is not None:
            console = await console_process.start(settings, web, settings.effective_redis_url)
            web.close()  # the console's now
            say(await console_process.wait_ready(console))
        consoles = [console] if console is not None else []
        children = lambda: [*workers, *extra, *warm, *consoles]  # noqa: E731
        await _run_daemon(settings, stop, say, workers, warm, extra, children, redis_server, record)
    finally:
        if web is not None:
            web.close()
        if console is not None:
            await console_process.stop(console, timeout_s=5)
        await stop_all([*warm, *workers], timeout_s=5)
        # A daemon finishes the messages it holds first (ARENA_SHUTDOWN_TIMEOUT_S).
        await stop_all(extra, timeout_s=settings.shutdown_timeout_s + 5)
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
    warm: list[asyncio.subprocess.Process],
    extra: list[asyncio.subprocess.Process],
    children: Callable[[], list[asyncio.subprocess.Process]],
    redis_server: RedisServer | None,
    record: Callable[[], None],
) -> None:
    # Workers (and the console) get SIGTERM as soon as stopping begins, so they finish their
    # current job while the daemon finishes the messages in hand.
    helpers = [
        asyncio.create_task(_signal_when(stop, children)),
        asyncio.create_task(_keep_workers(settings, workers, stop, record)),
        asyncio.create_task(keep(warm, "command server", lambda _: _start_warm(settings), stop)),
        asyncio.create_task(
            keep(extra, "daemon", lambda slot: _start_daemon(settings, slot), stop, record)
        ),
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
