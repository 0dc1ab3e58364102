"""``POST /api/groups/{group}/summarize``: update a group's rolling summary now, as
``arena summarize --wait`` does: a background job, waited for a few seconds, its outcome said
in one line (a new version, or why none was written)."""

from __future__ import annotations

import time
from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException

from orchestrator.adapters.redis_client import Connection, connect, translated
from orchestrator.background.queue import enqueue_summary, fetch_job
from orchestrator.core.wire import validate_group
from orchestrator.errors import BusError, ServiceError, ValidationError
from orchestrator.web.schemas import errors
from orchestrator.web.schemas_memory import Summarized
from orchestrator.web.state import Console, console

__all__ = ["router"]

router = APIRouter(prefix="/api", tags=["memory"])

_WAIT_S = 15.0
_ENDED = ("finished", "failed", "stopped", "canceled")


@router.post(
    "/groups/{group}/summarize",
    summary="Update a group's rolling summary now (`arena summarize`)",
    status_code=202,
    responses=errors(404, 422, 503),
)
def summarize(group: str, running: Annotated[Console, Depends(console)]) -> Summarized:
    """The job's id, its status and one line on its outcome (waited for up to 15 s)."""
    try:
        name = validate_group(group)
    except ValidationError:
        raise HTTPException(404, f"no group {group!r}") from None
    latest = running.rooms.history.recent(name, 1)
    if not latest:
        raise HTTPException(404, f"group {name!r} has no messages yet")
    settings = running.settings
    try:
        with connect(settings.effective_redis_url, socket_timeout=5) as connection:
            result = enqueue_summary(
                connection, name, latest[-1].seq, "manual", settings=settings, force=True
            )
            with translated():  # the job's status is read through RQ
                status, detail = _outcome(connection, result.job_id)
    except BusError as exc:
        raise ServiceError("redis", f"cannot enqueue the summary: {exc.problem}") from None
    return Summarized(job_id=result.job_id, enqueued=result.enqueued, status=status, detail=detail)


def _outcome(connection: Connection, job_id: str) -> tuple[str, str]:
    """The job's status and one line on its outcome once it ended, or its status after
    :data:`_WAIT_S`."""
    deadline = time.monotonic() + _WAIT_S
    status = "queued"
    while time.monotonic() < deadline:
        job = fetch_job(connection, job_id)
        if job is None:
            break
        status = job.get_status().value
        if status in _ENDED:
            latest = job.latest_result()
            value = latest.return_value if latest is not None else None
            if isinstance(value, dict):
                return str(value.get("status", status)), _said(value)
            return status, f"the job {status}"
        time.sleep(0.2)
    return status, "still running: see `arena jobs`"


def _said(result: dict[str, Any]) -> str:
    if result.get("status") == "written":
        return f"summary version {result.get('version')} written ({result.get('tokens', 0)} tokens)"
    return f"{result.get('status', '?')}: {result.get('reason') or 'no reason given'}"
