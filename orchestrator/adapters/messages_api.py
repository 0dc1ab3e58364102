"""A local Messages API for the ``claude`` CLI: the model behind a Claude Code run without a key.

``MessagesApiServer`` is a real HTTP/1.1 server (keep-alive, Content-Length or chunked request
bodies) on 127.0.0.1 that speaks enough of Anthropic's Messages API for the CLI pointed at it
with ``ANTHROPIC_BASE_URL``. Each answer comes from a responder, a function from the request
body to the model's next :class:`~orchestrator.offline.coder.Turn` (by default the offline
coding agent, :func:`~orchestrator.offline.coder.next_turn`)::

    with MessagesApiServer() as server:
        env = {"ANTHROPIC_BASE_URL": server.base_url, "ANTHROPIC_API_KEY": "offline", ...}

What it answers:

- ``POST /v1/messages`` (the CLI adds ``?beta=true``): with ``"stream": true`` the API's
  server-sent events, otherwise the message as one JSON body (their shapes, and usage counted
  in words, in :mod:`orchestrator.adapters.messages_wire`);
- ``POST /v1/messages/count_tokens``: the input count;
- ``HEAD`` on any path (the CLI's connectivity check, ``HEAD /api/hello``, when its
  non-essential traffic is not turned off): 200, no body;
- anything else: 404 with the API's error body; a body that is not a JSON object with
  ``model`` and ``messages``: 400; a responder that fails: 500, with ``x-should-retry: false``
  (the same request would fail the same way).

It binds 127.0.0.1 on a free port (or the one given) and runs its own event loop in a
background thread, so a synchronous caller can use it; it keeps every request it answered
(:attr:`MessagesApiServer.requests`) for tests.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import threading
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Self

from orchestrator.adapters.messages_wire import error_body, input_words, message_body, sse_events
from orchestrator.offline.coder import Turn, next_turn

__all__ = ["Answered", "Handler", "MessagesApiServer", "Responder", "read_request", "serve_http"]

logger = logging.getLogger(__name__)

Responder = Callable[[Mapping[str, Any]], Turn]

_READ_LIMIT = 64 * 1024 * 1024  # the CLI's requests carry its whole system prompt and tools
_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 500: "Internal Server Error"}


@dataclass(frozen=True, slots=True, kw_only=True)
class Answered:
    """One request the server answered: its line, headers (names lower-cased), JSON body."""

    method: str
    path: str
    headers: Mapping[str, str]
    body: Mapping[str, Any] | None
    status: int


@dataclass(frozen=True, slots=True, kw_only=True)
class _Reply:
    status: int
    body: bytes = b""
    events: tuple[bytes, ...] | None = None  # server-sent events, instead of a JSON body


class MessagesApiServer:
    """The Messages API on 127.0.0.1, answered by ``responder``, in a background thread."""

    def __init__(self, responder: Responder = next_turn, *, port: int = 0) -> None:
        self._responder = responder
        self._port = port
        self._lock = threading.Lock()
        self._answered: list[Answered] = []
        self._ids = itertools.count(1)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._failure: BaseException | None = None

    @property
    def port(self) -> int:
        """The port it listens on (known once started)."""
        return self._port

    @property
    def base_url(self) -> str:
        """What to give the CLI as ``ANTHROPIC_BASE_URL``: ``http://127.0.0.1:<port>``."""
        return f"http://127.0.0.1:{self._port}"

    @property
    def requests(self) -> list[Answered]:
        """The requests answered so far, oldest first (a copy)."""
        with self._lock:
            return list(self._answered)

    def start(self) -> Self:
        """Start serving; returns once the server accepts connections.

        Raises:
            OSError: The port could not be bound.
        """
        if self._thread is not None:
            raise RuntimeError("the Messages API server is already running")
        self._ready.clear()
        self._thread = threading.Thread(target=self._run, name="messages-api", daemon=True)
        self._thread.start()
        self._ready.wait()
        failure, self._failure = self._failure, None
        if failure is not None:
            self._thread.join()
            self._thread = None
            raise failure
        return self

    def close(self) -> None:
        """Stop serving, drop open connections and wait for the thread to end."""
        if self._thread is None:
            return
        if self._loop is not None and self._stop is not None:
            with contextlib.suppress(RuntimeError):  # the loop has already ended
                self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join()
        self._thread = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _run(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as exc:  # start() re-raises a failure to bind
            self._failure = exc
            logger.debug("the Messages API server stopped on an error", exc_info=True)
        finally:
            self._ready.set()

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()

        def bound(port: int) -> None:
            self._port = port
            logger.debug("Messages API listening on %s", self.base_url)
            self._ready.set()

        await serve_http(self._connection, self._port, _READ_LIMIT, bound, self._stop)

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while (request := await read_request(reader)) is not None:
                method, path, headers, body = request
                keep_alive = headers.get("connection", "").lower() != "close"
                reply, parsed = self._reply(method, path, body)
                with self._lock:
                    self._answered.append(
                        Answered(
                            method=method,
                            path=path,
                            headers=headers,
                            body=parsed,
                            status=reply.status,
                        )
                    )
                await _send(writer, reply, keep_alive=keep_alive)
                if not keep_alive:
                    break
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        except ValueError:  # not HTTP
            with contextlib.suppress(ConnectionError):
                writer.write(_head(400, "application/json", keep_alive=False, length=0))
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    def _reply(self, method: str, path: str, body: bytes) -> tuple[_Reply, dict[str, Any] | None]:
        route = path.split("?", 1)[0]
        if method == "HEAD":
            return _Reply(status=200), None
        if method != "POST" or route not in ("/v1/messages", "/v1/messages/count_tokens"):
            return _error(404, f"no route for {method} {route}"), None
        try:
            request = json.loads(body)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            return _error(400, f"the body is not JSON: {exc}"), None
        if not isinstance(request, dict) or not isinstance(request.get("messages"), list):
            return _error(400, "messages: a list is required"), None
        if route.endswith("/count_tokens"):
            return _Reply(
                status=200, body=json.dumps({"input_tokens": input_words(request)}).encode()
            ), request
        if "model" not in request:
            return _error(400, "model: Field required"), request
        try:
            turn = self._responder(request)
        except Exception as exc:  # a responder's bug answers as a server error would
            logger.exception("the Messages API responder failed")
            return _error(500, f"the responder failed: {exc!r}"), request
        message = message_body(request, turn, message_id=f"msg_offline_{next(self._ids):06d}")
        logger.debug(
            "answered %s: %s, %d words in, %d out",
            route,
            turn.stop_reason,
            message["usage"]["input_tokens"],
            message["usage"]["output_tokens"],
        )
        if request.get("stream"):
            return _Reply(status=200, events=tuple(sse_events(message))), request
        return _Reply(status=200, body=json.dumps(message).encode()), request


# --- HTTP/1.1 --------------------------------------------------------------------------


Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def serve_http(
    handle: Handler, port: int, limit: int, bound: Callable[[int], None], stop: asyncio.Event
) -> None:
    """Serve connections on 127.0.0.1:``port`` (0: a free one) with ``handle`` until ``stop``;
    ``bound`` is told the port once it listens. The tests' fake Messages API serves with it too.
    """
    connections: dict[asyncio.Task[Any], asyncio.StreamWriter] = {}

    async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        connections[task] = writer
        try:
            await handle(reader, writer)
        finally:
            del connections[task]

    server = await asyncio.start_server(on_connect, "127.0.0.1", port, limit=limit)
    bound(server.sockets[0].getsockname()[1])
    await stop.wait()
    # Closing the sockets ends the connections' tasks; cancelling them instead makes Python
    # 3.11's stream callback report every one as an error.
    server.close()
    for writer in connections.values():
        writer.transport.abort()
    if connections:
        await asyncio.wait(list(connections))
    await server.wait_closed()


async def read_request(
    reader: asyncio.StreamReader,
) -> tuple[str, str, dict[str, str], bytes] | None:
    """One HTTP/1.1 request (its body by ``Content-Length`` or chunked): method, path, headers
    (names in lower case) and body; None when the client closed the connection between
    requests. The tests' fake Messages API reads its requests with it too."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as exc:
        if exc.partial.strip():
            raise
        return None
    lines = head.decode("latin-1").split("\r\n")
    method, path, _version = lines[0].split(" ", 2)
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if line:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
    if headers.get("transfer-encoding", "").lower() == "chunked":
        return method, path, headers, await _read_chunked(reader)
    return method, path, headers, await reader.readexactly(int(headers.get("content-length", "0")))


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    chunks: list[bytes] = []
    while size := int((await reader.readuntil(b"\r\n")).split(b";", 1)[0].strip(), 16):
        chunks.append(await reader.readexactly(size))
        await reader.readexactly(2)
    while (await reader.readuntil(b"\r\n")) != b"\r\n":  # trailers
        pass
    return b"".join(chunks)


async def _send(writer: asyncio.StreamWriter, reply: _Reply, *, keep_alive: bool) -> None:
    if reply.events is None:
        head = _head(
            reply.status, "application/json", keep_alive=keep_alive, length=len(reply.body)
        )
        writer.write(head + reply.body)
        await writer.drain()
        return
    writer.write(_head(reply.status, "text/event-stream", keep_alive=keep_alive, length=None))
    for event in reply.events:
        writer.write(b"%x\r\n%s\r\n" % (len(event), event))
        await writer.drain()
    writer.write(b"0\r\n\r\n")
    await writer.drain()


def _error(status: int, message: str) -> _Reply:
    return _Reply(status=status, body=error_body(status, message))


def _head(status: int, content_type: str, *, keep_alive: bool, length: int | None) -> bytes:
    lines = [
        f"HTTP/1.1 {status} {_REASONS.get(status, 'Unknown')}",
        f"content-type: {content_type}",
        f"connection: {'keep-alive' if keep_alive else 'close'}",
        "request-id: req_offline",
        "transfer-encoding: chunked" if length is None else f"content-length: {length}",
    ]
    if length is None:
        lines.append("cache-control: no-cache")
    if status >= 500:
        lines.append("x-should-retry: false")  # the same request would fail the same way
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
