"""``GET /metrics``: the daemons' and workers' counters (read from Redis, summed over every
process), today's spending against the daily caps (as ``arena budget``) and this console's
event-stream clients, in Prometheus' text format.

The event stream counts its clients with :data:`sse_clients`::

    with sse_clients.watching():
        ...  # send events until the client leaves
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, tzinfo
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

from orchestrator.adapters.metrics_reader import Reading, read_metrics
from orchestrator.adapters.redis_client import AsyncConnection
from orchestrator.caps.configured import cap_limits
from orchestrator.caps.ledger import CapLedger, enforced_caps
from orchestrator.caps.limits import MICRO, CapLimits
from orchestrator.caps.report import CapRow, cap_report
from orchestrator.errors import BusError

__all__ = [
    "CONTENT_TYPE",
    "ClientGauge",
    "PrometheusText",
    "SpendSource",
    "get_metrics_source",
    "get_spend_source",
    "render",
    "router",
    "sse_clients",
]

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


def get_metrics_source(request: Request) -> AsyncConnection:
    """The Redis the counters are read from: the running console's (a FastAPI dependency the
    app may override)."""
    redis: AsyncConnection = request.app.state.console.redis
    return redis


@dataclass(frozen=True, slots=True, kw_only=True)
class SpendSource:
    """Where today's spending is read and which caps it is held against: those the running
    daemon recorded, else ``limits`` (the console's own settings)."""

    ledger: CapLedger
    limits: CapLimits
    zone: tzinfo


def get_spend_source(request: Request) -> SpendSource | None:
    """The running console's caps ledger and caps (None: an app without a console)."""
    running = getattr(request.app.state, "console", None)
    if running is None:
        return None
    settings = running.settings
    return SpendSource(
        ledger=CapLedger(running.redis, settings.zone),
        limits=cap_limits(settings, running.agents),
        zone=settings.zone,
    )


class _Snapshot:
    """A collector that yields what was read, once (prometheus_client renders it)."""

    def __init__(
        self, readings: tuple[Reading, ...], clients: int, spend: Sequence[CapRow] = ()
    ) -> None:
        self.readings = readings
        self.clients = clients
        self.spend = spend

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
        yield from _spend_gauges(self.spend)


def _spend_gauges(rows: Sequence[CapRow]) -> Iterator[Metric]:
    """Today's spending and the caps it counts against, per agent, group, model and all."""
    labels = ["scope", "name", "unit"]
    used = GaugeMetricFamily(
        "arena_spend_today",
        "Tokens and US dollars spent today (ARENA_TZ), as arena budget shows them.",
        labels=labels,
    )
    caps = GaugeMetricFamily(
        "arena_spend_cap", "The daily cap each spending counts against.", labels=labels
    )
    for row in rows:
        used.add_metric([row.scope, row.name, "tokens"], row.tokens)
        used.add_metric([row.scope, row.name, "usd"], row.micro_usd / MICRO)
        if row.tokens_cap is not None:
            caps.add_metric([row.scope, row.name, "tokens"], row.tokens_cap)
        if row.usd_cap_micro is not None:
            caps.add_metric([row.scope, row.name, "usd"], row.usd_cap_micro / MICRO)
    yield used
    yield caps


def render(readings: tuple[Reading, ...], clients: int, spend: Sequence[CapRow] = ()) -> bytes:
    """The text exposition format (version 0.0.4) of ``readings``, the clients gauge and
    today's spending."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Snapshot(readings, clients, spend))
    return generate_latest(registry)


class PrometheusText(Response):
    """Prometheus' text exposition format."""

    media_type = CONTENT_TYPE


@router.get("/metrics", response_class=PrometheusText)
async def metrics(
    redis: Annotated[AsyncConnection, Depends(get_metrics_source)],
    spend: Annotated[SpendSource | None, Depends(get_spend_source)],
) -> Response:
    """The counters in Prometheus' text format (503 when Redis cannot be read)."""
    try:
        readings = await read_metrics(redis)
        rows = await _spend_rows(spend)
    except (BusError, OSError) as exc:
        problem = exc.problem if isinstance(exc, BusError) else str(exc)
        logger.warning("GET /metrics: redis cannot be read: %s", problem)
        return JSONResponse(
            {"error": f"metrics unavailable: redis cannot be read ({problem})"}, 503
        )
    return PrometheusText(render(readings, sse_clients.value, rows))


async def _spend_rows(source: SpendSource | None) -> tuple[CapRow, ...]:
    if source is None:
        return ()
    now = datetime.now(source.zone)
    counters = await source.ledger.read_days(now, 1)
    limits = await enforced_caps(source.ledger.redis) or source.limits
    return cap_report(counters, limits, now).rows
