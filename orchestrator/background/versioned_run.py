"""The shape every versioned background job shares (distillation, summaries): read and decide
whether there is anything to do, ask the model (recording a failed call), then validate and
write the new version. Blocking steps run in threads; the model call on the event loop."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any, Protocol, TypeVar, cast

from orchestrator.errors import LLMError
from orchestrator.memory.versioned_file import VersionedFile

__all__ = ["Staged", "run_versioned"]


class Staged(Protocol):
    """A job after its first step: what it read, and where the result goes."""

    @property
    def file(self) -> VersionedFile: ...

    @property
    def trigger(self) -> str: ...

    @property
    def now(self) -> datetime: ...

    @property
    def source(self) -> dict[str, Any]: ...


J = TypeVar("J", bound=Staged)
R = TypeVar("R")


async def run_versioned(
    prepare: Callable[[], J | R],
    answer: Callable[[J], Awaitable[str | None]],
    finish: Callable[[J, str | None], R],
    outcome: type[R],
    now: datetime,
) -> R:
    """Run one versioned job.

    Args:
        prepare: Reads the inputs (blocking); returns an ``outcome`` when there is nothing to
            do, else the staged job.
        answer: The new text, from the model or made offline (None: the answer was cut off).
        finish: Validates and writes the new version (blocking).
        outcome: The outcome type ``prepare`` may return early.
        now: When it runs; must carry a time zone.

    Raises:
        LLMError: when the model call failed (recorded as an "error" run first).
        ValueError: when ``now`` carries no time zone.
    """
    if now.tzinfo is None or now.utcoffset() is None:
        raise ValueError("now must carry a time zone")
    prepared = await asyncio.to_thread(prepare)
    if isinstance(prepared, outcome):
        return prepared
    job = cast(J, prepared)
    try:
        text = await answer(job)
    except LLMError as exc:
        await asyncio.to_thread(
            job.file.note, "error", str(exc), trigger=job.trigger, now=job.now, source=job.source
        )
        raise
    return await asyncio.to_thread(finish, job, text)
