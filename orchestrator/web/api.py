"""The console's JSON API (``/api/...``), built on what the ``arena`` commands call: the
client's validation and inbox (``arena post``, ``retry``, ``dead-letters``), the routing dry
run (``arena route``), the status survey (``arena status``) and the conversation history.

Errors are ``{"error": "one line"}``: the same reasons as the CLI's, with a 4xx status (503
when Redis or the database cannot be reached).
"""

from __future__ import annotations

import re
from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, Query
from pydantic import BaseModel, Field

from orchestrator.core.routing import route as decide
from orchestrator.core.wire import DEFAULT_SENDER
from orchestrator.errors import ValidationError
from orchestrator.status import survey
from orchestrator.web.bodies import BodyLimit
from orchestrator.web.schemas import (
    DeadLetters,
    Groups,
    MessagePage,
    Posted,
    Routing,
    Team,
    errors,
)
from orchestrator.web.schemas_status import Status
from orchestrator.web.state import Console, console
from orchestrator.web.views import agent_view

__all__ = ["ENTRY_ID", "body_limits", "router"]

router = APIRouter(prefix="/api", tags=["api"])

# A Redis stream entry id, as dead letters and events are named.
ENTRY_ID = re.compile(r"[0-9]{1,20}-[0-9]{1,20}")

Running = Annotated[Console, Depends(console)]


class NewPost(BaseModel):
    """A message to post: its text and who says it."""

    text: str = Field(description="The message (Markdown); at most ARENA_MAX_MESSAGE_BYTES.")
    sender: str = Field(default=DEFAULT_SENDER, description="Who is speaking.")


def body_limits(max_message_bytes: int) -> tuple[BodyLimit, ...]:
    """A post's body: refused far beyond any acceptable message, before it is all read."""
    return (
        BodyLimit(
            method="POST",
            path=f"{router.prefix}/groups/{{group}}/messages",
            max_bytes=4 * max_message_bytes + 4096,  # JSON escapes, the sender
            what="text",
            note=f"a message is at most {max_message_bytes} bytes",
        ),
    )


@router.get("/groups", summary="Every group, newest activity first")
def groups(running: Running) -> Groups:
    """Each group with its message count, last activity and last sender."""
    return Groups.model_validate({"groups": running.rooms.groups()})


@router.get(
    "/groups/{group}/messages",
    summary="A room's messages, a page at a time",
    responses=errors(404, 422),
)
def messages(
    group: str,
    running: Running,
    before: Annotated[int | None, Query(ge=1, description="Messages before this seq")] = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
) -> MessagePage:
    """Up to ``limit`` messages before ``before`` (oldest first); ``before`` in the answer is
    the cursor of the page before this one (null: none)."""
    page = running.rooms.page(group, before=before, limit=limit)
    if page is None:
        raise HTTPException(404, f"no group {group!r}")
    return MessagePage.model_validate(page.as_dict())


@router.post(
    "/groups/{group}/messages",
    status_code=202,
    summary="Post a message, as `arena post` does",
    responses=errors(400, 413, 422),
)
def post(group: str, body: NewPost, running: Running) -> Posted:
    """Validate and post ``text`` to ``group``: the daemon answers it (follow the events)."""
    try:
        return Posted(id=running.client.post(group, body.text, body.sender))
    except ValidationError as exc:
        too_long = len(body.text.encode("utf-8")) > running.client.max_message_bytes
        raise HTTPException(413 if too_long else 400, str(exc)) from None


@router.get(
    "/route",
    summary="Which agents would answer a text, and why (`arena route`)",
    responses=errors(422, 503),
)
def route(text: Annotated[str, Query(min_length=1)], running: Running) -> Routing:
    """The routing dry run over the real rules."""
    if not running.agents:
        raise HTTPException(503, "no agents are defined")
    return Routing.model_validate(decide(text, running.agents).as_dict())


@router.get("/status", summary="What `arena status --json` prints")
async def status(running: Running) -> Status:
    """Streams, daemons, partitions, groups, agents, workers, jobs and storage."""
    report = await survey.status(running.settings)
    return Status.model_validate(report.as_dict())


@router.get(
    "/dead-letters",
    summary="Messages that were rejected or could not be answered",
    responses=errors(422),
)
def dead_letters(
    running: Running, limit: Annotated[int, Query(ge=1, le=10_000)] = 50
) -> DeadLetters:
    """The newest dead letters, oldest first (`arena dead-letters --json`)."""
    return DeadLetters.model_validate({"dead_letters": running.client.dead_letters(limit)})


@router.post(
    "/dead-letters/{dead_letter_id}/retry",
    status_code=202,
    summary="Post a dead letter's message again (`arena retry`)",
    responses=errors(400, 404, 422),
)
def retry(dead_letter_id: str, running: Running) -> Posted:
    """Posts the message again under a new id and removes the dead letter."""
    if not ENTRY_ID.fullmatch(dead_letter_id):
        raise HTTPException(
            400, f"id: not a message id: {dead_letter_id!r} (expected like 1700000000000-0)"
        )
    try:
        return Posted(id=running.client.retry(dead_letter_id))
    except ValidationError as exc:
        raise HTTPException(404 if "no dead letter" in exc.problem else 400, str(exc)) from None


@router.get("/agents", summary="The team")
def agents(running: Running) -> Team:
    """Each agent's id, name, role, colour and description."""
    return Team.model_validate(
        {
            "agents": [
                {**agent_view(a), "description": a.description, "default": a.default}
                for a in running.agents
            ]
        }
    )
