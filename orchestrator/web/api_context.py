"""``GET /api/context``: the context an agent's next turn in a group would get, as ``arena
context --json`` prints it (nothing is sent to the model)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException, Query

from orchestrator.core.wire import validate_group
from orchestrator.errors import ValidationError
from orchestrator.memory.conversation.meta import ReplyMeta
from orchestrator.runtime.preview import next_trigger, preview
from orchestrator.web.api_memory import Running
from orchestrator.web.schemas import errors
from orchestrator.web.schemas_memory import ContextPreview, ReplyReport, ToolsReport

__all__ = ["router"]

router = APIRouter(prefix="/api", tags=["context"])


@router.get(
    "/context",
    summary="The context an agent's next turn would get (`arena context`)",
    responses=errors(404, 422),
)
def context(
    running: Running,
    agent: Annotated[str, Query(max_length=64)],
    group: Annotated[str, Query(max_length=200)],
    message: Annotated[str | None, Query(max_length=20_000)] = None,
) -> ContextPreview:
    """The request (system prompt, turns) and the report (layers' tokens, budget decisions,
    citations, recall's candidates left out), as if ``message`` were posted next (default:
    the group's latest message)."""
    try:
        name = validate_group(group)
    except ValidationError as exc:
        raise HTTPException(422, str(exc)) from None
    # The identity files as they are now: the console edits them.
    wiring = running.wiring.reloaded()
    try:
        spec = wiring.team.get(agent)
    except ValidationError as exc:
        raise HTTPException(404, exc.problem) from None
    trigger = next_trigger(running.rooms.history, name, message)
    made = preview(wiring, spec, trigger)
    return ContextPreview.model_validate(made.as_json(spec, name))


@router.get(
    "/messages/{message_id}/report",
    summary="The context cost report stored with a past reply",
    responses=errors(404, 422),
)
def reply_report(message_id: str, running: Running) -> ReplyReport:
    """What the reply's context was made of when it was written: each layer's tokens, the
    budget's cuts, recall's items kept and left out (and why), the memory tools it called
    and each step's tokens, as its turn recorded them."""
    stored = running.rooms.history.get(message_id) if len(message_id) <= 200 else None
    meta = ReplyMeta.from_json(stored.meta) if stored is not None else None
    if stored is None or meta is None or meta.context is None:
        raise HTTPException(404, f"no reply {message_id[:80]!r} with a stored report")
    return ReplyReport(
        id=stored.message.id,
        group=stored.message.group,
        agent=meta.agent,
        created_at=stored.message.created_at.isoformat(),
        report=meta.context.as_json(),
        recall=meta.recall.as_json() if meta.recall is not None else None,
        # The memory tools it called and every model call's tokens (None: no tool called).
        tools=ToolsReport.model_validate(meta.tools.as_json()) if meta.tools is not None else None,
    )
