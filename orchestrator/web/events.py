"""``GET /api/groups/{group}/events``: a room's replies, notices and ``done`` items as
server-sent events, read from the group's outbound Redis stream (``XREAD BLOCK``).

Each event's ``id:`` is its stream entry id; a client that reconnects with ``Last-Event-ID``
(or ``?after=``) gets every item after it, none twice. Without one it starts at the stream's
end. A reply or notice is sent as the stored :class:`~orchestrator.web.views.Msg` (with why it
was written, its memory, usage and context); one not stored yet, from its outbound fields.
A ``: keep-alive`` comment goes out when nothing happened for ``keepalive_s``.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, HTTPException, Query
from fastapi.responses import StreamingResponse

from orchestrator.core.models import AgentSpec
from orchestrator.core.wire import Outbound, validate_group
from orchestrator.errors import BusError, ValidationError
from orchestrator.web.api import ENTRY_ID
from orchestrator.web.feeds import Render
from orchestrator.web.metrics import sse_clients
from orchestrator.web.rooms import Rooms
from orchestrator.web.schemas import errors
from orchestrator.web.state import Console, console
from orchestrator.web.views import from_outbound

__all__ = ["EventStream", "renderer", "router", "sse_events"]

logger = logging.getLogger(__name__)

router = APIRouter(prefix="/api", tags=["api"])


class EventStream(StreamingResponse):
    """Server-sent events (``/openapi.json`` says so: the route's media type is this one's)."""

    media_type = "text/event-stream"


@router.get(
    "/groups/{group}/events",
    summary="A room's replies, notices and done items, live (server-sent events)",
    response_class=EventStream,
    responses=errors(400, 404, 422, not_json=True),
)
async def events(
    group: str,
    running: Annotated[Console, Depends(console)],
    after: Annotated[str | None, Query(description="Resume after this event id")] = None,
    last_event_id: Annotated[str | None, Header()] = None,
) -> EventStream:
    """``event: reply|notice`` (``data``: a message) and ``event: done`` (``data``:
    ``in_reply_to`` and ``replies``); every event has ``id:``, its stream entry id."""
    try:
        validate_group(group)
    except ValidationError:
        raise HTTPException(404, f"no group {group!r}") from None
    resume = last_event_id or after
    if resume is not None and not ENTRY_ID.fullmatch(resume):
        raise HTTPException(400, f"not an event id: {resume!r} (expected like 1700000000000-0)")
    start = resume or await _stream_end(running, group)
    return EventStream(
        sse_events(running, group, start),
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )


async def _stream_end(running: Console, group: str) -> str:
    try:
        return await running.feeds.stream_end(group)
    except BusError as exc:
        raise BusError(f"cannot read the outbound stream: {exc.kind}") from None


async def sse_events(running: Console, group: str, after: str) -> AsyncIterator[str]:
    """The group's outbound items after entry ``after``, as server-sent event blocks (read by
    the room's shared reader, :mod:`orchestrator.web.feeds`)."""
    with sse_clients.watching():
        yield ": connected\n\n"
        try:
            async for block in running.feeds.watch(group, after):
                yield block
        except BusError as exc:
            logger.warning("events of group %s stopped: %s", group, exc.kind)


def renderer(rooms: Rooms, agents: tuple[AgentSpec, ...]) -> Render:
    """How an outbound item becomes its event block: a reply or notice as the stored message
    (one not stored yet from its outbound fields), ``done`` as its counts."""

    async def render(entry_id: str, item: Outbound) -> str:
        if item.type == "done":
            data: dict[str, Any] = {"in_reply_to": item.in_reply_to, "replies": item.replies}
        else:
            stored = await asyncio.to_thread(rooms.message, item.id)
            msg = stored if stored is not None else from_outbound(item, agents)
            data = msg.as_dict()
        payload = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
        return f"event: {item.type}\nid: {entry_id}\ndata: {payload}\n\n"

    return render
