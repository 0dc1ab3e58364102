"""The child processes of ``arena up`` (workers, extra daemons, the command server): started
in a session of their own and ended when ``arena up`` dies, started again when one ends early,
stopped with SIGTERM and, past a timeout, SIGKILL."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
from collections.abc import Awaitable, Callable

from orchestrator.adapters.spawn import die_with_parent

__all__ = ["RESTART_S", "keep", "signal_all", "start_child", "stop_all"]

logger = logging.getLogger("orchestrator.cli.supervisor")

RESTART_S = 5.0


async def start_child(
    args: list[str], env: dict[str, str], stdout: int | None = None, module: bool = True
) -> asyncio.subprocess.Process:
    """``python -m orchestrator ARGS`` (or ``python ARGS`` without ``module``), in a session of
    its own, ended with SIGTERM when ``arena up`` dies."""
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


async def keep(
    procs: list[asyncio.subprocess.Process],
    what: str,
    start: Callable[[int], Awaitable[asyncio.subprocess.Process]],
    stop: asyncio.Event,
    after: Callable[[], None] = lambda: None,
) -> None:
    """Start a child again whenever one of ``procs`` ends before ``stop`` is set, at most once
    per ``RESTART_S`` for each: a worker killed, or refused by a Redis that was
    restarting as it started (without one no background job would run again); the command
    server after the code on disk changed. ``start`` is given the slot to fill; ``after``
    runs after each start."""
    started = [asyncio.get_running_loop().time()] * len(procs)
    while not stop.is_set():
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(1):
                await stop.wait()
        now = asyncio.get_running_loop().time()
        for slot, proc in enumerate(procs):
            if stop.is_set() or proc.returncode is None or now - started[slot] < RESTART_S:
                continue
            logger.warning(
                "%s %d exited with code %d; starting another", what, proc.pid, proc.returncode
            )
            procs[slot] = await start(slot)
            started[slot] = now
            after()


def signal_all(workers: list[asyncio.subprocess.Process]) -> None:
    """SIGTERM to each child still running: it finishes what it holds, then exits."""
    for proc in workers:
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)


async def stop_all(workers: list[asyncio.subprocess.Process], timeout_s: float) -> None:
    """SIGTERM to each child, then SIGKILL to the process group of any still running after
    ``timeout_s`` (a worker and the job it runs)."""
    signal_all(workers)
    for proc in workers:
        try:
            async with asyncio.timeout(timeout_s):
                await proc.wait()
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)  # the worker and the job it runs
            await proc.wait()
