"""A local stand-in for the Anthropic Messages API, for tests and benchmarks.

``FakeMessagesServer`` is a real HTTP/1.1 server (keep-alive, Content-Length and chunked
request bodies) on 127.0.0.1 that answers ``POST /v1/messages`` with the JSON the real API
sends. It runs its own event loop in a background thread, so sync and async clients alike can
use it, and many slow requests wait concurrently.

    with FakeMessagesServer() as srv:
        srv.script(status=429)          # the next request is rate limited
        srv.script(reply="hello")       # the one after answers "hello"
        client = AsyncAnthropic(api_key="test", base_url=srv.base_url)

A tool step is scripted as its content blocks (``srv.script(content=[text("..."),
tool_use("memory_search", {"query": "db"})], stop_reason="tool_use")``); as the real API
does, the server refuses (400) a request whose ``tool_use`` blocks are not each answered by a
``tool_result`` in the next turn, or that has them without ``tools``.

Unscripted requests get ``srv.reply_fn(request_json)``, by default
``"fake reply to: <the last user text, first 80 characters>"``. Usage counts words; the
system prompt counts as cache creation the first time it is seen with ``cache_control`` and
as a cache read afterwards.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import socket
import threading
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

from orchestrator.adapters.messages_api import read_request, serve_http

if TYPE_CHECKING:
    from orchestrator.adapters.llm import AnthropicProvider

__all__ = [
    "FakeMessagesServer",
    "Outcome",
    "anthropic_provider",
    "dead_base_url",
    "default_reply",
    "text_block",
    "tool_use",
]

ReplyFn = Callable[[dict[str, Any]], str]

_REASONS = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    408: "Request Timeout",
    409: "Conflict",
    413: "Content Too Large",
    429: "Too Many Requests",
    500: "Internal Server Error",
    502: "Bad Gateway",
    503: "Service Unavailable",
    504: "Gateway Timeout",
    529: "Site Overloaded",
}
_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    408: "timeout_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}
_STREAM_LIMIT = 64 * 1024 * 1024


def default_reply(request: dict[str, Any]) -> str:
    """``"fake reply to: <last user text[:80]>"``, the default answer."""
    return f"fake reply to: {_last_user_text(request)[:80]}"


def text_block(text: str) -> dict[str, Any]:
    """A text content block."""
    return {"type": "text", "text": text}


def tool_use(name: str, data: dict[str, Any], call_id: str = "toolu_01") -> dict[str, Any]:
    """A ``tool_use`` content block, as the model sends one."""
    return {"type": "tool_use", "id": call_id, "name": name, "input": data}


def anthropic_provider(**options: Any) -> AnthropicProvider:
    """``AnthropicProvider(**options)``, the real provider. The model SDK is imported on the
    first call, not with the test file: it takes over a second of CPU, and every test process
    imports every test file to collect it, most of them never to run a test that needs it."""
    from orchestrator.adapters.llm import AnthropicProvider

    return AnthropicProvider(**options)


def dead_base_url() -> str:
    """An http URL on a 127.0.0.1 port where nothing listens (connections are refused)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Outcome:
    """How the server answers one request; see ``FakeMessagesServer.script``."""

    status: int = 200
    reply: str | None = None
    content: list[dict[str, Any]] | None = None
    usage: Mapping[str, int | None] | None = None
    stop_reason: str | None = "end_turn"
    error_message: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    latency_s: float | None = None
    drop: bool = False


