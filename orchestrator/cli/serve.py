"""``arena up``, ``arena daemon`` and ``arena worker``: the long-running processes.

Each imports the daemon's modules when it runs, so that ``arena --help`` stays quick. ``up``
and ``daemon`` print the stack of every thread to their output (the log) on SIGUSR1 (``kill
-USR1 PID``): where a process that seems stuck is waiting.
"""

from __future__ import annotations

import asyncio
import contextlib
import faulthandler
import gc
import signal
import sys
from collections.abc import Coroutine
from typing import Any

import click

from orchestrator.cli.output import out
from orchestrator.logs import configure
from orchestrator.settings import Settings

__all__ = ["daemon", "settle_collector", "up", "worker"]


@click.command()
@click.pass_obj
def up(settings: Settings) -> None:
    """Run the daemon, its workers, the web console and (when not configured) embedded Redis
    and MQTT.

    The console is at http://127.0.0.1:8080 (ARENA_WEB_HOST, ARENA_WEB_PORT; 0 turns it off;
    any host but loopback needs ARENA_WEB_TOKEN). Stops cleanly on Ctrl-C or SIGTERM: intake
    stops, messages in hand are finished.
    """
    from orchestrator.cli import supervisor

    configure(settings.log_level)
    for what, where in supervisor.describe(settings):
        out.print(f"arena: {what:<9}{where}")

    async def _up() -> None:
        stop = asyncio.Event()
        supervisor.stop_on_signals(stop)
        _stacks_on_sigusr1()
        await supervisor.serve(settings, stop, say=lambda line: out.print(line))

    _run_loop(_up())
    out.print("arena: stopped")


@click.command()
@click.pass_obj
def daemon(settings: Settings) -> None:
    """Run only the daemon, against configured services (for scale-out)."""
    from orchestrator.cli import supervisor
    from orchestrator.runtime import daemon as runtime

    configure(settings.log_level)

    async def _run() -> None:
        stop = asyncio.Event()
        supervisor.stop_on_signals(stop)
        _stacks_on_sigusr1()
        await runtime.run(settings, stop, ready=lambda: out.print("arena: ready"))

    _run_loop(_run())


@click.command()
@click.option("--burst", is_flag=True, help="Work until the queues are empty, then exit.")
@click.option(
    "--runs", is_flag=True, help="Take only Claude Code runs (the runs queue), not other jobs."
)
@click.pass_obj
def worker(settings: Settings, burst: bool, runs: bool) -> None:
    """Run a background worker (RQ) for heartbeat and summary jobs, or, with --runs, for the
    agents' Claude Code runs (they may take minutes: `arena up` keeps ARENA_RUN_WORKERS)."""
    from orchestrator.adapters.probes import ping_redis
    from orchestrator.background.worker import run_worker

    configure(settings.log_level)
    asyncio.run(ping_redis(settings.effective_redis_url, timeout_s=5))
    run_worker(
        settings.effective_redis_url,
        burst=burst,
        model_sdk=settings.anthropic_api_key is not None,
        runs=runs,
    )


# The collector's thresholds for the daemon (Python's own: 700, 10, 10). A turn makes tens of
# thousands of objects, nearly all freed at once by their counts: the youngest generation is
# looked at every 50,000 (at 10,000 the collector took 115-140 µs of a message, 52 so).
GC_THRESHOLDS = (50_000, 20, 20)


def settle_collector() -> None:
    """What is loaded by now (the modules, their classes and functions: most of the objects
    a daemon will ever hold) is frozen out of the garbage collector's reach (``gc.freeze``),
    and the collector runs less often. With Python's thresholds it went over that whole heap
    every few hundred messages: a sixth of a message's CPU (``tests/bench/turn_cpu.py``: 640
    µs of the collector per message, about 50 µs so)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


def _run_loop(main: Coroutine[Any, Any, None]) -> None:
    """Run ``main`` on uvloop's event loop: the daemon's loop does most of a message's work,
    and uvloop's takes about a sixth less CPU per message than asyncio's own
    (``tests/bench/throughput.py``, docs/performance.md).

    First the garbage collector is settled (:func:`settle_collector`).
    """
    import uvloop

    settle_collector()
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(main)


def _stacks_on_sigusr1() -> None:
    """SIGUSR1 prints every thread's stack to stderr (the log), even when the event loop is
    stuck, then, from the loop, every task's: what each coroutine awaits. The process goes on.
    Call it from the running loop."""
    asyncio.get_running_loop().add_signal_handler(signal.SIGUSR1, _print_tasks)
    # When stderr is no file (none, or captured by whoever embeds the CLI): the tasks only.
    with contextlib.suppress(AttributeError, ValueError, OSError):
        faulthandler.register(signal.SIGUSR1, file=sys.stderr, all_threads=True, chain=True)


def _print_tasks() -> None:
    for task in asyncio.all_tasks():
        print(f"Task {task.get_name()!r}, awaiting:", file=sys.stderr)
        for where in _awaits(task.get_coro()):
            print(f"  {where}", file=sys.stderr)
    sys.stderr.flush()


def _awaits(coro: object) -> list[str]:
    """Where a coroutine and every coroutine it awaits are, outermost first."""
    found = []
    while coro is not None:
        frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None)
        if frame is not None:
            code = frame.f_code
            found.append(f'File "{code.co_filename}", line {frame.f_lineno}, in {code.co_name}')
        coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
    return found
