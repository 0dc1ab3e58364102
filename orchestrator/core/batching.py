"""Coalescing: the same kind of work, asked for by many coroutines at about the same moment,
done together in one step (one transaction, one round trip, one thread hand-off).

With many groups in flight, each message's handler asks for the same few things (store this,
publish that, acknowledge the entry). Done one by one, each pays the fixed cost of its step;
a :class:`Coalescer` hands every request made while a batch is running to the next batch, so
the fixed cost is paid once per batch, and a request made when nothing is running goes out at
the next turn of the event loop. Under no load a batch holds one request, under load up to
``max_batch``: nobody waits for a batch to fill.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

__all__ = ["BatchRunner", "Coalescer"]

logger = logging.getLogger(__name__)

R = TypeVar("R")
T = TypeVar("T")

BatchRunner = Callable[[list[R]], Awaitable[Sequence[T | BaseException]]]
"""Runs a batch of requests; one result per request, in order (an exception for a request
that failed on its own: the others still get their results)."""


class Coalescer(Generic[R, T]):
    """Runs the requests of many coroutines in batches, at most ``flights`` batches at once.

    A caller that is cancelled before its batch starts is left out of it; one cancelled
    while its batch runs is not waited for (its request is still carried out: batched work
    must be safe to do for nobody).
    """

    def __init__(
        self, run: BatchRunner[R, T], *, max_batch: int = 256, flights: int = 1, name: str = ""
    ) -> None:
        if max_batch < 1 or flights < 1:
            raise ValueError("max_batch and flights must be at least 1")
        self._run = run
        self._max_batch = max_batch
        self._max_flights = flights
        self._name = name or getattr(run, "__qualname__", "batch")
        self._pending: list[tuple[R, asyncio.Future[T]]] = []
        self._flights = 0  # batches running or about to
        self._tasks: set[asyncio.Task[None]] = set()  # referenced until done
        self.batches = 0  # batches run so far
        self.requests = 0  # requests carried out so far

    async def __call__(self, request: R) -> T:
        """Carry out ``request`` with the others asked for meanwhile; its result."""
        return await self.submit(request)

    def submit(self, request: R) -> asyncio.Future[T]:
        """:meth:`__call__`'s future, from a coroutine (it needs the running loop): what a
        caller that shields the request awaits without a task of its own."""
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self._pending.append((request, future))
        if self._flights < self._max_flights:
            self._flights += 1
            task = asyncio.create_task(self._fly(), name=f"orchestrator.batch.{self._name}")
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        return future

    async def _fly(self) -> None:
        try:
            await asyncio.sleep(0)  # let the coroutines asking at this moment join the batch
            while self._pending:
                taken = self._pending[: self._max_batch]
                del self._pending[: self._max_batch]
                batch = [(request, future) for request, future in taken if not future.done()]
                if batch:
                    await self._carry_out(batch)
        finally:
            # No await between the last look at ``_pending`` and here: a request made from
            # now on starts a flight of its own.
            self._flights -= 1

    async def _carry_out(self, batch: list[tuple[R, asyncio.Future[T]]]) -> None:
        try:
            results = await self._run([request for request, _ in batch])
        except asyncio.CancelledError:
            for _, future in batch:
                future.cancel()
            raise
        except Exception as exc:
            results = [exc] * len(batch)
        if len(results) != len(batch):
            problem = RuntimeError(f"{self._name}: {len(results)} results for {len(batch)}")
            results = [problem] * len(batch)
        self.batches += 1
        self.requests += len(batch)
        for (_, future), result in zip(batch, results, strict=True):
            if future.done():
                continue
            if isinstance(result, BaseException):
                future.set_exception(result)
            else:
                future.set_result(result)
