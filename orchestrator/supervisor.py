"""``arena up``: the daemon with everything it needs, embedded where nothing is configured.

Starts, in order: the embedded Redis (when ``REDIS_URL`` is unset), the embedded MQTT broker
(when ``MQTT_URL`` is unset), the RQ worker processes, then the daemon. Stops in reverse order
on SIGINT/SIGTERM, after the daemon has finished the messages in hand.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
from collections.abc import Callable

from orchestrator import daemon
from orchestrator.services import MqttBroker, RedisServer, redact_url
from orchestrator.settings import Settings

__all__ = ["describe", "serve", "stop_on_signals"]

logger = logging.getLogger(__name__)


def describe(settings: Settings) -> list[tuple[str, str]]:
    """Where everything is, as (what, where) lines for people."""
    data = settings.data_dir.resolve()
    # Configured URLs may carry passwords; the embedded services' descriptions never do.
    redis = (
        redact_url(settings.redis_url)
        if settings.redis_url
        else (f"embedded redis-server, unix socket {settings.redis_socket}")
    )
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
                proc.kill()
            await proc.wait()


async def _signal_when(stop: asyncio.Event, workers: list[asyncio.subprocess.Process]) -> None:
    await stop.wait()
    _signal_workers(workers)


async def serve(
    settings: Settings, stop: asyncio.Event, say: Callable[[str], None] = print
) -> None:
    """Run everything until ``stop`` is set, then stop everything.

    Raises:
        OrchestratorError: when a service cannot start.
    """
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    redis_server: RedisServer | None = None
    broker: MqttBroker | None = None
    workers: list[asyncio.subprocess.Process] = []
    try:
        if settings.redis_url is None:
            redis_server = RedisServer(settings.data_dir, unix_socket=settings.redis_socket)
            await asyncio.to_thread(redis_server.start)
        if settings.mqtt_url is None:
            broker = MqttBroker(settings.mqtt_host, settings.mqtt_port)
            await broker.start()
        redis_url = settings.effective_redis_url
        workers = await _start_workers(settings, redis_url)
        # Workers get SIGTERM as soon as stopping begins, so they finish their current job
        # while the daemon finishes the messages in hand.
        notify = asyncio.create_task(_signal_when(stop, workers))
        try:
            await daemon.run(settings, stop, ready=lambda: say("arena: ready"))
        finally:
            notify.cancel()
    finally:
        await _stop_workers(workers, timeout_s=5)
        if broker is not None:
            await broker.stop()
        if redis_server is not None:
            await asyncio.to_thread(redis_server.stop)
