"""``/api/approvals``: the runs' requests for the person's approval, as ``arena approvals``
lists them, and deciding one, as ``arena approve``/``arena deny`` do: through the console's
one :class:`~orchestrator.runtime.approving.Approvals` (opened with the app), as the console's
person (``ARENA_OWNER``). The first decision wins: a second is refused (409) with what the first
was. ``/api/allow``: the agents' allow-lists (what **Always** added), and removing an entry.
"""

from __future__ import annotations

import asyncio
from typing import Annotated

from fastapi import APIRouter, Body, Depends, HTTPException, Query

from orchestrator.core.approvals import STATES
from orchestrator.core.wire import validate_group
from orchestrator.errors import ValidationError
from orchestrator.memory.approvals import ApprovalRecord
from orchestrator.runtime.approving import APPROVAL_ID, Verdict
from orchestrator.web.schemas import errors
from orchestrator.web.schemas_approvals import (
    AllowEntry,
    AllowList,
    AllowRemoval,
    AllowRemoved,
    Approval,
    ApprovalDecided,
    ApprovalList,
    Approve,
    Deny,
)
from orchestrator.web.state import Console, console

__all__ = ["router"]

router = APIRouter(prefix="/api", tags=["approvals"])

Running = Annotated[Console, Depends(console)]
_ANY_STATE = "all"


def _approval(record: ApprovalRecord) -> Approval:
    return Approval.model_validate(record.as_dict())


def _found(running: Console, approval_id: str) -> ApprovalRecord:
    """The request (blocking: SQL); 422 for what is not an id, 404 for none."""
    if not APPROVAL_ID.match(approval_id):
        raise HTTPException(422, f"id: {approval_id!r} is not an approval id (ap- and 10 hex)")
    record = running.wiring.approvals.get(approval_id)
    if record is None:
        raise HTTPException(404, f"no approval {approval_id}")
    return record


@router.get(
    "/approvals",
    summary="The runs' requests for approval, newest first (`arena approvals --json`)",
    responses=errors(422),
)
def approvals(
    running: Running,
    group: Annotated[str | None, Query(description="Only this group's requests.")] = None,
    state: Annotated[
        str, Query(description=f"{', '.join(STATES)} or {_ANY_STATE} (default: pending).")
    ] = "pending",
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> ApprovalList:
    """Up to ``limit`` requests (of ``group``, in ``state``), each with what it asks and why."""
    if group is not None:
        try:
            validate_group(group)
        except ValidationError as exc:
            raise HTTPException(422, str(exc)) from None
    if state != _ANY_STATE and state not in STATES:
        raise HTTPException(422, f"state: {state!r} is not one of {', '.join(STATES)}, all")
    found = running.wiring.approvals.listed(
        group=group, state=None if state == _ANY_STATE else state, limit=limit
    )
    return ApprovalList(approvals=[_approval(r) for r in found])


@router.get(
    "/approvals/{approval_id}",
    summary="One request for approval: what, why, its state",
    responses=errors(404, 422),
)
def approval(approval_id: str, running: Running) -> Approval:
    """The request: the tool and its full input, the cwd, the preview, the reason, the
    agent's last words, its state and expiry, and who decided it, when, with what note."""
    return _approval(_found(running, approval_id))


def _decided(verdict: Verdict) -> ApprovalDecided:
    """200 for a decision that counted; 409 when an earlier one had, 403 when refused."""
    if verdict.outcome == "already":
        raise HTTPException(409, verdict.message)
    if verdict.outcome != "decided" or verdict.record is None:
        raise HTTPException(403, verdict.message)
    return ApprovalDecided(approval=_approval(verdict.record), message=verdict.message)


async def _decide(
    running: Console, approval_id: str, *, approve: bool, note: str | None, always: bool = False
) -> ApprovalDecided:
    await asyncio.to_thread(_found, running, approval_id)
    try:
        verdict = await running.approvals.decide(
            approval_id, approve=approve, by=running.settings.owner, note=note, always=always
        )
    except ValidationError as exc:
        raise HTTPException(422, str(exc)) from None
    return _decided(verdict)


@router.post(
    "/approvals/{approval_id}/approve",
    summary="Approve a request, once or always (`arena approve`)",
    responses=errors(403, 404, 409, 422),
)
async def approve(
    approval_id: str, running: Running, body: Annotated[Approve | None, Body()] = None
) -> ApprovalDecided:
    """Approve it as the console's person; ``always`` also puts its pattern on the agent's
    allow-list. 409 (with the first decision) when it was decided already."""
    asked = body or Approve()
    return await _decide(running, approval_id, approve=True, note=asked.note, always=asked.always)


@router.post(
    "/approvals/{approval_id}/deny",
    summary="Deny a request, with a note for the agent (`arena deny`)",
    responses=errors(403, 404, 409, 422),
)
async def deny(
    approval_id: str, running: Running, body: Annotated[Deny | None, Body()] = None
) -> ApprovalDecided:
    """Deny it as the console's person; the agent is told, the note included. 409 (with the
    first decision) when it was decided already."""
    return await _decide(running, approval_id, approve=False, note=(body or Deny()).note)


@router.get(
    "/allow",
    summary="The agents' allow-lists: what they do without asking (`arena allow --json`)",
    responses=errors(422),
)
def allow_list(
    running: Running,
    agent: Annotated[str | None, Query(max_length=64, description="Only this agent's.")] = None,
) -> AllowList:
    """Each entry: the agent, the pattern, who added it, when, from which request."""
    rules = running.wiring.approvals.allowed(agent)
    return AllowList(rules=[AllowEntry.model_validate(r.as_dict()) for r in rules])


@router.delete(
    "/allow",
    summary="Remove an entry from an agent's allow-list (`arena allow remove`)",
    responses=errors(404, 422),
)
def disallow(removal: AllowRemoval, running: Running) -> AllowRemoved:
    """The agent asks again for what the pattern allowed; 404 when it was not on its list."""
    if not running.wiring.approvals.disallow(removal.agent, removal.pattern):
        raise HTTPException(404, f"{removal.pattern} is not on {removal.agent}'s allow-list")
    return AllowRemoved(
        agent=removal.agent,
        pattern=removal.pattern,
        message=f"{removal.pattern} removed from {removal.agent}'s allow-list",
    )
