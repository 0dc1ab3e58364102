"""Waiting in tests for a condition to hold, with a deadline, instead of sleeping a guess.

The one way the tests poll: :func:`wait_until` in a coroutine, :func:`block_until` elsewhere.
A condition may raise to end the wait at once (a process that died while it was awaited)."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable

__all__ = ["block_until", "wait_until"]

# A condition is looked at again soon, then less often: one that holds at once is seen at once,
# one that takes seconds (asking a server each time) costs no more than a look every 50 ms.
_FIRST_POLL_S = 0.01
_POLL_S = 0.05


async def wait_until(
    condition: Callable[[], bool | Awaitable[bool]], *, timeout_s: float, what: str
) -> None:
    """Return as soon as ``condition()`` is true; fail the test after ``timeout_s``.

    Args:
        condition: Looked at again after every poll: a function (it must not block) or a
            coroutine function (a question to a server, awaited).
        timeout_s: How long the condition may take to hold.
        what: The condition in words, for the failure message.
    """
    deadline, poll_s = time.monotonic() + timeout_s, _FIRST_POLL_S
    while not await _holds(condition):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        await asyncio.sleep(poll_s)
        poll_s = min(2 * poll_s, _POLL_S)


async def _holds(condition: Callable[[], bool | Awaitable[bool]]) -> bool:
    answer = condition()
    return bool(await answer) if inspect.isawaitable(answer) else bool(answer)


def block_until(condition: Callable[[], bool], *, timeout_s: float, what: str) -> None:
    """:func:`wait_until` for a test that is no coroutine: the same, blocking."""
    deadline, poll_s = time.monotonic() + timeout_s, _FIRST_POLL_S
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(poll_s)
        poll_s = min(2 * poll_s, _POLL_S)
