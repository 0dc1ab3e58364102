"""``/api/runs``: the agents' Claude Code runs, as ``arena runs`` and ``arena run show`` give
them (``--json``), and ``POST /api/runs/{id}/cancel``, as ``arena run cancel``: a queued run
will not start, a running one stops within seconds, one that ended is refused (409)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, Query

from orchestrator.core.wire import validate_group
from orchestrator.errors import ValidationError
from orchestrator.runtime.asked import approvals_json
from orchestrator.runtime.run_cancel import cancel_run
from orchestrator.web.schemas import errors
from orchestrator.web.schemas_runs import RunCancel, RunDetail, Runs
from orchestrator.web.state import Console, console

__all__ = ["router"]

router = APIRouter(prefix="/api", tags=["runs"])

Running = Annotated[Console, Depends(console)]


@router.get(
    "/runs",
    summary="The agents' Claude Code runs, newest first (`arena runs --json`)",
    responses=errors(422),
)
def runs(
    running: Running,
    group: Annotated[str | None, Query(description="Only this group's runs.")] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
) -> Runs:
    """Up to ``limit`` runs (of ``group``), each with how it ended and what it changed."""
    if group is not None:
        try:
            validate_group(group)
        except ValidationError as exc:
            raise HTTPException(422, str(exc)) from None
    found = running.wiring.runs.recent(group, limit)
    return Runs.model_validate({"runs": [r.as_dict() for r in found]})


@router.get(
    "/runs/{run_id}",
    summary="One run with its steps (`arena run show --json`)",
    responses=errors(404, 422),
)
def run(run_id: str, running: Running) -> RunDetail:
    """The run, how it ended, what it changed, each step it took, in order, and what it
    asked the person."""
    store = running.wiring.runs
    found = store.get(run_id)
    if found is None:
        raise HTTPException(404, f"no run {run_id}")
    steps = [s.as_dict() for s in store.steps(run_id)]
    asked = running.wiring.approvals.listed(run_id=run_id, limit=1000)[::-1]
    return RunDetail.model_validate(
        {**found.as_dict(), "steps": steps, "approvals": approvals_json(asked)}
    )


@router.post(
    "/runs/{run_id}/cancel",
    status_code=202,
    summary="Ask a run to stop (`arena run cancel`)",
    responses=errors(404, 409, 422),
)
def cancel(run_id: str, running: Running) -> RunCancel:
    """A queued run will not start, a running one stops within seconds; 409 when it had
    already ended."""
    done = cancel_run(running.wiring.runs, run_id)
    if done is None:
        raise HTTPException(404, f"no run {run_id}")
    if not done.asked:
        raise HTTPException(409, done.detail)
    return RunCancel(id=done.run.id, status=done.run.status, detail=done.detail)
