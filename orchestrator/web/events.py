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
from typing import Annotated, Any, cast

from fastapi import APIRouter, Depends, Header, HTTPException, Query
from fastapi.responses import StreamingResponse
from redis.exceptions import RedisError

from orchestrator.core.wire import Outbound, decode_fields, outbox_stream, validate_group
from orchestrator.errors import BusError, ValidationError
from orchestrator.web.api import ENTRY_ID
from orchestrator.web.metrics import sse_clients
from orchestrator.web.state import Console, console
from orchestrator.web.views import from_outbound

__all__ = ["router", "sse_events"]

logger = logging.getLogger(__name__)

router = APIRouter(prefix="/api", tags=["api"])

_BATCH = 100  # entries per XREAD


@router.get(
    "/groups/{group}/events",
    summary="A room's replies, notices and done items, live (server-sent events)",
    response_class=StreamingResponse,
)
async def events(
    group: str,
    running: Annotated[Console, Depends(console)],
    after: Annotated[str | None, Query(description="Resume after this event id")] = None,
    last_event_id: Annotated[str | None, Header()] = None,
) -> StreamingResponse:
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
    return StreamingResponse(
        sse_events(running, group, start),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )


async def _stream_end(running: Console, group: str) -> str:
    try:
        newest = await running.redis.xrevrange(outbox_stream(group), count=1)
    except RedisError as exc:
        raise BusError(f"cannot read the outbound stream: {exc.__class__.__name__}") from None
    return _text(newest[0][0]) if newest else "0-0"


def _text(value: bytes | str | None) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


async def sse_events(running: Console, group: str, after: str) -> AsyncIterator[str]:
    """The group's outbound items after entry ``after``, as server-sent event blocks."""
    stream = outbox_stream(group)
    block_ms = max(1, int(running.keepalive_s * 1000))
    with sse_clients.watching():
        yield ": connected\n\n"
        while True:
            try:
                response = await running.redis.xread({stream: after}, count=_BATCH, block=block_ms)
            except RedisError as exc:
                logger.warning("events of group %s stopped: %s", group, exc.__class__.__name__)
                return
            if not response:
                yield ": keep-alive\n\n"
                continue
            for _name, items in cast(list[Any], response):
                for entry_id, fields in items:
                    after = _text(entry_id)
                    item = Outbound.from_fields(decode_fields(fields))
                    yield await _event(running, after, item)


async def _event(running: Console, entry_id: str, item: Outbound) -> str:
    if item.type == "done":
        data: dict[str, Any] = {"in_reply_to": item.in_reply_to, "replies": item.replies}
    else:
        stored = await asyncio.to_thread(running.rooms.message, item.id)
        msg = stored if stored is not None else from_outbound(item, running.agents)
        data = msg.as_dict()
    payload = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    return f"event: {item.type}\nid: {entry_id}\ndata: {payload}\n\n"
