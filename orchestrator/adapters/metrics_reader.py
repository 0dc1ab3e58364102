"""Reading the metrics every daemon and worker adds to in Redis
(:mod:`orchestrator.adapters.metrics`), as typed series for ``GET /metrics``."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from orchestrator.adapters.metrics import FAMILIES, INF, Family, bound_text
from orchestrator.adapters.redis_client import AsyncConnection, translating

__all__ = ["HistogramSeries", "Reading", "Series", "read_metrics"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Series:
    """A counter's value for one set of label values."""

    labels: tuple[str, ...]
    value: float


@dataclass(frozen=True, slots=True, kw_only=True)
class HistogramSeries:
    """A histogram for one set of label values: cumulative ``(upper bound, count)`` pairs,
    ending with ``+Inf`` (the count), and the sum."""

    labels: tuple[str, ...]
    buckets: tuple[tuple[str, int], ...]
    sum: float

    @property
    def count(self) -> int:
        """How many observations."""
        return self.buckets[-1][1]


@dataclass(frozen=True, slots=True, kw_only=True)
class Reading:
    """One family's series as read (counters in ``series``, histograms in ``histograms``)."""

    family: Family
    series: tuple[Series, ...] = ()
    histograms: tuple[HistogramSeries, ...] = ()


@translating
async def read_metrics(redis: AsyncConnection) -> tuple[Reading, ...]:
    """Every family's series, summed over every process (one round trip); a family without
    labels has its one series from the start, at zero.

    Raises:
        BusError: when Redis cannot be read.
    """
    pipe = redis.pipeline(transaction=False)
    for family in FAMILIES:
        pipe.hgetall(family.key)
        if family.kind == "histogram":
            pipe.hgetall(family.sum_key)
    replies = iter(await pipe.execute())
    readings: list[Reading] = []
    for family in FAMILIES:
        width = len(family.labels)
        if family.kind == "counter":
            counts = _decoded(next(replies), width) or ({(): 0.0} if width == 0 else {})
            series = tuple(Series(labels=k, value=v) for k, v in sorted(counts.items()))
            readings.append(Reading(family=family, series=series))
        else:
            counts = _decoded(next(replies), width + 1)  # the labels and the bound
            sums = _decoded(next(replies), width)
            readings.append(Reading(family=family, histograms=_histograms(family, counts, sums)))
    return tuple(readings)


def _histograms(
    family: Family, counts: Mapping[tuple[str, ...], float], sums: Mapping[tuple[str, ...], float]
) -> tuple[HistogramSeries, ...]:
    bounds = [*(bound_text(b) for b in family.buckets), INF]
    per_series: defaultdict[tuple[str, ...], dict[str, int]] = defaultdict(dict)
    if not family.labels:
        per_series[()] = {}
    for key, amount in counts.items():
        if key[-1] in bounds:
            per_series[key[:-1]][key[-1]] = int(amount)
    histograms = []
    for labels, buckets in sorted(per_series.items()):
        running = 0
        cumulative = []
        for bound in bounds:
            running += buckets.get(bound, 0)
            cumulative.append((bound, running))
        histograms.append(
            HistogramSeries(labels=labels, buckets=tuple(cumulative), sum=sums.get(labels, 0.0))
        )
    return tuple(histograms)


def _decoded(raw: Mapping[Any, Any], width: int) -> dict[tuple[str, ...], float]:
    """A hash's fields as tuples of ``width`` values; fields of another shape are left out."""
    values: dict[tuple[str, ...], float] = {}
    for name, value in raw.items():
        labels = _labels(name)
        if labels is None or len(labels) != width:
            continue
        try:
            values[labels] = float(value)
        except ValueError:
            continue
    return values


def _labels(name: Any) -> tuple[str, ...] | None:
    try:
        decoded = json.loads(name)
    except ValueError:
        return None
    if not isinstance(decoded, list) or not all(isinstance(v, str) for v in decoded):
        return None
    return tuple(decoded)
