"""``GET /metrics``: the daemons' and workers' counters (read from Redis, summed over every
process) and this console's event-stream clients, in Prometheus' text format.

The event stream counts its clients with :data:`sse_clients`::

    with sse_clients.watching():
        ...  # send events until the client leaves
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Annotated

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from redis.asyncio import Redis
from redis.exceptions import RedisError

from orchestrator.adapters.metrics_reader import Reading, read_metrics

__all__ = ["CONTENT_TYPE", "ClientGauge", "get_metrics_source", "render", "router", "sse_clients"]

logger = logging.getLogger(__name__)

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

router = APIRouter(include_in_schema=False)


class ClientGauge:
    """How many clients are connected to this process's event streams."""

    def __init__(self) -> None:
        self._value = 0

    @property
    def value(self) -> int:
        """Clients connected now."""
        return self._value

    @contextlib.contextmanager
    def watching(self) -> Iterator[None]:
        """Count one client for as long as the block runs."""
        self._value += 1
        try:
            yield
        finally:
            self._value -= 1


sse_clients = ClientGauge()


def get_metrics_source(request: Request) -> Redis:
    """The Redis the counters are read from: the running console's (a FastAPI dependency the
    app may override)."""
    redis: Redis = request.app.state.console.redis
    return redis


class _Snapshot:
    """A collector that yields what was read, once (prometheus_client renders it)."""

    def __init__(self, readings: tuple[Reading, ...], clients: int) -> None:
        self.readings = readings
        self.clients = clients

    def collect(self) -> Iterator[Metric]:
        for reading in self.readings:
            family = reading.family
            labels = list(family.labels)
            if family.kind == "counter":
                counter = CounterMetricFamily(family.name, family.help, labels=labels)
                for series in reading.series:
                    counter.add_metric(list(series.labels), series.value)
                yield counter
                continue
            histogram = HistogramMetricFamily(family.name, family.help, labels=labels)
            for hist in reading.histograms:
                buckets = [(bound, float(count)) for bound, count in hist.buckets]
                histogram.add_metric(list(hist.labels), buckets, hist.sum)
            yield histogram
        yield GaugeMetricFamily(
            "arena_sse_clients", "Clients connected to this console's event streams.", self.clients
        )


def render(readings: tuple[Reading, ...], clients: int) -> bytes:
    """The text exposition format (version 0.0.4) of ``readings`` and the clients gauge."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Snapshot(readings, clients))
    return generate_latest(registry)


@router.get("/metrics")
async def metrics(redis: Annotated[Redis, Depends(get_metrics_source)]) -> Response:
    """The counters in Prometheus' text format (503 when Redis cannot be read)."""
    try:
        readings = await read_metrics(redis)
    except (RedisError, OSError) as exc:
        logger.warning("GET /metrics: redis cannot be read: %s", exc)
        return JSONResponse({"error": f"metrics unavailable: redis cannot be read ({exc})"}, 503)
    return Response(render(readings, sse_clients.value), media_type=CONTENT_TYPE)
