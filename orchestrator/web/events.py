"""``GET /api/groups/{group}/events``: a room's replies, notices and ``done`` items, and the
steps of its runs, as server-sent events, read from the group's outbound Redis stream and its
steps stream (one ``XREAD BLOCK`` of both).

Each event's ``id:`` says where the stream is (:mod:`orchestrator.web.cursor`: the outbound
entry id, with the last step's once one was sent); a client that reconnects with
``Last-Event-ID`` (or ``?after=``) gets every item after it, none twice. Without one it starts
at the streams' end, after the steps so far of the room's runs still going (so a room opened
mid-run shows them). A reply or notice is sent as the stored :class:`~orchestrator.web.views.Msg`
(with why it was written, its memory, usage, context and run); one not stored yet, from its
outbound fields. A ``: keep-alive`` comment goes out when nothing happened for ``keepalive_s``.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, HTTPException, Query
from fastapi.responses import StreamingResponse

from orchestrator.core.coding import Step
from orchestrator.core.models import AgentSpec
from orchestrator.core.wire import Outbound, validate_group
from orchestrator.errors import BusError, ValidationError
from orchestrator.memory.runs import RunStore
from orchestrator.web.cursor import EVENT_ID
from orchestrator.web.feeds import Render, step_event
from orchestrator.web.metrics import sse_clients
from orchestrator.web.rooms import Rooms
from orchestrator.web.schemas import errors
from orchestrator.web.state import Console, console
from orchestrator.web.views import from_outbound

__all__ = ["EventStream", "renderer", "router", "sse_events"]

logger = logging.getLogger(__name__)

router = APIRouter(prefix="/api", tags=["api"])

_RUNS_SHOWN = 20  # a room opened mid-run is shown the steps of its newest runs still going


class EventStream(StreamingResponse):
    """Server-sent events (``/openapi.json`` says so: the route's media type is this one's)."""

    media_type = "text/event-stream"


@router.get(
    "/groups/{group}/events",
    summary="A room's replies, notices, done items and run steps, live (server-sent events)",
    response_class=EventStream,
    responses=errors(400, 404, 422, not_json=True),
)
async def events(
    group: str,
    running: Annotated[Console, Depends(console)],
    after: Annotated[str | None, Query(description="Resume after this event id")] = None,
    last_event_id: Annotated[str | None, Header()] = None,
) -> EventStream:
    """``event: reply|notice`` (``data``: a message), ``event: done`` (``data``:
    ``in_reply_to`` and ``replies``) and ``event: step`` (``data``: a run's step: ``run``,
    ``n``, ``at``, ``kind``, ``line``, ``tool``, ``is_error``); every event has ``id:``."""
    try:
        validate_group(group)
    except ValidationError:
        raise HTTPException(404, f"no group {group!r}") from None
    resume = last_event_id or after
    if resume is not None and not EVENT_ID.fullmatch(resume):
        raise HTTPException(400, f"not an event id: {resume!r} (expected like 1700000000000-0)")
    start = resume or await _stream_end(running, group)
    replay = [] if resume else await asyncio.to_thread(_running_steps, running, group)
    return EventStream(
        sse_events(running, group, start, replay),
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )


def _running_steps(running: Console, group: str) -> list[Step]:
    """The steps so far of the group's runs still going (blocking: SQL)."""
    runs = RunStore(running.wiring.engine)
    going = [run for run in reversed(runs.recent(group, _RUNS_SHOWN)) if not run.ended]
    return [step.as_step(run.id) for run in going for step in runs.steps(run.id)]


async def _stream_end(running: Console, group: str) -> str:
    try:
        return await running.feeds.stream_end(group)
    except BusError as exc:
        raise BusError(f"cannot read the outbound stream: {exc.kind}") from None


async def sse_events(
    running: Console, group: str, after: str, replay: list[Step] | None = None
) -> AsyncIterator[str]:
    """The group's outbound items and steps after event id ``after``, as server-sent event
    blocks (read by the room's shared reader, :mod:`orchestrator.web.feeds`), after the
    ``replay`` steps (given the id ``after``)."""
    with sse_clients.watching():
        yield ": connected\n\n"
        for step in replay or ():
            yield step_event(after, step)
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
