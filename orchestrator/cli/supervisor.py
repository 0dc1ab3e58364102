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
import sys
from collections.abc import Awaitable, Callable

from orchestrator.adapters.mqtt_broker import MqttBroker, login_file
from orchestrator.adapters.redis_server import RedisServer
from orchestrator.adapters.spawn import check_port_free, die_with_parent, socket_fits
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
from orchestrator.core.agents import load_agents
from orchestrator.errors import OrchestratorError, ServiceError
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
    return await _start_child(["worker", "--runs"] if runs else ["worker"], env)


async def _start_warm(settings: Settings) -> asyncio.subprocess.Process:
    return await _start_child(
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


async def _start_child(
    args: list[str], env: dict[str, str], stdout: int | None = None, module: bool = True
) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        *(["-m", "orchestrator"] if module else []),
        *args,
        env=env,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=stdout,
        start_new_session=True,
        # Spawned by the event loop's thread, which lives as long as `arena up`.
        preexec_fn=die_with_parent(signal.SIGTERM),
    )


async def _keep(
    procs: list[asyncio.subprocess.Process],
    what: str,
    start: Callable[[], Awaitable[asyncio.subprocess.Process]],
    stop: asyncio.Event,
    after: Callable[[], None] = lambda: None,
) -> None:
    """Start a child again whenever one of ``procs`` ends before ``stop`` is set, at most once
    per ``WORKER_RESTART_S`` for each: a worker killed, or refused by a Redis that was
    restarting as it started (without one no background job would run again); the command
    server after the code on disk changed. ``after`` runs after each start."""
    started = [asyncio.get_running_loop().time()] * len(procs)
    while not stop.is_set():
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(1):
                await stop.wait()
        now = asyncio.get_running_loop().time()
        for slot, proc in enumerate(procs):
            if stop.is_set() or proc.returncode is None or now - started[slot] < WORKER_RESTART_S:
                continue
            logger.warning(
                "%s %d exited with code %d; starting another", what, proc.pid, proc.returncode
            )
            procs[slot] = await start()
            started[slot] = now
            after()


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
        _keep(background, "worker", lambda: _start_worker(settings, url), stop, after),
        _keep(runs, "run worker", lambda: _start_worker(settings, url, runs=True), stop, after),
    )


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
    warm: list[asyncio.subprocess.Process] = []
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
        workers += await _start_workers(settings, settings.effective_redis_url, runs=True)
        record()
        warm = await _start_warm_if(settings, say)
        if web is not None:
            console = await console_process.start(settings, web, settings.effective_redis_url)
            web.close()  # the console's now
            say(await console_process.wait_ready(console))
        consoles = [console] if console is not None else []
        children = lambda: [*workers, *warm, *consoles]  # noqa: E731
        await _run_daemon(settings, stop, say, workers, warm, children, redis_server, record)
    finally:
        if web is not None:
            web.close()
        if console is not None:
            await console_process.stop(console, timeout_s=5)
        await _stop_workers([*warm, *workers], timeout_s=5)
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
    children: Callable[[], list[asyncio.subprocess.Process]],
    redis_server: RedisServer | None,
    record: Callable[[], None],
) -> None:
    # Workers (and the console) get SIGTERM as soon as stopping begins, so they finish their
    # current job while the daemon finishes the messages in hand.
    helpers = [
        asyncio.create_task(_signal_when(stop, children)),
        asyncio.create_task(_keep_workers(settings, workers, stop, record)),
        asyncio.create_task(_keep(warm, "command server", lambda: _start_warm(settings), stop)),
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
