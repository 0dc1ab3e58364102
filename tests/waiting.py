"""Waiting in tests for a condition to hold, with a deadline, instead of sleeping a guess."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

__all__ = ["block_until", "wait_until"]

_POLL_S = 0.01
_BLOCKING_POLL_S = 0.05  # its conditions ask a server or /proc


async def wait_until(condition: Callable[[], bool], *, timeout_s: float, what: str) -> None:
    """Return as soon as ``condition()`` is true; fail the test after ``timeout_s``.

    Args:
        condition: Looked at again after every poll (it must not block).
        timeout_s: How long the condition may take to hold.
        what: The condition in words, for the failure message.
    """
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        await asyncio.sleep(_POLL_S)


def block_until(condition: Callable[[], bool], *, timeout_s: float, what: str) -> None:
    """:func:`wait_until` for a test that is no coroutine: the same, blocking."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(_BLOCKING_POLL_S)
