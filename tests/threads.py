"""An event loop of its own in a thread, for servers the tests share (their loops are per
function): an embedded MQTT broker, the web console."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
from collections.abc import Awaitable, Callable, Iterator

__all__ = ["loop_in_thread"]

Main = Callable[[asyncio.Event, Callable[[], None]], Awaitable[None]]


@contextlib.contextmanager
def loop_in_thread(main: Main, name: str, timeout_s: float = 30.0) -> Iterator[None]:
    """Run ``main(stop, ready)`` in a thread with its own event loop. The block starts once it
    calls ``ready()``; leaving it sets ``stop`` and joins the thread. What ``main`` raised is
    raised here (an exception escaping a thread would be lost)."""
    started: concurrent.futures.Future[tuple[asyncio.AbstractEventLoop, asyncio.Event]]
    started = concurrent.futures.Future()
    finished: concurrent.futures.Future[None] = concurrent.futures.Future()

    async def body() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        await main(stop, lambda: started.set_result((loop, stop)))

    def run() -> None:
        try:
            asyncio.run(body())
        except BaseException as exc:
            if not started.done():
                started.set_exception(exc)
            finished.set_exception(exc)
        else:
            if not started.done():
                started.set_exception(RuntimeError(f"{name} ended before it was ready"))
            finished.set_result(None)

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    loop, stop = started.result(timeout=timeout_s)
    try:
        yield
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(timeout=timeout_s)
        finished.result(timeout=0)