class FakeMessagesServer:
    """A scriptable Messages API server on 127.0.0.1, running in a background thread."""

    def __init__(self, reply_fn: ReplyFn = default_reply, *, latency_s: float = 0.0) -> None:
        self.reply_fn = reply_fn
        self.latency_s = latency_s
        self._defaults = (reply_fn, latency_s)
        self._lock = threading.Lock()
        self._requests: list[dict[str, Any]] = []
        self._script: deque[Outcome] = deque()
        self._cached_systems: set[str] = set()
        self._ids = itertools.count(1)
        self._inflight = 0
        self._max_inflight = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._failure: BaseException | None = None
        self.port = 0

    # --- control, from any thread -------------------------------------------------------

    @property
    def base_url(self) -> str:
        """Where to point the SDK: ``http://127.0.0.1:<port>``."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def requests(self) -> list[dict[str, Any]]:
        """The JSON bodies received on ``/v1/messages`` so far, oldest first (a copy)."""
        with self._lock:
            return list(self._requests)

    @property
    def inflight(self) -> int:
        """Requests on ``/v1/messages`` received but not yet answered."""
        with self._lock:
            return self._inflight

    @property
    def max_inflight(self) -> int:
        """The most requests in flight at once since the start (or the last ``reset``)."""
        with self._lock:
            return self._max_inflight

    def script(
        self,
        reply: str | None = None,
        *,
        status: int = 200,
        times: int = 1,
        content: list[dict[str, Any]] | None = None,
        usage: Mapping[str, int | None] | None = None,
        stop_reason: str | None = "end_turn",
        error_message: str | None = None,
        headers: Mapping[str, str] | None = None,
        latency_s: float | None = None,
        drop: bool = False,
    ) -> None:
        """Queue how the next ``times`` requests are answered, before unscripted ones.

        Args:
            reply: The text of a 200 answer; None means ``reply_fn``.
            status: HTTP status; anything but 200 sends an Anthropic error body.
            times: How many requests this outcome answers.
            content: Raw content blocks for a 200 answer, instead of one text block.
            usage: Usage fields replacing the computed ones (None values are sent as null).
            stop_reason: The stop reason of a 200 answer.
            error_message: ``error.message`` of an error answer.
            headers: Extra response headers. A 429 sends ``retry-after: 0`` unless given.
            latency_s: Delay before answering, instead of ``latency_s``.
            drop: Close the connection without answering.
        """
        extra = dict(headers or {})
        if status == 429:
            extra.setdefault("retry-after", "0")
        outcome = Outcome(
            status=status,
            reply=reply,
            content=content,
            usage=usage,
            stop_reason=stop_reason,
            error_message=error_message,
            headers=extra,
            latency_s=latency_s,
            drop=drop,
        )
        with self._lock:
            self._script.extend([outcome] * times)

    def reset(self) -> None:
        """Forget requests, scripted outcomes and the prompt cache; restore the first settings."""
        with self._lock:
            self._requests.clear()
            self._script.clear()
            self._cached_systems.clear()
            self._max_inflight = self._inflight
        self.reply_fn, self.latency_s = self._defaults

    # --- lifecycle --------------------------------------------------------------------

    def start(self) -> Self:
        """Start serving on a free port; returns once the server accepts connections."""
        if self._thread is not None:
            raise RuntimeError("the server is already running")
        self._ready.clear()
        self._thread = threading.Thread(target=self._run, name="fake-messages-api", daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._failure is not None:
            self._thread.join()
            self._thread = None
            raise RuntimeError("the fake Messages API did not start") from self._failure
        return self

    def stop(self) -> None:
        """Stop serving, drop open connections and wait for the thread to end."""
        if self._thread is None:
            return
        if self._loop is not None and self._stop is not None:
            with contextlib.suppress(RuntimeError):  # the loop has already ended
                self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join()
        self._thread = None
        if self._failure is not None:
            raise RuntimeError("the fake Messages API failed") from self._failure

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _run(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as exc:  # reported to start(), which re-raises it
            self._failure = exc
        finally:
            self._ready.set()

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()

        def bound(port: int) -> None:
            self.port = port
            self._ready.set()

        await serve_http(self._connection, 0, _STREAM_LIMIT, bound, self._stop)

    # --- HTTP -------------------------------------------------------------------------

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                request = await read_request(reader)
                if request is None:
                    break
                method, path, headers, body = request
                keep_alive = headers.get("connection", "").lower() != "close"
                answer = await self._answer(method, path, body)
                if answer is None:  # a scripted drop
                    break
                status, extra, payload = answer
                writer.write(_response_bytes(status, extra, payload, keep_alive=keep_alive))
                await writer.drain()
                if not keep_alive:
                    break
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        except ValueError:  # a malformed request
            with contextlib.suppress(ConnectionError):
                writer.write(
                    _response_bytes(400, {}, _error_body(400, "bad HTTP"), keep_alive=False)
                )
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    async def _answer(
        self, method: str, path: str, body: bytes
    ) -> tuple[int, Mapping[str, str], bytes] | None:
        if method != "POST" or path.split("?", 1)[0] != "/v1/messages":
            return 404, {}, _error_body(404, f"no route for {method} {path}")
        try:
            request_json = json.loads(body)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            return 400, {}, _error_body(400, f"body is not JSON: {exc}")
        if not isinstance(request_json, dict):
            return 400, {}, _error_body(400, "body is not a JSON object")
        with self._lock:
            self._requests.append(request_json)
            outcome = self._script.popleft() if self._script else Outcome()
            self._inflight += 1
            self._max_inflight = max(self._max_inflight, self._inflight)
        try:
            return await self._outcome(request_json, outcome)
        finally:
            with self._lock:
                self._inflight -= 1

    async def _outcome(
        self, request_json: dict[str, Any], outcome: Outcome
    ) -> tuple[int, Mapping[str, str], bytes] | None:
        latency_s = self.latency_s if outcome.latency_s is None else outcome.latency_s
        if latency_s > 0:
            await self._pause(latency_s)
        if outcome.drop or self._stopping():
            return None
        if outcome.status != 200:
            message = outcome.error_message or _REASONS.get(outcome.status, "error")
            return outcome.status, outcome.headers, _error_body(outcome.status, message)
        problem = _missing_field(request_json)
        if problem:
            return 400, {}, _error_body(400, problem)
        try:
            message_json = self._message(request_json, outcome)
        except Exception as exc:  # a failing reply_fn becomes a 500, as a server bug would
            return 500, {}, _error_body(500, f"reply function failed: {exc!r}")
        return 200, outcome.headers, json.dumps(message_json).encode()

    async def _pause(self, seconds: float) -> None:
        """Sleep, but wake up when the server stops."""
        assert self._stop is not None
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await self._stop.wait()

    def _stopping(self) -> bool:
        return self._stop is not None and self._stop.is_set()

    def _message(self, request: dict[str, Any], outcome: Outcome) -> dict[str, Any]:
        if outcome.content is not None:
            content = outcome.content
        else:
            text = outcome.reply if outcome.reply is not None else self.reply_fn(request)
            content = [{"type": "text", "text": text}]
        output_text = " ".join(str(block.get("text", "")) for block in content)
        usage: dict[str, int | None] = {
            **self._input_usage(request),
            "output_tokens": _words(output_text),
        }
        usage.update(outcome.usage or {})
        return {
            "id": f"msg_fake_{next(self._ids):06d}",
            "type": "message",
            "role": "assistant",
            "model": request["model"],
            "content": content,
            "stop_reason": outcome.stop_reason,
            "stop_sequence": None,
            "usage": usage,
        }

    def _input_usage(self, request: dict[str, Any]) -> dict[str, int | None]:
        """Words in, with a cached system prompt counted as cache creation, then cache reads."""
        system = request.get("system", "")
        cached_words = 0
        seen = False
        if isinstance(system, list):
            marked = " ".join(b.get("text", "") for b in system if b.get("cache_control"))
            cached_words = _words(marked)
            with self._lock:
                seen = marked in self._cached_systems
                self._cached_systems.add(marked)
        total = _words(_system_text(system)) + sum(
            _words(_content_text(m.get("content", ""))) for m in request.get("messages", [])
        )
        return {
            "input_tokens": total - cached_words,
            "cache_creation_input_tokens": 0 if seen else cached_words,
            "cache_read_input_tokens": cached_words if seen else 0,
        }


# --- HTTP/1.1 wire format -----------------------------------------------------------------


def _response_bytes(
    status: int, headers: Mapping[str, str], body: bytes, *, keep_alive: bool
) -> bytes:
    lines = [
        f"HTTP/1.1 {status} {_REASONS.get(status, 'Unknown')}",
        "content-type: application/json",
        f"content-length: {len(body)}",
        f"connection: {'keep-alive' if keep_alive else 'close'}",
        "request-id: req_fake",
        *(f"{name}: {value}" for name, value in headers.items()),
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def _error_body(status: int, message: str) -> bytes:
    error_type = _ERROR_TYPES.get(status, "api_error")
    body = {
        "type": "error",
        "error": {"type": error_type, "message": message},
        "request_id": "req_fake",
    }
    return json.dumps(body).encode()


# --- request content --------------------------------------------------------------------


def _missing_field(request: dict[str, Any]) -> str:
    for name in ("model", "max_tokens", "messages"):
        if name not in request:
            return f"{name}: Field required"
    if request.get("stream"):
        return "stream: the fake server only answers non-streaming requests"
    return _tool_problem(request)


def _tool_problem(request: dict[str, Any]) -> str:
    """What the real API would refuse about the request's tool blocks, if anything."""
    messages = request["messages"]
    for index, message in enumerate(messages):
        content = message.get("content")
        if message.get("role") != "assistant" or not isinstance(content, list):
            continue
        ids = {b["id"] for b in content if isinstance(b, dict) and b.get("type") == "tool_use"}
        if not ids:
            continue
        if not request.get("tools"):
            return "tools: required when messages contain tool_use blocks"
        after = messages[index + 1]["content"] if index + 1 < len(messages) else []
        answered = {
            b.get("tool_use_id")
            for b in after
            if isinstance(after, list) and isinstance(b, dict) and b.get("type") == "tool_result"
        }
        if answered != ids:
            return f"messages.{index + 1}: tool_use ids without tool_result blocks"
    return ""


def _words(text: str) -> int:
    return len(text.split())


def _system_text(system: Any) -> str:
    if isinstance(system, str):
        return system
    return " ".join(str(block.get("text", "")) for block in system)


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return " ".join(
        str(b.get("text", b.get("content", ""))) for b in content if isinstance(b, dict)
    )


def _last_user_text(request: dict[str, Any]) -> str:
    for message in reversed(request.get("messages", [])):
        if isinstance(message, dict) and message.get("role") == "user":
            return _content_text(message.get("content", ""))
    return ""
