"""``GET /api/budget``: spending against the daily caps per agent, group and model, today and
over the last 7 days, as ``arena budget --json`` shows it (``caps_set``: whether any cap is in
force, so the console can say "no caps set" even before anything was spent; ``caps_from``:
``daemon`` when the caps are those the running daemon enforces, ``settings`` when the console's
own)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Depends

from orchestrator.caps.guard import caps_in_force
from orchestrator.caps.ledger import CapLedger
from orchestrator.caps.report import cap_report
from orchestrator.errors import BusError, ServiceError
from orchestrator.web.schemas import errors
from orchestrator.web.schemas_status import SpendReport
from orchestrator.web.state import Console, console

__all__ = ["router"]

router = APIRouter(prefix="/api", tags=["budget"])

DAYS = 7


@router.get(
    "/budget",
    summary="Spending against the daily caps (`arena budget --json`)",
    responses=errors(503),
)
async def budget(running: Annotated[Console, Depends(console)]) -> SpendReport:
    """Today's tokens and dollars per agent, group and model with their caps, the last 7
    days' totals, when the caps reset, and whether any cap is set."""
    settings = running.settings
    now = datetime.now(settings.zone)
    try:
        counters = await CapLedger(running.redis, settings.zone).read_days(now, DAYS)
        limits, enforced = await caps_in_force(running.redis, settings, running.agents)
    except BusError as exc:
        raise ServiceError("Redis", f"cannot read the spend counters ({exc.problem})") from None
    report = cap_report(counters, limits, now, enforced=enforced)
    return SpendReport.model_validate(report.as_json())
