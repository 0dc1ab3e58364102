"""How much a request may send: :class:`BodyLimitMiddleware` holds every request's body to
its route's :class:`BodyLimit` (or the default one), whatever its framing.

A ``Content-Length`` over the limit is refused (413) before a byte of the body is read. A body
sent without one (``Transfer-Encoding: chunked``) is counted as it arrives: the request is
refused as soon as the count passes the limit, and nothing more of it is read, so the
console never holds more than the limit (plus one chunk) of a body it refuses.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from starlette.exceptions import HTTPException
from starlette.routing import compile_path
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["DEFAULT_BODY_BYTES", "BodyLimit", "BodyLimitMiddleware", "BodyTooLarge"]

_CLOSE = (("connection", "close"),)

DEFAULT_BODY_BYTES = 16 * 1024
"""The most a request may send to a route without a limit of its own (a login form)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class BodyLimit:
    """The most a route's request body may carry.

    ``path`` is the route's path as declared (``/api/agents/{agent_id}/memory-md``); ``what``
    names the body in the refusal (``text``); ``note`` ends it (default: the limit).
    """

    method: str
    path: str
    max_bytes: int
    what: str = "body"
    note: str = ""
    _pattern: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.max_bytes < 0:
            raise ValueError(f"max_bytes must be 0 or more, not {self.max_bytes}")
        object.__setattr__(self, "_pattern", compile_path(self.path)[0])

    def matches(self, method: str, path: str) -> bool:
        """Whether a request of ``method`` to ``path`` goes to this route."""
        return method == self.method and self._pattern.match(path) is not None

    def refusal(self, sent: int | None) -> str:
        """The one-line reason: ``sent`` bytes declared, or None when they were counted."""
        size = f"over {self.max_bytes}" if sent is None else str(sent)
        ending = self.note or f"at most {self.max_bytes} bytes"
        return f"{self.what}: the request is {size} bytes; {ending}"


class BodyTooLarge(HTTPException):
    """A request's body passed its limit while it was read (an HTTP 413)."""

    def __init__(self, detail: str) -> None:
        # The rest of the body is not read: the connection cannot carry another request.
        super().__init__(413, detail, headers=dict(_CLOSE))


class BodyLimitMiddleware:
    """Pure ASGI middleware: the first of ``limits`` that matches a request holds its body,
    else ``default_bytes``."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        limits: Sequence[BodyLimit] = (),
        default_bytes: int = DEFAULT_BODY_BYTES,
    ) -> None:
        self.app = app
        self.limits = tuple(limits)
        self.default = BodyLimit(method="*", path="/", max_bytes=default_bytes)

    def limit_for(self, method: str, path: str) -> BodyLimit:
        """The limit of a request of ``method`` to ``path``."""
        return next((lim for lim in self.limits if lim.matches(method, path)), self.default)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.limit_for(scope["method"], scope["path"])
        declared = _content_length(scope)
        if declared is not None and declared > limit.max_bytes:
            await _refuse(send, limit.refusal(declared))
            return
        received = 0
        started = False

        async def counted() -> Message:
            nonlocal received
            if received > limit.max_bytes:  # refused already: read nothing more
                raise BodyTooLarge(limit.refusal(None))
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit.max_bytes:
                    raise BodyTooLarge(limit.refusal(None))
            return message

        async def watched(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counted, watched)
        except BodyTooLarge as exc:
            # The app's error handler answers it as any HTTP error; this one answers when
            # nothing did (a route outside the app's handlers).
            if started:
                raise
            await _refuse(send, exc.detail)


def _content_length(scope: Scope) -> int | None:
    for name, value in scope["headers"]:
        if name.lower() == b"content-length":
            return int(value) if value.isdigit() else None
    return None


async def _refuse(send: Send, reason: str) -> None:
    payload = json.dumps({"error": reason}).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(payload)).encode()),
        *((k.encode(), v.encode()) for k, v in _CLOSE),
    ]
    await send({"type": "http.response.start", "status": 413, "headers": headers})
    await send({"type": "http.response.body", "body": payload})
