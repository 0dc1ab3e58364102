"""``GET /metrics``: the daemon's counters in Prometheus' text format."""

from __future__ import annotations

from fastapi import APIRouter

__all__ = ["router"]

router = APIRouter(include_in_schema=False)
