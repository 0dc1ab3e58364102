"""The daemons' and workers' metrics, kept in Redis: what is counted (:data:`FAMILIES`), the
samples the runtime hands over, and the recorders that add them up
(:mod:`orchestrator.adapters.metrics_reader` reads them back for ``GET /metrics``).

Every process adds to the same hashes (one per family, named by
:func:`orchestrator.core.wire.metrics_key`), so the numbers are the sum over every daemon and
worker, whichever process serves ``/metrics``. A hash field is the JSON list of a series'
label values; a histogram's field adds the bucket's upper bound (each observation counted in
its one bucket, made cumulative when read), and its sums are in a second hash. Recording is
one pipelined round trip per half second, and never holds up or fails a message: when Redis does
not answer the numbers are lost, with one WARNING per outage.
"""

from __future__ import annotations

import asyncio
import json
import logging
from bisect import bisect_left
from collections import defaultdict
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Literal

import redis
from redis.asyncio import Redis

from orchestrator.core.quick_init import quick_init
from orchestrator.core.wire import metrics_key

__all__ = [
    "FAMILIES",
    "INF",
    "DeadLetterReason",
    "FailureReason",
    "Family",
    "MessageSample",
    "MetricsRecorder",
    "ReplySample",
    "bound_text",
    "record_job",
]

logger = logging.getLogger(__name__)

RECORD_TIMEOUT_S = 2.0
FLUSH_INTERVAL_S = 0.5
INF = "+Inf"
FailureReason = Literal["model", "internal", "budget"]
DeadLetterReason = Literal["model", "internal", "invalid", "budget"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Family:
    """One metric: its name (a counter's without ``_total``), help, labels and buckets."""

    name: str
    help: str
    kind: Literal["counter", "histogram"] = "counter"
    labels: tuple[str, ...] = ()
    buckets: tuple[float, ...] = ()  # upper bounds, ascending; +Inf is implied

    def __post_init__(self) -> None:
        if (self.kind == "histogram") != bool(self.buckets):
            raise ValueError(f"{self.name}: buckets go with histograms, and only with them")
        if list(self.buckets) != sorted(set(self.buckets)):
            raise ValueError(f"{self.name}: buckets must be ascending and distinct")

    @property
    def key(self) -> str:
        """The Redis hash of its counts."""
        return metrics_key(self.name)

    @property
    def sum_key(self) -> str:
        """The Redis hash of a histogram's sums."""
        return f"{self.key}:sum"

    def bound(self, value: float) -> str:
        """The upper bound of the bucket ``value`` falls in (``le``, as rendered)."""
        at = bisect_left(self.buckets, value)
        return INF if at == len(self.buckets) else bound_text(self.buckets[at])


_SECONDS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
_MODEL_SECONDS = (0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0)

HANDLED = Family(name="arena_messages_handled", help="People's messages handled to the end.")
FAILED = Family(
    name="arena_messages_failed",
    help="Messages not fully answered: an agent's model failed, or handling raised.",
    labels=("reason",),
)
HANDLING = Family(
    name="arena_message_handling_seconds",
    help="Time to handle a message: every hop, stored and published.",
    kind="histogram",
    buckets=_SECONDS,
)
REPLIES = Family(
    name="arena_replies",
    help="Replies, and notices of agents that could not answer, per agent.",
    labels=("agent", "kind"),
)
MODEL_LATENCY = Family(
    name="arena_model_latency_seconds",
    help="Latency of the model calls that answered, per model.",
    kind="histogram",
    labels=("model",),
    buckets=_MODEL_SECONDS,
)
TOKENS = Family(
    name="arena_tokens",
    help="Tokens the model calls took, per agent, model and kind.",
    labels=("agent", "model", "kind"),
)
MEMORY_WRITES = Family(
    name="arena_memory_writes",
    help="Memory and daily-log markers an agent wrote, per outcome (saved, reinforced, rejected).",
    labels=("agent", "outcome"),
)
RECALL_HITS = Family(
    name="arena_recall_hits",
    help="Memory entries recalled into an agent's context.",
    labels=("agent",),
)
DEAD_LETTERS = Family(
    name="arena_dead_letters",
    help="Messages moved to the dead letters, per reason.",
    labels=("reason",),
)
JOBS = Family(
    name="arena_jobs",
    help="Background job runs, per kind and outcome (error: it raised, RQ retries it).",
    labels=("kind", "status"),
)
BUDGET_REFUSALS = Family(
    name="arena_budget_refusals",
    help="Model calls not made because they would pass a daily cap, per scope and unit.",
    labels=("scope", "unit"),
)
FAMILIES = (
    HANDLED,
    FAILED,
    HANDLING,
    REPLIES,
    MODEL_LATENCY,
    TOKENS,
    MEMORY_WRITES,
    RECALL_HITS,
    DEAD_LETTERS,
    JOBS,
    BUDGET_REFUSALS,
)


@quick_init
@dataclass(frozen=True, slots=True, kw_only=True)
class ReplySample:
    """What one reply (or notice) of an agent came to."""

    agent: str
    kind: Literal["reply", "notice"]
    model: str | None = None  # set when a model answered
    latency_s: float = 0.0
    tokens_in: int = 0
    tokens_out: int = 0
    cache_read: int = 0
    cache_write: int = 0
    saved: int = 0
    reinforced: int = 0
    rejected: int = 0
    recall_hits: int = 0


@quick_init
@dataclass(frozen=True, slots=True, kw_only=True)
class MessageSample:
    """What handling one person's message came to."""

    duration_s: float
    replies: tuple[ReplySample, ...] = ()
    failure: FailureReason | None = None
    dead_letter: DeadLetterReason | None = None


@dataclass(slots=True)
class _Increments:
    """Amounts to add, by (hash, field)."""

    counts: defaultdict[tuple[str, str], int] = field(default_factory=lambda: defaultdict(int))
    sums: defaultdict[tuple[str, str], float] = field(default_factory=lambda: defaultdict(float))

    def count(self, family: Family, labels: tuple[str, ...] = (), amount: int = 1) -> None:
        if amount:
            self.counts[family.key, _field(labels)] += amount

    def observe(self, family: Family, value: float, labels: tuple[str, ...] = ()) -> None:
        self.counts[family.key, _field((*labels, family.bound(value)))] += 1
        self.sums[family.sum_key, _field(labels)] += value

    def __bool__(self) -> bool:
        return bool(self.counts or self.sums)

    def queue(self, pipe: Any) -> None:
        """Queue the commands on a (sync or async) Redis pipeline."""
        for (key, name), amount in self.counts.items():
            pipe.hincrby(key, name, amount)
        for (key, name), total in self.sums.items():
            pipe.hincrbyfloat(key, name, total)


def _add_message(inc: _Increments, sample: MessageSample) -> None:
    inc.count(HANDLED)
    inc.observe(HANDLING, sample.duration_s)
    if sample.failure is not None:
        inc.count(FAILED, (sample.failure,))
    if sample.dead_letter is not None:
        inc.count(DEAD_LETTERS, (sample.dead_letter,))
    for reply in sample.replies:
        inc.count(REPLIES, (reply.agent, reply.kind))
        inc.count(RECALL_HITS, (reply.agent,), reply.recall_hits)
        inc.count(MEMORY_WRITES, (reply.agent, "saved"), reply.saved)
        inc.count(MEMORY_WRITES, (reply.agent, "reinforced"), reply.reinforced)
        inc.count(MEMORY_WRITES, (reply.agent, "rejected"), reply.rejected)
        if reply.model is None:
            continue
        inc.observe(MODEL_LATENCY, reply.latency_s, (reply.model,))
        tokens = {
            "input": reply.tokens_in,
            "output": reply.tokens_out,
            "cache_read": reply.cache_read,
            "cache_write": reply.cache_write,
        }
        for kind, amount in tokens.items():
            inc.count(TOKENS, (reply.agent, reply.model, kind), amount)


class MetricsRecorder:
    """The daemon's recorder: adds up what it is told in memory, and adds that to the Redis
    hashes every ``interval_s`` (one pipelined round trip for every message of the interval),
    so handling a message never waits for its metrics.

    When Redis does not answer, that interval's numbers are lost: one WARNING per outage, one
    INFO line when they are recorded again. :meth:`aclose` writes what is left.
    """

    def __init__(
        self,
        redis: Redis,
        *,
        interval_s: float = FLUSH_INTERVAL_S,
        timeout_s: float = RECORD_TIMEOUT_S,
    ) -> None:
        self.redis = redis
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self._pending = _Increments()
        self._flusher: asyncio.Task[None] | None = None
        self._down = False

    async def message_handled(self, sample: MessageSample) -> None:
        """Count a message the pipeline handled to the end."""
        _add_message(self._pending, sample)
        self._flush_soon()

    async def message_failed(self, reason: FailureReason, *, dead_lettered: bool) -> None:
        """Count a message whose handling raised (kept in the dead letters when
        ``dead_lettered``)."""
        self._pending.count(HANDLED)
        self._pending.count(FAILED, (reason,))
        if dead_lettered:
            self._pending.count(DEAD_LETTERS, (reason,))
        self._flush_soon()

    async def rejected(self) -> None:
        """Count an inbound entry rejected as invalid (moved to the dead letters)."""
        self._pending.count(DEAD_LETTERS, ("invalid",))
        self._flush_soon()

    async def cap_refused(self, scope: str, unit: str) -> None:
        """Count a model call a daily cap refused (``scope``: agent, group or all)."""
        self._pending.count(BUDGET_REFUSALS, (scope, unit))
        self._flush_soon()

    async def flush(self) -> None:
        """Add what was counted since the last write to Redis now (errors only logged)."""
        pending, self._pending = self._pending, _Increments()
        if not pending:
            return
        try:
            async with asyncio.timeout(self.timeout_s):
                pipe = self.redis.pipeline(transaction=False)
                pending.queue(pipe)
                await pipe.execute()
        except Exception as exc:  # never fail a message for its metrics
            if not self._down:
                self._down = True
                logger.warning("metrics not recorded until Redis answers again: %r", exc)
            return
        if self._down:
            self._down = False
            logger.info("metrics recorded again")

    async def aclose(self) -> None:
        """Stop the timer and write what is left."""
        if self._flusher is not None:
            self._flusher.cancel()
            await asyncio.gather(self._flusher, return_exceptions=True)
            self._flusher = None
        await self.flush()

    def _flush_soon(self) -> None:
        if self._flusher is None:
            self._flusher = asyncio.create_task(
                self._flush_every_interval(), name="orchestrator.adapters.metrics.flush"
            )

    async def _flush_every_interval(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            await self.flush()
            if not self._pending:  # nothing came meanwhile: the next count starts a timer
                self._flusher = None
                return


def record_job(redis_url: str, kind: str, status: str) -> None:
    """Count a background job's outcome (from a worker's job; a failure is only logged)."""
    inc = _Increments()
    inc.count(JOBS, (kind, status))
    try:
        with redis.Redis.from_url(
            redis_url, socket_timeout=RECORD_TIMEOUT_S, socket_connect_timeout=RECORD_TIMEOUT_S
        ) as connection:
            pipe = connection.pipeline(transaction=False)
            inc.queue(pipe)
            pipe.execute()
    except (redis.RedisError, OSError) as exc:
        logger.warning("job outcome %s %s not counted: %r", kind, status, exc)


@lru_cache(maxsize=4096)  # the label sets are few (agents, models, outcomes): encode each once
def _field(labels: tuple[str, ...]) -> str:
    return json.dumps(labels, ensure_ascii=False, separators=(",", ":"))


def bound_text(value: float) -> str:
    """A bound as Prometheus clients print it (``0.5``, ``1.0``, ``120.0``)."""
    return repr(float(value))
